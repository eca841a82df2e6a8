// attention_f32.cu - float32 attention in three kernels (forward, dq, dk/dv), for head dims
// 16 and 32, with each operand's heads read and written at strides of their own: q, k, v can
// be the three column blocks of one packed projection [B, T, 3 H D] and out [B, T, H D], so no
// head split or merge is ever copied, and no T x S matrix is ever stored.
//
// Three generations, side by side (mt_study_attention_f32 picks one; the tensor cores are
// production):
//   warpgroup MMA  the tensor-core kernels below on Hopper's wgmma (attention_f32_wgmma.cu), for
//                  head dim 32 on a 9.0 device
//   tensor cores   mma.sync m16n8k8 TF32 with the 3xTF32 split for float32 accuracy (the
//                  section "tensor-core kernels" below); about 1.5 times the row kernels' speed
//                  at the char-GPT shapes (docs/benchmarks.md)
//   rows           exact float32 FFMA, one row per kSub threads (below)
// All: f32 accumulation, softmax in base 2 with the scale folded into the scores (as
// FlashAttention does), deterministic (no atomics; every output element is accumulated by one
// thread in a fixed order).
//
// The row kernels: one thread owns one query row (forward, dq) or one key row (dk, dv) in
// registers; kSub threads share that row and split the other side between them (interleaved
// rows of each shared tile), then merge through warp shuffles. The rows of the other side come
// from shared memory, one float4 per 4 FMAs, so the kernels are bound by shared-memory return
// bandwidth: the lane mapping (sub_of, row_of) makes each quarter-warp read one address at a
// time, which returns at twice the rate of distinct addresses (on an H100 this took the forward
// from 68 to 51 us and the two backward kernels from 215 to 145 us at the char-GPT large shape).
//
// The backward is FlashAttention-2's without atomics: the dq kernel (one block per query tile,
// keys in the inner loop) also writes D_i = dout_i . out_i, which the dk/dv kernel (one block
// per key tile, queries in the inner loop) reads; P is recomputed in both from q, k and lse.
//
// Contents: row kernels | tensor-core kernels | launchers | mt_study_attention_f32
#include <atomic>
#include <cmath>
#include <cstdlib>

#include "minitorch.h"  // MT_API (the study hook)
#include "backend/cuda/attention/attention_f32.h"
#include "backend/cuda/attention/attention_f32_common.cuh"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/tf32x3.cuh"

namespace mt {
namespace cuda {
namespace {

using namespace attn_f32;

constexpr int kSub = 4;      // threads per owned row
constexpr int kRows = 32;    // owned rows per block: kRows * kSub = 128 threads
constexpr int kThreads = kRows * kSub;
constexpr int kTile = 64;    // rows of the other side per shared tile
constexpr int kPad = 4;      // floats of padding per shared row (distinct banks, 16-byte aligned)
constexpr int kChunk = 8;    // rows of the other side scored together (independent FMA chains)

static_assert(kTile % (kSub * kChunk) == 0, "a tile is whole chunks of every sub-thread");

// rows [r0, r0 + kTile) of src (row stride `row`, rows >= n read as 0) into dst[kTile][D + kPad],
// each value times mul.
template <int D>
__device__ __forceinline__ void load_tile(float (*dst)[D + kPad], const float *src, int64_t row, int r0, int n,
                                          float mul) {
  for_tile<D, kTile, kThreads>(src, row, r0, n, [&](int r, int c, float4 x) {
    x.x *= mul;
    x.y *= mul;
    x.z *= mul;
    x.w *= mul;
    *reinterpret_cast<float4 *>(&dst[r][c]) = x;
  });
}

template <int D>
__device__ __forceinline__ void load_row(float (&dst)[D], const float *src, float mul) {
#pragma unroll
  for (int c = 0; c < D; c += 4) {
    const float4 x = *reinterpret_cast<const float4 *>(src + c);
    dst[c] = x.x * mul;
    dst[c + 1] = x.y * mul;
    dst[c + 2] = x.z * mul;
    dst[c + 3] = x.w * mul;
  }
}

template <int D>
__device__ __forceinline__ float dot_row(const float (&a)[D], const float *s) {
  float acc = 0.f;
#pragma unroll
  for (int c = 0; c < D; c += 4) {
    const float4 x = *reinterpret_cast<const float4 *>(s + c);
    acc = fmaf(a[c], x.x, acc);
    acc = fmaf(a[c + 1], x.y, acc);
    acc = fmaf(a[c + 2], x.z, acc);
    acc = fmaf(a[c + 3], x.w, acc);
  }
  return acc;
}

// A shared-memory float4 the compiler may not merge with an earlier load of the same address:
// a row read twice in one chunk (for its score, then for its update) would otherwise stay in
// registers between the two uses, kChunk rows of D values at once, and spill.
__device__ __forceinline__ float4 lds4(const float *p) {
  float4 x;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(x.x), "=f"(x.y), "=f"(x.z), "=f"(x.w)
               : "r"((unsigned)__cvta_generic_to_shared(p)));
  return x;
}

// acc += a * s[0 .. D) (s in shared memory).
template <int D>
__device__ __forceinline__ void axpy_row(float (&acc)[D], float a, const float *s) {
#pragma unroll
  for (int c = 0; c < D; c += 4) {
    const float4 x = lds4(s + c);
    acc[c] = fmaf(a, x.x, acc[c]);
    acc[c + 1] = fmaf(a, x.y, acc[c + 1]);
    acc[c + 2] = fmaf(a, x.z, acc[c + 2]);
    acc[c + 3] = fmaf(a, x.w, acc[c + 3]);
  }
}

// Sub-thread `sub` of a row writes its quarter of the row (D / kSub values) times mul.
template <int D>
__device__ __forceinline__ void store_share(float *dst, const float (&x)[D], int sub, float mul) {
  constexpr int kShare = D / kSub;
#pragma unroll
  for (int c = 0; c < D; c += 4)
    if (c / kShare == sub)
      *reinterpret_cast<float4 *>(dst + c) = make_float4(x[c] * mul, x[c + 1] * mul, x[c + 2] * mul, x[c + 3] * mul);
}

// The kSub threads of a row are lanes r, r + 8, r + 16, r + 24 of a warp (kSub = 4): each
// quarter-warp's 8 lanes hold 8 rows that read the same shared address at every step, so a
// 16-byte shared load returns at the uniform-address rate (twice the rate of distinct addresses).
static_assert(kSub == 4 && kRows % 8 == 0, "the lane mapping assumes 4 sub-threads, 8 rows per warp");
__device__ __forceinline__ int sub_of(int t) { return (t & 31) >> 3; }
__device__ __forceinline__ int row_of(int t) { return (t >> 5) * 8 + (t & 7); }
constexpr int kSubLane = 8;  // lane distance between the sub-threads of a row

// The sum of x over the kSub threads of a row.
__device__ __forceinline__ float sub_sum(float x) {
#pragma unroll
  for (int w = kSubLane; w < kSub * kSubLane; w <<= 1) x += __shfl_xor_sync(0xffffffffu, x, w);
  return x;
}

// The forward and dq kernels take query tile `tiles - 1 - blockIdx.x`, the dk/dv kernel key tile
// blockIdx.x: the longest causal rows (the last queries, the first keys) are scheduled first.

// Where a forward or dq block stands: its query tile (the last tiles first), this thread's
// sub-thread index and first query row, and the keys the tile sees (kend: one past the last).
struct QueryTile {
  int tile, sub, i0, kend;
};
__device__ __forceinline__ QueryTile query_tile(int tq, int tk, bool causal, int per_block) {
  QueryTile t;
  t.tile = (tq + per_block - 1) / per_block - 1 - (int)blockIdx.x;
  t.sub = sub_of(threadIdx.x);
  t.i0 = t.tile * per_block + row_of(threadIdx.x);
  const int last = min(tq, (t.tile + 1) * per_block) - 1;
  t.kend = causal ? min(tk, last + tk - tq + 1) : tk;
  return t;
}

// Rows [k0, k0 + kTile) of k and v (zero past kend) into ks and vs, between two barriers.
template <int D>
__device__ __forceinline__ void stage_kv(float (*ks)[D + kPad], float (*vs)[D + kPad], const float *kp, int64_t krow,
                                         const float *vp, int64_t vrow, int k0, int kend) {
  __syncthreads();
  load_tile<D>(ks, kp, krow, k0, kend, 1.f);
  load_tile<D>(vs, vp, vrow, k0, kend, 1.f);
  __syncthreads();
}

// ---- row kernels ---------------------------------------------------------------------

// R query rows per thread (R * kRows per block): each shared value read feeds R rows.
template <int D, int R>
__global__ void __launch_bounds__(kThreads) attn_fwd_kernel(FwdArgs a) {
  constexpr int kPer = kRows * R, kCh = kChunk / R;
  __shared__ __align__(16) float ks[kTile][D + kPad];
  __shared__ __align__(16) float vs[kTile][D + kPad];
  const int bh = blockIdx.y;
  const QueryTile qt = query_tile(a.tq, a.tk, a.causal, kPer);
  const int sub = qt.sub, i0 = qt.i0, kend = qt.kend, off = a.tk - a.tq;
  const float *qp = a.q.p + head_offset(a.q.batch, a.q.head, bh, a.heads);
  const float *kp = a.k.p + head_offset(a.k.batch, a.k.head, bh, a.heads);
  const float *vp = a.v.p + head_offset(a.v.batch, a.v.head, bh, a.heads);

  float q[R][D], o[R][D], m[R], l[R];
  int lim[R];  // the last key each row sees
#pragma unroll
  for (int r = 0; r < R; r++) {
    const int i = i0 + r * kRows;
    lim[r] = a.causal ? i + off : a.tk - 1;
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int c = 0; c < D; c++) o[r][c] = q[r][c] = 0.f;
    if (i < a.tq) load_row<D>(q[r], qp + (int64_t)i * a.q.row, a.scale2);
  }

