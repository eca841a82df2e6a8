// classify.cu - cross-entropy (one fused kernel forward, one backward), nll, the target check,
// max/argmax along a dim, and the gathers and blocks: slice, index_select, index_add.
//
//   cross_entropy           logits (rows, cols), targets (rows) int64 -> lse (rows), loss (1)
//                           loss = scale * sum_r (lse_r - x[r, t_r])
//   cross_entropy_backward  dlogits (rows, cols) written = scale * dloss * (exp(x - lse_r) - onehot)
//   nll_loss                loss (1) = -scale * sum_r lp[r, t_r]
//   nll_loss_backward       dlp (rows, cols) written = -scale * dloss at [r, t_r], 0 elsewhere
//   range_check_queue       idx (n) -> a ticket; range_check_answer(ticket) -> first i with
//                           idx[i] outside [0, bound), or -1 (waits for the check alone)
//   max_reduce              x (outer, reduce, inner) -> values, indices (outer, inner)
//   max_backward            dx (outer, reduce, inner) written = dy (outer, inner) at the index, else 0
//   slice_copy / backward   (outer, size, inner) <-> (outer, len, inner) at offset start
//   index_select            out (n, cols) = x[idx[r], :]
//   index_add               dx (rows_x, cols) += dy (n, cols) at rows idx[r], deterministic
//
// Napkin math (65536 x 1024 f32, the PERF.md cross-entropy shape): the forward reads the
// logits once (256 MB, 0.09 ms at 2.98 TB/s) -- one pass per row keeps the running
// (max, sum of exp) pair, so nothing is re-read -- and the backward reads them again and
// writes dlogits (512 MB, 0.17 ms): ~0.26 ms for both against PyTorch's 0.97 ms.
// The loss is summed in the forward's own launch and deterministically: each block adds its
// rows' terms in a fixed tree, and the last block to finish adds the blocks' sums in block
// order (ce_loss_finish); no float atomics anywhere.
//
// index_add: a stable radix sort (CUB) of (idx[r], r) pairs groups the rows of dy by
// destination in ascending r; one warp per destination row then adds its source rows in
// that order, starting from dx's value, so the float adds happen in exactly the CPU loop's
// order (float32 results are bit-identical to the CPU's). Cost: the sort of n 32-bit keys
// (~10 bits per pass for vocabularies up to 2^20: 2 passes over 8n bytes, a few us for
// n = 64K) plus 16n bytes of temporaries, then one read of dy and one read-modify-write of
// the touched rows of dx. The alternative without a sort (every destination scans all n
// indices) costs rows_x * n index reads: 3e9 for a 50K vocabulary and 64K tokens.
//
// Contents: helpers | cross-entropy and nll | target check | max | copies | index_add | launchers
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <mutex>
#include <vector>

#include "minitorch.h"  // MT_API
#include "backend/cuda/classify.h"
#include "backend/cuda/context.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/row_stats.cuh"
#include "backend/cuda/study.cuh"

namespace mt {
namespace cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kWarpMaxCols = 2048;  // cross-entropy rows up to this width: a warp (or less) per row
constexpr int64_t kSumChunk = 32768;    // elements per block in the deterministic sum

// Blocks for a grid-stride loop over `work` items, kThreads per block, a few waves at most.
unsigned grid_stride_blocks(Context &c, int64_t work) {
  const int64_t need = (work + kThreads - 1) / kThreads;
  const int64_t cap = (int64_t)c.sm_count * 16;
  return grid_of(std::min(need, cap));
}

// ---- deterministic sums -------------------------------------------------------------------

template <class A>
struct ArraySrc {
  const A *p;
  __device__ __forceinline__ A operator()(int64_t i) const { return p[i]; }
};

// lp[r, t_r] (NaN for a target outside [0, cols): the caller validates, this only keeps the read in bounds)
template <class T>
struct PickSrc {
  const T *lp;
  const int64_t *t;
  int64_t cols;
  __device__ __forceinline__ Compute<T> operator()(int64_t r) const {
    const int64_t tr = t[r];
    return (tr >= 0 && tr < cols) ? to_compute(lp[r * cols + tr]) : Compute<T>(NAN);
  }
};

// out[blockIdx.x] = scale * sum of src(i) over this block's chunk [b * chunk, (b + 1) * chunk) of [0, n).
template <class Src, class A, class TOut>
__global__ void __launch_bounds__(1024) sum_chunks_kernel(TOut *out, Src src, int64_t n, int64_t chunk, A scale) {
  const int64_t begin = (int64_t)blockIdx.x * chunk;
  const int64_t end = min(begin + chunk, n);
  A acc = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) acc += src(i);
  acc = block_sum(acc);
  if (threadIdx.x == 0) out[blockIdx.x] = from_compute<TOut>(acc * scale);
}

// *out = scale * sum_{i < n} src(i), in a fixed order (n may be 0: out gets 0 * scale).
template <class A, class TOut, class Src>
void deterministic_sum(Context &c, const char *op, TOut *out, const Src &src, int64_t n, A scale) {
  if (n <= kSumChunk) {
    sum_chunks_kernel<Src, A, TOut><<<1, 1024, 0, c.stream>>>(out, src, n, kSumChunk, scale);
    MT_CUDA_CHECK_LAUNCH(op);
    return;
  }
  const int64_t blocks = (n + kSumChunk - 1) / kSumChunk;
  PoolBuffer partial(blocks * (int64_t)sizeof(A));
  sum_chunks_kernel<Src, A, A><<<grid_of(blocks), 1024, 0, c.stream>>>(partial.as<A>(), src, n, kSumChunk, A(1));
  MT_CUDA_CHECK_LAUNCH(op);
  deterministic_sum<A, TOut>(c, op, out, ArraySrc<A>{partial.as<A>()}, blocks, scale);
}

// ---- cross-entropy and nll ----------------------------------------------------------------

// This thread's share (tid of nthr) of row xr's running (max, sum of exp). VEC: 16-byte packs
// (cols % N == 0, xr 16-byte aligned): the pack's max first, so one rescale per pack at most.
template <class T, bool VEC>
__device__ __forceinline__ void row_scan(Compute<T> &m, Compute<T> &s, const T *xr, int64_t cols, int tid,
                                         int nthr) {
  using A = Compute<T>;
  if constexpr (VEC) {
    constexpr int N = Pack<T>::N;
#pragma unroll 4
    for (int64_t p = tid; p < cols / N; p += nthr) {
      const Pack<T> v = load128(xr + p * N);
      A pm = to_compute(v.v[0]);
#pragma unroll
      for (int j = 1; j < N; ++j) pm = dmax(pm, to_compute(v.v[j]));
      if (pm > m) {
        s = s * dexp(m - pm);  // m = -inf: s * 0 (NaN stays NaN)
        m = pm;
      }
      if (m == kNegInf<A>()) {  // the pack holds only -inf (adds 0) and NaN (adds NaN)
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const A xj = to_compute(v.v[j]);
          if (xj != xj) s += xj;
        }
      } else {
#pragma unroll
        for (int j = 0; j < N; ++j) s += dexp(to_compute(v.v[j]) - m);
      }
    }
  } else {
#pragma unroll 4
    for (int64_t c = tid; c < cols; c += nthr) online_add(m, s, to_compute(xr[c]));
  }
}

// Row r's lse and loss from its max m and sum s of exp(x - m): lse[r] = m + log s, and the
// returned loss lse - xr[tr] is computed as (m - xr[tr]) + log s, which keeps the digits of a
// small loss next to large logits; a target outside [0, cols) reads nothing and gives NaN.
template <class T>
__device__ __forceinline__ Compute<T> ce_row_finish(T *lse, const T *xr, int64_t tr, int64_t cols, int64_t r,
                                                    Compute<T> m, Compute<T> s) {
  using A = Compute<T>;
  const A xt = (tr >= 0 && tr < cols) ? to_compute(xr[tr]) : A(NAN);
  A l, loss;
  if (isinf(m)) {  // +inf present or the row all -inf / NaN: lse = m, as the CPU
    l = m;
    loss = m - xt;
  } else {
    const A ls = dlog(s);
    l = m + ls;
    loss = (m - xt) + ls;
  }
  lse[r] = from_compute<T>(l);
  return loss;
}

