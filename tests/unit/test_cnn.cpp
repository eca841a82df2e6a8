// test_cnn.cpp - the convolutional-network family (mt_conv2d, mt_conv2d_ex, mt_set_conv_algo,
// mt_max_pool2d, mt_avg_pool2d, mt_batch_norm) on the device under test: forward values
// against naive loops written here (bounds tested per tap, independent of the library's
// clipped ranges), float64 gradchecks, running-statistic updates, error codes, leaks.
// On CUDA every conv forward is also run with each path forced (im2col, the direct kernels,
// and cuDNN where the build has it).
#include <cmath>
#include <string>

#include "helpers.h"

using namespace t;

namespace {

bool has(const char *needle) { return std::string(mt_last_error()).find(needle) != std::string::npos; }

struct ConvCase {
  Shape x, w;
  int64_t sh, sw, ph, pw, dh, dw;
  bool bias;
};

int64_t out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

// y[n,k,oh,ow] = b[k] + sum_{c,r,s} w[k,c,r,s] x[n,c,ih,iw] where the tap is inside x.
Vec conv_ref(const Vec &x, const Vec &w, const Vec *b, const ConvCase &c) {
  const int64_t N = c.x[0], C = c.x[1], H = c.x[2], W = c.x[3], K = c.w[0], R = c.w[2], S = c.w[3];
  const int64_t Ho = out_size(H, R, c.sh, c.ph, c.dh), Wo = out_size(W, S, c.sw, c.pw, c.dw);
  Vec y((size_t)(N * K * Ho * Wo));
  for (int64_t n = 0; n < N; n++)
    for (int64_t k = 0; k < K; k++)
      for (int64_t oh = 0; oh < Ho; oh++)
        for (int64_t ow = 0; ow < Wo; ow++) {
          double acc = b ? (*b)[(size_t)k] : 0.0;
          for (int64_t ch = 0; ch < C; ch++)
            for (int64_t r = 0; r < R; r++)
              for (int64_t s = 0; s < S; s++) {
                const int64_t ih = oh * c.sh - c.ph + r * c.dh, iw = ow * c.sw - c.pw + s * c.dw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += w[(size_t)(((k * C + ch) * R + r) * S + s)] * x[(size_t)(((n * C + ch) * H + ih) * W + iw)];
              }
          y[(size_t)(((n * K + k) * Ho + oh) * Wo + ow)] = acc;
        }
  return y;
}

H conv(mt_tensor *x, mt_tensor *w, mt_tensor *b, const ConvCase &c) {
  H y;
  MT_OK_OR_FAIL(mt_conv2d_ex(y.out(), x, w, b, c.sh, c.sw, c.ph, c.pw, c.dh, c.dw));
  return y;
}

const ConvCase kConvCases[] = {
    {{2, 3, 7, 6}, {4, 3, 3, 2}, 1, 1, 0, 0, 1, 1, true},   // non-square kernel, no padding
    {{1, 2, 8, 9}, {3, 2, 3, 3}, 2, 1, 1, 2, 1, 1, false},  // per-axis stride and padding
    {{2, 2, 9, 7}, {2, 2, 2, 3}, 1, 2, 2, 1, 2, 3, true},   // dilation, padding wider than dilation
    {{1, 1, 5, 5}, {2, 1, 5, 5}, 3, 3, 2, 2, 1, 1, true},   // stride larger than the kernel reach
    {{3, 4, 4, 4}, {5, 4, 1, 1}, 1, 1, 0, 0, 1, 1, false},  // 1x1
};

// The conv paths a test runs on this device: just the default on the CPU; on CUDA the
// default, im2col, the direct kernels and (when the build has it) cuDNN.
std::vector<int64_t> conv_algos() {
  std::vector<int64_t> algos = {0};
  if (dev() != MT_CUDA) return algos;
  algos.push_back(1);
  algos.push_back(3);
  int64_t prev = 0;
  if (mt_set_conv_algo(2, &prev) == MT_OK) {
    algos.push_back(2);
    mt_set_conv_algo(prev, nullptr);
  }
  return algos;
}

struct AlgoScope {  // forces a conv path for a scope
  int64_t prev = 0;
  explicit AlgoScope(int64_t algo) { MT_OK_OR_FAIL(mt_set_conv_algo(algo, &prev)); }
  ~AlgoScope() { mt_set_conv_algo(prev, nullptr); }
};

Vec pool_ref(const Vec &x, const Shape &s, int64_t k, int64_t st, bool max, std::vector<int64_t> *idx = nullptr) {
  const int64_t P = s[0] * s[1], H = s[2], W = s[3], Ho = (H - k) / st + 1, Wo = (W - k) / st + 1;
  Vec y;
  for (int64_t p = 0; p < P; p++)
    for (int64_t oh = 0; oh < Ho; oh++)
      for (int64_t ow = 0; ow < Wo; ow++) {
        double best = -INFINITY, sum = 0;
        int64_t arg = -1;
        for (int64_t i = 0; i < k; i++)
          for (int64_t j = 0; j < k; j++) {
            const int64_t ih = oh * st + i, iw = ow * st + j;
            const double v = x[(size_t)((p * H + ih) * W + iw)];
            sum += v;
            if (v > best) { best = v; arg = ih * W + iw; }
          }
        y.push_back(max ? best : sum / (double)(k * k));
        if (idx) idx->push_back(arg);
      }
  return y;
}

// Training-mode batch norm of x viewed as (N, C, HW): y, the batch mean and biased variance.
Vec bn_ref(const Vec &x, const Shape &s, const Vec &g, const Vec &b, Vec &mean, Vec &var, double eps) {
  const int64_t N = s[0], C = s[1], HW = s.size() == 4 ? s[2] * s[3] : 1;
  mean.assign((size_t)C, 0);
  var.assign((size_t)C, 0);
  for (int64_t c = 0; c < C; c++) {
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < HW; i++) mean[(size_t)c] += x[(size_t)((n * C + c) * HW + i)] / (double)(N * HW);
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < HW; i++) {
        const double d = x[(size_t)((n * C + c) * HW + i)] - mean[(size_t)c];
        var[(size_t)c] += d * d / (double)(N * HW);
      }
  }
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const size_t c = (size_t)((int64_t)i / HW % C);
    y[i] = (x[i] - mean[c]) / std::sqrt(var[c] + eps) * g[c] + b[c];
  }
  return y;
}

}  // namespace

