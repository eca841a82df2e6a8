// compare.cpp - the extern "C" entry points of the comparisons and selection section of
// minitorch.h: mt_eq ... mt_ge, mt_where, mt_maximum, mt_minimum, mt_sqrt, mt_abs, mt_pow,
// mt_clamp. Each checks its handles and calls autograd/ops_compare.cpp.
#include "minitorch.h"

#include "abi/entry.h"
#include "autograd/ops.h"

using namespace mt;
using namespace mt::abi;

extern "C" {

#define MT_COMPARE_ENTRY(fn, op)                                                                             \
  MT_API mt_status fn(mt_tensor **out, mt_tensor *a, mt_tensor *b) {                                         \
    return op_entry(#fn, out, [&] { return ops::compare(Backend::Compare::op, tensor_arg(a, "a"), tensor_arg(b, "b")); }); \
  }
MT_COMPARE_ENTRY(mt_eq, EQ)
MT_COMPARE_ENTRY(mt_ne, NE)
MT_COMPARE_ENTRY(mt_lt, LT)
MT_COMPARE_ENTRY(mt_le, LE)
MT_COMPARE_ENTRY(mt_gt, GT)
MT_COMPARE_ENTRY(mt_ge, GE)
#undef MT_COMPARE_ENTRY

MT_API mt_status mt_where(mt_tensor **out, mt_tensor *cond, mt_tensor *a, mt_tensor *b) {
  return op_entry("mt_where", out, [&] {
    return ops::where(tensor_arg(cond, "cond"), tensor_arg(a, "a"), tensor_arg(b, "b"));
  });
}

MT_API mt_status mt_maximum(mt_tensor **out, mt_tensor *a, mt_tensor *b) {
  return op_entry("mt_maximum", out, [&] { return ops::maximum(tensor_arg(a, "a"), tensor_arg(b, "b")); });
}

MT_API mt_status mt_minimum(mt_tensor **out, mt_tensor *a, mt_tensor *b) {
  return op_entry("mt_minimum", out, [&] { return ops::minimum(tensor_arg(a, "a"), tensor_arg(b, "b")); });
}

MT_API mt_status mt_sqrt(mt_tensor **out, mt_tensor *x) {
  return op_entry("mt_sqrt", out, [&] { return ops::sqrt(tensor_arg(x, "x")); });
}

MT_API mt_status mt_abs(mt_tensor **out, mt_tensor *x) {
  return op_entry("mt_abs", out, [&] { return ops::abs(tensor_arg(x, "x")); });
}

MT_API mt_status mt_pow(mt_tensor **out, mt_tensor *a, mt_tensor *b) {
  return op_entry("mt_pow", out, [&] { return ops::pow(tensor_arg(a, "a"), tensor_arg(b, "b")); });
}

MT_API mt_status mt_clamp(mt_tensor **out, mt_tensor *x, double lo, double hi) {
  return op_entry("mt_clamp", out, [&] { return ops::clamp(tensor_arg(x, "x"), lo, hi); });
}

}  // extern "C"
