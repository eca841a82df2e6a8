// kernel_utils.cuh - device helpers shared by the kernel files.
//
//   Compute<T>        arithmetic type of a storage type: double for F64, float otherwise
//   to_compute/from_compute, convert<D>(s)   dtype conversions (C-cast semantics)
//   Pack<T>, load128/store128               16-byte vector loads and stores
//   is_aligned16                            host-side alignment test for the vector paths
//   load128_cs/store128_cs                  the same with streaming cache hints (ld/st.global.cs)
//   Chunk<T, N>                             N elements as one 16-byte access, or one scalar (N = 1)
//   grid_of                                 a block count clamped to [1, INT_MAX]
//   block_tile, tiles_of                    the flat kernels' walk: one contiguous tile per block
//   PackPair, load_pack_pair                one or two operands' packs, loaded for block_tile
//   map_packs                               a flat map of one or two operands over block_tile
//   wave_grid                               grid-stride grid of one wave of resident blocks
//   ClusterLaunch, launch_cluster           a launch in thread-block clusters of K blocks (sm_90)
//   resident_blocks_per_sm, resident_clusters   occupancy answers, asked once per kernel and shape
//   allow_smem                              a kernel's opt-in to more than 48 KB of dynamic shared memory
//   pdl_enter, pdl_wait, pdl_release,
//   launch_pdl(_if, _wide), launch_pdl_smem_if   programmatic dependent launch (sm_90)
//   FastDivmod                              32-bit division by a runtime constant
//   cp_async16, cp_async4, cp_async_commit, cp_async_wait   asynchronous 16- and 4-byte copies global -> shared
//   mbar_init, mbar_arrive, mbar_arrive_expect_tx, mbar_wait   mbarriers in shared memory (sm_90)
//   warp_sum / block_sum                    deterministic shuffle reductions
//   quad_max / quad_sum                     over the 4 lanes of an mma C fragment's row
//   grid_sum_finish                         a grid's sum finished by its last block (a ticket)
//   dispatch_float / dispatch_any           DType -> C++ type for a generic lambda
//
// defines: the names above
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "backend/backend.h"
#include "backend/cuda/context.h"