  for (int k0 = 0; k0 < kend; k0 += kTile) {
    stage_kv<D>(ks, vs, kp, a.k.row, vp, a.v.row, k0, kend);
#pragma unroll 1
    for (int c0 = 0; c0 < kTile / kSub; c0 += kCh) {
      float s[R][kCh];
#pragma unroll
      for (int u = 0; u < kCh; u++) {
        const int key = sub + kSub * (c0 + u);
#pragma unroll
        for (int r = 0; r < R; r++) s[r][u] = 0.f;
#pragma unroll
        for (int c = 0; c < D; c += 4) {
          const float4 x = *reinterpret_cast<const float4 *>(&ks[key][c]);
#pragma unroll
          for (int r = 0; r < R; r++) {
            s[r][u] = fmaf(q[r][c], x.x, s[r][u]);
            s[r][u] = fmaf(q[r][c + 1], x.y, s[r][u]);
            s[r][u] = fmaf(q[r][c + 2], x.z, s[r][u]);
            s[r][u] = fmaf(q[r][c + 3], x.w, s[r][u]);
          }
        }
#pragma unroll
        for (int r = 0; r < R; r++)
          if (k0 + key >= kend || k0 + key > lim[r]) s[r][u] = -INFINITY;
      }
      bool any = false;
#pragma unroll
      for (int r = 0; r < R; r++) {
        float mn = m[r];
#pragma unroll
        for (int u = 0; u < kCh; u++) mn = fmaxf(mn, s[r][u]);
        if (mn == -INFINITY) continue;  // nothing visible to this row yet
        any = true;
        const float corr = exp2f(m[r] - mn);
        m[r] = mn;
        l[r] *= corr;
#pragma unroll
        for (int c = 0; c < D; c++) o[r][c] *= corr;
#pragma unroll
        for (int u = 0; u < kCh; u++) {
          s[r][u] = exp2f(s[r][u] - mn);
          l[r] += s[r][u];
        }
      }
      if (!any) continue;
#pragma unroll
      for (int u = 0; u < kCh; u++) {
        const float *vr = &vs[sub + kSub * (c0 + u)][0];
#pragma unroll
        for (int c = 0; c < D; c += 4) {
          const float4 x = *reinterpret_cast<const float4 *>(vr + c);
#pragma unroll
          for (int r = 0; r < R; r++) {
            const float p = m[r] == -INFINITY ? 0.f : s[r][u];
            o[r][c] = fmaf(p, x.x, o[r][c]);
            o[r][c + 1] = fmaf(p, x.y, o[r][c + 1]);
            o[r][c + 2] = fmaf(p, x.z, o[r][c + 2]);
            o[r][c + 3] = fmaf(p, x.w, o[r][c + 3]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; r++) {
    // merge the kSub partial softmaxes of the row
#pragma unroll
    for (int w = kSubLane; w < kSub * kSubLane; w <<= 1) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[r], w), lo = __shfl_xor_sync(0xffffffffu, l[r], w);
      const float mn = fmaxf(m[r], mo);
      const float fa = m[r] == -INFINITY ? 0.f : exp2f(m[r] - mn), fb = mo == -INFINITY ? 0.f : exp2f(mo - mn);
      l[r] = l[r] * fa + lo * fb;
#pragma unroll
      for (int c = 0; c < D; c++) o[r][c] = o[r][c] * fa + __shfl_xor_sync(0xffffffffu, o[r][c], w) * fb;
      m[r] = mn;
    }
    const int i = i0 + r * kRows;
    if (i < a.tq) {
      float *op = a.o.p + head_offset(a.o.batch, a.o.head, bh, a.heads) + (int64_t)i * a.o.row;
      store_share<D>(op, o[r], sub, l[r] > 0.f ? 1.f / l[r] : 0.f);
      if (sub == 0) a.lse[(int64_t)bh * a.tq + i] = l[r] > 0.f ? (m[r] + log2f(l[r])) * kLn2 : INFINITY;
    }
  }
}

// dq of one query row per kSub threads, keys split between them; writes delta.
template <int D>
__global__ void __launch_bounds__(kThreads) attn_bwd_dq_kernel(BwdArgs a) {
  __shared__ __align__(16) float ks[kTile][D + kPad];
  __shared__ __align__(16) float vs[kTile][D + kPad];
  const int bh = blockIdx.y;
  const QueryTile qt = query_tile(a.tq, a.tk, a.causal, kRows);
  const int sub = qt.sub, i = qt.i0, kend = qt.kend;
  const bool valid = i < a.tq;
  const int lim = a.causal ? i + a.tk - a.tq : a.tk - 1;
  const float *kp = a.k.p + head_offset(a.k.batch, a.k.head, bh, a.heads);
  const float *vp = a.v.p + head_offset(a.v.batch, a.v.head, bh, a.heads);

  float q[D], g[D], dq[D];
  float lse2 = INFINITY, delta = 0.f;
  if (valid) {
    load_row<D>(q, a.q.p + head_offset(a.q.batch, a.q.head, bh, a.heads) + (int64_t)i * a.q.row, a.scale2);
    load_row<D>(g, a.dout.p + head_offset(a.dout.batch, a.dout.head, bh, a.heads) + (int64_t)i * a.dout.row, 1.f);
    const float *op = a.o.p + head_offset(a.o.batch, a.o.head, bh, a.heads) + (int64_t)i * a.o.row;
    constexpr int kShare = D / kSub;
#pragma unroll
    for (int c = 0; c < D; c += 4)
      if (c / kShare == sub) {
        const float4 x = *reinterpret_cast<const float4 *>(op + c);
        delta += g[c] * x.x + g[c + 1] * x.y + g[c + 2] * x.z + g[c + 3] * x.w;
      }
    lse2 = a.lse[(int64_t)bh * a.tq + i] * kLog2e;
  } else {
#pragma unroll
    for (int c = 0; c < D; c++) q[c] = g[c] = 0.f;
  }
  delta = sub_sum(delta);
  if (valid && sub == 0) a.delta[(int64_t)bh * a.tq + i] = delta;
#pragma unroll
  for (int c = 0; c < D; c++) dq[c] = 0.f;

  for (int k0 = 0; k0 < kend; k0 += kTile) {
    stage_kv<D>(ks, vs, kp, a.k.row, vp, a.v.row, k0, kend);
#pragma unroll 1
    for (int c0 = 0; c0 < kTile / kSub; c0 += kChunk) {
      float ds[kChunk];
#pragma unroll
      for (int u = 0; u < kChunk; u++) {
        const int r = sub + kSub * (c0 + u);
        const float s = dot_row<D>(q, &ks[r][0]), dp = dot_row<D>(g, &vs[r][0]);
        const float p = (k0 + r >= kend || k0 + r > lim) ? 0.f : exp2f(s - lse2);
        ds[u] = p * (dp - delta);
      }
#pragma unroll
      for (int u = 0; u < kChunk; u++) axpy_row<D>(dq, ds[u], &ks[sub + kSub * (c0 + u)][0]);
    }
  }
#pragma unroll
  for (int c = 0; c < D; c++) dq[c] = sub_sum(dq[c]);
  if (!valid) return;
  store_share<D>(a.dq.p + head_offset(a.dq.batch, a.dq.head, bh, a.heads) + (int64_t)i * a.dq.row, dq, sub, a.scale);
}

// dk and dv of one key row per kSub threads, queries split between them.
template <int D>
__global__ void __launch_bounds__(kThreads) attn_bwd_dkv_kernel(BwdArgs a) {
  __shared__ __align__(16) float qs[kTile][D + kPad];
  __shared__ __align__(16) float gs[kTile][D + kPad];
  __shared__ float lse_s[kTile], delta_s[kTile];
  const int bh = blockIdx.y;
  const int tile = (int)blockIdx.x;  // the first key tiles see the most queries: first
  const int sub = sub_of(threadIdx.x), j = tile * kRows + row_of(threadIdx.x);
  const bool valid = j < a.tk;
  const int off = a.tk - a.tq;
  const int qbeg = a.causal ? max(0, tile * kRows - off) : 0;  // the first query the tile's first key meets
  const int first = a.causal ? j - off : 0;                     // the first query key j meets
  const float *qp = a.q.p + head_offset(a.q.batch, a.q.head, bh, a.heads);
  const float *gp = a.dout.p + head_offset(a.dout.batch, a.dout.head, bh, a.heads);

  float k[D], v[D], dk[D], dv[D];
  if (valid) {
    load_row<D>(k, a.k.p + head_offset(a.k.batch, a.k.head, bh, a.heads) + (int64_t)j * a.k.row, 1.f);
    load_row<D>(v, a.v.p + head_offset(a.v.batch, a.v.head, bh, a.heads) + (int64_t)j * a.v.row, 1.f);
  } else {
#pragma unroll
    for (int c = 0; c < D; c++) k[c] = v[c] = 0.f;
  }
#pragma unroll
  for (int c = 0; c < D; c++) dk[c] = dv[c] = 0.f;

  for (int i0 = qbeg; i0 < a.tq; i0 += kTile) {
    __syncthreads();
    load_tile<D>(qs, qp, a.q.row, i0, a.tq, 1.f);
    load_tile<D>(gs, gp, a.dout.row, i0, a.tq, 1.f);
    stage_lse_delta<kThreads>(lse_s, delta_s, a, bh, i0, kTile);
    __syncthreads();
#pragma unroll 1
    for (int c0 = 0; c0 < kTile / kSub; c0 += kChunk) {
      float p[kChunk], ds[kChunk];
#pragma unroll
      for (int u = 0; u < kChunk; u++) {
        const int r = sub + kSub * (c0 + u);
        const float s = dot_row<D>(k, &qs[r][0]) * a.scale2, dp = dot_row<D>(v, &gs[r][0]);
        p[u] = (i0 + r >= a.tq || i0 + r < first) ? 0.f : exp2f(s - lse_s[r]);
        ds[u] = p[u] * (dp - delta_s[r]);
      }
#pragma unroll
      for (int u = 0; u < kChunk; u++) {
        const int r = sub + kSub * (c0 + u);
        axpy_row<D>(dv, p[u], &gs[r][0]);
        axpy_row<D>(dk, ds[u], &qs[r][0]);
      }
    }
  }
#pragma unroll
  for (int c = 0; c < D; c++) {
    dk[c] = sub_sum(dk[c]);
    dv[c] = sub_sum(dv[c]);
  }
  if (!valid) return;
  store_share<D>(a.dk.p + head_offset(a.dk.batch, a.dk.head, bh, a.heads) + (int64_t)j * a.dk.row, dk, sub, a.scale);
  store_share<D>(a.dv.p + head_offset(a.dv.batch, a.dv.head, bh, a.heads) + (int64_t)j * a.dv.row, dv, sub, 1.f);
}

// ---- tensor-core kernels (3xTF32) ----------------------------------------------------
//
// The same three kernels on mma.sync m16n8k8 TF32 tensor cores, with float32 accuracy by the
// 3xTF32 split that PyTorch's memory-efficient attention also uses in float32 (tf32x3.cuh),
// accumulated in float32.
//
// A block is 4 warps; each warp owns 16 rows (queries in the forward and dq kernels, keys in
// the dk/dv kernel), 64 a block, as A operands in registers, split once. The other side comes in
// tiles of 64 rows, split once into shared memory as hi and lo words, and a warp takes a tile 32
// columns of scores at a time (4 n-tiles of 8). A score tile leaves the accumulator in the C
// layout (row g = lane / 4 and g + 8, columns 2t and 2t + 1, t = lane % 4) and the next product
// (P V, dS K, P^T dO, dS^T q) wants it as an A operand (columns t and t + 4): instead of moving
// values between lanes, that product's B operand is read with its rows permuted to match (A
// column t is row 2t, column t + 4 is row 2t + 1 of each 8), which sums the same terms.
// Deterministic: every output element is accumulated by one thread in a fixed order.
constexpr int kTcThreads = 128;  // 4 warps
constexpr int kTcRows = 64;      // owned rows a block (16 a warp), and rows a shared tile
// Score columns a warp holds at once. The products of a chunk (p v, ds k, p dout, ds q) go into
// an accumulator of their own, added to the running sum in float32 after the chunk: the tensor
// cores' float32 accumulation truncates, and over 1000 keys of one running sum (375 products)
// the output drifted by up to 8e-6 of its norm (tests/gpu/test_attention_f32.py).
constexpr int kTcCols = 32;

// A shared tile of 64 rows split into hi and lo words; the padding of 4 words makes both ways of
// reading B operands below free of bank conflicts for D = 16 and 32.
template <int D>
struct SplitTile {
  uint32_t hi[kTcRows][D + 4], lo[kTcRows][D + 4];
};

// c += a * B, B (k x n) = rows r0 + g of the tile, columns d0 + t and d0 + t + 4 (as k): the
// other side's rows as the columns of the product (q k^T, dout v^T, k q^T, v dout^T).
template <int D>
__device__ __forceinline__ void mma_rows(float (&c)[4], const FragA &a, const SplitTile<D> &s, int r0, int d0) {
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const uint32_t h0 = s.hi[r0 + g][d0 + t], h1 = s.hi[r0 + g][d0 + t + 4];
  const uint32_t l0 = s.lo[r0 + g][d0 + t], l1 = s.lo[r0 + g][d0 + t + 4];
  mma_tf32x3(c, a.hi, a.lo, h0, h1, l0, l1);
}

// c += a * B, B (k x n) = rows r0 + 2t and r0 + 2t + 1 of the tile (as k, matching frag_of_c),
// column d0 + g: the other side's rows summed with the scores' weights (p v, ds k, p dout, ds q).
template <int D>
__device__ __forceinline__ void mma_cols(float (&c)[4], const FragA &a, const SplitTile<D> &s, int r0, int d0) {
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const uint32_t h0 = s.hi[r0 + 2 * t][d0 + g], h1 = s.hi[r0 + 2 * t + 1][d0 + g];
  const uint32_t l0 = s.lo[r0 + 2 * t][d0 + g], l1 = s.lo[r0 + 2 * t + 1][d0 + g];
  mma_tf32x3(c, a.hi, a.lo, h0, h1, l0, l1);
}

// The backward's two score tiles of a chunk (columns c0 .. c0 + 32 of the other side's tile):
// s += a (rows of ta)^T and dp += b (rows of tb)^T.
template <int D>
__device__ __forceinline__ void score_pair(float (&s)[4][4], const FragA (&a)[D / 8], const SplitTile<D> &ta,
                                           float (&dp)[4][4], const FragA (&b)[D / 8], const SplitTile<D> &tb,
                                           int c0) {
#pragma unroll
  for (int nt = 0; nt < 4; nt++)
#pragma unroll
    for (int kk = 0; kk < D / 8; kk++) {
      mma_rows<D>(s[nt], a[kk], ta, c0 + 8 * nt, 8 * kk);
      mma_rows<D>(dp[nt], b[kk], tb, c0 + 8 * nt, 8 * kk);
    }
}

// Rows [r0, r0 + 64) of src (row stride `row`; rows >= n as 0), times mul, split into dst.
template <int D>
__device__ __forceinline__ void stage_split(SplitTile<D> &dst, const float *src, int64_t row, int r0, int n,
                                            float mul) {
  for_tile<D, kTcRows, kTcThreads>(src, row, r0, n, [&](int r, int c, float4 x) {
    const Tf32 a = split_tf32(x.x * mul), b = split_tf32(x.y * mul), cc = split_tf32(x.z * mul),
               d = split_tf32(x.w * mul);
    *reinterpret_cast<uint4 *>(&dst.hi[r][c]) = make_uint4(a.hi, b.hi, cc.hi, d.hi);
    *reinterpret_cast<uint4 *>(&dst.lo[r][c]) = make_uint4(a.lo, b.lo, cc.lo, d.lo);
  });
}

// Rows [k0, k0 + 64) of k and v (zero past kend) split into ks and vs, between two barriers.
template <int D>
__device__ __forceinline__ void stage_kv_split(SplitTile<D> &ks, SplitTile<D> &vs, const float *kp, int64_t krow,
                                               const float *vp, int64_t vrow, int k0, int kend) {
  __syncthreads();
  stage_split<D>(ks, kp, krow, k0, kend, 1.f);
  stage_split<D>(vs, vp, vrow, k0, kend, 1.f);
  __syncthreads();
}

template <int D>
__global__ void __launch_bounds__(kTcThreads) attn_fwd_tc_kernel(FwdArgs a) {
  pdl_wait();  // launched with launch_pdl_wide; pdl_release() after the main loop
  __shared__ __align__(16) SplitTile<D> ks, vs;
  const int bh = blockIdx.y, warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  static_assert(kTcRows == 64, "query_rows' tiles");
  const QueryRows qr = query_rows(a.tq, a.tk, a.causal, warp, g);
  const int r0 = qr.r0, kend = qr.kend, wend = qr.wend, lim0 = qr.lim0, lim1 = qr.lim1;
  const float *kp = a.k.p + head_offset(a.k.batch, a.k.head, bh, a.heads);
  const float *vp = a.v.p + head_offset(a.v.batch, a.v.head, bh, a.heads);

  FragA qf[D / 8];
  load_own<D>(qf, a.q.p + head_offset(a.q.batch, a.q.head, bh, a.heads), a.q.row, r0, a.tq, a.scale2);
  float o[D / 8][4] = {}, m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

  for (int k0 = 0; k0 < kend; k0 += kTcRows) {
    stage_kv_split<D>(ks, vs, kp, a.k.row, vp, a.v.row, k0, kend);
#pragma unroll 1
    for (int c0 = 0; c0 < kTcRows && k0 + c0 < wend; c0 += kTcCols) {
      float s[4][4] = {};
#pragma unroll
      for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int kk = 0; kk < D / 8; kk++) mma_rows<D>(s[nt], qf[kk], ks, c0 + 8 * nt, 8 * kk);
      float mx0 = m0, mx1 = m1;
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
        const int key = k0 + c0 + 8 * nt + 2 * t;
        if (key > lim0) s[nt][0] = -INFINITY;
        if (key + 1 > lim0) s[nt][1] = -INFINITY;
        if (key > lim1) s[nt][2] = -INFINITY;
        if (key + 1 > lim1) s[nt][3] = -INFINITY;
        mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
        mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
      }
      const SoftmaxStep st = softmax_step(mx0, mx1, m0, m1, l0, l1);
      const float b0 = st.b0, b1 = st.b1, corr0 = st.corr0, corr1 = st.corr1;
      float pv[D / 8][4] = {};  // the chunk's p v, added to o in float32 (see kTcCols)
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
        s[nt][0] = exp2f(s[nt][0] - b0), s[nt][1] = exp2f(s[nt][1] - b0);
        s[nt][2] = exp2f(s[nt][2] - b1), s[nt][3] = exp2f(s[nt][3] - b1);
        l0 += s[nt][0] + s[nt][1];
        l1 += s[nt][2] + s[nt][3];
        const FragA pf = frag_of_c(s[nt]);
#pragma unroll
        for (int nn = 0; nn < D / 8; nn++) mma_cols<D>(pv[nn], pf, vs, c0 + 8 * nt, 8 * nn);
      }
#pragma unroll
      for (int nn = 0; nn < D / 8; nn++) {
        o[nn][0] = fmaf(o[nn][0], corr0, pv[nn][0]), o[nn][1] = fmaf(o[nn][1], corr0, pv[nn][1]);
        o[nn][2] = fmaf(o[nn][2], corr1, pv[nn][2]), o[nn][3] = fmaf(o[nn][3], corr1, pv[nn][3]);
      }
    }
  }
  pdl_release();
  store_forward<D>(a, bh, r0, g, t, o, m0, m1, l0, l1);
}

// dq of the warp's 16 query rows; writes delta.
template <int D>
__global__ void __launch_bounds__(kTcThreads) attn_bwd_dq_tc_kernel(BwdArgs a) {
  pdl_wait();  // launched with launch_pdl_wide; pdl_release() after the main loop
  __shared__ __align__(16) SplitTile<D> ks, vs;
  const int bh = blockIdx.y, warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const QueryRows qr = query_rows(a.tq, a.tk, a.causal, warp, g);
  const int r0 = qr.r0, kend = qr.kend, wend = qr.wend, lim0 = qr.lim0, lim1 = qr.lim1;
  const float *kp = a.k.p + head_offset(a.k.batch, a.k.head, bh, a.heads);
  const float *vp = a.v.p + head_offset(a.v.batch, a.v.head, bh, a.heads);

  FragA qf[D / 8], gf[D / 8];
  const RowTerms rt = dq_rows<D>(qf, gf, a, bh, r0, g, t);
  const float delta0 = rt.delta0, delta1 = rt.delta1, lse0 = rt.lse0, lse1 = rt.lse1;
  float dq[D / 8][4] = {};

  for (int k0 = 0; k0 < kend; k0 += kTcRows) {
    stage_kv_split<D>(ks, vs, kp, a.k.row, vp, a.v.row, k0, kend);
#pragma unroll 1
    for (int c0 = 0; c0 < kTcRows && k0 + c0 < wend; c0 += kTcCols) {
      float s[4][4] = {}, dp[4][4] = {}, part[D / 8][4] = {};
      score_pair<D>(s, qf, ks, dp, gf, vs, c0);
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
        const int key = k0 + c0 + 8 * nt + 2 * t;
        const float p0 = key > lim0 ? 0.f : exp2f(s[nt][0] - lse0), p1 = key + 1 > lim0 ? 0.f : exp2f(s[nt][1] - lse0);
        const float p2 = key > lim1 ? 0.f : exp2f(s[nt][2] - lse1), p3 = key + 1 > lim1 ? 0.f : exp2f(s[nt][3] - lse1);
        s[nt][0] = p0 * (dp[nt][0] - delta0), s[nt][1] = p1 * (dp[nt][1] - delta0);
        s[nt][2] = p2 * (dp[nt][2] - delta1), s[nt][3] = p3 * (dp[nt][3] - delta1);
        const FragA df = frag_of_c(s[nt]);
#pragma unroll
        for (int nn = 0; nn < D / 8; nn++) mma_cols<D>(part[nn], df, ks, c0 + 8 * nt, 8 * nn);
      }
#pragma unroll
      for (int nn = 0; nn < D / 8; nn++)
#pragma unroll
        for (int e = 0; e < 4; e++) dq[nn][e] += part[nn][e];
    }
  }
  pdl_release();
  store_own<D>(a.dq.p + head_offset(a.dq.batch, a.dq.head, bh, a.heads), a.dq.row, r0, a.tq, dq, a.scale, a.scale);
}

