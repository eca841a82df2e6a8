// cpu_backend.cpp - the reference backend: plain loops over dense buffers,
// float32 and float64 for every op, threads only for matmul where they are cheap.
// Every CUDA kernel is tested against these loops, so they stay obvious.
//
// Contents: memory | elementwise (fill, unary, binary) | reductions | matmul |
//           permute, cast | sgd | the Backend object
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/philox.h"
#include "parallel.h"
#include "classify.h"
#include "compare.h"
#include "cnn.h"
#include "fused.h"
#include "fusions.h"
#include "host_blocks.h"
#include "mse.h"  // fused MSE backward

namespace mt {
namespace {

// ---------------------------------------------------------------- half types
// Storage conversions only: F16 and BF16 tensors can be created, cast and copied
// on the CPU; arithmetic on them is the CUDA backend's business.
float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) { man <<= 1; exp--; }
      bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {  // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
  if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  // overflow to inf
  if (absx < 0x38800000u) {                                    // subnormal or zero
    if (absx < 0x33000000u) return (uint16_t)sign;
    uint32_t e = absx >> 23, m = (absx & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e;  // 14..24
    uint32_t half_m = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half_m & 1))) half_m++;
    return (uint16_t)(sign | half_m);
  }
  uint32_t r = absx - 0x38000000u;  // rebias exponent 127 -> 15
  uint32_t h = r >> 13, rem = r & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

float bf16_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

double load_as_double(const void *p, DType d, int64_t i) {
  switch (d) {
    case DType::F32: return ((const float *)p)[i];
    case DType::F64: return ((const double *)p)[i];
    case DType::F16: return half_to_float(((const uint16_t *)p)[i]);
    case DType::BF16: return bf16_to_float(((const uint16_t *)p)[i]);
    case DType::I32: return ((const int32_t *)p)[i];
    case DType::I64: return (double)((const int64_t *)p)[i];
    case DType::U8: return ((const uint8_t *)p)[i];
  }
  return 0;
}

// A floating value as an integer, defined for every input (a C cast is undefined outside the
// target's range): truncation toward zero, NaN 0, and beyond int64's range its nearest end.
// Narrower integer dtypes then keep the low bits (two's complement), so the CPU converts as the
// CUDA kernels do (kernel_utils.cuh's convert: through int64, whose conversion saturates).
int64_t float_to_int64(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 0x1p63) return INT64_MAX;
  if (v < -0x1p63) return INT64_MIN;  // -2^63 itself converts exactly
  return (int64_t)v;
}

// The low bits of an int64 as a narrower integer dtype (or the value itself for I64).
void store_int64(void *p, DType d, int64_t i, int64_t v) {
  switch (d) {
    case DType::I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)(uint64_t)v; break;
    case DType::I64: ((int64_t *)p)[i] = v; break;
    case DType::U8: ((uint8_t *)p)[i] = (uint8_t)(uint64_t)v; break;
    default: MT_ASSERT(false && "store_int64 takes an integer dtype");
  }
}

void store_from_double(void *p, DType d, int64_t i, double v) {
  switch (d) {
    case DType::F32: ((float *)p)[i] = (float)v; break;
    case DType::F64: ((double *)p)[i] = v; break;
    case DType::F16: ((uint16_t *)p)[i] = float_to_half((float)v); break;
    case DType::BF16: ((uint16_t *)p)[i] = float_to_bf16((float)v); break;
    case DType::I32: case DType::I64: case DType::U8: store_int64(p, d, i, float_to_int64(v)); break;
  }
}

void require_float(DType d, const char *what) {
  MT_CHECK(d == DType::F32 || d == DType::F64, DTYPE,
           "%s on the cpu supports float32 and float64, got %s", what, dtype_name(d));
}

// ---------------------------------------------------------------- elementwise
template <typename T>
T apply_unary(Unary op, T x, T s) {
  switch (op) {
    case Unary::NEG: return -x;
    case Unary::EXP: return std::exp(x);
    case Unary::LOG: return std::log(x);
    case Unary::RELU: return x > T(0) ? x : T(0);
    case Unary::SIGMOID: return x >= T(0) ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
    case Unary::TANH: return std::tanh(x);
    case Unary::ADD_SCALAR: return x + s;
    case Unary::MUL_SCALAR: return x * s;
    case Unary::POW_SCALAR: return std::pow(x, s);
    case Unary::SQRT: return std::sqrt(x);
    case Unary::ABS: return std::fabs(x);
    case Unary::SIGN: return T((x > T(0)) - (x < T(0)));
    case Unary::SQUARE: return x * x;
    case Unary::RECIPROCAL: return T(1) / x;
  }
  return x;
}

