// attention_f32.h - float32 attention on CUDA with strided heads (attention_f32.cu): the
// kernels behind Backend::strided_attention and, for [B, H, T, D] float32 tensors,
// Backend::flash_attention.
//
// Head dims 16 and 32; every operand 16-byte aligned with strides that are multiples of 4
// floats. lse is f32 [B * H, Tq], natural log (+inf for a row with no key). The causal mask hides
// key j from query i when j > i + (Tk - Tq), and needs Tk >= Tq. Both queue on the context's
// stream; neither synchronizes; the backward's temporary comes from the pool.
//
// defines: attention_f32_supported, attention_f32_forward, attention_f32_backward
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace mt {
namespace cuda {

class Context;

bool attention_f32_supported(int64_t d);
// o (at g.o's strides), lse written from q, k, v.
void attention_f32_forward(Context &c, const AttentionGeometry &g, float *o, float *lse, const float *q,
                           const float *k, const float *v, double scale, bool causal);
// dq, dk, dv (at the strides of q, k, v) written from the forward's inputs, its o and lse, and
// dout (at o's strides).
void attention_f32_backward(Context &c, const AttentionGeometry &g, float *dq, float *dk, float *dv, const float *q,
                            const float *k, const float *v, const float *o, const float *lse, const float *dout,
                            double scale, bool causal);

}  // namespace cuda
}  // namespace mt
