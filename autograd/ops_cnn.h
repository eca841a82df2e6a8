// ops_cnn.h - the differentiable ops of the convolutional-network family (ops_cnn.cpp):
// conv2d, max_pool2d, avg_pool2d, batch_norm, and the CUDA convolution path switch.
// Tensors are NCHW; the rules of each op are those of its mt_ function in minitorch.h.
//
// defines: ops::conv2d, ops::set_conv_algo, ops::max_pool2d, ops::avg_pool2d, ops::batch_norm
#pragma once

#include "ops.h"

namespace mt {
namespace ops {

// y [N,K,Ho,Wo] = x [N,C,H,W] (*) w [K,C,R,S] + bias [K] (bias may be null).
Ref conv2d(const Ref &x, const Ref &w, const Ref &bias, int64_t stride_h, int64_t stride_w, int64_t pad_h,
           int64_t pad_w, int64_t dil_h, int64_t dil_w);
// 0 auto, 1 im2col + GEMM, 2 cuDNN (Error(UNSUPPORTED) without cuDNN); returns the previous.
int64_t set_conv_algo(int64_t algo);
Ref max_pool2d(const Ref &x, int64_t kernel, int64_t stride);
Ref avg_pool2d(const Ref &x, int64_t kernel, int64_t stride);
// x [N,C,H,W] or [N,C]; gamma, beta, running_mean, running_var [C] or null.
Ref batch_norm(const Ref &x, const Ref &gamma, const Ref &beta, const Ref &running_mean, const Ref &running_var,
               bool training, double momentum, double eps);

}  // namespace ops
}  // namespace mt
