// test_ops.cpp - every op's forward against hand-computed values and against
// loops written here, and a float64 central-difference gradcheck of every op.
#include <cmath>

#include "helpers.h"

using namespace t;

TEST_CASE("elementwise forward against hand-computed values") {
  LeakGuard lg;
  H a = make({1, 2, 3, 4, 5, 6}, {2, 3}, MT_F32);
  H b = make({10, 20, 30}, {3}, MT_F32);
  H c = make({2}, {}, MT_F32);  // 0-d
  H r;
  MT_OK_OR_FAIL(mt_add(r.out(), a, b));
  CHECK(values(r) == Vec{11, 22, 33, 14, 25, 36});
  CHECK(shape_of(r) == Shape{2, 3});
  MT_OK_OR_FAIL(mt_sub(r.out(), a, b));
  CHECK(values(r) == Vec{-9, -18, -27, -6, -15, -24});
  MT_OK_OR_FAIL(mt_mul(r.out(), a, c));
  CHECK(values(r) == Vec{2, 4, 6, 8, 10, 12});
  MT_OK_OR_FAIL(mt_div(r.out(), b, c));
  CHECK(values(r) == Vec{5, 10, 15});
  MT_OK_OR_FAIL(mt_add_scalar(r.out(), a, 0.5));
  CHECK(values(r) == Vec{1.5, 2.5, 3.5, 4.5, 5.5, 6.5});
  MT_OK_OR_FAIL(mt_mul_scalar(r.out(), a, -2));
  CHECK(values(r) == Vec{-2, -4, -6, -8, -10, -12});
  MT_OK_OR_FAIL(mt_pow_scalar(r.out(), a, 2));
  CHECK(values(r) == Vec{1, 4, 9, 16, 25, 36});
  MT_OK_OR_FAIL(mt_neg(r.out(), c));
  CHECK(values(r) == Vec{-2});
  H m = make({-1.5, 0, 2}, {3}, MT_F32);
  MT_OK_OR_FAIL(mt_relu(r.out(), m));
  CHECK(values(r) == Vec{0, 0, 2});
  H z = make({0}, {1}, MT_F32);
  MT_OK_OR_FAIL(mt_sigmoid(r.out(), z));
  CHECK(values(r) == Vec{0.5});
  MT_OK_OR_FAIL(mt_tanh(r.out(), z));
  CHECK(values(r) == Vec{0});
  MT_OK_OR_FAIL(mt_exp(r.out(), z));
  CHECK(values(r) == Vec{1});
  H one = make({1}, {1}, MT_F32);
  MT_OK_OR_FAIL(mt_log(r.out(), one));
  CHECK(values(r) == Vec{0});
}

TEST_CASE("broadcasting follows numpy on random shapes") {
  LeakGuard lg;
  std::mt19937_64 rng(7);
  struct Case { Shape a, b, out; };
  const Case cases[] = {
      {{3, 1, 5}, {4, 1}, {3, 4, 5}}, {{1}, {2, 3}, {2, 3}}, {{}, {4, 2}, {4, 2}},
      {{2, 1, 3, 1}, {1, 5, 1, 7}, {2, 5, 3, 7}}, {{6, 1}, {1, 6}, {6, 6}}, {{5, 3}, {5, 3}, {5, 3}},
      {{0, 3}, {1, 3}, {0, 3}},
  };
  for (const Case &cs : cases) {
    Vec av = randvec(rng, numel(cs.a)), bv = randvec(rng, numel(cs.b));
    H a = make(av, cs.a), b = make(bv, cs.b), r;
    MT_OK_OR_FAIL(mt_mul(r.out(), a, b));
    REQUIRE(shape_of(r) == cs.out);
    // reference: index arithmetic written independently of the library
    Vec ref((size_t)numel(cs.out));
    size_t nd = cs.out.size();
    for (int64_t i = 0; i < numel(cs.out); i++) {
      int64_t rem = i, ia = 0, ib = 0, sa = 1, sb = 1;
      for (size_t k = nd; k-- > 0;) {
        int64_t idx = rem % cs.out[k];
        rem /= cs.out[k];
        size_t ka = k + cs.a.size(), kb = k + cs.b.size();
        if (ka >= nd) { int64_t d = cs.a[ka - nd]; ia += (d == 1 ? 0 : idx) * sa; sa *= d; }
        if (kb >= nd) { int64_t d = cs.b[kb - nd]; ib += (d == 1 ? 0 : idx) * sb; sb *= d; }
      }
      ref[(size_t)i] = av[(size_t)ia] * bv[(size_t)ib];
    }
    CHECK(rel_err(values(r), ref) < 1e-15);
  }
}

