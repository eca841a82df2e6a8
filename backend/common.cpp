// common.cpp - what both backends share: dtype tables, errors, backend lookup.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend.h"
#include "shape.h"

namespace mt {

std::string strprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char buf[512];
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::string s;
  if (n < 0) {
    s = fmt;
  } else if (n < (int)sizeof buf) {
    s.assign(buf, (size_t)n);
  } else {
    s.resize((size_t)n + 1);
    vsnprintf(&s[0], s.size(), fmt, ap2);
    s.resize((size_t)n);
  }
  va_end(ap2);
  return s;
}

void fail(Code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char buf[1024];
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  throw Error(code, buf);
}

int64_t dtype_size(DType d) {
  switch (d) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

const char *dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
  }
  return nullptr;
}

bool dtype_is_float(DType d) {
  return d == DType::F32 || d == DType::F64 || d == DType::F16 || d == DType::BF16;
}

bool value_fits(double v, DType d) {
  switch (d) {  // open bounds one past the range: truncation maps (min - 1, max + 1) into it
    case DType::I32: return v > -2147483649.0 && v < 2147483648.0;
    case DType::I64: return v >= -9223372036854775808.0 && v < 9223372036854775808.0;
    case DType::U8: return v > -1.0 && v < 256.0;
    default: return true;
  }
}

const char *device_name_short(Device d) { return d == Device::CUDA ? "cuda" : "cpu"; }

namespace {
std::atomic<bool> g_deterministic{false};
}  // namespace
bool deterministic() { return g_deterministic.load(std::memory_order_relaxed); }
bool set_deterministic(bool on) { return g_deterministic.exchange(on); }

void matmul_extras(Backend &be, const MatmulArgs &g) {
  if (!g.bias && !g.a_sums) return;
  MT_CHECK(g.batch == 1, INVALID_ARGUMENT, "matmul: bias and a_sums need batch 1, got batch %lld",
           (long long)g.batch);
  if (g.bias && g.m * g.n > 0) {
    const Shape out{g.m, g.n}, bias{g.n};
    be.binary(Binary::ADD, g.c, g.c, g.bias, make_broadcast_plan(out, out, bias), g.dtype);
  }
  if (g.a_sums && g.m > 0) {
    if (g.k == 0) be.fill(g.a_sums, g.m, g.dtype, 0.0);
    else if (g.trans_a) be.sum_reduce(g.a_sums, g.a, 1, g.k, g.m, g.dtype, 1.0, 0.0);  // A stored [k, m]
    else be.sum_reduce(g.a_sums, g.a, g.m, g.k, 1, g.dtype, 1.0, 0.0);                 // A stored [m, k]
  }
}

// ---- defaults of the classification family: not on this device (yet)
#define MT_UNSUPPORTED(what) \
  fail(Code::UNSUPPORTED, "%s is not implemented on the %s backend", what, device_name_short(device()))
