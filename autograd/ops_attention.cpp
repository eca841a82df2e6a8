// ops_attention.cpp - the fused attention ops: FLASH_ATTENTION (ops::flash_attention, heads
// [B, H, T, D]) and SELF_ATTENTION (ops::self_attention, heads read from a packed q|k|v
// projection and written side by side), their forwards and their backward rule
// (backward_attention), each one backend call (backend.h, section "FlashAttention"). The table
// rows are in docs/derivatives.md.
#include "ops_attention.h"

#include <cmath>

#include "nn_ops.h"

namespace mt {

std::vector<Ref> &last_node_saved();  // tape.cpp

namespace {

bool aligned16(const Ref &x) { return ((uintptr_t)x->data() & 15u) == 0; }

// B * H, T, S, D of a checked problem.
struct Dims {
  int64_t bh, t, s, d;
};

Dims check_flash_args(const Ref &q, const Ref &k, const Ref &v, double scale) {
  MT_CHECK(q->ndim() == 4 && k->ndim() == 4 && v->ndim() == 4, SHAPE,
           "q, k, v must be [B, H, T, D]: q is %s, k is %s, v is %s", shape_str(q->shape).c_str(),
           shape_str(k->shape).c_str(), shape_str(v->shape).c_str());
  const Shape &qs = q->shape, &ks = k->shape;
  MT_CHECK(ks == v->shape && ks[0] == qs[0] && ks[1] == qs[1] && ks[3] == qs[3], SHAPE,
           "q is %s, k is %s, v is %s: expected k and v [%lld, %lld, S, %lld]", shape_str(qs).c_str(),
           shape_str(ks).c_str(), shape_str(v->shape).c_str(), (long long)qs[0], (long long)qs[1], (long long)qs[3]);
  MT_CHECK(q->device == k->device && q->device == v->device, DEVICE, "q, k, v on different devices: %s, %s, %s",
           device_name_short(q->device), device_name_short(k->device), device_name_short(v->device));
  MT_CHECK(q->dtype == k->dtype && q->dtype == v->dtype, DTYPE, "q, k, v dtypes differ: %s, %s, %s",
           dtype_name(q->dtype), dtype_name(k->dtype), dtype_name(v->dtype));
  MT_CHECK(q->backend().flash_attention_supported(q->dtype, qs[3]), UNSUPPORTED,
           "flash attention does not take %s with head dim %lld on the %s backend (CUDA: float16 or bfloat16 with "
           "head dim 64 or 128, float32 with head dim 16 or 32)",
           dtype_name(q->dtype), (long long)qs[3], device_name_short(q->device));
  MT_CHECK(std::isfinite(scale), INVALID_ARGUMENT, "scale must be finite, got %g", scale);
  for (const Ref *x : {&q, &k, &v})
    MT_CHECK(aligned16(*x), INVALID_ARGUMENT, "%s's data is not 16-byte aligned", x == &q ? "q" : x == &k ? "k" : "v");
  return {qs[0] * qs[1], qs[2], ks[2], qs[3]};
}

double effective_scale(double scale, int64_t d) { return scale > 0 ? scale : 1.0 / std::sqrt((double)d); }

// The geometry of qkv [B, T, 3 H Dh] read as q, k, v (offsets 0, D, 2 D) and out [B, T, H Dh].
AttentionGeometry packed_geometry(const Shape &qkv, int64_t heads) {
  const int64_t B = qkv[0], T = qkv[1], D = qkv[2] / 3;
  AttentionGeometry g;
  g.b = B;
  g.h = heads;
  g.tq = g.tk = T;
  g.d = D / heads;
  g.q = g.k = g.v = HeadStrides{T * 3 * D, g.d, 3 * D};
  g.o = HeadStrides{T * D, g.d, D};
  return g;
}

// Whether the backend's strided kernels take qkv with this many heads (a grid row per head of
// each batch: B * H <= 65535).
bool self_attention_fused(const Ref &qkv, int64_t heads, int64_t dh) {
  return qkv->numel() > 0 && qkv->shape[0] * heads <= 65535 && qkv->shape[1] < (1LL << 30) && aligned16(qkv) &&
         qkv->backend().strided_attention_supported(qkv->dtype, dh);
}

}  // namespace

namespace ops {

bool flash_attention_applies(const Ref &q, const Ref &k, const Ref &v, bool causal) {
  if (q->ndim() != 4 || k->ndim() != 4 || v->ndim() != 4) return false;
  if (q->device != k->device || q->device != v->device || q->dtype != k->dtype || q->dtype != v->dtype) return false;
  const Shape &qs = q->shape, &ks = k->shape;
  if (ks != v->shape || ks[0] != qs[0] || ks[1] != qs[1] || ks[3] != qs[3]) return false;
  if (causal && ks[2] < qs[2]) return false;
  if (q->numel() == 0 || k->numel() == 0) return false;
  if (!aligned16(q) || !aligned16(k) || !aligned16(v)) return false;
  if (q->device == Device::CPU) return false;  // the CPU backend has no flash kernels
  return q->backend().flash_attention_supported(q->dtype, qs[3]);
}

Ref flash_attention(const Ref &q, const Ref &k, const Ref &v, bool causal, double scale) {
  const Dims n = check_flash_args(q, k, v, scale);
  const double s = effective_scale(scale, n.d);
  Ref out = empty(q->shape, q->dtype, q->device);
  Ref lse = empty({q->shape[0], q->shape[1], n.t}, DType::F32, q->device);
  q->backend().flash_attention(out->data(), (float *)lse->data(), q->data(), k->data(), v->data(), n.bh, n.t, n.s, n.d,
                               q->dtype, s, causal);
  record(Op::FLASH_ATTENTION, out, {q, k, v}, s, {causal ? 1 : 0});
  if (out->requires_grad && grad_enabled()) last_node_saved().push_back(lse);
  return out;
}

Ref self_attention(const Ref &qkv, int64_t heads, bool causal, double scale) {
  MT_CHECK(qkv->ndim() == 3, SHAPE, "qkv must be [B, T, 3 D], got %s", shape_str(qkv->shape).c_str());
  MT_CHECK(heads >= 1, INVALID_ARGUMENT, "heads must be >= 1, got %lld", (long long)heads);
  const int64_t B = qkv->shape[0], T = qkv->shape[1], D3 = qkv->shape[2];
  MT_CHECK(D3 % (3 * heads) == 0 && D3 > 0, SHAPE,
           "qkv is %s: its last dim must be 3 * heads * head dim with heads %lld", shape_str(qkv->shape).c_str(),
           (long long)heads);
  MT_CHECK(std::isfinite(scale), INVALID_ARGUMENT, "scale must be finite, got %g", scale);
  const int64_t D = D3 / 3, Dh = D / heads;
  if (!self_attention_fused(qkv, heads, Dh)) {  // the composition, on every backend
    Ref p = permute(reshape(qkv, {B, T, 3, heads, Dh}), {2, 0, 3, 1, 4});  // [3, B, H, T, Dh]
    Ref q = reshape(slice(p, 0, 0, 1), {B, heads, T, Dh}), k = reshape(slice(p, 0, 1, 2), {B, heads, T, Dh}),
        v = reshape(slice(p, 0, 2, 3), {B, heads, T, Dh});
    Ref y = scaled_dot_product_attention(q, k, v, causal, scale);  // [B, H, T, Dh]
    return reshape(permute(y, {0, 2, 1, 3}), {B, T, D});
  }
  const double s = effective_scale(scale, Dh);
  const AttentionGeometry g = packed_geometry(qkv->shape, heads);
  Ref out = empty({B, T, D}, qkv->dtype, qkv->device);
  Ref lse = empty({B, heads, T}, DType::F32, qkv->device);
  const char *base = (const char *)qkv->data();
  const int64_t blk = D * (int64_t)dtype_size(qkv->dtype);
  qkv->backend().strided_attention(g, out->data(), (float *)lse->data(), base, base + blk, base + 2 * blk, qkv->dtype,
                                   s, causal);
  record(Op::SELF_ATTENTION, out, {qkv}, s, {heads, causal ? 1 : 0});
  if (out->requires_grad && grad_enabled()) last_node_saved().push_back(lse);
  return out;
}

}  // namespace ops

// dq, dk, dv from one fused backward (recomputing P blockwise from q, k and the saved lse);
// the kernel writes all three, those not needed are dropped.
void backward_attention(const Node &node, const Ref &g, std::vector<Ref> &grads) {
  using namespace ops;
  if (node.op == Op::SELF_ATTENTION) {  // dqkv, every element written by the one backward
    MT_ASSERT(node.in.size() == 1 && node.saved.size() == 1 && node.ints.size() == 2);
    const Ref &qkv = node.in[0], &lse = node.saved[0], &out = node.out;
    Ref dout = g;
    if (dout->dtype != qkv->dtype) dout = cast(dout, qkv->dtype);
    if (!aligned16(dout)) dout = clone(dout);
    MT_ASSERT(dout->shape == out->shape);
    const AttentionGeometry geo = packed_geometry(qkv->shape, node.ints[0]);
    Ref dqkv = empty(qkv->shape, qkv->dtype, qkv->device);
    const char *x = (const char *)qkv->data();
    char *dx = (char *)dqkv->data();
    const int64_t blk = geo.h * geo.d * (int64_t)dtype_size(qkv->dtype);
    qkv->backend().strided_attention_backward(geo, dx, dx + blk, dx + 2 * blk, x, x + blk, x + 2 * blk, out->data(),
                                              (const float *)lse->data(), dout->data(), qkv->dtype, node.scalar,
                                              node.ints[1] != 0);
    grads[0] = dqkv;
    return;
  }
  MT_ASSERT(node.op == Op::FLASH_ATTENTION && node.in.size() == 3 && node.saved.size() == 1);
  const Ref &q = node.in[0], &k = node.in[1], &v = node.in[2], &lse = node.saved[0], &out = node.out;
  const Dims n = check_flash_args(q, k, v, node.scalar);
  Ref dout = g;
  if (dout->dtype != q->dtype) dout = cast(dout, q->dtype);
  if (!aligned16(dout)) dout = clone(dout);
  MT_ASSERT(dout->shape == q->shape);
  Ref dq = empty(q->shape, q->dtype, q->device), dk = empty(k->shape, k->dtype, k->device),
      dv = empty(v->shape, v->dtype, v->device);
  q->backend().flash_attention_backward(dq->data(), dk->data(), dv->data(), q->data(), k->data(), v->data(),
                                        out->data(), (const float *)lse->data(), dout->data(), n.bh, n.t, n.s, n.d,
                                        q->dtype, node.scalar, node.ints.at(0) != 0);
  const Ref *gs[3] = {&dq, &dk, &dv};
  for (size_t i = 0; i < 3; i++)
    if (node.in[i]->requires_grad) grads[i] = *gs[i];
}

}  // namespace mt