// dk and dv of the warp's 16 key rows.
template <int D>
__global__ void __launch_bounds__(kTcThreads) attn_bwd_dkv_tc_kernel(BwdArgs a) {
  pdl_wait();  // launched with launch_pdl_wide; pdl_release() after the main loop
  __shared__ __align__(16) SplitTile<D> qs, gs;
  __shared__ float lse_s[kTcRows], delta_s[kTcRows];
  const int bh = blockIdx.y, warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const int tile = (int)blockIdx.x;  // the first key tiles see the most queries: first
  const int off = a.tk - a.tq, j0 = tile * kTcRows + 16 * warp;
  const int qbeg = a.causal ? max(0, tile * kTcRows - off) : 0;  // the first query the block's first key meets
  const int wbeg = a.causal ? j0 - off : 0;                      // the first query the warp's first key meets
  const int first0 = a.causal ? j0 + g - off : 0, first1 = first0 + (a.causal ? 8 : 0);  // of rows j0 + g, + 8
  const float *qp = a.q.p + head_offset(a.q.batch, a.q.head, bh, a.heads);
  const float *gp = a.dout.p + head_offset(a.dout.batch, a.dout.head, bh, a.heads);

  FragA kf[D / 8], vf[D / 8];
  load_own<D>(kf, a.k.p + head_offset(a.k.batch, a.k.head, bh, a.heads), a.k.row, j0, a.tk, a.scale2);
  load_own<D>(vf, a.v.p + head_offset(a.v.batch, a.v.head, bh, a.heads), a.v.row, j0, a.tk, 1.f);
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};

  for (int i0 = qbeg; i0 < a.tq; i0 += kTcRows) {
    __syncthreads();
    stage_split<D>(qs, qp, a.q.row, i0, a.tq, 1.f);
    stage_split<D>(gs, gp, a.dout.row, i0, a.tq, 1.f);
    stage_lse_delta<kTcThreads>(lse_s, delta_s, a, bh, i0, kTcRows);
    __syncthreads();
    if (j0 >= a.tk) continue;  // a warp past the last key: it only helps stage
#pragma unroll 1
    for (int c0 = 0; c0 < kTcRows && i0 + c0 < a.tq; c0 += kTcCols) {
      if (i0 + c0 + kTcCols - 1 < wbeg) continue;  // no query of the chunk sees the warp's keys
      float s[4][4] = {}, dp[4][4] = {}, kpart[D / 8][4] = {}, vpart[D / 8][4] = {};
      score_pair<D>(s, kf, qs, dp, vf, gs, c0);
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
        const int r = c0 + 8 * nt + 2 * t, i = i0 + r;  // the queries of columns 2t and 2t + 1
        const float la = lse_s[r], lb = lse_s[r + 1], da = delta_s[r], db = delta_s[r + 1];
        const bool va = i < a.tq, vb = i + 1 < a.tq;
        const float p0 = va && i >= first0 ? exp2f(s[nt][0] - la) : 0.f;
        const float p1 = vb && i + 1 >= first0 ? exp2f(s[nt][1] - lb) : 0.f;
        const float p2 = va && i >= first1 ? exp2f(s[nt][2] - la) : 0.f;
        const float p3 = vb && i + 1 >= first1 ? exp2f(s[nt][3] - lb) : 0.f;
        s[nt][0] = p0, s[nt][1] = p1, s[nt][2] = p2, s[nt][3] = p3;
        dp[nt][0] = p0 * (dp[nt][0] - da), dp[nt][1] = p1 * (dp[nt][1] - db);
        dp[nt][2] = p2 * (dp[nt][2] - da), dp[nt][3] = p3 * (dp[nt][3] - db);
        const FragA pf = frag_of_c(s[nt]), df = frag_of_c(dp[nt]);
#pragma unroll
        for (int nn = 0; nn < D / 8; nn++) {
          mma_cols<D>(vpart[nn], pf, gs, c0 + 8 * nt, 8 * nn);
          mma_cols<D>(kpart[nn], df, qs, c0 + 8 * nt, 8 * nn);
        }
      }
#pragma unroll
      for (int nn = 0; nn < D / 8; nn++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[nn][e] += kpart[nn][e], dv[nn][e] += vpart[nn][e];
    }
  }
  pdl_release();
  store_own<D>(a.dk.p + head_offset(a.dk.batch, a.dk.head, bh, a.heads), a.dk.row, j0, a.tk, dk, a.scale, a.scale);
  store_own<D>(a.dv.p + head_offset(a.dv.batch, a.dv.head, bh, a.heads), a.dv.row, j0, a.tk, dv, 1.f, 1.f);
}

