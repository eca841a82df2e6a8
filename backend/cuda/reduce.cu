// reduce.cu - sum over one axis, and the sum of squared differences.
//
//   sum_reduce:       x (outer, reduce, inner) -> out (outer, inner)
//                     out[o,i] = scale * sum_r x[o,r,i]  (+ beta * out[o,i] when beta != 0)
//   squared_diff_sum: a, b (n) -> out (1) = scale * sum_i (a[i] - b[i])^2
//
// Bandwidth bound: one read of x (n elements), a negligible write. A 64M-element f32
// sum reads 256 MB, ~0.09 ms at 3 TB/s; the goal is the copy ceiling, so loads are
// 16-byte vectors with four in flight per thread wherever a row is long.
//
// Accumulation is in float for F32/F16/BF16 and in double for F64. Every path is a fixed
// tree (per-thread strided sums, then warp shuffles, then a block tree, then a second
// pass over per-block partials), so a given shape gives the same bits on every run.
//
// Layouts:
//   inner == 1 (rows of length `reduce`, contiguous):
//     short rows (<= 1024)     one warp per row, 8 rows per block
//     many rows (>= 4 / SM)    one block per row
//     few long rows            split each row into chunks: block partials into a pool
//                              temporary (rows, chunks), then a row reduction of those
//                              (outer == 1 is the full reduction: one wave of blocks).
//   outer == 1, inner == 1 in f32/f64 (a sum over everything): CUB's DeviceReduce::Sum
//     into a pool temporary, then one thread applies scale and beta. CUB picks its own
//     tiling per architecture; its result is the same on every run of a given size.
//   outer == 1, inner > 1 in 16-byte aligned rows of whole 16-byte packs, at least 64 rows (a
//     bias gradient: the columns of a [tokens, features] gradient): one launch,
//     sum_cols_onepass_kernel: blocks of 8 or 32 packs by spans of rows, 16-byte loads, the
//     spans' partial rows added by each column tile's last block (a ticket). In a char-GPT
//     large step (H200) its 12 launches took 83 us (the head's 65 columns, 5 us, still take
//     the kernel below), where the two-pass kernel took 118 us in 25 launches; since then the
//     float32 tensor-core GEMM sums those bias gradients itself (gemm_f32.cu), and this kernel
//     serves the products cuBLAS runs.
//   inner > 1 (columns), otherwise: threads along inner (coalesced), a block of 256 = bx * by
//     threads splits `reduce` among its by rows and sums them in shared memory; when
//     (inner, outer) alone cannot fill the GPU, `reduce` is also split over grid.z into
//     a (outer, splits, inner) temporary and reduced again by the same kernel.
#include <cub/device/device_reduce.cuh>

#include "minitorch.h"  // MT_API
#include "backend/cuda/context.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/study.cuh"

namespace mt {
namespace cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kWarpRowMax = 1024;  // rows up to this length get one warp each
constexpr int64_t kMinChunk = 4096;    // elements per block in the split-row pass

// ---- sources: what is summed at flat index i --------------------------------------------

// x[i]. `vec`: x is element-aligned, so 16-byte packs can start after a short head.
template <class T>
struct SumSrc {
  using Acc = Compute<T>;
  static constexpr int N = Pack<T>::N;
  const T *x;
  bool vec;
  __device__ __forceinline__ int64_t misalign(int64_t i) const {
    return (int64_t)(((uintptr_t)(x + i) & 15u) / sizeof(T));
  }
  __device__ __forceinline__ Acc load(int64_t i) const { return to_compute(x[i]); }
  __device__ __forceinline__ Acc load_pack(int64_t i) const {  // x + i is 16-byte aligned
    const Pack<T> p = load128(x + i);
    Acc s = to_compute(p.v[0]);
#pragma unroll
    for (int k = 1; k < N; ++k) s += to_compute(p.v[k]);
    return s;
  }
};

// (a[i] - b[i])^2. `vec`: a and b are element-aligned and equally misaligned mod 16 bytes.
template <class T>
struct SqDiffSrc {
  using Acc = Compute<T>;
  static constexpr int N = Pack<T>::N;
  const T *a, *b;
  bool vec;
  __device__ __forceinline__ int64_t misalign(int64_t i) const {
    return (int64_t)(((uintptr_t)(a + i) & 15u) / sizeof(T));
  }
  __device__ __forceinline__ Acc load(int64_t i) const {
    const Acc d = to_compute(a[i]) - to_compute(b[i]);
    return d * d;
  }
  __device__ __forceinline__ Acc load_pack(int64_t i) const {
    const Pack<T> pa = load128(a + i), pb = load128(b + i);
    Acc s = 0;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const Acc d = to_compute(pa.v[k]) - to_compute(pb.v[k]);
      s += d * d;
    }
    return s;
  }
};

