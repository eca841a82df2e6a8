// attention_f32.cu - float32 attention in three kernels (forward, dq, dk/dv), for head dims
// 16 and 32, with each operand's heads read and written at strides of their own: q, k, v can
// be the three column blocks of one packed projection [B, T, 3 H D] and out [B, T, H D], so no
// head split or merge is ever copied, and no T x S matrix is ever stored.
//
// Exact float32 (FFMA; no tensor cores), f32 accumulation, softmax in base 2 with the scale
// folded into the scores (as FlashAttention does). One thread owns one query row (forward,
// dq) or one key row (dk, dv) in registers; kSub threads share that row and split the other
// side between them (interleaved rows of each shared tile), then merge through warp shuffles.
// The rows of the other side come from shared memory, one float4 per 4 FMAs, so the kernels are bound by
// shared-memory return bandwidth: the lane mapping (sub_of, row_of) makes each quarter-warp read
// one address at a time, which returns at twice the rate of distinct addresses (on an H100 this
// took the forward from 68 to 51 us and the two backward kernels from 215 to 145 us at the
// char-GPT large shape). Deterministic: no atomics, every output element is written by one
// thread in a fixed order of additions.
//
// The backward is FlashAttention-2's without atomics: the dq kernel (one block per query tile,
// keys in the inner loop) also writes D_i = dout_i . out_i, which the dk/dv kernel (one block
// per key tile, queries in the inner loop) reads; P is recomputed in both from q, k and lse.
//
// Contents: kernels | launchers
#include <cmath>

#include "backend/cuda/attention/attention_f32.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/ops.h"

namespace mt {
namespace cuda {
namespace {

constexpr int kSub = 4;      // threads per owned row
constexpr int kRows = 32;    // owned rows per block: kRows * kSub = 128 threads
constexpr int kThreads = kRows * kSub;
constexpr int kTile = 64;    // rows of the other side per shared tile
constexpr int kPad = 4;      // floats of padding per shared row (distinct banks, 16-byte aligned)
constexpr int kChunk = 8;    // rows of the other side scored together (independent FMA chains)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

static_assert(kTile % (kSub * kChunk) == 0, "a tile is whole chunks of every sub-thread");

struct Operand {
  const float *p;
  int64_t batch, head, row;
};
struct OutOperand {
  float *p;
  int64_t batch, head, row;
};

__device__ __forceinline__ int64_t head_offset(int64_t batch, int64_t head, int bh, int heads) {
  return (int64_t)(bh / heads) * batch + (int64_t)(bh % heads) * head;
}

// rows [r0, r0 + kTile) of src (row stride `row`, rows >= n read as 0) into dst[kTile][D + kPad],
// each value times mul.
template <int D>
__device__ __forceinline__ void load_tile(float (*dst)[D + kPad], const float *src, int64_t row, int r0, int n,
                                          float mul) {
  constexpr int kVec = D / 4;
  for (int e = threadIdx.x; e < kTile * kVec; e += kThreads) {
    const int r = e / kVec, c = (e % kVec) * 4;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r0 + r < n) x = *reinterpret_cast<const float4 *>(src + (int64_t)(r0 + r) * row + c);
    x.x *= mul;
    x.y *= mul;
    x.z *= mul;
    x.w *= mul;
    *reinterpret_cast<float4 *>(&dst[r][c]) = x;
  }
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
struct FwdArgs {
  Operand q, k, v;
  OutOperand o;
  float *lse;
  int tq, tk, heads;
  float scale2;  // scale * log2(e)
  int causal;
};

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

// ---- kernels -------------------------------------------------------------------------

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

struct BwdArgs {
  Operand q, k, v, o, dout;
  OutOperand dq, dk, dv;
  const float *lse;
  float *delta;  // [BH, tq]: dout_i . out_i, written by the dq kernel
  int tq, tk, heads;
  float scale, scale2;
  int causal;
};

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
    for (int r = threadIdx.x; r < kTile; r += kThreads) {
      const bool in = i0 + r < a.tq;
      lse_s[r] = in ? a.lse[(int64_t)bh * a.tq + i0 + r] * kLog2e : INFINITY;
      delta_s[r] = in ? a.delta[(int64_t)bh * a.tq + i0 + r] : 0.f;
    }
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

// One query row per thread: two rows (attn_fwd_kernel<D, 2>, each shared value read feeding both)
// measured the same on an H100 at the char-GPT shapes, with 192 registers against 133.
template <int D>
void launch_forward(Context &c, const FwdArgs &a, int64_t bh) {
  const dim3 grid((unsigned)((a.tq + kRows - 1) / kRows), (unsigned)bh);
  attn_fwd_kernel<D, 1><<<grid, kThreads, 0, c.stream>>>(a);
  MT_CUDA_CHECK_LAUNCH("attention_f32 forward");
}

template <int D>
void launch_backward(Context &c, const BwdArgs &a, int64_t bh) {
  attn_bwd_dq_kernel<D><<<dim3((unsigned)((a.tq + kRows - 1) / kRows), (unsigned)bh), kThreads, 0, c.stream>>>(a);
  MT_CUDA_CHECK_LAUNCH("attention_f32 backward (dq)");
  attn_bwd_dkv_kernel<D><<<dim3((unsigned)((a.tk + kRows - 1) / kRows), (unsigned)bh), kThreads, 0, c.stream>>>(a);
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
