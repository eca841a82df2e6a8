// softmax.cu - softmax / log_softmax along the last dim, forward and backward, and the
// softmax study (the variants side by side, timed by scripts/bench/softmax_study.py).
//
//   forward:  y (rows, cols) = softmax(x (rows, cols)) along cols, or log_softmax
//   backward: dx (written) from y and dy, all (rows, cols):
//               softmax:      dx = y * (dy - sum_c(dy * y))
//               log_softmax:  dx = dy - exp(y) * sum_c(dy)        (y holds log-probabilities)
//
// Semantics are those of backend/cpu/classify.cpp: m = the row max ignoring NaN; when m is
// +-inf the log-sum-exp is m itself (a row holding +inf gives NaN there and 0 elsewhere; an
// all -inf row gives NaN); otherwise y = exp(x - m) / s with s = sum exp(x - m), and a NaN
// anywhere in the row makes the whole row NaN. Logits of +-1000 stay finite (x - m <= 0).
// Computation is in float for F32/F16/BF16, in double for F64.
//
// Napkin math: the forward reads and writes rows*cols elements (8 B per element in f32) for
// ~4 flops and one exp: bandwidth bound. 65536 x 1024 f32 moves 512 MB: 0.17 ms at the H100's
// 2.98 TB/s copy rate; 8192 x 32768 f32 moves 2 GB: 0.72 ms. The backward reads two arrays
// and writes one (12 B per element in f32). The exp is no limit: ~4 T/s of MUFU throughput
// against 0.75 T elements/s at the copy rate.
//
// The study (variant numbers as mt_study_softmax takes them):
//   (1) softmax_naive_kernel        one thread per row, three passes over the row; neighbouring
//                                   threads are cols elements apart, so nothing coalesces
//   (2) softmax_warp_online_kernel  a warp per row, lanes strided (coalesced); the online
//                                   (max, sum) pair in one read pass, merged with shuffles; a
//                                   second read pass writes y
//   (3) softmax_block_online_kernel a block per row for wide rows: the same online pair,
//                                   merged through shared memory; a second read pass writes y
//   (4) softmax_vec_warp_kernel /   128-bit loads and stores, and the row kept in registers
//       softmax_vec_block_kernel    between the reductions, so x is read from DRAM once:
//                                   G lanes per row for cols <= 1024 (G < 32 packs several
//                                   rows into a warp), a block per row up to 32768 columns
//                                   (1024 threads x 8 float4); wider rows fall back to (3)
//                                   with 128-bit accesses
//   study variants 6-10 (mt_study_softmax / mt_study_log_softmax, timed by scripts/bench/bw_study.py):
//   6, 7 (4a) with at least 2 / 4 packs per lane and, in float32 softmax, exp(x - m) kept in the
//        registers for the write (one exp per element)
//   8    softmax_fit_warp_kernel (fit): (4a) for rows of exactly G x PL packs with G, PL
//        compile-time: ptxas -v (sm_90, f32) 47 registers at 32 x 8 packs (1024 columns) against
//        80 for (4a), 31 at 8 x 4 (128 columns) against 44: 5 and 8 resident blocks per SM
//        instead of 3 and 5
//   9,10 softmax_cluster_kernel (cluster): a cluster of 8 / 4 blocks per row (sm_90), row slices in
//        registers, the max and sum reduced through distributed shared memory; one DRAM read
//        and many rows in flight (wide rows: 40 registers at 32768 f32 columns, K = 8)
//   11,12 softmax_cluster1_kernel (cluster, one exchange): (cluster) of 4 / 8 blocks for rows of
//        exactly K x 256 threads x PL packs, each block's (max, sum of exp) pair pushed to every
//        block of the cluster: one cluster barrier per row instead of three
// (1)-(3) take float / __half / __nv_bfloat16 / double storage, (4) the 2- and 4-byte types
// (float64 is the gradcheck dtype, not a speed path: it takes (2) and (3)).
//
// Production (softmax(), variant 0) takes per shape, when cols % (16 / sizeof(T)) == 0 and x, y
// are 16-byte aligned: (fit) where the row is exactly G x PL packs (up to 1024 columns); on
// Hopper, from 32768 columns, (cluster, one exchange) of 4 blocks in float32 where the row fits
// it exactly, else (cluster) of 4; otherwise (5) for rows of 32 to 256 packs (128..1024 f32) and
// of 32768 columns or more, (4) between (narrower rows lose lanes under (5): 65536 x 32 fell
// from 1.21x to 0.68x of PyTorch); else (2) for cols <= 1024 and (3) above. (5) is (4) with 4
// packs in flight per lane on narrow rows and, on the widest, (3) with 128-bit accesses: one
// row per 512-thread block, x re-read from L2. The (fit) launch may overlap the kernel before
// it (programmatic dependent launch, any grid size). The backward holds y and dy in registers up
// to 16384 columns (two arrays): rows of up to 2 packs a lane a warp (or less) each in 64-thread
// blocks, wider rows a block each of one pack a thread (up to 256 threads, then more packs); the
// warp rows of 8 packs a lane held 16 warps an SM and reached 78% of copy bandwidth at 65536 x
// 1024 f32, the block rows 105% (H200). On Hopper, from 16384 columns, rows of exactly 4 (else 8)
// blocks x 256 threads x 1, 2, 4 or 8 packs take (cluster, one exchange) of the backward: y and dy
// read once, one cluster barrier a row (101-106% of copy bandwidth at 16384-65536 f32 columns
// against 61-79% for the block rows and (cluster), H200); log_softmax in a 2-byte type takes the
// rows kernel below 32768 columns instead (97% against 83-84% at 16384). Other rows above 16384
// columns: softmax splits a row over (cluster) of 4 or 8 blocks; log_softmax, whose first pass
// reads only dy, and other GPUs take a warp or block per row reading them twice (the second read
// mostly from L2).
// Study variants of mt_study_softmax_backward (scripts/bench/bw_study.py --ops softmax_bwd).
//
// causal_softmax (the composed attention's mask and softmax): a warp per row reading only the
// visible columns; rows of up to 32 x 8 packs held in registers (cached), wider or unaligned
// rows through the online pair.
//
// Contents: study hook doc | row normalisation | forward kernels (1)-(4), causal, fit, cluster | backward kernels |
//           dispatch | launchers | mt_study_softmax, mt_study_log_softmax, mt_study_softmax_backward
#include <algorithm>
#include <climits>
#include <initializer_list>
#include <type_traits>

#include "minitorch.h"  // MT_API
#include "backend/cuda/classify.h"
#include "backend/cuda/context.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/row_stats.cuh"
#include "backend/cuda/study.cuh"