// Ticket of the cross-entropy forward's loss (ce_loss_finish): the last block to arrive takes
// the partials and resets it to 0 for the next launch. One counter for the process: the
// forward's launches must not overlap (they are queued on the library's one stream).
__device__ unsigned int g_ce_loss_ticket = 0;

// The end of a forward launch: *loss = scale * (sum of every row's loss), in the launch itself.
// acc is this thread's sum of the losses of its rows (0 for threads that finish no row). Each
// block adds its threads' sums (block_sum's fixed tree) into partial[blockIdx.x]; the last block
// to arrive adds the partials in block order. The grid is fixed by the shape and the GPU, so a
// given input gives the same bits on every run. A grid of one block needs no partials.
template <class T>
__device__ __forceinline__ void ce_loss_finish(T *loss, double *partial, double acc, double scale) {
  grid_sum_finish(block_sum(acc), partial, &g_ce_loss_ticket, [&](double v) { *loss = from_compute<T>(v * scale); });
}

// One pass over each row: lse[r], and *loss = scale * sum_r (lse_r - x[r, t_r]) by
// ce_loss_finish (partial: gridDim.x accumulators, null for one block). BLOCK: a block per row;
// else G lanes per row (G a power of two <= 32). Grid-stride over the rows.
template <class T, bool VEC, bool BLOCK>
__global__ void __launch_bounds__(kThreads) ce_forward_kernel(T *loss, double *partial, T *lse, const T *x,
                                                              const int64_t *t, int64_t rows, int64_t cols, int G,
                                                              double scale) {
  pdl_enter();  // launched with launch_pdl_wide
  using A = Compute<T>;
  __shared__ A red[64];
  const int nthr = BLOCK ? (int)blockDim.x : G;
  const int sub = BLOCK ? (int)threadIdx.x : (int)(threadIdx.x & (G - 1));
  const int64_t per_block = BLOCK ? 1 : (int64_t)(blockDim.x / G);
  double acc = 0;
  for (int64_t base = (int64_t)blockIdx.x * per_block; base < rows; base += (int64_t)gridDim.x * per_block) {
    const int64_t r = base + (BLOCK ? 0 : (int64_t)(threadIdx.x / G));
    const bool valid = r < rows;
    A m = kNegInf<A>(), s = 0;
    if (valid) row_scan<T, VEC>(m, s, x + r * cols, cols, sub, nthr);
    if constexpr (BLOCK) block_allmerge(m, s, red);
    else group_merge(m, s, G);
    if (valid && sub == 0) acc += (double)ce_row_finish(lse, x + r * cols, t[r], cols, r, m, s);
  }
  ce_loss_finish(loss, partial, acc, scale);
}

// The factor of every cross-entropy and nll gradient: g = scale * dloss[0] (scale when dloss is
// null: the loss was the root of the backward walk).
template <class T>
__device__ __forceinline__ Compute<T> loss_grad_scale(const T *dloss, double scale) {
  return (Compute<T>)((dloss ? (double)to_compute(dloss[0]) : 1.0) * scale);
}

// The cross-entropy gradient of one logit x with row lse l: g * (exp(x - l) - [hit]), hit when
// its column is the row's target.
template <class T>
__device__ __forceinline__ T ce_grad(T x, Compute<T> l, Compute<T> g, bool hit) {
  using A = Compute<T>;
  return from_compute<T>(g * (dexp(to_compute(x) - l) - (hit ? A(1) : A(0))));
}

// ce_grad over a pack holding columns c0 .. c0 + N - 1 of a row with target tr, in place.
template <class T>
__device__ __forceinline__ void ce_grad_pack(Pack<T> &v, int64_t c0, int64_t tr, Compute<T> l, Compute<T> g) {
#pragma unroll
  for (int j = 0; j < Pack<T>::N; ++j) v.v[j] = ce_grad(v.v[j], l, g, c0 + j == tr);
}

// The same forward for rows of exactly G lanes x PL packs (dispatch_fit; VEC alignment): the
// row is loaded into registers at once, then its max and its sum of exp go over the lanes by
// shuffles (no per-pack rescale), so PL loads per lane are in flight before the first
// reduction. The target is read while the loads fly. Grid-stride over groups of kThreads / G
// rows. (Bounding its registers to 48 for 5 blocks per SM instead of 4, with no spills, made
// the float32 step slower on an H200: 210.7 against 208.0 us forward+backward at 65536 x 1024.)
template <class T, int PL, int G>
__global__ void __launch_bounds__(kThreads) ce_forward_fit_kernel(T *loss, double *partial, T *lse, const T *x,
                                                                  const int64_t *t, int64_t rows, double scale) {
  pdl_enter();  // launched with launch_pdl_wide
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  constexpr int64_t kCols = (int64_t)G * PL * N;
  constexpr int64_t kRowsPerBlock = kThreads / G;
  const int sub = (int)threadIdx.x % G;
  double acc = 0;
  for (int64_t r0 = (int64_t)blockIdx.x * kRowsPerBlock; r0 < rows; r0 += (int64_t)gridDim.x * kRowsPerBlock) {
    const int64_t r = r0 + threadIdx.x / G;
    const bool valid = r < rows;  // lanes past the end still take part in the shuffles
    const T *xr = x + r * kCols + sub * N;
    Pack<T> v[PL];
#pragma unroll
    for (int k = 0; k < PL; ++k)
      if (valid) v[k] = load128(xr + k * G * N);
    const int64_t tr = valid && sub == 0 ? t[r] : 0;
    A m = kNegInf<A>();
#pragma unroll
    for (int k = 0; k < PL; ++k)
      if (valid)
#pragma unroll
        for (int j = 0; j < N; ++j) m = dmax(m, to_compute(v[k].v[j]));
    m = group_max(m, G);
    A s = 0;
#pragma unroll
    for (int k = 0; k < PL; ++k)
      if (valid)
#pragma unroll
        for (int j = 0; j < N; ++j) s += dexp(to_compute(v[k].v[j]) - m);
    s = group_sum(s, G);
    if (valid && sub == 0) acc += (double)ce_row_finish(lse, x + r * kCols, tr, kCols, r, m, s);
  }
  ce_loss_finish(loss, partial, acc, scale);
}

// The cross-entropy backward for rows of exactly G lanes x PL packs (dispatch_fit; x and dx
// 16-byte aligned): a lane reads the row's lse and target once and writes its PL packs, where
// the flat kernel reads them again for every pack.
template <class T, int PL, int G>
__global__ void __launch_bounds__(kThreads) ce_backward_fit_kernel(T *dx, const T *x, const T *lse, const int64_t *t,
                                                                   const T *dloss, int64_t rows, double scale) {
  pdl_enter();  // launched with launch_pdl_wide
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  constexpr int64_t kCols = (int64_t)G * PL * N;
  const int64_t r = (int64_t)blockIdx.x * (kThreads / G) + threadIdx.x / G;
  if (r >= rows) return;
  const int sub = (int)threadIdx.x % G;
  const int64_t off = r * kCols + sub * N;
  Pack<T> v[PL];
#pragma unroll
  for (int k = 0; k < PL; ++k) v[k] = load128(x + off + k * G * N);
  const A g = loss_grad_scale(dloss, scale);
  const A l = to_compute(lse[r]);
  const int64_t tr = t[r];
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    ce_grad_pack(v[k], (int64_t)(sub + k * G) * N, tr, l, g);
    store128(dx + off + k * G * N, v[k]);
  }
}

// Index math of the flat backward kernels: unit u (a pack of W elements, or one element) of a
// (rows, units_per_row) grid. FAST: u < 2^31, one multiply-high instead of a 64-bit division.
template <bool FAST>
__device__ __forceinline__ void row_col(int64_t u, int64_t units_per_row, const FastDivmod &fd, int64_t &r,
                                        int64_t &cu) {
  if constexpr (FAST) {
    uint32_t q, rem;
    fd.divmod((uint32_t)u, q, rem);
    r = q;
    cu = rem;
  } else {
    r = u / units_per_row;
    cu = u - r * units_per_row;
  }
}