TEST_CASE("conv2d forward: float32 and float64 against naive loops, every path") {
  LeakGuard lg;
  std::mt19937_64 rng(11);
  for (int64_t algo : conv_algos()) {
    AlgoScope scope(algo);
    for (const ConvCase &c : kConvCases)
      for (mt_dtype dt : {MT_F32, MT_F64}) {
        INFO("algo ", algo, " x ", c.x[0], "x", c.x[1], "x", c.x[2], "x", c.x[3], " dtype ", mt_dtype_name(dt));
        Vec xv = randvec(rng, numel(c.x)), wv = randvec(rng, numel(c.w)), bv = randvec(rng, c.w[0]);
        H x = make(xv, c.x, dt), w = make(wv, c.w, dt), b = make(bv, {c.w[0]}, dt);
        H y = conv(x, w, c.bias ? b.get() : nullptr, c);
        const Shape ys = {c.x[0], c.w[0], out_size(c.x[2], c.w[2], c.sh, c.ph, c.dh),
                          out_size(c.x[3], c.w[3], c.sw, c.pw, c.dw)};
        CHECK(shape_of(y) == ys);
        // float32: products of values in [-1, 1] summed over <= 100 taps, rounding of the
        // inputs included; float64 sums in a different order only.
        CHECK(rel_err(values(y), conv_ref(xv, wv, c.bias ? &bv : nullptr, c)) < (dt == MT_F32 ? 1e-5 : 1e-12));
      }
  }
}

TEST_CASE("conv2d: mt_conv2d is mt_conv2d_ex with equal strides and paddings, dilation 1") {
  LeakGuard lg;
  std::mt19937_64 rng(12);
  ConvCase c{{2, 3, 6, 5}, {2, 3, 3, 3}, 2, 2, 1, 1, 1, 1, true};
  Vec xv = randvec(rng, numel(c.x)), wv = randvec(rng, numel(c.w)), bv = randvec(rng, 2);
  H x = make(xv, c.x), w = make(wv, c.w), b = make(bv, {2}), y;
  MT_OK_OR_FAIL(mt_conv2d(y.out(), x, w, b, 2, 1));
  CHECK(rel_err(values(y), conv_ref(xv, wv, &bv, c)) < 1e-12);
}

