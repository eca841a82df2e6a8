// fused.cpp - CPU reference of the fused transformer kernels: plain loops, sums in double.
//
//   layer_norm:  y (rows, d) = (x - mean) * rstd * gamma + beta per row, rstd = 1/sqrt(var + eps),
//                var biased; mean, rstd (rows) saved
//   backward:    xhat = (x - mean) rstd, g = dy gamma
//                dx = rstd (g - mean(g) - xhat mean(g xhat))        (rows, d), written
//                dgamma = sum_rows dy xhat, dbeta = sum_rows dy      (d), written
//   gelu:        y = 0.5 x (1 + tanh(k (x + c x^3))) = x s, s = sigmoid(2 k (x + c x^3)),
//                k = sqrt(2/pi), c = 0.044715 (computed as x s: no cancellation for x < 0)
//                dx = dy (s + 2 x s (1 - s) k (1 + 3 c x^2))
//   causal_mask: out (t, s) = j > i + s - t
#include "backend/cpu/fused.h"

#include <cmath>
#include <vector>

namespace mt {
namespace cpu {
namespace {

constexpr double kGeluK = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluC = 0.044715;

void require_float(DType d, const char *what) {
  MT_CHECK(d == DType::F32 || d == DType::F64, DTYPE, "%s on the cpu supports float32 and float64, got %s", what,
           dtype_name(d));
}

template <class T>
void layer_norm_t(T *y, T *mean, T *rstd, const T *x, const T *gamma, const T *beta, int64_t rows, int64_t d,
                  double eps) {
  for (int64_t r = 0; r < rows; r++) {
    const T *xr = x + r * d;
    T *yr = y + r * d;
    double s = 0;
    for (int64_t c = 0; c < d; c++) s += (double)xr[c];
    const double m = s / (double)d;
    double v = 0;
    for (int64_t c = 0; c < d; c++) v += ((double)xr[c] - m) * ((double)xr[c] - m);
    const double rs = 1.0 / std::sqrt(v / (double)d + eps);
    for (int64_t c = 0; c < d; c++) {
      double o = ((double)xr[c] - m) * rs;
      if (gamma) o *= (double)gamma[c];
      if (beta) o += (double)beta[c];
      yr[c] = (T)o;
    }
    mean[r] = (T)m;
    rstd[r] = (T)rs;
  }
}

template <class T>
void layer_norm_backward_t(T *dx, const T *dx_add, T *dgamma, T *dbeta, const T *dy, const T *x, const T *mean,
                           const T *rstd, const T *gamma, int64_t rows, int64_t d) {
  std::vector<double> dg(dgamma ? (size_t)d : 0, 0.0), db(dbeta ? (size_t)d : 0, 0.0);
  for (int64_t r = 0; r < rows; r++) {
    const T *xr = x + r * d, *dyr = dy + r * d;
    const double m = (double)mean[r], rs = (double)rstd[r];
    auto xhat = [&](int64_t c) { return ((double)xr[c] - m) * rs; };
    auto g = [&](int64_t c) { return (double)dyr[c] * (gamma ? (double)gamma[c] : 1.0); };
    for (int64_t c = 0; c < d; c++) {
      if (dgamma) dg[(size_t)c] += (double)dyr[c] * xhat(c);
      if (dbeta) db[(size_t)c] += (double)dyr[c];
    }
    if (!dx) continue;
    double sg = 0, sgx = 0;
    for (int64_t c = 0; c < d; c++) {
      sg += g(c);
      sgx += g(c) * xhat(c);
    }
    sg /= (double)d;
    sgx /= (double)d;
    for (int64_t c = 0; c < d; c++)
      dx[r * d + c] = (T)(rs * (g(c) - sg - xhat(c) * sgx) + (dx_add ? (double)dx_add[r * d + c] : 0.0));
  }
  for (int64_t c = 0; c < d; c++) {
    if (dgamma) dgamma[c] = (T)dg[(size_t)c];
    if (dbeta) dbeta[c] = (T)db[(size_t)c];
  }
}

// 0.5 (1 + tanh(u)) evaluated as sigmoid(2u): the same value without the cancellation of
// 1 + tanh(u) for negative x (the CUDA kernels use the same form).
inline double gelu_sigmoid(double v) { return 1.0 / (1.0 + std::exp(-2.0 * kGeluK * (v + kGeluC * v * v * v))); }

template <class T>
void gelu_t(T *y, const T *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const double v = (double)x[i];
    y[i] = (T)(v * gelu_sigmoid(v));
  }
}

template <class T>
void gelu_backward_t(T *dx, const T *dy, const T *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const double v = (double)x[i], s = gelu_sigmoid(v);
    const double grad = s + 2.0 * v * s * (1.0 - s) * kGeluK * (1.0 + 3.0 * kGeluC * v * v);
    dx[i] = (T)((double)dy[i] * grad);
  }
}

}  // namespace

void layer_norm(void *y, void *mean, void *rstd, const void *x, const void *gamma, const void *beta, int64_t rows,
                int64_t d, double eps, DType dtype) {
  require_float(dtype, "layer_norm");
  if (dtype == DType::F32)
    return layer_norm_t((float *)y, (float *)mean, (float *)rstd, (const float *)x, (const float *)gamma,
                        (const float *)beta, rows, d, eps);
  layer_norm_t((double *)y, (double *)mean, (double *)rstd, (const double *)x, (const double *)gamma,
               (const double *)beta, rows, d, eps);
}

void layer_norm_backward(void *dx, const void *dx_add, void *dgamma, void *dbeta, const void *dy, const void *x,
                         const void *mean, const void *rstd, const void *gamma, int64_t rows, int64_t d, DType dtype) {
  require_float(dtype, "layer_norm backward");
  if (dtype == DType::F32)
    return layer_norm_backward_t((float *)dx, (const float *)dx_add, (float *)dgamma, (float *)dbeta,
                                 (const float *)dy, (const float *)x, (const float *)mean, (const float *)rstd,
                                 (const float *)gamma, rows, d);
  layer_norm_backward_t((double *)dx, (const double *)dx_add, (double *)dgamma, (double *)dbeta, (const double *)dy,
                        (const double *)x, (const double *)mean, (const double *)rstd, (const double *)gamma, rows, d);
}

void gelu(void *y, const void *x, int64_t n, DType dtype) {
  require_float(dtype, "gelu");
  if (dtype == DType::F32) return gelu_t((float *)y, (const float *)x, n);
  gelu_t((double *)y, (const double *)x, n);
}

void gelu_backward(void *dx, const void *dy, const void *x, int64_t n, DType dtype) {
  require_float(dtype, "gelu backward");
  if (dtype == DType::F32) return gelu_backward_t((float *)dx, (const float *)dy, (const float *)x, n);
  gelu_backward_t((double *)dx, (const double *)dy, (const double *)x, n);
}

void causal_mask(uint8_t *out, int64_t t, int64_t s) {
  for (int64_t i = 0; i < t; i++)
    for (int64_t j = 0; j < s; j++) out[i * s + j] = j > i + (s - t) ? 1 : 0;
}

}  // namespace cpu
}  // namespace mt