TEST_CASE("reductions") {
  LeakGuard lg;
  H a = make({1, 2, 3, 4, 5, 6}, {2, 3});
  H r;
  MT_OK_OR_FAIL(mt_sum(r.out(), a));
  CHECK(shape_of(r).empty());
  CHECK(values(r) == Vec{21});
  MT_OK_OR_FAIL(mt_mean(r.out(), a));
  CHECK(values(r) == Vec{3.5});
  MT_OK_OR_FAIL(mt_sum_dim(r.out(), a, 0, 0));
  CHECK(values(r) == Vec{5, 7, 9});
  CHECK(shape_of(r) == Shape{3});
  MT_OK_OR_FAIL(mt_sum_dim(r.out(), a, -1, 1));
  CHECK(values(r) == Vec{6, 15});
  CHECK(shape_of(r) == Shape{2, 1});
  MT_OK_OR_FAIL(mt_mean_dim(r.out(), a, 1, 0));
  CHECK(values(r) == Vec{2, 5});
  H p = make({1, 2, 3}, {3}), q = make({2, 2, 5}, {3});
  MT_OK_OR_FAIL(mt_mse_loss(r.out(), p, q));
  CHECK(values(r)[0] == doctest::Approx((1 + 0 + 4) / 3.0).epsilon(1e-15));
}

TEST_CASE("matmul against a triple loop, plain, batched and broadcast") {
  LeakGuard lg;
  std::mt19937_64 rng(99);
  struct Case { Shape a, b, out; };
  const Case cases[] = {{{5, 7}, {7, 3}, {5, 3}},
                        {{2, 4, 3}, {2, 3, 6}, {2, 4, 6}},
                        {{2, 4, 3}, {3, 5}, {2, 4, 5}},
                        {{4, 3}, {5, 3, 2}, {5, 4, 2}},
                        {{2, 2, 3, 4}, {2, 2, 4, 1}, {2, 2, 3, 1}}};
  for (const Case &cs : cases) {
    Vec av = randvec(rng, numel(cs.a)), bv = randvec(rng, numel(cs.b));
    H a = make(av, cs.a), b = make(bv, cs.b), r;
    MT_OK_OR_FAIL(mt_matmul(r.out(), a, b));
    REQUIRE(shape_of(r) == cs.out);
    int64_t m = cs.a[cs.a.size() - 2], k = cs.a.back(), n = cs.b.back();
    int64_t batch = numel(cs.out) / (m * n);
    bool a_batched = cs.a.size() > 2, b_batched = cs.b.size() > 2;
    Vec ref((size_t)numel(cs.out));
    for (int64_t bi = 0; bi < batch; bi++)
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
          double acc = 0;
          for (int64_t p = 0; p < k; p++)
            acc += av[(size_t)((a_batched ? bi * m * k : 0) + i * k + p)] * bv[(size_t)((b_batched ? bi * k * n : 0) + p * n + j)];
          ref[(size_t)(bi * m * n + i * n + j)] = acc;
        }
    CHECK(rel_err(values(r), ref) < 1e-14);
  }
}

TEST_CASE("linear is x W^T + b") {
  LeakGuard lg;
  H x = make({1, 2, 3, 4}, {2, 2}), w = make({1, 0, 0, 1, 1, 1}, {3, 2}), b = make({0.5, -1, 2}, {3}), r;
  MT_OK_OR_FAIL(mt_linear(r.out(), x, w, b));
  CHECK(values(r) == Vec{1.5, 1, 5, 3.5, 3, 9});
  MT_OK_OR_FAIL(mt_linear(r.out(), x, w, nullptr));
  CHECK(values(r) == Vec{1, 2, 3, 3, 4, 7});
}

