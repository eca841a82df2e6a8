// fused.cu - LayerNorm (forward, backward with deterministic dgamma/dbeta), GELU (tanh form,
// forward and backward) and the causal mask of attention.
//
//   layer_norm:   y (rows, d) = (x - mean) * rstd * gamma + beta along each row, biased var,
//                 rstd = 1/sqrt(var + eps); gamma, beta (d) may be null; mean, rstd (rows)
//                 written for the backward, in Compute<T> (float; double for F64)
//   backward:     xhat = (x - mean) rstd, g = dy * gamma
//                 dx (rows, d), written = rstd (g - mean_row(g) - xhat mean_row(g xhat))
//                 dgamma, dbeta (d), written = column sums of dy xhat and dy
//   gelu:         y (n) = 0.5 x (1 + tanh(k (x + c x^3))), k = sqrt(2/pi), c = 0.044715
//   gelu_backward dx (n), written = dy (0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2))
//   causal_mask:  out (t, s) uint8, written = j > i + s - t
//
// Napkin math (f32, H100 copy rate ~3 TB/s): the forward reads x and writes y, 8 bytes per
// element (mean, rstd and gamma/beta are < 1% at the benchmark shapes): 65536 x 1024 moves
// 512 MB, 0.17 ms at the copy rate. The backward's dx pass reads x and dy and writes dx (12
// bytes per element); separate dgamma/dbeta column sums read x and dy once more (8 bytes), 20
// bytes per element in all (PyTorch's backward makes the same passes). The fused backward sums
// dgamma/dbeta in the dx pass: 12 bytes per element, 0.26 ms at 65536 x 1024. GELU forward
// moves 8 bytes per element, backward 12; one tanhf per element is far below the MUFU/FMA limits.
//
// Row strategies (the softmax.cu scheme, see there): for d % (16 / sizeof(T)) == 0 and
// 16-byte aligned pointers, the row lives in registers as 16-byte packs between the two
// reductions (mean, then the centred sum of squares: the two-pass variance, no cancellation),
// so x is read from DRAM once: G <= 32 lanes per row (several rows per warp when G < 32) up to
// d = 1024, a block per row up to 32768 (forward) or 16384 (backward, which holds x and dy);
// on Hopper, float32 forward rows of exactly 4 x 256 x 8 packs (32768 columns) go to clusters
// of 4 blocks per row with one exchange of per-block (mean, centred sum of squares) pairs (pushed
// by st.async into each block's mbarrier), in a persistent grid whose blocks keep their slice of
// gamma and beta in shared memory.
// Other shapes (d not a multiple of the pack, float64, wider rows) take a warp per row
// (d <= 1024) or a block per row that reads the row again from global memory (mostly L2),
// with 16-byte accesses where d and the pointers allow.
//
// dgamma/dbeta: two fixed-order stages, no float atomics, so every run gives the same bits.
// Where dx is wanted too and a row is exactly G x PL packs (fused_shape: f32 rows up to 4096
// columns of a multiple of 4 that split so, 16-bit rows up to 8192), stage 1 is the dx kernel
// itself (ln_bwd_fused_kernel): each block adds dy xhat and dy of the rows it visits into one
// partial row, so x and dy are read once. Wider 16-byte rows (f32 up to 32768 columns, 16-bit up
// to 32768) do the same on sm_90 in ln_bwd_cluster_kernel: a cluster of 2, 4 or 8 blocks per row
// and one partial row per cluster. Otherwise stage 1 is its own pass: blocks of 32 columns x 8
// row-lanes each sum a chunk of rows into partial[chunk, d]. Stage 2 runs the column-sum kernel
// over the partials, writing dgamma and dbeta.
//
// Contents: math | layer_norm kernels (cached, uncached, column sums) | gelu, causal mask |
//           shapes and dispatch | launchers
#include <algorithm>
#include <climits>
#include <initializer_list>
#include <type_traits>

#include "minitorch.h"  // MT_API
#include "backend/cuda/context.h"
#include "backend/cuda/fused.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/row_stats.cuh"
#include "backend/cuda/study.cuh"

namespace mt {
namespace cuda {

namespace {

constexpr int kRowThreads = 256;        // blocks of the warp-per-row kernels
constexpr int kBlockThreads = 512;      // blocks of the uncached block-per-row kernels
constexpr int64_t kWarpMaxCols = 1024;  // rows up to this width get a warp (or less) each
constexpr int64_t kFwdCachedMaxCols = 32768;
constexpr int64_t kBwdCachedMaxCols = 16384;
constexpr int kElemThreads = 256;       // gelu, causal mask
constexpr int kElemUnroll = 1;          // 16-byte packs per gelu thread and operand (block_tile)
constexpr int kColTile = 32, kColLanes = 8;  // column-sum blocks: 32 columns x 8 row-lanes
constexpr int kFusedThreads = 256;     // largest block of the fused backward (dx with dgamma/dbeta)
constexpr int kFusedMaxPL = 4;         // its packs per lane
constexpr int kClusterFloats = 16;     // elements per thread of the cluster backward (PL * N)

// ---- math ---------------------------------------------------------------------------------

__device__ __forceinline__ float drsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ double drsqrt(double x) { return 1.0 / sqrt(x); }

// GELU as x * sigmoid(2u), u = k (x + c x^3): the same function as 0.5 x (1 + tanh(u)), but
// without the cancellation of 1 + tanh(u) for negative x (float32 lost all relative accuracy
// there: gelu(-6) came out with a relative error of 4e-5), and one exp instead of a tanh.
// gelu'(x) = s + 2 x s (1 - s) k (1 + 3 c x^2) with s = sigmoid(2u).
template <class A>
__device__ __forceinline__ A gelu_sigmoid(A x) {
  const A k = A(0.7978845608028654), c = A(0.044715);
  return A(1) / (A(1) + dexp(A(-2) * k * (x + c * x * x * x)));
}

template <class A>
__device__ __forceinline__ A gelu_value(A x) {
  return x * gelu_sigmoid(x);
}

template <class A>
__device__ __forceinline__ A gelu_grad(A x, A dy) {
  const A k = A(0.7978845608028654), c = A(0.044715);
  const A s = gelu_sigmoid(x);
  return dy * (s + A(2) * x * s * (A(1) - s) * k * (A(1) + A(3) * c * x * x));
}

template <class T>
__device__ __forceinline__ Compute<T> at_or(const T *p, int64_t i, Compute<T> dflt) {
  return p ? to_compute(p[i]) : dflt;
}

// The 16-byte pack of p at element i, or N copies of dflt when p is null (gamma, beta absent).
template <class T>
__device__ __forceinline__ Pack<T> pack_or(const T *p, int64_t i, float dflt) {
  if (p) return load128(p + i);
  Pack<T> v;
#pragma unroll
  for (int j = 0; j < Pack<T>::N; ++j) v.v[j] = from_compute<T>(dflt);
  return v;
}

// ---- layer_norm: the threads of one row -------------------------------------------------------

// BLOCK false: G lanes of a warp per row (G a power of two <= 32), blockDim / G rows per block.
// BLOCK true: the whole block per row (G = blockDim.x). Rows are walked from a `base` that is
// uniform across the block, so every lane reaches the shuffles and barriers; `valid` masks the
// lanes whose row is past the end.
template <bool BLOCK>
struct RowGroup {
  int G, sub;
  int64_t per_block;
  __device__ __forceinline__ explicit RowGroup(int g) {
    G = BLOCK ? (int)blockDim.x : g;
    sub = BLOCK ? (int)threadIdx.x : (int)(threadIdx.x & (g - 1));
    per_block = BLOCK ? 1 : (int64_t)(blockDim.x / g);
  }
  __device__ __forceinline__ int64_t first() const { return (int64_t)blockIdx.x * per_block; }
  __device__ __forceinline__ int64_t step() const { return (int64_t)gridDim.x * per_block; }
  __device__ __forceinline__ int64_t row(int64_t base) const { return BLOCK ? base : base + threadIdx.x / G; }
  // Sum over the row's threads, received by all of them; red is __shared__ A[32].
  template <class A>
  __device__ __forceinline__ A allsum(A v, A *red) const {
    if constexpr (BLOCK) return block_allsum(v, red);
    else return group_sum(v, G);
  }
};

// (cached) Forward: PL 16-byte packs per thread hold the row (G * PL * N >= d, d % N == 0).
template <class T, int PL, bool BLOCK>
__global__ void __launch_bounds__(BLOCK ? kCachedBlockThreads : kRowThreads)
    ln_fwd_vec_kernel(T *y, Compute<T> *mean, Compute<T> *rstd, const T *x, const T *gamma, const T *beta,
                      int64_t rows, int64_t d, Compute<T> eps, int G) {
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  __shared__ A red[32];
  const RowGroup<BLOCK> grp(G);
  const int64_t packs = d / N;
  for (int64_t base = grp.first(); base < rows; base += grp.step()) {
    const int64_t r = grp.row(base);
    const bool valid = r < rows;
    Pack<T> v[PL];
    A s = 0;
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      const int64_t p = grp.sub + (int64_t)k * grp.G;
      if (valid && p < packs) {
        v[k] = load128(x + r * d + p * N);
#pragma unroll
        for (int j = 0; j < N; ++j) s += to_compute(v[k].v[j]);
      }
    }
    const A m = grp.allsum(s, red) / A(d);
    A q = 0;
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      const int64_t p = grp.sub + (int64_t)k * grp.G;
      if (valid && p < packs) {
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const A c = to_compute(v[k].v[j]) - m;
          q += c * c;
        }
      }
    }
    const A rs = drsqrt(grp.allsum(q, red) / A(d) + eps);
    if (valid && grp.sub == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      const int64_t p = grp.sub + (int64_t)k * grp.G;
      if (valid && p < packs) {
        const Pack<T> w = pack_or(gamma, p * N, 1.f), b = pack_or(beta, p * N, 0.f);
        Pack<T> o;
#pragma unroll
        for (int j = 0; j < N; ++j)
          o.v[j] = from_compute<T>((to_compute(v[k].v[j]) - m) * rs * to_compute(w.v[j]) + to_compute(b.v[j]));
        store128(y + r * d + p * N, o);
      }
    }
  }
}

