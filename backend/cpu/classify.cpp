// classify.cpp - softmax, log_softmax, cross-entropy, nll, max/argmax and Adam as
// plain loops. Row statistics accumulate in double; the max is subtracted before
// exp so that logits of +-1000 stay finite.
#include "classify.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mt {
namespace cpu {
namespace {

void require_float(DType d, const char *what) {
  MT_CHECK(d == DType::F32 || d == DType::F64, DTYPE, "%s on the cpu supports float32 and float64, got %s", what,
           dtype_name(d));
}

// max and log-sum-exp of one row
template <typename T>
double row_lse(const T *x, int64_t cols) {
  double mx = -INFINITY;
  for (int64_t c = 0; c < cols; c++) mx = std::fmax(mx, (double)x[c]);
  if (std::isinf(mx)) return mx;  // all -inf (or +inf present): lse is the max
  double s = 0;
  for (int64_t c = 0; c < cols; c++) s += std::exp((double)x[c] - mx);
  return mx + std::log(s);
}

template <typename T>
void softmax_t(T *y, const T *x, int64_t rows, int64_t cols, bool log) {
  for (int64_t r = 0; r < rows; r++) {
    const T *xr = x + r * cols;
    T *yr = y + r * cols;
    double lse = row_lse(xr, cols);
    for (int64_t c = 0; c < cols; c++) {
      double v = (double)xr[c] - lse;
      yr[c] = (T)(log ? v : std::exp(v));
    }
  }
}

template <typename T>
void causal_softmax_t(T *y, const T *x, int64_t rows, int64_t cols, int64_t t, int64_t offset) {
  for (int64_t r = 0; r < rows; r++) {
    const T *xr = x + r * cols;
    T *yr = y + r * cols;
    const int64_t vis = std::min(cols, r % t + offset + 1);  // the visible columns
    double lse = row_lse(xr, vis);
    for (int64_t c = 0; c < cols; c++) yr[c] = c < vis ? (T)std::exp((double)xr[c] - lse) : (T)0;
  }
}

template <typename T>
void softmax_backward_t(T *dx, const T *y, const T *dy, int64_t rows, int64_t cols, bool log) {
  for (int64_t r = 0; r < rows; r++) {
    const T *yr = y + r * cols, *dyr = dy + r * cols;
    T *dxr = dx + r * cols;
    double s = 0;
    for (int64_t c = 0; c < cols; c++) s += log ? (double)dyr[c] : (double)dyr[c] * (double)yr[c];
    for (int64_t c = 0; c < cols; c++)
      dxr[c] = (T)(log ? (double)dyr[c] - std::exp((double)yr[c]) * s : (double)yr[c] * ((double)dyr[c] - s));
  }
}

template <typename T>
void cross_entropy_t(T *loss, T *lse, const T *x, const int64_t *t, int64_t rows, int64_t cols, double scale) {
  double acc = 0;
  for (int64_t r = 0; r < rows; r++) {
    double l = row_lse(x + r * cols, cols);
    lse[r] = (T)l;
    // A target outside [0, cols) reads nothing and gives NaN (the caller reports it).
    acc += l - (t[r] >= 0 && t[r] < cols ? (double)x[r * cols + t[r]] : std::nan(""));
  }
  loss[0] = (T)(acc * scale);
}

template <typename T>
void cross_entropy_backward_t(T *dx, const T *x, const T *lse, const int64_t *t, const T *dloss, int64_t rows,
                              int64_t cols, double scale) {
  double g = (dloss ? (double)dloss[0] : 1.0) * scale;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      double p = std::exp((double)x[r * cols + c] - (double)lse[r]);
      dx[r * cols + c] = (T)(g * (p - (c == t[r] ? 1.0 : 0.0)));
    }
}

template <typename T>
void max_reduce_t(T *values, int64_t *indices, const T *x, int64_t outer, int64_t reduce, int64_t inner) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      const T *base = x + o * reduce * inner + i;
      int64_t best = 0;
      T bv = base[0];
      for (int64_t r = 1; r < reduce; r++) {
        T v = base[r * inner];
        if (std::isnan(bv)) break;  // NaN wins and stays
        if (std::isnan(v) || v > bv) { bv = v; best = r; }
      }
      if (values) values[o * inner + i] = bv;
      indices[o * inner + i] = best;
    }
}