// Forward and every gradient of linear against a double reference on the host, for layers that
// a device computes in one tiny launch (product, bias and bias gradient fused) and in cuBLAS
// with separate passes, with and without the weight's gradient, and with zero input features
// (the bias gradient is still the column sums of dy).
TEST_CASE("linear forward and gradients against a double reference") {
  // Shapes on each side of CUDA's tiny-product kernel (k <= 64, <= 16384 outputs), the larger
  // ones through cuBLASLt's bias epilogue, with x and b also as views one element into larger
  // tensors (off = 1), whose misaligned addresses take the unfused path.
  LeakGuard lg;
  std::mt19937_64 rng(71);
  struct Case { int64_t m, k, n; bool w_grad; int64_t off; };
  for (mt_dtype dt : {MT_F64, MT_F32})
    for (Case c : {Case{4, 2, 4, true, 0}, Case{4, 4, 1, true, 0}, Case{51, 33, 65, true, 0},
                   Case{96, 100, 70, true, 0}, Case{300, 128, 384, true, 0}, Case{300, 128, 384, true, 1},
                   Case{97, 101, 67, true, 1}, Case{6, 3, 5, false, 0}, Case{5, 0, 3, true, 0}}) {
      CAPTURE(c.m); CAPTURE(c.k); CAPTURE(c.n); CAPTURE(c.off); CAPTURE((int)dt);
      Vec xv = randvec(rng, (c.m + c.off) * c.k), wv = randvec(rng, c.n * c.k), bv = randvec(rng, c.n + c.off),
          rv = randvec(rng, c.m * c.n);
      H xb = make(xv, {c.m + c.off, c.k}, dt), w = make(wv, {c.n, c.k}, dt), bb = make(bv, {c.n + c.off}, dt),
        r = make(rv, {c.m, c.n}, dt), x, b;
      for (mt_tensor *t : {xb.get(), bb.get()}) MT_OK_OR_FAIL(mt_tensor_set_requires_grad(t, 1));
      if (c.w_grad) MT_OK_OR_FAIL(mt_tensor_set_requires_grad(w, 1));
      MT_OK_OR_FAIL(mt_slice(x.out(), xb, 0, c.off, c.m + c.off));
      MT_OK_OR_FAIL(mt_slice(b.out(), bb, 0, c.off, c.n + c.off));
      H y, yr, l, gx, gw, gb;
      MT_OK_OR_FAIL(mt_linear(y.out(), x, w, b));
      MT_OK_OR_FAIL(mt_mul(yr.out(), y, r));  // d loss / dy = r
      MT_OK_OR_FAIL(mt_sum(l.out(), yr));
      MT_OK_OR_FAIL(mt_backward(l));
      // References over the whole base tensors: their first c.off rows get no gradient.
      const int64_t xo = c.off * c.k, bo = c.off;
      Vec ry((size_t)(c.m * c.n)), rx((size_t)((c.m + c.off) * c.k), 0.0), rw((size_t)(c.n * c.k), 0.0),
          rb((size_t)(c.n + c.off), 0.0);
      for (int64_t i = 0; i < c.m; i++)
        for (int64_t j = 0; j < c.n; j++) {
          double acc = bv[(size_t)(bo + j)], g = rv[(size_t)(i * c.n + j)];
          for (int64_t p = 0; p < c.k; p++) {
            acc += xv[(size_t)(xo + i * c.k + p)] * wv[(size_t)(j * c.k + p)];
            rx[(size_t)(xo + i * c.k + p)] += g * wv[(size_t)(j * c.k + p)];
            rw[(size_t)(j * c.k + p)] += g * xv[(size_t)(xo + i * c.k + p)];
          }
          ry[(size_t)(i * c.n + j)] = acc;
          rb[(size_t)(bo + j)] += g;
        }
      const double tol = dt == MT_F64 ? 1e-13 : 2e-6;  // relative, over the whole tensor
      CHECK(rel_err(values(y), ry) < tol);
      MT_OK_OR_FAIL(mt_tensor_grad(gb.out(), bb));
      CHECK(rel_err(values(gb), rb) < tol);
      if (c.k) {
        MT_OK_OR_FAIL(mt_tensor_grad(gx.out(), xb));
        CHECK(rel_err(values(gx), rx) < tol);
      }
      MT_OK_OR_FAIL(mt_tensor_grad(gw.out(), w));
      if (c.w_grad && c.k) CHECK(rel_err(values(gw), rw) < tol);
      if (!c.w_grad) CHECK(gw.get() == nullptr);
    }
}