template <typename T>
T apply_binary(Binary op, T a, T b) {
  switch (op) {
    case Binary::ADD: return a + b;
    case Binary::SUB: return a - b;
    case Binary::MUL: return a * b;
    case Binary::DIV: return a / b;
    case Binary::MAXIMUM: return (a > b || a != a) ? a : b;  // NaN propagates, as torch.maximum
    case Binary::MINIMUM: return (a < b || a != a) ? a : b;
    case Binary::RELU_BWD: return b > T(0) ? a : T(0);
    case Binary::SIGMOID_BWD: return a * b * (T(1) - b);
    case Binary::TANH_BWD: return a * (T(1) - b * b);
    case Binary::COPY_B: return b;
  }
  return a;
}

template <typename T>
void unary_loop(Unary op, T *out, const T *x, int64_t n, double s) {
  for (int64_t i = 0; i < n; i++) out[i] = apply_unary<T>(op, x[i], (T)s);
}

template <typename T>
void binary_loop(Binary op, T *out, const T *a, const T *b, const BroadcastPlan &p) {
  if (p.same) {
    for (int64_t i = 0; i < p.numel; i++) out[i] = apply_binary<T>(op, a ? a[i] : T(0), b[i]);
    return;
  }
  // Walk out in row-major order with an odometer over the folded dims.
  int64_t idx[kMaxDims] = {};
  int64_t ia = 0, ib = 0;
  for (int64_t i = 0; i < p.numel; i++) {
    out[i] = apply_binary<T>(op, a ? a[ia] : T(0), b[ib]);
    for (int d = p.ndim - 1; d >= 0; d--) {
      idx[d]++;
      ia += p.a_stride[d];
      ib += p.b_stride[d];
      if (idx[d] < p.shape[d]) break;
      ia -= p.a_stride[d] * p.shape[d];
      ib -= p.b_stride[d] * p.shape[d];
      idx[d] = 0;
    }
  }
}

// ---------------------------------------------------------------- reductions
template <typename T>
void sum_reduce_loop(T *out, const T *x, int64_t outer, int64_t reduce, int64_t inner, double scale, double beta) {
  // Accumulate in double: the reference should be more exact than what it checks.
  std::vector<double> acc((size_t)inner);
  for (int64_t o = 0; o < outer; o++) {
    std::fill(acc.begin(), acc.end(), 0.0);
    const T *base = x + o * reduce * inner;
    for (int64_t r = 0; r < reduce; r++)
      for (int64_t i = 0; i < inner; i++) acc[(size_t)i] += (double)base[r * inner + i];
    for (int64_t i = 0; i < inner; i++) {
      double v = acc[(size_t)i] * scale;
      out[o * inner + i] = (T)(beta != 0.0 ? beta * (double)out[o * inner + i] + v : v);
    }
  }
}

// ---------------------------------------------------------------- matmul
template <typename T>
void matmul_loop(const MatmulArgs &g) {
  const T *A = (const T *)g.a, *B = (const T *)g.b;
  T *C = (T *)g.c;
  const int64_t M = g.m, N = g.n, K = g.k;
  // op(A)[i,p] and op(B)[p,j] in the stored layouts
  const int64_t a_rs = g.trans_a ? 1 : K, a_cs = g.trans_a ? M : 1;
  const int64_t b_rs = g.trans_b ? 1 : N, b_cs = g.trans_b ? K : 1;
  auto rows = [&](int64_t bi, int64_t r0, int64_t r1) {
    const T *a = A + bi * g.stride_a, *b = B + bi * g.stride_b;
    T *c = C + bi * g.stride_c;
    std::vector<double> acc((size_t)N);
    for (int64_t i = r0; i < r1; i++) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t p = 0; p < K; p++) {
        double av = (double)a[i * a_rs + p * a_cs];
        if (av == 0.0) continue;
        const T *brow = b + p * b_rs;
        for (int64_t j = 0; j < N; j++) acc[(size_t)j] += av * (double)brow[j * b_cs];
      }
      for (int64_t j = 0; j < N; j++) {
        double v = g.alpha * acc[(size_t)j];
        c[i * N + j] = (T)(g.beta != 0.0 ? v + g.beta * (double)c[i * N + j] : v);
      }
    }
  };
  const double work = (double)g.batch * M * N * K;
  // Asked once: hardware_concurrency() reads /sys on every call (~15 µs, more than a small matmul).
  static const int threads = (int)std::min<unsigned>(std::max(1u, std::thread::hardware_concurrency()), 16u);
  if (work < 2e6 || threads == 1 || M < 2 * threads) {
    for (int64_t bi = 0; bi < g.batch; bi++) rows(bi, 0, M);
    return;
  }
  for (int64_t bi = 0; bi < g.batch; bi++) {
    std::vector<std::thread> pool;
    int64_t chunk = (M + threads - 1) / threads;
    for (int t = 0; t < threads; t++) {
      int64_t r0 = t * chunk, r1 = std::min(M, r0 + chunk);
      if (r0 < r1) pool.emplace_back(rows, bi, r0, r1);
    }
    for (auto &th : pool) th.join();
  }
}

