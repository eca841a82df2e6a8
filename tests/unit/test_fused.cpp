// test_fused.cpp - the fused transformer ops (autograd/ops_fused.cpp): LayerNorm and GELU
// in float64 and float32 against their compositions of primitives in float64
// (ops::*_composed, the test references) forward and backward at shapes that reach every kernel path of the CUDA backend, float64
// gradchecks, every output element written (outputs poisoned with NaN first), bit-identical
// parameter gradients run to run, the causal mask's values, and the errors.
#include <cmath>
#include <cstring>
#include <string>

#include "autograd/nn_ops.h"
#include "helpers.h"

using namespace t;

namespace {

using Ln = mt::Ref (*)(const mt::Ref &, const mt::Ref &, const mt::Ref &, double);

mt::Ref ref_of(mt_tensor *h) { return mt::Ref::share(h); }
mt::Ref ref_or_null(const H &h) { return h.get() ? ref_of(h.get()) : mt::Ref(); }

// y = op(inputs), then backward of sum(y * w): y's values and each input's gradient.
struct Run {
  Vec y;
  std::vector<Vec> grads;  // empty for an input that is absent
};

template <class Build>
Run run_graph(Build &&build, std::vector<H *> inputs, const Vec &w, mt_dtype dt) {
  for (H *h : inputs)
    if (h->get()) MT_OK_OR_FAIL(mt_tensor_set_requires_grad(*h, 1));
  H y(build().release()), hw = make(w, shape_of(y), dt), prod, loss;
  MT_OK_OR_FAIL(mt_mul(prod.out(), y, hw));
  MT_OK_OR_FAIL(mt_sum(loss.out(), prod));
  MT_OK_OR_FAIL(mt_backward(loss));
  Run r{values(y), {}};
  for (H *h : inputs) {
    Vec g;
    if (h->get()) {
      H gh;
      MT_OK_OR_FAIL(mt_tensor_grad(gh.out(), *h));
      REQUIRE(gh.get() != nullptr);
      g = values(gh);
      MT_OK_OR_FAIL(mt_tensor_clear_grad(*h));
    }
    r.grads.push_back(g);
  }
  return r;
}

// Fused layer_norm in float64 and float32 against the composition in float64 on the same
// values: y and every gradient. float64 agrees to rounding; float32 to its precision (the
// norms of the errors, 1e-5 as DESIGN.md, the rows being at most 40000 long).
void compare_layer_norm(int64_t rows, int64_t d, bool with_gamma, bool with_beta, uint64_t seed) {
  CAPTURE(rows);
  CAPTURE(d);
  CAPTURE(with_gamma);
  CAPTURE(with_beta);
  std::mt19937_64 rng(seed);
  // an offset mean and a spread scale make the centring and the variance matter
  Vec x = randvec(rng, rows * d, -3, 5), g = randvec(rng, d, 0.5, 1.5), b = randvec(rng, d), w = randvec(rng, rows * d);
  auto run = [&](Ln op, mt_dtype dt) {
    H hx = make(x, {rows, d}, dt), hg = with_gamma ? make(g, {d}, dt) : H(), hb = with_beta ? make(b, {d}, dt) : H();
    return run_graph([&] { return op(ref_of(hx), ref_or_null(hg), ref_or_null(hb), 1e-5); }, {&hx, &hg, &hb}, w, dt);
  };
  const Run want = run(&mt::ops::layer_norm_composed, MT_F64);
  for (mt_dtype dt : {MT_F64, MT_F32}) {
    CAPTURE((int)dt);
    const double tol = dt == MT_F64 ? 1e-11 : 1e-5;
    const Run got = run(&mt::ops::layer_norm, dt);
    CHECK(rel_err(got.y, want.y) < tol);
    for (size_t i = 0; i < 3; i++) {
      CAPTURE(i);
      REQUIRE(got.grads[i].size() == want.grads[i].size());
      if (!want.grads[i].empty()) CHECK(rel_err(got.grads[i], want.grads[i]) < tol);
    }
  }
}

// (rows, d) pairs that reach each CUDA path: the warp kernels with G < 32 and 32 lanes, one
// and several packs per lane, rows not a multiple of the rows per block; the block kernels
// register-cached (forward and backward), cached forward with an uncached backward (d >
// 16384), and uncached (d > 32768); d not a multiple of 4 (scalar kernels); one row; d = 1.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {
    {1, 7}, {3, 8}, {5, 33}, {9, 128}, {17, 1024}, {3, 1028}, {3, 2050}, {2, 20000}, {2, 40000}, {4, 1}, {1, 4096}};

}  // namespace