TEST_CASE("shape ops: reshape views, transpose and permute copy") {
  LeakGuard lg;
  H a = make({0, 1, 2, 3, 4, 5}, {2, 3}), r;
  const int64_t s[2] = {3, -1};
  MT_OK_OR_FAIL(mt_reshape(r.out(), a, s, 2));
  CHECK(shape_of(r) == Shape{3, 2});
  void *pa, *pr;
  MT_OK_OR_FAIL(mt_tensor_data_ptr(a, &pa));
  MT_OK_OR_FAIL(mt_tensor_data_ptr(r, &pr));
  CHECK(pa == pr);  // a view
  MT_OK_OR_FAIL(mt_transpose(r.out(), a, 0, 1));
  CHECK(shape_of(r) == Shape{3, 2});
  CHECK(values(r) == Vec{0, 3, 1, 4, 2, 5});
  H c = make({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}, {2, 3, 4});
  const int64_t perm[3] = {2, 0, 1};
  MT_OK_OR_FAIL(mt_permute(r.out(), c, perm, 3));
  REQUIRE(shape_of(r) == Shape{4, 2, 3});
  Vec v = values(r);
  for (int64_t i = 0; i < 4; i++)
    for (int64_t j = 0; j < 2; j++)
      for (int64_t k = 0; k < 3; k++) CHECK(v[(size_t)(i * 6 + j * 3 + k)] == (double)(j * 12 + k * 4 + i));
}

TEST_CASE("factories, casts and device copies") {
  LeakGuard lg;
  const int64_t s[2] = {2, 3};
  H z, o, f, r1, r2, n1, ar;
  MT_OK_OR_FAIL(mt_tensor_zeros(z.out(), s, 2, MT_F32, dev()));
  CHECK(values(z) == Vec(6, 0.0));
  MT_OK_OR_FAIL(mt_tensor_ones(o.out(), s, 2, MT_F64, dev()));
  CHECK(values(o) == Vec(6, 1.0));
  MT_OK_OR_FAIL(mt_tensor_full(f.out(), s, 2, -2.5, MT_F32, dev()));
  CHECK(values(f) == Vec(6, -2.5));
  MT_OK_OR_FAIL(mt_tensor_arange(ar.out(), 1, 2, 0.25, MT_F64, dev()));
  CHECK(values(ar) == Vec{1, 1.25, 1.5, 1.75});
  {  // other dtypes convert start + i * step as a C cast: integers truncate toward zero
    H ai, af;
    MT_OK_OR_FAIL(mt_tensor_arange(ai.out(), 5, -3, -2.5, MT_I64, dev()));
    int64_t iv[4] = {0, 0, 0, 0};
    MT_OK_OR_FAIL(mt_tensor_copy_to_host(ai, iv, sizeof iv));
    CHECK(std::vector<int64_t>(iv, iv + 4) == std::vector<int64_t>{5, 2, 0, -2});
    MT_OK_OR_FAIL(mt_tensor_arange(af.out(), -7, 1000, 0.3, MT_F32, dev()));
    Vec v = values(af);
    REQUIRE(v.size() == 3357);  // ceil(1007 / 0.3)
    for (size_t i = 0; i < v.size(); i++) CHECK(v[i] == (double)(float)(-7 + (double)i * 0.3));
  }
  // The same seed gives the same draws; different seeds differ; values in range.
  const int64_t big[1] = {20000};
  MT_OK_OR_FAIL(mt_tensor_rand(r1.out(), big, 1, 42, MT_F64, dev()));
  MT_OK_OR_FAIL(mt_tensor_rand(r2.out(), big, 1, 42, MT_F64, MT_CPU));
  Vec u = values(r1);
  CHECK(u == values(r2));
  double mean = 0;
  for (double x : u) { CHECK(x >= 0); CHECK(x < 1); mean += x / u.size(); }
  CHECK(std::fabs(mean - 0.5) < 0.01);  // 5 sigma of U(0,1) over 20000 draws is 0.0102
  MT_OK_OR_FAIL(mt_tensor_randn(n1.out(), big, 1, 42, MT_F64, dev()));
  double m1 = 0, m2 = 0;
  for (double x : values(n1)) { m1 += x / 20000; m2 += x * x / 20000; }
  CHECK(std::fabs(m1) < 0.036);        // 5 sigma: 5 / sqrt(20000)
  CHECK(std::fabs(m2 - 1) < 0.05);     // 5 sigma of the sample variance: 5 sqrt(2/20000)
  H c;
  MT_OK_OR_FAIL(mt_tensor_cast(c.out(), f, MT_I32));
  int32_t iv[6];
  MT_OK_OR_FAIL(mt_tensor_copy_to_host(c, iv, sizeof iv));
  CHECK(iv[0] == -2);  // truncation toward zero, as a C cast
  H h;
  MT_OK_OR_FAIL(mt_tensor_cast(h.out(), f, MT_BF16));
  H back;
  MT_OK_OR_FAIL(mt_tensor_cast(back.out(), h, MT_F32));
  CHECK(values(back) == Vec(6, -2.5));  // exact in bf16
  H cpu;
  MT_OK_OR_FAIL(mt_tensor_to(cpu.out(), f, MT_CPU));
  CHECK(values(cpu) == Vec(6, -2.5));
  double item = 0;
  H s0 = make({7.25}, {});
  MT_OK_OR_FAIL(mt_tensor_item(s0, &item));
  CHECK(item == 7.25);
}