namespace mt {
namespace cuda {

namespace {

constexpr int kRowThreads = 256;        // blocks of the warp-per-row kernels
constexpr int kBlockThreads = 512;      // blocks of the non-cached block-per-row kernels
constexpr int64_t kWarpMaxCols = 1024;  // rows up to this width get a warp (or less) each
// Widest rows the register-cached block kernels take (elements); past these the registers
// spill (the backward holds two arrays). 1024 threads x 8 float4 packs = 32768 floats.
constexpr int64_t kFwdCachedMaxCols = 32768;
constexpr int64_t kBwdCachedMaxCols = 16384;
// log_softmax's backward in a 2-byte type takes the rows kernel from kBwdCachedMaxCols columns
// up to rows of this many bytes.
constexpr int64_t kBwdLogRowsMaxBytes = 16384 * 4;
// The backward's warp rows take up to 2 packs a lane, in blocks of kBwdWarpBlockThreads; rows of
// kBwdBlockRowsFromPL packs a lane or more (up to kWarpMaxCols) get a block of at most
// kBwdRowBlockThreads threads.
constexpr int kBwdBlockRowsFromPL = 4;
constexpr int kBwdWarpBlockThreads = 64;
constexpr int kBwdRowBlockThreads = 256;

// ---- row normalisation --------------------------------------------------------------------

// From a row's (m, s) to its outputs: y = exp(x - m) / s, log y = (x - m) - log s; when m is
// +-inf the CPU's lse = m rule holds (s taken as 1).
template <class A>
struct Norm {
  A m, inv_s, log_s;
  __device__ __forceinline__ Norm(A m_, A s) : m(m_) {
    if (isinf(m_)) {
      inv_s = A(1);
      log_s = A(0);
    } else {
      inv_s = A(1) / s;
      log_s = dlog(s);
    }
  }
  template <bool LOG>
  __device__ __forceinline__ A apply(A x) const {
    if constexpr (LOG) return (x - m) - log_s;
    else return dexp(x - m) * inv_s;
  }
};

// ---- forward kernels ----------------------------------------------------------------------

// (1) naive: one thread per row, three passes (max, sum, write); uncoalesced.
template <class T, bool LOG>
__global__ void __launch_bounds__(128) softmax_naive_kernel(T *y, const T *x, int64_t rows, int64_t cols) {
  using A = Compute<T>;
  for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
    const T *xr = x + r * cols;
    T *yr = y + r * cols;
    A m = kNegInf<A>();
    for (int64_t c = 0; c < cols; ++c) m = dmax(m, to_compute(xr[c]));
    A s = 0;
    for (int64_t c = 0; c < cols; ++c) s += dexp(to_compute(xr[c]) - m);  // m = -inf: Norm ignores s
    const Norm<A> f(m, s);
    for (int64_t c = 0; c < cols; ++c) yr[c] = from_compute<T>(f.template apply<LOG>(to_compute(xr[c])));
  }
}

// (2) warp per row: lanes strided over the row, online (max, sum) in one read, shuffles merge.
template <class T, bool LOG>
__global__ void __launch_bounds__(kRowThreads) softmax_warp_online_kernel(T *y, const T *x, int64_t rows,
                                                                          int64_t cols) {
  using A = Compute<T>;
  const int lane = threadIdx.x & 31;
  const int64_t per_block = blockDim.x >> 5;
  for (int64_t r = (int64_t)blockIdx.x * per_block + (threadIdx.x >> 5); r < rows; r += (int64_t)gridDim.x * per_block) {
    const T *xr = x + r * cols;
    T *yr = y + r * cols;
    A m = kNegInf<A>(), s = 0;
#pragma unroll 4
    for (int64_t c = lane; c < cols; c += 32) online_add(m, s, to_compute(xr[c]));
    group_merge(m, s, 32);
    const Norm<A> f(m, s);
    for (int64_t c = lane; c < cols; c += 32) yr[c] = from_compute<T>(f.template apply<LOG>(to_compute(xr[c])));
  }
}

// (causal) causal_softmax: a warp per row of [rows, cols], row r the query r % t: the online pair
// over the visible columns j <= r % t + offset only (the masked ones are never read), merged by
// shuffles, then the visible columns normalised and the rest written as 0. VEC: 16-byte packs
// (cols % N == 0, x and y 16-byte aligned); a pack straddling the edge is read whole and its
// masked elements written as 0.
template <class T, bool VEC>
__global__ void __launch_bounds__(kRowThreads) causal_softmax_kernel(T *y, const T *x, int64_t rows, int64_t cols,
                                                                     int64_t t, int64_t offset) {
  using A = Compute<T>;
  constexpr int N = VEC ? Pack<T>::N : 1;
  const int lane = threadIdx.x & 31;
  const int64_t per_block = blockDim.x >> 5;
  for (int64_t r = (int64_t)blockIdx.x * per_block + (threadIdx.x >> 5); r < rows; r += (int64_t)gridDim.x * per_block) {
    const int64_t vis = min(cols, r % t + offset + 1);
    const T *xr = x + r * cols;
    T *yr = y + r * cols;
    A m = kNegInf<A>(), s = 0;
    for (int64_t c = (int64_t)lane * N; c < vis; c += 32 * N) {
      if constexpr (VEC) {
        const Pack<T> v = load128(xr + c);
#pragma unroll
        for (int j = 0; j < N; ++j)
          if (c + j < vis) online_add(m, s, to_compute(v.v[j]));
      } else {
        online_add(m, s, to_compute(xr[c]));
      }
    }
    group_merge(m, s, 32);
    const Norm<A> f(m, s);
    for (int64_t c = (int64_t)lane * N; c < cols; c += 32 * N) {
      if constexpr (VEC) {
        Pack<T> o;
        if (c < vis) {
          const Pack<T> v = load128(xr + c);
#pragma unroll
          for (int j = 0; j < N; ++j)
            o.v[j] = c + j < vis ? from_compute<T>(f.template apply<false>(to_compute(v.v[j]))) : from_compute<T>(A(0));
        } else {
#pragma unroll
          for (int j = 0; j < N; ++j) o.v[j] = from_compute<T>(A(0));
        }
        store128(yr + c, o);
      } else {
        yr[c] = c < vis ? from_compute<T>(f.template apply<false>(to_compute(xr[c]))) : from_compute<T>(A(0));
      }
    }
  }
}

// (causal, cached) the same for rows of at most 32 x PL packs held in registers (cols % N == 0,
// 16-byte aligned): the visible elements' max, then exp(x - max) kept for the write, one read of
// the visible columns and no online rescaling. A warp per row.
template <class T, int PL>
__global__ void __launch_bounds__(kRowThreads) causal_softmax_cached_kernel(T *y, const T *x, int64_t rows,
                                                                            int64_t cols, int64_t t,
                                                                            int64_t offset) {
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  const int lane = threadIdx.x & 31;
  const int64_t r = (int64_t)blockIdx.x * (kRowThreads / 32) + (threadIdx.x >> 5);
  if (r >= rows) return;  // warp-uniform
  const int64_t vis = min(cols, r % t + offset + 1);
  const T *xr = x + r * cols;
  T *yr = y + r * cols;
  A v[PL][N];
  A m = kNegInf<A>();
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    const int64_t c = (int64_t)(lane + k * 32) * N;
    if (c < vis) {
      const Pack<T> p = load128(xr + c);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        v[k][j] = c + j < vis ? to_compute(p.v[j]) : kNegInf<A>();
        m = dmax(m, v[k][j]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < N; ++j) v[k][j] = kNegInf<A>();
    }
  }
  m = group_max(m, 32);
  A s = 0;
#pragma unroll
  for (int k = 0; k < PL; ++k)
#pragma unroll
    for (int j = 0; j < N; ++j) {
      v[k][j] = v[k][j] == kNegInf<A>() ? A(0) : dexp(v[k][j] - m);  // masked: 0
      s += v[k][j];
    }
  s = group_sum(s, 32);
  const A inv = A(1) / s;
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    const int64_t c = (int64_t)(lane + k * 32) * N;
    if (c < cols) {
      Pack<T> o;
#pragma unroll
      for (int j = 0; j < N; ++j) o.v[j] = from_compute<T>(v[k][j] * inv);
      store128(yr + c, o);
    }
  }
}

// (3) block per row: the online pair per thread, merged through shared memory. VEC: 128-bit
// loads and stores (cols % N == 0, x and y 16-byte aligned).
template <class T, bool LOG, bool VEC>
__global__ void __launch_bounds__(kBlockThreads) softmax_block_online_kernel(T *y, const T *x, int64_t rows,
                                                                             int64_t cols) {
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  __shared__ A red[64];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // uniform across the block
    const T *xr = x + r * cols;
    T *yr = y + r * cols;
    A m = kNegInf<A>(), s = 0;
    if constexpr (VEC) {
      for (int64_t p = threadIdx.x; p < cols / N; p += blockDim.x) {
        const Pack<T> v = load128(xr + p * N);
#pragma unroll
        for (int j = 0; j < N; ++j) online_add(m, s, to_compute(v.v[j]));
      }
    } else {
#pragma unroll 4
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) online_add(m, s, to_compute(xr[c]));
    }
    block_allmerge(m, s, red);
    const Norm<A> f(m, s);
    if constexpr (VEC) {
      for (int64_t p = threadIdx.x; p < cols / N; p += blockDim.x) {
        Pack<T> v = load128(xr + p * N);
#pragma unroll
        for (int j = 0; j < N; ++j) v.v[j] = from_compute<T>(f.template apply<LOG>(to_compute(v.v[j])));
        store128(yr + p * N, v);
      }
    } else {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = from_compute<T>(f.template apply<LOG>(to_compute(xr[c])));
    }
  }
}

// (4a) G lanes per row (G a power of two <= 32, G * PL * N >= cols, cols % N == 0), the row
// in registers as PL 16-byte packs per lane: one read of x, two shuffle reductions, one write.
// KEEP (study variants 6, 7): for float32 softmax, exp(x - m) of the sum pass overwrites x in
// the registers and the write only scales it (one exp per element instead of two).
template <class T, bool LOG, int PL, bool KEEP = false>
__global__ void __launch_bounds__(kRowThreads) softmax_vec_warp_kernel(T *y, const T *x, int64_t rows, int64_t cols,
                                                                       int G) {
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  const int64_t packs = cols / N;
  const int sub = threadIdx.x & (G - 1);
  const int64_t per_block = blockDim.x / G;
  // base is uniform across the block, so every lane reaches the shuffles
  for (int64_t base = (int64_t)blockIdx.x * per_block; base < rows; base += (int64_t)gridDim.x * per_block) {
    const int64_t r = base + threadIdx.x / G;
    const bool valid = r < rows;
    Pack<T> v[PL];
    A m = kNegInf<A>();
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      const int64_t p = sub + (int64_t)k * G;
      if (valid && p < packs) {
        v[k] = load128(x + r * cols + p * N);
#pragma unroll
        for (int j = 0; j < N; ++j) m = dmax(m, to_compute(v[k].v[j]));
      }
    }
    m = group_max(m, G);
    constexpr bool kKeep = KEEP && !LOG && std::is_same<T, A>::value;  // exp stored over x: f32 only
    A s = 0;
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      const int64_t p = sub + (int64_t)k * G;
      if (valid && p < packs) {
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const A t = dexp(to_compute(v[k].v[j]) - m);
          if constexpr (kKeep) v[k].v[j] = t;
          s += t;
        }
      }
    }
    s = group_sum(s, G);
    const Norm<A> f(m, s);
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      const int64_t p = sub + (int64_t)k * G;
      if (valid && p < packs) {
        Pack<T> o;
#pragma unroll
        for (int j = 0; j < N; ++j) {
          if constexpr (kKeep) o.v[j] = v[k].v[j] * f.inv_s;  // Norm::apply without the exp
          else o.v[j] = from_compute<T>(f.template apply<LOG>(to_compute(v[k].v[j])));
        }
        store128(y + r * cols + p * N, o);
      }
    }
  }
}