// This thread's share (tid of nthr cooperating threads) of the sum over [begin, end):
// a scalar head up to the first 16-byte boundary, 16-byte packs four at a time, a
// scalar tail.
template <class Src>
__device__ __forceinline__ typename Src::Acc range_sum(const Src &src, int64_t begin, int64_t end,
                                                       int tid, int nthr) {
  using Acc = typename Src::Acc;
  constexpr int N = Src::N;
  Acc acc = 0;
  int64_t rest = begin;
  if (src.vec && end - begin >= 2 * N) {
    const int64_t mis = src.misalign(begin);
    const int64_t vb = begin + (mis ? N - mis : 0);
    for (int64_t j = begin + tid; j < vb; j += nthr) acc += src.load(j);
    const int64_t nv = (end - vb) / N;
    int64_t p = tid;
    for (; p + 3 * nthr < nv; p += 4 * nthr) {
      const Acc s0 = src.load_pack(vb + p * N);
      const Acc s1 = src.load_pack(vb + (p + nthr) * N);
      const Acc s2 = src.load_pack(vb + (p + 2 * nthr) * N);
      const Acc s3 = src.load_pack(vb + (p + 3 * nthr) * N);
      acc += (s0 + s1) + (s2 + s3);
    }
    for (; p < nv; p += nthr) acc += src.load_pack(vb + p * N);
    rest = vb + nv * N;
  }
#pragma unroll 4
  for (int64_t j = rest + tid; j < end; j += nthr) acc += src.load(j);
  return acc;
}

template <class TOut, class Acc>
__device__ __forceinline__ void write_out(TOut *out, Acc sum, Acc scale, Acc beta) {
  Acc v = sum * scale;
  if (beta != Acc(0)) v = beta * to_compute(*out) + v;  // beta == 0 never reads out (may be NaN)
  *out = from_compute<TOut>(v);
}

// ---- kernels -----------------------------------------------------------------------------

// out[r] = scale * sum(row r of src) (+ beta * out[r]), rows of `len` elements.
// WARP: each warp of the block owns a row; otherwise the whole block does.
template <class Src, class TOut, bool WARP>
__global__ void __launch_bounds__(kThreads) reduce_rows_kernel(TOut *out, Src src, int64_t rows,
                                                               int64_t len, typename Src::Acc scale,
                                                               typename Src::Acc beta) {
  pdl_enter();
  using Acc = typename Src::Acc;
  if constexpr (WARP) {
    const int lane = threadIdx.x & 31;
    const int64_t warps_per_block = blockDim.x >> 5;
    for (int64_t r = blockIdx.x * warps_per_block + (threadIdx.x >> 5); r < rows;
         r += (int64_t)gridDim.x * warps_per_block) {
      Acc v = warp_sum(range_sum(src, r * len, r * len + len, lane, 32));
      if (lane == 0) write_out(out + r, v, scale, beta);
    }
  } else {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
      Acc v = block_sum(range_sum(src, r * len, r * len + len, threadIdx.x, blockDim.x));
      if (threadIdx.x == 0) write_out(out + r, v, scale, beta);
    }
  }
}

// partial[r * gridDim.x + c] = sum of chunk c of row r (chunk_len elements; the last is shorter).
template <class Src>
__global__ void __launch_bounds__(kThreads) reduce_rows_partial_kernel(typename Src::Acc *partial,
                                                                       Src src, int64_t len,
                                                                       int64_t chunk_len) {
  const int64_t row = blockIdx.y, c = blockIdx.x;
  const int64_t begin = row * len + c * chunk_len;
  const int64_t end = min(begin + chunk_len, row * len + len);
  const typename Src::Acc v = block_sum(range_sum(src, begin, end, threadIdx.x, blockDim.x));
  if (threadIdx.x == 0) partial[row * gridDim.x + c] = v;
}

