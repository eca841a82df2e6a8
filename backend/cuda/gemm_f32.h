// gemm_f32.h - the float32 GEMM on TF32 tensor cores with float32 accuracy (gemm_f32.cu).
#pragma once

#include "backend/backend.h"

namespace mt {
namespace cuda {

// Runs the product (alpha included, with the bias and a_sums where asked for) on the context's
// stream and returns true, or returns false without doing anything where the
// kernel does not apply (not float32, TF32 allowed, beta != 0, both operands transposed, too
// small, or operands that 16-byte copies cannot read): matmul.cu then takes cuBLAS.
bool launch_gemm_f32(const MatmulArgs &g);

}  // namespace cuda
}  // namespace mt