// ---- launchers -----------------------------------------------------------------------

void check_geometry(const char *op, const AttentionGeometry &g, double scale,
                    std::initializer_list<std::pair<const void *, const HeadStrides *>> operands) {
  MT_CHECK(attention_f32_supported(g.d), UNSUPPORTED, "cuda %s: float32 head dim %lld is not supported (16 or 32)", op,
           (long long)g.d);
  MT_CHECK(g.b >= 0 && g.h >= 1 && g.tq >= 0 && g.tk >= 0, INVALID_ARGUMENT,
           "cuda %s: bad sizes (B=%lld, H=%lld, Tq=%lld, Tk=%lld)", op, (long long)g.b, (long long)g.h,
           (long long)g.tq, (long long)g.tk);
  MT_CHECK(g.b * g.h <= 65535, INVALID_ARGUMENT, "cuda %s: B * H = %lld exceeds 65535", op, (long long)(g.b * g.h));
  MT_CHECK(g.tq < (1LL << 30) && g.tk < (1LL << 30), INVALID_ARGUMENT, "cuda %s: sequence too long (Tq=%lld, Tk=%lld)",
           op, (long long)g.tq, (long long)g.tk);
  MT_CHECK(std::isfinite(scale) && scale > 0, INVALID_ARGUMENT, "cuda %s: scale must be finite and > 0, got %g", op,
           scale);
  for (const auto &x : operands) {
    MT_CHECK(x.first != nullptr && is_aligned16(x.first), INVALID_ARGUMENT,
             "cuda %s: an operand is null or not 16-byte aligned (%p)", op, x.first);
    const HeadStrides &s = *x.second;
    MT_CHECK(s.batch % 4 == 0 && s.head % 4 == 0 && s.row % 4 == 0, INVALID_ARGUMENT,
             "cuda %s: strides (%lld, %lld, %lld) are not multiples of 4 floats", op, (long long)s.batch,
             (long long)s.head, (long long)s.row);
  }
}