TEST_CASE("conv2d gradcheck (float64): x, w and bias over strides, paddings, dilations") {
  LeakGuard lg;
  std::mt19937_64 rng(13);
  for (const ConvCase &c : kConvCases) {
    INFO("x ", c.x[0], "x", c.x[1], "x", c.x[2], "x", c.x[3], " stride ", c.sh, ",", c.sw, " pad ", c.ph, ",", c.pw,
         " dil ", c.dh, ",", c.dw);
    std::vector<Vec> vals = {randvec(rng, numel(c.x)), randvec(rng, numel(c.w))};
    std::vector<Shape> shapes = {c.x, c.w};
    if (c.bias) {
      vals.push_back(randvec(rng, c.w[0]));
      shapes.push_back({c.w[0]});
    }
    gradcheck("conv2d", [&](const std::vector<mt_tensor *> &in) { return conv(in[0], in[1], c.bias ? in[2] : nullptr, c); },
              vals, shapes);
  }
}

TEST_CASE("max_pool2d and avg_pool2d forward against naive loops, overlapping or not") {
  LeakGuard lg;
  std::mt19937_64 rng(14);
  struct { Shape s; int64_t k, st; } cases[] = {{{2, 3, 6, 6}, 2, 2}, {{1, 2, 7, 5}, 3, 2}, {{2, 1, 5, 8}, 3, 1},
                                                 {{1, 1, 4, 4}, 4, 4}, {{1, 2, 9, 9}, 2, 3}};
  for (auto &c : cases)
    for (mt_dtype dt : {MT_F32, MT_F64}) {
      INFO("kernel ", c.k, " stride ", c.st, " dtype ", mt_dtype_name(dt));
      Vec xv = randvec(rng, numel(c.s));
      H x = make(xv, c.s, dt), ym, ya;
      MT_OK_OR_FAIL(mt_max_pool2d(ym.out(), x, c.k, c.st));
      MT_OK_OR_FAIL(mt_avg_pool2d(ya.out(), x, c.k, c.st));
      const Shape ys = {c.s[0], c.s[1], (c.s[2] - c.k) / c.st + 1, (c.s[3] - c.k) / c.st + 1};
      CHECK(shape_of(ym) == ys);
      CHECK(shape_of(ya) == ys);
      Vec mx = pool_ref(dt == MT_F32 ? values(make(xv, c.s, MT_F32)) : xv, c.s, c.k, c.st, true);
      CHECK(rel_err(values(ym), mx) == 0);  // a selection: exact
      CHECK(rel_err(values(ya), pool_ref(xv, c.s, c.k, c.st, false)) < (dt == MT_F32 ? 1e-6 : 1e-14));
    }
}

TEST_CASE("max_pool2d backward: the gradient goes to the argmax, overlapping windows add up") {
  LeakGuard lg;
  // 1x1x3x3, kernel 2, stride 1: the centre (9) is the max of all four windows.
  H x = make({1, 2, 3, 4, 9, 5, 6, 7, 8}, {1, 1, 3, 3}), y, s, g;
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(x, 1));
  MT_OK_OR_FAIL(mt_max_pool2d(y.out(), x, 2, 1));
  CHECK(values(y) == Vec{9, 9, 9, 9});
  MT_OK_OR_FAIL(mt_sum(s.out(), y));
  MT_OK_OR_FAIL(mt_backward(s));
  MT_OK_OR_FAIL(mt_tensor_grad(g.out(), x));
  CHECK(values(g) == Vec{0, 0, 0, 0, 4, 0, 0, 0, 0});
}

TEST_CASE("pool gradchecks (float64)") {
  LeakGuard lg;
  std::mt19937_64 rng(15);
  struct { Shape s; int64_t k, st; } cases[] = {{{2, 2, 6, 6}, 2, 2}, {{1, 2, 7, 6}, 3, 1}, {{1, 1, 8, 7}, 3, 2}};
  for (auto &c : cases) {
    INFO("kernel ", c.k, " stride ", c.st);
    // Distinct values spaced well beyond eps keep every window's maximum unique under the
    // perturbation (a tie would make max_pool2d non-differentiable there).
    Vec xv((size_t)numel(c.s));
    for (size_t i = 0; i < xv.size(); i++) xv[i] = 0.01 * (double)((i * 37) % xv.size()) + 1e-3 * randvec(rng, 1)[0];
    gradcheck("max_pool2d", [&](const std::vector<mt_tensor *> &in) {
      H y;
      MT_OK_OR_FAIL(mt_max_pool2d(y.out(), in[0], c.k, c.st));
      return y;
    }, {xv}, {c.s});
    gradcheck("avg_pool2d", [&](const std::vector<mt_tensor *> &in) {
      H y;
      MT_OK_OR_FAIL(mt_avg_pool2d(y.out(), in[0], c.k, c.st));
      return y;
    }, {randvec(rng, numel(c.s))}, {c.s});
  }
}