namespace mt {
namespace cuda {

using half = __half;
using bf16 = __nv_bfloat16;

template <class T> struct TypeTag { using type = T; };

// ---- arithmetic type and conversions ------------------------------------------------

template <class T>
using Compute = typename std::conditional<std::is_same<T, double>::value, double, float>::type;

template <class T>
__device__ __forceinline__ Compute<T> to_compute(T x) {
  if constexpr (std::is_same<T, half>::value) return __half2float(x);
  else if constexpr (std::is_same<T, bf16>::value) return __bfloat162float(x);
  else return (Compute<T>)x;
}

template <class T, class C>
__device__ __forceinline__ T from_compute(C x) {
  if constexpr (std::is_same<T, half>::value) return __float2half_rn((float)x);
  else if constexpr (std::is_same<T, bf16>::value) return __float2bfloat16_rn((float)x);
  else return (T)x;
}

template <class T> constexpr bool is_floating_v =
    std::is_floating_point<T>::value || std::is_same<T, half>::value || std::is_same<T, bf16>::value;

// A float or double as int64 by mt_tensor_cast's rule: truncation toward zero, the ends of
// int64's range beyond it (cvt.rzi.s64 clamps), and NaN 0, which is tested first: the
// conversion alone gave INT64_MIN for NaN on an H200.
template <class F>
__device__ __forceinline__ int64_t float_to_int64(F v) {
  return v != v ? 0 : (int64_t)v;
}

// A C cast from S to D for every pair of storage types, matching the CPU reference:
// floats convert to integers through int64 (float_to_int64), and narrower integers keep the
// low bits: the rule mt_tensor_cast documents, which the CPU backend writes out (its own
// float_to_int64). Doubles and integers reach half/bf16 through float (as the CPU reference
// and PyTorch do).
template <class D, class S>
__device__ __forceinline__ D convert(S s) {
  if constexpr (std::is_same<D, S>::value) {
    return s;
  } else if constexpr (is_floating_v<S>) {
    if constexpr (std::is_same<S, double>::value) {
      if constexpr (std::is_same<D, half>::value) return __float2half_rn((float)s);
      else if constexpr (std::is_same<D, bf16>::value) return __float2bfloat16_rn((float)s);
      else if constexpr (std::is_floating_point<D>::value) return (D)s;
      else return (D)float_to_int64(s);
    } else {
      float f = to_compute(s);  // float, half, bf16 -> float is exact
      if constexpr (std::is_same<D, half>::value) return __float2half_rn(f);
      else if constexpr (std::is_same<D, bf16>::value) return __float2bfloat16_rn(f);
      else if constexpr (std::is_floating_point<D>::value) return (D)f;
      else return (D)float_to_int64(f);
    }
  } else {  // integer source
    if constexpr (std::is_same<D, half>::value) return __float2half_rn((float)(double)s);
    else if constexpr (std::is_same<D, bf16>::value) return __float2bfloat16_rn((float)(double)s);
    else return (D)s;
  }
}

// ---- 16-byte vectors ------------------------------------------------------------------

template <class T>
struct alignas(16) Pack {
  static constexpr int N = 16 / sizeof(T);
  T v[N];
};

template <class T>
__device__ __forceinline__ Pack<T> load128(const T *p) {
  int4 bits = *reinterpret_cast<const int4 *>(p);
  Pack<T> out;
  memcpy(&out, &bits, sizeof bits);
  return out;
}

template <class T>
__device__ __forceinline__ void store128(T *p, const Pack<T> &v) {
  int4 bits;
  memcpy(&bits, &v, sizeof bits);
  *reinterpret_cast<int4 *>(p) = bits;
}

// Streaming variants (evict-first: data touched once should not push reused lines out of
// L2 and L1); same layout rules as load128/store128.
template <class T>
__device__ __forceinline__ Pack<T> load128_cs(const T *p) {
  const int4 bits = __ldcs(reinterpret_cast<const int4 *>(p));
  Pack<T> out;
  memcpy(&out, &bits, sizeof bits);
  return out;
}

template <class T>
__device__ __forceinline__ void store128_cs(T *p, const Pack<T> &v) {
  int4 bits;
  memcpy(&bits, &v, sizeof bits);
  __stcs(reinterpret_cast<int4 *>(p), bits);
}

inline bool is_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// N consecutive elements moved as one 16-byte access (N the pack size) or one scalar (N = 1).
template <class T, int N>
struct Chunk {
  T v[N];
  __device__ __forceinline__ static Chunk load(const T *p) {
    Chunk c;
    if constexpr (N == 1) {
      c.v[0] = *p;
    } else {
      const Pack<T> q = load128(p);
#pragma unroll
      for (int j = 0; j < N; ++j) c.v[j] = q.v[j];
    }
    return c;
  }
  __device__ __forceinline__ void store(T *p) const {
    if constexpr (N == 1) {
      *p = v[0];
    } else {
      Pack<T> q;
#pragma unroll
      for (int j = 0; j < N; ++j) q.v[j] = v[j];
      store128(p, q);
    }
  }
};

// ---- cp.async ---------------------------------------------------------------------------
// 16 bytes global -> shared (sm_80+), asynchronously; when !valid nothing is read and the 16
// bytes are zero-filled. Groups: cp_async_commit closes the copies issued since the last one;
// cp_async_wait<N> returns once at most N groups of this thread are still in flight, after which
// the thread sees the bytes of the others (other threads need a barrier as well).
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid = true) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"((uint32_t)__cvta_generic_to_shared(dst)),
               "l"(src), "r"(valid ? 16 : 0));
}
// The same for 4 bytes (dst and src 4-byte aligned; cached in L1 as well, .ca).
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid = true) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"((uint32_t)__cvta_generic_to_shared(dst)),
               "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// ---- mbarriers -------------------------------------------------------------------------
