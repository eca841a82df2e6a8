// test_fusions.cpp - the fused ops of autograd/ops_fusions.cpp (mt_bias_act, mt_add_layer_norm,
// mt_dropout_add) against their compositions of unfused ops: forward values and every gradient
// in float64 and float32 against the composition in float64 (and bit for bit against the
// composition in the same dtype on the CPU, where both evaluate the same expressions), at
// shapes that reach every kernel path of the CUDA backend; float64 central-difference
// gradchecks; outputs poisoned with NaN to prove every element is written; the same bits on
// every run; the tape's nodes; and the errors.
#include <cmath>
#include <cstring>
#include <string>

#include "autograd/nn_ops.h"
#include "helpers.h"

using namespace t;

namespace {

using V = std::vector<mt_tensor *>;

// Outputs of one graph and the gradients of its inputs after backward of sum_i sum(w_i * out_i).
struct Result {
  std::vector<Vec> outs, grads;  // grads[i] empty for an absent input
};

// build(inputs) -> outputs (recorded); each output contracted with its own random weights.
using Graph = std::function<std::vector<H>(const V &)>;

Result run(const Graph &build, const std::vector<Vec> &vals, const std::vector<Shape> &shapes, mt_dtype dt,
           uint64_t wseed) {
  std::vector<H> in;
  V raw;
  for (size_t i = 0; i < vals.size(); i++) {
    if (vals[i].empty()) {  // an absent optional input
      in.emplace_back();
      raw.push_back(nullptr);
      continue;
    }
    in.push_back(make(vals[i], shapes[i], dt));
    MT_OK_OR_FAIL(mt_tensor_set_requires_grad(in.back(), 1));
    raw.push_back(in.back());
  }
  std::vector<H> outs = build(raw);
  std::mt19937_64 rng(wseed);
  H loss;
  Result r;
  for (H &o : outs) {
    Vec w = randvec(rng, numel(shape_of(o)));
    H hw = make(w, shape_of(o), dt), prod, part, sum;
    MT_OK_OR_FAIL(mt_mul(prod.out(), o, hw));
    MT_OK_OR_FAIL(mt_sum(part.out(), prod));
    if (loss.get()) {
      MT_OK_OR_FAIL(mt_add(sum.out(), loss, part));
      loss = std::move(sum);
    } else {
      loss = std::move(part);
    }
    r.outs.push_back(values(o));
  }
  MT_OK_OR_FAIL(mt_backward(loss));
  for (H &h : in) {
    Vec g;
    if (h.get()) {
      H gh;
      MT_OK_OR_FAIL(mt_tensor_grad(gh.out(), h));
      REQUIRE(gh.get() != nullptr);
      g = values(gh);
    }
    r.grads.push_back(g);
  }
  return r;
}

bool same_bits(const Vec &a, const Vec &b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

// fused and composed graphs on the same inputs: in float64 and float32 against the composition
// in float64 within tol64 / tol32, and bit for bit against the composition in the same dtype
// when `exact` (the CPU, or dropout_add anywhere).
void compare(const Graph &fused, const Graph &composed, const std::vector<Vec> &vals,
             const std::vector<Shape> &shapes, double tol64, double tol32, bool exact) {
  const Result want = run(composed, vals, shapes, MT_F64, 7);
  for (mt_dtype dt : {MT_F64, MT_F32}) {
    CAPTURE((int)dt);
    const Result got = run(fused, vals, shapes, dt, 7);
    const double tol = dt == MT_F64 ? tol64 : tol32;
    REQUIRE(got.outs.size() == want.outs.size());
    for (size_t i = 0; i < got.outs.size(); i++) {
      CAPTURE(i);
      CHECK(rel_err(got.outs[i], want.outs[i]) < tol);
    }
    for (size_t i = 0; i < got.grads.size(); i++) {
      CAPTURE(i);
      REQUIRE(got.grads[i].size() == want.grads[i].size());
      if (!want.grads[i].empty()) CHECK(rel_err(got.grads[i], want.grads[i]) < tol);
    }
    if (exact) {
      const Result same = run(composed, vals, shapes, dt, 7);
      for (size_t i = 0; i < got.outs.size(); i++) CHECK(same_bits(got.outs[i], same.outs[i]));
      for (size_t i = 0; i < got.grads.size(); i++) CHECK(same_bits(got.grads[i], same.grads[i]));
    }
  }
}

bool on_cpu() { return dev() == MT_CPU; }

std::vector<H> one(H h) {
  std::vector<H> v;
  v.push_back(std::move(h));
  return v;
}

H bias_act(mt_tensor *x, mt_tensor *b, mt_activation act) {
  H y;
  MT_OK_OR_FAIL(mt_bias_act(y.out(), x, b, act));
  return y;
}

H bias_act_composed(mt_tensor *x, mt_tensor *b, mt_activation act) {
  H z, y;
  MT_OK_OR_FAIL(mt_add(z.out(), x, b));
  if (act == MT_ACT_IDENTITY) return z;
  MT_OK_OR_FAIL(act == MT_ACT_RELU ? mt_relu(y.out(), z) : mt_gelu(y.out(), z));
  return y;
}

std::vector<H> add_ln(const V &in) {
  std::vector<H> v(2);
  MT_OK_OR_FAIL(mt_add_layer_norm(v[0].out(), v[1].out(), in[0], in[1], in[2], in[3], 1e-5));
  return v;
}

std::vector<H> add_ln_composed(const V &in) {
  std::vector<H> v(2);
  MT_OK_OR_FAIL(mt_add(v[0].out(), in[0], in[1]));
  MT_OK_OR_FAIL(mt_layer_norm(v[1].out(), v[0], in[2], in[3], 1e-5));
  return v;
}

// (rows, n) pairs that reach each CUDA path of bias_act: 16-byte packs with fewer than 32 and
// with 32 column lanes, several column tiles, a partial last tile, scalar columns (n % 4 != 0),
// one row, rows not a multiple of the row lanes, n = 1; and of add_layer_norm: a warp per row
// with 1, 2 and 8 packs per lane, a block per row with 1 and 2 packs per lane (d = 1028, 4096),
// the uncached kernel (d % 4 != 0, d = 20000 beyond the cached width).
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 7},    {3, 8},     {5, 33},   {9, 128},  {17, 1024},
                                                          {3, 1028}, {2, 4096},  {2, 20000}, {4, 1},   {70, 96},
                                                          {33, 260}, {300, 12}};

}  // namespace