// (uncached) Forward of any shape: three passes over the row (sum, centred squares, write),
// the second and third mostly from L2. VEC: 16-byte accesses (d % N == 0, pointers aligned).
template <class T, bool BLOCK, bool VEC>
__global__ void __launch_bounds__(BLOCK ? kBlockThreads : kRowThreads)
    ln_fwd_rows_kernel(T *y, Compute<T> *mean, Compute<T> *rstd, const T *x, const T *gamma, const T *beta,
                       int64_t rows, int64_t d, Compute<T> eps) {
  using A = Compute<T>;
  constexpr int N = VEC ? Pack<T>::N : 1;
  using C = Chunk<T, N>;
  __shared__ A red[32];
  const RowGroup<BLOCK> grp(32);
  for (int64_t base = grp.first(); base < rows; base += grp.step()) {
    const int64_t r = grp.row(base);
    const int64_t end = r < rows ? d / N : 0;  // lanes past the last row loop over nothing
    const T *xr = x + r * d;
    A s = 0;
    for (int64_t p = grp.sub; p < end; p += grp.G) {
      const C v = C::load(xr + p * N);
#pragma unroll
      for (int j = 0; j < N; ++j) s += to_compute(v.v[j]);
    }
    const A m = grp.allsum(s, red) / A(d);
    A q = 0;
    for (int64_t p = grp.sub; p < end; p += grp.G) {
      const C v = C::load(xr + p * N);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const A c = to_compute(v.v[j]) - m;
        q += c * c;
      }
    }
    const A rs = drsqrt(grp.allsum(q, red) / A(d) + eps);
    if (end && grp.sub == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
    for (int64_t p = grp.sub; p < end; p += grp.G) {
      C v = C::load(xr + p * N);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const int64_t c = p * N + j;
        v.v[j] = from_compute<T>((to_compute(v.v[j]) - m) * rs * at_or(gamma, c, A(1)) + at_or(beta, c, A(0)));
      }
      v.store(y + r * d + p * N);
    }
  }
}

// (fit) Forward for rows of exactly G * PL packs, G and PL compile-time (study variant 6): the
// cached warp kernel without per-pack bounds, with pack addresses at constant offsets from one
// base and no grid-stride loop, so ptxas holds the row in far fewer registers (ptxas -v, sm_90,
// f32: 1024 columns 119 -> 58 registers, 128 columns as 8 lanes x 4 packs 58 -> 40) and more
// rows are in flight per SM (softmax.cu's fit kernel).
template <class T, int PL, int G>
__global__ void __launch_bounds__(kRowThreads)
    ln_fwd_fit_kernel(T *y, Compute<T> *mean, Compute<T> *rstd, const T *x, const T *gamma, const T *beta,
                      int64_t rows, Compute<T> eps) {
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  constexpr int64_t kD = (int64_t)G * PL * N;
  constexpr int kPerBlock = kRowThreads / G;
  pdl_enter();
  const int64_t r = (int64_t)blockIdx.x * kPerBlock + threadIdx.x / G;
  const bool valid = r < rows;  // lanes past the end still take part in the shuffles
  const int64_t col = (threadIdx.x % G) * N;
  Pack<T> v[PL];
  A s = 0;
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    if (valid) {
      v[k] = load128(x + r * kD + col + k * G * N);
#pragma unroll
      for (int j = 0; j < N; ++j) s += to_compute(v[k].v[j]);
    }
  }
  const A m = group_sum(s, G) / A(kD);
  A q = 0;
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    if (valid) {
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const A c = to_compute(v[k].v[j]) - m;
        q += c * c;
      }
    }
  }
  const A rs = drsqrt(group_sum(q, G) / A(kD) + eps);
  if (valid && threadIdx.x % G == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    if (valid) {
      const int64_t c = col + k * G * N;
      const Pack<T> w = pack_or(gamma, c, 1.f), b = pack_or(beta, c, 0.f);
      Pack<T> o;
#pragma unroll
      for (int j = 0; j < N; ++j)
        o.v[j] = from_compute<T>((to_compute(v[k].v[j]) - m) * rs * to_compute(w.v[j]) + to_compute(b.v[j]));
      store128(y + r * kD + c, o);
    }
  }
}

// (cluster) Forward split over a cluster of K blocks per row (sm_90; study variants 4, 5): block
// `rank` holds packs [rank * slice, (rank + 1) * slice) of the row in registers, PL per thread;
// the row sums go over the cluster through distributed shared memory (softmax.cu's cluster
// kernel). One DRAM read of x, and a K-th of a row per block keeps many rows in flight per SM.
// Grid: rows * K.
template <class T, int PL>
__global__ void __launch_bounds__(kRowThreads)
    ln_fwd_cluster_kernel(T *y, Compute<T> *mean, Compute<T> *rstd, const T *x, const T *gamma, const T *beta,
                          int64_t d, Compute<T> eps, int64_t slice) {
  namespace cg = cooperative_groups;
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  __shared__ A red[32];
  __shared__ A slot[2];
  cg::cluster_group cl = cg::this_cluster();
  const int64_t r = blockIdx.x / cl.num_blocks();
  const int64_t p0 = (int64_t)cl.block_rank() * slice;
  const int64_t p1 = min(p0 + slice, d / N);
  Pack<T> v[PL];
  A s = 0;
  slice_packs<PL>(p0, p1, [&](int k, int64_t p) {
    v[k] = load128(x + r * d + p * N);
#pragma unroll
    for (int j = 0; j < N; ++j) s += to_compute(v[k].v[j]);
  });
  const A m = cluster_allsum(s, red, &slot[0]) / A(d);
  A q = 0;
  slice_packs<PL>(p0, p1, [&](int k, int64_t p) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const A c = to_compute(v[k].v[j]) - m;
      q += c * c;
    }
  });
  const A rs = drsqrt(cluster_allsum(q, red, &slot[1]) / A(d) + eps);
  if (cl.block_rank() == 0 && threadIdx.x == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
  slice_packs<PL>(p0, p1, [&](int k, int64_t p) {
    const Pack<T> w = pack_or(gamma, p * N, 1.f), b = pack_or(beta, p * N, 0.f);
    Pack<T> o;
#pragma unroll
    for (int j = 0; j < N; ++j)
      o.v[j] = from_compute<T>((to_compute(v[k].v[j]) - m) * rs * to_compute(w.v[j]) + to_compute(b.v[j]));
    store128(y + r * d + p * N, o);
  });
  cl.sync();  // no block leaves while another may still read its slots
}

// The row statistics of the one-exchange cluster forward (ln_fwd_cluster1_kernel,
// ln_fwd_persist_kernel) from this block's PL packs v of the row and their sum s: the block's
// mean m_b and centred sum of squares q_b (kSlice elements), pushed to every block of the cluster
// (pairs: 2 K slots), then the K pairs merged in rank order into the row's mean m and rstd rs.
template <class T, int PL, class Share>
__device__ __forceinline__ void ln_cluster1_stats(const Pack<T> (&v)[PL], Compute<T> s, Compute<T> *red,
                                                  Compute<T> *pairs, unsigned K, int64_t d, Compute<T> eps,
                                                  Compute<T> &m, Compute<T> &rs, Share &&share) {
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  constexpr int kSlice = kRowThreads * PL * N;
  const A mb = block_allsum(s, red) / A(kSlice);
  A q = 0;
#pragma unroll
  for (int k = 0; k < PL; ++k) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const A c = to_compute(v[k].v[j]) - mb;
      q += c * c;
    }
  }
  q = block_allsum(q, red);
  share(mb, q);
  m = 0;
#pragma unroll 1
  for (unsigned b = 0; b < K; ++b) m += pairs[2 * b];
  m /= A(K);
  A ss = 0;
#pragma unroll 1
  for (unsigned b = 0; b < K; ++b) {
    const A dm = pairs[2 * b] - m;
    ss += pairs[2 * b + 1] + A(kSlice) * dm * dm;
  }
  rs = drsqrt(ss / A(d) + eps);
}