void Backend::arange(void *, int64_t, DType, double, double) { MT_UNSUPPORTED("arange"); }
void Backend::softmax(void *, const void *, int64_t, int64_t, DType, bool) { MT_UNSUPPORTED("softmax"); }
void Backend::causal_softmax_backward(void *dx, const void *y, const void *dy, int64_t rows, int64_t cols, int64_t,
                                      int64_t, DType dtype) {
  softmax_backward(dx, y, dy, rows, cols, dtype, false);
}
void Backend::softmax_backward(void *, const void *, const void *, int64_t, int64_t, DType, bool) {
  MT_UNSUPPORTED("softmax backward");
}
void Backend::cross_entropy(void *, void *, const void *, const int64_t *, int64_t, int64_t, DType, double) {
  MT_UNSUPPORTED("cross_entropy");
}
void Backend::cross_entropy_backward(void *, const void *, const void *, const int64_t *, const void *, int64_t,
                                     int64_t, DType, double) {
  MT_UNSUPPORTED("cross_entropy backward");
}
void Backend::nll_loss(void *, const void *, const int64_t *, int64_t, int64_t, DType, double) {
  MT_UNSUPPORTED("nll_loss");
}
void Backend::nll_loss_backward(void *, const int64_t *, const void *, int64_t, int64_t, DType, double) {
  MT_UNSUPPORTED("nll_loss backward");
}
int64_t Backend::range_check_queue(const int64_t *, int64_t, int64_t) { MT_UNSUPPORTED("index validation"); }
int64_t Backend::range_check_answer(int64_t) { MT_UNSUPPORTED("index validation"); }
void Backend::max_reduce(void *, int64_t *, const void *, int64_t, int64_t, int64_t, DType) { MT_UNSUPPORTED("max"); }
void Backend::max_backward(void *, const int64_t *, const void *, int64_t, int64_t, int64_t, DType) {
  MT_UNSUPPORTED("max backward");
}
void Backend::adam_step(const AdamArgs &) { MT_UNSUPPORTED("adam"); }
void Backend::causal_softmax(void *, const void *, int64_t, int64_t, int64_t, int64_t, DType) {
  MT_UNSUPPORTED("causal_softmax");
}
void Backend::clip_grad_norm(void *, void *const *, const int64_t *, int64_t, DType, double, double) {
  MT_UNSUPPORTED("clip_grad_norm");
}
// ---- fused MSE backward: default, not on this device (yet)
void Backend::mse_backward(void *, void *, const void *, const void *, const void *, int64_t, DType, double) {
  MT_UNSUPPORTED("mse backward");
}
// ---- end fused MSE backward
void Backend::slice_copy(void *, const void *, int64_t, int64_t, int64_t, int64_t, int64_t, DType) {
  MT_UNSUPPORTED("slice");
}
void Backend::slice_backward(void *, const void *, int64_t, int64_t, int64_t, int64_t, int64_t, DType) {
  MT_UNSUPPORTED("slice backward");
}
void Backend::index_select(void *, const void *, const int64_t *, int64_t, int64_t, int64_t, DType) {
  MT_UNSUPPORTED("index_select");
}
void Backend::index_add(void *, const int64_t *, const void *, int64_t, int64_t, int64_t, DType) {
  MT_UNSUPPORTED("index_select backward");
}
void Backend::graph_begin() { MT_UNSUPPORTED("graph capture"); }
void *Backend::graph_end() { MT_UNSUPPORTED("graph capture"); }
void Backend::graph_replay(void *) { MT_UNSUPPORTED("graph replay"); }
void Backend::graph_free(void *) noexcept {}
#undef MT_UNSUPPORTED

int64_t cuda_device_count() {
#ifdef MT_HAVE_CUDA
  return cuda_backend_device_count();
#else
  return 0;
#endif
}

Backend &backend_for(Device d) {
  if (d == Device::CPU) return cpu_backend();
  MT_CHECK(d == Device::CUDA, INVALID_ARGUMENT, "invalid device %d", (int)d);
#ifdef MT_HAVE_CUDA
  return cuda_backend();
#else
  fail(Code::DEVICE, "CUDA device requested but this libminitorch was built without CUDA (CPU-only build)");
#endif
}

// ---- comparisons and selection: defaults, not on this device (yet)
void Backend::compare(Compare, uint8_t *, const void *, const void *, const BroadcastPlan &, DType) {
  fail(Code::UNSUPPORTED, "comparisons are not implemented on the %s backend", device_name_short(device()));
}
void Backend::where(void *, const uint8_t *, const void *, const void *, const WherePlan &, DType) {
  fail(Code::UNSUPPORTED, "where is not implemented on the %s backend", device_name_short(device()));
}
void Backend::pow(void *, const void *, const void *, const BroadcastPlan &, DType) {
  fail(Code::UNSUPPORTED, "pow of two tensors is not implemented on the %s backend", device_name_short(device()));
}

// ---- convolutional networks: defaults
#define MT_CNN_UNSUPPORTED(what) \
  fail(Code::UNSUPPORTED, "%s is not implemented on the %s backend", what, device_name_short(device()))
