// fusions.h - the CUDA launchers of the fused ops of transformer and MLP blocks (backend/backend.h,
// section "fusions"): fusions.cu.
//
// Each has the arguments and semantics of the Backend method of the same name, preceded by the
// context whose stream it queues on; none synchronizes, and the only memory they take is pool
// scratch (bias_act_backward's column partials), so all of them can be recorded into a graph.
// Dtypes: float32, float64, float16, bfloat16 (arithmetic in float, double for float64).
//
// defines: bias_act, bias_act_backward, add_layer_norm, dropout_add
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace mt {
namespace cuda {

class Context;

void bias_act(Context &c, void *y, const void *x, const void *bias, int64_t rows, int64_t n, Backend::Activation act,
              DType dtype);
void bias_act_backward(Context &c, void *dx, void *dbias, const void *dy, const void *x, const void *bias,
                       int64_t rows, int64_t n, Backend::Activation act, DType dtype);
void add_layer_norm(Context &c, void *s, void *y, void *mean, void *rstd, const void *x, const void *residual,
                    const void *gamma, const void *beta, int64_t rows, int64_t d, double eps, DType dtype);
void dropout_add(Context &c, void *out, const void *x, const void *residual, int64_t n, double p, uint64_t seed,
                 DType dtype);

}  // namespace cuda
}  // namespace mt
