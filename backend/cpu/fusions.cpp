// fusions.cpp - CPU reference of the fused ops: plain loops that evaluate exactly what the
// composition of the unfused CPU ops evaluates, so each fused op equals its composition bit
// for bit here (the CUDA kernels are then checked against these loops).
//
//   bias_act:          z = x + bias (rounded to the dtype, as add), y = act(z) by the unfused
//                      rules (relu: z > 0 ? z : 0; gelu: cpu::gelu, sums in double)
//   bias_act_backward: dx = dy * act'(z) (gelu: cpu::gelu_backward), dbias = column sums of dx
//                      in double                                      (rows, n) and (n), written
//   add_layer_norm:    s = x + residual, then cpu::layer_norm of s    (rows, d), written
//   dropout_add:       out = residual + x * keep, keep = u >= p ? 1/(1-p) : 0 in the dtype,
//                      u = the uniform stream of the seed (mt_dropout's mask)
#include "backend/cpu/fusions.h"

#include <vector>

#include "backend/cpu/fused.h"
#include "backend/philox.h"

namespace mt {
namespace cpu {
namespace {

using Act = Backend::Activation;

void require_float(DType d, const char *what) {
  MT_CHECK(d == DType::F32 || d == DType::F64, DTYPE, "%s on the cpu supports float32 and float64, got %s", what,
           dtype_name(d));
}

// z (n) = x + bias, each sum rounded to T as the unfused add rounds it.
template <class T>
void biased_row(T *z, const T *x, const T *bias, int64_t n) {
  for (int64_t c = 0; c < n; c++) z[c] = x[c] + bias[c];
}

template <class T>
void bias_act_t(T *y, const T *x, const T *bias, int64_t rows, int64_t n, Act act, DType dtype) {
  for (int64_t r = 0; r < rows; r++) {
    T *yr = y + r * n;
    biased_row(yr, x + r * n, bias, n);
    if (act == Act::RELU)
      for (int64_t c = 0; c < n; c++) yr[c] = yr[c] > T(0) ? yr[c] : T(0);
    else if (act == Act::GELU)
      gelu(yr, yr, n, dtype);  // elementwise, so in place is fine
  }
}

template <class T>
void bias_act_backward_t(T *dx, T *dbias, const T *dy, const T *x, const T *bias, int64_t rows, int64_t n, Act act,
                         DType dtype) {
  std::vector<T> z((size_t)n), row(dx ? 0 : (size_t)n);
  std::vector<double> db(dbias ? (size_t)n : 0, 0.0);
  for (int64_t r = 0; r < rows; r++) {
    const T *dyr = dy + r * n;
    T *dxr = dx ? dx + r * n : row.data();
    biased_row(z.data(), x + r * n, bias, n);
    if (act == Act::GELU)
      gelu_backward(dxr, dyr, z.data(), n, dtype);
    else
      for (int64_t c = 0; c < n; c++) dxr[c] = act == Act::IDENTITY || z[(size_t)c] > T(0) ? dyr[c] : T(0);
    if (dbias)
      for (int64_t c = 0; c < n; c++) db[(size_t)c] += (double)dxr[c];
  }
  if (dbias)
    for (int64_t c = 0; c < n; c++) dbias[c] = (T)db[(size_t)c];
}

template <class T>
void dropout_add_t(T *out, const T *x, const T *residual, int64_t n, double p, uint64_t seed) {
  const T thresh = (T)p, scale = (T)(1.0 / (1.0 - p));
  philox_uniforms(seed, n, sizeof(T) == 8, [&](int64_t i, double draw) {
    const T u = (T)draw;
    const T dropped = x[i] * (u >= thresh ? scale : T(0));
    out[i] = residual ? residual[i] + dropped : dropped;
  });
}

}  // namespace

void bias_act(void *y, const void *x, const void *bias, int64_t rows, int64_t n, Act act, DType dtype) {
  require_float(dtype, "bias_act");
  if (dtype == DType::F32)
    return bias_act_t((float *)y, (const float *)x, (const float *)bias, rows, n, act, dtype);
  bias_act_t((double *)y, (const double *)x, (const double *)bias, rows, n, act, dtype);
}

void bias_act_backward(void *dx, void *dbias, const void *dy, const void *x, const void *bias, int64_t rows, int64_t n,
                       Act act, DType dtype) {
  require_float(dtype, "bias_act backward");
  if (dtype == DType::F32)
    return bias_act_backward_t((float *)dx, (float *)dbias, (const float *)dy, (const float *)x, (const float *)bias,
                               rows, n, act, dtype);
  bias_act_backward_t((double *)dx, (double *)dbias, (const double *)dy, (const double *)x, (const double *)bias, rows,
                      n, act, dtype);
}

void add_layer_norm(void *s, void *y, void *mean, void *rstd, const void *x, const void *residual, const void *gamma,
                    const void *beta, int64_t rows, int64_t d, double eps, DType dtype) {
  require_float(dtype, "add_layer_norm");
  const int64_t count = rows * d;
  if (dtype == DType::F32)
    for (int64_t i = 0; i < count; i++) ((float *)s)[i] = ((const float *)x)[i] + ((const float *)residual)[i];
  else
    for (int64_t i = 0; i < count; i++) ((double *)s)[i] = ((const double *)x)[i] + ((const double *)residual)[i];
  layer_norm(y, mean, rstd, s, gamma, beta, rows, d, eps, dtype);
}

void dropout_add(void *out, const void *x, const void *residual, int64_t n, double p, uint64_t seed, DType dtype) {
  require_float(dtype, "dropout_add");
  if (dtype == DType::F32)
    return dropout_add_t((float *)out, (const float *)x, (const float *)residual, n, p, seed);
  dropout_add_t((double *)out, (const double *)x, (const double *)residual, n, p, seed);
}

}  // namespace cpu
}  // namespace mt