void Backend::conv2d(void *, const void *, const void *, const void *, const Conv2dArgs &) {
  MT_CNN_UNSUPPORTED("conv2d");
}
void Backend::conv2d_backward_data(void *, const void *, const void *, const Conv2dArgs &) {
  MT_CNN_UNSUPPORTED("conv2d backward (data)");
}
void Backend::conv2d_backward_filter(void *, const void *, const void *, const Conv2dArgs &) {
  MT_CNN_UNSUPPORTED("conv2d backward (filter)");
}
void Backend::max_pool2d(void *, int64_t *, const void *, const Pool2dArgs &) { MT_CNN_UNSUPPORTED("max_pool2d"); }
void Backend::max_pool2d_backward(void *, const int64_t *, const void *, const Pool2dArgs &) {
  MT_CNN_UNSUPPORTED("max_pool2d backward");
}
void Backend::avg_pool2d(void *, const void *, const Pool2dArgs &) { MT_CNN_UNSUPPORTED("avg_pool2d"); }
void Backend::avg_pool2d_backward(void *, const void *, const Pool2dArgs &) {
  MT_CNN_UNSUPPORTED("avg_pool2d backward");
}
void Backend::batch_norm(void *, void *, void *, const void *, const void *, const void *, void *, void *,
                         const BatchNormArgs &) {
  MT_CNN_UNSUPPORTED("batch_norm");
}
void Backend::batch_norm_backward(void *, void *, void *, const void *, const void *, const void *, const void *,
                                  const void *, const BatchNormArgs &) {
  MT_CNN_UNSUPPORTED("batch_norm backward");
}
#undef MT_CNN_UNSUPPORTED
// ---- end convolutional networks

// ---- fused transformer kernels: defaults
#define MT_FUSED_UNSUPPORTED(what) \
  fail(Code::UNSUPPORTED, "%s is not implemented on the %s backend", what, device_name_short(device()))
void Backend::layer_norm(void *, void *, void *, const void *, const void *, const void *, int64_t, int64_t, double,
                         DType) {
  MT_FUSED_UNSUPPORTED("layer_norm");
}
void Backend::layer_norm_backward(void *, const void *, void *, void *, const void *, const void *, const void *,
                                  const void *, const void *, int64_t, int64_t, DType) {
  MT_FUSED_UNSUPPORTED("layer_norm backward");
}
void Backend::gelu(void *, const void *, int64_t, DType) { MT_FUSED_UNSUPPORTED("gelu"); }
void Backend::gelu_backward(void *, const void *, const void *, int64_t, DType) { MT_FUSED_UNSUPPORTED("gelu backward"); }
void Backend::causal_mask(uint8_t *, int64_t, int64_t) { MT_FUSED_UNSUPPORTED("causal_mask"); }
#undef MT_FUSED_UNSUPPORTED
// ---- end fused transformer kernels

// ---- FlashAttention: defaults
void Backend::flash_attention(void *, float *, const void *, const void *, const void *, int64_t, int64_t, int64_t,
                              int64_t, DType, double, bool) {
  fail(Code::UNSUPPORTED, "flash attention is not implemented on the %s backend", device_name_short(device()));
}
void Backend::flash_attention_backward(void *, void *, void *, const void *, const void *, const void *, const void *,
                                       const float *, const void *, int64_t, int64_t, int64_t, int64_t, DType, double,
                                       bool) {
  fail(Code::UNSUPPORTED, "flash attention backward is not implemented on the %s backend", device_name_short(device()));
}
void Backend::strided_attention(const AttentionGeometry &, void *, float *, const void *, const void *, const void *,
                                DType, double, bool) {
  fail(Code::UNSUPPORTED, "strided attention is not implemented on the %s backend", device_name_short(device()));
}
void Backend::strided_attention_backward(const AttentionGeometry &, void *, void *, void *, const void *, const void *,
                                         const void *, const void *, const float *, const void *, DType, double,
                                         bool) {
  fail(Code::UNSUPPORTED, "strided attention backward is not implemented on the %s backend",
       device_name_short(device()));
}
// ---- end FlashAttention

// ---- fusions: defaults
void Backend::bias_act(void *, const void *, const void *, int64_t, int64_t, Activation, DType) {
  fail(Code::UNSUPPORTED, "bias_act is not implemented on the %s backend", device_name_short(device()));
}
void Backend::bias_act_backward(void *, void *, const void *, const void *, const void *, int64_t, int64_t, Activation,
                                DType) {
  fail(Code::UNSUPPORTED, "bias_act backward is not implemented on the %s backend", device_name_short(device()));
}
void Backend::add_layer_norm(void *, void *, void *, void *, const void *, const void *, const void *, const void *,
                             int64_t, int64_t, double, DType) {
  fail(Code::UNSUPPORTED, "add_layer_norm is not implemented on the %s backend", device_name_short(device()));
}
void Backend::dropout_add(void *, const void *, const void *, int64_t, double, uint64_t, DType) {
  fail(Code::UNSUPPORTED, "dropout_add is not implemented on the %s backend", device_name_short(device()));
}
// ---- end fusions

}  // namespace mt