// (cluster, one exchange) Forward split over a cluster of K blocks per row with one cluster barrier
// per row (study variants 7, 8; softmax.cu's softmax_cluster1_kernel): rows of exactly K blocks x
// kRowThreads threads x PL packs. Each block takes the mean m_b of its slice and the centred sum
// of squares q_b about it (two passes over the registers), pushes (m_b, q_b) into the shared
// memory of every block of the cluster, and after the one barrier merges the K pairs in rank
// order from its own memory (Chan's merge for equal counts n: mean = sum m_b / K,
// q = sum q_b + n sum (m_b - mean)^2), so all blocks agree bit for bit and none reads another's
// memory after the barrier. Grid: rows * K. ptxas -v (sm_90, f32): 8 packs a thread spill 48
// bytes under a bound of 48 registers (5 blocks per SM; gamma and beta's packs are live with the
// row's), so they get 4 blocks per SM; 4 packs a thread take 40 registers, 6 blocks per SM.
template <class T, int PL>
__global__ void __launch_bounds__(kRowThreads, sizeof(T) == 4 ? (PL <= 4 ? 6 : 4) : (PL <= 4 ? 3 : 2))
    ln_fwd_cluster1_kernel(T *y, Compute<T> *mean, Compute<T> *rstd, const T *x, const T *gamma, const T *beta,
                           int64_t d, Compute<T> eps) {
  namespace cg = cooperative_groups;
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  constexpr int kMaxK = 8;
  constexpr int kStep = kRowThreads * N;             // elements between a thread's packs
  constexpr int kSlice = kRowThreads * PL * N;       // elements per block
  __shared__ A red[32];
  __shared__ A pairs[2 * kMaxK];  // (m_b, q_b) of block b of the cluster, written by block b
  cg::cluster_group cl = cg::this_cluster();
  const unsigned K = cl.num_blocks(), rank = cl.block_rank();
  const int64_t r = blockIdx.x / K;
  const int64_t col = (int64_t)rank * kSlice + threadIdx.x * N;  // this thread's first column
  const int64_t off = r * d + col;
  Pack<T> v[PL];
  A s = 0;
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    v[k] = load128(x + off + k * kStep);
#pragma unroll
    for (int j = 0; j < N; ++j) s += to_compute(v[k].v[j]);
  }
  A m, rs;
  ln_cluster1_stats<T, PL>(v, s, red, pairs, K, d, eps, m, rs,
                           [&](A a, A b) { cluster_share_pair(a, b, pairs, rank, K); });
  if (rank == 0 && threadIdx.x == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    const Pack<T> w = pack_or(gamma, col + k * kStep, 1.f), b = pack_or(beta, col + k * kStep, 0.f);
    Pack<T> o;
#pragma unroll
    for (int j = 0; j < N; ++j)
      o.v[j] = from_compute<T>((to_compute(v[k].v[j]) - m) * rs * to_compute(w.v[j]) + to_compute(b.v[j]));
    store128(y + off + k * kStep, o);
  }
}

// (cluster, one exchange, persistent) ln_fwd_cluster1_kernel's scheme in a grid of resident
// clusters that walk the rows (study variants 9-11; 11 is production's): cluster c takes rows
// c, c + C, ... (C clusters), and block `rank` always the same slice of each row, so it reads
// its slice of gamma and beta once into shared memory (2 x PL packs a thread, each thread reading
// back only its own) instead of once per row from L2: 8192 x 32768 float32 moves 3 GB through L2
// per launch with the per-row reads and 2 GB without. The row's pair exchange alternates between two slot
// arrays: a block can be one row ahead of another of its cluster, never two (each exchange ends
// in a cluster barrier). kPrefetch (variants 10, 11): the next row's packs are loaded before this
// row's reductions, so loads stay in flight through the barrier and the stores. kPush (variant
// 11): the exchange by ClusterPush (st.async completing on each block's mbarrier) instead of
// cluster_share_pair, whose barrier's release makes every thread wait for its stores of the
// previous row (Nsight Compute, H200, variant 10: 24% of the warps' cycles stalled on a memory
// barrier). Grid: at most the resident clusters, times K; dynamic shared memory
// 2 * PL * kRowThreads packs.
template <class T, int PL, bool kPrefetch, bool kPush>
__global__ void __launch_bounds__(kRowThreads, kPrefetch ? 2 : 3)
    ln_fwd_persist_kernel(T *y, Compute<T> *mean, Compute<T> *rstd, const T *x, const T *gamma, const T *beta,
                          int64_t rows, int64_t d, Compute<T> eps) {
  namespace cg = cooperative_groups;
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  constexpr int kMaxK = 8;
  constexpr int kStep = kRowThreads * N;        // elements between a thread's packs
  constexpr int kSlice = kRowThreads * PL * N;  // elements per block
  extern __shared__ __align__(16) unsigned char param_smem[];
  Pack<T> *gb = reinterpret_cast<Pack<T> *>(param_smem);  // gamma's packs, then beta's
  __shared__ A red[32];
  __shared__ __align__(16) A pairs[2][2 * kMaxK];
  __shared__ uint64_t bar;
  cg::cluster_group cl = cg::this_cluster();
  const unsigned K = cl.num_blocks(), rank = cl.block_rank();
  const int64_t stride = gridDim.x / K;
  const int64_t col = (int64_t)rank * kSlice + threadIdx.x * N;  // this thread's first column
  ClusterPush<A> push{&bar, rank, K};
  if constexpr (kPush) push.init();
  // Every block of the cluster must have begun before any writes into another's shared memory.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    gb[k * kRowThreads + threadIdx.x] = pack_or(gamma, col + k * kStep, 1.f);
    gb[(PL + k) * kRowThreads + threadIdx.x] = pack_or(beta, col + k * kStep, 0.f);
  }
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
  auto load = [&](Pack<T>(&v)[PL], int64_t r) {
#pragma unroll
    for (int k = 0; k < PL; ++k) v[k] = load128(x + r * d + col + k * kStep);
  };
  auto row = [&](const Pack<T>(&v)[PL], int64_t r, int it) {
    A s = 0;
#pragma unroll
    for (int k = 0; k < PL; ++k) {
#pragma unroll
      for (int j = 0; j < N; ++j) s += to_compute(v[k].v[j]);
    }
    A m, rs;
    A *const slots = pairs[it & 1];
    if constexpr (kPush) {
      ln_cluster1_stats<T, PL>(v, s, red, slots, K, d, eps, m, rs, [&](A a, A b) { push.exchange(a, b, slots); });
      push.done();  // this block has read its pairs
    } else {
      ln_cluster1_stats<T, PL>(v, s, red, slots, K, d, eps, m, rs,
                               [&](A a, A b) { cluster_share_pair(a, b, slots, rank, K); });
    }
    if (rank == 0 && threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      const Pack<T> w = gb[k * kRowThreads + threadIdx.x], b = gb[(PL + k) * kRowThreads + threadIdx.x];
      Pack<T> o;
#pragma unroll
      for (int j = 0; j < N; ++j)
        o.v[j] = from_compute<T>((to_compute(v[k].v[j]) - m) * rs * to_compute(w.v[j]) + to_compute(b.v[j]));
      store128(y + r * d + col + k * kStep, o);
    }
  };
  int64_t r = blockIdx.x / K;
  if constexpr (kPrefetch) {
    Pack<T> va[PL], vb[PL];
    if (r < rows) load(va, r);
    for (int it = 0; r < rows; it += 2) {
      const int64_t r1 = r + stride;
      if (r1 < rows) load(vb, r1);
      row(va, r, it);
      if (r1 >= rows) break;
      const int64_t r2 = r1 + stride;
      if (r2 < rows) load(va, r2);
      row(vb, r1, it + 1);
      r = r2;
    }
  } else {
    for (int it = 0; r < rows; r += stride, ++it) {
      Pack<T> v[PL];
      load(v, r);
      row(v, r, it);
    }
  }
  if constexpr (kPush) push.finish();
}

// One 16-byte pack of dx = rstd * (dy*gamma - mean(dy*gamma) - xhat * mean(dy*gamma*xhat)) (+ dx_add),
// from the pack's x and dy: c is its first column, i its first element; sg and sgx are the
// two row means.
template <class T>
__device__ __forceinline__ void ln_dx_store(T *dx, const T *dx_add, const T *gamma, const Pack<T> &vx,
                                            const Pack<T> &vd, int64_t c, int64_t i, Compute<T> m, Compute<T> rs,
                                            Compute<T> sg, Compute<T> sgx) {
  using A = Compute<T>;
  const Pack<T> w = pack_or(gamma, c, 1.f), add = pack_or(dx_add, i, 0.f);
  Pack<T> o;
#pragma unroll
  for (int j = 0; j < Pack<T>::N; ++j) {
    const A g = to_compute(vd.v[j]) * to_compute(w.v[j]);
    const A xh = (to_compute(vx.v[j]) - m) * rs;
    o.v[j] = from_compute<T>(rs * (g - sg - xh * sgx) + to_compute(add.v[j]));
  }
  store128(dx + i, o);
}

// (cached) dx: x and dy of the row held in registers (G * PL * N >= d, d % N == 0).
template <class T, int PL, bool BLOCK>
__global__ void __launch_bounds__(BLOCK ? kCachedBlockThreads : kRowThreads)
    ln_bwd_vec_kernel(T *dx, const T *dx_add, const T *dy, const T *x, const Compute<T> *mean, const Compute<T> *rstd,
                      const T *gamma, int64_t rows, int64_t d, int G) {
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  __shared__ A red[32];
  const RowGroup<BLOCK> grp(G);
  const int64_t packs = d / N;
  for (int64_t base = grp.first(); base < rows; base += grp.step()) {
    const int64_t r = grp.row(base);
    const bool valid = r < rows;
    const A m = valid ? mean[r] : A(0), rs = valid ? rstd[r] : A(0);
    Pack<T> vx[PL], vd[PL];
    A sg = 0, sgx = 0;
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      const int64_t p = grp.sub + (int64_t)k * grp.G;
      if (valid && p < packs) {
        vx[k] = load128(x + r * d + p * N);
        vd[k] = load128(dy + r * d + p * N);
        const Pack<T> w = pack_or(gamma, p * N, 1.f);
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const A g = to_compute(vd[k].v[j]) * to_compute(w.v[j]);
          sg += g;
          sgx += g * (to_compute(vx[k].v[j]) - m) * rs;
        }
      }
    }
    sg = grp.allsum(sg, red) / A(d);
    sgx = grp.allsum(sgx, red) / A(d);
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      const int64_t p = grp.sub + (int64_t)k * grp.G;
      if (valid && p < packs) {
        ln_dx_store(dx, dx_add, gamma, vx[k], vd[k], p * N, r * d + p * N, m, rs, sg, sgx);
      }
    }
  }
}