// CE: dx = g * (exp(x - lse_r) - [c == t_r]);  NLL (CE false): dx = -g at [r, t_r], else 0;
// g = scale * dloss[0] (scale when dloss is null). VEC: W = N elements per unit (cols % N == 0, x and dx 16-byte aligned).
template <class T, bool CE, bool VEC, bool FAST>
__global__ void __launch_bounds__(kThreads) ce_backward_kernel(T *dx, const T *x, const T *lse, const int64_t *t,
                                                               const T *dloss, int64_t rows, int64_t cols,
                                                               double scale, FastDivmod fd) {
  pdl_enter();  // launched with launch_pdl_wide
  using A = Compute<T>;
  constexpr int W = VEC ? Pack<T>::N : 1;
  const A g = loss_grad_scale(dloss, scale);
  const int64_t upr = cols / W, units = rows * upr;
  for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < units; u += (int64_t)gridDim.x * blockDim.x) {
    int64_t r, cu;
    row_col<FAST>(u, upr, fd, r, cu);
    const int64_t tr = t[r];
    const int64_t c0 = cu * W;
    A l = 0;
    if constexpr (CE) l = to_compute(lse[r]);
    if constexpr (VEC) {
      Pack<T> v;
      if constexpr (CE) {
        v = load128(x + u * W);
        ce_grad_pack(v, c0, tr, l, g);
      } else {
#pragma unroll
        for (int j = 0; j < W; ++j) v.v[j] = from_compute<T>(c0 + j == tr ? -g : A(0));
      }
      store128(dx + u * W, v);
    } else {
      if constexpr (CE) dx[u] = ce_grad(x[u], l, g, c0 == tr);
      else dx[u] = from_compute<T>(c0 == tr ? -g : A(0));
    }
  }
}

// (study, mt_study_cross_entropy) The cross-entropy backward, 16-byte units only (cols % N == 0,
// x and dx aligned, rows * cols / N < 2^31), with UNROLL units in flight per thread and one block
// per kThreads * UNROLL units, so each thread runs its body once (elementwise.cu's flat scheme);
// ce_backward_kernel keeps one unit in flight per thread in a grid-stride loop.
template <class T, int UNROLL>
__global__ void __launch_bounds__(kThreads) ce_backward_unrolled_kernel(T *dx, const T *x, const T *lse,
                                                                        const int64_t *t, const T *dloss,
                                                                        int64_t units, double scale, FastDivmod fd) {
  pdl_enter();  // launched with launch_pdl_wide
  using A = Compute<T>;
  constexpr int W = Pack<T>::N;
  const A g = loss_grad_scale(dloss, scale);
  const int64_t base = (int64_t)blockIdx.x * kThreads * UNROLL + threadIdx.x;
  Pack<T> v[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int64_t i = base + u * kThreads;
    if (i < units) v[u] = load128(x + i * W);
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int64_t i = base + u * kThreads;
    if (i < units) {
      uint32_t r, cu;
      fd.divmod((uint32_t)i, r, cu);
      ce_grad_pack(v[u], (int64_t)cu * W, t[r], to_compute(lse[r]), g);
      store128(dx + i * W, v[u]);
    }
  }
}

// ---- target check -------------------------------------------------------------------------

// The first i with idx[i] outside [0, bound) (ULLONG_MAX when none), written to *answer (mapped
// host memory) by the last block to finish, in one launch: first and done are the check's device
// words, which it finds at ULLONG_MAX and 0 and leaves so for the next check.
__global__ void __launch_bounds__(kThreads) range_check_kernel(unsigned long long *answer, unsigned long long *first,
                                                               unsigned *done, const int64_t *idx, int64_t n,
                                                               int64_t bound) {
  pdl_enter();  // launched with launch_pdl_wide
  __shared__ unsigned long long block_first;
  if (threadIdx.x == 0) block_first = ~0ull;
  __syncthreads();
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t v = idx[i];
    if (v < 0 || v >= bound) {  // this thread's later indices are larger
      atomicMin(&block_first, (unsigned long long)i);
      break;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (block_first != ~0ull) atomicMin(first, block_first);
    __threadfence();
    if (atomicAdd(done, 1u) == gridDim.x - 1) {  // the last block: every other block's min is in
      *answer = atomicExch(first, ~0ull);
      *done = 0;
    }
  }
}

// ---- max / argmax -------------------------------------------------------------------------

// Whether candidate (vb, ib) beats (va, ia) under the CPU loop's rule: the first NaN wins,
// else the largest value, ties to the smaller index. Index -1 marks "no candidate". This is
// a strict order on (value, index) pairs, so any reduction tree finds the CPU's answer.
template <class A>
__device__ __forceinline__ bool max_better(A va, int64_t ia, A vb, int64_t ib) {
  if (ib < 0) return false;
  if (ia < 0) return true;
  const bool na = va != va, nb = vb != vb;
  if (na || nb) return nb && (!na || ib < ia);
  if (vb != va) return vb > va;
  return ib < ia;
}

// inner == 1: a warp per row of `len` contiguous elements.
template <class T>
__global__ void __launch_bounds__(kThreads) argmax_rows_kernel(T *values, int64_t *indices, const T *x, int64_t rows,
                                                               int64_t len) {
  using A = Compute<T>;
  const int lane = threadIdx.x & 31;
  const int64_t per_block = blockDim.x >> 5;
  for (int64_t r = (int64_t)blockIdx.x * per_block + (threadIdx.x >> 5); r < rows; r += (int64_t)gridDim.x * per_block) {
    const T *xr = x + r * len;
    A bv = 0;
    int64_t bi = -1;
    for (int64_t c = lane; c < len; c += 32) {
      const A v = to_compute(xr[c]);
      if (max_better(bv, bi, v, c)) {
        bv = v;
        bi = c;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const A v2 = __shfl_xor_sync(0xffffffffu, bv, o);
      const int64_t i2 = __shfl_xor_sync(0xffffffffu, bi, o);
      if (max_better(bv, bi, v2, i2)) {
        bv = v2;
        bi = i2;
      }
    }
    if (lane == 0) {
      if (values) values[r] = from_compute<T>(bv);
      indices[r] = bi;
    }
  }
}

// Any inner: block (bx, by), bx * by == kThreads, threads along inner (coalesced) and by of
// them splitting `reduce`; a shared-memory tree merges the by candidates.
// Grid (ceil(inner / bx), min(outer, 65535)), outer strided.
template <class T>
__global__ void __launch_bounds__(kThreads) argmax_cols_kernel(T *values, int64_t *indices, const T *x, int64_t outer,
                                                               int64_t reduce, int64_t inner) {
  using A = Compute<T>;
  __shared__ A sv[kThreads];
  __shared__ int64_t si[kThreads];
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  const int64_t i = (int64_t)blockIdx.x * bx + tx;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {  // uniform across the block
    A bv = 0;
    int64_t bi = -1;
    if (i < inner) {
      const T *p = x + o * reduce * inner + i;
      for (int64_t r = ty; r < reduce; r += by) {
        const A v = to_compute(p[r * inner]);
        if (max_better(bv, bi, v, r)) {
          bv = v;
          bi = r;
        }
      }
    }
    sv[ty * bx + tx] = bv;
    si[ty * bx + tx] = bi;
    __syncthreads();
    for (int s = by >> 1; s > 0; s >>= 1) {
      if (ty < s) {
        const int a = ty * bx + tx, b = (ty + s) * bx + tx;
        if (max_better(sv[a], si[a], sv[b], si[b])) {
          sv[a] = sv[b];
          si[a] = si[b];
        }
      }
      __syncthreads();
    }
    if (ty == 0 && i < inner) {
      if (values) values[o * inner + i] = from_compute<T>(sv[tx]);
      indices[o * inner + i] = si[tx];
    }
    __syncthreads();  // sv, si are reused by the next o
  }
}

// dx[o, r, i] = indices[o, i] == r ? dy[o, i] : 0 over all outer * reduce * inner elements.
template <class T, bool FAST>
__global__ void __launch_bounds__(kThreads) max_backward_kernel(T *dx, const int64_t *indices, const T *dy,
                                                                int64_t total, int64_t reduce, int64_t inner,
                                                                FastDivmod fd_inner, FastDivmod fd_reduce) {
  const T zero = from_compute<T>(Compute<T>(0));
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    int64_t o, r, i;
    if constexpr (FAST) {
      uint32_t q, i32, o32, r32;
      fd_inner.divmod((uint32_t)e, q, i32);
      fd_reduce.divmod(q, o32, r32);
      o = o32;
      r = r32;
      i = i32;
    } else {
      const int64_t q = e / inner;
      i = e - q * inner;
      o = q / reduce;
      r = q - o * reduce;
    }
    const int64_t oi = o * inner + i;
    dx[e] = indices[oi] == r ? dy[oi] : zero;
  }
}