// A barrier is a shared-memory address (cvta to shared). mbar_wait spins until the phase of
// `parity` (0 or 1) has completed; arrivals release and the wait acquires, so what a thread
// wrote before it arrived is visible after the wait.

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// An arrival on bar that also expects `bytes` more of asynchronous copies in this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// ---- grid sizing ----------------------------------------------------------------------

inline unsigned grid_of(int64_t blocks) {
  return (unsigned)std::min<int64_t>(std::max<int64_t>(blocks, 1), INT_MAX);
}

// The bandwidth-bound flat kernels' walk over `units` items (16-byte packs, usually): block b
// owns the tile of items [b * THREADS * UNROLL, (b + 1) * THREADS * UNROLL) and thread t of it
// the items base + u * THREADS (base = the tile's start + t), so a block reads and writes one
// contiguous run of memory. load(i) reads item i; every thread issues its UNROLL loads before
// the first finish(i, v), which computes and stores. The last tile is guarded item by item.
// Launch tiles_of(units, THREADS, UNROLL) blocks of THREADS threads. Measured on an H100
// (bw_study.py, relu over 64M f32): 256 threads x 2 packs ran at PyTorch's speed, 182 us, where
// spreading a thread's 4 packs a whole grid apart (one block per 1024 packs) ran 185 us; on an
// H200 one pack a thread ran 128.9 us against two packs' 133.8 us (PyTorch 129.8 us).
template <int THREADS, int UNROLL, class Load, class Finish>
__device__ __forceinline__ void block_tile(int64_t units, Load load, Finish finish) {
  using V = decltype(load(int64_t(0)));
  const int64_t base = (int64_t)blockIdx.x * (THREADS * UNROLL) + threadIdx.x;
  if (base + (UNROLL - 1) * THREADS < units) {
    V v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = load(base + u * THREADS);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) finish(base + u * THREADS, v[u]);
  } else {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t i = base + u * THREADS;
      if (i < units) finish(i, load(i));
    }
  }
}

// Pack p of a, and of b unless b is null (then y is a's pack again): block_tile's loads of a
// flat kernel over one or two operands.
template <class T>
struct PackPair {
  Pack<T> x, y;
};
template <class T>
__device__ __forceinline__ PackPair<T> load_pack_pair(const T *a, const T *b, int64_t p) {
  PackPair<T> v;
  v.x = load128(a + p * Pack<T>::N);
  v.y = b ? load128(b + p * Pack<T>::N) : v.x;
  return v;
}

// out[i] = f(a[i], b[i]) over n flat elements (b unread, f given a[i] twice, unless TWO), every
// pointer 16-byte aligned: 16-byte packs over block_tile's tiles, and the n % N elements after
// the last pack done by the first threads of block 0. In place (out == a or b) is safe: each
// element is read before it is written, by the same thread.
template <int THREADS, int UNROLL, bool TWO, class T, class F>
__device__ __forceinline__ void map_packs(T *out, const T *a, const T *b, int64_t n, F f) {
  constexpr int N = Pack<T>::N;
  using In = PackPair<T>;
  block_tile<THREADS, UNROLL>(
      n / N, [&](int64_t p) { return load_pack_pair<T>(a, TWO ? b : nullptr, p); },
      [&](int64_t p, const In &v) {
        Pack<T> r;
#pragma unroll
        for (int k = 0; k < N; ++k) r.v[k] = f(v.x.v[k], v.y.v[k]);
        store128(out + p * N, r);
      });
  const int64_t t = n / N * N + threadIdx.x;
  if (blockIdx.x == 0 && t < n) out[t] = f(a[t], TWO ? b[t] : a[t]);
}

inline unsigned tiles_of(int64_t units, int threads, int unroll) {
  const int64_t tile = (int64_t)threads * unroll;
  return grid_of((units + tile - 1) / tile);
}

