// ops_attention.h - fused attention as one recorded op: FLASH_ATTENTION, the forward and
// backward kernels of backend/cuda/attention/ behind ops::scaled_dot_product_attention whenever
// they apply (nn_ops.cpp), and SELF_ATTENTION, the same over the heads of one packed q|k|v
// projection. The composed path stays as their reference.
//
// defines: ops::flash_attention, ops::flash_attention_applies, ops::self_attention
#pragma once

#include "ops.h"

namespace mt {
namespace ops {

// softmax(scale q k^T (+ causal mask: key j hidden from query i when j > i + S - T)) v for
// q [B, H, T, D], k, v [B, H, S, D] of one dtype on a device whose backend takes it (CUDA:
// float16 / bfloat16 with D 64 or 128, float32 with D 16 or 32); scale <= 0 means 1/sqrt(D). Saves the row
// log-sum-exp (f32 [B, H, T]) for the backward; never materializes T x S.
Ref flash_attention(const Ref &q, const Ref &k, const Ref &v, bool causal, double scale);
// Whether flash_attention takes (q, k, v, causal): same device, dtype and backend support,
// 4-D with matching B, H, D, 16-byte aligned data, and no query row left without a key
// (causal with S < T would leave rows fully masked: the composed path's NaN rows).
bool flash_attention_applies(const Ref &q, const Ref &k, const Ref &v, bool causal);
// Multi-head self-attention of a packed projection qkv [B, T, 3 D] (columns q, then k, then v;
// head h at columns h Dh .. (h + 1) Dh of each, Dh = D / heads): out [B, T, D], head h's
// softmax(scale q k^T (+ causal mask)) v at columns h Dh of each row; scale <= 0 means
// 1/sqrt(Dh). Where the backend reads heads at strides (CUDA: float32, Dh 16 or 32) it is one
// SELF_ATTENTION node that never copies a head; elsewhere it records the composition: reshape to
// [B, T, 3, H, Dh], permute to [3, B, H, T, Dh], slice, scaled_dot_product_attention, permute
// back to [B, T, H, Dh], reshape.
Ref self_attention(const Ref &qkv, int64_t heads, bool causal, double scale);

}  // namespace ops
}  // namespace mt
