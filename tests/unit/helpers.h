// helpers.h - what the unit suites share: an owning handle, conversions between
// tensors and std::vector<double>, random data, a leak guard, and a central-
// difference gradient check. Everything goes through the public C ABI, on the
// device under test (mt_default_device(): MT_DEVICE=cpu|cuda picks it).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "minitorch.h"

namespace t {

using Vec = std::vector<double>;
using Shape = std::vector<int64_t>;

inline mt_device dev() { return mt_default_device(); }

#define MT_OK_OR_FAIL(call)                                                                  \
  do {                                                                                       \
    mt_status s_ = (call);                                                                   \
    std::string m_ = std::string(#call " -> ") + mt_status_string(s_) + ": " + mt_last_error(); \
    REQUIRE_MESSAGE(s_ == MT_OK, m_);                                                       \
  } while (0)

// Owns one reference.
class H {
 public:
  H() = default;
  explicit H(mt_tensor *p) : p_(p) {}
  H(const H &) = delete;
  H &operator=(const H &) = delete;
  H(H &&o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  H &operator=(H &&o) noexcept { std::swap(p_, o.p_); return *this; }
  ~H() { mt_tensor_release(p_); }
  mt_tensor *get() const { return p_; }
  operator mt_tensor *() const { return p_; }
  mt_tensor **out() { mt_tensor_release(p_); p_ = nullptr; return &p_; }
 private:
  mt_tensor *p_ = nullptr;
};

inline int64_t numel(const Shape &s) { int64_t n = 1; for (auto d : s) n *= d; return n; }

inline H make(const Vec &v, const Shape &shape, mt_dtype dt = MT_F64, mt_device d = dev()) {
  REQUIRE((int64_t)v.size() == numel(shape));
  H h;
  if (dt == MT_F64) {
    MT_OK_OR_FAIL(mt_tensor_from_data(h.out(), v.data(), shape.data(), (int64_t)shape.size(), dt, d));
  } else {
    REQUIRE(dt == MT_F32);
    std::vector<float> f(v.begin(), v.end());
    MT_OK_OR_FAIL(mt_tensor_from_data(h.out(), f.data(), shape.data(), (int64_t)shape.size(), dt, d));
  }
  return h;
}

inline Shape shape_of(mt_tensor *x) {
  int64_t nd = 0;
  MT_OK_OR_FAIL(mt_tensor_ndim(x, &nd));
  Shape s((size_t)nd);
  MT_OK_OR_FAIL(mt_tensor_shape(x, s.data()));
  return s;
}

inline Vec values(mt_tensor *x) {
  int64_t n = 0;
  mt_dtype dt;
  MT_OK_OR_FAIL(mt_tensor_numel(x, &n));
  MT_OK_OR_FAIL(mt_tensor_dtype(x, &dt));
  if (dt == MT_F64) {
    Vec v((size_t)n);
    MT_OK_OR_FAIL(mt_tensor_copy_to_host(x, v.data(), n * 8));
    return v;
  }
  REQUIRE(dt == MT_F32);
  std::vector<float> f((size_t)n);
  MT_OK_OR_FAIL(mt_tensor_copy_to_host(x, f.data(), n * 4));
  return Vec(f.begin(), f.end());
}

inline Vec randvec(std::mt19937_64 &rng, int64_t n, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  Vec v((size_t)n);
  for (auto &x : v) x = u(rng);
  return v;
}

// ||a - b|| / ||b|| (0 when both are zero).
inline double rel_err(const Vec &a, const Vec &b) {
  REQUIRE(a.size() == b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); i++) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Every test starts with one: at its end live tensors, device bytes and the tape
// are back where they began.
struct LeakGuard {
  int64_t tensors = mt_live_tensors();
  int64_t cpu_bytes = mt_live_bytes(MT_CPU);
  int64_t cuda_bytes = mt_live_bytes(MT_CUDA);
  ~LeakGuard() {
    mt_tape_clear();
    CHECK(mt_live_tensors() == tensors);
    CHECK(mt_live_bytes(MT_CPU) == cpu_bytes);
    CHECK(mt_live_bytes(MT_CUDA) == cuda_bytes);
    CHECK(mt_tape_size() == 0);
  }
};

// Central-difference gradient check in float64. f builds an output from the
// inputs (recorded); the check contracts it with fixed random weights w into the
// scalar L = sum(w * f(x)), compares dL/dx from mt_backward with
// (L(x + eps e_i) - L(x - eps e_i)) / 2 eps for every element of every input.
using Builder = std::function<H(const std::vector<mt_tensor *> &)>;

inline void gradcheck(const char *name, const Builder &f, const std::vector<Vec> &vals, const std::vector<Shape> &shapes,
                      double eps = 1e-6, double tol = 1e-6) {
  INFO("gradcheck of ", name);
  std::mt19937_64 rng(1234);
  std::vector<H> xs;
  std::vector<mt_tensor *> raw;
  for (size_t i = 0; i < vals.size(); i++) {
    xs.push_back(make(vals[i], shapes[i]));
    MT_OK_OR_FAIL(mt_tensor_set_requires_grad(xs.back(), 1));
    raw.push_back(xs.back());
  }
  H y0 = f(raw);
  Shape ys = shape_of(y0);
  Vec wv = randvec(rng, numel(ys));
  mt_device ydev;
  MT_OK_OR_FAIL(mt_tensor_device(y0, &ydev));
  H w = make(wv, ys, MT_F64, ydev);
  auto loss_of = [&](const std::vector<mt_tensor *> &in) {
    H y = f(in), prod, l;
    MT_OK_OR_FAIL(mt_mul(prod.out(), y, w));
    MT_OK_OR_FAIL(mt_sum(l.out(), prod));
    return l;
  };
  {
    H l = loss_of(raw);
    MT_OK_OR_FAIL(mt_backward(l));
  }
  int64_t prev = mt_set_grad_enabled(0);
  for (size_t i = 0; i < vals.size(); i++) {
    H g;
    MT_OK_OR_FAIL(mt_tensor_grad(g.out(), xs[i]));
    REQUIRE_MESSAGE(g.get() != nullptr, "input ", i, " got no gradient");
    Vec analytic = values(g), numeric(vals[i].size());
    for (size_t k = 0; k < vals[i].size(); k++) {
      double lv[2];
      for (int sgn = 0; sgn < 2; sgn++) {
        Vec v = vals[i];
        v[k] += sgn ? -eps : eps;
        H xi = make(v, shapes[i]);
        std::vector<mt_tensor *> in = raw;
        in[i] = xi;
        H l = loss_of(in);
        MT_OK_OR_FAIL(mt_tensor_item(l, &lv[sgn]));
      }
      numeric[k] = (lv[0] - lv[1]) / (2 * eps);
    }
    INFO("input ", i);
    CHECK(rel_err(analytic, numeric) < tol);
  }
  mt_set_grad_enabled(prev);
}

}  // namespace t
