// mse.h - the CPU reference of the fused MSE backward (backend/backend.h, section "fused MSE
// backward"); cpu_backend.cpp wires it.
//
// defines: cpu::mse_backward
#pragma once

#include "backend/backend.h"

namespace mt {
namespace cpu {

// float32 and float64.
void mse_backward(void *dpred, void *dtarget, const void *pred, const void *target, const void *dloss, int64_t n,
                  DType dtype, double scale);

}  // namespace cpu
}  // namespace mt
