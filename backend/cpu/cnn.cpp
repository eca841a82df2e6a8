// cnn.cpp - CPU reference of the convolutional-network family: direct loops, accumulated
// in double, float32 and float64.
//
//   conv2d                 y (n, k, ho, wo) = sum_{c,r,s} w[k,c,r,s] x[n, c, oh*sh + r*dh - ph, ow*sw + s*dw - pw] + b[k]
//   conv2d_backward_data   dx (n, c, h, w)  = the same sum scattered back, per (n, c) plane
//   conv2d_backward_filter dw (k, c, r, s)  = sum_{n,oh,ow} dy[n,k,oh,ow] x[n, c, ih, iw]
//   max/avg_pool2d (+ backward), batch_norm (+ backward)
//
// Taps that fall into the padding are skipped by clipping each output row / column range
// once per (r, s) (tap_range), so the inner loops have no bounds tests. The convolutions
// split their independent planes over threads when the work is large enough (each thread
// owns whole output planes, so results do not depend on the thread count).
#include "backend/cpu/cnn.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

namespace mt {
namespace cpu {
namespace {

using Conv = Backend::Conv2dArgs;
using Pool = Backend::Pool2dArgs;
using BN = Backend::BatchNormArgs;

// The outputs o in [lo, hi) whose input index o * stride + off lies in [0, in).
struct Range { int64_t lo, hi; };
Range tap_range(int64_t out, int64_t in, int64_t stride, int64_t off) {
  int64_t lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  int64_t hi = in - 1 - off < 0 ? 0 : (in - 1 - off) / stride + 1;
  hi = std::min(hi, out);
  return {lo, std::max(lo, hi)};
}

// Calls f(i) for i in [0, count), split over threads when work (a flop estimate) is large.
template <class F>
void parallel_for(int64_t count, double work, F &&f) {
  int threads = (int)std::min<unsigned>(std::max(1u, std::thread::hardware_concurrency()), 16u);
  if (work < 4e6 || threads == 1 || count < 2) {
    for (int64_t i = 0; i < count; i++) f(i);
    return;
  }
  threads = (int)std::min<int64_t>(threads, count);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; t++)
    pool.emplace_back([&, t] {
      for (int64_t i = t; i < count; i += threads) f(i);
    });
  for (auto &th : pool) th.join();
}

double conv_work(const Conv &a) { return (double)a.n * a.k * a.ho * a.wo * a.c * a.r * a.s; }

// Visits every valid tap (r, s) of one (input plane, output plane) pair: f(i, o) gets the
// input offset i = ih * w + iw and the output offset o = oh * wo + ow.
template <class F>
void for_each_tap(const Conv &a, int64_t r, int64_t s, F &&f) {
  const int64_t offh = r * a.dil_h - a.pad_h, offw = s * a.dil_w - a.pad_w;
  const Range rh = tap_range(a.ho, a.h, a.stride_h, offh), rw = tap_range(a.wo, a.w, a.stride_w, offw);
  for (int64_t oh = rh.lo; oh < rh.hi; oh++) {
    const int64_t in_row = (oh * a.stride_h + offh) * a.w + offw, out_row = oh * a.wo;
    for (int64_t ow = rw.lo; ow < rw.hi; ow++) f(in_row + ow * a.stride_w, out_row + ow);
  }
}

template <class T>
void conv_forward(T *y, const T *x, const T *w, const T *bias, const Conv &a) {
  const int64_t hw = a.h * a.w, ohw = a.ho * a.wo, crs = a.c * a.r * a.s;
  parallel_for(a.n * a.k, conv_work(a), [&](int64_t nk) {
    const int64_t n = nk / a.k, k = nk % a.k;
    std::vector<double> acc((size_t)ohw, bias ? (double)bias[k] : 0.0);
    for (int64_t c = 0; c < a.c; c++) {
      const T *xp = x + (n * a.c + c) * hw;
      for (int64_t r = 0; r < a.r; r++)
        for (int64_t s = 0; s < a.s; s++) {
          const double wv = (double)w[k * crs + (c * a.r + r) * a.s + s];
          for_each_tap(a, r, s, [&](int64_t i, int64_t o) { acc[(size_t)o] += wv * (double)xp[i]; });
        }
    }
    T *yp = y + nk * ohw;
    for (int64_t o = 0; o < ohw; o++) yp[o] = (T)acc[(size_t)o];
  });
}

template <class T>
void conv_backward_data(T *dx, const T *dy, const T *w, const Conv &a) {
  const int64_t hw = a.h * a.w, ohw = a.ho * a.wo, crs = a.c * a.r * a.s;
  parallel_for(a.n * a.c, conv_work(a), [&](int64_t nc) {
    const int64_t n = nc / a.c, c = nc % a.c;
    std::vector<double> acc((size_t)hw, 0.0);
    for (int64_t k = 0; k < a.k; k++) {
      const T *g = dy + (n * a.k + k) * ohw;
      for (int64_t r = 0; r < a.r; r++)
        for (int64_t s = 0; s < a.s; s++) {
          const double wv = (double)w[k * crs + (c * a.r + r) * a.s + s];
          for_each_tap(a, r, s, [&](int64_t i, int64_t o) { acc[(size_t)i] += wv * (double)g[o]; });
        }
    }
    T *d = dx + nc * hw;
    for (int64_t i = 0; i < hw; i++) d[i] = (T)acc[(size_t)i];
  });
}

template <class T>
void conv_backward_filter(T *dw, const T *dy, const T *x, const Conv &a) {
  const int64_t hw = a.h * a.w, ohw = a.ho * a.wo;
  parallel_for(a.k * a.c, conv_work(a), [&](int64_t kc) {
    const int64_t k = kc / a.c, c = kc % a.c;
    for (int64_t r = 0; r < a.r; r++)
      for (int64_t s = 0; s < a.s; s++) {
        double acc = 0;
        for (int64_t n = 0; n < a.n; n++) {
          const T *xp = x + (n * a.c + c) * hw, *g = dy + (n * a.k + k) * ohw;
          for_each_tap(a, r, s, [&](int64_t i, int64_t o) { acc += (double)g[o] * (double)xp[i]; });
        }
        dw[(kc * a.r + r) * a.s + s] = (T)acc;
      }
  });
}

template <class T>
void max_pool_forward(T *y, int64_t *idx, const T *x, const Pool &a) {
  for (int64_t p = 0; p < a.planes; p++) {
    const T *xp = x + p * a.h * a.w;
    for (int64_t oh = 0; oh < a.ho; oh++)
      for (int64_t ow = 0; ow < a.wo; ow++) {
        int64_t best = oh * a.stride * a.w + ow * a.stride;
        for (int64_t i = 0; i < a.kernel; i++)
          for (int64_t j = 0; j < a.kernel; j++) {
            const int64_t at = (oh * a.stride + i) * a.w + ow * a.stride + j;
            const T v = xp[at], b = xp[best];
            if (v > b || (std::isnan(v) && !std::isnan(b))) best = at;  // the first NaN wins
          }
        const int64_t o = (p * a.ho + oh) * a.wo + ow;
        y[o] = xp[best];
        idx[o] = best;
      }
  }
}

template <class T>
void max_pool_backward(T *dx, const int64_t *idx, const T *dy, const Pool &a) {
  std::fill(dx, dx + a.planes * a.h * a.w, T(0));
  for (int64_t p = 0; p < a.planes; p++)
    for (int64_t o = 0; o < a.ho * a.wo; o++) dx[p * a.h * a.w + idx[p * a.ho * a.wo + o]] += dy[p * a.ho * a.wo + o];
}

template <class T>
void avg_pool_forward(T *y, const T *x, const Pool &a) {
  const double scale = 1.0 / (double)(a.kernel * a.kernel);
  for (int64_t p = 0; p < a.planes; p++)
    for (int64_t oh = 0; oh < a.ho; oh++)
      for (int64_t ow = 0; ow < a.wo; ow++) {
        double acc = 0;
        for (int64_t i = 0; i < a.kernel; i++)
          for (int64_t j = 0; j < a.kernel; j++) acc += (double)x[(p * a.h + oh * a.stride + i) * a.w + ow * a.stride + j];
        y[(p * a.ho + oh) * a.wo + ow] = (T)(acc * scale);
      }
}

template <class T>
void avg_pool_backward(T *dx, const T *dy, const Pool &a) {
  const double scale = 1.0 / (double)(a.kernel * a.kernel);
  std::vector<double> acc((size_t)(a.h * a.w));
  for (int64_t p = 0; p < a.planes; p++) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t oh = 0; oh < a.ho; oh++)
      for (int64_t ow = 0; ow < a.wo; ow++) {
        const double g = (double)dy[(p * a.ho + oh) * a.wo + ow] * scale;
        for (int64_t i = 0; i < a.kernel; i++)
          for (int64_t j = 0; j < a.kernel; j++) acc[(size_t)((oh * a.stride + i) * a.w + ow * a.stride + j)] += g;
      }
    for (int64_t i = 0; i < a.h * a.w; i++) dx[p * a.h * a.w + i] = (T)acc[(size_t)i];
  }
}