TEST_CASE("fused layer_norm matches its composition forward and backward") {
  LeakGuard lg;
  uint64_t seed = 600;
  for (const auto &sh : kShapes) compare_layer_norm(sh.first, sh.second, true, true, seed++);
  for (int mask = 0; mask < 3; mask++) {  // gamma and beta absent in turn and together
    compare_layer_norm(6, 12, mask == 1, mask == 2, seed++);
    compare_layer_norm(3, 1028, mask == 1, mask == 2, seed++);
  }
}

TEST_CASE("fused layer_norm: leading dims, gradcheck, and the saved statistics") {
  LeakGuard lg;
  std::mt19937_64 rng(610);
  using V = std::vector<mt_tensor *>;
  auto ln = [](mt_tensor *x, mt_tensor *g, mt_tensor *b) {
    H y;
    MT_OK_OR_FAIL(mt_layer_norm(y.out(), x, g, b, 1e-5));
    return y;
  };
  gradcheck("layer_norm [2,3,5] with gamma, beta", [&](const V &x) { return ln(x[0], x[1], x[2]); },
            {randvec(rng, 30, -2, 2), randvec(rng, 5), randvec(rng, 5)}, {{2, 3, 5}, {5}, {5}});
  gradcheck("layer_norm [1,7] no gamma, beta", [&](const V &x) { return ln(x[0], nullptr, nullptr); },
            {randvec(rng, 7, -2, 2)}, {{1, 7}});
  gradcheck("layer_norm [4,6] gamma only", [&](const V &x) { return ln(x[0], x[1], nullptr); },
            {randvec(rng, 24, -2, 2), randvec(rng, 6)}, {{4, 6}, {6}});
  gradcheck("layer_norm [3,4] beta only", [&](const V &x) { return ln(x[0], nullptr, x[1]); },
            {randvec(rng, 12, -2, 2), randvec(rng, 4)}, {{3, 4}, {4}});
  // one recorded node keeps mean and rstd; y keeps its leading dims
  H x = make(randvec(rng, 24, -2, 2), {2, 3, 4}), y;
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(x, 1));
  int64_t before = mt_tape_size();
  MT_OK_OR_FAIL(mt_layer_norm(y.out(), x, nullptr, nullptr, 1e-5));
  CHECK(shape_of(y) == Shape{2, 3, 4});
  CHECK(mt_tape_size() == before + 1);
  mt_tape_clear();
}

TEST_CASE("layer_norm's backward adds the gradient its input already has, shared or not") {
  // x feeds a LayerNorm and, recorded after it, an add x + c: the add's gradient reaches x and
  // c as one shared tensor before the LayerNorm's rule runs, which then adds it inside its own
  // kernel (rule_adds_prior). x's gradient must be that sum, c's must stay the add's alone.
  LeakGuard lg;
  std::mt19937_64 rng(630);
  const std::pair<int64_t, int64_t> shapes[] = {{6, 128}, {5, 33}, {3, 1028}};
  for (mt_dtype dt : {MT_F64, MT_F32})
    for (const auto &sh : shapes) {
      const int64_t rows = sh.first, d = sh.second, n = rows * d;
      CAPTURE(rows); CAPTURE(d); CAPTURE((int)dt);
      const Vec xv = randvec(rng, n, -2, 2), gv = randvec(rng, d), r1 = randvec(rng, n), r2 = randvec(rng, n),
                cv = randvec(rng, n);
      auto ln_loss = [&](mt_tensor *x, mt_tensor *g) {  // sum(layer_norm(x, g) * r1)
        H r = make(r1, {rows, d}, dt), y, p, l;
        MT_OK_OR_FAIL(mt_layer_norm(y.out(), x, g, nullptr, 1e-5));
        MT_OK_OR_FAIL(mt_mul(p.out(), y, r));
        MT_OK_OR_FAIL(mt_sum(l.out(), p));
        return l;
      };
      Vec ref_x, ref_g;  // the LayerNorm's gradients alone
      {
        H x = make(xv, {rows, d}, dt), g = make(gv, {d}, dt), gx, gg;
        for (mt_tensor *t : {x.get(), g.get()}) MT_OK_OR_FAIL(mt_tensor_set_requires_grad(t, 1));
        H l = ln_loss(x, g);
        MT_OK_OR_FAIL(mt_backward(l));
        MT_OK_OR_FAIL(mt_tensor_grad(gx.out(), x));
        MT_OK_OR_FAIL(mt_tensor_grad(gg.out(), g));
        ref_x = values(gx);
        ref_g = values(gg);
      }
      H x = make(xv, {rows, d}, dt), g = make(gv, {d}, dt), c = make(cv, {rows, d}, dt), r = make(r2, {rows, d}, dt);
      for (mt_tensor *t : {x.get(), g.get(), c.get()}) MT_OK_OR_FAIL(mt_tensor_set_requires_grad(t, 1));
      H l1 = ln_loss(x, g), t, p, l2, l, gx, gg, gc;
      MT_OK_OR_FAIL(mt_add(t.out(), x, c));
      MT_OK_OR_FAIL(mt_mul(p.out(), t, r));
      MT_OK_OR_FAIL(mt_sum(l2.out(), p));
      MT_OK_OR_FAIL(mt_add(l.out(), l1, l2));
      MT_OK_OR_FAIL(mt_backward(l));
      MT_OK_OR_FAIL(mt_tensor_grad(gx.out(), x));
      MT_OK_OR_FAIL(mt_tensor_grad(gg.out(), g));
      MT_OK_OR_FAIL(mt_tensor_grad(gc.out(), c));
      const Vec rv = values(r);
      Vec want = ref_x;
      for (size_t i = 0; i < want.size(); i++) want[i] += rv[i];
      const double tol = dt == MT_F64 ? 1e-12 : 2e-6;  // relative, over the whole tensor
      CHECK(rel_err(values(gx), want) < tol);
      CHECK(values(gc) == rv);  // the shared gradient was read, not written
      CHECK(rel_err(values(gg), ref_g) < tol);
    }
}

