// test_classify.cpp - softmax family, cross-entropy, nll, max/argmax, Adam and
// gradient clipping against references written here, plus float64 gradchecks.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "helpers.h"

using namespace t;

namespace {
H make_targets(const std::vector<int64_t> &t, mt_device d = dev()) {
  H h;
  const int64_t s[1] = {(int64_t)t.size()};
  MT_OK_OR_FAIL(mt_tensor_from_data(h.out(), t.data(), s, 1, MT_I64, d));
  return h;
}
std::vector<int64_t> ivalues(mt_tensor *x) {
  int64_t n = 0;
  MT_OK_OR_FAIL(mt_tensor_numel(x, &n));
  std::vector<int64_t> v((size_t)n);
  MT_OK_OR_FAIL(mt_tensor_copy_to_host(x, v.data(), n * 8));
  return v;
}
Vec ref_log_softmax_rows(const Vec &x, int64_t rows, int64_t cols) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; r++) {
    double mx = -INFINITY, s = 0;
    for (int64_t c = 0; c < cols; c++) mx = std::max(mx, x[(size_t)(r * cols + c)]);
    for (int64_t c = 0; c < cols; c++) s += std::exp(x[(size_t)(r * cols + c)] - mx);
    for (int64_t c = 0; c < cols; c++) y[(size_t)(r * cols + c)] = x[(size_t)(r * cols + c)] - mx - std::log(s);
  }
  return y;
}
}  // namespace

TEST_CASE("softmax and log_softmax against the reference, along any dim") {
  LeakGuard lg;
  std::mt19937_64 rng(31);
  Vec xv = randvec(rng, 5 * 7, -4, 4);
  H x = make(xv, {5, 7}), y, ly, yt, xt;
  MT_OK_OR_FAIL(mt_log_softmax(ly.out(), x, -1));
  Vec ref = ref_log_softmax_rows(xv, 5, 7);
  CHECK(rel_err(values(ly), ref) < 1e-14);
  MT_OK_OR_FAIL(mt_softmax(y.out(), x, 1));
  Vec e(ref.size());
  for (size_t i = 0; i < ref.size(); i++) e[i] = std::exp(ref[i]);
  CHECK(rel_err(values(y), e) < 1e-14);
  // dim 0 equals the transpose of the row-wise softmax of the transpose
  MT_OK_OR_FAIL(mt_softmax(y.out(), x, 0));
  MT_OK_OR_FAIL(mt_transpose(xt.out(), x, 0, 1));
  MT_OK_OR_FAIL(mt_softmax(yt.out(), xt, 1));
  H back;
  MT_OK_OR_FAIL(mt_transpose(back.out(), yt, 0, 1));
  CHECK(rel_err(values(y), values(back)) < 1e-15);
}

TEST_CASE("logits of +-1000 give finite results") {
  LeakGuard lg;
  H x = make({1000, -1000, 0, 1000}, {2, 2}, MT_F32), y, l;
  MT_OK_OR_FAIL(mt_softmax(y.out(), x, -1));
  Vec v = values(y);
  CHECK(v == Vec{1, 0, 0, 1});
  MT_OK_OR_FAIL(mt_log_softmax(y.out(), x, -1));
  v = values(y);
  CHECK(v[0] == 0);
  CHECK(v[1] == -2000);
  CHECK(v[2] == -1000);
  H t = make_targets({1, 0});
  MT_OK_OR_FAIL(mt_cross_entropy(l.out(), x, t));
  double lv;
  MT_OK_OR_FAIL(mt_tensor_item(l, &lv));
  CHECK(lv == doctest::Approx(1500).epsilon(1e-6));  // (2000 + 1000) / 2
}

TEST_CASE("cross_entropy equals nll_loss(log_softmax) and both match the reference") {
  LeakGuard lg;
  std::mt19937_64 rng(8);
  int64_t n = 9, c = 6;
  Vec xv = randvec(rng, n * c, -3, 3);
  std::vector<int64_t> tv((size_t)n);
  for (auto &v : tv) v = (int64_t)(rng() % (uint64_t)c);
  H x = make(xv, {n, c}), t = make_targets(tv), ce, ls, nll;
  MT_OK_OR_FAIL(mt_cross_entropy(ce.out(), x, t));
  MT_OK_OR_FAIL(mt_log_softmax(ls.out(), x, 1));
  MT_OK_OR_FAIL(mt_nll_loss(nll.out(), ls, t));
  Vec lsr = ref_log_softmax_rows(xv, n, c);
  double ref = 0;
  for (int64_t r = 0; r < n; r++) ref -= lsr[(size_t)(r * c + tv[(size_t)r])] / (double)n;
  CHECK(values(ce)[0] == doctest::Approx(ref).epsilon(1e-14));
  CHECK(values(nll)[0] == doctest::Approx(ref).epsilon(1e-14));
}

