// ops_compare.cpp - forwards of the comparisons and selection family: compare (eq, ne,
// lt, le, gt, ge; uint8 results, never recorded), where, maximum, minimum, sqrt, abs,
// pow of two tensors and clamp. Their backward rules are in backward.cpp, their table
// rows in docs/derivatives.md.
#include <cmath>
#include <cstring>

#include "ops.h"

namespace mt {
namespace ops {
namespace {

void check_device(const Ref &a, const Ref &b, const char *an, const char *bn) {
  MT_CHECK(a->device == b->device, DEVICE, "tensors on different devices: %s is %s, %s is %s", an,
           device_name_short(a->device), bn, device_name_short(b->device));
}

void check_same_dtype(const Ref &a, const Ref &b, const char *an, const char *bn) {
  check_device(a, b, an, bn);
  MT_CHECK(a->dtype == b->dtype, DTYPE, "dtypes differ: %s is %s, %s is %s", an, dtype_name(a->dtype), bn,
           dtype_name(b->dtype));
}

void check_floating(const Ref &x, const char *what) {
  MT_CHECK(dtype_is_float(x->dtype), DTYPE, "%s must be a floating tensor, got %s", what, dtype_name(x->dtype));
}

// The plan of out = where(cond, a, b): each operand right-aligned to out's dims with
// stride 0 where it is absent or of size 1; size-1 dims dropped and neighbouring dims
// merged where every operand steps through them contiguously.
Backend::WherePlan make_where_plan(const Shape &out, const Shape &c, const Shape &a, const Shape &b) {
  Backend::WherePlan p;
  p.numel = shape_numel(out);
  p.same = c == out && a == out && b == out;
  const Shape *ops3[3] = {&c, &a, &b};
  int64_t strides[3][kMaxDims];
  const int nd = (int)out.size();
  for (int k = 0; k < 3; k++) {
    const Shape &s = *ops3[k];
    int64_t acc = 1;
    for (int d = nd - 1; d >= 0; d--) {
      int sd = d - (nd - (int)s.size());  // the operand's dim aligned with out's dim d
      int64_t size = sd >= 0 ? s[(size_t)sd] : 1;
      strides[k][d] = size == 1 ? 0 : acc;
      acc *= size;
    }
  }
  for (int d = 0; d < nd; d++) {
    if (out[(size_t)d] == 1) continue;
    int64_t n = out[(size_t)d];
    int64_t *ps[3] = {p.cond_stride, p.a_stride, p.b_stride};
    bool merge = p.ndim > 0;
    for (int k = 0; k < 3 && merge; k++) merge = ps[k][p.ndim - 1] == strides[k][d] * n;
    if (merge) {
      p.shape[p.ndim - 1] *= n;
      for (int k = 0; k < 3; k++) ps[k][p.ndim - 1] = strides[k][d];
    } else {
      p.shape[p.ndim] = n;
      for (int k = 0; k < 3; k++) ps[k][p.ndim] = strides[k][d];
      p.ndim++;
    }
  }
  return p;
}

}  // namespace

Ref compare(Backend::Compare op, const Ref &a, const Ref &b) {
  check_same_dtype(a, b, "a", "b");
  Shape shape = broadcast_shapes(a->shape, b->shape);
  Ref out = empty(shape, DType::U8, a->device);
  if (out->numel()) {
    BroadcastPlan plan = make_broadcast_plan(shape, a->shape, b->shape);
    a->backend().compare(op, (uint8_t *)out->data(), a->data(), b->data(), plan, a->dtype);
  }
  return out;
}

Ref where(const Ref &cond, const Ref &a, const Ref &b) {
  MT_CHECK(cond->dtype == DType::U8, DTYPE, "cond must be uint8 (0 or nonzero, as a mask from mt_eq ...), got %s",
           dtype_name(cond->dtype));
  check_device(cond, a, "cond", "a");
  check_same_dtype(a, b, "a", "b");
  Shape shape = broadcast_shapes(broadcast_shapes(cond->shape, a->shape), b->shape);
  Ref out = empty(shape, a->dtype, a->device);
  if (out->numel()) {
    Backend::WherePlan plan = make_where_plan(shape, cond->shape, a->shape, b->shape);
    a->backend().where(out->data(), (const uint8_t *)cond->data(), a->data(), b->data(), plan, a->dtype);
  }
  return record(Op::WHERE, out, {cond, a, b});
}

Ref maximum(const Ref &a, const Ref &b) { return record(Op::MAXIMUM, binary(Binary::MAXIMUM, a, b), {a, b}); }
Ref minimum(const Ref &a, const Ref &b) { return record(Op::MINIMUM, binary(Binary::MINIMUM, a, b), {a, b}); }
Ref sqrt(const Ref &x) { return record(Op::SQRT, unary(Unary::SQRT, x), {x}); }
Ref abs(const Ref &x) { return record(Op::ABS, unary(Unary::ABS, x), {x}); }

Ref pow(const Ref &a, const Ref &b) {
  check_same_dtype(a, b, "a", "b");
  check_floating(a, "a");
  Shape shape = broadcast_shapes(a->shape, b->shape);
  Ref out = empty(shape, a->dtype, a->device);
  if (out->numel()) a->backend().pow(out->data(), a->data(), b->data(), make_broadcast_plan(shape, a->shape, b->shape), a->dtype);
  return record(Op::POW, out, {a, b});
}

Ref clamp(const Ref &x, double lo, double hi) {
  check_floating(x, "x");
  MT_CHECK(!std::isnan(lo) && !std::isnan(hi), INVALID_ARGUMENT, "bounds must not be NaN, got lo %g hi %g", lo, hi);
  // Two broadcast kernels against 0-d bounds; lo > hi gives hi everywhere (as torch).
  Ref lo_t = full({}, lo, x->dtype, x->device), hi_t = full({}, hi, x->dtype, x->device);
  Ref out = binary(Binary::MINIMUM, binary(Binary::MAXIMUM, x, lo_t), hi_t);
  int64_t hi_bits;  // Node keeps one double; the second bound travels as its bits
  std::memcpy(&hi_bits, &hi, sizeof hi_bits);
  return record(Op::CLAMP, out, {x}, lo, {hi_bits});
}

}  // namespace ops
}  // namespace mt