TEST_CASE("bias_act matches act(x + bias) forward and backward") {
  LeakGuard lg;
  std::mt19937_64 rng(700);
  for (mt_activation act : {MT_ACT_IDENTITY, MT_ACT_RELU, MT_ACT_GELU}) {
    for (const auto &sh : kShapes) {
      const int64_t rows = sh.first, n = sh.second;
      CAPTURE((int)act);
      CAPTURE(rows);
      CAPTURE(n);
      const std::vector<Vec> vals = {randvec(rng, rows * n, -4, 4), randvec(rng, n)};
      const std::vector<Shape> shapes = {{rows, n}, {n}};
      // float64: the same formulas (gelu in the x sigmoid(2u) form both ways); float32: its
      // rounding, 1e-4 for the bias gradient's column sums over up to 300 rows
      compare([&](const V &in) { return one(bias_act(in[0], in[1], act)); },
              [&](const V &in) { return one(bias_act_composed(in[0], in[1], act)); }, vals, shapes, 1e-12, 1e-5,
              on_cpu());
    }
  }
}

TEST_CASE("bias_act: leading dims, inputs without grad, gradcheck, one tape node") {
  LeakGuard lg;
  std::mt19937_64 rng(710);
  for (mt_activation act : {MT_ACT_IDENTITY, MT_ACT_RELU, MT_ACT_GELU}) {
    CAPTURE((int)act);
    gradcheck("bias_act [2,3,5]", [&](const V &x) { return bias_act(x[0], x[1], act); },
              {randvec(rng, 30, -3, 3), randvec(rng, 5)}, {{2, 3, 5}, {5}});
  }
  // only one input needs grad: the other gets none, and the values are the composition's
  for (int which = 0; which < 2; which++) {
    H x = make(randvec(rng, 12, -2, 2), {3, 4}), b = make(randvec(rng, 4), {4}), y, s;
    MT_OK_OR_FAIL(mt_tensor_set_requires_grad(which ? b : x, 1));
    const int64_t before = mt_tape_size();
    MT_OK_OR_FAIL(mt_bias_act(y.out(), x, b, MT_ACT_GELU));
    CHECK(mt_tape_size() == before + 1);
    CHECK(shape_of(y) == Shape{3, 4});
    MT_OK_OR_FAIL(mt_sum(s.out(), y));
    MT_OK_OR_FAIL(mt_backward(s));
    H gx, gb;
    MT_OK_OR_FAIL(mt_tensor_grad(gx.out(), x));
    MT_OK_OR_FAIL(mt_tensor_grad(gb.out(), b));
    CHECK((gx.get() != nullptr) == (which == 0));
    CHECK((gb.get() != nullptr) == (which == 1));
  }
  // under no-grad nothing is recorded
  H x = make(randvec(rng, 6), {2, 3}), b = make(randvec(rng, 3), {3}), y;
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(x, 1));
  const int64_t prev = mt_set_grad_enabled(0), before = mt_tape_size();
  MT_OK_OR_FAIL(mt_bias_act(y.out(), x, b, MT_ACT_RELU));
  CHECK(mt_tape_size() == before);
  mt_set_grad_enabled(prev);
}