TEST_CASE("out-of-range targets name the first bad index") {
  LeakGuard lg;
  H x = make(Vec(12, 0.5), {4, 3}), l;
  H t = make_targets({0, 2, 3, -1});
  CHECK(mt_cross_entropy(l.out(), x, t) == MT_ERR_INVALID_ARGUMENT);
  CHECK(std::string(mt_last_error()) == "mt_cross_entropy: target 3 at position 2 is out of range [0, 3)");
  CHECK(mt_nll_loss(l.out(), x, t) == MT_ERR_INVALID_ARGUMENT);
  CHECK(std::string(mt_last_error()).find("position 2") != std::string::npos);
  H f = make({0, 1, 2, 0}, {4});  // float targets
  CHECK(mt_cross_entropy(l.out(), x, f) == MT_ERR_DTYPE);
  H short_t = make_targets({0, 1});
  CHECK(mt_cross_entropy(l.out(), x, short_t) == MT_ERR_SHAPE);
}

TEST_CASE("target checks in a row: a bad one between good ones, the last of a long batch, no node recorded") {
  LeakGuard lg;
  std::mt19937_64 rng(77);
  const int64_t n = 70000, c = 5;
  Vec xv = randvec(rng, n * c, -2, 2);
  std::vector<int64_t> tv((size_t)n);
  for (auto &v : tv) v = (int64_t)(rng() % (uint64_t)c);
  Vec lsr = ref_log_softmax_rows(xv, n, c);
  double ref = 0;
  for (int64_t r = 0; r < n; r++) ref -= lsr[(size_t)(r * c + tv[(size_t)r])] / (double)n;
  H x = make(xv, {n, c}), good = make_targets(tv);
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(x, 1));
  std::vector<int64_t> last_bad = tv;
  last_bad.back() = n;  // out of range as a target (c) and as a row of x (n)
  H bad = make_targets(last_bad);
  for (int round = 0; round < 3; round++) {
    H l, b;
    MT_OK_OR_FAIL(mt_cross_entropy(l.out(), x, good));
    CHECK(values(l)[0] == doctest::Approx(ref).epsilon(1e-12));  // float64, summed in another order
    CHECK(mt_cross_entropy(b.out(), x, bad) == MT_ERR_INVALID_ARGUMENT);
    CHECK(std::string(mt_last_error()) == "mt_cross_entropy: target 70000 at position 69999 is out of range [0, 5)");
    CHECK(mt_index_select(b.out(), x, bad) == MT_ERR_INVALID_ARGUMENT);
    CHECK(std::string(mt_last_error()) == "mt_index_select: index 70000 at position 69999 is out of range [0, 70000)");
  }
  // The failed calls recorded nothing: x's gradient is that of the one good loss walked back.
  H l, g;
  MT_OK_OR_FAIL(mt_cross_entropy(l.out(), x, good));
  MT_OK_OR_FAIL(mt_backward(l));
  MT_OK_OR_FAIL(mt_tensor_grad(g.out(), x));
  Vec gv = values(g);
  double worst = 0;
  for (int64_t i = 0; i < n * c; i++) {
    const double want = (std::exp(lsr[(size_t)i]) - (tv[(size_t)(i / c)] == i % c ? 1.0 : 0.0)) / (double)n;
    worst = std::max(worst, std::fabs(gv[(size_t)i] - want));
  }
  CHECK(worst < 1e-15);  // |grad| <= 1/n = 1.4e-5; float64 rounding is far below
}

TEST_CASE("max_dim and argmax") {
  LeakGuard lg;
  H x = make({1, 5, 5, 2, 9, 0, 3, 3, -1}, {3, 3}), v, i, a;
  MT_OK_OR_FAIL(mt_max_dim(v.out(), i.out(), x, 1, 0));
  CHECK(values(v) == Vec{5, 9, 3});
  CHECK(ivalues(i) == std::vector<int64_t>{1, 1, 0});  // the first maximum
  MT_OK_OR_FAIL(mt_argmax(a.out(), x, 0, 1));
  CHECK(ivalues(a) == std::vector<int64_t>{2, 1, 0});
  Shape s = shape_of(a);
  CHECK(s == Shape{1, 3});
}