// (4b) a block per row (blockDim * PL * N >= cols, cols % N == 0), PL packs per thread in registers.
template <class T, bool LOG, int PL>
__global__ void __launch_bounds__(kCachedBlockThreads) softmax_vec_block_kernel(T *y, const T *x, int64_t rows,
                                                                             int64_t cols) {
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  __shared__ A red[32];
  const int64_t packs = cols / N;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * cols;
    T *yr = y + r * cols;
    Pack<T> v[PL];
    A m = kNegInf<A>();
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      const int64_t p = threadIdx.x + (int64_t)k * blockDim.x;
      if (p < packs) {
        v[k] = load128(xr + p * N);
#pragma unroll
        for (int j = 0; j < N; ++j) m = dmax(m, to_compute(v[k].v[j]));
      }
    }
    m = block_allmax(m, red);
    A s = 0;
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      const int64_t p = threadIdx.x + (int64_t)k * blockDim.x;
      if (p < packs) {
#pragma unroll
        for (int j = 0; j < N; ++j) s += dexp(to_compute(v[k].v[j]) - m);
      }
    }
    s = block_allsum(s, red);
    const Norm<A> f(m, s);
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      const int64_t p = threadIdx.x + (int64_t)k * blockDim.x;
      if (p < packs) {
        Pack<T> o;
#pragma unroll
        for (int j = 0; j < N; ++j) o.v[j] = from_compute<T>(f.template apply<LOG>(to_compute(v[k].v[j])));
        store128(yr + p * N, o);
      }
    }
  }
}

// (fit) exact fit (study variant 8): (4a) for rows of exactly G * PL packs with G and PL compile-time
// constants: no per-pack bounds, pack addresses at constant offsets from one base (ptxas keeps
// one 64-bit address instead of PL), no grid-stride loop, exp kept for float32 softmax. Fewer
// registers per row held (96 -> see the study's notes) means more rows in flight per SM.
template <class T, bool LOG, int PL, int G>
__global__ void __launch_bounds__(kRowThreads) softmax_fit_warp_kernel(T *y, const T *x, int64_t rows) {
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  constexpr int64_t kCols = (int64_t)G * PL * N;
  constexpr int kPerBlock = kRowThreads / G;
  pdl_enter();
  const int64_t r = (int64_t)blockIdx.x * kPerBlock + threadIdx.x / G;
  const bool valid = r < rows;  // lanes past the end still take part in the shuffles
  const int64_t off = r * kCols + (threadIdx.x % G) * N;
  Pack<T> v[PL];
  A m = kNegInf<A>();
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    if (valid) {
      v[k] = load128(x + off + k * G * N);
#pragma unroll
      for (int j = 0; j < N; ++j) m = dmax(m, to_compute(v[k].v[j]));
    }
  }
  m = group_max(m, G);
  constexpr bool kKeep = !LOG && std::is_same<T, A>::value;
  A s = 0;
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    if (valid) {
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const A t = dexp(to_compute(v[k].v[j]) - m);
        if constexpr (kKeep) v[k].v[j] = t;
        s += t;
      }
    }
  }
  s = group_sum(s, G);
  const Norm<A> f(m, s);
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    if (valid) {
      Pack<T> o;
#pragma unroll
      for (int j = 0; j < N; ++j) {
        if constexpr (kKeep) o.v[j] = v[k].v[j] * f.inv_s;
        else o.v[j] = from_compute<T>(f.template apply<LOG>(to_compute(v[k].v[j])));
      }
      store128(y + off + k * G * N, o);
    }
  }
}

// (cluster) split-row over a thread-block cluster (sm_90; study variants 9, 10): a cluster of K blocks per row, block
// `rank` holding packs [rank * slice, (rank + 1) * slice) of the row in registers, PL per thread;
// the max and the sum of exp are reduced over the cluster through distributed shared memory.
// x is read from DRAM once, and with a K-th of a row per block (a 32768-column f32 row: 8 blocks
// of 256 threads x 4 packs) many rows are in flight per SM, where (4b) held one 128 KB row per
// 1024-thread block and stalled the SM at each barrier. Grid: rows * K blocks, one row per cluster.
template <class T, bool LOG, int PL>
__global__ void __launch_bounds__(kRowThreads) softmax_cluster_kernel(T *y, const T *x, int64_t cols,
                                                                      int64_t slice) {
  namespace cg = cooperative_groups;
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  __shared__ A red[32];
  __shared__ A slot[2];
  cg::cluster_group cl = cg::this_cluster();
  const int64_t r = blockIdx.x / cl.num_blocks();
  const int64_t p0 = (int64_t)cl.block_rank() * slice;
  const int64_t p1 = min(p0 + slice, cols / N);
  const T *xr = x + r * cols;
  T *yr = y + r * cols;
  Pack<T> v[PL];
  A m = kNegInf<A>();
  slice_packs<PL>(p0, p1, [&](int k, int64_t p) {
    v[k] = load128(xr + p * N);
#pragma unroll
    for (int j = 0; j < N; ++j) m = dmax(m, to_compute(v[k].v[j]));
  });
  m = cluster_allmax(m, red, &slot[0]);
  constexpr bool kKeep = !LOG && std::is_same<T, A>::value;  // exp stored over x: f32 only
  A s = 0;
  slice_packs<PL>(p0, p1, [&](int k, int64_t p) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const A t = dexp(to_compute(v[k].v[j]) - m);
      if constexpr (kKeep) v[k].v[j] = t;
      s += t;
    }
  });
  s = cluster_allsum(s, red, &slot[1]);
  const Norm<A> f(m, s);
  slice_packs<PL>(p0, p1, [&](int k, int64_t p) {
    Pack<T> o;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if constexpr (kKeep) o.v[j] = v[k].v[j] * f.inv_s;
      else o.v[j] = from_compute<T>(f.template apply<LOG>(to_compute(v[k].v[j])));
    }
    store128(yr + p * N, o);
  });
  cl.sync();  // no block leaves while another may still read its slots
}

// (cluster, one exchange) study variants 11, 12: the cluster kernel with one cluster barrier per
// row instead of three, for rows of exactly K blocks x kRowThreads x PL packs (no bounds: one base
// address and constant offsets, as (fit)). Each block takes the max m_b of its own slice (a block
// reduction), sums exp(x - m_b) over it, and pushes the pair (m_b, s_b) into the shared memory
// of every block of the cluster; after the one barrier each block reads the K pairs from its own
// shared memory in rank order, so all agree on M = max m_r and S = sum s_r exp(m_r - M) bit for
// bit, and no block reads another's memory after the barrier (none waits for the others before
// it exits). float32 softmax keeps exp(x - m_b) and writes it times exp(m_b - M) / S. A slice of
// only -inf and NaN takes 0 for m_b in its exps (0, or NaN) and adds nothing to S but its NaN;
// when M is +inf only the slices holding +inf keep their exps (exp(x - inf): NaN at +inf, 0
// elsewhere), and when M is -inf the row is NaN: the row rules of Norm. ptxas -v (sm_90, f32, 8
// packs a thread): 54 registers unbounded, 48 (no spills) under the bound of 5 blocks per SM,
// the old cluster kernel's count.
template <class T, bool LOG, int PL>
__global__ void __launch_bounds__(kRowThreads, sizeof(T) == 4 ? (PL <= 4 ? 6 : 5) : (PL <= 4 ? 3 : 2))
    softmax_cluster1_kernel(T *y, const T *x, int64_t cols) {
  namespace cg = cooperative_groups;
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  constexpr int kMaxK = 8;
  constexpr int kStep = kRowThreads * N;  // elements between a thread's packs
  __shared__ A red[32];
  __shared__ A pairs[2 * kMaxK];  // (m_r, s_r) of block r of the cluster, written by block r
  cg::cluster_group cl = cg::this_cluster();
  const unsigned K = cl.num_blocks(), rank = cl.block_rank();
  const int64_t off = (blockIdx.x / K) * cols + ((int64_t)rank * PL * kRowThreads + threadIdx.x) * N;
  Pack<T> v[PL];
  A m = kNegInf<A>();
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    v[k] = load128(x + off + k * kStep);
#pragma unroll
    for (int j = 0; j < N; ++j) m = dmax(m, to_compute(v[k].v[j]));
  }
  m = block_allmax(m, red);
  const A mb = m == kNegInf<A>() ? A(0) : m;
  constexpr bool kKeep = !LOG && std::is_same<T, A>::value;  // exp stored over x: f32 only
  A s = 0;