TEST_CASE("batch_norm training: batch statistics, running-stat update, float32 and float64") {
  LeakGuard lg;
  std::mt19937_64 rng(16);
  for (const Shape &s : {Shape{4, 3, 5, 2}, Shape{6, 5}})
    for (mt_dtype dt : {MT_F32, MT_F64}) {
      INFO("x ndim ", s.size(), " dtype ", mt_dtype_name(dt));
      const int64_t C = s[1], M = numel(s) / C;
      Vec xv = randvec(rng, numel(s), -2, 3), gv = randvec(rng, C), bv = randvec(rng, C);
      Vec rm0 = randvec(rng, C), rv0 = randvec(rng, C, 0.5, 2);
      H x = make(xv, s, dt), g = make(gv, {C}, dt), b = make(bv, {C}, dt), rm = make(rm0, {C}, dt),
        rv = make(rv0, {C}, dt), y;
      const double mom = 0.3, eps = 1e-3;
      MT_OK_OR_FAIL(mt_batch_norm(y.out(), x, g, b, rm, rv, 1, mom, eps));
      Vec mean, var;
      Vec ref = bn_ref(xv, s, gv, bv, mean, var, eps);
      const double tol = dt == MT_F32 ? 1e-5 : 1e-12;
      CHECK(rel_err(values(y), ref) < tol);
      Vec rm_ref((size_t)C), rv_ref((size_t)C);
      for (int64_t c = 0; c < C; c++) {
        rm_ref[(size_t)c] = (1 - mom) * rm0[(size_t)c] + mom * mean[(size_t)c];
        rv_ref[(size_t)c] = (1 - mom) * rv0[(size_t)c] + mom * var[(size_t)c] * (double)M / (double)(M - 1);
      }
      CHECK(rel_err(values(rm), rm_ref) < tol);
      CHECK(rel_err(values(rv), rv_ref) < tol);
      // without running buffers and without gamma / beta
      MT_OK_OR_FAIL(mt_batch_norm(y.out(), x, nullptr, nullptr, nullptr, nullptr, 1, mom, eps));
      CHECK(rel_err(values(y), bn_ref(xv, s, Vec((size_t)C, 1), Vec((size_t)C, 0), mean, var, eps)) < tol);
    }
}

TEST_CASE("batch_norm eval: normalizes with the running statistics and leaves them alone") {
  LeakGuard lg;
  std::mt19937_64 rng(17);
  const Shape s = {3, 2, 2, 3};
  Vec xv = randvec(rng, numel(s)), gv = randvec(rng, 2), bv = randvec(rng, 2), rmv = {0.25, -0.5}, rvv = {1.5, 0.75};
  H x = make(xv, s), g = make(gv, {2}), b = make(bv, {2}), rm = make(rmv, {2}), rv = make(rvv, {2}), y;
  MT_OK_OR_FAIL(mt_batch_norm(y.out(), x, g, b, rm, rv, 0, 0.1, 1e-5));
  Vec ref(xv.size());
  for (size_t i = 0; i < xv.size(); i++) {
    const size_t c = i / 6 % 2;
    ref[i] = (xv[i] - rmv[c]) / std::sqrt(rvv[c] + 1e-5) * gv[c] + bv[c];
  }
  CHECK(rel_err(values(y), ref) < 1e-12);
  CHECK(values(rm) == rmv);
  CHECK(values(rv) == rvv);
}