namespace {

// The rule mt_tensor_cast documents for a float to an integer dtype, written with modular
// arithmetic instead of casts: truncate toward zero, NaN 0, beyond int64 its nearest end, then
// the low bits of a narrower dtype as two's complement.
int64_t int64_rule(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9223372036854775808.0) return INT64_MAX;
  if (v < -9223372036854775808.0) return INT64_MIN;
  return (int64_t)std::trunc(v);
}
int64_t low_bits(int64_t v, int bits) {  // v mod 2^bits, read as signed for 32 bits
  const __int128 m = (__int128)1 << bits;
  __int128 r = ((__int128)v % m + m) % m;
  if (bits == 32 && r >= m / 2) r -= m;
  return (int64_t)r;
}

// The elements where got and want differ, as "i: got g, want w; ..." (empty where they agree),
// so that a failed check names the values.
std::string int_mismatches(const std::vector<int64_t> &got, const std::vector<int64_t> &want) {
  std::string r = got.size() == want.size() ? "" : "sizes differ; ";
  for (size_t i = 0; i < std::min(got.size(), want.size()); i++)
    if (got[i] != want[i])
      r += std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " + std::to_string(want[i]) + "; ";
  return r;
}

// x cast to dtype on the device under test, read back as int64s.
std::vector<int64_t> cast_to_ints(mt_tensor *x, mt_dtype dtype, size_t n) {
  H c;
  MT_OK_OR_FAIL(mt_tensor_cast(c.out(), x, dtype));
  std::vector<int64_t> r(n);
  if (dtype == MT_I64) {
    MT_OK_OR_FAIL(mt_tensor_copy_to_host(c, r.data(), (int64_t)(n * 8)));
  } else if (dtype == MT_I32) {
    std::vector<int32_t> v(n);
    MT_OK_OR_FAIL(mt_tensor_copy_to_host(c, v.data(), (int64_t)(n * 4)));
    r.assign(v.begin(), v.end());
  } else {
    std::vector<uint8_t> v(n);
    MT_OK_OR_FAIL(mt_tensor_copy_to_host(c, v.data(), (int64_t)n));
    r.assign(v.begin(), v.end());
  }
  return r;
}

}  // namespace