template <typename T>
void adam_t(const AdamArgs &a) {
  const double bc1 = 1.0 - std::pow(a.beta1, (double)a.step), bc2 = 1.0 - std::pow(a.beta2, (double)a.step);
  for (int64_t k = 0; k < a.count; k++) {
    T *p = (T *)a.params[k], *m = (T *)a.m[k], *v = (T *)a.v[k];
    const T *g = (const T *)a.grads[k];
    for (int64_t i = 0; i < a.numel[k]; i++) {
      double gi = (double)g[i], pi = (double)p[i];
      if (a.decoupled) pi *= 1.0 - a.lr * a.weight_decay;
      else gi += a.weight_decay * pi;
      double mi = a.beta1 * (double)m[i] + (1 - a.beta1) * gi;
      double vi = a.beta2 * (double)v[i] + (1 - a.beta2) * gi * gi;
      m[i] = (T)mi;
      v[i] = (T)vi;
      p[i] = (T)(pi - a.lr * (mi / bc1) / (std::sqrt(vi / bc2) + a.eps));
    }
  }
}

}  // namespace

#define MT_DISPATCH(d, what, call_f32, call_f64) \
  do {                                           \
    require_float(d, what);                      \
    if (d == DType::F32) { call_f32; }           \
    else { call_f64; }                           \
  } while (0)

