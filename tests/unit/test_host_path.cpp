// test_host_path.cpp - the pieces that keep an op's host path free of heap traffic, checked
// against plain references: SmallVector (the Shape type) against std::vector, PointerMap (the
// tensor registry and the allocators' tables) against std::unordered_map on random operations,
// broadcast plans against direct broadcasting on random shapes, the CPU allocator's recycling
// of small blocks (exact live bytes, foreign pointers refused), and the fused MSE backward
// against the composition of primitives it replaced, bit for bit, plus float64 by hand.
#include <cstring>
#include <unordered_map>

#include "autograd/ops.h"
#include "backend/pointer_map.h"
#include "backend/shape.h"
#include "backend/small_vector.h"
#include "helpers.h"

using namespace t;

TEST_CASE("SmallVector behaves as std::vector, inline up to N and on the heap beyond") {
  using SV = mt::SmallVector<int64_t, 4>;
  std::mt19937_64 rng(7);
  SV v;
  std::vector<int64_t> ref;
  const char *inline_lo = reinterpret_cast<const char *>(&v), *inline_hi = inline_lo + sizeof v;
  auto is_inline = [&](const SV &x) {
    const char *p = reinterpret_cast<const char *>(x.data());
    return p >= inline_lo && p < inline_hi;
  };
  for (int64_t i = 0; i < 4; i++) {
    v.push_back(i * 10);
    ref.push_back(i * 10);
  }
  CHECK(is_inline(v));
  CHECK(v.capacity() == 4);
  v.push_back(v[0]);  // an element of its own buffer, while the buffer moves to the heap
  ref.push_back(ref[0]);
  CHECK(!is_inline(v));
  CHECK(std::vector<int64_t>(v) == ref);
  // random edits, the same on both
  for (int step = 0; step < 2000; step++) {
    int op = (int)(rng() % 6);
    int64_t val = (int64_t)(rng() % 1000);
    size_t pos = ref.empty() ? 0 : rng() % (ref.size() + 1);
    if (op == 0 || ref.size() < 2) {
      v.push_back(val);
      ref.push_back(val);
    } else if (op == 1) {
      v.insert(v.begin() + pos, val);
      ref.insert(ref.begin() + (long)pos, val);
    } else if (op == 2 && pos < ref.size()) {
      v.erase(v.begin() + pos);
      ref.erase(ref.begin() + (long)pos);
    } else if (op == 3) {
      size_t n = rng() % 12;
      v.resize(n, val);
      ref.resize(n, val);
    } else if (op == 4 && !ref.empty()) {
      size_t a = rng() % ref.size(), b = a + rng() % (ref.size() - a + 1);
      v.assign(v.begin() + a, v.begin() + b);  // from its own buffer
      ref = std::vector<int64_t>(ref.begin() + (long)a, ref.begin() + (long)b);
    } else {
      v.insert(v.begin() + pos, v.begin(), v.end());  // itself, into itself
      std::vector<int64_t> copy = ref;
      ref.insert(ref.begin() + (long)pos, copy.begin(), copy.end());
      if (ref.size() > 64) {
        v.resize(8);
        ref.resize(8);
      }
    }
    REQUIRE(std::vector<int64_t>(v) == ref);
  }
  // copies and moves, inline and spilled
  SV small{1, 2, 3}, big{1, 2, 3, 4, 5, 6};
  SV a = small, b = big;
  CHECK(a == small);
  CHECK(b == big);
  SV c = std::move(b);
  CHECK(c == big);
  CHECK(b.empty());
  SV d = std::move(a);
  CHECK(d == small);
  CHECK(a.empty());
  d = big;
  CHECK(d == big);
  d = SV{9};
  CHECK(std::vector<int64_t>(d) == std::vector<int64_t>{9});
  CHECK(SV(std::vector<int64_t>{4, 5}) == SV{4, 5});
  CHECK(SV(3, 7) == SV{7, 7, 7});
  CHECK(SV{1, 2} != SV{1, 2, 3});
  CHECK_THROWS_AS(small.at(3), std::out_of_range);
}