// ---- row copies (slice, index_select) -------------------------------------------------------

// dst row k (k < rows, pitch dst_pitch) = src row s(k) (pitch src_pitch), row_units units of U
// each; s(k) = k, or idx[k] when GATHER (a row outside [0, bound) is written as zeros: the
// caller validates the indices, this only keeps the read in bounds).
template <class U, bool GATHER, bool FAST>
__global__ void __launch_bounds__(kThreads) copy_rows_kernel(U *dst, const U *src, int64_t rows, int64_t row_units,
                                                             int64_t dst_pitch, int64_t src_pitch, const int64_t *idx,
                                                             int64_t bound, FastDivmod fd) {
  const int64_t total = rows * row_units;
  for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
    int64_t k, j;
    row_col<FAST>(u, row_units, fd, k, j);
    int64_t s = k;
    if constexpr (GATHER) {
      s = idx[k];
      if (s < 0 || s >= bound) {
        dst[k * dst_pitch + j] = U{};
        continue;
      }
    }
    dst[k * dst_pitch + j] = src[s * src_pitch + j];
  }
}

// Strided row copy in bytes: rows rows of row_bytes from src (pitch src_pitch bytes) to dst
// (pitch dst_pitch bytes), in the widest unit (16, 8, 4, 2, 1 bytes) that every size and
// both pointers are multiples of. GATHER: source row idx[k] (< bound) instead of k.
void copy_rows(Context &c, const char *op, void *dst, const void *src, int64_t rows, int64_t row_bytes,
               int64_t dst_pitch, int64_t src_pitch, const int64_t *idx, int64_t bound) {
  if (rows == 0 || row_bytes == 0) return;
  const uint64_t bits = (uint64_t)row_bytes | (uint64_t)dst_pitch | (uint64_t)src_pitch | (uint64_t)(uintptr_t)dst |
                        (uint64_t)(uintptr_t)src;
  int unit = 16;
  while (bits & (uint64_t)(unit - 1)) unit >>= 1;
  const int64_t row_units = row_bytes / unit, total = rows * row_units;
  const bool fast = total < (int64_t(1) << 31);
  const FastDivmod fd(fast ? (uint32_t)row_units : 1u);
  const unsigned grid = grid_stride_blocks(c, total);
  auto launch = [&](auto utag) {
    using U = typename decltype(utag)::type;
    U *d = static_cast<U *>(dst);
    const U *s = static_cast<const U *>(src);
    const int64_t dp = dst_pitch / unit, sp = src_pitch / unit;
    if (idx) {
      if (fast) copy_rows_kernel<U, true, true><<<grid, kThreads, 0, c.stream>>>(d, s, rows, row_units, dp, sp, idx, bound, fd);
      else copy_rows_kernel<U, true, false><<<grid, kThreads, 0, c.stream>>>(d, s, rows, row_units, dp, sp, idx, bound, fd);
    } else {
      if (fast) copy_rows_kernel<U, false, true><<<grid, kThreads, 0, c.stream>>>(d, s, rows, row_units, dp, sp, idx, bound, fd);
      else copy_rows_kernel<U, false, false><<<grid, kThreads, 0, c.stream>>>(d, s, rows, row_units, dp, sp, idx, bound, fd);
    }
  };
  switch (unit) {
    case 16: launch(TypeTag<uint4>{}); break;
    case 8: launch(TypeTag<uint2>{}); break;
    case 4: launch(TypeTag<uint32_t>{}); break;
    case 2: launch(TypeTag<uint16_t>{}); break;
    default: launch(TypeTag<uint8_t>{}); break;
  }
  MT_CUDA_CHECK_LAUNCH(op);
}

// ---- index_add ----------------------------------------------------------------------------

// keys[r] = idx[r] (rows_x for an index outside [0, rows_x): sorted last and skipped), vals[r] = r.
__global__ void __launch_bounds__(kThreads) index_keys_kernel(uint32_t *keys, uint32_t *vals, const int64_t *idx,
                                                              int64_t n, int64_t rows_x) {
  for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < n; r += (int64_t)gridDim.x * blockDim.x) {
    const int64_t d = idx[r];
    keys[r] = (uint32_t)(d >= 0 && d < rows_x ? d : rows_x);
    vals[r] = (uint32_t)r;
  }
}

// Each block adds one run of equal sorted keys d (its source rows vals[p..end)) onto
// destination row d, for the columns of its tile (blockIdx.y, TILE_BYTES of each row), in
// ascending order, so each column is one chain of additions in the order of the CPU loop (the
// same bits). Which run: with BY_ROW (grids of rows_x blocks, used when rows_x <= n), block x
// owns row x and finds its run with block_equal_range (no run: nothing to add); otherwise block
// x is sorted position x, and the block at the first position of a run owns it (the run's end by
// binary search). The chain is the only serial part, so the block stages TILE_ROWS source rows
// at a time into shared memory, all threads loading (V elements, a 16-byte pack when V > 1, per
// load, several loads in flight each), and then a thread per column adds the staged rows in
// order: a run as long as a character vocabulary's commonest letter (a sixth of the batch) costs
// one load latency per TILE_ROWS rows rather than per row. BY_ROW grids are small (a block per
// destination row), so they take narrow tiles of many rows: a long run's columns are split over
// more blocks, with more rows in flight per pass.
constexpr int kAddTileRows = 64;     // per-position grids
constexpr int kAddTileBytes = 512;
constexpr int kAddRowTileRows = 256;  // BY_ROW grids
constexpr int kAddRowTileBytes = 128;

