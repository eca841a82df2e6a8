// compare.h - the CUDA launchers of the comparisons and selection family
// (backend/backend.h, section "comparisons and selection"): compare.cu.
//
// Each has the arguments and semantics of the Backend method of the same name, preceded
// by the context whose stream it queues on; none synchronizes or allocates. Dtypes:
// compare and where take every dtype (float16/bfloat16 compare in float), pow the
// floating ones.
//
// defines: compare, where, pow
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace mt {
namespace cuda {

class Context;

void compare(Context &c, Backend::Compare op, uint8_t *out, const void *a, const void *b, const BroadcastPlan &plan,
             DType dtype);
void where(Context &c, void *out, const uint8_t *cond, const void *a, const void *b, const Backend::WherePlan &plan,
           DType dtype);
void pow(Context &c, void *out, const void *a, const void *b, const BroadcastPlan &plan, DType dtype);

}  // namespace cuda
}  // namespace mt