// ---------------------------------------------------------------- permute
void permute_bytes(char *out, const char *x, const int64_t *shape, const int64_t *perm, int ndim, int64_t esize) {
  int64_t in_stride[kMaxDims], out_shape[kMaxDims], src_stride[kMaxDims];
  int64_t acc = 1, n = 1;
  for (int d = ndim - 1; d >= 0; d--) { in_stride[d] = acc; acc *= shape[d]; }
  for (int d = 0; d < ndim; d++) { out_shape[d] = shape[perm[d]]; src_stride[d] = in_stride[perm[d]]; n *= out_shape[d]; }
  int64_t idx[kMaxDims] = {};
  int64_t src = 0;
  for (int64_t i = 0; i < n; i++) {
    std::memcpy(out + i * esize, x + src * esize, (size_t)esize);
    for (int d = ndim - 1; d >= 0; d--) {
      idx[d]++;
      src += src_stride[d];
      if (idx[d] < out_shape[d]) break;
      src -= src_stride[d] * out_shape[d];
      idx[d] = 0;
    }
  }
}

// ---------------------------------------------------------------- sgd
template <typename T>
void sgd_loop(const SgdArgs &g) {
  for (int64_t t = 0; t < g.count; t++) {
    T *p = (T *)g.params[t];
    const T *gr = (const T *)g.grads[t];
    T *v = g.velocity ? (T *)g.velocity[t] : nullptr;
    for (int64_t i = 0; i < g.numel[t]; i++) {
      T d = gr[i] + (T)g.weight_decay * p[i];
      if (g.momentum != 0.0) {
        T vi = g.first_step ? d : (T)g.momentum * v[i] + d;
        v[i] = vi;
        d = g.nesterov ? d + (T)g.momentum * vi : vi;
      }
      p[i] -= (T)g.lr * d;
    }
  }
}