// out[(o * gridDim.z + z) * inner + i] = scale * sum over r in split z of x[o, r, i] (+ beta * out).
// Block (bx, by), bx * by == kThreads, both powers of two; grid (ceil(inner / bx), <= outer, splits).
template <class TIn, class TOut, class Acc>
__global__ void __launch_bounds__(kThreads) reduce_cols_kernel(TOut *out, const TIn *x, int64_t outer,
                                                               int64_t reduce, int64_t inner,
                                                               int64_t rchunk, Acc scale, Acc beta) {
  __shared__ Acc sm[kThreads];
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  const int64_t i = (int64_t)blockIdx.x * bx + tx;
  const int64_t r0 = (int64_t)blockIdx.z * rchunk;
  const int64_t r1 = min(r0 + rchunk, reduce);
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {  // uniform across the block
    Acc acc = 0;
    if (i < inner) {
      const TIn *p = x + o * reduce * inner + i;
#pragma unroll 4
      for (int64_t r = r0 + ty; r < r1; r += by) acc += to_compute(p[r * inner]);
    }
    sm[ty * bx + tx] = acc;
    __syncthreads();
    for (int s = by >> 1; s > 0; s >>= 1) {
      if (ty < s) sm[ty * bx + tx] += sm[(ty + s) * bx + tx];
      __syncthreads();
    }
    if (ty == 0 && i < inner)
      write_out(out + ((int64_t)o * gridDim.z + blockIdx.z) * inner + i, sm[tx], scale, beta);
    __syncthreads();  // sm is reused by the next o
  }
}

// Ticket of sum_onepass_kernel: the last block to arrive takes the partials and resets it to
// 0 for the next launch. One counter for the process: launches of the kernel must not overlap
// (they are queued on the library's one stream).
__device__ unsigned int g_sum_ticket = 0;

// *out = scale * sum(x[0, n)) (+ beta * *out). x 16-byte aligned; partial holds gridDim.x
// accumulators (unused, and may be null, for a grid of one block, which writes *out itself).
// The grid is fixed by n and the GPU, and the last block adds the partials in block order, so
// a given size gives the same bits on every run. CS: streaming loads.
template <class T, int UNROLL, bool CS>
__global__ void __launch_bounds__(kThreads) sum_onepass_kernel(T *out, Compute<T> *partial, const T *x, int64_t n,
                                                               Compute<T> scale, Compute<T> beta) {
  using Acc = Compute<T>;
  constexpr int N = Pack<T>::N;
  const int64_t nv = n / N;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  Acc acc[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) acc[u] = Acc(0);
  int64_t p = tid;
  for (; p + (UNROLL - 1) * stride < nv; p += UNROLL * stride) {
    Pack<T> v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = CS ? load128_cs(x + (p + u * stride) * N) : load128(x + (p + u * stride) * N);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
      for (int j = 0; j < N; ++j) acc[u] += to_compute(v[u].v[j]);
    }
  }
  for (; p < nv; p += stride) {
    const Pack<T> v = load128(x + p * N);
#pragma unroll
    for (int j = 0; j < N; ++j) acc[0] += to_compute(v.v[j]);
  }
  const int64_t t = nv * N + tid;  // the n % N elements after the last pack
  if (t < n) acc[0] += to_compute(x[t]);
  Acc s = acc[0];
#pragma unroll
  for (int u = 1; u < UNROLL; ++u) s += acc[u];
  grid_sum_finish(block_sum(s), partial, &g_sum_ticket, [&](Acc v) { write_out(out, v, scale, beta); });
}

// v = p[0 .. N) (16-byte aligned, N * sizeof(A) a multiple of 16) by 16-byte loads cached in L2
// only (other blocks wrote p in this launch).
template <class A, int N>
__device__ __forceinline__ void load_acc_cg(A (&v)[N], const A *p) {
  static_assert(N * sizeof(A) % 16 == 0, "whole 16-byte chunks");
#pragma unroll
  for (int k = 0; k < (int)(N * sizeof(A) / 16); k++) {
    if constexpr (std::is_same<A, double>::value) {
      const double2 x = __ldcg(reinterpret_cast<const double2 *>(p) + k);
      v[2 * k] = x.x, v[2 * k + 1] = x.y;
    } else {
      const float4 x = __ldcg(reinterpret_cast<const float4 *>(p) + k);
      v[4 * k] = x.x, v[4 * k + 1] = x.y, v[4 * k + 2] = x.z, v[4 * k + 3] = x.w;
    }
  }
}

