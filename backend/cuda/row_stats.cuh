// row_stats.cuh - helpers of the row-wise kernels (softmax.cu, fused.cu, classify.cu):
// math by compute type, the running (max, sum of exp) pair of a row, reductions over a
// group of G lanes of one warp or over a whole block, and the host-side shapes of the
// register-cached row kernels (lanes per row, 16-byte packs per lane, block size).
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
//          group_merge, block_allmax, block_allsum, block_allmerge, cluster_allmax,
//          cluster_allsum, cluster_allsum2, cluster_share_pair, ClusterPush, slice_packs,
//          next_pow2, kCachedBlockThreads, kVecType, IntC, dispatch_pl, dispatch_fit, warp_shape,
//          block_shape, cluster_shape, vec_ok
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/kernel_utils.cuh"

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

// Reductions over a thread-block cluster (sm_90) whose result every thread of every block
// receives: a block reduction, then each block reads the K block values through distributed
// shared memory in rank order, so all blocks agree bit for bit. slot: a __shared__ A of this
// block, one per reduction of a kernel (a later reduction must not overwrite a slot another
// block may still read); after the last one the caller runs cluster sync before it exits.
template <class A>
__device__ __forceinline__ A cluster_allmax(A v, A *red, A *slot) {
  namespace cg = cooperative_groups;
  cg::cluster_group cl = cg::this_cluster();
  v = block_allmax(v, red);
  if (threadIdx.x == 0) *slot = v;
  cl.sync();
  A out = kNegInf<A>();
  for (unsigned r = 0; r < cl.num_blocks(); ++r) out = dmax(out, *cl.map_shared_rank(slot, r));
  return out;
}
template <class A>
__device__ __forceinline__ A cluster_allsum(A v, A *red, A *slot) {
  namespace cg = cooperative_groups;
  cg::cluster_group cl = cg::this_cluster();
  v = block_allsum(v, red);
  if (threadIdx.x == 0) *slot = v;
  cl.sync();
  A out = 0;
  for (unsigned r = 0; r < cl.num_blocks(); ++r) out += *cl.map_shared_rank(slot, r);
  return out;
}

// The one exchange of the (cluster, one exchange) kernels (softmax.cu, fused.cu): every thread
// holds its block's pair (a, b); threads 0..K-1 write it into pairs[2 rank], pairs[2 rank + 1] of
// block threadIdx.x of the cluster (K blocks; rank: this block's), then the cluster barrier.
// After it each block reads the K pairs from its own pairs (__shared__ A[2 K]) and no block
// reads another's memory, so none waits for the others before it exits.
template <class A>
__device__ __forceinline__ void cluster_share_pair(A a, A b, A *pairs, unsigned rank, unsigned K) {
  namespace cg = cooperative_groups;
  cg::cluster_group cl = cg::this_cluster();
  if (threadIdx.x < K) {
    A *dst = cl.map_shared_rank(pairs, threadIdx.x);
    dst[2 * rank] = a;
    dst[2 * rank + 1] = b;
  }
  cl.sync();
}

// The push exchange of cluster_share_pair without a cluster barrier's fences (sm_90): threads
// 0..K-1 write the block's pair into pairs[2 rank], pairs[2 rank + 1] of block threadIdx.x with
// st.async, each store completing 2 * sizeof(A) bytes on that block's mbarrier; every thread
// then waits for its own mbarrier's phase, which thread 0 armed for K pairs. So the exchange
// waits only for the K pairs, where barrier.cluster's release waits for every store the thread
// has in flight (the previous row's outputs). What the barrier also gave, that no block writes
// pairs another may still be reading, is the caller's: between two exchanges every thread of
// the cluster calls done() after reading pairs and the next exchange waits for all of them
// (barrier.cluster.arrive.relaxed / wait, split across the row's stores). Use: init() by all
// threads before the cluster's first barrier (which must order it before any push), then
// exchange(), done(), exchange(), done(), ..., finish().
template <class A>
struct ClusterPush {
  uint64_t *bar;  // __shared__, this block's
  unsigned rank, K, n = 0;