// The kernels selected by mt_study_attention_f32: 0 production (the warpgroup-MMA kernels of
// attention_f32_wgmma.cu on a compute capability 9.0 device at head dim 32, the mma.sync
// tensor-core kernels elsewhere), 1 the row-per-thread FFMA kernels, 2 the mma.sync kernels
// everywhere. MT_CUDA_ATTN_F32_ROWS set in the environment starts the process on 1, so whole
// programs can be compared.
std::atomic<int> g_attn_f32_variant{std::getenv("MT_CUDA_ATTN_F32_ROWS") != nullptr ? 1 : 0};
std::atomic<int64_t> g_attn_wgmma_runs{0};  // warpgroup-MMA kernels launched (mt_study_attention_f32(3))

// Counts a warpgroup-MMA launch that took place (launched true).
bool counted(bool launched) {
  if (launched) g_attn_wgmma_runs.fetch_add(1, std::memory_order_relaxed);
  return launched;
}

// attention_f32_wgmma.cu's kernels: head dim 32 on Hopper.
template <int D>
bool use_wgmma(const Context &c) {
  return D == 32 && c.cc_major == 9;
}

// The row kernels: one query row per thread (attn_fwd_kernel<D, 2>, two rows each shared value
// read feeding both, measured the same on an H100 at the char-GPT shapes, with 192 registers
// against 133).
template <int D>
void launch_forward(Context &c, const FwdArgs &a, int64_t bh) {
  const int variant = g_attn_f32_variant.load(std::memory_order_relaxed);
  if (variant == 1) {
    attn_fwd_kernel<D, 1><<<dim3((unsigned)((a.tq + kRows - 1) / kRows), (unsigned)bh), kThreads, 0, c.stream>>>(a);
  } else if (!(variant == 0 && use_wgmma<D>(c) && counted(attention_f32_wgmma_forward(c, a, bh)))) {
    const dim3 fwd_grid((unsigned)((a.tq + kTcRows - 1) / kTcRows), (unsigned)bh);
    MT_CUDA_CHECK(launch_pdl_wide(c, attn_fwd_tc_kernel<D>, fwd_grid, kTcThreads, a));
  }
  MT_CUDA_CHECK_LAUNCH("attention_f32 forward");
}

