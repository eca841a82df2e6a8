// fused.h - the CUDA launchers of the fused transformer kernels (backend/backend.h, section
// "fused transformer kernels"): fused.cu.
//
// Each has the arguments and semantics of the Backend method of the same name, preceded by
// the context whose stream it queues on; none synchronizes, and the only memory they take is
// pool scratch (layer_norm_backward's column partials), so all of them can be recorded into
// a graph. Dtypes: float32, float64, float16, bfloat16 (statistics in float, double for F64).
//
// defines: layer_norm, layer_norm_backward, gelu, gelu_backward, causal_mask
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace mt {
namespace cuda {

class Context;

void layer_norm(Context &c, void *y, void *mean, void *rstd, const void *x, const void *gamma, const void *beta,
                int64_t rows, int64_t d, double eps, DType dtype);
void layer_norm_backward(Context &c, void *dx, const void *dx_add, void *dgamma, void *dbeta, const void *dy,
                         const void *x, const void *mean, const void *rstd, const void *gamma, int64_t rows, int64_t d,
                         DType dtype);
void gelu(Context &c, void *y, const void *x, int64_t n, DType dtype);
void gelu_backward(Context &c, void *dx, const void *dy, const void *x, int64_t n, DType dtype);
void causal_mask(Context &c, uint8_t *out, int64_t t, int64_t s);

}  // namespace cuda
}  // namespace mt