// (uncached) dx of any shape: one pass for the two row sums, one that writes dx (reading x and
// dy again, mostly from L2). VEC as in the forward.
template <class T, bool BLOCK, bool VEC>
__global__ void __launch_bounds__(BLOCK ? kBlockThreads : kRowThreads)
    ln_bwd_rows_kernel(T *dx, const T *dx_add, const T *dy, const T *x, const Compute<T> *mean, const Compute<T> *rstd,
                       const T *gamma, int64_t rows, int64_t d) {
  using A = Compute<T>;
  constexpr int N = VEC ? Pack<T>::N : 1;
  using C = Chunk<T, N>;
  __shared__ A red[32];
  const RowGroup<BLOCK> grp(32);
  for (int64_t base = grp.first(); base < rows; base += grp.step()) {
    const int64_t r = grp.row(base);
    const int64_t end = r < rows ? d / N : 0;
    const A m = end ? mean[r] : A(0), rs = end ? rstd[r] : A(0);
    const T *xr = x + r * d, *dyr = dy + r * d;
    A sg = 0, sgx = 0;
    for (int64_t p = grp.sub; p < end; p += grp.G) {
      const C vx = C::load(xr + p * N), vd = C::load(dyr + p * N);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const A g = to_compute(vd.v[j]) * at_or(gamma, p * N + j, A(1));
        sg += g;
        sgx += g * (to_compute(vx.v[j]) - m) * rs;
      }
    }
    sg = grp.allsum(sg, red) / A(d);
    sgx = grp.allsum(sgx, red) / A(d);
    for (int64_t p = grp.sub; p < end; p += grp.G) {
      const C vx = C::load(xr + p * N), vd = C::load(dyr + p * N);
      C o;
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const A g = to_compute(vd.v[j]) * at_or(gamma, p * N + j, A(1));
        o.v[j] = from_compute<T>(rs * (g - sg - (to_compute(vx.v[j]) - m) * rs * sgx) +
                                 at_or(dx_add, r * d + p * N + j, A(0)));
      }
      o.store(dx + r * d + p * N);
    }
  }
}

// One pack of a row in the one-pass LayerNorm backward (ln_bwd_fused_kernel, ln_bwd_cluster_kernel):
// adds g = dy gamma and g xhat to the row sums sg and sgx, and dy xhat and dy to the column sums
// sdx and sd of the pack's columns. w: the pack's gamma (ones without gamma).
template <class T>
__device__ __forceinline__ void ln_bwd_pack_sums(const Pack<T> &vx, const Pack<T> &vd, const Pack<T> &w, Compute<T> m,
                                                 Compute<T> rs, Compute<T> &sg, Compute<T> &sgx,
                                                 Compute<T> (&sdx)[Pack<T>::N], Compute<T> (&sd)[Pack<T>::N]) {
  using A = Compute<T>;
#pragma unroll
  for (int j = 0; j < Pack<T>::N; ++j) {
    const A dv = to_compute(vd.v[j]), xh = (to_compute(vx.v[j]) - m) * rs;
    const A g = dv * to_compute(w.v[j]);
    sg += g;
    sgx += g * xh;
    sdx[j] += dv * xh;
    sd[j] += dv;
  }
}

// (fused) dx and the dgamma/dbeta partials from one read of x and dy, for rows of exactly
// G x PL 16-byte packs (fused_shape: G <= kFusedThreads a power of two below 32 or a multiple of
// 32, PL <= kFusedMaxPL). A block of R = blockDim.x / G row groups takes rows base + q (group q),
// base = blockIdx.x * R, then gridDim.x * R further, and so on; lane `sub` of a group caches packs
// sub + k G of its row. Besides dx, each thread sums dy xhat and dy of its columns over the rows
// its group visits; at the end the block adds its R groups in order and writes the sums as row
// blockIdx.x of pa and pb (gridDim.x x d). The column sums of the backward then cost no second
// read of x and dy, and the grid depends only on the shape and the device, so the sums come out
// in the same order on every run.
template <class T, int PL>
__global__ void __launch_bounds__(kFusedThreads)
    ln_bwd_fused_kernel(T *dx, const T *dx_add, const T *dy, const T *x, const Compute<T> *mean,
                        const Compute<T> *rstd, const T *gamma, Compute<T> *pa, Compute<T> *pb, int64_t rows, int G) {
  pdl_enter();  // launched with launch_pdl_smem_if
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  __shared__ A red[2][kFusedThreads / 32];
  __shared__ A part[2][kFusedThreads][N];
  const int R = (int)blockDim.x / G, q = (int)threadIdx.x / G, sub = (int)threadIdx.x - q * G;
  const int64_t d = (int64_t)G * PL * N;
  A sdx[PL][N], sd[PL][N];  // column sums of dy xhat and dy
#pragma unroll
  for (int k = 0; k < PL; ++k)
#pragma unroll
    for (int j = 0; j < N; ++j) sdx[k][j] = sd[k][j] = A(0);
  for (int64_t base = (int64_t)blockIdx.x * R; base < rows; base += (int64_t)gridDim.x * R) {
    const int64_t r = base + q;
    const bool valid = r < rows;  // groups past the end still take part in the reductions
    const A m = valid ? mean[r] : A(0), rs = valid ? rstd[r] : A(0);
    Pack<T> vx[PL], vd[PL];
    A sg = 0, sgx = 0;
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      if (valid) {
        const int64_t c = (int64_t)(sub + k * G) * N;
        vx[k] = load128(x + r * d + c);
        vd[k] = load128(dy + r * d + c);
        ln_bwd_pack_sums(vx[k], vd[k], pack_or(gamma, c, 1.f), m, rs, sg, sgx, sdx[k], sd[k]);
      }
    }
    sg = group_sum(sg, G < 32 ? G : 32);
    sgx = group_sum(sgx, G < 32 ? G : 32);
    if (G > 32) {  // the group's warps are consecutive: add their sums in warp order
      const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5, per = G >> 5, first = warp / per * per;
      if (lane == 0) {
        red[0][warp] = sg;
        red[1][warp] = sgx;
      }
      __syncthreads();
      sg = sgx = A(0);
      for (int w = first; w < first + per; ++w) {
        sg += red[0][w];
        sgx += red[1][w];
      }
      __syncthreads();
    }
    sg /= A(d);
    sgx /= A(d);
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      if (valid) {
        const int64_t c = (int64_t)(sub + k * G) * N;
        ln_dx_store(dx, dx_add, gamma, vx[k], vd[k], c, r * d + c, m, rs, sg, sgx);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    if (R > 1) {
#pragma unroll
      for (int j = 0; j < N; ++j) {
        part[0][threadIdx.x][j] = sdx[k][j];
        part[1][threadIdx.x][j] = sd[k][j];
      }
      __syncthreads();
      if (q == 0) {
        for (int g = 1; g < R; ++g)
#pragma unroll
          for (int j = 0; j < N; ++j) {
            sdx[k][j] += part[0][g * G + sub][j];
            sd[k][j] += part[1][g * G + sub][j];
          }
      }
      __syncthreads();
    }
    if (q == 0) {
      const int64_t c = (int64_t)blockIdx.x * d + (int64_t)(sub + k * G) * N;
#pragma unroll
      for (int j = 0; j < N; ++j) {
        pa[c + j] = sdx[k][j];
        pb[c + j] = sd[k][j];
      }
    }
  }
}

// (cluster, fused) dx and the dgamma/dbeta partials for rows too wide for ln_bwd_fused_kernel
// (sm_90): a persistent grid of Q clusters of K blocks; cluster q takes rows q, q + Q, ..., and
// block `rank` of it packs [rank * slice, (rank + 1) * slice) of each, PL per thread. Each thread
// also sums dy xhat and dy of its packs over the cluster's rows, and at the end the block writes
// its slice of the cluster's partial row q of pa and pb (Q rows of d).
// x and dy reach shared memory by cp.async one row ahead: while a row's sums go over the cluster
// and its dx is written, the next row's loads are in flight. Each thread copies and reads only
// its own packs, so no block barrier guards the stages (dynamic shared memory: 2 stages x (x, dy)
// x PL x blockDim.x 16-byte packs). The two row sums go over the cluster by one push exchange
// (cluster_allsum2: every block writes its sums into every block's pairs, which each adds in rank
// order after the barrier); the pairs alternate between two arrays, so one cluster barrier per
// row is enough (a block writes an array again only two rows later, after every block has passed
// the barrier that follows its reads of it). Three blocks per SM (96 -> 80 registers, 3 x 64 KB
// of stages for f32 rows of 32768): 8192 x 32768 forward+backward on an H200 2.63 ms, against
// 2.72 ms with two blocks per SM and 2.87 ms with x and dy held in registers instead; this
// kernel alone 1434 us there (2.2 TB/s; Nsight Compute: 45% of the stalls wait on the stages).
// Three stages (two rows ahead) at two blocks per SM, 4 rows in flight per SM instead of 3, were
// slower: 1570 us. Pulling the other blocks' sums after the barrier (each thread reading K remote
// pairs) instead of the push: 2.51 against 2.24 ms forward+backward (H200, same build); with the
// pull, writing dy * gamma back into the stage so that dx needs no second read of gamma gave
// 2.42 ms, with the push no gain (2.25 ms), so it was not kept.
template <class T, int PL>
__global__ void __launch_bounds__(kFusedThreads, 3)
    ln_bwd_cluster_kernel(T *dx, const T *dx_add, const T *dy, const T *x, const Compute<T> *mean,
                          const Compute<T> *rstd, const T *gamma, Compute<T> *pa, Compute<T> *pb, int64_t rows,
                          int64_t d, int64_t slice) {
  namespace cg = cooperative_groups;
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  extern __shared__ __align__(16) unsigned char stage_bytes[];
  Pack<T> *stage = reinterpret_cast<Pack<T> *>(stage_bytes);
  __shared__ A red[64];
  __shared__ A pairs[2][2 * 8];  // [row parity][2 rank + (sg, sgx)] of each block (K <= 8)
  cg::cluster_group cl = cg::this_cluster();
  // Every block of the cluster must have begun before any writes into another's shared memory.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  const unsigned K = cl.num_blocks();
  const int64_t q = blockIdx.x / K, Q = gridDim.x / K;
  const int64_t p0 = (int64_t)cl.block_rank() * slice, p1 = min(p0 + slice, d / N);
  // this thread's pack k of array a (0: x, 1: dy) in stage s
  const auto at = [&](int s, int a, int k) -> Pack<T> & {
    return stage[((s * 2 + a) * PL + k) * (int)blockDim.x + (int)threadIdx.x];
  };
  const auto fetch = [&](int s, int64_t r) {
    if (r < rows) {
      slice_packs<PL>(p0, p1, [&](int k, int64_t p) {
        cp_async16(&at(s, 0, k), x + r * d + p * N);
        cp_async16(&at(s, 1, k), dy + r * d + p * N);
      });
    }
    cp_async_commit();
  };
  A sdx[PL][N], sd[PL][N];
#pragma unroll
  for (int k = 0; k < PL; ++k)
#pragma unroll
    for (int j = 0; j < N; ++j) sdx[k][j] = sd[k][j] = A(0);
  fetch(0, q);
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
  int s = 0;
  for (int64_t r = q; r < rows; r += Q, s ^= 1) {
    fetch(s ^ 1, r + Q);
    const A m = mean[r], rs = rstd[r];
    cp_async_wait<1>();  // this row's copies have landed
    A sg = 0, sgx = 0;
    slice_packs<PL>(p0, p1, [&](int k, int64_t p) {
      ln_bwd_pack_sums(at(s, 0, k), at(s, 1, k), pack_or(gamma, p * N, 1.f), m, rs, sg, sgx, sdx[k], sd[k]);
    });
    cluster_allsum2(sg, sgx, red, &pairs[s][0]);
    sg /= A(d);
    sgx /= A(d);
    slice_packs<PL>(p0, p1, [&](int k, int64_t p) {
      ln_dx_store(dx, dx_add, gamma, at(s, 0, k), at(s, 1, k), p * N, r * d + p * N, m, rs, sg, sgx);
    });
  }
  cp_async_wait<0>();
  slice_packs<PL>(p0, p1, [&](int k, int64_t p) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      pa[q * d + p * N + j] = sdx[k][j];
      pb[q * d + p * N + j] = sd[k][j];
    }
  });
}