TEST_CASE("casts to integer dtypes are defined for every value") {
  LeakGuard lg;
  const double nan = std::nan(""), inf = INFINITY;
  // each exact in float32 too
  const Vec special = {nan, inf, -inf, 1e20, -1e20, -0x1p63, 0x1p62, 3e9, -3e9, 0x1p31, 300.75, -1.5, 255.5, 256, -0.75};
  const std::vector<int64_t> want64 = {0, INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN, INT64_MIN, 4611686018427387904,
                                       3000000000, -3000000000, 2147483648, 300, -1, 255, 256, 0};
  const std::vector<int64_t> want32 = {0, -1, 0, -1, 0, 0, 0, -1294967296, 1294967296, -2147483648LL, 300, -1, 255, 256, 0};
  const std::vector<int64_t> want8 = {0, 255, 0, 255, 0, 0, 0, 0, 0, 0, 44, 255, 255, 0, 0};
  for (mt_dtype src : {MT_F64, MT_F32}) {
    CAPTURE(src);
    H x = make(special, {(int64_t)special.size()}, src);
    CHECK(int_mismatches(cast_to_ints(x, MT_I64, special.size()), want64) == "");
    CHECK(int_mismatches(cast_to_ints(x, MT_I32, special.size()), want32) == "");
    CHECK(int_mismatches(cast_to_ints(x, MT_U8, special.size()), want8) == "");
  }
  // fresh random values over +-2^40 (float32: rounded first), against the rule
  const uint64_t seed = std::random_device{}();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  Vec v = randvec(rng, 4096, -0x1p40, 0x1p40);
  for (size_t i = 0; i < 64; i++) v[i] = std::ldexp(v[i], 30);  // some past int64's range
  for (mt_dtype src : {MT_F64, MT_F32}) {
    CAPTURE(src);
    Vec r = v;
    if (src == MT_F32)
      for (auto &e : r) e = (double)(float)e;
    H x = make(r, {(int64_t)r.size()}, src);
    const auto got64 = cast_to_ints(x, MT_I64, r.size()), got32 = cast_to_ints(x, MT_I32, r.size()),
               got8 = cast_to_ints(x, MT_U8, r.size());
    size_t bad = 0;
    for (size_t i = 0; i < r.size(); i++) {
      const int64_t w = int64_rule(r[i]);
      bad += got64[i] != w || got32[i] != low_bits(w, 32) || got8[i] != low_bits(w, 8);
    }
    CHECK(bad == 0);
  }
  // integer to integer: exact, int64 values past 2^53 included
  std::vector<int64_t> ints = {(1LL << 53) + 1, -(1LL << 53) - 3, INT64_MAX, INT64_MIN, 4294967295LL, -1, 255, 256};
  for (int i = 0; i < 256; i++) ints.push_back((int64_t)rng());
  H xi;
  const int64_t n = (int64_t)ints.size();
  MT_OK_OR_FAIL(mt_tensor_from_data(xi.out(), ints.data(), &n, 1, MT_I64, dev()));
  const auto i32 = cast_to_ints(xi, MT_I32, ints.size()), u8 = cast_to_ints(xi, MT_U8, ints.size());
  size_t bad = 0;
  for (size_t i = 0; i < ints.size(); i++) bad += i32[i] != low_bits(ints[i], 32) || u8[i] != low_bits(ints[i], 8);
  CHECK(bad == 0);
  H back;  // and int32 back to int64 exactly
  MT_OK_OR_FAIL(mt_tensor_cast(back.out(), xi, MT_I32));
  CHECK(int_mismatches(cast_to_ints(back, MT_I64, ints.size()), i32) == "");
}