TEST_CASE("PointerMap agrees with std::unordered_map over random inserts, lookups and erases") {
  std::mt19937_64 rng(11);
  mt::PointerMap m;
  std::unordered_map<const void *, int64_t> ref;
  std::vector<char> arena(4096 * 16);  // distinct addresses, 16 bytes apart as allocations are
  for (int step = 0; step < 200000; step++) {
    const void *p = arena.data() + 16 * (rng() % 4096);
    int64_t v = (int64_t)rng();
    switch (rng() % 3) {
      case 0:
        m.insert(p, v);
        ref[p] = v;
        break;
      case 1: {
        int64_t got = -1;
        bool found = m.find(p, &got);
        REQUIRE(found == (ref.count(p) == 1));
        if (found) REQUIRE(got == ref[p]);
        break;
      }
      default: {
        int64_t got = -1;
        bool erased = m.erase(p, &got);
        REQUIRE(erased == (ref.count(p) == 1));
        if (erased) {
          REQUIRE(got == ref[p]);
          ref.erase(p);
        }
      }
    }
    REQUIRE(m.size() == ref.size());
  }
  for (auto &kv : ref) CHECK(m.find(kv.first));
  CHECK(!m.find(nullptr));
  CHECK(!m.erase(nullptr));
}

TEST_CASE("broadcast plans walk the same elements as direct broadcasting") {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 300; trial++) {
    CAPTURE(trial);
    size_t n = 1 + rng() % mt::kMaxDims;
    mt::Shape out(n), a, b;
    for (size_t k = 0; k < n; k++) out[k] = 1 + (int64_t)(rng() % 3);
    size_t na = rng() % (n + 1), nb = rng() % (n + 1);
    for (size_t k = n - na; k < n; k++) a.push_back(rng() % 3 == 0 ? 1 : out[k]);
    for (size_t k = n - nb; k < n; k++) b.push_back(rng() % 3 == 0 ? 1 : out[k]);
    CAPTURE(mt::shape_str(out));
    CAPTURE(mt::shape_str(a));
    CAPTURE(mt::shape_str(b));
    mt::BroadcastPlan p = mt::make_broadcast_plan(out, a, b);
    REQUIRE(p.numel == mt::shape_numel(out));
    CHECK(p.same == (a == out && b == out));
    // direct: the offset of out's multi-index in a (b), dims of size 1 fixed at 0
    auto offset = [&](const mt::Shape &s, const std::vector<int64_t> &idx) {
      int64_t off = 0;
      for (size_t k = n - s.size(); k < n; k++) off = off * s[k - (n - s.size())] + (s[k - (n - s.size())] == 1 ? 0 : idx[k]);
      return off;
    };
    std::vector<int64_t> idx(n, 0), pidx((size_t)p.ndim, 0);
    int64_t oa = 0, ob = 0;
    for (int64_t i = 0; i < p.numel; i++) {
      REQUIRE(oa == offset(a, idx));
      REQUIRE(ob == offset(b, idx));
      for (size_t k = n; k-- > 0;) {  // out's odometer
        if (++idx[k] < out[k]) break;
        idx[k] = 0;
      }
      for (int d = p.ndim - 1; d >= 0; d--) {  // the plan's odometer, as the kernels walk it
        oa += p.a_stride[d];
        ob += p.b_stride[d];
        if (++pidx[(size_t)d] < p.shape[d]) break;
        oa -= p.a_stride[d] * p.shape[d];
        ob -= p.b_stride[d] * p.shape[d];
        pidx[(size_t)d] = 0;
      }
    }
  }
  // folding: [2,3,4] with [4] is a [6] x [4] walk
  mt::BroadcastPlan p = mt::make_broadcast_plan({2, 3, 4}, {2, 3, 4}, {4});
  REQUIRE(p.ndim == 2);
  CHECK(p.shape[0] == 6);
  CHECK(p.shape[1] == 4);
  CHECK(p.a_stride[0] == 4);
  CHECK(p.a_stride[1] == 1);
  CHECK(p.b_stride[0] == 0);
  CHECK(p.b_stride[1] == 1);
}

