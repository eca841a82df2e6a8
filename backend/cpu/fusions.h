// fusions.h - the CPU reference of the fused ops for transformer and MLP blocks (backend/backend.h,
// section "fusions"); cpu_backend.cpp wires it.
//
// defines: cpu::bias_act, cpu::bias_act_backward, cpu::add_layer_norm, cpu::dropout_add
#pragma once

#include "backend/backend.h"

namespace mt {
namespace cpu {

// float32 and float64, the semantics of the Backend methods of the same names.
void bias_act(void *y, const void *x, const void *bias, int64_t rows, int64_t n, Backend::Activation act, DType dtype);
void bias_act_backward(void *dx, void *dbias, const void *dy, const void *x, const void *bias, int64_t rows, int64_t n,
                       Backend::Activation act, DType dtype);
void add_layer_norm(void *s, void *y, void *mean, void *rstd, const void *x, const void *residual, const void *gamma,
                    const void *beta, int64_t rows, int64_t d, double eps, DType dtype);
void dropout_add(void *out, const void *x, const void *residual, int64_t n, double p, uint64_t seed, DType dtype);

}  // namespace cpu
}  // namespace mt