// p[0 .. N) = v by 16-byte stores (the layout of load_acc_cg).
template <class A, int N>
__device__ __forceinline__ void store_acc(A *p, const A (&v)[N]) {
#pragma unroll
  for (int k = 0; k < (int)(N * sizeof(A) / 16); k++) {
    if constexpr (std::is_same<A, double>::value)
      reinterpret_cast<double2 *>(p)[k] = make_double2(v[2 * k], v[2 * k + 1]);
    else
      reinterpret_cast<float4 *>(p)[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
  }
}

// Tickets of sum_cols_onepass_kernel, one per column tile of a launch (kColTiles at most); the
// last block of a tile resets its ticket. Launches must not overlap (the library's one stream).
constexpr int kColTiles = 1024;
constexpr int kColThreads = 256;  // a block: PACKS (16-byte packs of columns) x 256 / PACKS rows
__device__ unsigned int g_col_tickets[kColTiles];

// out[i] = scale * sum over r of x[r, i] (+ beta * out[i]) for x (reduce, inner), rows of
// 16-byte packs, in one launch. Block (PACKS, ROWS = 256 / PACKS) = a tile of PACKS packs of
// columns (blockIdx.x) by a span of `span` rows (blockIdx.y); thread (tx, ty) sums its pack over
// rows ty, ty + ROWS, ... of the span, four loads in flight, and the block adds its ROWS row
// lanes in shared memory. With one span a block writes out; otherwise it stores its partial row,
// takes the tile's ticket, and the tile's last block adds the spans' partials in span order.
// Every sum is a fixed tree, so a shape gives the same bits on every run.
template <class T, int PACKS>
__global__ void __launch_bounds__(kColThreads)
    sum_cols_onepass_kernel(T *out, Compute<T> *partial, const T *x, int64_t reduce, int64_t inner, int64_t span,
                            Compute<T> scale, Compute<T> beta) {
  using Acc = Compute<T>;
  constexpr int N = Pack<T>::N, ROWS = kColThreads / PACKS;
  __shared__ Acc sm[ROWS][PACKS][N];
  __shared__ bool last;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t p = (int64_t)blockIdx.x * PACKS + tx;  // this thread's pack of columns
  const bool live = p * N < inner;
  const int64_t r0 = (int64_t)blockIdx.y * span, r1 = min(r0 + span, reduce);
  Acc acc[N];
#pragma unroll
  for (int j = 0; j < N; j++) acc[j] = Acc(0);
  if (live) {
    const T *col = x + p * N;
    int64_t r = r0 + ty;
    for (; r + 3 * ROWS < r1; r += 4 * ROWS) {
      Pack<T> v[4];
#pragma unroll
      for (int u = 0; u < 4; u++) v[u] = load128(col + (r + u * ROWS) * inner);
#pragma unroll
      for (int u = 0; u < 4; u++)
#pragma unroll
        for (int j = 0; j < N; j++) acc[j] += to_compute(v[u].v[j]);
    }
    for (; r < r1; r += ROWS) {
      const Pack<T> v = load128(col + r * inner);
#pragma unroll
      for (int j = 0; j < N; j++) acc[j] += to_compute(v.v[j]);
    }
  }
  // the block's ROWS row lanes, added in lane order by row lane 0
  const auto block_rows = [&]() {
#pragma unroll
    for (int j = 0; j < N; j++) sm[ty][tx][j] = acc[j];
    __syncthreads();
    if (ty == 0)
      for (int k = 1; k < ROWS; k++)
#pragma unroll
        for (int j = 0; j < N; j++) acc[j] += sm[k][tx][j];
  };
  block_rows();
  if (gridDim.y == 1) {
    if (ty == 0 && live)
#pragma unroll
      for (int j = 0; j < N; j++) write_out(out + p * N + j, acc[j], scale, beta);
    return;
  }
  if (ty == 0 && live) store_acc<Acc, N>(partial + (int64_t)blockIdx.y * inner + p * N, acc);
  __threadfence();  // the partials are visible before the ticket says so
  __syncthreads();
  if (tx == 0 && ty == 0) last = atomicAdd(&g_col_tickets[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
#pragma unroll
  for (int j = 0; j < N; j++) acc[j] = Acc(0);
  if (live) {  // the spans' partials of this pack, four rows of 16-byte loads in flight
    const Acc *part = partial + p * N;
    int64_t sp = ty;
    for (; sp + 3 * ROWS < gridDim.y; sp += 4 * ROWS) {
      Acc v[4][N];
#pragma unroll
      for (int u = 0; u < 4; u++) load_acc_cg<Acc, N>(v[u], part + (sp + u * ROWS) * inner);
#pragma unroll
      for (int u = 0; u < 4; u++)
#pragma unroll
        for (int j = 0; j < N; j++) acc[j] += v[u][j];
    }
    for (; sp < gridDim.y; sp += ROWS) {
      Acc v[N];
      load_acc_cg<Acc, N>(v, part + sp * inner);
#pragma unroll
      for (int j = 0; j < N; j++) acc[j] += v[j];
    }
  }
  __syncthreads();  // sm is reused
  block_rows();
  if (ty == 0 && live)
#pragma unroll
    for (int j = 0; j < N; j++) write_out(out + p * N + j, acc[j], scale, beta);
  if (tx == 0 && ty == 0) g_col_tickets[blockIdx.x] = 0;
}

// ---- launch helpers ---------------------------------------------------------------------

template <class Src, class TOut>
void launch_rows_single(const char *op, TOut *out, const Src &src, int64_t rows, int64_t len,
                        typename Src::Acc scale, typename Src::Acc beta) {
  Context &c = context();
  if (len <= kWarpRowMax) {
    constexpr auto kernel = reduce_rows_kernel<Src, TOut, true>;
    const unsigned grid = wave_grid<kernel>(c.sm_count, rows, kThreads / 32, kThreads);
    MT_CUDA_CHECK(launch_pdl(c, kernel, dim3(grid), kThreads, out, src, rows, len, scale, beta));
  } else {
    constexpr auto kernel = reduce_rows_kernel<Src, TOut, false>;
    const unsigned grid = wave_grid<kernel>(c.sm_count, rows, 1, kThreads);
    MT_CUDA_CHECK(launch_pdl(c, kernel, dim3(grid), kThreads, out, src, rows, len, scale, beta));
  }
  MT_CUDA_CHECK_LAUNCH(op);
}

// Rows of `len` contiguous elements of src -> out[rows].
template <class Src, class TOut>
void reduce_rows(const char *op, TOut *out, const Src &src, int64_t rows, int64_t len,
                 typename Src::Acc scale, typename Src::Acc beta) {
  using Acc = typename Src::Acc;
  Context &c = context();
  const int64_t target = (int64_t)c.sm_count * 4;  // one resident wave of 256-thread blocks
  int64_t chunks = 1;
  if (len > kWarpRowMax && rows < target) {
    chunks = (target + rows - 1) / rows;
    const int64_t max_chunks = (len + kMinChunk - 1) / kMinChunk;
    if (chunks > max_chunks) chunks = max_chunks;
  }
  if (chunks <= 1) {
    launch_rows_single(op, out, src, rows, len, scale, beta);
    return;
  }
  // Chunk starts stay 16-byte aligned relative to the row start (64 elements >= 16 bytes).
  int64_t chunk_len = (len + chunks - 1) / chunks;
  chunk_len = (chunk_len + 63) / 64 * 64;
  chunks = (len + chunk_len - 1) / chunk_len;
  PoolBuffer partial(rows * chunks * (int64_t)sizeof(Acc));
  reduce_rows_partial_kernel<Src><<<dim3((unsigned)chunks, (unsigned)rows), kThreads, 0, c.stream>>>(
      partial.as<Acc>(), src, len, chunk_len);
  MT_CUDA_CHECK_LAUNCH(op);
  const SumSrc<Acc> psrc{partial.as<Acc>(), true};
  launch_rows_single(op, out, psrc, rows, chunks, scale, beta);
}

// Packs of columns a block of sum_cols_onepass takes: 8 (128-byte row segments) up to 128 packs,
// so narrow matrices still get several column tiles to finish in parallel, else 32. In a
// char-GPT large step (H200) the 12 sums took 83.1 us with 8 against 92.4 us with 32.
template <class T>
int cols_onepass_packs(int64_t inner) {
  return inner / Pack<T>::N <= 128 ? 8 : 32;
}

// Whether sum_cols_onepass takes x (reduce, inner): rows of whole 16-byte packs, 16-byte
// aligned, at most kColTiles tiles of columns, enough rows to split.
template <class T>
bool cols_onepass_fits(const T *x, int64_t reduce, int64_t inner) {
  constexpr int N = Pack<T>::N;
  return is_aligned16(x) && inner % N == 0 && inner / N <= (int64_t)kColTiles * cols_onepass_packs<T>(inner) &&
         reduce >= 64;
}

// A wave of blocks: the column tiles times spans of rows (at least 64 rows a span).
template <class T>
void sum_cols_onepass(const char *op, T *out, const T *x, int64_t reduce, int64_t inner, Compute<T> scale,
                      Compute<T> beta) {
  using Acc = Compute<T>;
  constexpr int N = Pack<T>::N;
  Context &c = context();
  const int packs = cols_onepass_packs<T>(inner);
  const int64_t tiles = (inner / N + packs - 1) / packs;
  const int64_t target = (int64_t)c.sm_count * 4;  // blocks of 256 threads, 4 an SM
  int64_t spans = std::max<int64_t>(1, std::min<int64_t>((target + tiles - 1) / tiles, reduce / 64));
  spans = std::min<int64_t>(spans, 65535);
  const int64_t span = (reduce + spans - 1) / spans;
  spans = (reduce + span - 1) / span;
  const dim3 grid((unsigned)tiles, (unsigned)spans), block((unsigned)packs, (unsigned)(kColThreads / packs));
  const auto launch = [&](Acc *part) {
    if (packs == 8)
      sum_cols_onepass_kernel<T, 8><<<grid, block, 0, c.stream>>>(out, part, x, reduce, inner, span, scale, beta);
    else
      sum_cols_onepass_kernel<T, 32><<<grid, block, 0, c.stream>>>(out, part, x, reduce, inner, span, scale, beta);
  };
  if (spans == 1) {  // one span: no partials, so no pool call beside the launch
    launch(nullptr);
  } else {
    PoolBuffer partial(spans * inner * (int64_t)sizeof(Acc));
    launch(partial.as<Acc>());
  }
  MT_CUDA_CHECK_LAUNCH(op);
}

template <class T>
void reduce_cols(const char *op, T *out, const T *x, int64_t outer, int64_t reduce, int64_t inner,
                 Compute<T> scale, Compute<T> beta) {
  using Acc = Compute<T>;
  Context &c = context();
  int bx = 32;
  while (bx / 2 >= inner) bx /= 2;  // inner > 1, so bx >= 2 and by <= 128
  const int by = kThreads / bx;
  const dim3 block((unsigned)bx, (unsigned)by);
  const int64_t gx = (inner + bx - 1) / bx;
  const int64_t gy = outer < 65535 ? outer : 65535;
  MT_CHECK(gx < (int64_t(1) << 31), INVALID_ARGUMENT, "cuda %s: inner size %lld too large", op,
           (long long)inner);

  const int64_t target = (int64_t)c.sm_count * 4;
  int64_t splits = 1;
  if (gx * gy < target) {
    splits = (target + gx * gy - 1) / (gx * gy);
    const int64_t max_splits = reduce / (8 * (int64_t)by);  // >= 8 rows per thread
    if (splits > max_splits) splits = max_splits;
    if (splits > 65535) splits = 65535;
  }
  if (splits <= 1) {
    reduce_cols_kernel<T, T, Acc><<<dim3((unsigned)gx, (unsigned)gy, 1), block, 0, c.stream>>>(
        out, x, outer, reduce, inner, reduce, scale, beta);
    MT_CUDA_CHECK_LAUNCH(op);
    return;
  }
  const int64_t rchunk = (reduce + splits - 1) / splits;
  splits = (reduce + rchunk - 1) / rchunk;
  PoolBuffer partial(outer * splits * inner * (int64_t)sizeof(Acc));  // (outer, splits, inner)
  reduce_cols_kernel<T, Acc, Acc><<<dim3((unsigned)gx, (unsigned)gy, (unsigned)splits), block, 0, c.stream>>>(
      partial.as<Acc>(), x, outer, reduce, inner, rchunk, Acc(1), Acc(0));
  MT_CUDA_CHECK_LAUNCH(op);
  reduce_cols_kernel<Acc, T, Acc><<<dim3((unsigned)gx, (unsigned)gy, 1), block, 0, c.stream>>>(
      out, partial.as<Acc>(), outer, splits, inner, splits, scale, beta);
  MT_CUDA_CHECK_LAUNCH(op);
}

template <class T>
bool elem_aligned(const void *p) {
  return ((uintptr_t)p % sizeof(T)) == 0;
}

// out = scale * *sum (+ beta * out): the epilogue of the CUB full reduction.
template <class T>
__global__ void scale_sum_kernel(T *out, const T *sum, T scale, T beta) {
  T v = scale * *sum;
  if (beta != T(0)) v = beta * *out + v;  // beta == 0 never reads out (may be NaN)
  *out = v;
}

// A sum over all n elements with cub::DeviceReduce::Sum (f32 or f64).
template <class T>
void reduce_all_cub(T *out, const T *x, int64_t n, T scale, T beta) {
  Context &c = context();
  size_t temp_bytes = 0;
  MT_CUDA_CHECK(cub::DeviceReduce::Sum(nullptr, temp_bytes, x, (T *)nullptr, n, c.stream));
  PoolBuffer temp((int64_t)temp_bytes);
  PoolBuffer sum((int64_t)sizeof(T));
  MT_CUDA_CHECK(cub::DeviceReduce::Sum(temp.as<void>(), temp_bytes, x, sum.as<T>(), n, c.stream));
  scale_sum_kernel<T><<<1, 1, 0, c.stream>>>(out, sum.as<T>(), scale, beta);
  MT_CUDA_CHECK_LAUNCH("sum_reduce");
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------

// *out = scale * sum(x[0, n)) + beta * *out by sum_onepass_kernel (x 16-byte aligned).
template <class T, int UNROLL, bool CS>
void sum_onepass(T *out, const T *x, int64_t n, Compute<T> scale = Compute<T>(1), Compute<T> beta = Compute<T>(0)) {
  using Acc = Compute<T>;
  Context &c = context();
  constexpr auto kernel = sum_onepass_kernel<T, UNROLL, CS>;
  const unsigned grid = wave_grid<kernel>(c.sm_count, n / Pack<T>::N, (int64_t)kThreads * UNROLL, kThreads);
  if (grid == 1) {  // a small sum (a loss, a norm): no scratch, so no pool calls beside the launch
    kernel<<<1, kThreads, 0, c.stream>>>(out, nullptr, x, n, scale, beta);
  } else {
    PoolBuffer partial((int64_t)grid * (int64_t)sizeof(Acc));
    kernel<<<grid, kThreads, 0, c.stream>>>(out, partial.as<Acc>(), x, n, scale, beta);
  }
  MT_CUDA_CHECK_LAUNCH("sum_onepass");
}

void launch_sum_reduce(void *out, const void *x, int64_t outer, int64_t reduce, int64_t inner,
                       DType dtype, double scale, double beta) {
  NvtxRange range("sum_reduce");
  MT_CHECK(outer >= 0 && reduce >= 0 && inner >= 0, INVALID_ARGUMENT,
           "cuda sum_reduce: negative size (outer=%lld, reduce=%lld, inner=%lld)", (long long)outer,
           (long long)reduce, (long long)inner);
  if (outer == 0 || inner == 0) return;
  MT_CHECK(out && (x || reduce == 0), INVALID_ARGUMENT, "cuda sum_reduce: null buffer (out=%p, x=%p)",
           out, x);
  dispatch_float(dtype, "sum_reduce", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = Compute<T>;
    T *o = static_cast<T *>(out);
    const T *in = static_cast<const T *>(x);
    // A whole contiguous tensor: one pass, 8 streaming 16-byte loads in flight, the last block
    // adding the partials in order (deterministic). bw_study.py (H200, f32): 1.06x / 1.25x
    // PyTorch at 64M / 16M elements, against 0.98x / 0.95x for CUB DeviceReduce.
    if (outer == 1 && inner == 1 && reduce > 0 && is_aligned16(in)) {
      sum_onepass<T, 8, true>(o, in, reduce, (Acc)scale, (Acc)beta);
      return;
    }
    if constexpr (std::is_same<T, float>::value || std::is_same<T, double>::value) {
      if (outer == 1 && inner == 1 && reduce > 0 && reduce < (int64_t(1) << 31)) {
        reduce_all_cub<T>(o, in, reduce, (T)scale, (T)beta);
        return;
      }
    }
    if (inner == 1) {
      const SumSrc<T> src{in, elem_aligned<T>(in)};
      reduce_rows("sum_reduce", o, src, outer, reduce, (Acc)scale, (Acc)beta);
    } else if (outer == 1 && cols_onepass_fits(in, reduce, inner)) {
      sum_cols_onepass<T>("sum_reduce", o, in, reduce, inner, (Acc)scale, (Acc)beta);
    } else {
      reduce_cols<T>("sum_reduce", o, in, outer, reduce, inner, (Acc)scale, (Acc)beta);
    }
  });
}

void launch_squared_diff_sum(void *out, const void *a, const void *b, int64_t n, DType dtype,
                             double scale) {
  NvtxRange range("squared_diff_sum");
  MT_CHECK(n >= 0, INVALID_ARGUMENT, "cuda squared_diff_sum: negative element count %lld", (long long)n);
  MT_CHECK(out && ((a && b) || n == 0), INVALID_ARGUMENT,
           "cuda squared_diff_sum: null buffer (out=%p, a=%p, b=%p)", out, a, b);
  dispatch_float(dtype, "squared_diff_sum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = Compute<T>;
    const T *pa = static_cast<const T *>(a);
    const T *pb = static_cast<const T *>(b);
    const bool vec = elem_aligned<T>(pa) && elem_aligned<T>(pb) &&
                     (((uintptr_t)pa - (uintptr_t)pb) & 15u) == 0;
    const SqDiffSrc<T> src{pa, pb, vec};
    reduce_rows("squared_diff_sum", static_cast<T *>(out), src, 1, n, (Acc)scale, Acc(0));
  });
}

}  // namespace cuda
}  // namespace mt