// The first position in [lo, n) whose key is not below d (keys ascend), by one thread.
__device__ __forceinline__ int64_t first_key_at_least(const uint32_t *keys, int64_t lo, int64_t n, uint32_t d) {
  int64_t hi = n;
  while (lo < hi) {
    const int64_t mid = lo + ((hi - lo) >> 1);
    if (keys[mid] < d) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// [first, last): the positions of the ascending keys equal to d, found by the whole block (every
// thread gets them). Each round, the kThreads probes spread over each range (lo, hi) narrow it
// (kThreads + 1)-fold: the probes below the bound are a prefix, counted by one barrier. A few
// rounds of load latency, where one thread's binary search takes one per halving.
__device__ __forceinline__ void block_equal_range(const uint32_t *keys, int64_t n, uint32_t d, int64_t &first,
                                                  int64_t &last) {
  int64_t lo[2] = {0, 0}, hi[2] = {n, n};  // bound s: the first key >= d + s, in [lo[s], hi[s]]
  const auto probe = [&](int s, int64_t t) { return lo[s] + (hi[s] - lo[s]) * (t + 1) / (kThreads + 1); };
  while (lo[0] < hi[0] || lo[1] < hi[1]) {  // the same on every thread
    bool below[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) below[s] = lo[s] < hi[s] && keys[probe(s, threadIdx.x)] < d + (uint32_t)s;
    const int count[2] = {__syncthreads_count(below[0]), __syncthreads_count(below[1])};
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      if (lo[s] == hi[s]) continue;
      const int64_t nlo = count[s] > 0 ? probe(s, count[s] - 1) + 1 : lo[s];
      const int64_t nhi = count[s] < kThreads ? probe(s, count[s]) : hi[s];
      lo[s] = nlo;
      hi[s] = nhi;
    }
  }
  first = lo[0];
  last = lo[1];
}

template <class T, int V, int TILE_BYTES, int TILE_ROWS, bool BY_ROW>
__global__ void __launch_bounds__(kThreads) index_add_rows_kernel(T *dx, const T *dy, const uint32_t *keys,
                                                                  const uint32_t *vals, int64_t n, int64_t rows_x,
                                                                  int64_t cols) {
  using A = Compute<T>;
  constexpr int kCols = TILE_BYTES / (int)sizeof(T);      // columns of a tile
  constexpr int kUnits = kCols / V;                        // loads per staged row
  constexpr int kRowsPerPass = kThreads / kUnits;          // staged rows loaded per pass of the block
  static_assert(kThreads % kUnits == 0 && TILE_ROWS % kRowsPerPass == 0, "tile shape");
  __shared__ alignas(16) T tile[TILE_ROWS][kCols];
  uint32_t d;
  int64_t p, end;  // the block's run of sorted positions
  if constexpr (BY_ROW) {
    d = blockIdx.x;
    block_equal_range(keys, n, d, p, end);
    if (p == end) return;  // no index names row d (block-uniform)
  } else {
    __shared__ int64_t run_end;
    p = blockIdx.x;
    d = keys[p];
    if ((int64_t)d >= rows_x) return;       // an out-of-range index (the caller validates)
    if (p > 0 && keys[p - 1] == d) return;  // not the first of its run (block-uniform)
    if (threadIdx.x == 0) run_end = first_key_at_least(keys, p + 1, n, d + 1);
    __syncthreads();
    end = run_end;
  }
  const int64_t c0 = (int64_t)blockIdx.y * kCols;   // the tile's first column
  const int width = (int)min((int64_t)kCols, cols - c0);
  const int unit = threadIdx.x % kUnits, row_in_pass = threadIdx.x / kUnits;
  A acc = 0;
  T *out = dx + (int64_t)d * cols + c0;
  if ((int)threadIdx.x < width) acc = to_compute(out[threadIdx.x]);
  for (int64_t q0 = p; q0 < end; q0 += TILE_ROWS) {
    const int rows = (int)min((int64_t)TILE_ROWS, end - q0);
    if (unit * V < width) {
      Chunk<T, V> buf[TILE_ROWS / kRowsPerPass];
#pragma unroll
      for (int k = 0; k < TILE_ROWS / kRowsPerPass; ++k) {
        const int r = k * kRowsPerPass + row_in_pass;
        if (r < rows) buf[k] = Chunk<T, V>::load(dy + (int64_t)vals[q0 + r] * cols + c0 + unit * V);
      }
#pragma unroll
      for (int k = 0; k < TILE_ROWS / kRowsPerPass; ++k) {
        const int r = k * kRowsPerPass + row_in_pass;
        if (r < rows) buf[k].store(&tile[r][unit * V]);
      }
    }
    __syncthreads();
    if ((int)threadIdx.x < width) {
#pragma unroll 8
      for (int r = 0; r < rows; ++r) acc += to_compute(tile[r][threadIdx.x]);
    }
    __syncthreads();
  }
  if ((int)threadIdx.x < width) out[threadIdx.x] = from_compute<T>(acc);
}

// ---- argument checks ----------------------------------------------------------------------

void check_sizes(const char *op, std::initializer_list<int64_t> sizes) {
  for (int64_t s : sizes)
    MT_CHECK(s >= 0, INVALID_ARGUMENT, "cuda %s: negative size %lld", op, (long long)s);
}

void check_dtype_valid(const char *op, DType d) {
  MT_CHECK((int)d >= 0 && (int)d < kNumDTypes, DTYPE, "cuda %s: invalid dtype %d", op, (int)d);
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------

namespace {
// Grids of the cross-entropy forward, in waves of resident blocks (each block loops over its
// rows): every block ends with a fence and a ticket (ce_loss_finish), which a block per row
// group paid 8192 times at 65536 x 1024 (forward 69.4 -> 86.5 us on an H200). kBalancedWave:
// at most one wave, shrunk so that every block takes the same number of rounds over the rows
// (on an H200, 8192 row groups on 528 resident blocks: 512 blocks of 16 rounds, where 528
// blocks would take 15 or 16; it measured as the plain wave did, 208.4 us forward+backward);
// a positive count: at most that many waves (the study's variants; up to 4 within 1-2%).
constexpr int kBalancedWave = 0;
constexpr int kCeForwardWaves = kBalancedWave;

// A kernel as a type, so a generic lambda can hand it to resident_blocks_per_sm.
template <auto K>
using KernelC = std::integral_constant<decltype(K), K>;

// The cross-entropy forward's launches on the grid `waves` names (kCeForwardWaves in
// production; the study's variants pick others).
void ce_forward(Context &c, void *loss, void *lse, const void *logits, const int64_t *targets, int64_t rows,
                int64_t cols, DType dtype, double scale, int waves) {
  dispatch_float(dtype, "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *x = static_cast<const T *>(logits);
    T *l = static_cast<T *>(lse), *out = static_cast<T *>(loss);
    if (rows == 0) {  // the empty sum: *loss = 0
      deterministic_sum<double>(c, "cross_entropy", out, ArraySrc<double>{nullptr}, 0, scale);
      return;
    }
    // The kernel of kc (a KernelC) over `blocks` blocks' worth of rows, on the grid of `waves`.
    const auto launch = [&](auto kc, int64_t blocks, auto... args) {
      constexpr auto kernel = decltype(kc)::value;
      const int64_t wave = (int64_t)c.sm_count * resident_blocks_per_sm<kernel>(kThreads);
      int64_t want = std::min<int64_t>(blocks, wave * std::max(waves, 1));
      if (waves == kBalancedWave) {
        const int64_t rounds = (blocks + want - 1) / want;
        want = (blocks + rounds - 1) / rounds;
      }
      const unsigned grid = grid_of(want);
      if (grid == 1) {
        MT_CUDA_CHECK(launch_pdl_wide(c, kernel, dim3(1), kThreads, out, (double *)nullptr, l, x, targets, rows,
                                      args..., scale));
      } else {
        PoolBuffer partial((int64_t)grid * (int64_t)sizeof(double));
        MT_CUDA_CHECK(launch_pdl_wide(c, kernel, dim3(grid), kThreads, out, partial.as<double>(), l, x, targets, rows,
                                      args..., scale));
      }
      MT_CUDA_CHECK_LAUNCH("cross_entropy");
    };
    const bool vec = cols % Pack<T>::N == 0 && is_aligned16(x);
    const auto fit = [&](auto g, auto pl) {
      constexpr int kG = decltype(g)::value;
      launch(KernelC<ce_forward_fit_kernel<T, decltype(pl)::value, kG>>{}, (rows + kThreads / kG - 1) / (kThreads / kG));
    };
    if constexpr (kVecType<T>) {
      if (vec && dispatch_fit(cols / Pack<T>::N, fit)) return;
    }
    if (cols <= kWarpMaxCols) {
      const int64_t units = vec ? cols / Pack<T>::N : cols;
      const int G = std::min<int>(32, next_pow2(units));
      const int64_t blocks = (rows + kThreads / G - 1) / (kThreads / G);
      if (vec) launch(KernelC<ce_forward_kernel<T, true, false>>{}, blocks, cols, G);
      else launch(KernelC<ce_forward_kernel<T, false, false>>{}, blocks, cols, G);
    } else {
      if (vec) launch(KernelC<ce_forward_kernel<T, true, true>>{}, rows, cols, 32);
      else launch(KernelC<ce_forward_kernel<T, false, true>>{}, rows, cols, 32);
    }
  });
}
}  // namespace

void cross_entropy(Context &c, void *loss, void *lse, const void *logits, const int64_t *targets, int64_t rows,
                   int64_t cols, DType dtype, double scale) {
  NvtxRange range("cross_entropy");
  check_sizes("cross_entropy", {rows, cols});
  MT_CHECK(loss && (rows == 0 || (lse && logits && targets)), INVALID_ARGUMENT,
           "cuda cross_entropy: null buffer (loss=%p, lse=%p, logits=%p, targets=%p)", loss, lse, logits,
           (const void *)targets);
  MT_CHECK(rows == 0 || cols > 0, SHAPE, "cuda cross_entropy: %lld rows of 0 classes", (long long)rows);
  ce_forward(c, loss, lse, logits, targets, rows, cols, dtype, scale, kCeForwardWaves);
}

namespace {
// The flat backward of cross-entropy (CE) or nll.
template <bool CE>
void ce_nll_backward(Context &c, const char *op, void *dx, const void *logits, const void *lse, const int64_t *targets,
                     const void *dloss, int64_t rows, int64_t cols, DType dtype, double scale) {
  dispatch_float(dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T *d = static_cast<T *>(dx);
    const T *x = static_cast<const T *>(logits), *l = static_cast<const T *>(lse), *g = static_cast<const T *>(dloss);
    const bool vec = cols % Pack<T>::N == 0 && is_aligned16(d) && (!CE || is_aligned16(x));
    const int64_t upr = vec ? cols / Pack<T>::N : cols, units = rows * upr;
    const bool fast = units < (int64_t(1) << 31);
    const FastDivmod fd(fast ? (uint32_t)upr : 1u);
    const unsigned grid = grid_stride_blocks(c, units);
    // Every backward kernel begins with pdl_enter(): launched so, it is scheduled while the
    // forward's last blocks run.
    const auto launch = [&](auto kernel, unsigned blocks, auto... args) {
      MT_CUDA_CHECK(launch_pdl_wide(c, kernel, dim3(blocks), kThreads, d, x, l, targets, g, args...));
    };
    const auto fit = [&](auto gl, auto pl) {
      constexpr int kG = decltype(gl)::value;
      launch(ce_backward_fit_kernel<T, decltype(pl)::value, kG>, grid_of((rows + kThreads / kG - 1) / (kThreads / kG)),
             rows, scale);
    };
    bool done = false;
    if constexpr (CE && kVecType<T>) done = vec && dispatch_fit(upr, fit);
    if (done) {
    } else if (CE && kVecType<T> && vec && fast) {
      // 8 units in flight per thread: 826 -> 802 us forward+backward at 8192 x 32768 f32 (H200).
      launch(ce_backward_unrolled_kernel<T, 8>, grid_of((units + kThreads * 8 - 1) / (kThreads * 8)), units, scale, fd);
    } else if (vec) {
      if (fast) launch(ce_backward_kernel<T, CE, true, true>, grid, rows, cols, scale, fd);
      else launch(ce_backward_kernel<T, CE, true, false>, grid, rows, cols, scale, fd);
    } else {
      if (fast) launch(ce_backward_kernel<T, CE, false, true>, grid, rows, cols, scale, fd);
      else launch(ce_backward_kernel<T, CE, false, false>, grid, rows, cols, scale, fd);
    }
    MT_CUDA_CHECK_LAUNCH(op);
  });
}
}  // namespace