template <int D>
void launch_backward(Context &c, const BwdArgs &a, int64_t bh) {
  const int variant = g_attn_f32_variant.load(std::memory_order_relaxed);
  if (variant == 1) {
    attn_bwd_dq_kernel<D><<<dim3((unsigned)((a.tq + kRows - 1) / kRows), (unsigned)bh), kThreads, 0, c.stream>>>(a);
    MT_CUDA_CHECK_LAUNCH("attention_f32 backward (dq)");
    attn_bwd_dkv_kernel<D><<<dim3((unsigned)((a.tk + kRows - 1) / kRows), (unsigned)bh), kThreads, 0, c.stream>>>(a);
    MT_CUDA_CHECK_LAUNCH("attention_f32 backward (dk, dv)");
    return;
  }
  const bool wg = variant == 0 && use_wgmma<D>(c);
  if (!(wg && counted(attention_f32_wgmma_dq(c, a, bh)))) {
    const dim3 dq_grid((unsigned)((a.tq + kTcRows - 1) / kTcRows), (unsigned)bh);
    MT_CUDA_CHECK(launch_pdl_wide(c, attn_bwd_dq_tc_kernel<D>, dq_grid, kTcThreads, a));
  }
  MT_CUDA_CHECK_LAUNCH("attention_f32 backward (dq)");
  if (!(wg && counted(attention_f32_wgmma_dkv(c, a, bh)))) {
    const dim3 dkv_grid((unsigned)((a.tk + kTcRows - 1) / kTcRows), (unsigned)bh);
    MT_CUDA_CHECK(launch_pdl_wide(c, attn_bwd_dkv_tc_kernel<D>, dkv_grid, kTcThreads, a));
  }
  MT_CUDA_CHECK_LAUNCH("attention_f32 backward (dk, dv)");
}