// ---------------------------------------------------------------- the backend
class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::CPU; }
  const char *name() const override { return "cpu"; }

  // 64-byte aligned blocks, small ones recycled (host_blocks.h); alloc(0) is unique.
  void *alloc(int64_t nbytes) override { return blocks_.alloc(nbytes); }
  void free(void *p) override { blocks_.free(p); }
  int64_t live_bytes() const override { return blocks_.live_bytes(); }
  void copy_to_host(void *dst, const void *src, int64_t n) override { if (n) std::memmove(dst, src, (size_t)n); }
  void copy_from_host(void *dst, const void *src, int64_t n) override { if (n) std::memmove(dst, src, (size_t)n); }
  void copy(void *dst, const void *src, int64_t n) override { if (n) std::memmove(dst, src, (size_t)n); }
  void synchronize() override {}

  void fill(void *out, int64_t n, DType d, double v) override {
    for (int64_t i = 0; i < n; i++) store_from_double(out, d, i, v);
  }
  void arange(void *out, int64_t n, DType d, double start, double step) override {
    for (int64_t i = 0; i < n; i++) store_from_double(out, d, i, start + (double)i * step);
  }
  void unary(Unary op, void *out, const void *x, int64_t n, DType d, double s) override {
    require_float(d, "unary op");
    if (d == DType::F32) unary_loop<float>(op, (float *)out, (const float *)x, n, s);
    else unary_loop<double>(op, (double *)out, (const double *)x, n, s);
  }
  void binary(Binary op, void *out, const void *a, const void *b, const BroadcastPlan &p, DType d) override {
    require_float(d, "binary op");
    if (d == DType::F32) binary_loop<float>(op, (float *)out, (const float *)a, (const float *)b, p);
    else binary_loop<double>(op, (double *)out, (const double *)a, (const double *)b, p);
  }
  void sum_reduce(void *out, const void *x, int64_t outer, int64_t reduce, int64_t inner, DType d, double scale,
                  double beta) override {
    require_float(d, "sum");
    if (d == DType::F32) sum_reduce_loop<float>((float *)out, (const float *)x, outer, reduce, inner, scale, beta);
    else sum_reduce_loop<double>((double *)out, (const double *)x, outer, reduce, inner, scale, beta);
  }
  void squared_diff_sum(void *out, const void *a, const void *b, int64_t n, DType d, double scale) override {
    require_float(d, "mse_loss");
    double acc = 0;
    for (int64_t i = 0; i < n; i++) {
      double diff = load_as_double(a, d, i) - load_as_double(b, d, i);
      acc += diff * diff;
    }
    store_from_double(out, d, 0, acc * scale);
  }
  void matmul(const MatmulArgs &g) override {
    require_float(g.dtype, "matmul");
    if (g.dtype == DType::F32) matmul_loop<float>(g);
    else matmul_loop<double>(g);
    matmul_extras(*this, g);
  }
  void permute(void *out, const void *x, const int64_t *shape, const int64_t *perm, int ndim, DType d) override {
    permute_bytes((char *)out, (const char *)x, shape, perm, ndim, dtype_size(d));
  }
  void cast(void *out, DType od, const void *x, DType xd, int64_t n) override {
    if (od == xd) { copy(out, x, n * dtype_size(od)); return; }
    if (!dtype_is_float(xd) && !dtype_is_float(od)) {  // exact (doubles lose int64 precision)
      for (int64_t i = 0; i < n; i++) {
        const int64_t v = xd == DType::I64   ? ((const int64_t *)x)[i]
                          : xd == DType::I32 ? ((const int32_t *)x)[i]
                                             : ((const uint8_t *)x)[i];
        store_int64(out, od, i, v);
      }
      return;
    }
    for (int64_t i = 0; i < n; i++) store_from_double(out, od, i, load_as_double(x, xd, i));
  }
  void fill_uniform(void *out, int64_t n, DType d, uint64_t seed) override {
    require_float(d, "uniform fill");
    parallel_ranges(n, kPhiloxPerBlock, 1 << 16, [&](int64_t i0, int64_t i1) {
      philox_uniforms(seed, i0, i1, d == DType::F64, [&](int64_t i, double u) {
        if (d == DType::F32) ((float *)out)[i] = (float)u;
        else ((double *)out)[i] = u;
      });
    });
  }
  void sgd_step(const SgdArgs &g) override {
    require_float(g.dtype, "sgd");
    if (g.dtype == DType::F32) sgd_loop<float>(g);
    else sgd_loop<double>(g);
  }

  void softmax(void *y, const void *x, int64_t rows, int64_t cols, DType d, bool log) override {
    cpu::softmax(y, x, rows, cols, d, log);
  }
  void softmax_backward(void *dx, const void *y, const void *dy, int64_t rows, int64_t cols, DType d,
                        bool log) override {
    cpu::softmax_backward(dx, y, dy, rows, cols, d, log);
  }
  void cross_entropy(void *loss, void *lse, const void *x, const int64_t *t, int64_t rows, int64_t cols, DType d,
                     double scale) override {
    cpu::cross_entropy(loss, lse, x, t, rows, cols, d, scale);
  }
  void cross_entropy_backward(void *dx, const void *x, const void *lse, const int64_t *t, const void *dloss,
                              int64_t rows, int64_t cols, DType d, double scale) override {
    cpu::cross_entropy_backward(dx, x, lse, t, dloss, rows, cols, d, scale);
  }
  void nll_loss(void *loss, const void *lp, const int64_t *t, int64_t rows, int64_t cols, DType d,
                double scale) override {
    cpu::nll_loss(loss, lp, t, rows, cols, d, scale);
  }
  void nll_loss_backward(void *dlp, const int64_t *t, const void *dloss, int64_t rows, int64_t cols, DType d,
                         double scale) override {
    cpu::nll_loss_backward(dlp, t, dloss, rows, cols, d, scale);
  }
  int64_t range_check_queue(const int64_t *idx, int64_t n, int64_t bound) override {
    return cpu::first_out_of_range(idx, n, bound);
  }
  int64_t range_check_answer(int64_t ticket) override { return ticket; }
  void max_reduce(void *values, int64_t *indices, const void *x, int64_t outer, int64_t reduce, int64_t inner,
                  DType d) override {
    cpu::max_reduce(values, indices, x, outer, reduce, inner, d);
  }
  void max_backward(void *dx, const int64_t *indices, const void *dy, int64_t outer, int64_t reduce, int64_t inner,
                    DType d) override {
    cpu::max_backward(dx, indices, dy, outer, reduce, inner, d);
  }
  void adam_step(const AdamArgs &a) override { cpu::adam_step(a); }
  void causal_softmax(void *y, const void *x, int64_t rows, int64_t cols, int64_t t, int64_t offset,
                      DType dtype) override {
    cpu::causal_softmax(y, x, rows, cols, t, offset, dtype);
  }
  void clip_grad_norm(void *norm, void *const *grads, const int64_t *numel, int64_t count, DType dtype,
                      double max_norm, double eps) override {
    cpu::clip_grad_norm(norm, grads, numel, count, dtype, max_norm, eps);
  }
  // ---- fused MSE backward (mse.cpp)
  void mse_backward(void *dp, void *dt, const void *p, const void *t, const void *g, int64_t n, DType d,
                    double scale) override {
    cpu::mse_backward(dp, dt, p, t, g, n, d, scale);
  }
  // ---- end fused MSE backward

  void slice_copy(void *out, const void *x, int64_t outer, int64_t size, int64_t inner, int64_t start, int64_t len,
                  DType d) override {
    const int64_t es = dtype_size(d), row = len * inner * es;
    for (int64_t o = 0; o < outer; o++)
      std::memcpy((char *)out + o * row, (const char *)x + ((o * size + start) * inner) * es, (size_t)row);
  }
  void slice_backward(void *dx, const void *dy, int64_t outer, int64_t size, int64_t inner, int64_t start,
                      int64_t len, DType d) override {
    const int64_t es = dtype_size(d), row = len * inner * es;
    for (int64_t o = 0; o < outer; o++)
      std::memcpy((char *)dx + ((o * size + start) * inner) * es, (const char *)dy + o * row, (size_t)row);
  }
  void index_select(void *out, const void *x, const int64_t *idx, int64_t n, int64_t rows_x, int64_t cols,
                    DType d) override {
    const int64_t row = cols * dtype_size(d);
    for (int64_t r = 0; r < n; r++) {
      char *dst = (char *)out + r * row;
      if (idx[r] < 0 || idx[r] >= rows_x) std::memset(dst, 0, (size_t)row);
      else std::memcpy(dst, (const char *)x + idx[r] * row, (size_t)row);
    }
  }
  void index_add(void *dx, const int64_t *idx, const void *dy, int64_t n, int64_t rows_x, int64_t cols,
                 DType d) override {
    require_float(d, "index_select backward");
    for (int64_t r = 0; r < n; r++)
      for (int64_t c = 0; c < cols; c++) {
        if (d == DType::F32) ((float *)dx)[idx[r] * cols + c] += ((const float *)dy)[r * cols + c];
        else ((double *)dx)[idx[r] * cols + c] += ((const double *)dy)[r * cols + c];
      }
  }

  // ---- comparisons and selection (compare.cpp)
  void compare(Compare op, uint8_t *out, const void *a, const void *b, const BroadcastPlan &p, DType d) override {
    cpu::compare(op, out, a, b, p, d);
  }
  void where(void *out, const uint8_t *cond, const void *a, const void *b, const WherePlan &p, DType d) override {
    cpu::where(out, cond, a, b, p, d);
  }
  void pow(void *out, const void *a, const void *b, const BroadcastPlan &p, DType d) override {
    cpu::pow(out, a, b, p, d);
  }
  // ---- end comparisons and selection

  // ---- convolutional networks (cnn.cpp)
  void conv2d(void *y, const void *x, const void *w, const void *bias, const Conv2dArgs &a) override {
    cpu::conv2d(y, x, w, bias, a);
  }
  void conv2d_backward_data(void *dx, const void *dy, const void *w, const Conv2dArgs &a) override {
    cpu::conv2d_backward_data(dx, dy, w, a);
  }
  void conv2d_backward_filter(void *dw, const void *dy, const void *x, const Conv2dArgs &a) override {
    cpu::conv2d_backward_filter(dw, dy, x, a);
  }
  void max_pool2d(void *y, int64_t *indices, const void *x, const Pool2dArgs &a) override {
    cpu::max_pool2d(y, indices, x, a);
  }
  void max_pool2d_backward(void *dx, const int64_t *indices, const void *dy, const Pool2dArgs &a) override {
    cpu::max_pool2d_backward(dx, indices, dy, a);
  }
  void avg_pool2d(void *y, const void *x, const Pool2dArgs &a) override { cpu::avg_pool2d(y, x, a); }
  void avg_pool2d_backward(void *dx, const void *dy, const Pool2dArgs &a) override {
    cpu::avg_pool2d_backward(dx, dy, a);
  }
  void batch_norm(void *y, void *mean, void *invstd, const void *x, const void *gamma, const void *beta,
                  void *running_mean, void *running_var, const BatchNormArgs &a) override {
    cpu::batch_norm(y, mean, invstd, x, gamma, beta, running_mean, running_var, a);
  }
  void batch_norm_backward(void *dx, void *dgamma, void *dbeta, const void *dy, const void *x, const void *mean,
                           const void *invstd, const void *gamma, const BatchNormArgs &a) override {
    cpu::batch_norm_backward(dx, dgamma, dbeta, dy, x, mean, invstd, gamma, a);
  }
  // ---- end convolutional networks

  // ---- fused transformer kernels (fused.cpp)
  void layer_norm(void *y, void *mean, void *rstd, const void *x, const void *gamma, const void *beta, int64_t rows,
                  int64_t d, double eps, DType dt) override {
    cpu::layer_norm(y, mean, rstd, x, gamma, beta, rows, d, eps, dt);
  }
  void layer_norm_backward(void *dx, const void *dx_add, void *dgamma, void *dbeta, const void *dy, const void *x,
                           const void *mean, const void *rstd, const void *gamma, int64_t rows, int64_t d,
                           DType dt) override {
    cpu::layer_norm_backward(dx, dx_add, dgamma, dbeta, dy, x, mean, rstd, gamma, rows, d, dt);
  }
  void gelu(void *y, const void *x, int64_t n, DType dt) override { cpu::gelu(y, x, n, dt); }
  void gelu_backward(void *dx, const void *dy, const void *x, int64_t n, DType dt) override {
    cpu::gelu_backward(dx, dy, x, n, dt);
  }
  void causal_mask(uint8_t *out, int64_t t, int64_t s) override { cpu::causal_mask(out, t, s); }
  // ---- end fused transformer kernels

  // ---- fusions (fusions.cpp)
  void bias_act(void *y, const void *x, const void *bias, int64_t rows, int64_t n, Activation act,
                DType dt) override {
    cpu::bias_act(y, x, bias, rows, n, act, dt);
  }
  void bias_act_backward(void *dx, void *dbias, const void *dy, const void *x, const void *bias, int64_t rows,
                         int64_t n, Activation act, DType dt) override {
    cpu::bias_act_backward(dx, dbias, dy, x, bias, rows, n, act, dt);
  }
  void add_layer_norm(void *s, void *y, void *mean, void *rstd, const void *x, const void *residual, const void *gamma,
                      const void *beta, int64_t rows, int64_t d, double eps, DType dt) override {
    cpu::add_layer_norm(s, y, mean, rstd, x, residual, gamma, beta, rows, d, eps, dt);
  }
  void dropout_add(void *out, const void *x, const void *residual, int64_t n, double p, uint64_t seed,
                   DType dt) override {
    cpu::dropout_add(out, x, residual, n, p, seed, dt);
  }
  // ---- end fusions

 private:
  cpu::HostBlocks blocks_;
};

}  // namespace

Backend &cpu_backend() {
  static CpuBackend *b = new CpuBackend();  // never destroyed: tensors may outlive static destruction
  return *b;
}

}  // namespace mt