void cross_entropy_backward(Context &c, void *dlogits, const void *logits, const void *lse, const int64_t *targets,
                            const void *dloss, int64_t rows, int64_t cols, DType dtype, double scale) {
  NvtxRange range("cross_entropy_backward");
  check_sizes("cross_entropy backward", {rows, cols});
  if (rows == 0 || cols == 0) return;
  MT_CHECK(dlogits && logits && lse && targets, INVALID_ARGUMENT,
           "cuda cross_entropy backward: null buffer (dlogits=%p, logits=%p, lse=%p, targets=%p, dloss=%p)", dlogits,
           logits, lse, (const void *)targets, dloss);
  ce_nll_backward<true>(c, "cross_entropy backward", dlogits, logits, lse, targets, dloss, rows, cols, dtype, scale);
}

void nll_loss(Context &c, void *loss, const void *log_probs, const int64_t *targets, int64_t rows, int64_t cols,
              DType dtype, double scale) {
  NvtxRange range("nll_loss");
  check_sizes("nll_loss", {rows, cols});
  MT_CHECK(loss && (rows == 0 || (log_probs && targets)), INVALID_ARGUMENT,
           "cuda nll_loss: null buffer (loss=%p, log_probs=%p, targets=%p)", loss, log_probs, (const void *)targets);
  dispatch_float(dtype, "nll_loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Compute<T>;
    const PickSrc<T> src{static_cast<const T *>(log_probs), targets, cols};
    deterministic_sum<double>(c, "nll_loss", static_cast<T *>(loss), src, rows, -scale);
  });
}

void nll_loss_backward(Context &c, void *dlp, const int64_t *targets, const void *dloss, int64_t rows, int64_t cols,
                       DType dtype, double scale) {
  NvtxRange range("nll_loss_backward");
  check_sizes("nll_loss backward", {rows, cols});
  if (rows == 0 || cols == 0) return;
  MT_CHECK(dlp && targets, INVALID_ARGUMENT, "cuda nll_loss backward: null buffer (dlp=%p, targets=%p, dloss=%p)",
           dlp, (const void *)targets, dloss);
  ce_nll_backward<false>(c, "nll_loss backward", dlp, nullptr, nullptr, targets, dloss, rows, cols, dtype, scale);
}

namespace {
// The range checks in flight: per ticket, a pinned host word that range_check_kernel writes its
// answer into, the kernel's two device words and the event recorded after it; tickets are slot
// numbers, reused once answered. Created on first use and never destroyed, as the context.
struct RangeCheckSlot {
  unsigned long long *host = nullptr, *host_dev = nullptr;  // the answer, mapped: the device's address of it
  unsigned long long *first = nullptr;                       // the device words of range_check_kernel
  unsigned *count = nullptr;
  cudaEvent_t done = nullptr;
  bool busy = false;
};
struct RangeCheckSlots {
  std::mutex mu;
  std::vector<RangeCheckSlot> slots;
};
RangeCheckSlots &range_check_slots() {
  static RangeCheckSlots *s = new RangeCheckSlots;
  return *s;
}
// A free slot, marked busy; a new one when all are (its device words set on c's stream; a failed
// creation throws, leaving none half made).
int64_t acquire_range_check_slot(Context &c) {
  RangeCheckSlots &s = range_check_slots();
  std::lock_guard<std::mutex> lock(s.mu);
  for (size_t i = 0; i < s.slots.size(); i++)
    if (!s.slots[i].busy) {
      s.slots[i].busy = true;
      return (int64_t)i;
    }
  RangeCheckSlot slot;
  void *words = nullptr;
  const auto undo = [&] {
    if (slot.done) cudaEventDestroy(slot.done);
    if (words) c.scratch_free(words);
    if (slot.host) cudaFreeHost(slot.host);
  };
  try {
    MT_CUDA_CHECK(cudaHostAlloc(&slot.host, sizeof(unsigned long long), cudaHostAllocMapped));
    MT_CUDA_CHECK(cudaHostGetDevicePointer(&slot.host_dev, slot.host, 0));
    words = c.scratch_alloc(2 * sizeof(unsigned long long));  // kept for good, as the slot
    slot.first = static_cast<unsigned long long *>(words);
    slot.count = reinterpret_cast<unsigned *>(slot.first + 1);
    MT_CUDA_CHECK(cudaMemsetAsync(slot.first, 0xff, sizeof(unsigned long long), c.stream));  // ULLONG_MAX
    MT_CUDA_CHECK(cudaMemsetAsync(slot.count, 0, sizeof(unsigned), c.stream));
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming));
  } catch (...) {
    undo();
    throw;
  }
  slot.busy = true;
  s.slots.push_back(slot);
  return (int64_t)s.slots.size() - 1;
}
void release_range_check_slot(int64_t ticket) {
  RangeCheckSlots &s = range_check_slots();
  std::lock_guard<std::mutex> lock(s.mu);
  s.slots[(size_t)ticket].busy = false;
}
// The ticket of a check that had nothing to check (no slot).
constexpr int64_t kNothingToCheck = -1;
}  // namespace