TEST_CASE("gradcheck every differentiable op in float64") {
  LeakGuard lg;
  std::mt19937_64 rng(2024);
  auto r = [&](Shape s, double lo = -1, double hi = 1) { return randvec(rng, numel(s), lo, hi); };
  using V = std::vector<mt_tensor *>;
  auto bin = [](mt_status (*fn)(mt_tensor **, mt_tensor *, mt_tensor *)) {
    return [fn](const V &x) { H y; MT_OK_OR_FAIL(fn(y.out(), x[0], x[1])); return y; };
  };
  auto un = [](mt_status (*fn)(mt_tensor **, mt_tensor *)) {
    return [fn](const V &x) { H y; MT_OK_OR_FAIL(fn(y.out(), x[0])); return y; };
  };
  gradcheck("add (broadcast)", bin(mt_add), {r({3, 4}), r({4})}, {{3, 4}, {4}});
  gradcheck("sub (broadcast)", bin(mt_sub), {r({2, 1, 3}), r({4, 1})}, {{2, 1, 3}, {4, 1}});
  gradcheck("mul (broadcast)", bin(mt_mul), {r({3, 4}), r({3, 1})}, {{3, 4}, {3, 1}});
  gradcheck("div", bin(mt_div), {r({5}), r({5}, 0.5, 2)}, {{5}, {5}});
  gradcheck("matmul 2-D", bin(mt_matmul), {r({3, 4}), r({4, 5})}, {{3, 4}, {4, 5}});
  gradcheck("matmul batched", bin(mt_matmul), {r({2, 3, 4}), r({2, 4, 2})}, {{2, 3, 4}, {2, 4, 2}});
  gradcheck("matmul batched @ 2-D", bin(mt_matmul), {r({2, 3, 4}), r({4, 2})}, {{2, 3, 4}, {4, 2}});
  gradcheck("matmul 2-D @ batched", bin(mt_matmul), {r({3, 4}), r({2, 4, 2})}, {{3, 4}, {2, 4, 2}});
  gradcheck("linear", [](const V &x) { H y; MT_OK_OR_FAIL(mt_linear(y.out(), x[0], x[1], x[2])); return y; },
            {r({2, 3, 4}), r({5, 4}), r({5})}, {{2, 3, 4}, {5, 4}, {5}});
  gradcheck("add_scalar", [](const V &x) { H y; MT_OK_OR_FAIL(mt_add_scalar(y.out(), x[0], 3.0)); return y; }, {r({4})}, {{4}});
  gradcheck("mul_scalar", [](const V &x) { H y; MT_OK_OR_FAIL(mt_mul_scalar(y.out(), x[0], -1.5)); return y; }, {r({4})}, {{4}});
  gradcheck("pow_scalar", [](const V &x) { H y; MT_OK_OR_FAIL(mt_pow_scalar(y.out(), x[0], 2.5)); return y; },
            {r({6}, 0.2, 2)}, {{6}});
  gradcheck("neg", un(mt_neg), {r({3, 2})}, {{3, 2}});
  gradcheck("relu", un(mt_relu), {Vec{-0.7, -0.2, 0.3, 0.9, -1.1, 1.4}}, {{6}});
  gradcheck("sigmoid", un(mt_sigmoid), {r({7}, -3, 3)}, {{7}});
  gradcheck("tanh", un(mt_tanh), {r({7}, -3, 3)}, {{7}});
  gradcheck("exp", un(mt_exp), {r({7})}, {{7}});
  gradcheck("log", un(mt_log), {r({7}, 0.3, 3)}, {{7}});
  gradcheck("sum", un(mt_sum), {r({3, 4})}, {{3, 4}});
  gradcheck("mean", un(mt_mean), {r({3, 4})}, {{3, 4}});
  gradcheck("sum_dim", [](const V &x) { H y; MT_OK_OR_FAIL(mt_sum_dim(y.out(), x[0], 1, 0)); return y; }, {r({2, 3, 4})}, {{2, 3, 4}});
  gradcheck("mean_dim keepdim", [](const V &x) { H y; MT_OK_OR_FAIL(mt_mean_dim(y.out(), x[0], -1, 1)); return y; },
            {r({2, 3, 4})}, {{2, 3, 4}});
  gradcheck("mse_loss", bin(mt_mse_loss), {r({3, 2}), r({3, 2})}, {{3, 2}, {3, 2}});
  gradcheck("reshape", [](const V &x) { H y; const int64_t s[2] = {4, 3}; MT_OK_OR_FAIL(mt_reshape(y.out(), x[0], s, 2)); return y; },
            {r({2, 6})}, {{2, 6}});
  gradcheck("transpose", [](const V &x) { H y; MT_OK_OR_FAIL(mt_transpose(y.out(), x[0], 0, 2)); return y; }, {r({2, 3, 4})}, {{2, 3, 4}});
  gradcheck("permute", [](const V &x) { H y; const int64_t p[3] = {1, 2, 0}; MT_OK_OR_FAIL(mt_permute(y.out(), x[0], p, 3)); return y; },
            {r({2, 3, 4})}, {{2, 3, 4}});
  gradcheck("clone", un(mt_tensor_clone), {r({5})}, {{5}});
  gradcheck("to cpu", [](const V &x) { H y; MT_OK_OR_FAIL(mt_tensor_to(y.out(), x[0], MT_CPU)); return y; }, {r({5})}, {{5}});
  // float64 -> float32 -> float64 loses precision: central differences see float32 steps,
  // so the step and the tolerance follow float32 (eps 1e-3 on inputs of order 1).
  gradcheck("cast f64->f32->f64",
            [](const V &x) {
              H a, b;
              MT_OK_OR_FAIL(mt_tensor_cast(a.out(), x[0], MT_F32));
              MT_OK_OR_FAIL(mt_tensor_cast(b.out(), a, MT_F64));
              return b;
            },
            {r({5})}, {{5}}, 1e-3, 1e-4);
}
