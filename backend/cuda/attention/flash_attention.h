// flash_attention.h - the CUDA launchers of the FlashAttention family (backend/backend.h,
// section "FlashAttention"): flash_forward.cu, flash_backward.cu, flash_attention.cu.
//
// Layout [BH, T, D] contiguous (B and H folded), 16-bit floats (float16, bfloat16), head
// dim 64 or 128, f32 accumulation. lse is f32 (BH, Tq), natural log. The causal mask hides
// key j from query i when j > i + (Tk - Tq). Both queue on the context's stream; neither
// synchronizes; temporaries come from the pool.
//
// defines: flash_attention_supported, flash_attention_forward, flash_attention_backward
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace mt {
namespace cuda {

class Context;

bool flash_attention_supported(DType dtype, int64_t d);
// o (BH, Tq, D), lse (BH, Tq) written from q (BH, Tq, D), k, v (BH, Tk, D).
void flash_attention_forward(Context &c, void *o, float *lse, const void *q, const void *k, const void *v, int64_t bh,
                             int64_t tq, int64_t tk, int64_t d, DType dtype, double scale, bool causal);
// dq (BH, Tq, D), dk, dv (BH, Tk, D) written from the forward's inputs, its o and lse, and dout (BH, Tq, D).
void flash_attention_backward(Context &c, void *dq, void *dk, void *dv, const void *q, const void *k, const void *v,
                              const void *o, const float *lse, const void *dout, int64_t bh, int64_t tq, int64_t tk,
                              int64_t d, DType dtype, double scale, bool causal);

}  // namespace cuda
}  // namespace mt
