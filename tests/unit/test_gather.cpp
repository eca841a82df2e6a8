// test_gather.cpp - index_select, slice and the init functions.
#include <cmath>

#include "helpers.h"

using namespace t;

namespace {
H make_index(const std::vector<int64_t> &v) {
  H h;
  const int64_t s[1] = {(int64_t)v.size()};
  MT_OK_OR_FAIL(mt_tensor_from_data(h.out(), v.data(), s, 1, MT_I64, dev()));
  return h;
}
}  // namespace

TEST_CASE("index_select gathers rows; repeated indices accumulate in backward") {
  LeakGuard lg;
  H x = make({0, 1, 10, 11, 20, 21}, {3, 2}), idx = make_index({2, 0, 2}), y;
  MT_OK_OR_FAIL(mt_index_select(y.out(), x, idx));
  CHECK(shape_of(y) == Shape{3, 2});
  CHECK(values(y) == Vec{20, 21, 0, 1, 20, 21});
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(x, 1));
  H y2, w = make({1, 2, 3, 4, 5, 6}, {3, 2}), p, l, g;
  MT_OK_OR_FAIL(mt_index_select(y2.out(), x, idx));
  MT_OK_OR_FAIL(mt_mul(p.out(), y2, w));
  MT_OK_OR_FAIL(mt_sum(l.out(), p));
  MT_OK_OR_FAIL(mt_backward(l));
  MT_OK_OR_FAIL(mt_tensor_grad(g.out(), x));
  CHECK(values(g) == Vec{3, 4, 0, 0, 1 + 5, 2 + 6});
  H bad = make_index({1, 3});
  CHECK(mt_index_select(y.out(), x, bad) == MT_ERR_INVALID_ARGUMENT);
  CHECK(std::string(mt_last_error()) == "mt_index_select: index 3 at position 1 is out of range [0, 3)");
}

TEST_CASE("slice along any dim, with Python's clamping") {
  LeakGuard lg;
  Vec v(24);
  for (int i = 0; i < 24; i++) v[(size_t)i] = i;
  H x = make(v, {2, 3, 4}), y;
  MT_OK_OR_FAIL(mt_slice(y.out(), x, 1, 1, 3));
  CHECK(shape_of(y) == Shape{2, 2, 4});
  CHECK(values(y) == Vec{4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23});
  MT_OK_OR_FAIL(mt_slice(y.out(), x, -1, -1, 100));
  CHECK(values(y) == Vec{3, 7, 11, 15, 19, 23});
  MT_OK_OR_FAIL(mt_slice(y.out(), x, 0, 1, 2));  // first dim: a view
  CHECK(values(y) == Vec(v.begin() + 12, v.end()));
  MT_OK_OR_FAIL(mt_slice(y.out(), x, 2, 3, 1));  // empty
  CHECK(shape_of(y) == Shape{2, 3, 0});
}

TEST_CASE("gradcheck index_select and slice") {
  LeakGuard lg;
  std::mt19937_64 rng(4);
  H idx = make_index({1, 1, 0, 3});
  mt_tensor *ip = idx;
  using V = std::vector<mt_tensor *>;
  gradcheck("index_select", [ip](const V &x) { H y; MT_OK_OR_FAIL(mt_index_select(y.out(), x[0], ip)); return y; },
            {randvec(rng, 12)}, {{4, 3}});
  gradcheck("slice dim 1", [](const V &x) { H y; MT_OK_OR_FAIL(mt_slice(y.out(), x[0], 1, 1, 3)); return y; },
            {randvec(rng, 24)}, {{2, 3, 4}});
  gradcheck("slice dim 0 (view)", [](const V &x) { H y; MT_OK_OR_FAIL(mt_slice(y.out(), x[0], 0, 1, 2)); return y; },
            {randvec(rng, 24)}, {{2, 3, 4}});
}

TEST_CASE("init: bounds, moments, seeds, fans") {
  LeakGuard lg;
  const int64_t s[2] = {256, 300};  // fan_out 256, fan_in 300
  H w;
  MT_OK_OR_FAIL(mt_tensor_zeros(w.out(), s, 2, MT_F64, dev()));
  MT_OK_OR_FAIL(mt_init_xavier_uniform(w, 1.0, 9));
  double bound = std::sqrt(6.0 / 556), m = 0, m2 = 0;
  Vec v = values(w);
  for (double x : v) {
    CHECK(std::fabs(x) <= bound);
    m += x / v.size();
    m2 += x * x / v.size();
  }
  // U(-b, b): variance b^2/3; 76800 draws: tolerances are 5 sigma of the sample moments
  CHECK(std::fabs(m) < 5 * bound / std::sqrt(3.0 * v.size()));
  CHECK(std::fabs(m2 - bound * bound / 3) < 5 * bound * bound * 0.3 / std::sqrt((double)v.size()));
  MT_OK_OR_FAIL(mt_init_kaiming_normal(w, std::sqrt(2.0), 9));
  m2 = 0;
  v = values(w);
  for (double x : v) m2 += x * x / v.size();
  CHECK(std::fabs(m2 - 2.0 / 300) < 5 * (2.0 / 300) * std::sqrt(2.0 / v.size()));
  // same seed, same values, on every device
  H a, b;
  MT_OK_OR_FAIL(mt_tensor_zeros(a.out(), s, 2, MT_F32, dev()));
  MT_OK_OR_FAIL(mt_tensor_zeros(b.out(), s, 2, MT_F32, MT_CPU));
  MT_OK_OR_FAIL(mt_init_kaiming_uniform(a, 1.0, 5));
  MT_OK_OR_FAIL(mt_init_kaiming_uniform(b, 1.0, 5));
  CHECK(values(a) == values(b));
  H one;
  const int64_t s1[1] = {5};
  MT_OK_OR_FAIL(mt_tensor_zeros(one.out(), s1, 1, MT_F32, dev()));
  CHECK(mt_init_xavier_uniform(one, 1.0, 1) == MT_ERR_SHAPE);
  MT_OK_OR_FAIL(mt_init_uniform(one, 2, 3, 1));
  for (double x : values(one)) { CHECK(x >= 2); CHECK(x < 3); }
}