TEST_CASE("batch_norm gradchecks (float64): training and eval, x, gamma, beta") {
  LeakGuard lg;
  std::mt19937_64 rng(18);
  for (const Shape &s : {Shape{3, 2, 3, 2}, Shape{5, 3}})
    for (int64_t training : {1, 0}) {
      INFO("training ", training, " ndim ", s.size());
      const int64_t C = s[1];
      H rm = make(randvec(rng, C), {C}), rv = make(randvec(rng, C, 0.5, 2), {C});
      gradcheck("batch_norm", [&](const std::vector<mt_tensor *> &in) {
        H y;
        // running buffers are updated by every training call; the gradient does not depend on them
        MT_OK_OR_FAIL(mt_batch_norm(y.out(), in[0], in[1], in[2], rm, rv, training, 0.1, 1e-5));
        return y;
      }, {randvec(rng, numel(s), -1, 2), randvec(rng, C), randvec(rng, C)}, {s, {C}, {C}}, 1e-6, 1e-5);
    }
}

TEST_CASE("convolutional ops record once and release everything after backward") {
  LeakGuard lg;
  std::mt19937_64 rng(19);
  H x = make(randvec(rng, 2 * 1 * 8 * 8), {2, 1, 8, 8}), w = make(randvec(rng, 3 * 1 * 3 * 3), {3, 1, 3, 3}),
    b = make(randvec(rng, 3), {3}), g = make(Vec(3, 1), {3}), be = make(Vec(3, 0), {3});
  for (mt_tensor *p : {w.get(), b.get(), g.get(), be.get()}) MT_OK_OR_FAIL(mt_tensor_set_requires_grad(p, 1));
  H c, n, m, a, l;
  MT_OK_OR_FAIL(mt_conv2d(c.out(), x, w, b, 1, 1));
  MT_OK_OR_FAIL(mt_batch_norm(n.out(), c, g, be, nullptr, nullptr, 1, 0.1, 1e-5));
  MT_OK_OR_FAIL(mt_max_pool2d(m.out(), n, 2, 2));
  MT_OK_OR_FAIL(mt_avg_pool2d(a.out(), m, 2, 2));
  CHECK(mt_tape_size() == 4);
  MT_OK_OR_FAIL(mt_sum(l.out(), a));
  MT_OK_OR_FAIL(mt_backward(l));
  CHECK(mt_tape_size() == 0);
  for (mt_tensor *p : {w.get(), b.get(), g.get(), be.get()}) {
    H gr;
    MT_OK_OR_FAIL(mt_tensor_grad(gr.out(), p));
    CHECK(gr.get() != nullptr);
  }
}