// ---- study hook (backend/cuda/study.cuh has the common rules) -------------------------------------
//
// mt_study_sum: *out = sum of x (n), device pointers of dtype (F32, F64, F16, BF16), borrowed for
// the call, queued on the library's stream. variant:
//   0  production (what mt_sum of a whole tensor runs: (4) for a 16-byte aligned x, else CUB
//      DeviceReduce::Sum for f32 / f64)
//   1  this file's row reduction: split-row block partials, then a second pass
//   2  one pass: 8 16-byte loads in flight per thread, one wave of blocks, last-block finish
//   3  (2) with 4 loads in flight
//   4  (2) with streaming loads (ld.global.cs)
// Variants 2..4 need a 16-byte aligned x (MT_ERR_UNSUPPORTED otherwise).

extern "C" MT_API int mt_study_sum(void *out, const void *x, int64_t n, int32_t dtype, int32_t variant) {
  using namespace mt;
  using namespace mt::cuda;
  return study_entry("mt_study_sum", [&] {
    check_variant(variant, 4);
    MT_CHECK(dtype >= 0 && dtype < kNumDTypes, DTYPE, "invalid dtype %d", (int)dtype);
    MT_CHECK(n > 0, INVALID_ARGUMENT, "element count %lld is not positive", (long long)n);
    MT_CHECK(out && x, INVALID_ARGUMENT, "null buffer (out=%p, x=%p)", out, x);
    MT_CHECK(variant < 2 || is_aligned16(x), UNSUPPORTED, "variant %d needs a 16-byte aligned x (%p)", (int)variant,
             x);
    if (variant == 0) {
      launch_sum_reduce(out, x, 1, n, 1, (DType)dtype, 1.0, 0.0);
      return;
    }
    NvtxRange range("study_sum");
    dispatch_float((DType)dtype, "study_sum", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Acc = Compute<T>;
      T *o = static_cast<T *>(out);
      const T *in = static_cast<const T *>(x);
      switch (variant) {
        case 1: reduce_rows("study_sum", o, SumSrc<T>{in, elem_aligned<T>(in)}, 1, n, Acc(1), Acc(0)); break;
        case 2: sum_onepass<T, 8, false>(o, in, n); break;
        case 3: sum_onepass<T, 4, false>(o, in, n); break;
        default: sum_onepass<T, 8, true>(o, in, n); break;
      }
    });
  });
}
