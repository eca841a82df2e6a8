// mse.h - the CUDA launcher of the fused MSE backward (backend/backend.h, section "fused MSE
// backward"): mse.cu. Same arguments and semantics as the Backend method, preceded by the
// context whose stream it queues on; it neither synchronizes nor allocates.
//
// defines: mse_backward
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace mt {
namespace cuda {

class Context;

// float32, float64, float16, bfloat16.
void mse_backward(Context &c, void *dpred, void *dtarget, const void *pred, const void *target, const void *dloss,
                  int64_t n, DType dtype, double scale);

}  // namespace cuda
}  // namespace mt