// Column sums in a fixed order. Block (kColTile, LANES) owns columns blockIdx.x * 32 + tx
// and the rows [blockIdx.y * chunk, + chunk); lane ty sums rows ty, ty + LANES, ..., then the
// LANES lanes are added in order. term(r, c, a, b) adds row r's terms of column c to a and b;
// store(chunk, c, a, b) writes the chunk's sums.
template <class A, int LANES, class Term, class Store>
__global__ void __launch_bounds__(kColTile *LANES)
    column_sums_kernel(Term term, Store store, int64_t rows, int64_t d, int64_t chunk) {
  pdl_enter();  // launched with launch_pdl_smem_if
  __shared__ A sa[LANES][kColTile + 1], sb[LANES][kColTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = (int64_t)blockIdx.x * kColTile + tx;
  const int64_t r0 = (int64_t)blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
  A a = 0, b = 0;
  if (c < d) {
#pragma unroll 4
    for (int64_t r = r0 + ty; r < r1; r += LANES) term(r, c, a, b);
  }
  sa[ty][tx] = a;
  sb[ty][tx] = b;
  __syncthreads();
  if (ty == 0 && c < d) {
    for (int k = 1; k < LANES; ++k) {
      a += sa[k][tx];
      b += sb[k][tx];
    }
    store((int64_t)blockIdx.y, c, a, b);
  }
}

// Stage 1 terms: dy xhat and dy.
template <class T>
struct ParamTerm {
  const T *dy, *x;
  const Compute<T> *mean, *rstd;
  int64_t d;
  __device__ __forceinline__ void operator()(int64_t r, int64_t c, Compute<T> &a, Compute<T> &b) const {
    const Compute<T> g = to_compute(dy[r * d + c]);
    a += g * (to_compute(x[r * d + c]) - mean[r]) * rstd[r];
    b += g;
  }
};
template <class A>
struct PartialStore {
  A *pa, *pb;
  int64_t d;
  __device__ __forceinline__ void operator()(int64_t chunk, int64_t c, A a, A b) const {
    pa[chunk * d + c] = a;
    pb[chunk * d + c] = b;
  }
};
// Stage 2 terms: the partials of stage 1.
template <class A>
struct PartialTerm {
  const A *pa, *pb;
  int64_t d;
  __device__ __forceinline__ void operator()(int64_t r, int64_t c, A &a, A &b) const {
    a += pa[r * d + c];
    b += pb[r * d + c];
  }
};
template <class T>
struct ParamStore {
  T *dgamma, *dbeta;
  __device__ __forceinline__ void operator()(int64_t, int64_t c, Compute<T> a, Compute<T> b) const {
    if (dgamma) dgamma[c] = from_compute<T>(a);
    if (dbeta) dbeta[c] = from_compute<T>(b);
  }
};

// ---- gelu and the causal mask -----------------------------------------------------------------

// out = gelu(x) (BWD false) or gelu'(x) * dy (BWD true) over n elements. VEC: every pointer
// 16-byte aligned; block-local tiles of THREADS x UNROLL packs (block_tile, as the flat maps of
// elementwise.cu); the n % N tail is done by the first threads of block 0. Without VEC a
// grid-stride loop of single elements. THREADS and UNROLL are the study's knobs (mt_study_gelu).
template <class T, bool VEC, bool BWD, int THREADS = kElemThreads, int UNROLL = kElemUnroll>
__global__ void __launch_bounds__(THREADS) gelu_kernel(T *out, const T *x, const T *dy, int64_t n) {
  pdl_enter();  // the VEC launch is launch_pdl_wide's
  auto f = [](T xv, T dv) -> T {
    if constexpr (BWD) return from_compute<T>(gelu_grad(to_compute(xv), to_compute(dv)));
    else return from_compute<T>(gelu_value(to_compute(xv)));
  };
  if constexpr (VEC) {
    map_packs<THREADS, UNROLL, BWD>(out, x, dy, n, f);
  } else {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
      out[i] = f(x[i], BWD ? dy[i] : x[i]);
  }
}

__global__ void __launch_bounds__(kElemThreads) causal_mask_kernel(uint8_t *out, int64_t t, int64_t s) {
  const int64_t n = t * s, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t q = i / s, k = i - q * s;
    out[i] = k > q + (s - t) ? 1 : 0;
  }
}

// ---- shapes and dispatch ----------------------------------------------------------------------

// How the register-cached kernels cover a row of `packs` 16-byte packs: lanes G per row and PL
// packs per lane. Rows up to kWarpMaxCols elements take G <= 32 lanes of a warp (warp_shape:
// the fewest lanes that hold the row in min_pl packs each, or 32 lanes of several packs); wider
// rows a block of `threads` (a multiple of 32, <= 1024) with the fewest packs per thread,
// PL <= max_pl (block_shape). False when the row does not fit.
struct RowShape {
  bool block = false;
  int G = 32, PL = 1, threads = kRowThreads;
};
bool cached_shape(int64_t d, int n_per_pack, int max_block_pl, RowShape &s, int min_pl = 1) {
  const int64_t packs = d / n_per_pack;
  if (d <= kWarpMaxCols) {
    s.block = false;
    s.threads = kRowThreads;
    warp_shape(packs, s.G, s.PL, min_pl);
    return true;
  }
  s.block = true;
  if (!block_shape(packs, max_block_pl, s.PL, s.threads)) return false;
  s.G = s.threads;
  return true;
}

// Launches the cached kernel of a row shape: Kernel<PL, BLOCK>::launch(grid, threads, G).
// kWarpPL / kBlockPL: the largest PL the warp and block paths can ask for.
template <int kWarpPL, int kBlockPL, class Launch>
void launch_cached(const RowShape &s, int64_t rows, Launch &&launch) {
  if (s.block) {
    dispatch_pl<kBlockPL>(s.PL, [&](auto pl) { launch(pl, std::true_type{}, grid_of(rows), s.threads, s.G); });
  } else {
    const int64_t per_block = kRowThreads / s.G;
    dispatch_pl<kWarpPL>(s.PL, [&](auto pl) {
      launch(pl, std::false_type{}, grid_of((rows + per_block - 1) / per_block), kRowThreads, s.G);
    });
  }
}

// A persistent cluster kernel (ln_fwd_persist_kernel) over `rows` rows: as many clusters of K
// blocks as the GPU holds at once with `smem` bytes of dynamic shared memory a block, at most one
// per row. False (nothing launched) where the runtime refuses that much shared memory.
template <auto Kernel, class... Args>
bool launch_persist(Context &c, int K, size_t smem, int64_t rows, Args &&...args) {
  if (smem > 48 * 1024 && !allow_smem<Kernel>(smem)) return false;
  const int64_t clusters = std::min<int64_t>(rows, resident_clusters<Kernel>(kRowThreads, K, smem));
  MT_CUDA_CHECK(launch_cluster(Kernel, (unsigned)(clusters * K), kRowThreads, K, smem, c.stream,
                               std::forward<Args>(args)...));
  return true;
}