TEST_CASE("add_layer_norm matches add then layer_norm, both outputs, forward and backward") {
  LeakGuard lg;
  std::mt19937_64 rng(720);
  for (const auto &sh : kShapes) {
    const int64_t rows = sh.first, d = sh.second;
    for (int mask = 0; mask < 4; mask++) {  // gamma and beta: both, gamma only, beta only, neither
      if (mask && d != 33 && d != 1028) continue;
      CAPTURE(rows);
      CAPTURE(d);
      CAPTURE(mask);
      const bool g = mask == 0 || mask == 1, b = mask == 0 || mask == 2;
      // an offset mean and a spread scale make the centring and the variance matter
      const std::vector<Vec> vals = {randvec(rng, rows * d, -3, 5), randvec(rng, rows * d, -1, 2),
                                     g ? randvec(rng, d, 0.5, 1.5) : Vec(), b ? randvec(rng, d) : Vec()};
      const std::vector<Shape> shapes = {{rows, d}, {rows, d}, {d}, {d}};
      // float64 to rounding; float32 to its precision (1e-5, the rows at most 20000 long), 1e-4
      // for rows of one element, where rstd = 1 / sqrt(eps) ~ 316 scales the rounding of x - mean
      compare(add_ln, add_ln_composed, vals, shapes, 1e-11, d == 1 ? 1e-4 : 1e-5, on_cpu());
    }
  }
}

TEST_CASE("add_layer_norm: gradcheck through both outputs, two tape nodes, leading dims") {
  LeakGuard lg;
  std::mt19937_64 rng(730);
  // both outputs in one tensor (cat along a new leading block) so each gets its own weights
  auto both = [](const V &x, bool g, bool b) {
    mt_tensor *s = nullptr, *y = nullptr;
    MT_OK_OR_FAIL(mt_add_layer_norm(&s, &y, x[0], x[1], g ? x[2] : nullptr, b ? x[g ? 3 : 2] : nullptr, 1e-5));
    H hs(s), hy(y), out;
    mt_tensor *parts[2] = {hs, hy};
    MT_OK_OR_FAIL(mt_cat(out.out(), parts, 2, 0));
    return out;
  };
  gradcheck("add_layer_norm [2,3,5] with gamma, beta", [&](const V &x) { return both(x, true, true); },
            {randvec(rng, 30, -2, 2), randvec(rng, 30), randvec(rng, 5), randvec(rng, 5)}, {{2, 3, 5}, {2, 3, 5}, {5}, {5}});
  gradcheck("add_layer_norm [4,6] without gamma, beta", [&](const V &x) { return both(x, false, false); },
            {randvec(rng, 24, -2, 2), randvec(rng, 24)}, {{4, 6}, {4, 6}});
  // two nodes: the sum (ADD) and the normalization of it (LAYER_NORM)
  H x = make(randvec(rng, 24, -2, 2), {2, 3, 4}), r = make(randvec(rng, 24), {2, 3, 4});
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(r, 1));
  mt_tensor *s = nullptr, *y = nullptr;
  const int64_t before = mt_tape_size();
  MT_OK_OR_FAIL(mt_add_layer_norm(&s, &y, x, r, nullptr, nullptr, 1e-5));
  H hs(s), hy(y);
  CHECK(mt_tape_size() == before + 2);
  CHECK(shape_of(hs) == Shape{2, 3, 4});
  CHECK(shape_of(hy) == Shape{2, 3, 4});
  mt_tape_clear();
}