TEST_CASE("convolutional ops: error codes and messages") {
  LeakGuard lg;
  mt_tensor *out = nullptr;
  H x = make(Vec(2 * 3 * 5 * 5, 1), {2, 3, 5, 5}), w = make(Vec(4 * 3 * 3 * 3, 1), {4, 3, 3, 3});
  H x3 = make(Vec(3 * 5 * 5, 1), {3, 5, 5}), w2 = make(Vec(4 * 2 * 3 * 3, 1), {4, 2, 3, 3});
  H b5 = make(Vec(5, 0), {5}), wbig = make(Vec(4 * 3 * 8 * 8, 1), {4, 3, 8, 8});
  H x32 = make(Vec(2 * 3 * 5 * 5, 1), {2, 3, 5, 5}, MT_F32);
  CHECK(mt_conv2d(&out, x3, w, nullptr, 1, 0) == MT_ERR_SHAPE);
  CHECK(has("mt_conv2d: x must be 4-D [N,C,H,W], got [3,5,5]"));
  CHECK(mt_conv2d(&out, x, w2, nullptr, 1, 0) == MT_ERR_SHAPE);
  CHECK(has("channels differ"));
  CHECK(mt_conv2d(&out, x, w, b5, 1, 0) == MT_ERR_SHAPE);
  CHECK(has("bias must be [4]"));
  CHECK(mt_conv2d(&out, x, wbig, nullptr, 1, 1) == MT_ERR_SHAPE);
  CHECK(has("larger than the padded input 7x7"));
  CHECK(mt_conv2d(&out, x, w, nullptr, 0, 0) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("stride must be positive, got (0, 0)"));
  CHECK(mt_conv2d(&out, x, w, nullptr, 1, -1) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("padding must be >= 0"));
  CHECK(mt_conv2d_ex(&out, x, w, nullptr, 1, 1, 0, 0, 1, 0) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("mt_conv2d_ex: dilation must be positive"));
  // sizes whose arithmetic would overflow: a padding of 2^62 (2 x it wraps), a dilation of 2^40
  CHECK(mt_conv2d(&out, x, w, nullptr, 1, int64_t(1) << 62) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("must be at most 2^31 - 1"));
  CHECK(mt_conv2d_ex(&out, x, w, nullptr, 1, 1, 0, 0, int64_t(1) << 40, 1) == MT_ERR_INVALID_ARGUMENT);
  // within the limits, an output past 2^60 elements is refused before any allocation: a
  // padding of 2^31 - 1 makes 2 x 4 x (2^32 - 3)^2, about 2^67
  CHECK(mt_conv2d(&out, x, w, nullptr, 1, 0x7fffffff) == MT_ERR_OUT_OF_MEMORY);
  CHECK(has("mt_conv2d: a tensor of shape [2,4,"));
  CHECK(has("would hold more than 2^60 elements"));
  CHECK(out == nullptr);
  CHECK(mt_conv2d(&out, x32, w, nullptr, 1, 0) == MT_ERR_DTYPE);
  CHECK(has("dtypes differ: x is float32, w is float64"));
  CHECK(mt_conv2d(&out, nullptr, w, nullptr, 1, 0) == MT_ERR_INVALID_ARGUMENT);
  CHECK(mt_conv2d(nullptr, x, w, nullptr, 1, 0) == MT_ERR_INVALID_ARGUMENT);

  CHECK(mt_max_pool2d(&out, x, 0, 1) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("mt_max_pool2d: kernel and stride must be positive, got kernel 0 stride 1"));
  CHECK(mt_avg_pool2d(&out, x, 2, -1) == MT_ERR_INVALID_ARGUMENT);
  CHECK(mt_avg_pool2d(&out, x, 6, 1) == MT_ERR_SHAPE);
  CHECK(has("kernel 6 is larger than the input [2,3,5,5]"));
  CHECK(mt_max_pool2d(&out, x3, 2, 2) == MT_ERR_SHAPE);

  H c3 = make(Vec(3, 1), {3}), c4 = make(Vec(4, 1), {4}), one = make(Vec(3, 1), {1, 3});
  CHECK(mt_batch_norm(&out, x, c4, nullptr, nullptr, nullptr, 1, 0.1, 1e-5) == MT_ERR_SHAPE);
  CHECK(has("mt_batch_norm: gamma must be [3]"));
  CHECK(mt_batch_norm(&out, x, c3, c3, nullptr, nullptr, 0, 0.1, 1e-5) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("required when training == 0"));
  CHECK(mt_batch_norm(&out, x, nullptr, nullptr, c3, nullptr, 1, 0.1, 1e-5) == MT_ERR_INVALID_ARGUMENT);
  CHECK(mt_batch_norm(&out, x, nullptr, nullptr, nullptr, nullptr, 1, 0.1, -1) == MT_ERR_INVALID_ARGUMENT);
  CHECK(mt_batch_norm(&out, one, nullptr, nullptr, nullptr, nullptr, 1, 0.1, 1e-5) == MT_ERR_SHAPE);
  CHECK(has("more than 1 value per channel"));
  CHECK(mt_batch_norm(&out, x3, nullptr, nullptr, nullptr, nullptr, 1, 0.1, 1e-5) == MT_ERR_SHAPE);

  int64_t prev = -1;
  CHECK(mt_set_conv_algo(4, &prev) == MT_ERR_INVALID_ARGUMENT);
  CHECK(prev == -1);
  CHECK(has("mt_set_conv_algo: algo must be 0 (auto), 1 (im2col + GEMM), 2 (cuDNN) or 3 (direct), got 4"));
  CHECK(mt_set_conv_algo(-1, &prev) == MT_ERR_INVALID_ARGUMENT);
  CHECK(prev == -1);
  MT_OK_OR_FAIL(mt_set_conv_algo(1, &prev));
  CHECK(prev == 0);
  const mt_status s2 = mt_set_conv_algo(2, &prev);
  CHECK((s2 == MT_OK || s2 == MT_ERR_UNSUPPORTED));
  if (s2 == MT_ERR_UNSUPPORTED) CHECK(has("built without cuDNN"));
  MT_OK_OR_FAIL(mt_set_conv_algo(3, &prev));
  CHECK(prev == (s2 == MT_OK ? 2 : 1));
  MT_OK_OR_FAIL(mt_set_conv_algo(0, nullptr));
  CHECK(out == nullptr);
  CHECK(mt_tape_size() == 0);
}