// How many blocks of `threads` threads (a multiple of 32, at most 1024) of Kernel fit on one SM
// at once (registers and shared memory permitting); asked of the runtime once per kernel and
// block size, 1 if the runtime cannot say.
template <auto Kernel>
int resident_blocks_per_sm(int threads) {
  static std::atomic<int> known[1024 / 32 + 1];
  std::atomic<int> &slot = known[std::min(std::max(threads, 0), 1024) / 32];
  int b = slot.load(std::memory_order_relaxed);
  if (b == 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, Kernel, threads, 0) != cudaSuccess || b < 1) {
      (void)cudaGetLastError();
      b = 1;
    }
    slot.store(b, std::memory_order_relaxed);
  }
  return b;
}

// A launch configuration of `grid` blocks of `threads` threads in clusters of K (sm_90), with
// `smem` bytes of dynamic shared memory each, on `stream`. Not copyable: cfg points at attr.
struct ClusterLaunch {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1] = {};
  ClusterLaunch(unsigned grid, int threads, int K, size_t smem, cudaStream_t stream) {
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3((unsigned)threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)K;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  ClusterLaunch(const ClusterLaunch &) = delete;
  ClusterLaunch &operator=(const ClusterLaunch &) = delete;
};

// Lets Kernel take up to max_smem bytes of dynamic shared memory (beyond the default 48 KB),
// set once per kernel; false if the runtime refuses.
template <auto Kernel>
bool allow_smem(size_t max_smem) {
  static const bool ok = [max_smem] {
    if (cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)max_smem) == cudaSuccess)
      return true;
    (void)cudaGetLastError();
    return false;
  }();
  return ok;
}

// How many clusters of K blocks (K <= 8) of `threads` threads of Kernel, with `smem` bytes of
// dynamic shared memory each, the GPU holds at once (cudaOccupancyMaxActiveClusters), asked
// once per kernel, block size and K (a kernel asks with one smem per block size); 1 if the
// runtime cannot say.
template <auto Kernel>
int resident_clusters(int threads, int K, size_t smem = 0) {
  static std::atomic<int> known[1024 / 32 + 1][9];
  std::atomic<int> &slot = known[std::min(std::max(threads, 0), 1024) / 32][std::min(std::max(K, 0), 8)];
  int n = slot.load(std::memory_order_relaxed);
  if (n == 0) {
    ClusterLaunch cl((unsigned)K, threads, K, smem, nullptr);
    if (cudaOccupancyMaxActiveClusters(&n, Kernel, &cl.cfg) != cudaSuccess || n < 1) {
      (void)cudaGetLastError();
      n = 1;
    }
    slot.store(n, std::memory_order_relaxed);
  }
  return n;
}

// Blocks for a grid-stride kernel over `work` items, `per_block` items per block and
// pass: as many as the work needs, at most one full wave of resident blocks. Every
// block of a grid-stride loop does the same share of the work, so a grid of 1.3 waves
// would take two waves' time; one wave of resident blocks never waits.
template <auto Kernel>
unsigned wave_grid(int sm_count, int64_t work, int64_t per_block, int threads) {
  int64_t need = (work + per_block - 1) / per_block;
  const int64_t cap = (int64_t)sm_count * resident_blocks_per_sm<Kernel>(threads);
  if (need > cap) need = cap;
  return need < 1 ? 1u : (unsigned)need;
}

// Launches kernel<<<grid, threads, smem, stream>>>(args...) in clusters of K consecutive blocks
// (grid % K == 0, K <= 8, the portable cluster size; Hopper and later). Returns the launch status.
template <class... KArgs, class... Args>
cudaError_t launch_cluster(void (*kernel)(KArgs...), unsigned grid, int threads, int K, size_t smem,
                           cudaStream_t stream, Args &&...args) {
  ClusterLaunch cl(grid, threads, K, smem, stream);
  return cudaLaunchKernelEx(&cl.cfg, kernel, std::forward<Args>(args)...);
}