#pragma unroll
  for (int k = 0; k < PL; ++k) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const A t = dexp(to_compute(v[k].v[j]) - mb);
      if constexpr (kKeep) v[k].v[j] = t;
      s += t;
    }
  }
  s = block_allsum(s, red);
  cluster_share_pair(m, s, pairs, rank, K);
  A M = kNegInf<A>();
#pragma unroll 1
  for (unsigned q = 0; q < K; ++q) M = dmax(M, pairs[2 * q]);
  A S = 0;
  if (!isinf(M)) {
#pragma unroll 1
    for (unsigned q = 0; q < K; ++q) S += pairs[2 * q + 1] * dexp(pairs[2 * q] - M);
  }
  const Norm<A> f(M, S);
  A scale = A(0);
  if constexpr (kKeep) {
    if (!isinf(M)) scale = dexp(m - M) * f.inv_s;
    else if (M > A(0)) scale = m == M ? A(1) : A(0);
    else scale = A(NAN);
  }
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    Pack<T> o;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if constexpr (kKeep) o.v[j] = v[k].v[j] * scale;
      else o.v[j] = from_compute<T>(f.template apply<LOG>(to_compute(v[k].v[j])));
    }
    store128(y + off + k * kStep, o);
  }
}

// ---- backward kernels ---------------------------------------------------------------------

// The row sum's term and the output: softmax sums dy * y, log_softmax sums dy.
template <bool LOG, class A>
__device__ __forceinline__ A bwd_term(A y, A dy) {
  if constexpr (LOG) return dy;
  else return dy * y;
}
template <bool LOG, class A>
__device__ __forceinline__ A bwd_out(A y, A dy, A sum) {
  if constexpr (LOG) return dy - dexp(y) * sum;
  else return y * (dy - sum);
}

// G lanes per row, y and dy held in registers (as (4a)); all of y, dy, dx 16-byte aligned.
// causal_t > 0: the backward of causal_softmax (rows of causal_t queries, offset causal_offset),
// whose y is exactly 0 past the visible columns: packs wholly past them are written 0 without
// reading y or dy (about a third of the traffic of a square causal attention).
template <class T, bool LOG, int PL, int MINB = 1>
__global__ void __launch_bounds__(kRowThreads, MINB) softmax_bwd_vec_warp_kernel(T *dx, const T *y, const T *dy,
                                                                           int64_t rows, int64_t cols, int G,
                                                                           int64_t causal_t, int64_t causal_offset) {
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  const int64_t packs = cols / N;
  const int sub = threadIdx.x & (G - 1);
  const int64_t per_block = blockDim.x / G;
  for (int64_t base = (int64_t)blockIdx.x * per_block; base < rows; base += (int64_t)gridDim.x * per_block) {
    const int64_t r = base + threadIdx.x / G;
    const bool valid = r < rows;
    // packs holding a visible column: all of them unless causal
    const int64_t live = causal_t > 0 ? min(packs, (r % causal_t + causal_offset + N) / N) : packs;
    Pack<T> vy[PL], vd[PL];
    A acc = 0;
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      const int64_t p = sub + (int64_t)k * G;
      if (valid && p < live) {
        vy[k] = load128(y + r * cols + p * N);
        vd[k] = load128(dy + r * cols + p * N);
#pragma unroll
        for (int j = 0; j < N; ++j) acc += bwd_term<LOG>(to_compute(vy[k].v[j]), to_compute(vd[k].v[j]));
      }
    }
    acc = group_sum(acc, G);
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      const int64_t p = sub + (int64_t)k * G;
      if (valid && p < packs) {
        Pack<T> o;
        if (p < live) {
#pragma unroll
          for (int j = 0; j < N; ++j)
            o.v[j] = from_compute<T>(bwd_out<LOG>(to_compute(vy[k].v[j]), to_compute(vd[k].v[j]), acc));
        } else {
#pragma unroll
          for (int j = 0; j < N; ++j) o.v[j] = from_compute<T>(A(0));
        }
        store128(dx + r * cols + p * N, o);
      }
    }
  }
}

// A block per row, y and dy held in registers (blockDim * PL * N >= cols).
template <class T, bool LOG, int PL>
__global__ void __launch_bounds__(kCachedBlockThreads) softmax_bwd_vec_block_kernel(T *dx, const T *y, const T *dy,
                                                                                 int64_t rows, int64_t cols) {
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  __shared__ A red[32];
  const int64_t packs = cols / N;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    Pack<T> vy[PL], vd[PL];
    A acc = 0;
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      const int64_t p = threadIdx.x + (int64_t)k * blockDim.x;
      if (p < packs) {
        vy[k] = load128(y + r * cols + p * N);
        vd[k] = load128(dy + r * cols + p * N);
#pragma unroll
        for (int j = 0; j < N; ++j) acc += bwd_term<LOG>(to_compute(vy[k].v[j]), to_compute(vd[k].v[j]));
      }
    }
    acc = block_allsum(acc, red);
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      const int64_t p = threadIdx.x + (int64_t)k * blockDim.x;
      if (p < packs) {
        Pack<T> o;
#pragma unroll
        for (int j = 0; j < N; ++j) o.v[j] = from_compute<T>(bwd_out<LOG>(to_compute(vy[k].v[j]), to_compute(vd[k].v[j]), acc));
        store128(dx + r * cols + p * N, o);
      }
    }
  }
}

// Any shape: a warp per row (BLOCK false) or a block per row, reading y and dy twice.
// VEC: 128-bit accesses (cols % N == 0, all three pointers 16-byte aligned).
template <class T, bool LOG, bool VEC, bool BLOCK>
__global__ void __launch_bounds__(kBlockThreads) softmax_bwd_rows_kernel(T *dx, const T *y, const T *dy,
                                                                         int64_t rows, int64_t cols) {
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  __shared__ A red[32];
  const int tid = BLOCK ? (int)threadIdx.x : (int)(threadIdx.x & 31);
  const int nthr = BLOCK ? (int)blockDim.x : 32;
  const int64_t per_block = BLOCK ? 1 : (int64_t)(blockDim.x >> 5);
  const int64_t first = (int64_t)blockIdx.x * per_block + (BLOCK ? 0 : (int64_t)(threadIdx.x >> 5));
  for (int64_t r = first; r < rows; r += (int64_t)gridDim.x * per_block) {  // uniform per warp / block
    const T *yr = y + r * cols, *dyr = dy + r * cols;
    T *dxr = dx + r * cols;
    A acc = 0;
    if constexpr (VEC) {
      for (int64_t p = tid; p < cols / N; p += nthr) {
        const Pack<T> a = load128(yr + p * N), b = load128(dyr + p * N);
#pragma unroll
        for (int j = 0; j < N; ++j) acc += bwd_term<LOG>(to_compute(a.v[j]), to_compute(b.v[j]));
      }
    } else {
      for (int64_t c = tid; c < cols; c += nthr) acc += bwd_term<LOG>(to_compute(yr[c]), to_compute(dyr[c]));
    }
    if constexpr (BLOCK) acc = block_allsum(acc, red);
    else acc = group_sum(acc, 32);
    if constexpr (VEC) {
      for (int64_t p = tid; p < cols / N; p += nthr) {
        const Pack<T> a = load128(yr + p * N), b = load128(dyr + p * N);
        Pack<T> o;
#pragma unroll
        for (int j = 0; j < N; ++j) o.v[j] = from_compute<T>(bwd_out<LOG>(to_compute(a.v[j]), to_compute(b.v[j]), acc));
        store128(dxr + p * N, o);
      }
    } else {
      for (int64_t c = tid; c < cols; c += nthr)
        dxr[c] = from_compute<T>(bwd_out<LOG>(to_compute(yr[c]), to_compute(dyr[c]), acc));
    }
  }
}