void softmax(void *y, const void *x, int64_t rows, int64_t cols, DType d, bool log) {
  MT_DISPATCH(d, "softmax", softmax_t((float *)y, (const float *)x, rows, cols, log),
              softmax_t((double *)y, (const double *)x, rows, cols, log));
}
void causal_softmax(void *y, const void *x, int64_t rows, int64_t cols, int64_t t, int64_t offset, DType d) {
  MT_CHECK(t > 0 && offset >= 0 && rows % t == 0, INVALID_ARGUMENT,
           "cpu causal_softmax: %lld rows, t %lld, offset %lld (rows a multiple of t > 0, offset >= 0)",
           (long long)rows, (long long)t, (long long)offset);
  MT_DISPATCH(d, "causal_softmax", causal_softmax_t((float *)y, (const float *)x, rows, cols, t, offset),
              causal_softmax_t((double *)y, (const double *)x, rows, cols, t, offset));
}
void softmax_backward(void *dx, const void *y, const void *dy, int64_t rows, int64_t cols, DType d, bool log) {
  MT_DISPATCH(d, "softmax backward",
              softmax_backward_t((float *)dx, (const float *)y, (const float *)dy, rows, cols, log),
              softmax_backward_t((double *)dx, (const double *)y, (const double *)dy, rows, cols, log));
}
void cross_entropy(void *loss, void *lse, const void *x, const int64_t *t, int64_t rows, int64_t cols, DType d,
                   double scale) {
  MT_DISPATCH(d, "cross_entropy", cross_entropy_t((float *)loss, (float *)lse, (const float *)x, t, rows, cols, scale),
              cross_entropy_t((double *)loss, (double *)lse, (const double *)x, t, rows, cols, scale));
}
void cross_entropy_backward(void *dx, const void *x, const void *lse, const int64_t *t, const void *dloss,
                            int64_t rows, int64_t cols, DType d, double scale) {
  MT_DISPATCH(d, "cross_entropy backward",
              cross_entropy_backward_t((float *)dx, (const float *)x, (const float *)lse, t, (const float *)dloss, rows,
                                       cols, scale),
              cross_entropy_backward_t((double *)dx, (const double *)x, (const double *)lse, t, (const double *)dloss,
                                       rows, cols, scale));
}
void nll_loss(void *loss, const void *lp, const int64_t *t, int64_t rows, int64_t cols, DType d, double scale) {
  double acc = 0;
  require_float(d, "nll_loss");
  for (int64_t r = 0; r < rows; r++) {
    if (t[r] < 0 || t[r] >= cols) {  // a target outside [0, cols) reads nothing and gives NaN
      acc += std::nan("");
      continue;
    }
    const int64_t i = r * cols + t[r];
    acc += d == DType::F32 ? (double)((const float *)lp)[i] : ((const double *)lp)[i];
  }
  if (d == DType::F32) *(float *)loss = (float)(-acc * scale);
  else *(double *)loss = -acc * scale;
}
void nll_loss_backward(void *dlp, const int64_t *t, const void *dloss, int64_t rows, int64_t cols, DType d,
                       double scale) {
  require_float(d, "nll_loss backward");
  double g = !dloss ? 1.0 : d == DType::F32 ? (double)*(const float *)dloss : *(const double *)dloss;
  for (int64_t i = 0; i < rows * cols; i++) {
    int64_t r = i / cols, c = i % cols;
    double v = c == t[r] ? -g * scale : 0.0;
    if (d == DType::F32) ((float *)dlp)[i] = (float)v;
    else ((double *)dlp)[i] = v;
  }
}
int64_t first_out_of_range(const int64_t *idx, int64_t n, int64_t bound) {
  for (int64_t i = 0; i < n; i++)
    if (idx[i] < 0 || idx[i] >= bound) return i;
  return -1;
}
void max_reduce(void *values, int64_t *indices, const void *x, int64_t outer, int64_t reduce, int64_t inner, DType d) {
  MT_DISPATCH(d, "max", max_reduce_t((float *)values, indices, (const float *)x, outer, reduce, inner),
              max_reduce_t((double *)values, indices, (const double *)x, outer, reduce, inner));
}
void max_backward(void *dx, const int64_t *indices, const void *dy, int64_t outer, int64_t reduce, int64_t inner,
                  DType d) {
  require_float(d, "max backward");
  int64_t es = dtype_size(d);
  std::vector<char> zero((size_t)es, 0);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t r = 0; r < reduce; r++)
      for (int64_t i = 0; i < inner; i++) {
        int64_t at = (o * reduce + r) * inner + i;
        const void *src = indices[o * inner + i] == r ? (const char *)dy + (o * inner + i) * es : zero.data();
        std::copy((const char *)src, (const char *)src + es, (char *)dx + at * es);
      }
}
void adam_step(const AdamArgs &a) {
  MT_DISPATCH(a.dtype, "adam", adam_t<float>(a), adam_t<double>(a));
}

template <class T>
static void clip_grad_norm_t(void *norm, void *const *grads, const int64_t *numel, int64_t count, double max_norm,
                             double eps) {
  double acc = 0;
  for (int64_t i = 0; i < count; i++) {
    const T *g = static_cast<const T *>(grads[i]);
    for (int64_t j = 0; j < numel[i]; j++) acc += (double)g[j] * (double)g[j];
  }
  const double total = std::sqrt(acc);
  if (norm) *static_cast<T *>(norm) = (T)total;
  const double factor = std::min(1.0, max_norm / (total + eps));
  if (factor >= 1.0) return;
  const T s = (T)factor;
  for (int64_t i = 0; i < count; i++) {
    T *g = static_cast<T *>(grads[i]);
    for (int64_t j = 0; j < numel[i]; j++) g[j] *= s;
  }
}

void clip_grad_norm(void *norm, void *const *grads, const int64_t *numel, int64_t count, DType dtype, double max_norm,
                    double eps) {
  MT_CHECK(max_norm > 0 && eps >= 0, INVALID_ARGUMENT, "cpu clip_grad_norm: max_norm %g, eps %g", max_norm, eps);
  MT_DISPATCH(dtype, "clip_grad_norm", clip_grad_norm_t<float>(norm, grads, numel, count, max_norm, eps),
              clip_grad_norm_t<double>(norm, grads, numel, count, max_norm, eps));
}
#undef MT_DISPATCH

}  // namespace cpu
}  // namespace mt