int64_t range_check_queue(Context &c, const int64_t *idx, int64_t n, int64_t bound) {
  NvtxRange range("range_check_queue");
  check_sizes("range check", {n});
  if (n == 0) return kNothingToCheck;
  MT_CHECK(idx, INVALID_ARGUMENT, "cuda range check: null index buffer for %lld indices", (long long)n);
  c.check_not_capturing("checking indices (the answer is read back to the host)");
  const int64_t ticket = acquire_range_check_slot(c);
  try {
    RangeCheckSlot slot;
    {
      RangeCheckSlots &s = range_check_slots();
      std::lock_guard<std::mutex> lock(s.mu);  // another thread may be growing the vector
      slot = s.slots[(size_t)ticket];
    }
    MT_CUDA_CHECK(launch_pdl_wide(c, range_check_kernel, dim3(grid_stride_blocks(c, n)), kThreads, slot.host_dev,
                                  slot.first, slot.count, idx, n, bound));
    MT_CUDA_CHECK_LAUNCH("range check");
    MT_CUDA_CHECK(cudaEventRecord(slot.done, c.stream));
  } catch (...) {
    release_range_check_slot(ticket);
    throw;
  }
  return ticket;
}

int64_t range_check_answer(Context &, int64_t ticket) {
  if (ticket == kNothingToCheck) return -1;
  NvtxRange range("range_check_answer");
  RangeCheckSlot slot;
  {
    RangeCheckSlots &s = range_check_slots();
    std::lock_guard<std::mutex> lock(s.mu);
    MT_CHECK(ticket >= 0 && ticket < (int64_t)s.slots.size() && s.slots[(size_t)ticket].busy, INVALID_ARGUMENT,
             "cuda range check: ticket %lld is not in flight", (long long)ticket);
    slot = s.slots[(size_t)ticket];
  }
  const cudaError_t err = cudaEventSynchronize(slot.done);
  const unsigned long long first = *slot.host;
  release_range_check_slot(ticket);
  if (err != cudaSuccess) cuda_fail(err, "cudaEventSynchronize(slot.done)", __FILE__, __LINE__);
  return first == ~0ull ? -1 : (int64_t)first;  // ULLONG_MAX: nothing out of range
}

void max_reduce(Context &c, void *values, int64_t *indices, const void *x, int64_t outer, int64_t reduce, int64_t inner,
                DType dtype) {
  NvtxRange range("max");
  check_sizes("max", {outer, reduce, inner});
  if (outer == 0 || inner == 0) return;
  MT_CHECK(reduce > 0, SHAPE, "cuda max: reducing a dim of size 0 (outer=%lld, inner=%lld)", (long long)outer,
           (long long)inner);
  MT_CHECK(indices && x, INVALID_ARGUMENT, "cuda max: null buffer (indices=%p, x=%p)", (void *)indices, x);
  dispatch_float(dtype, "max", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T *v = static_cast<T *>(values);
    const T *in = static_cast<const T *>(x);
    const int64_t rows_per_block = kThreads / 32;
    if (inner == 1 && (reduce <= 1024 || outer >= (int64_t)c.sm_count * 32)) {
      argmax_rows_kernel<T><<<grid_of((outer + rows_per_block - 1) / rows_per_block), kThreads, 0, c.stream>>>(
          v, indices, in, outer, reduce);
    } else {
      int bx = 32;
      while (bx / 2 >= inner) bx /= 2;  // inner == 1 gives bx 1: a block per row
      const int by = kThreads / bx;
      const int64_t gx = (inner + bx - 1) / bx;
      MT_CHECK(gx < INT_MAX, INVALID_ARGUMENT, "cuda max: inner size %lld too large", (long long)inner);
      const int64_t gy = std::min<int64_t>(outer, 65535);
      argmax_cols_kernel<T><<<dim3((unsigned)gx, (unsigned)gy), dim3((unsigned)bx, (unsigned)by), 0, c.stream>>>(
          v, indices, in, outer, reduce, inner);
    }
    MT_CUDA_CHECK_LAUNCH("max");
  });
}

void max_backward(Context &c, void *dx, const int64_t *indices, const void *dy, int64_t outer, int64_t reduce,
                  int64_t inner, DType dtype) {
  NvtxRange range("max_backward");
  check_sizes("max backward", {outer, reduce, inner});
  const int64_t total = outer * reduce * inner;
  if (total == 0) return;
  MT_CHECK(dx && indices && dy, INVALID_ARGUMENT, "cuda max backward: null buffer (dx=%p, indices=%p, dy=%p)", dx,
           (const void *)indices, dy);
  dispatch_float(dtype, "max backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T *d = static_cast<T *>(dx);
    const T *g = static_cast<const T *>(dy);
    const unsigned grid = grid_stride_blocks(c, total);
    if (total < (int64_t(1) << 31)) {
      max_backward_kernel<T, true><<<grid, kThreads, 0, c.stream>>>(d, indices, g, total, reduce, inner,
                                                                    FastDivmod((uint32_t)inner),
                                                                    FastDivmod((uint32_t)reduce));
    } else {
      max_backward_kernel<T, false><<<grid, kThreads, 0, c.stream>>>(d, indices, g, total, reduce, inner,
                                                                     FastDivmod(1u), FastDivmod(1u));
    }
    MT_CUDA_CHECK_LAUNCH("max backward");
  });
}

void slice_copy(Context &c, void *out, const void *x, int64_t outer, int64_t size, int64_t inner, int64_t start,
                int64_t len, DType dtype) {
  NvtxRange range("slice");
  check_sizes("slice", {outer, size, inner, start, len});
  check_dtype_valid("slice", dtype);
  MT_CHECK(start + len <= size, INVALID_ARGUMENT, "cuda slice: [%lld, %lld) outside a dim of %lld", (long long)start,
           (long long)(start + len), (long long)size);
  if (outer == 0 || len == 0 || inner == 0) return;
  MT_CHECK(out && x, INVALID_ARGUMENT, "cuda slice: null buffer (out=%p, x=%p)", out, x);
  const int64_t es = dtype_size(dtype);
  copy_rows(c, "slice", out, (const char *)x + start * inner * es, outer, len * inner * es, len * inner * es,
            size * inner * es, nullptr, 0);
}

void slice_backward(Context &c, void *dx, const void *dy, int64_t outer, int64_t size, int64_t inner, int64_t start,
                    int64_t len, DType dtype) {
  NvtxRange range("slice_backward");
  check_sizes("slice backward", {outer, size, inner, start, len});
  check_dtype_valid("slice backward", dtype);
  MT_CHECK(start + len <= size, INVALID_ARGUMENT, "cuda slice backward: [%lld, %lld) outside a dim of %lld",
           (long long)start, (long long)(start + len), (long long)size);
  if (outer == 0 || len == 0 || inner == 0) return;
  MT_CHECK(dx && dy, INVALID_ARGUMENT, "cuda slice backward: null buffer (dx=%p, dy=%p)", dx, dy);
  const int64_t es = dtype_size(dtype);
  copy_rows(c, "slice backward", (char *)dx + start * inner * es, dy, outer, len * inner * es, size * inner * es,
            len * inner * es, nullptr, 0);
}

void index_select(Context &c, void *out, const void *x, const int64_t *idx, int64_t n, int64_t rows_x, int64_t cols,
                  DType dtype) {
  NvtxRange range("index_select");
  check_sizes("index_select", {n, rows_x, cols});
  check_dtype_valid("index_select", dtype);
  if (n == 0 || cols == 0) return;
  MT_CHECK(out && x && idx, INVALID_ARGUMENT, "cuda index_select: null buffer (out=%p, x=%p, idx=%p)", out, x,
           (const void *)idx);
  const int64_t row = cols * dtype_size(dtype);
  copy_rows(c, "index_select", out, x, n, row, row, row, idx, rows_x);
}