// (cluster) backward, sm_90 (production for softmax rows above 16384 columns that (cluster, one
// exchange) cannot take; study variants 2 and 3 of mt_study_softmax_backward): K blocks per row
// as the forward's (cluster), block `rank` holding its slice of y and dy in registers (PL packs
// of each per thread), the row's sum of dy * y (softmax) or of dy (log_softmax) reduced over the
// cluster through distributed shared memory. y and dy are read from DRAM once, where softmax_bwd_rows_kernel reads them twice. Grid:
// rows * K blocks, one row per cluster.
template <class T, bool LOG, int PL>
__global__ void __launch_bounds__(kRowThreads) softmax_bwd_cluster_kernel(T *dx, const T *y, const T *dy,
                                                                          int64_t cols, int64_t slice) {
  namespace cg = cooperative_groups;
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  __shared__ A red[32];
  __shared__ A slot;
  cg::cluster_group cl = cg::this_cluster();
  const int64_t r = blockIdx.x / cl.num_blocks();
  const int64_t p0 = (int64_t)cl.block_rank() * slice;
  const int64_t p1 = min(p0 + slice, cols / N);
  const T *yr = y + r * cols, *dyr = dy + r * cols;
  T *dxr = dx + r * cols;
  Pack<T> vy[PL], vd[PL];
  A acc = 0;
  slice_packs<PL>(p0, p1, [&](int k, int64_t p) {
    vy[k] = load128(yr + p * N);
    vd[k] = load128(dyr + p * N);
#pragma unroll
    for (int j = 0; j < N; ++j) acc += bwd_term<LOG>(to_compute(vy[k].v[j]), to_compute(vd[k].v[j]));
  });
  acc = cluster_allsum(acc, red, &slot);
  slice_packs<PL>(p0, p1, [&](int k, int64_t p) {
    Pack<T> o;
#pragma unroll
    for (int j = 0; j < N; ++j) o.v[j] = from_compute<T>(bwd_out<LOG>(to_compute(vy[k].v[j]), to_compute(vd[k].v[j]), acc));
    store128(dxr + p * N, o);
  });
  cl.sync();  // no block leaves while another may still read its slot
}

// (cluster, one exchange) backward, sm_90 (production from 16384 columns where a row fits it;
// study variants 10 and 11 of mt_study_softmax_backward): the cluster backward for rows of
// exactly K blocks x kRowThreads x PL packs (one base address and constant offsets, as the
// forward's (cluster, one exchange)).
// Each block reduces its slice's sum of dy * y (or of dy), pushes it into `parts` of every block of
// the cluster, and after the one cluster barrier adds the K parts from its own shared memory in
// rank order: all blocks agree bit for bit, and none reads another's memory after the barrier,
// so none waits for the others' stores before it exits. (cluster) synchronizes twice a row, the
// second time after its stores, and a barrier's release waits for those stores. ptxas -v (sm_90)
// under these bounds: f32 80 registers at 8 packs, 48 (62 log_softmax) at 4, no spills; bf16
// softmax at 8 packs (65536 columns and more) spills 60 bytes.
template <class T, bool LOG, int PL>
__global__ void __launch_bounds__(kRowThreads, sizeof(T) == 4 ? (PL <= 4 ? 4 : 3) : (PL <= 2 ? 4 : PL == 4 ? 3 : 2))
    softmax_bwd_cluster1_kernel(T *dx, const T *y, const T *dy, int64_t cols) {
  namespace cg = cooperative_groups;
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  constexpr int kMaxK = 8;
  constexpr int kStep = kRowThreads * N;  // elements between a thread's packs
  __shared__ A red[32];
  __shared__ A parts[kMaxK];  // block r's sum, written by block r
  cg::cluster_group cl = cg::this_cluster();
  const unsigned K = cl.num_blocks(), rank = cl.block_rank();
  const int64_t off = (blockIdx.x / K) * cols + ((int64_t)rank * PL * kRowThreads + threadIdx.x) * N;
  Pack<T> vy[PL], vd[PL];
  A acc = 0;
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    vy[k] = load128(y + off + k * kStep);
    vd[k] = load128(dy + off + k * kStep);
#pragma unroll
    for (int j = 0; j < N; ++j) acc += bwd_term<LOG>(to_compute(vy[k].v[j]), to_compute(vd[k].v[j]));
  }
  acc = block_allsum(acc, red);
  if (threadIdx.x < K) cl.map_shared_rank(parts, threadIdx.x)[rank] = acc;
  cl.sync();
  A sum = 0;
#pragma unroll 1
  for (unsigned q = 0; q < K; ++q) sum += parts[q];
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    Pack<T> o;
#pragma unroll
    for (int j = 0; j < N; ++j)
      o.v[j] = from_compute<T>(bwd_out<LOG>(to_compute(vy[k].v[j]), to_compute(vd[k].v[j]), sum));
    store128(dx + off + k * kStep, o);
  }
}

// ---- dispatch -----------------------------------------------------------------------------


// One forward launch of study variant `variant` (0: the production choice).
// Returns false when the variant cannot take the shape: 4-10 need 16-byte rows and pointers and
// a 2- or 4-byte dtype; 6-8 rows of at most kWarpMaxCols columns, 9-12 wider rows (11-12 exact fits).
template <class T, bool LOG>
bool softmax_forward_variant(Context &c, int variant, T *y, const T *x, int64_t rows, int64_t cols) {
  constexpr int N = Pack<T>::N;
  const bool vec = vec_ok<T>(cols, {x, y});
  // Production: (5) where it measured faster than (4) on the H200 (narrow rows: more loads in
  // flight; the widest rows: no register cache, so several rows per SM overlap their phases),
  // (4) between; the scalar kernels when 128-bit accesses are not possible.
  if (variant == 0) {
    // bw_study.py (H200, f32): the exact-fit kernel where a row is exactly G x PL packs (1.03x /
    // 1.10x PyTorch at 65536 x 1024 / 262144 x 128, against 0.96x / 1.02x for (5)), clusters of
    // 4 blocks per row from 32768 columns on Hopper (1.18x against 1.03x at 8192 x 32768)
    if (vec && cols <= kWarpMaxCols && softmax_forward_variant<T, LOG>(c, 8, y, x, rows, cols)) return true;
    // and from 32768 columns on Hopper clusters of 4 blocks per row, in float32 with one cluster
    // exchange where the row is an exact fit (H100, 8192 x 32768: 722 us against 809 us, 100% of
    // copy; the 2-byte types were not timed, so they keep (cluster))
    if (vec && cols >= kFwdCachedMaxCols && c.cc_major >= 9 &&
        ((sizeof(T) == 4 && softmax_forward_variant<T, LOG>(c, 11, y, x, rows, cols)) ||
         softmax_forward_variant<T, LOG>(c, 10, y, x, rows, cols)))
      return true;
    const int64_t packs = cols / N;
    const bool ilp = (packs >= 32 && cols <= kWarpMaxCols) || cols >= kFwdCachedMaxCols;
    variant = vec ? (ilp ? 5 : 4) : (cols <= kWarpMaxCols ? 2 : 3);
  }
  switch (variant) {
    case 1:
      softmax_naive_kernel<T, LOG><<<grid_of((rows + 127) / 128), 128, 0, c.stream>>>(y, x, rows, cols);
      break;
    case 2: {
      const int64_t per_block = kRowThreads / 32;
      softmax_warp_online_kernel<T, LOG>
          <<<grid_of((rows + per_block - 1) / per_block), kRowThreads, 0, c.stream>>>(y, x, rows, cols);
      break;
    }
    case 3:
      softmax_block_online_kernel<T, LOG, false><<<grid_of(rows), kBlockThreads, 0, c.stream>>>(y, x, rows, cols);
      break;
    case 4:
    case 5: {  // (5): (4) with 4 packs in flight per lane; wide rows take (3) with 128-bit accesses
      if (!vec) return false;
      if constexpr (kVecType<T>) {
        constexpr int kMaxPL = (int)(kFwdCachedMaxCols / (kCachedBlockThreads * N));
        const int64_t packs = cols / N;
        int PL = 0, threads = 0;
        if (cols <= kWarpMaxCols) {
          int G = 0;
          warp_shape(packs, G, PL, variant == 5 ? 4 : 1);
          const int64_t per_block = kRowThreads / G;
          dispatch_pl<32 / N>(PL, [&](auto pl) {
            softmax_vec_warp_kernel<T, LOG, decltype(pl)::value>
                <<<grid_of((rows + per_block - 1) / per_block), kRowThreads, 0, c.stream>>>(y, x, rows, cols, G);
          });
        } else if (variant == 4 && block_shape(packs, kMaxPL, PL, threads)) {
          dispatch_pl<kMaxPL>(PL, [&](auto pl) {
            softmax_vec_block_kernel<T, LOG, decltype(pl)::value>
                <<<grid_of(rows), threads, 0, c.stream>>>(y, x, rows, cols);
          });
        } else {  // (5), or wider than the registers hold: (3) with 128-bit accesses
          softmax_block_online_kernel<T, LOG, true><<<grid_of(rows), kBlockThreads, 0, c.stream>>>(y, x, rows, cols);
        }
      }
      break;
    }
    case 6:
    case 7: {  // (4a) keeping exp(x - m), at least 2 or 4 packs per lane
      if (!vec || cols > kWarpMaxCols) return false;
      if constexpr (kVecType<T>) {
        int G = 0, PL = 0;
        warp_shape(cols / N, G, PL, variant == 6 ? 2 : 4);
        const int64_t per_block = kRowThreads / G;
        dispatch_pl<32 / N>(PL, [&](auto pl) {
          softmax_vec_warp_kernel<T, LOG, decltype(pl)::value, true>
              <<<grid_of((rows + per_block - 1) / per_block), kRowThreads, 0, c.stream>>>(y, x, rows, cols, G);
        });
      }
      break;
    }
    case 8: {  // (fit): rows of exactly 8 lanes x 4 packs, 16 x 4, 32 x 4 or 32 x 8 (warp_shape, min_pl 4)
      if (!vec || cols > kWarpMaxCols) return false;
      if constexpr (kVecType<T>) {
        const bool fits = dispatch_fit(cols / N, [&](auto g, auto pl) {
          constexpr int kG = decltype(g)::value;
          MT_CUDA_CHECK(launch_pdl_wide(c, softmax_fit_warp_kernel<T, LOG, decltype(pl)::value, kG>,
                                        dim3(grid_of((rows + kRowThreads / kG - 1) / (kRowThreads / kG))),
                                        kRowThreads, y, x, rows));
        });
        if (!fits) return false;
      }
      break;
    }
    case 9:
    case 10:     // (cluster) of 8 or 4 blocks per row
    case 11:
    case 12: {   // (cluster, one exchange) of 4 or 8 blocks per row
      if (!vec || cols <= kWarpMaxCols) return false;
      if constexpr (kVecType<T>) {
        constexpr int kMaxPL = 8;
        const int K = variant == 9 || variant == 12 ? 8 : 4;
        int64_t slice = 0;
        int PL = 0, threads = 0;
        if (!cluster_shape(cols / N, K, kMaxPL, kRowThreads, slice, PL, threads) || rows > INT_MAX / K) return false;
        if (variant >= 11 && (threads != kRowThreads || slice != (int64_t)PL * threads || slice * K != cols / N))
          return false;  // (cluster, one exchange) takes exact fits only
        dispatch_pl<kMaxPL>(PL, [&](auto pl) {
          constexpr int kPL = decltype(pl)::value;
          if (variant <= 10)
            MT_CUDA_CHECK(launch_cluster(softmax_cluster_kernel<T, LOG, kPL>, (unsigned)(rows * K), threads, K, 0,
                                         c.stream, y, x, cols, slice));
          else
            MT_CUDA_CHECK(launch_cluster(softmax_cluster1_kernel<T, LOG, kPL>, (unsigned)(rows * K), threads, K, 0,
                                         c.stream, y, x, cols));
        });
      }
      break;
    }
    default:
      return false;
  }
  MT_CUDA_CHECK_LAUNCH(LOG ? "log_softmax" : "softmax");
  return true;
}

