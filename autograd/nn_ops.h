// nn_ops.h - the transformer's building blocks as compositions of recorded
// primitives (each primitive is gradchecked, so each composition's backward is
// the chain of theirs). A fused kernel may replace one when it is measurably
// faster; the composition then stays as its test reference.
//
// defines: ops::gelu, ops::layer_norm (+ *_composed), ops::causal_mask, ops::embedding, ops::dropout, ops::masked_fill,
//          ops::cat, ops::scaled_dot_product_attention
#pragma once

#include "ops.h"

namespace mt {
namespace ops {

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), PyTorch's approximate='tanh'.
// One fused op (GELU, ops_fused.cpp); gelu_composed is the same function built from
// recorded primitives, kept as its test reference.
Ref gelu(const Ref &x);
Ref gelu_composed(const Ref &x);
// Over the last dim: (x - mean) / sqrt(var + eps) * gamma + beta, var biased as PyTorch.
// gamma and beta ([D]) may be null. One fused op (LAYER_NORM, ops_fused.cpp) that saves the
// row mean and rstd for its backward; layer_norm_composed is its test reference.
Ref layer_norm(const Ref &x, const Ref &gamma, const Ref &beta, double eps);
Ref layer_norm_composed(const Ref &x, const Ref &gamma, const Ref &beta, double eps);
// The checks both layer_norm forms make: x at least 1-D and floating, eps >= 0, gamma and
// beta (when given) [D] of x's dtype and device.
void check_layer_norm_args(const Ref &x, const Ref &gamma, const Ref &beta, double eps);
// [T, S] uint8 on device: 1 where key j is in the future of query i (j > i + S - T), built
// by a kernel where the tensor lives (no host copy, so it can be recorded into a graph).
Ref causal_mask(int64_t T, int64_t S, Device device);
// weight [V, D] rows at int64 indices of any shape: out [..., D]. Repeated indices
// accumulate in the backward (index_select's deterministic index_add).
Ref embedding(const Ref &weight, const Ref &indices);
// Zeroes elements with probability p and scales the rest by 1/(1-p); the mask comes from
// the seeded counter-based stream, so a seed gives the same mask on every device.
Ref dropout(const Ref &x, double p, uint64_t seed);
// x where mask (uint8, broadcast to x) is 0, value where it is 1; differentiable in x.
Ref masked_fill(const Ref &x, const Ref &mask, double value);
// Concatenation along dim (the other dims equal); differentiable in every input.
Ref cat(const std::vector<Ref> &xs, int64_t dim);
// softmax(q k^T * scale (+ causal mask)) v over [B, H, T, D] (any leading dims);
// scale <= 0 means 1/sqrt(D).
Ref scaled_dot_product_attention(const Ref &q, const Ref &k, const Ref &v, bool causal, double scale);

// ---- fusions (ops_fusions.cpp): one pass over memory where a transformer or MLP block
// would make two or three. Each equals its composition (named beside it) up to float rounding
// (bit for bit on the CPU), and the composition is its test reference.
// act(x + bias), bias [n] broadcast over the last dim of x [..., n] (act(add(x, bias))): one
// op (BIAS_ACT) whose backward writes dx and the column sums dbias in one pass.
Ref bias_act(const Ref &x, const Ref &bias, Backend::Activation act);
// {s, y}: s = x + residual (same shapes), y = layer_norm(s, gamma, beta, eps), both
// differentiable, from one kernel that reads x and residual once. Recorded as two nodes: ADD
// (s from x and residual) and LAYER_NORM (y from s, with the row statistics saved), so the
// gradient of x and residual is ds + dLN(dy) by the tape's own accumulation.
std::pair<Ref, Ref> add_layer_norm(const Ref &x, const Ref &residual, const Ref &gamma, const Ref &beta, double eps);
// residual + dropout(x, p, seed) (add(residual, dropout(x, p, seed)), bit for bit on one
// device); x and residual of one shape. One op (DROPOUT_ADD) that keeps no mask: its backward
// draws it again from the seed. p == 0 is add(residual, x).
Ref dropout_add(const Ref &x, const Ref &residual, double p, uint64_t seed);
// ---- end fusions

}  // namespace ops
}  // namespace mt
