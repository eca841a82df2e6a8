// fused.h - the CPU reference of the fused transformer kernels (backend/backend.h, section
// "fused transformer kernels"); cpu_backend.cpp wires it.
//
// defines: cpu::layer_norm, cpu::layer_norm_backward, cpu::gelu, cpu::gelu_backward,
//          cpu::causal_mask
#pragma once

#include "backend/backend.h"

namespace mt {
namespace cpu {

// float32 and float64 (the stats in the dtype of Backend::layer_norm_stats_dtype).
void layer_norm(void *y, void *mean, void *rstd, const void *x, const void *gamma, const void *beta, int64_t rows,
                int64_t d, double eps, DType dtype);
void layer_norm_backward(void *dx, const void *dx_add, void *dgamma, void *dbeta, const void *dy, const void *x,
                         const void *mean, const void *rstd, const void *gamma, int64_t rows, int64_t d, DType dtype);
void gelu(void *y, const void *x, int64_t n, DType dtype);
void gelu_backward(void *dx, const void *dy, const void *x, int64_t n, DType dtype);
void causal_mask(uint8_t *out, int64_t t, int64_t s);

}  // namespace cpu
}  // namespace mt