// The uncached backward: a warp per row up to kWarpMaxCols columns, else a block per row, y and
// dy read twice (128-bit accesses where vec).
template <class T, bool LOG>
void launch_bwd_rows(Context &c, bool vec, T *dx, const T *y, const T *dy, int64_t rows, int64_t cols) {
  if (cols <= kWarpMaxCols) {
    const int64_t per_block = kBlockThreads / 32;
    softmax_bwd_rows_kernel<T, LOG, false, false>
        <<<grid_of((rows + per_block - 1) / per_block), kBlockThreads, 0, c.stream>>>(dx, y, dy, rows, cols);
  } else if (vec) {
    softmax_bwd_rows_kernel<T, LOG, true, true><<<grid_of(rows), kBlockThreads, 0, c.stream>>>(dx, y, dy, rows, cols);
  } else {
    softmax_bwd_rows_kernel<T, LOG, false, true><<<grid_of(rows), kBlockThreads, 0, c.stream>>>(dx, y, dy, rows, cols);
  }
}

// The (cluster) backward in clusters of K blocks per row; false when it cannot take the shape
// (Hopper, 16-byte rows and pointers, 2- or 4-byte types, rows wider than kWarpMaxCols whose
// K-th fits kRowThreads threads x 8 packs).
template <class T, bool LOG>
bool launch_bwd_cluster(Context &c, int K, T *dx, const T *y, const T *dy, int64_t rows, int64_t cols) {
  if (!vec_ok<T>(cols, {dx, y, dy}) || cols <= kWarpMaxCols || c.cc_major < 9) return false;
  if constexpr (kVecType<T>) {
    constexpr int N = Pack<T>::N;
    constexpr int kMaxPL = 8;
    int64_t slice = 0;
    int PL = 0, threads = 0;
    if (!cluster_shape(cols / N, K, kMaxPL, kRowThreads, slice, PL, threads) || rows > INT_MAX / K) return false;
    dispatch_pl<kMaxPL>(PL, [&](auto pl) {
      MT_CUDA_CHECK(launch_cluster(softmax_bwd_cluster_kernel<T, LOG, decltype(pl)::value>, (unsigned)(rows * K),
                                   threads, K, 0, c.stream, dx, y, dy, cols, slice));
    });
    return true;
  }
  return false;
}

// The (cluster, one exchange) backward in clusters of K blocks per row; false when it cannot take
// the shape (Hopper, 16-byte rows and pointers, 2- or 4-byte types, rows of exactly K x
// kRowThreads x 1, 2, 4 or 8 packs).
template <class T, bool LOG>
bool launch_bwd_cluster1(Context &c, int K, T *dx, const T *y, const T *dy, int64_t rows, int64_t cols) {
  if (!vec_ok<T>(cols, {dx, y, dy}) || c.cc_major < 9 || rows > INT_MAX / K) return false;
  if constexpr (kVecType<T>) {
    constexpr int N = Pack<T>::N;
    const int64_t per = (int64_t)K * kRowThreads;
    const int64_t packs = cols / N;
    if (packs % per != 0) return false;
    const int64_t PL = packs / per;
    if (PL != 1 && PL != 2 && PL != 4 && PL != 8) return false;
    dispatch_pl<8>((int)PL, [&](auto pl) {
      MT_CUDA_CHECK(launch_cluster(softmax_bwd_cluster1_kernel<T, LOG, decltype(pl)::value>, (unsigned)(rows * K),
                                   kRowThreads, K, 0, c.stream, dx, y, dy, cols));
    });
    return true;
  }
  return false;
}

template <class T, bool LOG>
void softmax_backward_t(Context &c, T *dx, const T *y, const T *dy, int64_t rows, int64_t cols, int64_t causal_t = 0,
                        int64_t causal_offset = 0) {
  constexpr int N = Pack<T>::N;
  const bool vec = vec_ok<T>(cols, {dx, y, dy});
  const int64_t packs = cols / N;
  int PL = 0, threads = 0;
  bool done = false;
  // log_softmax rows of a 2-byte type from 16384 columns up to 64 KB: the rows kernel, reading y
  // and dy twice (97% of copy bandwidth at 16384 x 16384 bfloat16 and float16, against 83-84% for
  // the one-exchange cluster and 72-76% for the cached block per row; docs/benchmarks.md)
  if (LOG && sizeof(T) == 2 && causal_t == 0 && cols >= kBwdCachedMaxCols &&
      cols * (int64_t)sizeof(T) < kBwdLogRowsMaxBytes) {
    launch_bwd_rows<T, LOG>(c, vec, dx, y, dy, rows, cols);
    MT_CUDA_CHECK_LAUNCH("log_softmax backward");
    return;
  }
  // From the widest register-cached rows up on Hopper, rows that fit it exactly: the cluster of 4
  // (else 8) blocks per row with one exchange, reading y and dy once (101-106% of copy bandwidth
  // against 61-79% for the cached block or the rows kernel at 16384-65536 float32 columns;
  // docs/benchmarks.md)
  if (causal_t == 0 && cols >= kBwdCachedMaxCols &&
      (launch_bwd_cluster1<T, LOG>(c, 4, dx, y, dy, rows, cols) ||
       launch_bwd_cluster1<T, LOG>(c, 8, dx, y, dy, rows, cols))) {
    MT_CUDA_CHECK_LAUNCH(LOG ? "log_softmax backward" : "softmax backward");
    return;
  }
  if constexpr (kVecType<T>) {
    constexpr int kMaxPL = (int)(kBwdCachedMaxCols / (kCachedBlockThreads * N));
    int G = 0;
    if (vec && cols <= kWarpMaxCols) warp_shape(packs, G, PL);
    if (vec && cols <= kWarpMaxCols && causal_t == 0 && PL >= kBwdBlockRowsFromPL &&
        block_shape(packs, kMaxPL, PL, threads, kBwdRowBlockThreads)) {
      // rows of more than 2 packs a lane: a block per row of up to 256 threads, one pack each,
      // keeps every warp slot busy; the warp rows' two arrays of 8 packs a lane held 16 warps an SM
      // (105% against 78% of copy bandwidth at 65536 x 1024 f32, docs/benchmarks.md)
      dispatch_pl<kMaxPL>(PL, [&](auto pl) {
        softmax_bwd_vec_block_kernel<T, LOG, decltype(pl)::value>
            <<<grid_of(rows), threads, 0, c.stream>>>(dx, y, dy, rows, cols);
      });
      done = true;
    } else if (vec && cols <= kWarpMaxCols) {
      // blocks of 64 threads outside causal rows: 0-10% faster than 256 at 64-256 columns
      const int threads_w = causal_t == 0 ? kBwdWarpBlockThreads : kRowThreads;
      const int64_t per_block = threads_w / G;
      dispatch_pl<32 / N>(PL, [&](auto pl) {
        softmax_bwd_vec_warp_kernel<T, LOG, decltype(pl)::value>
            <<<grid_of((rows + per_block - 1) / per_block), threads_w, 0, c.stream>>>(dx, y, dy, rows, cols, G,
                                                                                    causal_t, causal_offset);
      });
      done = true;
    } else if (vec && block_shape(packs, kMaxPL, PL, threads)) {
      dispatch_pl<kMaxPL>(PL, [&](auto pl) {
        softmax_bwd_vec_block_kernel<T, LOG, decltype(pl)::value>
            <<<grid_of(rows), threads, 0, c.stream>>>(dx, y, dy, rows, cols);
      });
      done = true;
    }
  }
  // softmax rows above the register-cached widths that the one-exchange cluster cannot take: the
  // two-exchange cluster of 4 (else 8) blocks per row reads y and dy once where the rows kernel
  // reads them twice. log_softmax's first pass reads only dy, and there it lost (docs/benchmarks.md).
  if (!LOG && !done && causal_t == 0 && cols > kBwdCachedMaxCols &&
      (launch_bwd_cluster<T, LOG>(c, 4, dx, y, dy, rows, cols) ||
       launch_bwd_cluster<T, LOG>(c, 8, dx, y, dy, rows, cols)))
    done = true;
  if (!done) launch_bwd_rows<T, LOG>(c, vec, dx, y, dy, rows, cols);
  MT_CUDA_CHECK_LAUNCH(LOG ? "log_softmax backward" : "softmax backward");
}