  __device__ __forceinline__ static unsigned smem_u32(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
  }
  __device__ __forceinline__ static unsigned remote(unsigned addr, unsigned block) {
    unsigned out;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(out) : "r"(addr), "r"(block));
    return out;
  }
  __device__ __forceinline__ void init() const {
    if (threadIdx.x == 0) {
      mbar_init(smem_u32(bar), 1);
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
  }
  __device__ __forceinline__ void exchange(A a, A b, A *pairs) {
    if (n > 0) asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    const unsigned mine = smem_u32(bar);
    if (threadIdx.x == 0) mbar_arrive_expect_tx(mine, (unsigned)(2 * sizeof(A)) * K);
    if (threadIdx.x < K) {
      const unsigned dst = remote(smem_u32(pairs + 2 * rank), threadIdx.x), dbar = remote(mine, threadIdx.x);
      if constexpr (sizeof(A) == 4)
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(dst),
                     "f"(a), "f"(b), "r"(dbar)
                     : "memory");
      else
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f64 [%0], {%1, %2}, [%3];" ::"r"(dst),
                     "d"(a), "d"(b), "r"(dbar)
                     : "memory");
    }
    mbar_wait(mine, n & 1);
    ++n;
  }
  __device__ __forceinline__ void done() const { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
  // No block exits while another may still push into it.
  __device__ __forceinline__ void finish() const {
    if (n > 0) asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
  }
};

// Two sums at once over the cluster, the same in every thread of every block, by one push
// exchange: each warp's by shuffles, the block's by threads 0..K-1 (each adds the warps' sums in
// warp order), which cluster_share_pair writes into every block's pairs; after the barrier each
// thread adds its own block's K pairs in rank order, so no block reads another's memory. red:
// __shared__ A[64]; pairs: __shared__ A[2 K] of this block under cluster_share_pair's rule (a
// caller that exchanges again before every block has read its pairs alternates two arrays). Every
// block of the cluster must have begun before the first call. Pulling the K sums from the other
// blocks after the barrier instead cost LayerNorm's cluster backward (8192 x 32768 f32, H200)
// 2.51 ms against 2.24 ms forward+backward. The push by ClusterPush instead (st.async, no
// barrier fences; red alternating between two arrays, as nothing else would keep a thread
// 0..K-1 from still reading it while another warp writes the next row's) gave the same: 2.25
// against 2.24 ms forward+backward (H200, one build), so the barrier stays.
template <class A>
__device__ __forceinline__ void cluster_allsum2(A &a, A &b, A *red, A *pairs) {
  namespace cg = cooperative_groups;
  cg::cluster_group cl = cg::this_cluster();
  const unsigned K = cl.num_blocks();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  a = group_sum(a, 32);
  b = group_sum(b, 32);
  if (lane == 0) {
    red[warp] = a;
    red[32 + warp] = b;
  }
  __syncthreads();
  A sa = 0, sb = 0;
  if (threadIdx.x < K) {
    for (int w = 0; w < nw; ++w) {
      sa += red[w];
      sb += red[32 + w];
    }
  }
  cluster_share_pair(sa, sb, pairs, cl.block_rank(), K);  // its barrier also lets red be reused
  a = b = A(0);
  for (unsigned r = 0; r < K; ++r) {
    a += pairs[2 * r];
    b += pairs[2 * r + 1];
  }
}

// f(k, p) for this thread's packs of a block's slice [p0, p1) in the split-row (cluster)
// kernels: p = p0 + threadIdx.x + k * blockDim.x for k < PL, those at or past p1 skipped.
template <int PL, class F>
__device__ __forceinline__ void slice_packs(int64_t p0, int64_t p1, F &&f) {
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    const int64_t p = p0 + threadIdx.x + (int64_t)k * blockDim.x;
    if (p < p1) f(k, p);
  }
}

