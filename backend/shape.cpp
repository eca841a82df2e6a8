// shape.cpp - broadcasting and plan folding (see shape.h).
#include "shape.h"

namespace mt {

int64_t shape_numel(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

bool shape_fits(const Shape &s) {
  int64_t p = 1;
  for (int64_t d : s) {
    if (d <= 1) continue;
    if (p > kMaxNumel / d) return false;
    p *= d;
  }
  return true;
}

std::string shape_str(const Shape &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); i++) {
    if (i) r += ",";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

Shape broadcast_shapes(const Shape &a, const Shape &b) {
  size_t n = a.size() > b.size() ? a.size() : b.size();
  Shape out(n);
  for (size_t i = 0; i < n; i++) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MT_CHECK(da == db || da == 1 || db == 1, SHAPE, "shapes do not broadcast: a is %s, b is %s",
             shape_str(a).c_str(), shape_str(b).c_str());
    out[i] = da == 1 ? db : da;
  }
  return out;
}

BroadcastPlan make_broadcast_plan(const Shape &out, const Shape &a, const Shape &b) {
  BroadcastPlan p;
  p.numel = shape_numel(out);
  p.same = (a == out && b == out);
  // Right-align a and b to out, compute element strides (0 where broadcast), drop
  // size-1 dims and merge neighbours that stay contiguous for both inputs. Shapes hold at
  // most kMaxDims dims (tensors are made so), which bounds every array here.
  size_t n = out.size();
  MT_CHECK(n <= (size_t)kMaxDims && a.size() <= n && b.size() <= n, SHAPE,
           "broadcast plan of %s and %s into %s: at most %d dims are supported", shape_str(a).c_str(),
           shape_str(b).c_str(), shape_str(out).c_str(), kMaxDims);
  int64_t ra[kMaxDims], rb[kMaxDims];
  int64_t stride_a = 1, stride_b = 1;
  for (size_t k = n; k-- > 0;) {
    int64_t da = k < n - a.size() ? 1 : a[k - (n - a.size())];
    int64_t db = k < n - b.size() ? 1 : b[k - (n - b.size())];
    ra[k] = da == 1 ? 0 : stride_a;
    rb[k] = db == 1 ? 0 : stride_b;
    stride_a *= da;
    stride_b *= db;
  }
  int nd = 0;
  for (size_t k = 0; k < n; k++) {
    if (out[k] == 1) continue;
    if (nd > 0) {
      int j = nd - 1;
      // merge dim k into the previous kept dim when both inputs walk them as one
      if (p.a_stride[j] == ra[k] * out[k] && p.b_stride[j] == rb[k] * out[k]) {
        p.shape[j] *= out[k];
        p.a_stride[j] = ra[k];
        p.b_stride[j] = rb[k];
        continue;
      }
    }
    p.shape[nd] = out[k];
    p.a_stride[nd] = ra[k];
    p.b_stride[nd] = rb[k];
    nd++;
  }
  p.ndim = nd;
  return p;
}

Shape contiguous_strides(const Shape &s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t k = s.size(); k-- > 0;) {
    st[k] = acc;
    acc *= s[k];
  }
  return st;
}

int64_t wrap_dim(int64_t dim, int64_t ndim) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  MT_CHECK(dim >= lo && dim <= hi, INVALID_ARGUMENT, "dim %lld out of range for a %lld-d tensor (expected %lld..%lld)",
           (long long)dim, (long long)ndim, (long long)lo, (long long)hi);
  return dim < 0 ? dim + (ndim == 0 ? 1 : ndim) : dim;
}

}  // namespace mt
