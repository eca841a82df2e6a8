// test_nn_ops.cpp - the transformer blocks: forward values against references written
// here (float64 loops), and float64 gradchecks of each composition.
#include <cmath>

#include "helpers.h"

using namespace t;

namespace {
H make_i64(const std::vector<int64_t> &v, const Shape &shape) {
  H h;
  MT_OK_OR_FAIL(mt_tensor_from_data(h.out(), v.data(), shape.data(), (int64_t)shape.size(), MT_I64, dev()));
  return h;
}
}  // namespace

TEST_CASE("layer_norm and gelu against float64 references") {
  LeakGuard lg;
  std::mt19937_64 rng(51);
  const int64_t R = 3, D = 7;
  Vec x = randvec(rng, R * D, -2, 2), g = randvec(rng, D), b = randvec(rng, D);
  H hx = make(x, {R, D}), hg = make(g, {D}), hb = make(b, {D}), y;
  MT_OK_OR_FAIL(mt_layer_norm(y.out(), hx, hg, hb, 1e-5));
  Vec ref((size_t)(R * D));
  for (int64_t r = 0; r < R; r++) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < D; c++) m += x[(size_t)(r * D + c)] / D;
    for (int64_t c = 0; c < D; c++) v += (x[(size_t)(r * D + c)] - m) * (x[(size_t)(r * D + c)] - m) / D;
    for (int64_t c = 0; c < D; c++)
      ref[(size_t)(r * D + c)] = (x[(size_t)(r * D + c)] - m) / std::sqrt(v + 1e-5) * g[(size_t)c] + b[(size_t)c];
  }
  CHECK(rel_err(values(y), ref) < 1e-13);
  MT_OK_OR_FAIL(mt_gelu(y.out(), hx));
  for (size_t i = 0; i < x.size(); i++)
    ref[i] = 0.5 * x[i] * (1 + std::tanh(std::sqrt(2 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  CHECK(rel_err(values(y), ref) < 1e-14);
}

TEST_CASE("embedding gathers rows for indices of any shape") {
  LeakGuard lg;
  H w = make({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2}), idx = make_i64({3, 0, 3, 1, 2, 2}, {2, 3}), y;
  MT_OK_OR_FAIL(mt_embedding(y.out(), w, idx));
  CHECK(shape_of(y) == Shape{2, 3, 2});
  CHECK(values(y) == Vec{30, 31, 0, 1, 30, 31, 10, 11, 20, 21, 20, 21});
  H bad = make_i64({0, 4}, {2});
  CHECK(mt_embedding(y.out(), w, bad) == MT_ERR_INVALID_ARGUMENT);
  CHECK(std::string(mt_last_error()).find("index 4 at position 1") != std::string::npos);
}

TEST_CASE("scaled dot-product attention against a reference, causal and not") {
  LeakGuard lg;
  std::mt19937_64 rng(52);
  const int64_t B = 2, T = 5, S = 5, Dk = 3, Dv = 4;
  Vec q = randvec(rng, B * T * Dk), k = randvec(rng, B * S * Dk), v = randvec(rng, B * S * Dv);
  H hq = make(q, {B, T, Dk}), hk = make(k, {B, S, Dk}), hv = make(v, {B, S, Dv});
  for (int causal = 0; causal < 2; causal++) {
    H y;
    MT_OK_OR_FAIL(mt_scaled_dot_product_attention(y.out(), hq, hk, hv, causal));
    Vec ref((size_t)(B * T * Dv), 0.0);
    for (int64_t bi = 0; bi < B; bi++)
      for (int64_t i = 0; i < T; i++) {
        std::vector<double> s((size_t)S);
        double mx = -INFINITY, tot = 0;
        for (int64_t j = 0; j < S; j++) {
          double acc = 0;
          for (int64_t d = 0; d < Dk; d++) acc += q[(size_t)((bi * T + i) * Dk + d)] * k[(size_t)((bi * S + j) * Dk + d)];
          s[(size_t)j] = (causal && j > i) ? -INFINITY : acc / std::sqrt((double)Dk);
          mx = std::max(mx, s[(size_t)j]);
        }
        for (int64_t j = 0; j < S; j++) tot += std::exp(s[(size_t)j] - mx);
        for (int64_t j = 0; j < S; j++)
          for (int64_t d = 0; d < Dv; d++)
            ref[(size_t)((bi * T + i) * Dv + d)] += std::exp(s[(size_t)j] - mx) / tot * v[(size_t)((bi * S + j) * Dv + d)];
      }
    CHECK(rel_err(values(y), ref) < 1e-13);
  }
  H y2;  // an explicit scale equal to the default gives the same result
  H y1;
  MT_OK_OR_FAIL(mt_scaled_dot_product_attention(y1.out(), hq, hk, hv, 0));
  MT_OK_OR_FAIL(mt_scaled_dot_product_attention_scaled(y2.out(), hq, hk, hv, 0, 1 / std::sqrt(3.0)));
  CHECK(rel_err(values(y2), values(y1)) < 1e-15);
}

TEST_CASE("cat, masked_fill and dropout") {
  LeakGuard lg;
  H a = make({1, 2, 3, 4}, {2, 2}), b = make({5, 6}, {2, 1}), y;
  mt_tensor *ts[2] = {a, b};
  MT_OK_OR_FAIL(mt_cat(y.out(), ts, 2, 1));
  CHECK(shape_of(y) == Shape{2, 3});
  CHECK(values(y) == Vec{1, 2, 5, 3, 4, 6});
  CHECK(mt_cat(y.out(), ts, 2, 0) == MT_ERR_SHAPE);
  H m;
  const uint8_t mv[2] = {0, 1};
  const int64_t ms[2] = {1, 2};
  MT_OK_OR_FAIL(mt_tensor_from_data(m.out(), mv, ms, 2, MT_U8, dev()));
  MT_OK_OR_FAIL(mt_masked_fill(y.out(), a, m, -7));
  CHECK(values(y) == Vec{1, -7, 3, -7});
  // dropout: kept elements scaled by 1/(1-p), the kept fraction near 1-p, seed-deterministic
  const int64_t n[1] = {20000};
  H x, d1, d2;
  MT_OK_OR_FAIL(mt_tensor_ones(x.out(), n, 1, MT_F64, dev()));
  MT_OK_OR_FAIL(mt_dropout(d1.out(), x, 0.25, 7));
  MT_OK_OR_FAIL(mt_dropout(d2.out(), x, 0.25, 7));
  Vec v1 = values(d1);
  CHECK(v1 == values(d2));
  double kept = 0;
  for (double e : v1) {
    CHECK((e == 0 || std::fabs(e - 1 / 0.75) < 1e-15));
    kept += e != 0;
  }
  CHECK(std::fabs(kept / 20000 - 0.75) < 0.0154);  // 5 sigma: 5 sqrt(0.25 * 0.75 / 20000)
  CHECK(mt_dropout(d1.out(), x, 1.0, 7) == MT_ERR_INVALID_ARGUMENT);
}

TEST_CASE("gradcheck the transformer blocks") {
  LeakGuard lg;
  std::mt19937_64 rng(53);
  using V = std::vector<mt_tensor *>;
  gradcheck("layer_norm", [](const V &x) { H y; MT_OK_OR_FAIL(mt_layer_norm(y.out(), x[0], x[1], x[2], 1e-5)); return y; },
            {randvec(rng, 12, -2, 2), randvec(rng, 4), randvec(rng, 4)}, {{3, 4}, {4}, {4}});
  gradcheck("gelu", [](const V &x) { H y; MT_OK_OR_FAIL(mt_gelu(y.out(), x[0])); return y; }, {randvec(rng, 8, -3, 3)}, {{8}});
  H idx = make_i64({2, 0, 2, 1}, {2, 2});
  mt_tensor *ip = idx;
  gradcheck("embedding", [ip](const V &x) { H y; MT_OK_OR_FAIL(mt_embedding(y.out(), x[0], ip)); return y; },
            {randvec(rng, 6)}, {{3, 2}});
  for (int causal = 0; causal < 2; causal++)
    gradcheck(causal ? "sdpa causal" : "sdpa",
              [causal](const V &x) {
                H y;
                MT_OK_OR_FAIL(mt_scaled_dot_product_attention(y.out(), x[0], x[1], x[2], causal));
                return y;
              },
              {randvec(rng, 2 * 3 * 2), randvec(rng, 2 * 3 * 2), randvec(rng, 2 * 3 * 2)}, {{2, 3, 2}, {2, 3, 2}, {2, 3, 2}});
  gradcheck("cat dim 0", [](const V &x) { H y; mt_tensor *ts[2] = {x[0], x[1]}; MT_OK_OR_FAIL(mt_cat(y.out(), ts, 2, 0)); return y; },
            {randvec(rng, 6), randvec(rng, 3)}, {{2, 3}, {1, 3}});
  gradcheck("cat dim 1", [](const V &x) { H y; mt_tensor *ts[2] = {x[0], x[1]}; MT_OK_OR_FAIL(mt_cat(y.out(), ts, 2, -1)); return y; },
            {randvec(rng, 6), randvec(rng, 4)}, {{2, 3}, {2, 2}});
}