TEST_CASE("dropout_add equals add(residual, dropout(x)) bit for bit, forward and backward") {
  LeakGuard lg;
  std::mt19937_64 rng(740);
  for (int64_t n : {1, 7, 64, 1027, 40000}) {
    for (double p : {0.0, 0.1, 0.5, 0.9}) {
      CAPTURE(n);
      CAPTURE(p);
      const int64_t seed = 1000 + n;
      const std::vector<Vec> vals = {randvec(rng, n, -3, 3), randvec(rng, n)};
      const std::vector<Shape> shapes = {{n}, {n}};
      auto fused = [&](const V &in) {
        H y;
        MT_OK_OR_FAIL(mt_dropout_add(y.out(), in[0], in[1], p, seed));
        return one(std::move(y));
      };
      auto composed = [&](const V &in) {
        H d, y;
        MT_OK_OR_FAIL(mt_dropout(d.out(), in[0], p, seed));
        MT_OK_OR_FAIL(mt_add(y.out(), in[1], d));
        return one(std::move(y));
      };
      // float32 against float64: the masks agree except where a float32 draw rounds across p
      // (a 2^-24 window), which none of these inputs hit; 1e-6 is float32's rounding
      compare(fused, composed, vals, shapes, 1e-15, 1e-6, true);
    }
  }
  // the gradient of x is the mask scaled by 1/(1-p); gradcheck (linear in x for a fixed mask)
  gradcheck("dropout_add [3,5]",
            [](const V &x) {
              H y;
              MT_OK_OR_FAIL(mt_dropout_add(y.out(), x[0], x[1], 0.3, 99));
              return y;
            },
            {randvec(rng, 15), randvec(rng, 15)}, {{3, 5}, {3, 5}});
}

TEST_CASE("fusion kernels write every output element and give the same bits every run") {
  LeakGuard lg;
  std::mt19937_64 rng(750);
  mt::Backend &be = mt::backend_for((mt::Device)dev());
  const mt::Device dv = (mt::Device)dev();
  auto nan = [&](const mt::Shape &s, mt::DType t) { return mt::ops::full(s, NAN, t, dv); };
  auto ref = [](const H &h) { return mt::Ref::share(h.get()); };
  for (const auto &sh : kShapes) {
    const int64_t rows = sh.first, n = sh.second;
    for (mt::DType dt : {mt::DType::F32, mt::DType::F64}) {
      CAPTURE(rows);
      CAPTURE(n);
      CAPTURE((int)dt);
      const mt_dtype cdt = (mt_dtype)dt;
      const mt::DType sd = mt::Backend::layer_norm_stats_dtype(dt);
      H hx = make(randvec(rng, rows * n, -2, 3), {rows, n}, cdt), hr = make(randvec(rng, rows * n), {rows, n}, cdt);
      H hb = make(randvec(rng, n), {n}, cdt), hg = make(randvec(rng, n), {n}, cdt);
      std::vector<Vec> runs;
      for (int rep = 0; rep < 2; rep++) {
        mt::Ref y = nan({rows, n}, dt), dx = nan({rows, n}, dt), db = nan({n}, dt);
        mt::Ref s = nan({rows, n}, dt), ln = nan({rows, n}, dt), mean = nan({rows}, sd), rstd = nan({rows}, sd);
        mt::Ref da = nan({rows, n}, dt);
        be.bias_act(y->data(), ref(hx)->data(), ref(hb)->data(), rows, n, mt::Backend::Activation::GELU, dt);
        be.bias_act_backward(dx->data(), db->data(), ref(hr)->data(), ref(hx)->data(), ref(hb)->data(), rows, n,
                             mt::Backend::Activation::GELU, dt);
        be.add_layer_norm(s->data(), ln->data(), mean->data(), rstd->data(), ref(hx)->data(), ref(hr)->data(),
                          ref(hg)->data(), ref(hb)->data(), rows, n, 1e-5, dt);
        be.dropout_add(da->data(), ref(hx)->data(), ref(hr)->data(), rows * n, 0.25, 5, dt);
        Vec all;
        for (const mt::Ref &t : {y, dx, db, s, ln, mean, rstd, da}) {
          Vec v = values(t.get());
          all.insert(all.end(), v.begin(), v.end());
        }
        runs.push_back(all);
      }
      bool finite = true;
      for (double v : runs[0]) finite = finite && std::isfinite(v);
      CHECK(finite);
      CHECK(same_bits(runs[0], runs[1]));
    }
  }
}

