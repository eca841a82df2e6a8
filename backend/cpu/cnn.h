// cnn.h - the CPU reference of the convolutional-network family (backend/backend.h,
// section "convolutional networks"); cpu_backend.cpp wires it. Float32 and float64.
//
// defines: cpu::conv2d, cpu::conv2d_backward_data, cpu::conv2d_backward_filter,
//          cpu::max_pool2d, cpu::max_pool2d_backward, cpu::avg_pool2d,
//          cpu::avg_pool2d_backward, cpu::batch_norm, cpu::batch_norm_backward
#pragma once

#include "backend/backend.h"

namespace mt {
namespace cpu {

void conv2d(void *y, const void *x, const void *w, const void *bias, const Backend::Conv2dArgs &a);
void conv2d_backward_data(void *dx, const void *dy, const void *w, const Backend::Conv2dArgs &a);
void conv2d_backward_filter(void *dw, const void *dy, const void *x, const Backend::Conv2dArgs &a);
void max_pool2d(void *y, int64_t *indices, const void *x, const Backend::Pool2dArgs &a);
void max_pool2d_backward(void *dx, const int64_t *indices, const void *dy, const Backend::Pool2dArgs &a);
void avg_pool2d(void *y, const void *x, const Backend::Pool2dArgs &a);
void avg_pool2d_backward(void *dx, const void *dy, const Backend::Pool2dArgs &a);
void batch_norm(void *y, void *mean, void *invstd, const void *x, const void *gamma, const void *beta,
                void *running_mean, void *running_var, const Backend::BatchNormArgs &a);
void batch_norm_backward(void *dx, void *dgamma, void *dbeta, const void *dy, const void *x, const void *mean,
                         const void *invstd, const void *gamma, const Backend::BatchNormArgs &a);

}  // namespace cpu
}  // namespace mt