TEST_CASE("fused gelu matches its composition forward and backward, and gradchecks") {
  LeakGuard lg;
  std::mt19937_64 rng(620);
  for (int64_t n : {1, 7, 64, 1027, 40000}) {
    CAPTURE(n);
    Vec x = randvec(rng, n, -6, 6), w = randvec(rng, n);
    auto run = [&](mt::Ref (*op)(const mt::Ref &), mt_dtype dt) {
      H hx = make(x, {n}, dt);
      return run_graph([&] { return op(ref_of(hx)); }, {&hx}, w, dt);
    };
    const Run want = run(&mt::ops::gelu_composed, MT_F64);
    for (mt_dtype dt : {MT_F64, MT_F32}) {
      CAPTURE((int)dt);
      // float32: its rounding. float64: the composition's 1 + tanh(u) cancels for negative x
      // (relative error ~1e-11 at x = -6), the fused x * sigmoid(2u) does not.
      const double tol = dt == MT_F64 ? 1e-10 : 1e-5;
      const Run got = run(&mt::ops::gelu, dt);
      CHECK(rel_err(got.y, want.y) < tol);
      CHECK(rel_err(got.grads[0], want.grads[0]) < tol);
    }
  }
  using V = std::vector<mt_tensor *>;
  gradcheck("gelu [3,5]", [](const V &x) { H y; MT_OK_OR_FAIL(mt_gelu(y.out(), x[0])); return y; },
            {randvec(rng, 15, -4, 4)}, {{3, 5}});
}