// Smallest power of two >= n (n >= 1, n <= 2^30).
inline int next_pow2(int64_t n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// ---- shapes of the register-cached row kernels (host side) ---------------------------------

constexpr int kCachedBlockThreads = 1024;  // the largest block of the block-per-row cached kernels

// The 128-bit register-cached paths are built for the 2- and 4-byte types; float64 (the
// gradcheck dtype, not a speed path) takes the scalar kernels, which keeps the build smaller.
template <class T>
constexpr bool kVecType = sizeof(T) <= 4;

template <int V>
using IntC = std::integral_constant<int, V>;

// fn(IntC<pl>) for pl in {1, 2, 4, 8, 16} up to MaxPL (a compile-time packs-per-lane count).
template <int MaxPL, class Fn>
void dispatch_pl(int pl, Fn &&fn) {
  switch (pl) {
    case 1: fn(IntC<1>{}); return;
    case 2: if constexpr (MaxPL >= 2) { fn(IntC<2>{}); return; } break;
    case 4: if constexpr (MaxPL >= 4) { fn(IntC<4>{}); return; } break;
    case 8: if constexpr (MaxPL >= 8) { fn(IntC<8>{}); return; } break;
    case 16: if constexpr (MaxPL >= 16) { fn(IntC<16>{}); return; } break;
    default: break;
  }
  MT_ASSERT(!"packs per thread out of range");
}

// The exact-fit row kernels (softmax.cu, fused.cu): rows of exactly G lanes x PL packs with G
// and PL compile-time, for the shapes warp_shape gives with at least 4 packs per lane. Finds G
// and PL for `packs` and calls fn(IntC<G>, IntC<PL>); false (nothing called) when no fit
// kernel takes the row.
template <class Fn>
bool dispatch_fit(int64_t packs, Fn &&fn);

// Lanes per row G and packs per lane PL for a row of `packs` packs on the warp path
// (packs <= 32 * 32 / N): G * PL >= packs, G = 32 once a row needs more than one pack per lane.
// min_pl > 1 trades lanes for loads in flight: narrow rows then get fewer lanes, each holding
// min_pl packs (a 128-column f32 row: 8 lanes of 4 packs instead of 32 lanes of one).
inline void warp_shape(int64_t packs, int &G, int &PL, int min_pl = 1) {
  if (packs <= 32 * (int64_t)min_pl) {
    const int64_t need = next_pow2(packs);
    G = (int)std::max<int64_t>(1, need / min_pl);
    PL = (int)std::min<int64_t>(min_pl, need);
  } else {
    G = 32;
    PL = next_pow2((packs + 31) / 32);
  }
}

template <class Fn>
bool dispatch_fit(int64_t packs, Fn &&fn) {
  int G = 0, PL = 0;
  warp_shape(packs, G, PL, 4);
  if ((int64_t)G * PL != packs) return false;
  if (G == 8 && PL == 4) fn(IntC<8>{}, IntC<4>{});
  else if (G == 16 && PL == 4) fn(IntC<16>{}, IntC<4>{});
  else if (G == 32 && PL == 4) fn(IntC<32>{}, IntC<4>{});
  else if (G == 32 && PL == 8) fn(IntC<32>{}, IntC<8>{});
  else return false;
  return true;
}

// Packs per thread and threads for the register-cached block path: the fewest packs per
// thread (PL <= max_pl) that fit `max_threads` threads; threads a multiple of 32. False when
// the row does not fit.
inline bool block_shape(int64_t packs, int max_pl, int &PL, int &threads, int max_threads = kCachedBlockThreads) {
  for (PL = 1; PL <= max_pl; PL <<= 1) {
    if (packs <= (int64_t)max_threads * PL) {
      const int64_t t = (packs + PL - 1) / PL;
      threads = (int)((t + 31) / 32 * 32);
      return true;
    }
  }
  return false;
}

// A cluster split-row launch (sm_90): K blocks per row, block `rank` holding the `slice` packs
// [rank * slice, (rank + 1) * slice) of it, PL per thread in `threads` threads (block_shape of
// the slice). False when the slice does not fit.
inline bool cluster_shape(int64_t packs, int K, int max_pl, int max_threads, int64_t &slice, int &PL, int &threads) {
  slice = (packs + K - 1) / K;
  return block_shape(slice, max_pl, PL, threads, max_threads);
}

// Whether the 16-byte paths can take rows of `cols` elements of T at these pointers (a null
// pointer counts as aligned: absent gamma / beta).
template <class T>
bool vec_ok(int64_t cols, std::initializer_list<const void *> ptrs) {
  if constexpr (!kVecType<T>) {
    return false;
  } else {
    if (cols % Pack<T>::N != 0) return false;
    for (const void *p : ptrs)
      if (!is_aligned16(p)) return false;
    return true;
  }
}

}  // namespace cuda
}  // namespace mt
