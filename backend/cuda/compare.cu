// compare.cu - comparisons (uint8 masks), where, and pow of two tensors.
//
//   compare: out[i] (uint8 0/1) = a[ia(i)] OP b[ib(i)]        out (n), a, b broadcast
//   where:   out[i] = cond[ic(i)] ? a[ia(i)] : b[ib(i)]       out (n), cond, a, b broadcast
//   pow:     out[i] = pow(a[ia(i)], b[ib(i)])                 out (n), a, b broadcast
//
// Bandwidth bound, a few flops per element: compare moves 2n*sizeof(T) + n bytes, where
// n + 3n*sizeof(T). One grid-stride kernel per op over one wave of resident blocks; the
// broadcast offsets come from the output index with FastDivmod (multiply-high + shift per
// dim) while n < 2^31, plain 64-bit division beyond. The flat case (every operand of the
// output's shape) skips the index math. Semantics are the CPU reference's: NaN compares
// unequal to everything, float16/bfloat16 compare in float, integers compare exactly.
#include "backend/cuda/compare.h"
#include "backend/cuda/context.h"
#include "backend/cuda/kernel_utils.cuh"

namespace mt {
namespace cuda {

namespace {

constexpr int kThreads = 256;
using Compare = Backend::Compare;

// ---- broadcast offsets of K operands ------------------------------------------------------

template <int K>
struct Offsets32 {  // dims innermost first
  int ndim;
  FastDivmod size[kMaxDims];
  uint32_t stride[K][kMaxDims];
  __device__ __forceinline__ void at(int64_t i, int64_t (&o)[K]) const {
    uint32_t rest = (uint32_t)i, off[K] = {};
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d >= ndim) break;
      uint32_t q, r;
      size[d].divmod(rest, q, r);
#pragma unroll
      for (int k = 0; k < K; ++k) off[k] += r * stride[k][d];
      rest = q;
    }
#pragma unroll
    for (int k = 0; k < K; ++k) o[k] = off[k];
  }
};

template <int K>
struct Offsets64 {
  int ndim;
  int64_t size[kMaxDims];
  int64_t stride[K][kMaxDims];
  __device__ __forceinline__ void at(int64_t i, int64_t (&o)[K]) const {
    int64_t rest = i;
#pragma unroll
    for (int k = 0; k < K; ++k) o[k] = 0;
    for (int d = 0; d < ndim; ++d) {
      const int64_t q = rest / size[d], r = rest - q * size[d];
#pragma unroll
      for (int k = 0; k < K; ++k) o[k] += r * stride[k][d];
      rest = q;
    }
  }
};

struct Flat {
  template <int K>
  __device__ __forceinline__ void at(int64_t i, int64_t (&o)[K]) const {
#pragma unroll
    for (int k = 0; k < K; ++k) o[k] = i;
  }
};

// The compare type of a storage type: float for half and bfloat16, itself otherwise.
template <class T>
using CmpT = typename std::conditional<std::is_same<T, half>::value || std::is_same<T, bf16>::value, float, T>::type;

template <class T>
__device__ __forceinline__ CmpT<T> cmp_value(T x) {
  if constexpr (std::is_same<CmpT<T>, T>::value) return x;
  else return to_compute(x);
}

// ---- kernels ------------------------------------------------------------------------------

template <class T, class Ix>
__global__ void __launch_bounds__(kThreads) compare_kernel(uint8_t *out, const T *a, const T *b, int64_t n, Compare op,
                                                           Ix ix) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t o[2];
    ix.at(i, o);
    const auto x = cmp_value(a[o[0]]), y = cmp_value(b[o[1]]);
    bool r;
    switch (op) {
      case Compare::EQ: r = x == y; break;
      case Compare::NE: r = x != y; break;
      case Compare::LT: r = x < y; break;
      case Compare::LE: r = x <= y; break;
      case Compare::GT: r = x > y; break;
      default: r = x >= y; break;
    }
    out[i] = r ? 1 : 0;
  }
}

template <class T, class Ix>
__global__ void __launch_bounds__(kThreads) where_kernel(T *out, const uint8_t *cond, const T *a, const T *b,
                                                         int64_t n, Ix ix) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t o[3];
    ix.at(i, o);
    out[i] = cond[o[0]] ? a[o[1]] : b[o[2]];
  }
}

__device__ __forceinline__ float dpow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double dpow(double x, double y) { return ::pow(x, y); }

template <class T, class Ix>
__global__ void __launch_bounds__(kThreads) pow_kernel(T *out, const T *a, const T *b, int64_t n, Ix ix) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t o[2];
    ix.at(i, o);
    out[i] = from_compute<T>(dpow(to_compute(a[o[0]]), to_compute(b[o[1]])));
  }
}

// ---- launch helpers ----------------------------------------------------------------------

