// cnn.cpp - the extern "C" entry points of the convolutional-networks section of
// minitorch.h: mt_conv2d, mt_conv2d_ex, mt_set_conv_algo, mt_max_pool2d, mt_avg_pool2d,
// mt_batch_norm. Each checks its handles and calls autograd/ops_cnn.cpp.
#include "minitorch.h"

#include "abi/entry.h"
#include "autograd/ops_cnn.h"

using namespace mt;
using namespace mt::abi;

extern "C" {

MT_API mt_status mt_conv2d(mt_tensor **out, mt_tensor *x, mt_tensor *w, mt_tensor *bias, int64_t stride,
                           int64_t padding) {
  return op_entry("mt_conv2d", out, [&] {
    return ops::conv2d(tensor_arg(x, "x"), tensor_arg(w, "w"), optional_tensor_arg(bias, "bias"), stride, stride,
                       padding, padding, 1, 1);
  });
}

MT_API mt_status mt_conv2d_ex(mt_tensor **out, mt_tensor *x, mt_tensor *w, mt_tensor *bias, int64_t stride_h,
                              int64_t stride_w, int64_t pad_h, int64_t pad_w, int64_t dilation_h,
                              int64_t dilation_w) {
  return op_entry("mt_conv2d_ex", out, [&] {
    return ops::conv2d(tensor_arg(x, "x"), tensor_arg(w, "w"), optional_tensor_arg(bias, "bias"), stride_h, stride_w,
                       pad_h, pad_w, dilation_h, dilation_w);
  });
}

MT_API mt_status mt_set_conv_algo(int64_t algo, int64_t *previous) {
  return guard("mt_set_conv_algo", [&] {
    const int64_t prev = ops::set_conv_algo(algo);
    if (previous) *previous = prev;
  });
}

MT_API mt_status mt_max_pool2d(mt_tensor **out, mt_tensor *x, int64_t kernel, int64_t stride) {
  return op_entry("mt_max_pool2d", out, [&] { return ops::max_pool2d(tensor_arg(x, "x"), kernel, stride); });
}

MT_API mt_status mt_avg_pool2d(mt_tensor **out, mt_tensor *x, int64_t kernel, int64_t stride) {
  return op_entry("mt_avg_pool2d", out, [&] { return ops::avg_pool2d(tensor_arg(x, "x"), kernel, stride); });
}

MT_API mt_status mt_batch_norm(mt_tensor **out, mt_tensor *x, mt_tensor *gamma, mt_tensor *beta,
                               mt_tensor *running_mean, mt_tensor *running_var, int64_t training, double momentum,
                               double eps) {
  return op_entry("mt_batch_norm", out, [&] {
    return ops::batch_norm(tensor_arg(x, "x"), optional_tensor_arg(gamma, "gamma"), optional_tensor_arg(beta, "beta"),
                           optional_tensor_arg(running_mean, "running_mean"),
                           optional_tensor_arg(running_var, "running_var"), training != 0, momentum, eps);
  });
}

}  // extern "C"