// One forward launch of study variant `variant` (0: the production choice, see the file's doc).
// Returns false when the variant cannot take the shape: 1-6 need 16-byte rows and pointers and a 2-
// or 4-byte dtype; 1, 2 and 6 rows of at most kWarpMaxCols columns, 3-5 and 7-11 wider rows; 9-11
// also decline where the runtime refuses their shared memory.
//   1, 2  the register-cached warp kernel with at least 2 / 4 packs per lane (fewer lanes per row)
//   3     the uncached block-per-row kernel, 16-byte accesses, re-reading the row from L2
//   4, 5  clusters of 8 / 4 blocks per row (ln_fwd_cluster_kernel)
//   6     rows of exactly 8 x 4, 16 x 4, 32 x 4 or 32 x 8 packs (warp_shape with at least 4 packs
//         per lane) in ln_fwd_fit_kernel
//   7, 8  clusters of 4 / 8 blocks per row with one cluster exchange (ln_fwd_cluster1_kernel), rows
//         of exactly K x 256 threads x 1, 2, 4 or 8 packs
//   9, 10 7's clusters of 4 in a persistent grid with gamma and beta in shared memory
//         (ln_fwd_persist_kernel), 10 loading the next row before this row's reductions
//   11    10 with the pair exchange by st.async into each block's mbarrier and a relaxed cluster
//         barrier split across the row's stores (ClusterPush, row_stats.cuh)
template <class T>
bool layer_norm_t(Context &c, int variant, T *y, Compute<T> *mean, Compute<T> *rstd, const T *x, const T *gamma,
                  const T *beta, int64_t rows, int64_t d, double eps) {
  using A = Compute<T>;
  const bool vec = vec_ok<T>(d, {y, x, gamma, beta});
  // Production takes the exact-fit kernel where a row is exactly G x PL packs: bw_study.py (H200,
  // f32) 1.48x / 5.38x PyTorch at 65536 x 1024 / 262144 x 128 against 1.42x / 4.72x.
  if (variant == 0 && vec && d <= kWarpMaxCols && layer_norm_t<T>(c, 6, y, mean, rstd, x, gamma, beta, rows, d, eps))
    return true;
  // From 32768 columns on Hopper, float32 rows that fit it exactly take persistent clusters of 4
  // blocks with one exchange, gamma and beta read once into shared memory, the next row loaded
  // early and the exchange by st.async (variant 11): bw_study.py (H200) 8192 x 32768: the
  // block-per-row kernel 683.0 us (75% of copy), clusters of 4 with one exchange (variant 7)
  // 571.6 us (90%), variant 10 563.8 us (92%); in a later build 10 565.1 us (91%) against 11
  // 558.0 us (93%). The other widths and dtypes were not timed.
  if (variant == 0 && vec && sizeof(T) == 4 && d >= kFwdCachedMaxCols && c.cc_major >= 9 &&
      (layer_norm_t<T>(c, 11, y, mean, rstd, x, gamma, beta, rows, d, eps) ||
       layer_norm_t<T>(c, 7, y, mean, rstd, x, gamma, beta, rows, d, eps)))
    return true;
  bool done = false;
  if constexpr (kVecType<T>) {
    constexpr int N = Pack<T>::N;
    constexpr int kWarpPL = (int)(kWarpMaxCols / (32 * N));
    constexpr int kBlockPL = (int)(kFwdCachedMaxCols / (kCachedBlockThreads * N));
    RowShape s;
    const bool cached = variant <= 2 && vec && (variant == 0 || d <= kWarpMaxCols) &&
                        cached_shape(d, N, kBlockPL, s, variant == 0 ? 1 : 2 * variant);
    if (cached) {
      launch_cached<kWarpPL, kBlockPL>(s, rows, [&](auto pl, auto block, unsigned grid, int threads, int G) {
        ln_fwd_vec_kernel<T, decltype(pl)::value, decltype(block)::value>
            <<<grid, threads, 0, c.stream>>>(y, mean, rstd, x, gamma, beta, rows, d, (A)eps, G);
      });
      done = true;
    } else if (variant == 3 && vec && d > kWarpMaxCols) {
      ln_fwd_rows_kernel<T, true, true><<<grid_of(rows), kBlockThreads, 0, c.stream>>>(y, mean, rstd, x, gamma, beta,
                                                                                     rows, d, (A)eps);
      done = true;
    } else if (variant == 6 && vec && d <= kWarpMaxCols) {
      const bool fits = dispatch_fit(d / N, [&](auto g, auto pl) {
        constexpr int kG = decltype(g)::value;
        MT_CUDA_CHECK(launch_pdl_wide(c, ln_fwd_fit_kernel<T, decltype(pl)::value, kG>,
                                      dim3(grid_of((rows + kRowThreads / kG - 1) / (kRowThreads / kG))), kRowThreads,
                                      y, mean, rstd, x, gamma, beta, rows, (A)eps));
      });
      if (!fits) return false;
      done = true;
    } else if (variant >= 4 && variant != 6 && vec && d > kWarpMaxCols) {
      constexpr int kMaxPL = 8;
      const int K = variant == 4 || variant == 8 ? 8 : 4;  // 9-11: clusters of 4
      int64_t slice = 0;
      int PL = 0, threads = 0;
      if (!cluster_shape(d / N, K, kMaxPL, kRowThreads, slice, PL, threads) || rows > INT_MAX / K) return false;
      if (variant >= 7 && (threads != kRowThreads || slice != (int64_t)PL * threads || slice * K != d / N))
        return false;  // (cluster, one exchange) takes exact fits only
      bool launched = true;
      dispatch_pl<kMaxPL>(PL, [&](auto pl) {
        constexpr int kPL = decltype(pl)::value;
        if (variant <= 5)
          MT_CUDA_CHECK(launch_cluster(ln_fwd_cluster_kernel<T, kPL>, (unsigned)(rows * K), threads, K, 0, c.stream,
                                       y, mean, rstd, x, gamma, beta, d, (A)eps, slice));
        else if (variant <= 8)
          MT_CUDA_CHECK(launch_cluster(ln_fwd_cluster1_kernel<T, kPL>, (unsigned)(rows * K), threads, K, 0, c.stream,
                                       y, mean, rstd, x, gamma, beta, d, (A)eps));
        else if (variant == 9)
          launched = launch_persist<ln_fwd_persist_kernel<T, kPL, false, false>>(
              c, K, 2 * slice * sizeof(Pack<T>), rows, y, mean, rstd, x, gamma, beta, rows, d, (A)eps);
        else if (variant == 10)
          launched = launch_persist<ln_fwd_persist_kernel<T, kPL, true, false>>(
              c, K, 2 * slice * sizeof(Pack<T>), rows, y, mean, rstd, x, gamma, beta, rows, d, (A)eps);
        else
          launched = launch_persist<ln_fwd_persist_kernel<T, kPL, true, true>>(
              c, K, 2 * slice * sizeof(Pack<T>), rows, y, mean, rstd, x, gamma, beta, rows, d, (A)eps);
      });
      if (!launched) return false;  // 9-11: no shared memory for gamma and beta (production takes 7)
      done = true;
    }
  }
  if (done) {
  } else if (variant != 0) {
    return false;
  } else if (d <= kWarpMaxCols) {
    const int64_t per_block = kRowThreads / 32;
    ln_fwd_rows_kernel<T, false, false><<<grid_of((rows + per_block - 1) / per_block), kRowThreads, 0, c.stream>>>(
        y, mean, rstd, x, gamma, beta, rows, d, (A)eps);
  } else if (vec) {
    if constexpr (kVecType<T>)
      ln_fwd_rows_kernel<T, true, true><<<grid_of(rows), kBlockThreads, 0, c.stream>>>(y, mean, rstd, x, gamma, beta,
                                                                                     rows, d, (A)eps);
  } else {
    ln_fwd_rows_kernel<T, true, false><<<grid_of(rows), kBlockThreads, 0, c.stream>>>(y, mean, rstd, x, gamma, beta,
                                                                                      rows, d, (A)eps);
  }
  MT_CUDA_CHECK_LAUNCH("layer_norm");
  return true;
}

template <class T>
void layer_norm_dx_t(Context &c, T *dx, const T *dx_add, const T *dy, const T *x, const Compute<T> *mean,
                     const Compute<T> *rstd, const T *gamma, int64_t rows, int64_t d) {
  RowShape s;
  bool done = false;
  if constexpr (kVecType<T>) {
    constexpr int N = Pack<T>::N;
    constexpr int kWarpPL = (int)(kWarpMaxCols / (32 * N));
    constexpr int kBlockPL = (int)(kBwdCachedMaxCols / (kCachedBlockThreads * N));
    if (vec_ok<T>(d, {dx, dx_add, dy, x, gamma}) && cached_shape(d, N, kBlockPL, s)) {
      launch_cached<kWarpPL, kBlockPL>(s, rows, [&](auto pl, auto block, unsigned grid, int threads, int G) {
        ln_bwd_vec_kernel<T, decltype(pl)::value, decltype(block)::value>
            <<<grid, threads, 0, c.stream>>>(dx, dx_add, dy, x, mean, rstd, gamma, rows, d, G);
      });
      done = true;
    }
  }
  if (done) {
  } else if (d <= kWarpMaxCols) {
    const int64_t per_block = kRowThreads / 32;
    ln_bwd_rows_kernel<T, false, false><<<grid_of((rows + per_block - 1) / per_block), kRowThreads, 0, c.stream>>>(
        dx, dx_add, dy, x, mean, rstd, gamma, rows, d);
  } else if (vec_ok<T>(d, {dx, dx_add, dy, x, gamma})) {
    if constexpr (kVecType<T>)
      ln_bwd_rows_kernel<T, true, true><<<grid_of(rows), kBlockThreads, 0, c.stream>>>(dx, dx_add, dy, x, mean, rstd,
                                                                                     gamma, rows, d);
  } else {
    ln_bwd_rows_kernel<T, true, false><<<grid_of(rows), kBlockThreads, 0, c.stream>>>(dx, dx_add, dy, x, mean, rstd,
                                                                                      gamma, rows, d);
  }
  MT_CUDA_CHECK_LAUNCH("layer_norm backward");
}