// One backward launch of study variant `variant` of mt_study_softmax_backward: 0 production
// (softmax_backward_t), 1 softmax_bwd_rows_kernel (a warp per row up to kWarpMaxCols columns,
// else a block per row; y and dy read twice), 2 / 3 (cluster) of 4 / 8 blocks per row (Hopper,
// 16-byte rows and pointers, 2- or 4-byte types, rows wider than kWarpMaxCols), 4-6 the cached
// warp rows in other blocks (16-byte rows up to kWarpMaxCols), 7-9 the cached block per row in
// small blocks (16-byte rows that fit), 10 / 11 (cluster, one exchange) of 4 / 8 blocks per row
// (Hopper, rows of exactly K x kRowThreads x 1, 2, 4 or 8 packs), 12 the cached block per row of
// up to kCachedBlockThreads threads (16-byte rows up to kBwdCachedMaxCols). False when the
// variant cannot take the shape.
template <class T, bool LOG>
bool softmax_backward_variant(Context &c, int variant, T *dx, const T *y, const T *dy, int64_t rows, int64_t cols) {
  constexpr int N = Pack<T>::N;
  switch (variant) {
    case 4:
    case 5:
    case 6: {  // the register-cached warp rows in blocks of 64 / 128 threads, or 256 with >= 3 blocks an SM
      if constexpr (!kVecType<T>) return false;
      else {
        if (!vec_ok<T>(cols, {dx, y, dy}) || cols > kWarpMaxCols) return false;
        int G = 0, PL = 0;
        warp_shape(cols / N, G, PL);
        const int threads = variant == 4 ? 64 : variant == 5 ? 128 : kRowThreads;
        if (G > threads) return false;
        const int64_t per_block = threads / G;
        const unsigned grid = grid_of((rows + per_block - 1) / per_block);
        dispatch_pl<32 / N>(PL, [&](auto pl) {
          if (variant == 6)
            softmax_bwd_vec_warp_kernel<T, LOG, decltype(pl)::value, 3>
                <<<grid, threads, 0, c.stream>>>(dx, y, dy, rows, cols, G, 0, 0);
          else
            softmax_bwd_vec_warp_kernel<T, LOG, decltype(pl)::value>
                <<<grid, threads, 0, c.stream>>>(dx, y, dy, rows, cols, G, 0, 0);
        });
      }
      break;
    }
    case 7:
    case 8:
    case 9: {  // the register-cached block per row in blocks of at most 64 / 128 / 256 threads
      if constexpr (!kVecType<T>) return false;
      else {
        constexpr int kMaxPL = (int)(kBwdCachedMaxCols / (kCachedBlockThreads * N));
        int PL = 0, threads = 0;
        if (!vec_ok<T>(cols, {dx, y, dy}) ||
            !block_shape(cols / N, kMaxPL, PL, threads, variant == 7 ? 64 : variant == 8 ? 128 : 256))
          return false;
        dispatch_pl<kMaxPL>(PL, [&](auto pl) {
          softmax_bwd_vec_block_kernel<T, LOG, decltype(pl)::value>
              <<<grid_of(rows), threads, 0, c.stream>>>(dx, y, dy, rows, cols);
        });
      }
      break;
    }
    case 10:
    case 11:  // (cluster, one exchange) of 4 / 8 blocks per row
      if (!launch_bwd_cluster1<T, LOG>(c, variant == 10 ? 4 : 8, dx, y, dy, rows, cols)) return false;
      break;
    case 12: {  // the register-cached block per row of up to kCachedBlockThreads threads
      if constexpr (!kVecType<T>) return false;
      else {
        constexpr int kMaxPL = (int)(kBwdCachedMaxCols / (kCachedBlockThreads * N));
        int PL = 0, threads = 0;
        if (!vec_ok<T>(cols, {dx, y, dy}) || !block_shape(cols / N, kMaxPL, PL, threads)) return false;
        dispatch_pl<kMaxPL>(PL, [&](auto pl) {
          softmax_bwd_vec_block_kernel<T, LOG, decltype(pl)::value>
              <<<grid_of(rows), threads, 0, c.stream>>>(dx, y, dy, rows, cols);
        });
      }
      break;
    }
    case 0:
      softmax_backward_t<T, LOG>(c, dx, y, dy, rows, cols);
      return true;
    case 1:
      launch_bwd_rows<T, LOG>(c, vec_ok<T>(cols, {dx, y, dy}), dx, y, dy, rows, cols);
      break;
    case 2:
    case 3:
      if (!launch_bwd_cluster<T, LOG>(c, variant == 2 ? 4 : 8, dx, y, dy, rows, cols)) return false;
      break;
    default:
      return false;
  }
  MT_CUDA_CHECK_LAUNCH(LOG ? "log_softmax backward" : "softmax backward");
  return true;
}

void check_rows(const char *op, int64_t rows, int64_t cols) {
  MT_CHECK(rows >= 0 && cols >= 0, INVALID_ARGUMENT, "cuda %s: negative size (rows=%lld, cols=%lld)", op,
           (long long)rows, (long long)cols);
}

// The causal ops' layout: rows in groups of t queries (t > 0), the mask shifted by offset >= 0.
void check_causal(const char *op, int64_t rows, int64_t t, int64_t offset) {
  MT_CHECK(t > 0 && offset >= 0 && rows % t == 0, INVALID_ARGUMENT,
           "cuda %s: %lld rows, t %lld, offset %lld (rows a multiple of t > 0, offset >= 0)", op, (long long)rows,
           (long long)t, (long long)offset);
}

// The backward of softmax or log_softmax, or (causal_t > 0) of causal_softmax, whose masked
// columns the warp-per-row kernel skips; the others read whole rows, which gives the same
// values (y is 0 there).
void backward_rows(Context &c, const char *op, void *dx, const void *y, const void *dy, int64_t rows, int64_t cols,
                   DType dtype, bool log, int64_t causal_t, int64_t offset) {
  NvtxRange range(op);
  check_rows(op, rows, cols);
  if (causal_t) check_causal(op, rows, causal_t, offset);
  if (rows == 0 || cols == 0) return;
  MT_CHECK(dx && y && dy, INVALID_ARGUMENT, "cuda %s: null buffer (dx=%p, y=%p, dy=%p)", op, dx, y, dy);
  dispatch_float(dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T *d = static_cast<T *>(dx);
    const T *yt = static_cast<const T *>(y), *g = static_cast<const T *>(dy);
    if (log)
      softmax_backward_t<T, true>(c, d, yt, g, rows, cols, causal_t, offset);
    else
      softmax_backward_t<T, false>(c, d, yt, g, rows, cols, causal_t, offset);
  });
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------