// Programmatic dependent launch (compute capability 9.0 and later). A kernel launched by
// launch_pdl may be scheduled while the kernel before it in the stream is still running, so the
// ~1 us between two dependent launches (a graph node's latency in a recorded training step of
// small kernels) partly overlaps. pdl_enter(), the first statement of every kernel that
// launch_pdl or launch_pdl_wide may launch, lets the next kernel be scheduled early in turn,
// then waits until the previous grid has completed and its writes are visible: nothing is read
// or written before that, so the ordering is a plain launch's. Outside such a launch it returns
// at once.
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// pdl_enter() in two halves, for compute-bound kernels: pdl_wait() first (nothing read or
// written before it), pdl_release() once the block's main loop is done. A dependent grid waiting
// in its own pdl_enter() or pdl_wait() is scheduled once every block of this one has released
// (or exited), so it waits through this grid's epilogue and last blocks only, not beside its
// main loop.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, c.stream>>>(args...), with the programmatic-serialization attribute
// when pdl is set. kernel must begin with pdl_enter() or pdl_wait(). Returns the launch status.
template <class... KArgs, class... Args>
cudaError_t launch_pdl_smem_if(bool pdl, const Context &c, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                               size_t smem, Args &&...args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = c.stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// kernel<<<grid, threads, 0, c.stream>>>(args...), with the programmatic-serialization attribute
// when pdl is set. kernel must begin with pdl_enter(). Returns the launch status.
template <class... KArgs, class... Args>
cudaError_t launch_pdl_if(bool pdl, const Context &c, void (*kernel)(KArgs...), dim3 grid, int threads,
                          Args &&...args) {
  return launch_pdl_smem_if(pdl, c, kernel, grid, dim3((unsigned)threads), 0, std::forward<Args>(args)...);
}

// kernel<<<grid, threads, 0, c.stream>>>(args...), with the programmatic-serialization attribute
// when c allows it (Context::pdl) and the grid is at most one block per SM (the kernels launched
// so were timed with it at small grids only). kernel must begin with pdl_enter(). Returns the
// launch status.
template <class... KArgs, class... Args>
cudaError_t launch_pdl(const Context &c, void (*kernel)(KArgs...), dim3 grid, int threads, Args &&...args) {
  const bool small = (uint64_t)grid.x * grid.y * grid.z <= (uint64_t)c.sm_count;
  return launch_pdl_if(c.pdl && small, c, kernel, grid, threads, std::forward<Args>(args)...);
}

// launch_pdl for a grid of any size: the flat elementwise map and the exact-fit softmax and
// LayerNorm row kernels (H100, run.py with and without MT_CUDA_NO_PDL: 0.4-3.6 us a call), the
// float32 attention, and (through launch_pdl_smem_if) the transformer-block fusions and the
// GEMM's split-K sum. A waiting dependent grid takes no place the running grid needs: it is
// launched only once every block of the running grid has begun (and run pdl_enter()), so its
// blocks fill the places the running grid's last wave leaves. The float32 GEMM was slower
// launched so and is launched plainly (gemm_f32.cu says why).
template <class... KArgs, class... Args>
cudaError_t launch_pdl_wide(const Context &c, void (*kernel)(KArgs...), dim3 grid, int threads, Args &&...args) {
  return launch_pdl_if(c.pdl, c, kernel, grid, threads, std::forward<Args>(args)...);
}

// ---- index math -----------------------------------------------------------------------

// n / d and n % d for 0 <= n < 2^31 with one multiply-high and a shift instead of a
// ~20-instruction integer division (the CUTLASS construction): for d > 1,
// p = 31 + ceil(log2 d), mul = ceil(2^p / d) < 2^32, and n / d == umulhi(n, mul) >> (p - 32).
struct FastDivmod {
  uint32_t d = 1, mul = 0, shift = 0;
  FastDivmod() = default;
  explicit FastDivmod(uint32_t divisor) : d(divisor) {
    if (d > 1) {
      uint32_t l = 0;
      while ((1ull << l) < d) ++l;
      uint32_t p = 31 + l;
      mul = (uint32_t)(((1ull << p) + d - 1) / d);
      shift = p - 32;
    }
  }
  __host__ __device__ __forceinline__ uint32_t div(uint32_t n) const {
#ifdef __CUDA_ARCH__
    return d == 1 ? n : (__umulhi(n, mul) >> shift);
#else
    return d == 1 ? n : (uint32_t)(((uint64_t)n * mul) >> 32) >> shift;
#endif
  }
  __host__ __device__ __forceinline__ void divmod(uint32_t n, uint32_t &q, uint32_t &r) const {
    q = div(n);
    r = n - q * d;
  }
};

// ---- reductions -----------------------------------------------------------------------

template <class A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;  // valid in lane 0
}

