// compare.cpp - CPU reference of the comparisons and selection family: plain loops.
//
//   compare: out[i] (uint8 0/1) = a[ia(i)] OP b[ib(i)]         out (plan.numel)
//   where:   out[i] = cond[ic(i)] ? a[ia(i)] : b[ib(i)]        out (plan.numel)
//   pow:     out[i] = pow(a[ia(i)], b[ib(i)])                  out (plan.numel)
//
// The broadcast offsets come from an odometer over the plan's folded dims, the same
// walk as the binary ops of cpu_backend.cpp.
#include "backend/cpu/compare.h"

#include <cmath>
#include <cstring>

namespace mt {
namespace cpu {
namespace {

using Compare = Backend::Compare;

// Calls f(i, offsets...) for every output index i in row-major order; K operands with
// strides[k][d] elements per step of dim d.
template <int K, class F>
void walk(int ndim, int64_t numel, const int64_t *shape, const int64_t *const (&strides)[K], F &&f) {
  int64_t idx[kMaxDims] = {};
  int64_t off[K] = {};
  for (int64_t i = 0; i < numel; i++) {
    f(i, off);
    for (int d = ndim - 1; d >= 0; d--) {
      idx[d]++;
      for (int k = 0; k < K; k++) off[k] += strides[k][d];
      if (idx[d] < shape[d]) break;
      for (int k = 0; k < K; k++) off[k] -= strides[k][d] * shape[d];
      idx[d] = 0;
    }
  }
}

template <class T>
uint8_t apply_compare(Compare op, T a, T b) {
  switch (op) {
    case Compare::EQ: return a == b;
    case Compare::NE: return a != b;
    case Compare::LT: return a < b;
    case Compare::LE: return a <= b;
    case Compare::GT: return a > b;
    case Compare::GE: return a >= b;
  }
  return 0;
}

template <class T>
void compare_loop(Compare op, uint8_t *out, const T *a, const T *b, const BroadcastPlan &p) {
  if (p.same) {
    for (int64_t i = 0; i < p.numel; i++) out[i] = apply_compare<T>(op, a[i], b[i]);
    return;
  }
  const int64_t *const strides[2] = {p.a_stride, p.b_stride};
  walk<2>(p.ndim, p.numel, p.shape, strides,
          [&](int64_t i, const int64_t *o) { out[i] = apply_compare<T>(op, a[o[0]], b[o[1]]); });
}

template <class T>
void pow_loop(T *out, const T *a, const T *b, const BroadcastPlan &p) {
  if (p.same) {
    for (int64_t i = 0; i < p.numel; i++) out[i] = std::pow(a[i], b[i]);
    return;
  }
  const int64_t *const strides[2] = {p.a_stride, p.b_stride};
  walk<2>(p.ndim, p.numel, p.shape, strides, [&](int64_t i, const int64_t *o) { out[i] = std::pow(a[o[0]], b[o[1]]); });
}

}  // namespace

void compare(Compare op, uint8_t *out, const void *a, const void *b, const BroadcastPlan &plan, DType dtype) {
  switch (dtype) {
    case DType::F32: return compare_loop(op, out, (const float *)a, (const float *)b, plan);
    case DType::F64: return compare_loop(op, out, (const double *)a, (const double *)b, plan);
    case DType::I32: return compare_loop(op, out, (const int32_t *)a, (const int32_t *)b, plan);
    case DType::I64: return compare_loop(op, out, (const int64_t *)a, (const int64_t *)b, plan);
    case DType::U8: return compare_loop(op, out, (const uint8_t *)a, (const uint8_t *)b, plan);
    default: break;
  }
  fail(Code::DTYPE, "comparisons on the cpu support float32, float64, int32, int64 and uint8, got %s",
       dtype_name(dtype));
}

void where(void *out, const uint8_t *cond, const void *a, const void *b, const Backend::WherePlan &p, DType dtype) {
  const int64_t es = dtype_size(dtype);
  char *o = (char *)out;
  const char *pa = (const char *)a, *pb = (const char *)b;
  if (p.same) {
    for (int64_t i = 0; i < p.numel; i++) std::memcpy(o + i * es, (cond[i] ? pa : pb) + i * es, (size_t)es);
    return;
  }
  const int64_t *const strides[3] = {p.cond_stride, p.a_stride, p.b_stride};
  walk<3>(p.ndim, p.numel, p.shape, strides, [&](int64_t i, const int64_t *off) {
    const char *src = cond[off[0]] ? pa + off[1] * es : pb + off[2] * es;
    std::memcpy(o + i * es, src, (size_t)es);
  });
}

void pow(void *out, const void *a, const void *b, const BroadcastPlan &plan, DType dtype) {
  if (dtype == DType::F32) return pow_loop((float *)out, (const float *)a, (const float *)b, plan);
  if (dtype == DType::F64) return pow_loop((double *)out, (const double *)a, (const double *)b, plan);
  fail(Code::DTYPE, "pow on the cpu supports float32 and float64, got %s", dtype_name(dtype));
}

}  // namespace cpu
}  // namespace mt