// Calls f(offset) for the n * hw elements of channel c of x viewed as (n, c, hw).
template <class F>
void for_channel(const BN &a, int64_t c, F &&f) {
  for (int64_t n = 0; n < a.n; n++)
    for (int64_t i = 0; i < a.hw; i++) f((n * a.c + c) * a.hw + i);
}

template <class T>
void bn_forward(T *y, T *mean, T *invstd, const T *x, const T *gamma, const T *beta, T *rm, T *rv, const BN &a) {
  const double m = (double)(a.n * a.hw);
  for (int64_t c = 0; c < a.c; c++) {
    double mu, is;
    if (a.training) {  // two passes: the mean, then the squared deviations from it
      double sum = 0, sq = 0;
      for_channel(a, c, [&](int64_t i) { sum += (double)x[i]; });
      mu = sum / m;
      for_channel(a, c, [&](int64_t i) { sq += ((double)x[i] - mu) * ((double)x[i] - mu); });
      is = 1.0 / std::sqrt(sq / m + a.eps);
      if (rm) rm[c] = (T)((1 - a.momentum) * (double)rm[c] + a.momentum * mu);
      if (rv) rv[c] = (T)((1 - a.momentum) * (double)rv[c] + a.momentum * sq / (m - 1));
    } else {
      mu = (double)rm[c];
      is = 1.0 / std::sqrt((double)rv[c] + a.eps);
    }
    mean[c] = (T)mu;
    invstd[c] = (T)is;
    const double g = gamma ? (double)gamma[c] : 1.0, b = beta ? (double)beta[c] : 0.0;
    for_channel(a, c, [&](int64_t i) { y[i] = (T)(((double)x[i] - mu) * is * g + b); });
  }
}

