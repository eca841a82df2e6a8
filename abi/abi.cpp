// abi.cpp - the extern "C" functions of minitorch.h: validate handles and
// arguments, call autograd/, and turn every exception into a status plus a
// thread-local message prefixed with the function's name.
//
// Contents: error plumbing | basics | raw memory | tensors | autograd | ops | optimizers
#include "minitorch.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_set>
#include <string>

#include "abi/entry.h"
#include "autograd/ops.h"
#include "autograd/optim.h"

using namespace mt;

namespace {
thread_local std::string t_last_error;
}  // namespace

namespace mt {
void set_last_error(const std::string &msg) noexcept {
  try { t_last_error = msg; } catch (...) {}
}
}  // namespace mt

using namespace mt::abi;

namespace {

bool cuda_usable() { return cuda_device_count() > 0; }

Backend &raw_backend(const char *what) {
  MT_CHECK(cuda_usable(), DEVICE, "%s needs a CUDA device, and none is usable (%s)", what,
#ifdef MT_HAVE_CUDA
           "no GPU found"
#else
           "CPU-only build"
#endif
  );
  return backend_for(Device::CUDA);
}

}  // namespace

extern "C" {

// ---------------------------------------------------------------- basics
MT_API int64_t mt_abi_version(void) { return MT_ABI_VERSION; }

MT_API const char *mt_version(void) {
#define MT_STR2(x) #x
#define MT_STR(x) MT_STR2(x)
  return MT_STR(MT_VERSION_MAJOR) "." MT_STR(MT_VERSION_MINOR) "." MT_STR(MT_VERSION_PATCH);
}

MT_API const char *mt_last_error(void) { return t_last_error.c_str(); }

MT_API const char *mt_status_string(mt_status s) {
  switch (s) {
    case MT_OK: return "MT_OK";
    case MT_ERR_INVALID_ARGUMENT: return "MT_ERR_INVALID_ARGUMENT";
    case MT_ERR_SHAPE: return "MT_ERR_SHAPE";
    case MT_ERR_DTYPE: return "MT_ERR_DTYPE";
    case MT_ERR_DEVICE: return "MT_ERR_DEVICE";
    case MT_ERR_OUT_OF_MEMORY: return "MT_ERR_OUT_OF_MEMORY";
    case MT_ERR_CUDA: return "MT_ERR_CUDA";
    case MT_ERR_IO: return "MT_ERR_IO";
    case MT_ERR_STATE: return "MT_ERR_STATE";
    case MT_ERR_UNSUPPORTED: return "MT_ERR_UNSUPPORTED";
    case MT_ERR_INTERNAL: return "MT_ERR_INTERNAL";
  }
  return "MT_ERR_UNKNOWN";
}

MT_API const char *mt_dtype_name(mt_dtype d) {
  return (int)d >= 0 && (int)d < kNumDTypes ? dtype_name((DType)d) : nullptr;
}

MT_API int64_t mt_dtype_size(mt_dtype d) { return (int)d >= 0 && (int)d < kNumDTypes ? dtype_size((DType)d) : 0; }

MT_API int64_t mt_cuda_device_count(void) { return cuda_device_count(); }

MT_API mt_device mt_default_device(void) {
  const char *env = std::getenv("MT_DEVICE");
  if (env && std::strcmp(env, "cpu") == 0) return MT_CPU;
  return cuda_usable() ? MT_CUDA : MT_CPU;
}

MT_API const char *mt_device_name(mt_device device) {
  if (device == MT_CUDA && cuda_usable()) {
    try {
      return backend_for(Device::CUDA).name();
    } catch (...) {
      return "cuda (unavailable)";
    }
  }
  return device == MT_CUDA ? "cuda (unavailable)" : "cpu";
}

// ---------------------------------------------------------------- raw memory
MT_API mt_status mt_malloc(void **out, int64_t nbytes, mt_device device) {
  if (out) *out = nullptr;
  return guard("mt_malloc", [&] {
    check_out(out);
    MT_CHECK(nbytes >= 0, INVALID_ARGUMENT, "nbytes must be >= 0, got %lld", (long long)nbytes);
    *out = backend_for(device_arg(device)).alloc(nbytes);
  });
}

MT_API mt_status mt_free(void *ptr, mt_device device) {
  return guard("mt_free", [&] {
    Device d = device_arg(device);
    if (ptr) backend_for(d).free(ptr);
  });
}

MT_API mt_status mt_memcpy_h2d(void *dst, const void *src, int64_t nbytes) {
  return guard("mt_memcpy_h2d", [&] {
    MT_CHECK(nbytes >= 0, INVALID_ARGUMENT, "nbytes must be >= 0, got %lld", (long long)nbytes);
    MT_CHECK(nbytes == 0 || (dst && src), INVALID_ARGUMENT, "dst (%p) or src (%p) is NULL", dst, src);
    raw_backend("mt_memcpy_h2d").copy_from_host(dst, src, nbytes);
  });
}

MT_API mt_status mt_memcpy_d2h(void *dst, const void *src, int64_t nbytes) {
  return guard("mt_memcpy_d2h", [&] {
    MT_CHECK(nbytes >= 0, INVALID_ARGUMENT, "nbytes must be >= 0, got %lld", (long long)nbytes);
    MT_CHECK(nbytes == 0 || (dst && src), INVALID_ARGUMENT, "dst (%p) or src (%p) is NULL", dst, src);
    raw_backend("mt_memcpy_d2h").copy_to_host(dst, src, nbytes);
  });
}

MT_API mt_status mt_memcpy_d2d(void *dst, const void *src, int64_t nbytes) {
  return guard("mt_memcpy_d2d", [&] {
    MT_CHECK(nbytes >= 0, INVALID_ARGUMENT, "nbytes must be >= 0, got %lld", (long long)nbytes);
    MT_CHECK(nbytes == 0 || (dst && src), INVALID_ARGUMENT, "dst (%p) or src (%p) is NULL", dst, src);
    raw_backend("mt_memcpy_d2d").copy(dst, src, nbytes);
  });
}

MT_API mt_status mt_synchronize(void) {
  return guard("mt_synchronize", [&] {
    if (cuda_usable()) backend_for(Device::CUDA).synchronize();
  });
}

MT_API int64_t mt_live_bytes(mt_device device) {
  try {
    if (device == MT_CPU) return cpu_backend().live_bytes();
    if (device == MT_CUDA && cuda_usable()) return backend_for(Device::CUDA).live_bytes();
  } catch (...) {
  }
  return 0;
}

// ---------------------------------------------------------------- tensors
MT_API mt_status mt_tensor_from_data(mt_tensor **out, const void *data, const int64_t *shape, int64_t ndim,
                                     mt_dtype dtype, mt_device device) {
  return op_entry("mt_tensor_from_data", out, [&] {
    Shape s = shape_arg(shape, ndim);
    MT_CHECK(data || shape_numel(s) == 0, INVALID_ARGUMENT, "data is NULL for shape %s", shape_str(s).c_str());
    return ops::from_host(data, s, dtype_arg(dtype), device_arg(device));
  });
}

MT_API mt_status mt_tensor_from_blob(mt_tensor **out, void *data, const int64_t *shape, int64_t ndim, mt_dtype dtype,
                                     mt_device device) {
  return op_entry("mt_tensor_from_blob", out, [&] {
    Shape s = shape_arg(shape, ndim);
    DType dt = dtype_arg(dtype);
    Device dev = device_arg(device);
    MT_CHECK(data, INVALID_ARGUMENT, "data is NULL");
    if (dev == Device::CUDA) backend_for(dev);  // fails cleanly without a GPU
    int64_t nbytes = shape_numel(s) * dtype_size(dt);
    return tensor_from_storage(std::make_shared<Storage>(data, nbytes, dev, false), 0, s, dt);
  });
}

MT_API mt_status mt_tensor_zeros(mt_tensor **out, const int64_t *shape, int64_t ndim, mt_dtype dtype, mt_device device) {
  return op_entry("mt_tensor_zeros", out,
                  [&] { return ops::full(shape_arg(shape, ndim), 0.0, dtype_arg(dtype), device_arg(device)); });
}

MT_API mt_status mt_tensor_ones(mt_tensor **out, const int64_t *shape, int64_t ndim, mt_dtype dtype, mt_device device) {
  return op_entry("mt_tensor_ones", out,
                  [&] { return ops::full(shape_arg(shape, ndim), 1.0, dtype_arg(dtype), device_arg(device)); });
}

MT_API mt_status mt_tensor_full(mt_tensor **out, const int64_t *shape, int64_t ndim, double value, mt_dtype dtype,
                                mt_device device) {
  return op_entry("mt_tensor_full", out,
                  [&] { return ops::full(shape_arg(shape, ndim), value, dtype_arg(dtype), device_arg(device)); });
}

MT_API mt_status mt_tensor_rand(mt_tensor **out, const int64_t *shape, int64_t ndim, int64_t seed, mt_dtype dtype,
                                mt_device device) {
  return op_entry("mt_tensor_rand", out, [&] {
    return ops::rand(shape_arg(shape, ndim), (uint64_t)seed, false, dtype_arg(dtype), device_arg(device));
  });
}

MT_API mt_status mt_tensor_randn(mt_tensor **out, const int64_t *shape, int64_t ndim, int64_t seed, mt_dtype dtype,
                                 mt_device device) {
  return op_entry("mt_tensor_randn", out, [&] {
    return ops::rand(shape_arg(shape, ndim), (uint64_t)seed, true, dtype_arg(dtype), device_arg(device));
  });
}

MT_API mt_status mt_tensor_arange(mt_tensor **out, double start, double end, double step, mt_dtype dtype,
                                  mt_device device) {
  return op_entry("mt_tensor_arange", out, [&] {
    MT_CHECK(step != 0 && std::isfinite(step) && std::isfinite(start) && std::isfinite(end), INVALID_ARGUMENT,
             "needs finite start, end and a non-zero step, got start %g end %g step %g", start, end, step);
    double count = std::ceil((end - start) / step);
    MT_CHECK(count <= (double)kMaxNumel, INVALID_ARGUMENT, "%.17g elements from start %g end %g step %g is too many",
             count, start, end, step);
    int64_t n = count > 0 ? (int64_t)count : 0;
    DType dt = dtype_arg(dtype);
    // the first and last values must fit an integer dtype (the conversion is undefined outside it)
    MT_CHECK(n == 0 || (value_fits(start, dt) && value_fits(start + (double)(n - 1) * step, dt)), INVALID_ARGUMENT,
             "values from %g to %g do not fit %s", start, start + (double)(n - 1) * step, dtype_name(dt));
    Ref t = ops::empty({n}, dt, device_arg(device));
    if (n) t->backend().arange(t->data(), n, dt, start, step);
    return t;
  });
}

MT_API mt_status mt_tensor_copy_to_host(const mt_tensor *t, void *dst, int64_t nbytes) {
  return guard("mt_tensor_copy_to_host", [&] {
    Ref x = tensor_arg(t, "t");
    MT_CHECK(nbytes == x->nbytes(), INVALID_ARGUMENT,
             "nbytes %lld does not match the tensor's %lld bytes (%s %s)", (long long)nbytes, (long long)x->nbytes(),
             dtype_name(x->dtype), shape_str(x->shape).c_str());
    MT_CHECK(dst || nbytes == 0, INVALID_ARGUMENT, "dst is NULL");
    if (nbytes) x->backend().copy_to_host(dst, x->data(), nbytes);
  });
}

MT_API mt_status mt_tensor_copy_from_host(mt_tensor *t, const void *src, int64_t nbytes) {
  return guard("mt_tensor_copy_from_host", [&] {
    Ref x = tensor_arg(t, "t");
    MT_CHECK(nbytes == x->nbytes(), INVALID_ARGUMENT,
             "nbytes %lld does not match the tensor's %lld bytes (%s %s)", (long long)nbytes, (long long)x->nbytes(),
             dtype_name(x->dtype), shape_str(x->shape).c_str());
    MT_CHECK(src || nbytes == 0, INVALID_ARGUMENT, "src is NULL");
    if (nbytes) x->backend().copy_from_host(x->data(), src, nbytes);
  });
}

MT_API mt_status mt_tensor_item(const mt_tensor *t, double *out) {
  return guard("mt_tensor_item", [&] {
    MT_CHECK(out, INVALID_ARGUMENT, "out is NULL");
    Ref x = tensor_arg(t, "t");
    MT_CHECK(x->numel() == 1, SHAPE, "item needs a one-element tensor, got shape %s", shape_str(x->shape).c_str());
    unsigned char buf[8];
    x->backend().copy_to_host(buf, x->data(), x->nbytes());
    double v;
    cpu_backend().cast(&v, DType::F64, buf, x->dtype, 1);
    *out = v;
  });
}

MT_API mt_status mt_tensor_ndim(const mt_tensor *t, int64_t *out) {
  return guard("mt_tensor_ndim", [&] {
    MT_CHECK(out, INVALID_ARGUMENT, "out is NULL");
    *out = tensor_arg(t, "t")->ndim();
  });
}

MT_API mt_status mt_tensor_shape(const mt_tensor *t, int64_t *out) {
  return guard("mt_tensor_shape", [&] {
    Ref x = tensor_arg(t, "t");
    MT_CHECK(out || x->ndim() == 0, INVALID_ARGUMENT, "out is NULL");
    for (size_t i = 0; i < x->shape.size(); i++) out[i] = x->shape[i];
  });
}

MT_API mt_status mt_tensor_numel(const mt_tensor *t, int64_t *out) {
  return guard("mt_tensor_numel", [&] {
    MT_CHECK(out, INVALID_ARGUMENT, "out is NULL");
    *out = tensor_arg(t, "t")->numel();
  });
}

MT_API mt_status mt_tensor_dtype(const mt_tensor *t, mt_dtype *out) {
  return guard("mt_tensor_dtype", [&] {
    MT_CHECK(out, INVALID_ARGUMENT, "out is NULL");
    *out = (mt_dtype)tensor_arg(t, "t")->dtype;
  });
}

MT_API mt_status mt_tensor_device(const mt_tensor *t, mt_device *out) {
  return guard("mt_tensor_device", [&] {
    MT_CHECK(out, INVALID_ARGUMENT, "out is NULL");
    *out = (mt_device)tensor_arg(t, "t")->device;
  });
}

MT_API mt_status mt_tensor_data_ptr(const mt_tensor *t, void **out) {
  return guard("mt_tensor_data_ptr", [&] {
    MT_CHECK(out, INVALID_ARGUMENT, "out is NULL");
    *out = tensor_arg(t, "t")->data();
  });
}

MT_API mt_status mt_tensor_retain(mt_tensor *t) {
  return guard("mt_tensor_retain", [&] {
    Ref x = tensor_arg(t, "t");
    tensor_retain(x.get());
  });
}

MT_API mt_status mt_tensor_release(mt_tensor *t) {
  return guard("mt_tensor_release", [&] {
    if (!t) return;
    MT_CHECK(is_live_tensor(t), INVALID_ARGUMENT, "t (%p) is not a live tensor (released already, or not a tensor handle)",
             (void *)t);
    tensor_release(t);
  });
}

MT_API int64_t mt_live_tensors(void) { return live_tensor_count(); }

// ---------------------------------------------------------------- autograd
MT_API mt_status mt_tensor_set_requires_grad(mt_tensor *t, int64_t requires_grad) {
  return guard("mt_tensor_set_requires_grad", [&] {
    Ref x = tensor_arg(t, "t");
    bool on = requires_grad != 0;
    if (on == x->requires_grad) return;
    MT_CHECK(x->is_leaf, STATE, "requires_grad can only be changed on leaf tensors (this one was produced by a recorded op)");
    MT_CHECK(!on || dtype_is_float(x->dtype), DTYPE, "only floating tensors can require grad, got %s",
             dtype_name(x->dtype));
    x->requires_grad = on;
  });
}

MT_API mt_status mt_tensor_requires_grad(const mt_tensor *t, int64_t *out) {
  return guard("mt_tensor_requires_grad", [&] {
    MT_CHECK(out, INVALID_ARGUMENT, "out is NULL");
    *out = tensor_arg(t, "t")->requires_grad ? 1 : 0;
  });
}

MT_API mt_status mt_tensor_grad(mt_tensor **out, const mt_tensor *t) {
  return op_entry("mt_tensor_grad", out, [&] { return Ref::share(tensor_arg(t, "t")->grad); });
}

MT_API mt_status mt_tensor_zero_grad(mt_tensor *t) {
  return guard("mt_tensor_zero_grad", [&] { zero_grad(*tensor_arg(t, "t")); });
}

MT_API mt_status mt_tensor_clear_grad(mt_tensor *t) {
  return guard("mt_tensor_clear_grad", [&] { clear_grad(*tensor_arg(t, "t")); });
}

MT_API mt_status mt_tensor_detach(mt_tensor **out, mt_tensor *t) {
  return op_entry("mt_tensor_detach", out, [&] { return ops::detach(tensor_arg(t, "t")); });
}

MT_API int64_t mt_set_allow_tf32(int64_t allow) { return set_allow_tf32(allow != 0) ? 1 : 0; }

MT_API int64_t mt_set_deterministic(int64_t on) { return set_deterministic(on != 0) ? 1 : 0; }

MT_API int64_t mt_set_grad_enabled(int64_t enabled) { return set_grad_enabled(enabled != 0) ? 1 : 0; }
MT_API int64_t mt_is_grad_enabled(void) { return grad_enabled() ? 1 : 0; }

MT_API mt_status mt_backward(mt_tensor *loss) {
  return guard("mt_backward", [&] { backward(tensor_arg(loss, "loss")); });
}

MT_API mt_status mt_tape_clear(void) {
  return guard("mt_tape_clear", [&] { tape_clear(); });
}

MT_API int64_t mt_tape_size(void) { return tape_size(); }

// ---------------------------------------------------------------- ops
#define MT_BINARY_ENTRY(fn, op)                                                            \
  MT_API mt_status fn(mt_tensor **out, mt_tensor *a, mt_tensor *b) {                      \
    return op_entry(#fn, out, [&] { return op(tensor_arg(a, "a"), tensor_arg(b, "b")); }); \
  }
MT_BINARY_ENTRY(mt_add, ops::add)
MT_BINARY_ENTRY(mt_sub, ops::sub)
MT_BINARY_ENTRY(mt_mul, ops::mul)
MT_BINARY_ENTRY(mt_div, ops::div)
MT_BINARY_ENTRY(mt_matmul, ops::matmul)
#undef MT_BINARY_ENTRY

#define MT_UNARY_ENTRY(fn, op) \
  MT_API mt_status fn(mt_tensor **out, mt_tensor *x) { return op_entry(#fn, out, [&] { return op(tensor_arg(x, "x")); }); }
MT_UNARY_ENTRY(mt_neg, ops::neg)
MT_UNARY_ENTRY(mt_relu, ops::relu)
MT_UNARY_ENTRY(mt_sigmoid, ops::sigmoid)
MT_UNARY_ENTRY(mt_tanh, ops::tanh)
MT_UNARY_ENTRY(mt_exp, ops::exp)
MT_UNARY_ENTRY(mt_log, ops::log)
MT_UNARY_ENTRY(mt_sum, ops::sum)
MT_UNARY_ENTRY(mt_mean, ops::mean)
MT_UNARY_ENTRY(mt_tensor_clone, ops::clone)
#undef MT_UNARY_ENTRY

#define MT_SCALAR_ENTRY(fn, op, arg)                                                                    \
  MT_API mt_status fn(mt_tensor **out, mt_tensor *x, double arg) {                                   \
    return op_entry(#fn, out, [&] { return op(tensor_arg(x, "x"), arg); });                             \
  }
MT_SCALAR_ENTRY(mt_add_scalar, ops::add_scalar, s)
MT_SCALAR_ENTRY(mt_mul_scalar, ops::mul_scalar, s)
MT_SCALAR_ENTRY(mt_pow_scalar, ops::pow_scalar, p)
#undef MT_SCALAR_ENTRY

MT_API mt_status mt_linear(mt_tensor **out, mt_tensor *x, mt_tensor *weight, mt_tensor *bias) {
  return op_entry("mt_linear", out, [&] {
    return ops::linear(tensor_arg(x, "x"), tensor_arg(weight, "weight"), optional_tensor_arg(bias, "bias"));
  });
}

MT_API mt_status mt_sum_dim(mt_tensor **out, mt_tensor *x, int64_t dim, int64_t keepdim) {
  return op_entry("mt_sum_dim", out, [&] { return ops::sum_dim(tensor_arg(x, "x"), dim, keepdim != 0); });
}

MT_API mt_status mt_mean_dim(mt_tensor **out, mt_tensor *x, int64_t dim, int64_t keepdim) {
  return op_entry("mt_mean_dim", out, [&] { return ops::mean_dim(tensor_arg(x, "x"), dim, keepdim != 0); });
}

MT_API mt_status mt_mse_loss(mt_tensor **out, mt_tensor *pred, mt_tensor *target) {
  return op_entry("mt_mse_loss", out,
                  [&] { return ops::mse_loss(tensor_arg(pred, "pred"), tensor_arg(target, "target")); });
}

MT_API mt_status mt_reshape(mt_tensor **out, mt_tensor *x, const int64_t *shape, int64_t ndim) {
  return op_entry("mt_reshape", out, [&] {
    MT_CHECK(ndim >= 0 && ndim <= kMaxDims, INVALID_ARGUMENT, "ndim must be 0..%d, got %lld", kMaxDims, (long long)ndim);
    MT_CHECK(shape || ndim == 0, INVALID_ARGUMENT, "shape is NULL but ndim is %lld", (long long)ndim);
    return ops::reshape(tensor_arg(x, "x"), Shape(shape, shape + ndim));
  });
}

MT_API mt_status mt_transpose(mt_tensor **out, mt_tensor *x, int64_t dim0, int64_t dim1) {
  return op_entry("mt_transpose", out, [&] { return ops::transpose(tensor_arg(x, "x"), dim0, dim1); });
}

MT_API mt_status mt_permute(mt_tensor **out, mt_tensor *x, const int64_t *perm, int64_t ndim) {
  return op_entry("mt_permute", out, [&] {
    MT_CHECK(ndim >= 0 && ndim <= kMaxDims, INVALID_ARGUMENT, "ndim must be 0..%d, got %lld", kMaxDims, (long long)ndim);
    MT_CHECK(perm || ndim == 0, INVALID_ARGUMENT, "perm is NULL but ndim is %lld", (long long)ndim);
    return ops::permute(tensor_arg(x, "x"), std::vector<int64_t>(perm, perm + ndim));
  });
}

MT_API mt_status mt_tensor_to(mt_tensor **out, mt_tensor *x, mt_device device) {
  return op_entry("mt_tensor_to", out, [&] { return ops::to_device(tensor_arg(x, "x"), device_arg(device)); });
}

MT_API mt_status mt_tensor_cast(mt_tensor **out, mt_tensor *x, mt_dtype dtype) {
  return op_entry("mt_tensor_cast", out, [&] { return ops::cast(tensor_arg(x, "x"), dtype_arg(dtype)); });
}

MT_API mt_status mt_softmax(mt_tensor **out, mt_tensor *x, int64_t dim) {
  return op_entry("mt_softmax", out, [&] { return ops::softmax(tensor_arg(x, "x"), dim); });
}

MT_API mt_status mt_log_softmax(mt_tensor **out, mt_tensor *x, int64_t dim) {
  return op_entry("mt_log_softmax", out, [&] { return ops::log_softmax(tensor_arg(x, "x"), dim); });
}

MT_API mt_status mt_cross_entropy(mt_tensor **out, mt_tensor *logits, mt_tensor *targets) {
  return op_entry("mt_cross_entropy", out, [&] {
    return ops::cross_entropy(tensor_arg(logits, "logits"), tensor_arg(targets, "targets"));
  });
}

MT_API mt_status mt_nll_loss(mt_tensor **out, mt_tensor *log_probs, mt_tensor *targets) {
  return op_entry("mt_nll_loss", out, [&] {
    return ops::nll_loss(tensor_arg(log_probs, "log_probs"), tensor_arg(targets, "targets"));
  });
}

MT_API mt_status mt_max_dim(mt_tensor **out_values, mt_tensor **out_indices, mt_tensor *x, int64_t dim,
                            int64_t keepdim) {
  if (out_values) *out_values = nullptr;
  if (out_indices) *out_indices = nullptr;
  return guard("mt_max_dim", [&] {
    MT_CHECK(out_values || out_indices, INVALID_ARGUMENT, "out_values and out_indices are both NULL");
    auto r = ops::max_dim(tensor_arg(x, "x"), dim, keepdim != 0);
    if (out_values) *out_values = r.first.release();
    if (out_indices) *out_indices = r.second.release();
  });
}

MT_API mt_status mt_argmax(mt_tensor **out, mt_tensor *x, int64_t dim, int64_t keepdim) {
  return op_entry("mt_argmax", out, [&] {
    NoGradGuard ng;
    return ops::max_dim(tensor_arg(x, "x"), dim, keepdim != 0).second;
  });
}

MT_API mt_status mt_index_select(mt_tensor **out, mt_tensor *x, mt_tensor *indices) {
  return op_entry("mt_index_select", out,
                  [&] { return ops::index_select(tensor_arg(x, "x"), tensor_arg(indices, "indices")); });
}

MT_API mt_status mt_slice(mt_tensor **out, mt_tensor *x, int64_t dim, int64_t start, int64_t end) {
  return op_entry("mt_slice", out, [&] { return ops::slice(tensor_arg(x, "x"), dim, start, end); });
}

// ---------------------------------------------------------------- initialization
namespace {
// fan_in and fan_out as torch.nn.init computes them for [out, in, *receptive].
std::pair<double, double> fans(const Ref &t) {
  MT_CHECK(t->ndim() >= 2, SHAPE, "fan in and fan out need a tensor of at least 2 dims, got %s",
           shape_str(t->shape).c_str());
  double receptive = 1;
  for (int64_t k = 2; k < t->ndim(); k++) receptive *= (double)t->shape[(size_t)k];
  return {(double)t->shape[1] * receptive, (double)t->shape[0] * receptive};
}
// Fills t in place from the seeded stream: uniform in [a, b) or normal(a, b).
void init_fill(const Ref &t, bool normal, double a, double b, int64_t seed) {
  MT_CHECK(t->dtype == DType::F32 || t->dtype == DType::F64, DTYPE, "init needs float32 or float64, got %s",
           dtype_name(t->dtype));
  NoGradGuard ng;
  Ref r = ops::rand(t->shape, (uint64_t)seed, normal, t->dtype, t->device);
  Ref v = normal ? ops::unary(Unary::ADD_SCALAR, ops::unary(Unary::MUL_SCALAR, r, b), a)
                 : ops::unary(Unary::ADD_SCALAR, ops::unary(Unary::MUL_SCALAR, r, b - a), a);
  t->backend().copy(t->data(), v->data(), t->nbytes());
}
}  // namespace

MT_API mt_status mt_init_uniform(mt_tensor *t, double low, double high, int64_t seed) {
  return guard("mt_init_uniform", [&] {
    MT_CHECK(low <= high, INVALID_ARGUMENT, "low %g is above high %g", low, high);
    init_fill(tensor_arg(t, "t"), false, low, high, seed);
  });
}

MT_API mt_status mt_init_normal(mt_tensor *t, double mean, double std, int64_t seed) {
  return guard("mt_init_normal", [&] {
    MT_CHECK(std >= 0, INVALID_ARGUMENT, "std must be >= 0, got %g", std);
    init_fill(tensor_arg(t, "t"), true, mean, std, seed);
  });
}

MT_API mt_status mt_init_xavier_uniform(mt_tensor *t, double gain, int64_t seed) {
  return guard("mt_init_xavier_uniform", [&] {
    Ref x = tensor_arg(t, "t");
    auto f = fans(x);
    double bound = gain * std::sqrt(6.0 / (f.first + f.second));
    init_fill(x, false, -bound, bound, seed);
  });
}

MT_API mt_status mt_init_xavier_normal(mt_tensor *t, double gain, int64_t seed) {
  return guard("mt_init_xavier_normal", [&] {
    Ref x = tensor_arg(t, "t");
    auto f = fans(x);
    init_fill(x, true, 0.0, gain * std::sqrt(2.0 / (f.first + f.second)), seed);
  });
}

MT_API mt_status mt_init_kaiming_uniform(mt_tensor *t, double gain, int64_t seed) {
  return guard("mt_init_kaiming_uniform", [&] {
    Ref x = tensor_arg(t, "t");
    double bound = gain * std::sqrt(3.0 / fans(x).first);
    init_fill(x, false, -bound, bound, seed);
  });
}

MT_API mt_status mt_init_kaiming_normal(mt_tensor *t, double gain, int64_t seed) {
  return guard("mt_init_kaiming_normal", [&] {
    Ref x = tensor_arg(t, "t");
    init_fill(x, true, 0.0, gain / std::sqrt(fans(x).first), seed);
  });
}

// ---------------------------------------------------------------- graphs
struct mt_graph {
  Device device;
  void *exec;
};

namespace {
std::mutex g_graph_mu;
std::unordered_set<const mt_graph *> &live_graphs() {
  static auto *s = new std::unordered_set<const mt_graph *>();
  return *s;
}
thread_local int t_capture_device = -1;  // the device this thread is recording on, or -1
}  // namespace

static mt_status graph_begin(const char *fn, mt_device device) {
  return guard(fn, [&] {
    Device d = device_arg(device);
    MT_CHECK(t_capture_device < 0, STATE, "a graph is already being recorded on this thread");
    backend_for(d).graph_begin();
    t_capture_device = (int)d;
  });
}

static mt_status graph_end(const char *fn, mt_graph **out) {
  if (out) *out = nullptr;
  return guard(fn, [&] {
    MT_CHECK(t_capture_device >= 0, STATE, "no graph is being recorded on this thread (begin one first)");
    Device d = (Device)t_capture_device;
    t_capture_device = -1;  // the recording ends here even if instantiation fails
    void *exec = backend_for(d).graph_end();
    if (!out) {
      backend_for(d).graph_free(exec);
      fail(Code::INVALID_ARGUMENT, "out is NULL (the recorded graph was discarded)");
    }
    auto *g = new mt_graph{d, exec};
    std::lock_guard<std::mutex> lock(g_graph_mu);
    live_graphs().insert(g);
    *out = g;
  });
}

static mt_graph *graph_arg(const mt_graph *g) {
  MT_CHECK(g, INVALID_ARGUMENT, "g is NULL");
  std::lock_guard<std::mutex> lock(g_graph_mu);
  MT_CHECK(live_graphs().count(g), INVALID_ARGUMENT, "g (%p) is not a live graph (freed already?)", (const void *)g);
  return const_cast<mt_graph *>(g);
}

MT_API mt_status mt_graph_replay(mt_graph *g) {
  return guard("mt_graph_replay", [&] {
    mt_graph *gr = graph_arg(g);
    MT_CHECK(t_capture_device < 0, STATE, "cannot replay a graph while recording one");
    backend_for(gr->device).graph_replay(gr->exec);
  });
}

static mt_status graph_free(const char *fn, mt_graph *g) {
  return guard(fn, [&] {
    if (!g) return;
    mt_graph *gr = graph_arg(g);
    {
      std::lock_guard<std::mutex> lock(g_graph_mu);
      live_graphs().erase(gr);
    }
    backend_for(gr->device).graph_free(gr->exec);
    delete gr;
  });
}

MT_API mt_status mt_graph_begin(mt_device device) { return graph_begin("mt_graph_begin", device); }
MT_API mt_status mt_graph_end(mt_graph **out) { return graph_end("mt_graph_end", out); }
MT_API mt_status mt_graph_free(mt_graph *g) { return graph_free("mt_graph_free", g); }
MT_API mt_status mt_graph_capture_begin(void) { return graph_begin("mt_graph_capture_begin", MT_CUDA); }
MT_API mt_status mt_graph_capture_end(mt_graph **out) { return graph_end("mt_graph_capture_end", out); }
MT_API mt_status mt_graph_release(mt_graph *g) { return graph_free("mt_graph_release", g); }

// ---------------------------------------------------------------- optimizers
static std::vector<Ref> params_arg(mt_tensor *const *params, int64_t n) {
  MT_CHECK(n >= 0, INVALID_ARGUMENT, "n must be >= 0, got %lld", (long long)n);
  MT_CHECK(params || n == 0, INVALID_ARGUMENT, "params is NULL but n is %lld", (long long)n);
  std::vector<Ref> ps;
  for (int64_t i = 0; i < n; i++) {
    std::string name = "params[" + std::to_string(i) + "]";
    ps.push_back(tensor_arg(params[i], name.c_str()));
  }
  return ps;
}

static Optimizer *optimizer_arg(const mt_optimizer *opt) {
  MT_CHECK(opt, INVALID_ARGUMENT, "opt is NULL");
  MT_CHECK(is_live_optimizer(opt), INVALID_ARGUMENT, "opt (%p) is not a live optimizer (freed already?)", (const void *)opt);
  return const_cast<Optimizer *>(opt);
}

MT_API mt_status mt_optim_sgd(mt_optimizer **out, mt_tensor *const *params, int64_t n, double lr, double momentum,
                              double weight_decay, int64_t nesterov) {
  if (out) *out = nullptr;
  return guard("mt_optim_sgd", [&] {
    check_out(out);
    *out = optimizer_sgd(params_arg(params, n), lr, momentum, weight_decay, nesterov != 0);
  });
}

MT_API mt_status mt_optim_adam(mt_optimizer **out, mt_tensor *const *params, int64_t n, double lr, double beta1,
                               double beta2, double eps, double weight_decay) {
  if (out) *out = nullptr;
  return guard("mt_optim_adam", [&] {
    check_out(out);
    *out = optimizer_adam(params_arg(params, n), lr, beta1, beta2, eps, weight_decay, false);
  });
}

MT_API mt_status mt_optim_adamw(mt_optimizer **out, mt_tensor *const *params, int64_t n, double lr, double beta1,
                                double beta2, double eps, double weight_decay) {
  if (out) *out = nullptr;
  return guard("mt_optim_adamw", [&] {
    check_out(out);
    *out = optimizer_adam(params_arg(params, n), lr, beta1, beta2, eps, weight_decay, true);
  });
}

MT_API mt_status mt_optim_save(const mt_optimizer *opt, const char *path) {
  return guard("mt_optim_save", [&] { optimizer_save(*optimizer_arg(opt), string_arg(path, "path")); });
}

MT_API mt_status mt_optim_load(mt_optimizer *opt, const char *path) {
  return guard("mt_optim_load", [&] { optimizer_load(*optimizer_arg(opt), string_arg(path, "path")); });
}

MT_API mt_status mt_clip_grad_norm(mt_tensor **out_norm, mt_tensor *const *params, int64_t n, double max_norm) {
  if (out_norm) *out_norm = nullptr;
  return guard("mt_clip_grad_norm", [&] {
    Ref norm = clip_grad_norm(params_arg(params, n), max_norm);
    if (out_norm && norm) *out_norm = norm.release();
  });
}

MT_API mt_status mt_optim_step(mt_optimizer *opt) {
  return guard("mt_optim_step", [&] { optimizer_step(*optimizer_arg(opt)); });
}

MT_API mt_status mt_optim_zero_grad(mt_optimizer *opt) {
  return guard("mt_optim_zero_grad", [&] { optimizer_zero_grad(*optimizer_arg(opt)); });
}

MT_API mt_status mt_optim_set_lr(mt_optimizer *opt, double lr) {
  return guard("mt_optim_set_lr", [&] {
    optimizer_set_lr(*optimizer_arg(opt), lr);
  });
}

MT_API mt_status mt_optim_get_lr(const mt_optimizer *opt, double *out) {
  return guard("mt_optim_get_lr", [&] {
    MT_CHECK(out, INVALID_ARGUMENT, "out is NULL");
    *out = optimizer_arg(opt)->lr;
  });
}

MT_API mt_status mt_optim_free(mt_optimizer *opt) {
  return guard("mt_optim_free", [&] {
    if (!opt) return;
    optimizer_free(optimizer_arg(opt));
  });
}

}  // extern "C"