void index_add(Context &c, void *dx, const int64_t *idx, const void *dy, int64_t n, int64_t rows_x, int64_t cols,
               DType dtype) {
  NvtxRange range("index_add");
  check_sizes("index_select backward", {n, rows_x, cols});
  if (n == 0 || cols == 0) return;
  MT_CHECK(dx && idx && dy, INVALID_ARGUMENT, "cuda index_select backward: null buffer (dx=%p, idx=%p, dy=%p)", dx,
           (const void *)idx, dy);
  MT_CHECK(n < INT_MAX && rows_x < INT_MAX, UNSUPPORTED,
           "cuda index_select backward: %lld indices into %lld rows (the sort takes fewer than 2^31 of each)",
           (long long)n, (long long)rows_x);
  dispatch_float(dtype, "index_select backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool by_row = rows_x <= n;  // a block per destination row, else per sorted position
    const int64_t tile_bytes = by_row ? kAddRowTileBytes : kAddTileBytes;
    const int64_t col_tile = tile_bytes / (int64_t)sizeof(T);
    const int64_t tiles = (cols + col_tile - 1) / col_tile;
    MT_CHECK(tiles <= 65535, UNSUPPORTED, "cuda index_select backward: rows of %lld elements", (long long)cols);
    PoolBuffer keys_in(n * 4), vals_in(n * 4), keys_out(n * 4), vals_out(n * 4);
    index_keys_kernel<<<grid_stride_blocks(c, n), kThreads, 0, c.stream>>>(keys_in.as<uint32_t>(), vals_in.as<uint32_t>(),
                                                                           idx, n, rows_x);
    MT_CUDA_CHECK_LAUNCH("index_select backward");
    int end_bit = 1;  // keys lie in [0, rows_x] (rows_x marks a bad index)
    while (end_bit < 32 && (uint64_t(1) << end_bit) <= (uint64_t)rows_x) ++end_bit;
    size_t temp_bytes = 0;
    MT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in.as<uint32_t>(), keys_out.as<uint32_t>(),
                                                  vals_in.as<uint32_t>(), vals_out.as<uint32_t>(), (int)n, 0, end_bit,
                                                  c.stream));
    PoolBuffer temp((int64_t)std::max<size_t>(temp_bytes, 1));
    MT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.as<void>(), temp_bytes, keys_in.as<uint32_t>(),
                                                  keys_out.as<uint32_t>(), vals_in.as<uint32_t>(),
                                                  vals_out.as<uint32_t>(), (int)n, 0, end_bit, c.stream));
    constexpr int V = Pack<T>::N;  // 16-byte packs when every row starts 16-byte aligned
    const bool vec = cols % V == 0 && is_aligned16(dx) && is_aligned16(dy);
    auto launch = [&](auto kernel, int64_t blocks) {
      kernel<<<dim3((unsigned)blocks, (unsigned)tiles), kThreads, 0, c.stream>>>(
          static_cast<T *>(dx), static_cast<const T *>(dy), keys_out.as<uint32_t>(), vals_out.as<uint32_t>(), n,
          rows_x, cols);
    };
    if (by_row) {  // rows_x < 2^31 blocks
      if (vec)
        launch(index_add_rows_kernel<T, V, kAddRowTileBytes, kAddRowTileRows, true>, rows_x);
      else
        launch(index_add_rows_kernel<T, 1, kAddRowTileBytes, kAddRowTileRows, true>, rows_x);
    } else {  // n < 2^31 blocks
      if (vec)
        launch(index_add_rows_kernel<T, V, kAddTileBytes, kAddTileRows, false>, n);
      else
        launch(index_add_rows_kernel<T, 1, kAddTileBytes, kAddTileRows, false>, n);
    }
    MT_CUDA_CHECK_LAUNCH("index_select backward");
  });
}

}  // namespace cuda
}  // namespace mt

// ---- the study hook (backend/cuda/study.cuh has the common rules) ---------------------------------
//
// mt_study_cross_entropy: one training step's cross-entropy kernels on device buffers of dtype
// (F32, F16, BF16; F64 takes variants 0 and 3 to 6), borrowed for the call and queued on the library's
// stream: the forward writes loss (1) = mean over rows of (lse_r - x[r, t_r]) and lse (rows); the
// backward writes dx (rows, cols) = dloss[0] / rows * (softmax(x) - onehot(t)). x (rows, cols),
// t (rows) int64 in [0, cols) (not checked here). variant:
//   0  production (mt_cross_entropy's forward and backward kernels)
//   1  the backward with 4 16-byte units in flight per thread, a block per 1024 units
//   2  the same with 8 units in flight
//   3  the forward's grid at most 1 wave of resident blocks (production: kBalancedWave, at
//      most one wave, every block the same number of rounds)
//   4  at most 2 waves
//   5  at most 8 waves
//   6  at most 4 waves
// 1 and 2 need cols % (16 / element size) == 0, 16-byte aligned x and dx, rows * cols / (16 /
// element size) < 2^31 (MT_ERR_UNSUPPORTED otherwise); where those hold and the rows are not
// exact-fit rows, production's backward is variant 2's.
extern "C" MT_API int mt_study_cross_entropy(void *loss, void *lse, void *dx, const void *x, const int64_t *t,
                                             const void *dloss, int64_t rows, int64_t cols, int32_t dtype,
                                             int32_t variant) {
  using namespace mt;
  using namespace mt::cuda;
  return study_entry("mt_study_cross_entropy", [&] {
    check_variant(variant, 6);
    MT_CHECK(dtype >= 0 && dtype < kNumDTypes, DTYPE, "invalid dtype %d", (int)dtype);
    MT_CHECK(rows > 0 && cols > 0, INVALID_ARGUMENT, "sizes must be positive (rows=%lld, cols=%lld)",
             (long long)rows, (long long)cols);
    MT_CHECK(loss && lse && dx && x && t && dloss, INVALID_ARGUMENT,
             "null buffer (loss=%p, lse=%p, dx=%p, x=%p, t=%p, dloss=%p)", loss, lse, dx, x, (const void *)t, dloss);
    NvtxRange range("study_cross_entropy");
    Context &c = context();
    const double scale = 1.0 / (double)rows;
    dispatch_float((DType)dtype, "study_cross_entropy", [&](auto tag) {
      using T = typename decltype(tag)::type;
      constexpr int W = Pack<T>::N;
      const int64_t units = rows * (cols / W);
      const bool fits = sizeof(T) <= 4 && cols % W == 0 && is_aligned16(x) && is_aligned16(dx) &&
                        units < (int64_t(1) << 31);
      MT_CHECK(variant == 0 || variant >= 3 || fits, UNSUPPORTED, "variant %d cannot take %lld x %lld %s at x=%p, dx=%p",
               (int)variant, (long long)rows, (long long)cols, dtype_name((DType)dtype), x, dx);
      static const int kWaves[] = {kCeForwardWaves, kCeForwardWaves, kCeForwardWaves, 1, 2, 8, 4};
      ce_forward(c, loss, lse, x, t, rows, cols, (DType)dtype, scale, kWaves[variant]);
      if (variant == 0 || variant >= 3) {
        cross_entropy_backward(c, dx, x, lse, t, dloss, rows, cols, (DType)dtype, scale);
        return;
      }
      const FastDivmod fd((uint32_t)(cols / W));
      T *d = static_cast<T *>(dx);
      const T *xt = static_cast<const T *>(x), *l = static_cast<const T *>(lse), *g = static_cast<const T *>(dloss);
      if (variant == 1)
        ce_backward_unrolled_kernel<T, 4><<<grid_of((units + kThreads * 4 - 1) / (kThreads * 4)), kThreads, 0,
                                            c.stream>>>(d, xt, l, t, g, units, scale, fd);
      else
        ce_backward_unrolled_kernel<T, 8><<<grid_of((units + kThreads * 8 - 1) / (kThreads * 8)), kThreads, 0,
                                            c.stream>>>(d, xt, l, t, g, units, scale, fd);
      MT_CUDA_CHECK_LAUNCH("study_cross_entropy");
    });
  });
}