// The rows of out (per its strides) set to `value` for every (b, h, t < rows): the empty-key
// case, rare enough for a loop of 2-D memsets.
void fill_rows(Context &c, float *p, const HeadStrides &s, const AttentionGeometry &g, int64_t rows) {
  for (int64_t b = 0; b < g.b; b++)
    for (int64_t h = 0; h < g.h; h++)
      MT_CUDA_CHECK(cudaMemset2DAsync(p + b * s.batch + h * s.head, (size_t)s.row * 4, 0, (size_t)g.d * 4,
                                      (size_t)rows, c.stream));
}

}  // namespace

bool attention_f32_supported(int64_t d) { return d == 16 || d == 32; }

void attention_f32_forward(Context &c, const AttentionGeometry &g, float *o, float *lse, const float *q,
                           const float *k, const float *v, double scale, bool causal) {
  NvtxRange range("attention_f32");
  if (g.b * g.h == 0 || g.tq == 0) return;
  check_geometry("attention_f32", g, scale, {{o, &g.o}, {q, &g.q}, {k, &g.k}, {v, &g.v}});
  MT_CHECK(lse != nullptr, INVALID_ARGUMENT, "cuda attention_f32: null lse");
  MT_CHECK(!causal || g.tk >= g.tq, INVALID_ARGUMENT,
           "cuda attention_f32: causal with Tk=%lld < Tq=%lld leaves queries without a key", (long long)g.tk,
           (long long)g.tq);
  if (g.tk == 0) {  // no key: zero rows and an lse of +inf
    fill_rows(c, o, g.o, g, g.tq);
    launch_fill(lse, g.b * g.h * g.tq, DType::F32, INFINITY);
    return;
  }
  const FwdArgs a{{q, g.q.batch, g.q.head, g.q.row},
                  {k, g.k.batch, g.k.head, g.k.row},
                  {v, g.v.batch, g.v.head, g.v.row},
                  {o, g.o.batch, g.o.head, g.o.row},
                  lse,
                  (int)g.tq,
                  (int)g.tk,
                  (int)g.h,
                  (float)(scale * 1.4426950408889634),
                  causal ? 1 : 0};
  if (g.d == 16)
    launch_forward<16>(c, a, g.b * g.h);
  else
    launch_forward<32>(c, a, g.b * g.h);
}

