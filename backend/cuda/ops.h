// ops.h - the CUDA launchers behind mt::Backend (cuda_backend.cu wires them up).
//
// Each launcher validates its arguments, queues work on the context stream and
// returns without synchronizing; arguments and semantics are those of the matching
// Backend method in backend/backend.h.
//
// defines: launch_fill, launch_arange, launch_unary, launch_binary, launch_sum_reduce,
//          launch_squared_diff_sum, launch_matmul, launch_permute, launch_cast,
//          launch_sgd_step
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace mt {
namespace cuda {

// elementwise.cu
void launch_fill(void *out, int64_t n, DType dtype, double value);
void launch_arange(void *out, int64_t n, DType dtype, double start, double step);
void launch_fill_uniform(void *out, int64_t n, DType dtype, uint64_t seed);
void launch_unary(Unary op, void *out, const void *x, int64_t n, DType dtype, double s);
void launch_binary(Binary op, void *out, const void *a, const void *b, const BroadcastPlan &plan,
                   DType dtype);

// reduce.cu
void launch_sum_reduce(void *out, const void *x, int64_t outer, int64_t reduce, int64_t inner,
                       DType dtype, double scale, double beta);
void launch_squared_diff_sum(void *out, const void *a, const void *b, int64_t n, DType dtype,
                             double scale);

// matmul.cu
// true when the extras (bias, a_sums) were done with the product; else the caller does them
bool launch_matmul(const MatmulArgs &args);

// permute.cu
void launch_permute(void *out, const void *x, const int64_t *shape, const int64_t *perm, int ndim,
                    DType dtype);
void launch_cast(void *out, DType out_dtype, const void *x, DType x_dtype, int64_t n);

// optim.cu
void launch_sgd_step(const SgdArgs &args);

}  // namespace cuda
}  // namespace mt
