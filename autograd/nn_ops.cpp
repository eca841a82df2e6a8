// nn_ops.cpp - the compositions of nn_ops.h (the fused gelu, layer_norm and causal_mask are in ops_fused.cpp).
#include "nn_ops.h"
#include "ops_attention.h"

#include <cmath>

namespace mt {
namespace ops {

Ref gelu_composed(const Ref &x) {
  const double k = std::sqrt(2.0 / M_PI);
  Ref inner = mul_scalar(add(x, mul_scalar(pow_scalar(x, 3.0), 0.044715)), k);
  return mul(mul_scalar(x, 0.5), add_scalar(tanh(inner), 1.0));
}

void check_layer_norm_args(const Ref &x, const Ref &gamma, const Ref &beta, double eps) {
  MT_CHECK(x->ndim() >= 1, SHAPE, "x must have at least 1 dim, got %s", shape_str(x->shape).c_str());
  MT_CHECK(dtype_is_float(x->dtype), DTYPE, "x must be a floating tensor, got %s", dtype_name(x->dtype));
  MT_CHECK(eps >= 0, INVALID_ARGUMENT, "eps must be >= 0, got %g", eps);
  const int64_t d = x->shape.back();
  for (const Ref *p : {&gamma, &beta}) {
    if (!*p) continue;
    const char *name = p == &gamma ? "gamma" : "beta";
    MT_CHECK((*p)->ndim() == 1 && (*p)->shape[0] == d, SHAPE, "%s must be [%lld], got %s", name, (long long)d,
             shape_str((*p)->shape).c_str());
    MT_CHECK((*p)->device == x->device, DEVICE, "tensors on different devices: x is %s, %s is %s",
             device_name_short(x->device), name, device_name_short((*p)->device));
    MT_CHECK((*p)->dtype == x->dtype, DTYPE, "dtypes differ: x is %s, %s is %s", dtype_name(x->dtype), name,
             dtype_name((*p)->dtype));
  }
}

Ref layer_norm_composed(const Ref &x, const Ref &gamma, const Ref &beta, double eps) {
  check_layer_norm_args(x, gamma, beta, eps);
  Ref centered = sub(x, mean_dim(x, -1, true));
  Ref var = mean_dim(mul(centered, centered), -1, true);
  Ref y = mul(centered, pow_scalar(add_scalar(var, eps), -0.5));
  if (gamma) y = mul(y, gamma);
  if (beta) y = add(y, beta);
  return y;
}

Ref embedding(const Ref &weight, const Ref &indices) {
  MT_CHECK(weight->ndim() == 2, SHAPE, "weight must be [V, D], got %s", shape_str(weight->shape).c_str());
  MT_CHECK(indices->dtype == DType::I64, DTYPE, "indices must be int64, got %s", dtype_name(indices->dtype));
  Ref flat = reshape(indices, {indices->numel()});
  Ref rows = index_select(weight, flat);
  Shape shape = indices->shape;
  shape.push_back(weight->shape[1]);
  return reshape(rows, shape);
}

Ref dropout(const Ref &x, double p, uint64_t seed) {
  MT_CHECK(p >= 0 && p < 1, INVALID_ARGUMENT, "p must be in [0, 1), got %g", p);
  MT_CHECK(dtype_is_float(x->dtype), DTYPE, "x must be a floating tensor, got %s", dtype_name(x->dtype));
  if (p == 0) return x;
  Ref keep;
  {
    NoGradGuard ng;
    Ref u = rand(x->shape, seed, false, x->dtype, x->device);
    Ref thresh = full({}, p, x->dtype, x->device);
    Ref m = compare(Backend::Compare::GE, u, thresh);            // 1 where kept
    keep = mul_scalar(cast(m, x->dtype), 1.0 / (1.0 - p));       // 0 or 1/(1-p)
  }
  return mul(x, keep);
}

Ref masked_fill(const Ref &x, const Ref &mask, double value) {
  MT_CHECK(mask->dtype == DType::U8, DTYPE, "mask must be uint8, got %s", dtype_name(mask->dtype));
  Ref fill = full({}, value, x->dtype, x->device);  // checks that value fits x's dtype
  return where(mask, fill, x);
}

Ref cat(const std::vector<Ref> &xs, int64_t dim) {
  MT_CHECK(!xs.empty(), INVALID_ARGUMENT, "nothing to concatenate");
  const Ref &x0 = xs[0];
  int64_t d = wrap_dim(dim, x0->ndim());
  Shape shape = x0->shape;
  int64_t total = 0;
  for (size_t i = 0; i < xs.size(); i++) {
    MT_CHECK(xs[i]->ndim() == x0->ndim(), SHAPE, "tensors[%zu] is %s, tensors[0] is %s", i,
             shape_str(xs[i]->shape).c_str(), shape_str(x0->shape).c_str());
    for (int64_t k = 0; k < x0->ndim(); k++)
      MT_CHECK(k == d || xs[i]->shape[(size_t)k] == x0->shape[(size_t)k], SHAPE,
               "tensors[%zu] is %s, tensors[0] is %s: only dim %lld may differ", i, shape_str(xs[i]->shape).c_str(),
               shape_str(x0->shape).c_str(), (long long)d);
    MT_CHECK(xs[i]->dtype == x0->dtype && xs[i]->device == x0->device, DTYPE,
             "tensors[%zu] is %s on %s, tensors[0] is %s on %s", i, dtype_name(xs[i]->dtype),
             device_name_short(xs[i]->device), dtype_name(x0->dtype), device_name_short(x0->device));
    total += xs[i]->shape[(size_t)d];
  }
  shape[(size_t)d] = total;
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; k++) outer *= shape[(size_t)k];
  for (int64_t k = d + 1; k < (int64_t)shape.size(); k++) inner *= shape[(size_t)k];
  Ref out = empty(shape, x0->dtype, x0->device);
  std::vector<int64_t> ints = {d};
  int64_t at = 0;
  for (const Ref &x : xs) {
    int64_t len = x->shape[(size_t)d];
    if (x->numel()) x->backend().slice_backward(out->data(), x->data(), outer, total, inner, at, len, x->dtype);
    ints.push_back(len);
    at += len;
  }
  return record(Op::CAT, out, xs, 0, ints);
}

Ref scaled_dot_product_attention(const Ref &q, const Ref &k, const Ref &v, bool causal, double scale) {
  if (flash_attention_applies(q, k, v, causal)) return flash_attention(q, k, v, causal, scale);  // ops_attention.h
  MT_CHECK(q->ndim() >= 2 && k->ndim() == q->ndim() && v->ndim() == q->ndim(), SHAPE,
           "q, k, v must share a rank of at least 2: q is %s, k is %s, v is %s", shape_str(q->shape).c_str(),
           shape_str(k->shape).c_str(), shape_str(v->shape).c_str());
  const int64_t D = q->shape.back(), T = q->shape[q->shape.size() - 2], S = k->shape[k->shape.size() - 2];
  MT_CHECK(k->shape.back() == D && v->shape[v->shape.size() - 2] == S, SHAPE,
           "q is %s, k is %s, v is %s: expected k [..., S, %lld] and v [..., S, Dv]", shape_str(q->shape).c_str(),
           shape_str(k->shape).c_str(), shape_str(v->shape).c_str(), (long long)D);
  double s = scale > 0 ? scale : 1.0 / std::sqrt((double)D);
  Ref scores = q->ndim() >= 3 ? matmul_t(q, false, k, true, s)             // [..., T, S], no k^T copy
                              : mul_scalar(matmul(q, transpose(k, -1, -2)), s);
  // key j is masked for query i when j > i + (S - T): aligned at the end when S != T
  if (causal && S >= T) return matmul(causal_softmax(scores, S - T), v);  // the mask and softmax in one pass
  if (causal) scores = masked_fill(scores, causal_mask(T, S, scores->device), -INFINITY);  // rows with no key
  return matmul(softmax(scores, -1), v);
}

}  // namespace ops
}  // namespace mt