TEST_CASE("the cpu allocator recycles small blocks and keeps live bytes exact") {
  LeakGuard lg;
  int64_t base = mt_live_bytes(MT_CPU);
  void *p = nullptr, *q = nullptr, *big = nullptr;
  MT_OK_OR_FAIL(mt_malloc(&p, 100, MT_CPU));
  CHECK(mt_live_bytes(MT_CPU) == base + 100);
  CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
  std::memset(p, 0x5a, 100);
  MT_OK_OR_FAIL(mt_free(p, MT_CPU));
  CHECK(mt_live_bytes(MT_CPU) == base);
  MT_OK_OR_FAIL(mt_malloc(&q, 120, MT_CPU));  // the same 128-byte class: the block comes back
  CHECK(q == p);
  CHECK(mt_live_bytes(MT_CPU) == base + 120);
  CHECK(mt_free(q, MT_CPU) == MT_OK);
  CHECK(mt_free(q, MT_CPU) == MT_ERR_INVALID_ARGUMENT);  // freed already, though kept for reuse
  CHECK(std::string(mt_last_error()).find("was not allocated by the cpu backend") != std::string::npos);
  int local = 0;
  CHECK(mt_free(&local, MT_CPU) == MT_ERR_INVALID_ARGUMENT);
  MT_OK_OR_FAIL(mt_malloc(&big, 1 << 20, MT_CPU));  // large blocks are not kept
  std::memset(big, 1, 1 << 20);
  CHECK(mt_live_bytes(MT_CPU) == base + (1 << 20));
  MT_OK_OR_FAIL(mt_free(big, MT_CPU));
  void *zero1 = nullptr, *zero2 = nullptr;  // alloc(0) stays unique
  MT_OK_OR_FAIL(mt_malloc(&zero1, 0, MT_CPU));
  MT_OK_OR_FAIL(mt_malloc(&zero2, 0, MT_CPU));
  CHECK(zero1 != zero2);
  MT_OK_OR_FAIL(mt_free(zero1, MT_CPU));
  MT_OK_OR_FAIL(mt_free(zero2, MT_CPU));
  CHECK(mt_live_bytes(MT_CPU) == base);
}

namespace {
// dpred and dtarget of 3 * mse_loss(p, t), from mt_backward (the fused kernel).
std::pair<Vec, Vec> mse_grads(const H &p, const H &t) {
  H loss, scaled, gp, gt;
  MT_OK_OR_FAIL(mt_mse_loss(loss.out(), p, t));
  MT_OK_OR_FAIL(mt_mul_scalar(scaled.out(), loss, 3.0));  // an upstream gradient of 3
  MT_OK_OR_FAIL(mt_backward(scaled));
  MT_OK_OR_FAIL(mt_tensor_grad(gp.out(), p));
  MT_OK_OR_FAIL(mt_tensor_grad(gt.out(), t));
  std::pair<Vec, Vec> r{values(gp), values(gt)};
  MT_OK_OR_FAIL(mt_tensor_clear_grad(p));
  MT_OK_OR_FAIL(mt_tensor_clear_grad(t));
  return r;
}
}  // namespace

TEST_CASE("the fused MSE backward gives the bits of the composition it replaced") {
  LeakGuard lg;
  std::mt19937_64 rng(2024);
  for (mt_dtype dt : {MT_F32, MT_F64}) {
    for (const Shape &s : {Shape{7}, Shape{5, 3}, Shape{64, 1}, Shape{1000}}) {
      CAPTURE(dt);
      CAPTURE(s.size());
      int64_t n = numel(s);
      Vec pv = randvec(rng, n, -2, 2), tv = randvec(rng, n, -2, 2);
      H p = make(pv, s, dt), t = make(tv, s, dt);
      MT_OK_OR_FAIL(mt_tensor_set_requires_grad(p, 1));
      MT_OK_OR_FAIL(mt_tensor_set_requires_grad(t, 1));
      auto fused = mse_grads(p, t);
      auto again = mse_grads(p, t);  // a second run records into the reused tape
      CHECK(fused == again);
      // the composition: ((p - t) * g) * (2 / n), and its negation for the target
      int64_t prev = mt_set_grad_enabled(0);
      H diff, g, dg, d, nd;
      MT_OK_OR_FAIL(mt_sub(diff.out(), p, t));
      MT_OK_OR_FAIL(mt_tensor_full(g.out(), nullptr, 0, 3.0, dt, dev()));
      MT_OK_OR_FAIL(mt_mul(dg.out(), diff, g));
      MT_OK_OR_FAIL(mt_mul_scalar(d.out(), dg, 2.0 / (double)n));
      MT_OK_OR_FAIL(mt_neg(nd.out(), d));
      mt_set_grad_enabled(prev);
      CHECK(fused.first == values(d));
      CHECK(fused.second == values(nd));
      // float64 by hand: 6 (p - t) / n, within the inputs' rounding to the dtype
      Vec want(pv.size());
      Vec pr = values(p), tr = values(t);
      for (size_t i = 0; i < want.size(); i++) want[i] = 6.0 * (pr[i] - tr[i]) / (double)n;
      CHECK(rel_err(fused.first, want) < (dt == MT_F32 ? 1e-6 : 1e-14));
    }
  }
}
