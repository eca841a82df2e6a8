// compare.h - the CPU reference of the comparisons and selection family
// (backend/backend.h, section "comparisons and selection"); cpu_backend.cpp wires it.
//
// defines: cpu::compare, cpu::where, cpu::pow
#pragma once

#include "backend/backend.h"

namespace mt {
namespace cpu {

// float32, float64, int32, int64, uint8 (float16/bfloat16 are storage-only on the CPU).
void compare(Backend::Compare op, uint8_t *out, const void *a, const void *b, const BroadcastPlan &plan,
             DType dtype);
// Every dtype (elements are copied as bytes).
void where(void *out, const uint8_t *cond, const void *a, const void *b, const Backend::WherePlan &plan,
           DType dtype);
// float32 and float64.
void pow(void *out, const void *a, const void *b, const BroadcastPlan &plan, DType dtype);

}  // namespace cpu
}  // namespace mt