// Calls launch(ix) with the cheapest offset mapper for a plan of K operands (strides[k]
// per dim, outermost first, as BroadcastPlan / WherePlan store them).
template <int K, class Launch>
void with_offsets(bool same, int ndim, int64_t n, const int64_t *shape, const int64_t *const (&strides)[K],
                  Launch &&launch) {
  if (same) {
    launch(Flat{});
  } else if (n < (int64_t(1) << 31)) {
    Offsets32<K> ix{};
    ix.ndim = ndim;
    for (int d = 0; d < ndim; ++d) {
      const int src = ndim - 1 - d;  // innermost first
      ix.size[d] = FastDivmod((uint32_t)shape[src]);
      for (int k = 0; k < K; ++k) ix.stride[k][d] = (uint32_t)strides[k][src];
    }
    launch(ix);
  } else {
    Offsets64<K> ix{};
    ix.ndim = ndim;
    for (int d = 0; d < ndim; ++d) {
      const int src = ndim - 1 - d;
      ix.size[d] = shape[src];
      for (int k = 0; k < K; ++k) ix.stride[k][d] = strides[k][src];
    }
    launch(ix);
  }
}

void check_plan(const char *op, int ndim, int64_t n, const int64_t *shape, bool same) {
  MT_CHECK(n >= 0, INVALID_ARGUMENT, "cuda %s: negative numel %lld", op, (long long)n);
  if (same) return;
  MT_CHECK(ndim >= 0 && ndim <= kMaxDims, INVALID_ARGUMENT, "cuda %s: plan.ndim %d outside [0, %d]", op, ndim, kMaxDims);
  int64_t prod = 1;
  for (int d = 0; d < ndim; ++d) prod *= shape[d];
  MT_CHECK(prod == n, INVALID_ARGUMENT, "cuda %s: plan shape holds %lld elements but numel is %lld", op,
           (long long)prod, (long long)n);
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------

void compare(Context &c, Compare op, uint8_t *out, const void *a, const void *b, const BroadcastPlan &plan,
             DType dtype) {
  NvtxRange range("compare");
  check_plan("compare", plan.ndim, plan.numel, plan.shape, plan.same);
  if (plan.numel == 0) return;
  MT_CHECK(out && a && b, INVALID_ARGUMENT, "cuda compare: null buffer (out=%p, a=%p, b=%p)", (void *)out, a, b);
  const int64_t *const strides[2] = {plan.a_stride, plan.b_stride};
  dispatch_any(dtype, "compare", [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_offsets<2>(plan.same, plan.ndim, plan.numel, plan.shape, strides, [&](auto ix) {
      constexpr auto kernel = compare_kernel<T, decltype(ix)>;
      const unsigned grid = wave_grid<kernel>(c.sm_count, plan.numel, kThreads, kThreads);
      kernel<<<grid, kThreads, 0, c.stream>>>(out, static_cast<const T *>(a), static_cast<const T *>(b), plan.numel,
                                              op, ix);
      MT_CUDA_CHECK_LAUNCH("compare");
    });
  });
}

void where(Context &c, void *out, const uint8_t *cond, const void *a, const void *b, const Backend::WherePlan &plan,
           DType dtype) {
  NvtxRange range("where");
  check_plan("where", plan.ndim, plan.numel, plan.shape, plan.same);
  if (plan.numel == 0) return;
  MT_CHECK(out && cond && a && b, INVALID_ARGUMENT, "cuda where: null buffer (out=%p, cond=%p, a=%p, b=%p)", out,
           (const void *)cond, a, b);
  const int64_t *const strides[3] = {plan.cond_stride, plan.a_stride, plan.b_stride};
  dispatch_any(dtype, "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_offsets<3>(plan.same, plan.ndim, plan.numel, plan.shape, strides, [&](auto ix) {
      constexpr auto kernel = where_kernel<T, decltype(ix)>;
      const unsigned grid = wave_grid<kernel>(c.sm_count, plan.numel, kThreads, kThreads);
      kernel<<<grid, kThreads, 0, c.stream>>>(static_cast<T *>(out), cond, static_cast<const T *>(a),
                                              static_cast<const T *>(b), plan.numel, ix);
      MT_CUDA_CHECK_LAUNCH("where");
    });
  });
}

void pow(Context &c, void *out, const void *a, const void *b, const BroadcastPlan &plan, DType dtype) {
  NvtxRange range("pow");
  check_plan("pow", plan.ndim, plan.numel, plan.shape, plan.same);
  if (plan.numel == 0) return;
  MT_CHECK(out && a && b, INVALID_ARGUMENT, "cuda pow: null buffer (out=%p, a=%p, b=%p)", out, a, b);
  const int64_t *const strides[2] = {plan.a_stride, plan.b_stride};
  dispatch_float(dtype, "pow", [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_offsets<2>(plan.same, plan.ndim, plan.numel, plan.shape, strides, [&](auto ix) {
      constexpr auto kernel = pow_kernel<T, decltype(ix)>;
      const unsigned grid = wave_grid<kernel>(c.sm_count, plan.numel, kThreads, kThreads);
      kernel<<<grid, kThreads, 0, c.stream>>>(static_cast<T *>(out), static_cast<const T *>(a),
                                              static_cast<const T *>(b), plan.numel, ix);
      MT_CUDA_CHECK_LAUNCH("pow");
    });
  });
}

}  // namespace cuda
}  // namespace mt
