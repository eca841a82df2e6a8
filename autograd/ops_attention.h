// ops_attention.h - FlashAttention as one recorded op (FLASH_ATTENTION): the fused forward
// and backward kernels of backend/cuda/attention/, behind ops::scaled_dot_product_attention
// whenever they apply (nn_ops.cpp). The composed path stays as its reference.
//
// defines: ops::flash_attention, ops::flash_attention_applies
#pragma once

#include "ops.h"

namespace mt {
namespace ops {

// softmax(scale q k^T (+ causal mask: key j hidden from query i when j > i + S - T)) v for
// q [B, H, T, D], k, v [B, H, S, D] of one 16-bit dtype on a device whose backend takes it
// (CUDA: float16 / bfloat16, D 64 or 128); scale <= 0 means 1/sqrt(D). Saves the row
// log-sum-exp (f32 [B, H, T]) for the backward; never materializes T x S.
Ref flash_attention(const Ref &q, const Ref &k, const Ref &v, bool causal, double scale);
// Whether flash_attention takes (q, k, v, causal): same device, dtype and backend support,
// 4-D with matching B, H, D, 16-byte aligned data, and no query row left without a key
// (causal with S < T would leave rows fully masked: the composed path's NaN rows).
bool flash_attention_applies(const Ref &q, const Ref &k, const Ref &v, bool causal);

}  // namespace ops
}  // namespace mt
