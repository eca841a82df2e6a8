// ops_cnn.cpp - forwards and backward rules of the convolutional-network family:
// conv2d, max_pool2d, avg_pool2d, batch_norm (docs/derivatives.md has their rows).
//
// Node layout:
//   CONV2D      in {x, w, bias or null}   ints {stride_h, stride_w, pad_h, pad_w, dil_h, dil_w}
//   MAX_POOL2D  in {x}                    ints {kernel, stride}   saved {argmax indices, int64}
//   AVG_POOL2D  in {x}                    ints {kernel, stride}
//   BATCH_NORM  in {x, gamma, beta}       ints {training}         saved {mean, invstd}
// The backward rules call the backend's fused backward kernels directly (not recorded:
// no double backward through these ops).
#include "ops_cnn.h"

#include <atomic>
#include <cmath>

namespace mt {

std::vector<Ref> &last_node_saved();  // tape.cpp

namespace ops {
namespace {

std::atomic<int> g_conv_algo{0};

void check_like(const Ref &x, const Ref &t, const char *name) {
  MT_CHECK(t->device == x->device, DEVICE, "tensors on different devices: x is %s, %s is %s",
           device_name_short(x->device), name, device_name_short(t->device));
  MT_CHECK(t->dtype == x->dtype, DTYPE, "dtypes differ: x is %s, %s is %s", dtype_name(x->dtype), name,
           dtype_name(t->dtype));
}

void check_channels(const Ref &t, int64_t c, const char *name, const char *what) {
  MT_CHECK(t->ndim() == 1 && t->shape[0] == c, SHAPE, "%s must be [%lld] (%s), got %s", name, (long long)c, what,
           shape_str(t->shape).c_str());
}

void check_float_x(const Ref &x) {
  MT_CHECK(x->dtype == DType::F32 || x->dtype == DType::F64, DTYPE,
           "x must be float32 or float64 (the convolutional ops take no other dtype), got %s", dtype_name(x->dtype));
}

void check_4d(const Ref &t, const char *name, const char *layout) {
  MT_CHECK(t->ndim() == 4, SHAPE, "%s must be 4-D %s, got %s", name, layout, shape_str(t->shape).c_str());
}

Backend::Conv2dArgs conv_args(const Ref &x, const Ref &w, const std::vector<int64_t> &p) {
  Backend::Conv2dArgs a;
  a.n = x->shape[0], a.c = x->shape[1], a.h = x->shape[2], a.w = x->shape[3];
  a.k = w->shape[0], a.r = w->shape[2], a.s = w->shape[3];
  a.stride_h = p[0], a.stride_w = p[1], a.pad_h = p[2], a.pad_w = p[3], a.dil_h = p[4], a.dil_w = p[5];
  a.ho = (a.h + 2 * a.pad_h - a.dil_h * (a.r - 1) - 1) / a.stride_h + 1;
  a.wo = (a.w + 2 * a.pad_w - a.dil_w * (a.s - 1) - 1) / a.stride_w + 1;
  a.dtype = x->dtype;
  a.algo = g_conv_algo.load(std::memory_order_relaxed);
  return a;
}

Backend::Pool2dArgs pool_args(const Ref &x, int64_t kernel, int64_t stride) {
  Backend::Pool2dArgs a;
  a.planes = x->shape[0] * x->shape[1], a.h = x->shape[2], a.w = x->shape[3];
  a.kernel = kernel, a.stride = stride;
  a.ho = (a.h - kernel) / stride + 1, a.wo = (a.w - kernel) / stride + 1;
  a.dtype = x->dtype;
  return a;
}

Backend::BatchNormArgs bn_args(const Ref &x, bool training, double momentum, double eps) {
  Backend::BatchNormArgs a;
  a.n = x->shape[0], a.c = x->shape[1], a.hw = x->ndim() == 4 ? x->shape[2] * x->shape[3] : 1;
  a.training = training, a.momentum = momentum, a.eps = eps;
  a.dtype = x->dtype;
  return a;
}

Ref pool(Op op, const Ref &x, int64_t kernel, int64_t stride) {
  check_4d(x, "x", "[N,C,H,W]");
  check_float_x(x);
  MT_CHECK(kernel > 0 && stride > 0, INVALID_ARGUMENT, "kernel and stride must be positive, got kernel %lld stride %lld",
           (long long)kernel, (long long)stride);
  MT_CHECK(kernel <= x->shape[2] && kernel <= x->shape[3], SHAPE, "kernel %lld is larger than the input %s (no padding)",
           (long long)kernel, shape_str(x->shape).c_str());
  Backend::Pool2dArgs a = pool_args(x, kernel, stride);
  Ref y = empty({x->shape[0], x->shape[1], a.ho, a.wo}, x->dtype, x->device);
  if (op == Op::AVG_POOL2D) {
    if (y->numel()) x->backend().avg_pool2d(y->data(), x->data(), a);
    return record(op, y, {x}, 0, {kernel, stride});
  }
  Ref idx = empty(y->shape, DType::I64, x->device);
  if (y->numel()) x->backend().max_pool2d(y->data(), (int64_t *)idx->data(), x->data(), a);
  y = record(op, y, {x}, 0, {kernel, stride});
  if (y->requires_grad && grad_enabled()) last_node_saved().push_back(idx);
  return y;
}

}  // namespace

int64_t set_conv_algo(int64_t algo) {
  MT_CHECK(algo >= 0 && algo <= 3, INVALID_ARGUMENT,
           "algo must be 0 (auto), 1 (im2col + GEMM), 2 (cuDNN) or 3 (direct), got %lld", (long long)algo);
#ifndef MT_HAVE_CUDNN
  MT_CHECK(algo != 2, UNSUPPORTED, "the cuDNN convolution path (algo 2) is not in this build (built without cuDNN)");
#endif
  return g_conv_algo.exchange((int)algo);
}

Ref conv2d(const Ref &x, const Ref &w, const Ref &bias, int64_t stride_h, int64_t stride_w, int64_t pad_h,
           int64_t pad_w, int64_t dil_h, int64_t dil_w) {
  check_4d(x, "x", "[N,C,H,W]");
  check_4d(w, "w", "[K,C,R,S]");
  check_like(x, w, "w");
  check_float_x(x);
  MT_CHECK(x->shape[1] == w->shape[1], SHAPE, "channels differ: x %s has %lld, w %s has %lld (groups are not supported)",
           shape_str(x->shape).c_str(), (long long)x->shape[1], shape_str(w->shape).c_str(), (long long)w->shape[1]);
  if (bias) {
    check_like(x, bias, "bias");
    check_channels(bias, w->shape[0], "bias", "one per output channel of w");
  }
  MT_CHECK(stride_h > 0 && stride_w > 0, INVALID_ARGUMENT, "stride must be positive, got (%lld, %lld)",
           (long long)stride_h, (long long)stride_w);
  MT_CHECK(dil_h > 0 && dil_w > 0, INVALID_ARGUMENT, "dilation must be positive, got (%lld, %lld)", (long long)dil_h,
           (long long)dil_w);
  MT_CHECK(pad_h >= 0 && pad_w >= 0, INVALID_ARGUMENT, "padding must be >= 0, got (%lld, %lld)", (long long)pad_h,
           (long long)pad_w);
  MT_CHECK(w->shape[2] > 0 && w->shape[3] > 0, INVALID_ARGUMENT, "kernel size must be positive, w is %s",
           shape_str(w->shape).c_str());
  const int64_t kMaxParam = 0x7fffffff;  // cuDNN's int; keeps the output-size arithmetic in int64
  MT_CHECK(stride_h <= kMaxParam && stride_w <= kMaxParam && pad_h <= kMaxParam && pad_w <= kMaxParam &&
               dil_h <= kMaxParam && dil_w <= kMaxParam && w->shape[2] <= kMaxParam && w->shape[3] <= kMaxParam,
           INVALID_ARGUMENT, "stride (%lld, %lld), padding (%lld, %lld), dilation (%lld, %lld) and the kernel %s must "
           "be at most 2^31 - 1", (long long)stride_h, (long long)stride_w, (long long)pad_h, (long long)pad_w,
           (long long)dil_h, (long long)dil_w, shape_str(w->shape).c_str());
  std::vector<int64_t> p = {stride_h, stride_w, pad_h, pad_w, dil_h, dil_w};
  const int64_t eff_r = dil_h * (w->shape[2] - 1) + 1, eff_s = dil_w * (w->shape[3] - 1) + 1;
  MT_CHECK(eff_r <= x->shape[2] + 2 * pad_h && eff_s <= x->shape[3] + 2 * pad_w, SHAPE,
           "kernel %lldx%lld (dilated %lldx%lld) is larger than the padded input %lldx%lld (x %s, padding (%lld, %lld))",
           (long long)w->shape[2], (long long)w->shape[3], (long long)eff_r, (long long)eff_s,
           (long long)(x->shape[2] + 2 * pad_h), (long long)(x->shape[3] + 2 * pad_w), shape_str(x->shape).c_str(),
           (long long)pad_h, (long long)pad_w);
  Backend::Conv2dArgs a = conv_args(x, w, p);
  Ref y = empty({a.n, a.k, a.ho, a.wo}, x->dtype, x->device);
  if (y->numel()) x->backend().conv2d(y->data(), x->data(), w->data(), bias ? bias->data() : nullptr, a);
  return record(Op::CONV2D, y, {x, w, bias}, 0, p);
}

Ref max_pool2d(const Ref &x, int64_t kernel, int64_t stride) { return pool(Op::MAX_POOL2D, x, kernel, stride); }
Ref avg_pool2d(const Ref &x, int64_t kernel, int64_t stride) { return pool(Op::AVG_POOL2D, x, kernel, stride); }

Ref batch_norm(const Ref &x, const Ref &gamma, const Ref &beta, const Ref &running_mean, const Ref &running_var,
               bool training, double momentum, double eps) {
  MT_CHECK(x->ndim() == 2 || x->ndim() == 4, SHAPE, "x must be [N,C] or [N,C,H,W], got %s", shape_str(x->shape).c_str());
  check_float_x(x);
  const int64_t c = x->shape[1];
  const Ref *params[4] = {&gamma, &beta, &running_mean, &running_var};
  const char *names[4] = {"gamma", "beta", "running_mean", "running_var"};
  for (int i = 0; i < 4; i++)
    if (*params[i]) {
      check_like(x, *params[i], names[i]);
      check_channels(*params[i], c, names[i], "one per channel of x");
    }
  MT_CHECK(!running_mean == !running_var, INVALID_ARGUMENT,
           "running_mean and running_var go together: got only %s", running_mean ? "running_mean" : "running_var");
  MT_CHECK(training || running_mean, INVALID_ARGUMENT,
           "running_mean and running_var are required when training == 0 (eval mode normalizes with them)");
  MT_CHECK(std::isfinite(eps) && eps >= 0, INVALID_ARGUMENT, "eps must be finite and >= 0, got %g", eps);
  MT_CHECK(std::isfinite(momentum), INVALID_ARGUMENT, "momentum must be finite, got %g", momentum);
  Backend::BatchNormArgs a = bn_args(x, training, momentum, eps);
  MT_CHECK(!training || a.n * a.hw > 1, SHAPE,
           "training needs more than 1 value per channel, got x %s", shape_str(x->shape).c_str());
  Ref y = empty(x->shape, x->dtype, x->device);
  Ref mean = empty({c}, x->dtype, x->device), invstd = empty({c}, x->dtype, x->device);
  if (c > 0 && (x->numel() || !training))
    x->backend().batch_norm(y->data(), mean->data(), invstd->data(), x->data(), gamma ? gamma->data() : nullptr,
                            beta ? beta->data() : nullptr, running_mean ? running_mean->data() : nullptr,
                            running_var ? running_var->data() : nullptr, a);
  y = record(Op::BATCH_NORM, y, {x, gamma, beta}, 0, {training ? 1 : 0});
  if (y->requires_grad && grad_enabled()) {
    last_node_saved().push_back(mean);
    last_node_saved().push_back(invstd);
  }
  return y;
}

}  // namespace ops

void backward_cnn(const Node &node, const Ref &g, std::vector<Ref> &grads) {
  using namespace ops;
  const std::vector<Ref> &in = node.in;
  auto need = [&](size_t i) { return i < in.size() && in[i] && in[i]->requires_grad; };
  const Ref &x = in[0];
  switch (node.op) {
    case Op::CONV2D: {  // dx = conv_transpose(g, w), dw = corr(x, g), dbias = sum of g over N, H, W
      const Ref &w = in[1];
      Backend::Conv2dArgs a = conv_args(x, w, node.ints);
      if (need(0)) {
        Ref dx = empty(x->shape, x->dtype, x->device);
        if (dx->numel()) x->backend().conv2d_backward_data(dx->data(), g->data(), w->data(), a);
        grads[0] = dx;
      }
      if (need(1)) {
        Ref dw = empty(w->shape, w->dtype, w->device);
        if (dw->numel()) x->backend().conv2d_backward_filter(dw->data(), g->data(), x->data(), a);
        grads[1] = dw;
      }
      if (need(2)) {  // g [N, K, HoWo]: sum over N, then over HoWo
        Ref per_pixel = empty({a.k, a.ho * a.wo}, g->dtype, g->device), db = empty({a.k}, g->dtype, g->device);
        x->backend().sum_reduce(per_pixel->data(), g->data(), 1, a.n, a.k * a.ho * a.wo, g->dtype, 1.0, 0.0);
        x->backend().sum_reduce(db->data(), per_pixel->data(), a.k, a.ho * a.wo, 1, g->dtype, 1.0, 0.0);
        grads[2] = db;
      }
      break;
    }
    case Op::MAX_POOL2D: {  // g routed to each window's argmax; overlapping windows add up
      if (!need(0)) break;
      Backend::Pool2dArgs a = pool_args(x, node.ints[0], node.ints[1]);
      Ref dx = empty(x->shape, x->dtype, x->device);
      if (dx->numel()) {
        if (g->numel()) x->backend().max_pool2d_backward(dx->data(), (const int64_t *)node.saved[0]->data(), g->data(), a);
        else x->backend().fill(dx->data(), dx->numel(), dx->dtype, 0.0);
      }
      grads[0] = dx;
      break;
    }
    case Op::AVG_POOL2D: {  // g / kernel^2 spread over each window
      if (!need(0)) break;
      Backend::Pool2dArgs a = pool_args(x, node.ints[0], node.ints[1]);
      Ref dx = empty(x->shape, x->dtype, x->device);
      if (dx->numel()) {
        if (g->numel()) x->backend().avg_pool2d_backward(dx->data(), g->data(), a);
        else x->backend().fill(dx->data(), dx->numel(), dx->dtype, 0.0);
      }
      grads[0] = dx;
      break;
    }
    case Op::BATCH_NORM: {  // training: through the batch statistics; eval: an affine map
      Backend::BatchNormArgs a = bn_args(x, node.ints[0] != 0, 0.0, 0.0);
      const Ref &gamma = in[1];
      Ref dx = need(0) ? empty(x->shape, x->dtype, x->device) : Ref();
      Ref dgamma = empty({a.c}, x->dtype, x->device), dbeta = empty({a.c}, x->dtype, x->device);
      if (a.c > 0)
        x->backend().batch_norm_backward(dx ? dx->data() : nullptr, dgamma->data(), dbeta->data(), g->data(), x->data(),
                                         node.saved[0]->data(), node.saved[1]->data(),
                                         gamma ? gamma->data() : nullptr, a);
      if (need(0)) grads[0] = dx;
      if (need(1)) grads[1] = dgamma;
      if (need(2)) grads[2] = dbeta;
      break;
    }
    default:
      fail(Code::INTERNAL, "internal error, please report: no backward rule for %s", op_name(node.op));
  }
}

}  // namespace mt