// Stage 2 of dgamma, dbeta: the fixed-order column sums of `parts` partial rows (pa, pb: parts
// rows of d), 32 lanes per column.
template <class T>
void param_sums_of_partials(Context &c, T *dgamma, T *dbeta, const Compute<T> *pa, const Compute<T> *pb,
                            int64_t parts, int64_t d) {
  using A = Compute<T>;
  MT_CUDA_CHECK(launch_pdl_smem_if(c.pdl, c, column_sums_kernel<A, 32, PartialTerm<A>, ParamStore<T>>,
                                   dim3((unsigned)((d + kColTile - 1) / kColTile), 1), dim3(kColTile, 32), 0,
                                   PartialTerm<A>{pa, pb, d}, ParamStore<T>{dgamma, dbeta}, parts, d, parts));
  MT_CUDA_CHECK_LAUNCH("layer_norm backward (dgamma, dbeta)");
}

// dgamma, dbeta: stage 1 over chunks of rows sized so that the grid is ~8 blocks per SM (at
// least 8 rows a chunk), stage 2 over the chunk partials with 32 lanes per column (narrow rows
// leave a few blocks to add hundreds of partial rows: with 8 lanes each thread walked an eighth
// of them, one load after another). The chunking depends only on the shape and the SM count,
// so a shape gives the same sums in the same order on every run.
template <class T>
void layer_norm_params_t(Context &c, T *dgamma, T *dbeta, const T *dy, const T *x, const Compute<T> *mean,
                         const Compute<T> *rstd, int64_t rows, int64_t d) {
  using A = Compute<T>;
  const int64_t tiles = (d + kColTile - 1) / kColTile;
  const int64_t want = std::max<int64_t>(1, (int64_t)c.sm_count * 8 / tiles);
  const int64_t chunks0 = std::min<int64_t>(want, std::max<int64_t>(1, rows / 8));
  const int64_t chunk = (rows + chunks0 - 1) / chunks0, chunks = (rows + chunk - 1) / chunk;
  MT_CHECK(tiles <= INT_MAX && chunks <= 65535, INVALID_ARGUMENT, "cuda layer_norm backward: d %lld is too large",
           (long long)d);
  PoolBuffer partial(2 * chunks * d * (int64_t)sizeof(A));
  A *pa = partial.as<A>(), *pb = pa + chunks * d;
  MT_CUDA_CHECK(launch_pdl_smem_if(c.pdl, c, column_sums_kernel<A, kColLanes, ParamTerm<T>, PartialStore<A>>,
                                   dim3((unsigned)tiles, (unsigned)chunks), dim3(kColTile, kColLanes), 0,
                                   ParamTerm<T>{dy, x, mean, rstd, d}, PartialStore<A>{pa, pb, d}, rows, d, chunk));
  MT_CUDA_CHECK_LAUNCH("layer_norm backward (dgamma, dbeta partials)");
  param_sums_of_partials<T>(c, dgamma, dbeta, pa, pb, chunks, d);
}

// Lanes per row G and packs per lane PL of the fused backward: rows of exactly G x PL packs,
// PL <= kFusedMaxPL, G <= kFusedThreads a power of two below 32 or a multiple of 32, the fewest
// packs per lane; the block holds kFusedThreads / G row groups (one group where G does not divide
// kFusedThreads). False when no such split exists.
bool fused_shape(int64_t packs, int &G, int &PL, int &threads) {
  for (PL = 1; PL <= kFusedMaxPL; ++PL) {
    if (packs % PL) continue;
    const int64_t g = packs / PL;
    if (g > kFusedThreads || !(g % 32 == 0 || (g < 32 && (g & (g - 1)) == 0))) continue;
    G = (int)g;
    threads = G * std::max(1, kFusedThreads / G);
    return true;
  }
  return false;
}

// dx, dgamma and dbeta in ln_bwd_fused_kernel (one read of x and dy) and the fixed-order sum of
// its per-block partial rows. The grid is one wave of resident blocks at most. False (nothing
// launched) when the shape or the pointers do not suit it.
template <class T>
bool layer_norm_fused_bwd_t(Context &c, T *dx, const T *dx_add, T *dgamma, T *dbeta, const T *dy, const T *x,
                            const Compute<T> *mean, const Compute<T> *rstd, const T *gamma, int64_t rows, int64_t d) {
  if constexpr (!kVecType<T>) {
    return false;
  } else {
    using A = Compute<T>;
    constexpr int N = Pack<T>::N;
    int G = 0, PL = 0, threads = 0;
    if (!vec_ok<T>(d, {dx, dx_add, dy, x, gamma}) || !fused_shape(d / N, G, PL, threads)) return false;
    const int64_t R = threads / G;
    const auto launch = [&](auto pl) {
      constexpr auto kernel = ln_bwd_fused_kernel<T, decltype(pl)::value>;
      const int64_t cap = (int64_t)c.sm_count * resident_blocks_per_sm<kernel>(threads);
      const int64_t grid = std::min((rows + R - 1) / R, cap);
      PoolBuffer partial(2 * grid * d * (int64_t)sizeof(A));
      A *pa = partial.as<A>(), *pb = pa + grid * d;
      MT_CUDA_CHECK(launch_pdl_smem_if(c.pdl, c, kernel, dim3((unsigned)grid), dim3(threads), 0, dx, dx_add, dy, x,
                                       mean, rstd, gamma, pa, pb, rows, G));
      MT_CUDA_CHECK_LAUNCH("layer_norm backward (dx, dgamma and dbeta partials)");
      param_sums_of_partials<T>(c, dgamma, dbeta, pa, pb, grid, d);
    };
    static_assert(kFusedMaxPL == 4, "the switch below names each packs-per-lane count");
    switch (PL) {
      case 1: launch(IntC<1>{}); break;
      case 2: launch(IntC<2>{}); break;
      case 3: launch(IntC<3>{}); break;
      default: launch(IntC<kFusedMaxPL>{}); break;
    }
    return true;
  }
}

// dx, dgamma and dbeta in ln_bwd_cluster_kernel for rows of more than kFusedThreads x kFusedMaxPL
// packs (compute capability 9.0 and later): the fewest blocks per cluster K (2, 4 or 8) whose slice
// of a row fits kFusedThreads threads of at most kClusterFloats / N packs each (their column sums
// sit in registers), and as many clusters as are resident at once, at most one per row; then
// the fixed-order sum of the clusters' partial rows. False (nothing launched) when the shape,
// the pointers or the GPU do not suit it, or the runtime refuses the stages' shared memory.
template <class T>
bool layer_norm_cluster_bwd_t(Context &c, T *dx, const T *dx_add, T *dgamma, T *dbeta, const T *dy, const T *x,
                              const Compute<T> *mean, const Compute<T> *rstd, const T *gamma, int64_t rows,
                              int64_t d) {
  if constexpr (!kVecType<T>) {
    return false;
  } else {
    using A = Compute<T>;
    constexpr int N = Pack<T>::N, kMaxPL = kClusterFloats / N;
    if (c.cc_major < 9 || !vec_ok<T>(d, {dx, dx_add, dy, x, gamma})) return false;
    const int64_t packs = d / N;
    // narrower rows: the fused kernel, or the separate passes, which need no barrier per row
    if (packs <= (int64_t)kFusedThreads * kFusedMaxPL) return false;
    int K = 2;
    while (K < 8 && (packs + K - 1) / K > (int64_t)kFusedThreads * kMaxPL) K *= 2;
    int64_t slice = 0;
    int PL = 0, threads = 0;
    if (!cluster_shape(packs, K, kMaxPL, kFusedThreads, slice, PL, threads)) return false;
    bool launched = false;
    dispatch_pl<kMaxPL>(PL, [&](auto pl) {
      constexpr int kPL = decltype(pl)::value;
      constexpr auto kernel = ln_bwd_cluster_kernel<T, kPL>;
      const size_t smem = (size_t)2 * 2 * kPL * threads * sizeof(Pack<T>);
      // the stages need more than 48 KB: where the runtime refuses, the separate passes run
      if (!allow_smem<kernel>((size_t)2 * 2 * kPL * kFusedThreads * sizeof(Pack<T>))) return;
      const int64_t Q = std::min<int64_t>(rows, resident_clusters<kernel>(threads, K, smem));
      PoolBuffer partial(2 * Q * d * (int64_t)sizeof(A));
      A *pa = partial.as<A>(), *pb = pa + Q * d;
      MT_CUDA_CHECK(launch_cluster(kernel, (unsigned)(Q * K), threads, K, smem, c.stream, dx, dx_add, dy, x, mean,
                                   rstd, gamma, pa, pb, rows, d, slice));
      param_sums_of_partials<T>(c, dgamma, dbeta, pa, pb, Q, d);
      launched = true;
    });
    return launched;
  }
}

// Production: tiles of kElemThreads x kElemUnroll packs (bw_study.py on an H100, 64M f32: one
// pack per thread 181.5 us forward and 266.7 us backward, two 183.6 and 268.0 us, PyTorch 182.4
// and 268.0 us); the study's variants (mt_study_gelu) set other tiles.
template <class T, bool BWD, int THREADS = kElemThreads, int UNROLL = kElemUnroll>
void gelu_t(Context &c, T *out, const T *x, const T *dy, int64_t n) {
  const bool vec = is_aligned16(out) && is_aligned16(x) && is_aligned16(dy);
  if (vec) {
    MT_CUDA_CHECK(launch_pdl_wide(c, gelu_kernel<T, true, BWD, THREADS, UNROLL>,
                                  dim3(tiles_of(n / Pack<T>::N, THREADS, UNROLL)), THREADS, out, x, dy, n));
  } else {
    constexpr auto kernel = gelu_kernel<T, false, BWD>;
    kernel<<<wave_grid<kernel>(c.sm_count, n, kElemThreads, kElemThreads), kElemThreads, 0, c.stream>>>(out, x, dy, n);
  }
  MT_CUDA_CHECK_LAUNCH(BWD ? "gelu backward" : "gelu");
}

