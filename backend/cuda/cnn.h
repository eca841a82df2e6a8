// cnn.h - the CUDA launchers of the convolutional-network family (backend/backend.h,
// section "convolutional networks"): cnn.cu (im2col + cuBLAS GEMM, the direct kernels,
// pools, batch norm, the choice between the conv paths) and cudnn.cu (the cuDNN conv path).
//
// Each has the arguments and semantics of the Backend method of the same name, preceded
// by the context whose stream it queues on. Float32 and float64 (the cuDNN path takes
// float32; float64 convolutions take im2col or the direct kernels). Temporaries come from the context's
// pool; nothing synchronizes except the one-time timing of the conv paths for a new
// shape (algo 0, never while a graph is being recorded).
//
// defines: conv2d, conv2d_backward_data, conv2d_backward_filter, max_pool2d,
//          max_pool2d_backward, avg_pool2d, avg_pool2d_backward, batch_norm,
//          batch_norm_backward, cudnn_available, cudnn_conv2d, cudnn_conv2d_backward_data,
//          cudnn_conv2d_backward_filter
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace mt {
namespace cuda {

class Context;
using Conv2dArgs = Backend::Conv2dArgs;
using Pool2dArgs = Backend::Pool2dArgs;
using BatchNormArgs = Backend::BatchNormArgs;

// cnn.cu
void conv2d(Context &c, void *y, const void *x, const void *w, const void *bias, const Conv2dArgs &a);
void conv2d_backward_data(Context &c, void *dx, const void *dy, const void *w, const Conv2dArgs &a);
void conv2d_backward_filter(Context &c, void *dw, const void *dy, const void *x, const Conv2dArgs &a);
void max_pool2d(Context &c, void *y, int64_t *indices, const void *x, const Pool2dArgs &a);
void max_pool2d_backward(Context &c, void *dx, const int64_t *indices, const void *dy, const Pool2dArgs &a);
void avg_pool2d(Context &c, void *y, const void *x, const Pool2dArgs &a);
void avg_pool2d_backward(Context &c, void *dx, const void *dy, const Pool2dArgs &a);
void batch_norm(Context &c, void *y, void *mean, void *invstd, const void *x, const void *gamma, const void *beta,
                void *running_mean, void *running_var, const BatchNormArgs &a);
void batch_norm_backward(Context &c, void *dx, void *dgamma, void *dbeta, const void *dy, const void *x,
                         const void *mean, const void *invstd, const void *gamma, const BatchNormArgs &a);

// cudnn.cu: float32 NCHW convolutions without bias (y, dx, dw written). cudnn_available()
// is false in a build without cuDNN, where the others throw Error(UNSUPPORTED).
bool cudnn_available();
void cudnn_conv2d(Context &c, void *y, const void *x, const void *w, const Conv2dArgs &a);
void cudnn_conv2d_backward_data(Context &c, void *dx, const void *dy, const void *w, const Conv2dArgs &a);
void cudnn_conv2d_backward_filter(Context &c, void *dw, const void *dy, const void *x, const Conv2dArgs &a);

}  // namespace cuda
}  // namespace mt