void causal_softmax(Context &c, void *y, const void *x, int64_t rows, int64_t cols, int64_t t, int64_t offset,
                    DType dtype) {
  NvtxRange range("causal_softmax");
  check_rows("causal_softmax", rows, cols);
  check_causal("causal_softmax", rows, t, offset);
  if (rows == 0 || cols == 0) return;
  MT_CHECK(y && x, INVALID_ARGUMENT, "cuda causal_softmax: null buffer (y=%p, x=%p)", y, x);
  dispatch_float(dtype, "causal_softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T *yt = static_cast<T *>(y);
    const T *xt = static_cast<const T *>(x);
    const int64_t per_block = kRowThreads / 32, blocks = (rows + per_block - 1) / per_block;
    const unsigned grid = grid_of(blocks);
    constexpr int N = Pack<T>::N;
    const bool vec = cols % N == 0 && is_aligned16(x) && is_aligned16(y);
    const int64_t packs_per_lane = (cols / N + 31) / 32;
    if (vec && packs_per_lane <= 8 && blocks <= INT_MAX) {  // the row in registers (a warp per row, no grid stride)
      dispatch_pl<8>(next_pow2(packs_per_lane), [&](auto pl) {
        causal_softmax_cached_kernel<T, decltype(pl)::value>
            <<<grid, kRowThreads, 0, c.stream>>>(yt, xt, rows, cols, t, offset);
      });
    } else if (vec)
      causal_softmax_kernel<T, true><<<grid, kRowThreads, 0, c.stream>>>(yt, xt, rows, cols, t, offset);
    else
      causal_softmax_kernel<T, false><<<grid, kRowThreads, 0, c.stream>>>(yt, xt, rows, cols, t, offset);
    MT_CUDA_CHECK_LAUNCH("causal_softmax");
  });
}

void softmax(Context &c, void *y, const void *x, int64_t rows, int64_t cols, DType dtype, bool log) {
  const char *op = log ? "log_softmax" : "softmax";
  NvtxRange range(op);
  check_rows(op, rows, cols);
  if (rows == 0 || cols == 0) return;
  MT_CHECK(y && x, INVALID_ARGUMENT, "cuda %s: null buffer (y=%p, x=%p)", op, y, x);
  dispatch_float(dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T *yt = static_cast<T *>(y);
    const T *xt = static_cast<const T *>(x);
    const bool ok = log ? softmax_forward_variant<T, true>(c, 0, yt, xt, rows, cols)
                        : softmax_forward_variant<T, false>(c, 0, yt, xt, rows, cols);
    MT_ASSERT(ok);
  });
}

void softmax_backward(Context &c, void *dx, const void *y, const void *dy, int64_t rows, int64_t cols, DType dtype,
                      bool log) {
  backward_rows(c, log ? "log_softmax backward" : "softmax backward", dx, y, dy, rows, cols, dtype, log, 0, 0);
}

void causal_softmax_backward(Context &c, void *dx, const void *y, const void *dy, int64_t rows, int64_t cols,
                             int64_t t, int64_t offset, DType dtype) {
  backward_rows(c, "causal_softmax backward", dx, y, dy, rows, cols, dtype, false, t, offset);
}

}  // namespace cuda
}  // namespace mt

// ---- the study hooks (backend/cuda/study.cuh has their common rules) ------------------------------
//
// mt_study_softmax / mt_study_log_softmax: internal hooks for scripts/bench/softmax_study.py,
// scripts/bench/bw_study.py, tests/gpu/test_classify_parity.py and tests/gpu/test_bw_variants.py.
//   y, x     device pointers, rows x cols, row-major, of dtype (an mt_dtype: F32, F64, F16, BF16);
//            borrowed for the call; the work is queued on the library's stream (call
//            mt_synchronize() before reading y; synchronize any other stream that wrote x first)
//   variant  0 production dispatch (what mt_softmax / mt_log_softmax run), 1 naive, 2 warp online,
//            3 block online, 4 vectorized, 5 vectorized with 4 packs in flight per lane for rows up
//            to 1024 columns, the 128-bit block-online kernel for wider rows,
//            6 (4) with at least 2 packs per lane and exp(x - m) kept for the write,
//            7 the same with at least 4 packs per lane, 8 (7) specialised for rows of exactly 8 x 4,
//            16 x 4, 32 x 4 or 32 x 8 packs (compile-time lanes and packs: fewer registers);
//            6-8 take rows up to 1024 columns,
//            9 clusters of 8 blocks per row (sm_90), 10 clusters of 4, 11 clusters of 4 with one
//            cluster exchange per row, 12 the same in clusters of 8; 9-12 take wider rows.
//            4-12 need a 2- or 4-byte dtype, cols % (16 / element size) == 0 and 16-byte aligned
//            x and y.
// Returns 0 or an mt_status value: MT_ERR_INVALID_ARGUMENT (bad sizes, variant or pointers),
// MT_ERR_UNSUPPORTED (a variant that cannot take the shape), MT_ERR_DTYPE, MT_ERR_CUDA,
// MT_ERR_DEVICE; mt_last_error() says why.
namespace {
int study_softmax(const char *fn, bool log, void *y, const void *x, int64_t rows, int64_t cols, int32_t dtype,
                  int32_t variant) {
  using namespace mt;
  using namespace mt::cuda;
  return study_entry(fn, [&] {
    check_variant(variant, 12);
    MT_CHECK(dtype >= 0 && dtype < kNumDTypes, DTYPE, "invalid dtype %d", (int)dtype);
    MT_CHECK(rows >= 0 && cols >= 0, INVALID_ARGUMENT, "negative size (rows=%lld, cols=%lld)", (long long)rows,
             (long long)cols);
    if (rows == 0 || cols == 0) return;
    MT_CHECK(y && x, INVALID_ARGUMENT, "null buffer (y=%p, x=%p)", y, x);
    NvtxRange range(fn);
    Context &c = context();
    dispatch_float((DType)dtype, fn, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T *yt = static_cast<T *>(y);
      const T *xt = static_cast<const T *>(x);
      const bool ok = log ? softmax_forward_variant<T, true>(c, variant, yt, xt, rows, cols)
                          : softmax_forward_variant<T, false>(c, variant, yt, xt, rows, cols);
      MT_CHECK(ok, UNSUPPORTED, "variant %d cannot take %lld x %lld %s at y=%p, x=%p", (int)variant,
               (long long)rows, (long long)cols, dtype_name((DType)dtype), y, x);
    });
  });
}
}  // namespace

extern "C" MT_API int mt_study_softmax(void *y, const void *x, int64_t rows, int64_t cols, int32_t dtype,
                                       int32_t variant) {
  return study_softmax("mt_study_softmax", false, y, x, rows, cols, dtype, variant);
}

extern "C" MT_API int mt_study_log_softmax(void *y, const void *x, int64_t rows, int64_t cols, int32_t dtype,
                                           int32_t variant) {
  return study_softmax("mt_study_log_softmax", true, y, x, rows, cols, dtype, variant);
}

// mt_study_softmax_backward: dx = the gradient of softmax (log 0) or log_softmax (log 1) at y
// for the output gradient dy, rows x cols of dtype (F32, F64, F16, BF16). For make bench's
// forward+backward rows with a random dy (the ABI's mt_backward seeds ones),
// tests/gpu/test_classify_parity.py and scripts/bench/bw_study.py. variant (as
// softmax_backward_variant): 0 production (what the ops' backward runs), 1 the uncached
// warp / block per row, 2 and 3 (cluster) of 4 and 8 blocks per row, 4-6 the cached warp rows in
// blocks of 64 / 128 / 256 threads (6: at least 3 blocks an SM), 7-9 the cached block per row of
// at most 64 / 128 / 256 threads, 10 / 11 (cluster, one exchange) of 4 / 8 blocks per row, 12
// the cached block per row of up to 1024 threads. Buffers borrowed, the work queued on the
// library's stream; the statuses of mt_study_softmax.
extern "C" MT_API int mt_study_softmax_backward(void *dx, const void *y, const void *dy, int64_t rows, int64_t cols,
                                                int32_t dtype, int32_t log, int32_t variant) {
  using namespace mt;
  using namespace mt::cuda;
  return study_entry("mt_study_softmax_backward", [&] {
    check_variant(variant, 12);
    MT_CHECK(dtype >= 0 && dtype < kNumDTypes, DTYPE, "invalid dtype %d", (int)dtype);
    MT_CHECK(log == 0 || log == 1, INVALID_ARGUMENT, "log %d is not 0 or 1", (int)log);
    MT_CHECK(rows >= 0 && cols >= 0, INVALID_ARGUMENT, "negative size (rows=%lld, cols=%lld)", (long long)rows,
             (long long)cols);
    if (rows == 0 || cols == 0) return;
    MT_CHECK(dx && y && dy, INVALID_ARGUMENT, "null buffer (dx=%p, y=%p, dy=%p)", dx, y, dy);
    NvtxRange range("study_softmax_backward");
    Context &c = context();
    dispatch_float((DType)dtype, "mt_study_softmax_backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T *d = static_cast<T *>(dx);
      const T *yt = static_cast<const T *>(y), *g = static_cast<const T *>(dy);
      const bool ok = log ? softmax_backward_variant<T, true>(c, variant, d, yt, g, rows, cols)
                          : softmax_backward_variant<T, false>(c, variant, d, yt, g, rows, cols);
      MT_CHECK(ok, UNSUPPORTED, "variant %d cannot take %lld x %lld %s at dx=%p, y=%p, dy=%p", (int)variant,
               (long long)rows, (long long)cols, dtype_name((DType)dtype), dx, y, dy);
    });
  });
}