TEST_CASE("gradcheck the classification family in float64") {
  LeakGuard lg;
  std::mt19937_64 rng(77);
  using V = std::vector<mt_tensor *>;
  gradcheck("softmax dim -1", [](const V &x) { H y; MT_OK_OR_FAIL(mt_softmax(y.out(), x[0], -1)); return y; },
            {randvec(rng, 12, -2, 2)}, {{3, 4}});
  gradcheck("softmax dim 0", [](const V &x) { H y; MT_OK_OR_FAIL(mt_softmax(y.out(), x[0], 0)); return y; },
            {randvec(rng, 24, -2, 2)}, {{3, 4, 2}});
  gradcheck("log_softmax dim 1", [](const V &x) { H y; MT_OK_OR_FAIL(mt_log_softmax(y.out(), x[0], 1)); return y; },
            {randvec(rng, 24, -2, 2)}, {{3, 4, 2}});
  H t = make_targets({2, 0, 3});
  mt_tensor *tt = t;
  gradcheck("cross_entropy", [tt](const V &x) { H y; MT_OK_OR_FAIL(mt_cross_entropy(y.out(), x[0], tt)); return y; },
            {randvec(rng, 12, -2, 2)}, {{3, 4}});
  gradcheck("nll_loss", [tt](const V &x) { H y; MT_OK_OR_FAIL(mt_nll_loss(y.out(), x[0], tt)); return y; },
            {randvec(rng, 12, -2, 2)}, {{3, 4}});
  gradcheck("max_dim", [](const V &x) { H y; MT_OK_OR_FAIL(mt_max_dim(y.out(), nullptr, x[0], 1, 0)); return y; },
            {Vec{0.1, 0.9, -0.3, 0.5, 0.2, 0.7, -0.8, 0.4, 0.05, 0.6, 0.3, -0.2}}, {{2, 3, 2}});
}

TEST_CASE("adam and adamw match the reference update") {
  std::mt19937_64 rng(3);
  for (int decoupled = 0; decoupled < 2; decoupled++) {
    LeakGuard lg;
    Vec p0 = randvec(rng, 5), target = randvec(rng, 5);
    H p = make(p0, {5}), tg = make(target, {5});
    MT_OK_OR_FAIL(mt_tensor_set_requires_grad(p, 1));
    mt_tensor *params[1] = {p};
    mt_optimizer *opt = nullptr;
    const double lr = 0.01, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1;
    if (decoupled) MT_OK_OR_FAIL(mt_optim_adamw(&opt, params, 1, lr, b1, b2, eps, wd));
    else MT_OK_OR_FAIL(mt_optim_adam(&opt, params, 1, lr, b1, b2, eps, wd));
    Vec ref = p0, m(5, 0), v(5, 0);
    for (int s = 1; s <= 5; s++) {
      H l;
      MT_OK_OR_FAIL(mt_optim_zero_grad(opt));
      MT_OK_OR_FAIL(mt_mse_loss(l.out(), p, tg));
      MT_OK_OR_FAIL(mt_backward(l));
      MT_OK_OR_FAIL(mt_optim_step(opt));
      for (size_t i = 0; i < 5; i++) {
        double g = 2 * (ref[i] - target[i]) / 5.0;
        if (decoupled) ref[i] *= 1 - lr * wd;
        else g += wd * ref[i];
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        ref[i] -= lr * (m[i] / (1 - std::pow(b1, s))) / (std::sqrt(v[i] / (1 - std::pow(b2, s))) + eps);
      }
    }
    CHECK(rel_err(values(p), ref) < 1e-13);
    MT_OK_OR_FAIL(mt_optim_free(opt));
  }
}

TEST_CASE("clip_grad_norm scales gradients to the global norm") {
  LeakGuard lg;
  H a = make({3, 0}, {2}), b = make({4}, {1});
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(a, 1));
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(b, 1));
  H sa, sb, l1, l2, l;
  // loss = 3 a0 + 0 a1 + 4 b0 -> grads (3, 0) and (4): global norm 5
  H wa = make({3, 0}, {2}), wb = make({4}, {1});
  MT_OK_OR_FAIL(mt_mul(sa.out(), a, wa));
  MT_OK_OR_FAIL(mt_mul(sb.out(), b, wb));
  MT_OK_OR_FAIL(mt_sum(l1.out(), sa));
  MT_OK_OR_FAIL(mt_sum(l2.out(), sb));
  MT_OK_OR_FAIL(mt_add(l.out(), l1, l2));
  MT_OK_OR_FAIL(mt_backward(l));
  mt_tensor *params[2] = {a, b};
  H norm, ga, gb;
  MT_OK_OR_FAIL(mt_clip_grad_norm(norm.out(), params, 2, 1.0));
  CHECK(values(norm)[0] == doctest::Approx(5).epsilon(1e-15));
  MT_OK_OR_FAIL(mt_tensor_grad(ga.out(), a));
  MT_OK_OR_FAIL(mt_tensor_grad(gb.out(), b));
  double k = 1.0 / (5 + 1e-6);
  CHECK(rel_err(values(ga), Vec{3 * k, 0}) < 1e-15);
  CHECK(rel_err(values(gb), Vec{4 * k}) < 1e-15);
  MT_OK_OR_FAIL(mt_clip_grad_norm(norm.out(), params, 2, 10.0));  // under the limit: unchanged
  CHECK(rel_err(values(ga), Vec{3 * k, 0}) < 1e-15);
}