void check_sizes(const char *op, int64_t a, int64_t b) {
  MT_CHECK(a >= 0 && b >= 0, INVALID_ARGUMENT, "cuda %s: negative size (%lld, %lld)", op, (long long)a, (long long)b);
}

}  // namespace

// ---- launchers --------------------------------------------------------------------------------

void layer_norm(Context &c, void *y, void *mean, void *rstd, const void *x, const void *gamma, const void *beta,
                int64_t rows, int64_t d, double eps, DType dtype) {
  NvtxRange range("layer_norm");
  check_sizes("layer_norm", rows, d);
  if (rows == 0 || d == 0) return;
  MT_CHECK(y && mean && rstd && x, INVALID_ARGUMENT, "cuda layer_norm: null buffer (y=%p, mean=%p, rstd=%p, x=%p)", y,
           mean, rstd, x);
  dispatch_float(dtype, "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Compute<T>;
    const bool ok = layer_norm_t<T>(c, 0, static_cast<T *>(y), static_cast<A *>(mean), static_cast<A *>(rstd),
                                     static_cast<const T *>(x), static_cast<const T *>(gamma),
                                     static_cast<const T *>(beta), rows, d, eps);
    MT_ASSERT(ok);
  });
}

void layer_norm_backward(Context &c, void *dx, const void *dx_add, void *dgamma, void *dbeta, const void *dy,
                         const void *x, const void *mean, const void *rstd, const void *gamma, int64_t rows, int64_t d,
                         DType dtype) {
  NvtxRange range("layer_norm_backward");
  check_sizes("layer_norm backward", rows, d);
  if (rows == 0 || d == 0) return;
  MT_CHECK(dy && x && mean && rstd, INVALID_ARGUMENT,
           "cuda layer_norm backward: null buffer (dy=%p, x=%p, mean=%p, rstd=%p)", dy, x, mean, rstd);
  dispatch_float(dtype, "layer_norm backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Compute<T>;
    T *dxt = static_cast<T *>(dx), *dg = static_cast<T *>(dgamma), *db = static_cast<T *>(dbeta);
    const T *dyt = static_cast<const T *>(dy), *xt = static_cast<const T *>(x), *add = static_cast<const T *>(dx_add),
            *g = static_cast<const T *>(gamma);
    const A *m = static_cast<const A *>(mean), *rs = static_cast<const A *>(rstd);
    // dx with a parameter gradient: one read of x and dy where a one-pass kernel takes the shape
    if (dx && (dgamma || dbeta) &&
        (layer_norm_fused_bwd_t<T>(c, dxt, add, dg, db, dyt, xt, m, rs, g, rows, d) ||
         layer_norm_cluster_bwd_t<T>(c, dxt, add, dg, db, dyt, xt, m, rs, g, rows, d)))
      return;
    if (dx) layer_norm_dx_t<T>(c, dxt, add, dyt, xt, m, rs, g, rows, d);
    if (dgamma || dbeta) layer_norm_params_t<T>(c, dg, db, dyt, xt, m, rs, rows, d);
  });
}

void gelu(Context &c, void *y, const void *x, int64_t n, DType dtype) {
  NvtxRange range("gelu");
  check_sizes("gelu", n, 0);
  if (n == 0) return;
  MT_CHECK(y && x, INVALID_ARGUMENT, "cuda gelu: null buffer (y=%p, x=%p)", y, x);
  dispatch_float(dtype, "gelu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gelu_t<T, false>(c, static_cast<T *>(y), static_cast<const T *>(x), nullptr, n);
  });
}

void gelu_backward(Context &c, void *dx, const void *dy, const void *x, int64_t n, DType dtype) {
  NvtxRange range("gelu_backward");
  check_sizes("gelu backward", n, 0);
  if (n == 0) return;
  MT_CHECK(dx && dy && x, INVALID_ARGUMENT, "cuda gelu backward: null buffer (dx=%p, dy=%p, x=%p)", dx, dy, x);
  dispatch_float(dtype, "gelu backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gelu_t<T, true>(c, static_cast<T *>(dx), static_cast<const T *>(x), static_cast<const T *>(dy), n);
  });
}

void causal_mask(Context &c, uint8_t *out, int64_t t, int64_t s) {
  NvtxRange range("causal_mask");
  check_sizes("causal_mask", t, s);
  if (t == 0 || s == 0) return;
  MT_CHECK(out, INVALID_ARGUMENT, "cuda causal_mask: null buffer");
  constexpr auto kernel = causal_mask_kernel;
  kernel<<<wave_grid<kernel>(c.sm_count, t * s, kElemThreads, kElemThreads), kElemThreads, 0, c.stream>>>(out, t, s);
  MT_CUDA_CHECK_LAUNCH("causal_mask");
}

}  // namespace cuda
}  // namespace mt

// ---- the study hook (backend/cuda/study.cuh has the common rules) ----------------------------------
//
// mt_study_layer_norm: the layer_norm forward of study variant `variant` (layer_norm_t's list; 0
// is what mt_layer_norm runs) on device buffers of dtype (F32, F64, F16, BF16), borrowed for the
// call and queued on the library's stream: y, x (rows, d); gamma, beta (d) or NULL; mean, rstd
// (rows) in float (double for F64). Returns 0, or MT_ERR_UNSUPPORTED for a variant that cannot
// take the shape, or another mt_status value; mt_last_error() says why.
extern "C" MT_API int mt_study_layer_norm(void *y, void *mean, void *rstd, const void *x, const void *gamma,
                                          const void *beta, int64_t rows, int64_t d, double eps, int32_t dtype,
                                          int32_t variant) {
  using namespace mt;
  using namespace mt::cuda;
  return study_entry("mt_study_layer_norm", [&] {
    check_variant(variant, 11);
    MT_CHECK(dtype >= 0 && dtype < kNumDTypes, DTYPE, "invalid dtype %d", (int)dtype);
    MT_CHECK(rows >= 0 && d >= 0, INVALID_ARGUMENT, "negative size (rows=%lld, d=%lld)", (long long)rows,
             (long long)d);
    if (rows == 0 || d == 0) return;
    MT_CHECK(y && mean && rstd && x, INVALID_ARGUMENT, "null buffer (y=%p, mean=%p, rstd=%p, x=%p)", y, mean, rstd, x);
    NvtxRange range("study_layer_norm");
    Context &c = context();
    dispatch_float((DType)dtype, "study_layer_norm", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = Compute<T>;
      const bool ok = layer_norm_t<T>(c, variant, static_cast<T *>(y), static_cast<A *>(mean),
                                      static_cast<A *>(rstd), static_cast<const T *>(x),
                                      static_cast<const T *>(gamma), static_cast<const T *>(beta), rows, d, eps);
      MT_CHECK(ok, UNSUPPORTED, "variant %d cannot take %lld x %lld %s at y=%p, x=%p, gamma=%p, beta=%p",
               (int)variant, (long long)rows, (long long)d, dtype_name((DType)dtype), y, x, gamma, beta);
    });
  });
}

// mt_study_gelu: out (n) = gelu(x) (backward 0) or gelu'(x) * dy (backward 1, dy a real gradient)
// on device buffers of dtype (F32, F64, F16, BF16), borrowed for the call and queued on the
// library's stream; the kernels of mt_gelu and of its backward. variant:
//   0  production: block-local tiles of 256 threads x 1 pack per operand (block_tile)
//   1  tiles of 256 threads x 4 packs
//   2  tiles of 256 threads x 2 packs
//   3  tiles of 128 threads x 2 packs
// Variants 1-3 need 16-byte aligned buffers (MT_ERR_UNSUPPORTED otherwise).
extern "C" MT_API int mt_study_gelu(void *out, const void *x, const void *dy, int64_t n, int32_t dtype,
                                    int32_t backward, int32_t variant) {
  using namespace mt;
  using namespace mt::cuda;
  return study_entry("mt_study_gelu", [&] {
    check_variant(variant, 3);
    MT_CHECK(dtype >= 0 && dtype < kNumDTypes, DTYPE, "invalid dtype %d", (int)dtype);
    MT_CHECK(backward == 0 || backward == 1, INVALID_ARGUMENT, "backward %d is not 0 or 1", (int)backward);
    MT_CHECK(n >= 0, INVALID_ARGUMENT, "negative element count %lld", (long long)n);
    if (n == 0) return;
    MT_CHECK(out && x && (dy || !backward), INVALID_ARGUMENT, "null buffer (out=%p, x=%p, dy=%p)", out, x, dy);
    MT_CHECK(variant == 0 || (is_aligned16(out) && is_aligned16(x) && is_aligned16(dy)), UNSUPPORTED,
             "variant %d needs 16-byte aligned buffers (out=%p, x=%p, dy=%p)", (int)variant, out, x, dy);
    NvtxRange range("study_gelu");
    Context &c = context();
    dispatch_float((DType)dtype, "study_gelu", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T *o = static_cast<T *>(out);
      const T *xt = static_cast<const T *>(x), *dt = static_cast<const T *>(dy);
      auto run = [&](auto bwd) {
        constexpr bool B = decltype(bwd)::value;
        switch (variant) {
          case 0: gelu_t<T, B>(c, o, xt, dt, n); break;
          case 1: gelu_t<T, B, 256, 4>(c, o, xt, dt, n); break;
          case 2: gelu_t<T, B, 256, 2>(c, o, xt, dt, n); break;
          default: gelu_t<T, B, 128, 2>(c, o, xt, dt, n); break;
        }
      };
      if (backward) run(std::true_type{});
      else run(std::false_type{});
    });
  });
}