TEST_CASE("fused kernels write every output element and give the same bits every run") {
  LeakGuard lg;
  std::mt19937_64 rng(630);
  mt::Backend &be = mt::backend_for((mt::Device)dev());
  for (const auto &sh : kShapes) {
    const int64_t rows = sh.first, d = sh.second;
    for (mt::DType dt : {mt::DType::F32, mt::DType::F64}) {
      CAPTURE(rows);
      CAPTURE(d);
      const mt::DType sd = mt::Backend::layer_norm_stats_dtype(dt);
      const mt::Device dv = (mt::Device)dev();
      const mt_dtype cdt = (mt_dtype)dt;
      H hx = make(randvec(rng, rows * d, -2, 3), {rows, d}, cdt), hdy = make(randvec(rng, rows * d), {rows, d}, cdt);
      H hg = make(randvec(rng, d), {d}, cdt), hb = make(randvec(rng, d), {d}, cdt);
      auto nan = [&](const mt::Shape &s, mt::DType t) { return mt::ops::full(s, NAN, t, dv); };
      mt::Ref y = nan({rows, d}, dt), mean = nan({rows}, sd), rstd = nan({rows}, sd);
      be.layer_norm(y->data(), mean->data(), rstd->data(), ref_of(hx)->data(), ref_of(hg)->data(), ref_of(hb)->data(),
                    rows, d, 1e-5, dt);
      std::vector<Vec> runs;
      for (int rep = 0; rep < 2; rep++) {
        mt::Ref dx = nan({rows, d}, dt), dgamma = nan({d}, dt), dbeta = nan({d}, dt);
        be.layer_norm_backward(dx->data(), nullptr, dgamma->data(), dbeta->data(), ref_of(hdy)->data(), ref_of(hx)->data(),
                               mean->data(), rstd->data(), ref_of(hg)->data(), rows, d, dt);
        Vec all;
        for (const mt::Ref &r : {y, mean, rstd, dx, dgamma, dbeta}) {
          Vec v = values(r.get());
          all.insert(all.end(), v.begin(), v.end());
        }
        runs.push_back(all);
      }
      bool finite = true;
      for (double v : runs[0]) finite = finite && std::isfinite(v);
      CHECK(finite);
      CHECK(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(double)) == 0);
      mt::Ref gy = nan({rows, d}, dt), gdx = nan({rows, d}, dt);
      be.gelu(gy->data(), ref_of(hx)->data(), rows * d, dt);
      be.gelu_backward(gdx->data(), ref_of(hdy)->data(), ref_of(hx)->data(), rows * d, dt);
      for (const mt::Ref &r : {gy, gdx})
        for (double v : values(r.get())) finite = finite && std::isfinite(v);
      CHECK(finite);
    }
  }
}

TEST_CASE("the causal mask is built where the tensor lives") {
  LeakGuard lg;
  struct Case { int64_t t, s; Vec want; };
  const Case cases[] = {
      {3, 3, {0, 1, 1, /**/ 0, 0, 1, /**/ 0, 0, 0}},
      {2, 4, {0, 0, 0, 1, /**/ 0, 0, 0, 0}},  // S > T: the queries are the last T positions
      {3, 2, {1, 1, /**/ 0, 1, /**/ 0, 0}},   // S < T: the first query sees no key
      {1, 1, {0}},
  };
  for (const Case &c : cases) {
    CAPTURE(c.t);
    CAPTURE(c.s);
    mt::Ref m = mt::ops::causal_mask(c.t, c.s, (mt::Device)dev());
    CHECK(m->dtype == mt::DType::U8);
    CHECK(m->shape == mt::Shape{c.t, c.s});
    std::vector<uint8_t> got((size_t)(c.t * c.s));
    m->backend().copy_to_host(got.data(), m->data(), (int64_t)got.size());
    CHECK(Vec(got.begin(), got.end()) == c.want);
  }
  CHECK(mt::ops::causal_mask(0, 5, (mt::Device)dev())->numel() == 0);
}

TEST_CASE("fused ops reject bad input with a status and a message") {
  LeakGuard lg;
  H x = make({1, 2, 3, 4, 5, 6}, {2, 3}), g32 = make({1, 1, 1}, {3}, MT_F32), g4 = make({1, 1, 1, 1}, {4}), y;
  CHECK(mt_layer_norm(y.out(), x, g32, nullptr, 1e-5) == MT_ERR_DTYPE);
  CHECK(std::string(mt_last_error()).find("mt_layer_norm: dtypes differ: x is float64, gamma is float32") !=
        std::string::npos);
  CHECK(mt_layer_norm(y.out(), x, nullptr, g4, 1e-5) == MT_ERR_SHAPE);
  CHECK(std::string(mt_last_error()).find("beta must be [3], got [4]") != std::string::npos);
  CHECK(mt_layer_norm(y.out(), x, nullptr, nullptr, -1) == MT_ERR_INVALID_ARGUMENT);
  std::vector<int64_t> iv = {1, 2};
  const int64_t shape[] = {2};
  H xi;
  MT_OK_OR_FAIL(mt_tensor_from_data(xi.out(), iv.data(), shape, 1, MT_I64, dev()));
  CHECK(mt_gelu(y.out(), xi) == MT_ERR_DTYPE);
  CHECK(std::string(mt_last_error()).find("mt_gelu: x must be a floating tensor, got int64") != std::string::npos);
  CHECK(mt_layer_norm(y.out(), xi, nullptr, nullptr, 1e-5) == MT_ERR_DTYPE);
  CHECK(y.get() == nullptr);
}
