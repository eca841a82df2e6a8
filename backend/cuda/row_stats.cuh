// row_stats.cuh - device helpers of the row-wise kernels (softmax.cu, classify.cu):
// math by compute type, the running (max, sum of exp) pair of a row, and reductions
// over a group of G lanes of one warp or over a whole block.
//
// The running pair follows the CPU reference's rules (backend/cpu/classify.cpp):
// the row max ignores NaN (std::fmax); a NaN element makes the sum NaN; when the max is
// +-inf the log-sum-exp is the max itself (the caller checks isinf(m) at the end, so
// whatever the sum became on the way does not matter then).
//
// Every reduction here is a fixed butterfly/tree: the same launch gives the same bits, and
// all lanes of a group (all threads of a block) end with the same value.
//
// defines: dexp, dlog, dmax, kNegInf, online_add, online_merge, group_max, group_sum,
//          group_merge, block_allmax, block_allsum, block_allmerge
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace mt {
namespace cuda {

__device__ __forceinline__ float dexp(float x) { return expf(x); }
__device__ __forceinline__ double dexp(double x) { return exp(x); }
__device__ __forceinline__ float dlog(float x) { return logf(x); }
__device__ __forceinline__ double dlog(double x) { return log(x); }
// NaN-ignoring maximum, as std::fmax in the CPU reference.
__device__ __forceinline__ float dmax(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double dmax(double a, double b) { return fmax(a, b); }

template <class A>
__device__ __forceinline__ A kNegInf() { return -INFINITY; }

// Adds element x to the running (m, s): m the largest non-NaN element so far (-inf when
// none), s = sum of exp(element - m). -inf elements add exp(-inf) = 0, also while m is
// still -inf (where x - m would be NaN); a NaN element makes s NaN for good.
template <class A>
__device__ __forceinline__ void online_add(A &m, A &s, A x) {
  if (x > m) {
    s = s * dexp(m - x) + A(1);  // m = -inf: s * 0 (NaN stays NaN)
    m = x;
  } else if (!(x == kNegInf<A>() && m == kNegInf<A>())) {
    s += dexp(x - m);
  }
}

// Merges (m2, s2) into (m, s). Commutative bit for bit, so butterfly partners agree.
template <class A>
__device__ __forceinline__ void online_merge(A &m, A &s, A m2, A s2) {
  const A mn = dmax(m, m2);
  if (mn == kNegInf<A>()) {
    s = s + s2;  // 0 or NaN
  } else {
    s = s * dexp(m - mn) + s2 * dexp(m2 - mn);  // a -inf side contributes s * 0
  }
  m = mn;
}

// Reductions over aligned groups of G lanes (G a power of two <= 32, runtime); every lane
// of the warp must call them (full mask).
template <class A>
__device__ __forceinline__ A group_max(A v, int G) {
  for (int o = G >> 1; o > 0; o >>= 1) v = dmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <class A>
__device__ __forceinline__ A group_sum(A v, int G) {
  for (int o = G >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <class A>
__device__ __forceinline__ void group_merge(A &m, A &s, int G) {
  for (int o = G >> 1; o > 0; o >>= 1) {
    const A m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const A s2 = __shfl_xor_sync(0xffffffffu, s, o);
    online_merge(m, s, m2, s2);
  }
}

// Whole-block reductions whose result every thread receives. blockDim.x is a multiple of
// 32; red is __shared__ scratch of 32 elements (64 for the merge). Every thread of the
// block must call them; they end with a barrier, so red can be reused at once.
template <class A>
__device__ __forceinline__ A block_allmax(A v, A *red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = group_max(v, 32);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = group_max(lane < nw ? red[lane] : kNegInf<A>(), 32);
  __syncthreads();
  return v;
}
template <class A>
__device__ __forceinline__ A block_allsum(A v, A *red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = group_sum(v, 32);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = group_sum(lane < nw ? red[lane] : A(0), 32);
  __syncthreads();
  return v;
}
template <class A>
__device__ __forceinline__ void block_allmerge(A &m, A &s, A *red /* [64] */) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  group_merge(m, s, 32);
  if (lane == 0) {
    red[warp] = m;
    red[32 + warp] = s;
  }
  __syncthreads();
  m = lane < nw ? red[lane] : kNegInf<A>();
  s = lane < nw ? red[32 + lane] : A(0);
  group_merge(m, s, 32);
  __syncthreads();
}

// Smallest power of two >= n (n >= 1, n <= 2^30).
inline int next_pow2(int64_t n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace cuda
}  // namespace mt