void attention_f32_backward(Context &c, const AttentionGeometry &g, float *dq, float *dk, float *dv, const float *q,
                            const float *k, const float *v, const float *o, const float *lse, const float *dout,
                            double scale, bool causal) {
  NvtxRange range("attention_f32_backward");
  if (g.b * g.h == 0) return;
  if (g.tq == 0 || g.tk == 0) {  // nothing flows: zero gradients
    if (g.tq) fill_rows(c, dq, g.q, g, g.tq);
    if (g.tk) {
      fill_rows(c, dk, g.k, g, g.tk);
      fill_rows(c, dv, g.v, g, g.tk);
    }
    return;
  }
  check_geometry("attention_f32 backward", g, scale,
                 {{dq, &g.q}, {dk, &g.k}, {dv, &g.v}, {q, &g.q}, {k, &g.k}, {v, &g.v}, {o, &g.o}, {dout, &g.o}});
  MT_CHECK(lse != nullptr, INVALID_ARGUMENT, "cuda attention_f32 backward: null lse");
  MT_CHECK(!causal || g.tk >= g.tq, INVALID_ARGUMENT,
           "cuda attention_f32 backward: causal with Tk=%lld < Tq=%lld", (long long)g.tk, (long long)g.tq);
  PoolBuffer delta(g.b * g.h * g.tq * (int64_t)sizeof(float));
  const BwdArgs a{{q, g.q.batch, g.q.head, g.q.row},
                  {k, g.k.batch, g.k.head, g.k.row},
                  {v, g.v.batch, g.v.head, g.v.row},
                  {o, g.o.batch, g.o.head, g.o.row},
                  {dout, g.o.batch, g.o.head, g.o.row},
                  {dq, g.q.batch, g.q.head, g.q.row},
                  {dk, g.k.batch, g.k.head, g.k.row},
                  {dv, g.v.batch, g.v.head, g.v.row},
                  lse,
                  delta.as<float>(),
                  (int)g.tq,
                  (int)g.tk,
                  (int)g.h,
                  (float)scale,
                  (float)(scale * 1.4426950408889634),
                  causal ? 1 : 0};
  if (g.d == 16)
    launch_backward<16>(c, a, g.b * g.h);
  else
    launch_backward<32>(c, a, g.b * g.h);
}

}  // namespace cuda
}  // namespace mt

// ---- the study hook ---------------------------------------------------------------------------
//
// mt_study_attention_f32: an internal hook for scripts/bench/workloads_attention.py and
// tests/gpu/test_attention_f32.py, NOT part of the public API (no stability promise; exported
// only because they drive it through ctypes). It picks the kernels every later float32
// attention (forward and backward, mt_scaled_dot_product_attention and mt_self_attention) runs,
// until the next call:
//   variant 0  production: the tensor-core kernels (3xTF32), on warpgroup MMA where a 9.0
//              device runs head dim 32, on mma.sync elsewhere
//   variant 1  the row-per-thread FFMA kernels
//   variant 2  the mma.sync tensor-core kernels everywhere
// and returns 0 (MT_OK); variant 3 changes nothing and returns how many warpgroup-MMA kernels
// (forward, dq and dk/dv launches, each counted) have run in this process, the tests' proof that
// production runs them on Hopper. MT_ERR_INVALID_ARGUMENT for another variant (the selection is
// then left as it was). It leaves mt_last_error() alone. Not thread-safe against launches running
// concurrently in other threads (they may see either selection).
extern "C" MT_API int64_t mt_study_attention_f32(int64_t variant) {
  if (variant == 3) return mt::cuda::g_attn_wgmma_runs.load(std::memory_order_relaxed);
  if (variant < 0 || variant > 2) return (int64_t)mt::Code::INVALID_ARGUMENT;
  mt::cuda::g_attn_f32_variant.store((int)variant, std::memory_order_relaxed);
  return 0;
}