// Max and sum over the 4 lanes of a quad (lanes 4g .. 4g + 3, one row of an mma.sync C
// fragment), the result in each of them.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Sum over the block; the result is valid in thread 0. Fixed tree order, so the same
// launch gives the same bits every time. Ends with a barrier so it can be called again.
template <class A>
__device__ __forceinline__ A block_sum(A v) {
  __shared__ A partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nwarps ? partial[lane] : A(0);
    v = warp_sum(v);
  }
  __syncthreads();
  return v;
}

// The end of a one-launch grid sum. s: this block's sum (block_sum's result, valid in thread
// 0). A grid of one block calls finish(s) at once; otherwise each block writes its sum into
// partial[blockIdx.x] and takes a ticket, and the last block to arrive adds the partials in
// block order, calls finish(total) in thread 0 and resets *ticket to 0 for the next launch.
// The grid is fixed by the caller's shape and GPU, so a given input gives the same bits on
// every run. Launches that share a ticket must not overlap (the library's one stream).
template <class A, class Finish>
__device__ __forceinline__ void grid_sum_finish(A s, A *partial, unsigned int *ticket, Finish finish) {
  __shared__ bool last;
  if (gridDim.x == 1) {
    if (threadIdx.x == 0) finish(s);
    return;
  }
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = s;
    __threadfence();  // the partial is visible before the ticket says so
    last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  A v = 0;
  for (int64_t i = threadIdx.x; i < gridDim.x; i += blockDim.x) v += __ldcg(partial + i);
  v = block_sum(v);
  if (threadIdx.x == 0) {
    finish(v);
    *ticket = 0;
  }
}

// ---- dtype dispatch -------------------------------------------------------------------

// Calls fn(TypeTag<T>{}) for the floating dtypes; throws Error(DTYPE) naming `op` otherwise.
template <class Fn>
void dispatch_float(DType d, const char *op, Fn &&fn) {
  switch (d) {
    case DType::F32: fn(TypeTag<float>{}); return;
    case DType::F64: fn(TypeTag<double>{}); return;
    case DType::F16: fn(TypeTag<half>{}); return;
    case DType::BF16: fn(TypeTag<bf16>{}); return;
    default: break;
  }
  fail(Code::DTYPE, "cuda %s: dtype %s is not supported (float32, float64, float16, bfloat16 are)",
       op, dtype_name(d));
}

template <class Fn>
void dispatch_any(DType d, const char *op, Fn &&fn) {
  switch (d) {
    case DType::F32: fn(TypeTag<float>{}); return;
    case DType::F64: fn(TypeTag<double>{}); return;
    case DType::F16: fn(TypeTag<half>{}); return;
    case DType::BF16: fn(TypeTag<bf16>{}); return;
    case DType::I32: fn(TypeTag<int32_t>{}); return;
    case DType::I64: fn(TypeTag<int64_t>{}); return;
    case DType::U8: fn(TypeTag<uint8_t>{}); return;
  }
  fail(Code::DTYPE, "cuda %s: invalid dtype %d", op, (int)d);
}

}  // namespace cuda
}  // namespace mt