TEST_CASE("fusions reject bad input with a status and a message") {
  LeakGuard lg;
  H x = make({1, 2, 3, 4, 5, 6}, {2, 3}), b3 = make({1, 1, 1}, {3}), b4 = make({1, 1, 1, 1}, {4});
  H b32 = make({1, 1, 1}, {3}, MT_F32), r23 = make({0, 0, 0, 0, 0, 0}, {2, 3}), r32 = make({0, 0, 0}, {3, 1}), y;
  auto said = [](const char *what) { return std::string(mt_last_error()).find(what) != std::string::npos; };
  CHECK(mt_bias_act(y.out(), x, b4, MT_ACT_RELU) == MT_ERR_SHAPE);
  CHECK(said("mt_bias_act: bias must be [3] (the last dim of x [2,3]), got [4]"));
  CHECK(mt_bias_act(y.out(), x, b32, MT_ACT_RELU) == MT_ERR_DTYPE);
  CHECK(said("mt_bias_act: dtypes differ: x is float64, bias is float32"));
  CHECK(mt_bias_act(y.out(), x, b3, (mt_activation)7) == MT_ERR_INVALID_ARGUMENT);
  CHECK(said("mt_bias_act: act must be MT_ACT_IDENTITY (0), MT_ACT_RELU (1) or MT_ACT_GELU (2), got 7"));
  CHECK(mt_bias_act(y.out(), nullptr, b3, MT_ACT_RELU) == MT_ERR_INVALID_ARGUMENT);
  CHECK(said("mt_bias_act: x is NULL"));
  CHECK(mt_bias_act(nullptr, x, b3, MT_ACT_RELU) == MT_ERR_INVALID_ARGUMENT);

  mt_tensor *s = nullptr, *n = nullptr;
  CHECK(mt_add_layer_norm(&s, &n, x, r32, nullptr, nullptr, 1e-5) == MT_ERR_SHAPE);
  CHECK(said("mt_add_layer_norm: residual must have x's shape [2,3], got [3,1]"));
  CHECK((s == nullptr && n == nullptr));
  CHECK(mt_add_layer_norm(&s, &n, x, r23, b4, nullptr, 1e-5) == MT_ERR_SHAPE);
  CHECK(said("mt_add_layer_norm: gamma must be [3], got [4]"));
  CHECK(mt_add_layer_norm(&s, &n, x, r23, nullptr, nullptr, -1) == MT_ERR_INVALID_ARGUMENT);
  CHECK(mt_add_layer_norm(&s, nullptr, x, r23, nullptr, nullptr, 1e-5) == MT_ERR_INVALID_ARGUMENT);
  CHECK(said("mt_add_layer_norm: sum_out and norm_out must not be NULL"));
  CHECK(s == nullptr);
  CHECK(mt_add_layer_norm(&s, &n, x, nullptr, nullptr, nullptr, 1e-5) == MT_ERR_INVALID_ARGUMENT);
  CHECK(said("mt_add_layer_norm: residual is NULL"));
  CHECK((s == nullptr && n == nullptr));

  CHECK(mt_dropout_add(y.out(), x, r23, 1.0, 1) == MT_ERR_INVALID_ARGUMENT);
  CHECK(said("mt_dropout_add: p must be in [0, 1), got 1"));
  CHECK(mt_dropout_add(y.out(), x, r32, 0.5, 1) == MT_ERR_SHAPE);
  CHECK(said("mt_dropout_add: residual must have x's shape [2,3], got [3,1]"));
  std::vector<int64_t> iv = {1, 2, 3, 4, 5, 6};
  const int64_t shape[] = {2, 3};
  H xi;
  MT_OK_OR_FAIL(mt_tensor_from_data(xi.out(), iv.data(), shape, 2, MT_I64, dev()));
  CHECK(mt_dropout_add(y.out(), xi, r23, 0.5, 1) == MT_ERR_DTYPE);
  CHECK(said("mt_dropout_add: x must be a floating tensor, got int64"));
  CHECK(mt_bias_act(y.out(), xi, b3, MT_ACT_GELU) == MT_ERR_DTYPE);
  CHECK(y.get() == nullptr);
}