template <class T>
void bn_backward(T *dx, T *dgamma, T *dbeta, const T *dy, const T *x, const T *mean, const T *invstd, const T *gamma,
                 const BN &a) {
  const double m = (double)(a.n * a.hw);
  for (int64_t c = 0; c < a.c; c++) {
    const double mu = (double)mean[c], is = (double)invstd[c], g = gamma ? (double)gamma[c] : 1.0;
    double sdy = 0, sdyx = 0;
    for_channel(a, c, [&](int64_t i) {
      sdy += (double)dy[i];
      sdyx += (double)dy[i] * ((double)x[i] - mu) * is;
    });
    if (dbeta) dbeta[c] = (T)sdy;
    if (dgamma) dgamma[c] = (T)sdyx;
    if (!dx) continue;
    for_channel(a, c, [&](int64_t i) {
      const double d = a.training ? (double)dy[i] - (sdy + ((double)x[i] - mu) * is * sdyx) / m : (double)dy[i];
      dx[i] = (T)(g * is * d);
    });
  }
}

// Calls fn(T{}) for float32 / float64, else throws DTYPE naming `what`.
template <class Fn>
void dispatch(DType d, const char *what, Fn &&fn) {
  if (d == DType::F32) return fn(float{});
  if (d == DType::F64) return fn(double{});
  fail(Code::DTYPE, "%s on the cpu supports float32 and float64, got %s", what, dtype_name(d));
}

}  // namespace

void conv2d(void *y, const void *x, const void *w, const void *bias, const Conv &a) {
  dispatch(a.dtype, "conv2d", [&](auto t) {
    using T = decltype(t);
    conv_forward<T>((T *)y, (const T *)x, (const T *)w, (const T *)bias, a);
  });
}
void conv2d_backward_data(void *dx, const void *dy, const void *w, const Conv &a) {
  dispatch(a.dtype, "conv2d backward", [&](auto t) {
    using T = decltype(t);
    conv_backward_data<T>((T *)dx, (const T *)dy, (const T *)w, a);
  });
}
void conv2d_backward_filter(void *dw, const void *dy, const void *x, const Conv &a) {
  dispatch(a.dtype, "conv2d backward", [&](auto t) {
    using T = decltype(t);
    conv_backward_filter<T>((T *)dw, (const T *)dy, (const T *)x, a);
  });
}
void max_pool2d(void *y, int64_t *indices, const void *x, const Pool &a) {
  dispatch(a.dtype, "max_pool2d", [&](auto t) {
    using T = decltype(t);
    max_pool_forward<T>((T *)y, indices, (const T *)x, a);
  });
}
void max_pool2d_backward(void *dx, const int64_t *indices, const void *dy, const Pool &a) {
  dispatch(a.dtype, "max_pool2d backward", [&](auto t) {
    using T = decltype(t);
    max_pool_backward<T>((T *)dx, indices, (const T *)dy, a);
  });
}
void avg_pool2d(void *y, const void *x, const Pool &a) {
  dispatch(a.dtype, "avg_pool2d", [&](auto t) {
    using T = decltype(t);
    avg_pool_forward<T>((T *)y, (const T *)x, a);
  });
}
void avg_pool2d_backward(void *dx, const void *dy, const Pool &a) {
  dispatch(a.dtype, "avg_pool2d backward", [&](auto t) {
    using T = decltype(t);
    avg_pool_backward<T>((T *)dx, (const T *)dy, a);
  });
}
void batch_norm(void *y, void *mean, void *invstd, const void *x, const void *gamma, const void *beta,
                void *running_mean, void *running_var, const BN &a) {
  dispatch(a.dtype, "batch_norm", [&](auto t) {
    using T = decltype(t);
    bn_forward<T>((T *)y, (T *)mean, (T *)invstd, (const T *)x, (const T *)gamma, (const T *)beta, (T *)running_mean,
                  (T *)running_var, a);
  });
}
void batch_norm_backward(void *dx, void *dgamma, void *dbeta, const void *dy, const void *x, const void *mean,
                         const void *invstd, const void *gamma, const BN &a) {
  dispatch(a.dtype, "batch_norm backward", [&](auto t) {
    using T = decltype(t);
    bn_backward<T>((T *)dx, (T *)dgamma, (T *)dbeta, (const T *)dy, (const T *)x, (const T *)mean, (const T *)invstd,
                   (const T *)gamma, a);
  });
}

}  // namespace cpu
}  // namespace mt
