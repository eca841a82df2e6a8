// attention_f32_wgmma.cu - attention_f32.cu's three float32 attention kernels (forward, dq,
// dk/dv; 3xTF32, float32 accuracy) on Hopper's warpgroup MMA (wgmma, sm_90a; built for that
// target alone, launched only on a 9.0 device), head dim 32.
//
// A block is one warpgroup (4 warps, 128 threads) owning 64 rows (queries in the forward and dq
// kernels, keys in the dk/dv kernel), 16 a warp, held in registers as split A operands, as in
// the mma.sync kernels (attn_f32::load_own). The other side comes in tiles of 64 rows, split
// once a block into hi and lo words in shared memory, in the layouts TF32 wgmma reads (K-major
// only: 128-byte rows, the 128-byte swizzle, 1024-byte aligned; fa_wgmma.cuh):
//   rows  the tile as it is, 64 rows of 32 floats: the B operand of the products over the head
//         dim (q k^T, dout v^T, k q^T, v dout^T), N = the tile's 64 rows (nat_off);
//   cols  the tile transposed, 32 rows (the head dim) of 64 values as two panels of 32: the B
//         operand of the products over the tile's rows (p v, ds k, p^T dout, ds^T q), N = 32
//         (tr_off). Within each 8 of the tile's rows the order is permuted (row 2t at k = t,
//         row 2t + 1 at k = t + 4), so a score accumulator is that product's A operand as it
//         stands (attn_f32::frag_of_c), with no exchange between lanes.
// What the mma.sync kernels do with 4 warps each reading its B fragments from shared memory,
// here one warpgroup leaves to the tensor cores, which read B themselves. Scores are m64n64
// products (12 wgmma: 4 k8 steps x 3 products, lo x hi, hi x lo, hi x hi); a product over the
// tile's rows goes into a fresh accumulator per 32 rows (12 wgmma), added to the running sum in
// float32 (the tensor cores truncate as they accumulate; tf32x3.cuh). The split tiles and the
// score operands are split by split_tf32_fast (integer arithmetic, lo left to the tensor cores
// to truncate): the conversion instructions of split_tf32 made the three kernels 8-9% slower at
// the char-GPT shapes, with the same worst error in test_attention_f32. The next tile is
// fetched as raw floats by cp.async (fetch) while the current tile's products run, and split
// from shared memory (stage): 10-12% off forward+backward against splitting straight from
// global loads. Deterministic: every output element is accumulated by one thread in a fixed
// order.
#include "backend/cuda/attention/attention_f32_common.cuh"
#include "backend/cuda/attention/fa_wgmma.cuh"
#include "backend/cuda/context.h"

namespace mt {
namespace cuda {
namespace attn_f32 {
namespace {

constexpr int D = 32;         // the head dim: one 128-byte row
constexpr int kThreads = 128;  // one warpgroup
constexpr int kRows = 64;      // owned rows a block, and rows a tile of the other side
constexpr int kHalf = kRows * D;  // words of a split tile's hi or lo half (8 KB), either layout
constexpr int kPanel = 32 * D;    // words of one panel of the transposed layout (4 KB)

// Word offset of (row r, column c) in the rows layout: chunk c / 4 of row r at (c / 4) ^ (r % 8).
__device__ __forceinline__ int nat_off(int r, int c) { return r * D + ((((c >> 2) ^ r) & 7) << 2) + (c & 3); }

// Word offset of the tile's row j, column d in the cols layout: row d of panel j / 32, at the
// permuted position of j % 32 (each 8: 0 4 1 5 2 6 3 7, so position t holds 2t, t + 4 holds 2t + 1).
__device__ __forceinline__ int tr_off(int j, int d) {
  const int u = j & 7, pos = (j & 24) | ((u & 1) << 2) | (u >> 1);
  return (j >> 5) * kPanel + d * 32 + ((((pos >> 2) ^ d) & 7) << 2) + (pos & 3);
}

// Rows [r0, r0 + 64) of src (row stride `row`; rows >= n as 0) into raw, a 64 x 32 float tile in
// the rows layout's order (chunk c / 4 of row r at (c / 4) ^ (r % 8)), by cp.async: only issued
// (commit, wait and a barrier before reading it). The next tile's copy runs during the products.
__device__ __forceinline__ void fetch(float *raw, const float *src, int64_t row, int r0, int n) {
#pragma unroll
  for (int it = 0; it < kRows * (D / 4) / kThreads; it++) {
    const int i = (int)threadIdx.x + it * kThreads, r = i >> 3, c = 4 * (i & 7);
    const bool ok = r0 + r < n;
    cp_async16(raw + nat_off(r, c), ok ? src + (int64_t)(r0 + r) * row + c : src, ok);
  }
}

// Keys [k0, k0 + 64) of a's k and v (head rows from kp and vp; zero past kend) into kraw and
// vraw as one cp.async group; an empty group from k0 = kend on.
template <class Args>
__device__ __forceinline__ void fetch_kv(float *kraw, float *vraw, const Args &a, const float *kp, const float *vp,
                                         int k0, int kend) {
  if (k0 < kend) {
    fetch(kraw, kp, a.k.row, k0, kend);
    fetch(vraw, vp, a.v.row, k0, kend);
  }
  cp_async_commit();
}

// The fetched tile raw split into the rows layout (hi, lo) when NAT and the cols layout (thi,
// tlo) when TR. With TR a warp takes 32 rows of one 16-byte column (the raw reads conflict-free
// by raw's order, the transposed 4-byte writes on 32 banks); else 4 whole rows.
template <bool NAT, bool TR>
__device__ __forceinline__ void stage(uint32_t *hi, uint32_t *lo, uint32_t *thi, uint32_t *tlo, const float *raw) {
#pragma unroll
  for (int it = 0; it < kRows * (D / 4) / kThreads; it++) {
    const int i = (int)threadIdx.x + it * kThreads;
    const int r = TR ? (i & (kRows - 1)) : (i >> 3), c = 4 * (TR ? (i / kRows) : (i & 7));
    const float4 x = *reinterpret_cast<const float4 *>(raw + nat_off(r, c));
    const Tf32 v[4] = {split_tf32_fast(x.x), split_tf32_fast(x.y), split_tf32_fast(x.z), split_tf32_fast(x.w)};
    if constexpr (NAT) {
      *reinterpret_cast<uint4 *>(hi + nat_off(r, c)) = make_uint4(v[0].hi, v[1].hi, v[2].hi, v[3].hi);
      *reinterpret_cast<uint4 *>(lo + nat_off(r, c)) = make_uint4(v[0].lo, v[1].lo, v[2].lo, v[3].lo);
    }
    if constexpr (TR) {
#pragma unroll
      for (int e = 0; e < 4; e++) thi[tr_off(r, c + e)] = v[e].hi, tlo[tr_off(r, c + e)] = v[e].lo;
    }
  }
}

// acc = f (the warp's owned rows over the head dim, 4 k8 steps) times the rows layout at (hi,
// lo) as columns: 64 columns, 12 wgmma into a fresh accumulator. Only issued.
__device__ __forceinline__ void score(float (&acc)[32], const FragA (&f)[D / 8], uint32_t hi, uint32_t lo) {
#pragma unroll
  for (int kk = 0; kk < D / 8; kk++) {  // a k8 step is 32 bytes along the rows
    const uint64_t dh = fa::smem_desc(hi + kk * 32, 16, 1024), dl = fa::smem_desc(lo + kk * 32, 16, 1024);
    fa::wgmma_rs_tf32_n64(acc, f[kk].lo, dh, kk > 0);
    fa::wgmma_rs_tf32_n64(acc, f[kk].hi, dl, 1);
    fa::wgmma_rs_tf32_n64(acc, f[kk].hi, dh, 1);
  }
}

// acc = f (the A operands of the tile's rows 32 h .. 32 h + 31, 4 k8 steps, permuted) times
// panel h of the cols layout at (hi, lo): the head dim's 32 columns, 12 wgmma into a fresh
// accumulator. Only issued.
__device__ __forceinline__ void gather(float (&acc)[D / 2], const FragA *f, uint32_t hi, uint32_t lo, int h) {
#pragma unroll
  for (int kk = 0; kk < 4; kk++) {
    const uint32_t o = h * kPanel * 4 + kk * 32;
    const uint64_t dh = fa::smem_desc(hi + o, 16, 1024), dl = fa::smem_desc(lo + o, 16, 1024);
    fa::wgmma_rs_tf32_n32(acc, f[kk].lo, dh, kk > 0);
    fa::wgmma_rs_tf32_n32(acc, f[kk].hi, dl, 1);
    fa::wgmma_rs_tf32_n32(acc, f[kk].hi, dh, 1);
  }
}

// The A operand of score columns 8j .. 8j + 7 (accumulator entries 4j .. 4j + 3), split by
// split_tf32_fast.
__device__ __forceinline__ FragA frag_at(const float (&s)[32], int j) {
  return frag_of_c<true>(s[4 * j], s[4 * j + 1], s[4 * j + 2], s[4 * j + 3]);
}

__device__ __forceinline__ uint32_t *smem_tiles(uint8_t *raw) {
  return reinterpret_cast<uint32_t *>(fa::align1024(raw));
}

// Accumulator entry 4j + 2h + e of a thread is row 16 warp + g + 8h, column 8j + 2t + e.
__global__ void __launch_bounds__(kThreads) attn_fwd_wg_kernel(FwdArgs a) {
  pdl_wait();  // launched with programmatic dependent launch; pdl_release() after the main loop
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint32_t *const khi = smem_tiles(smem_raw), *const klo = khi + kHalf, *const vhi = khi + 2 * kHalf,
                  *const vlo = khi + 3 * kHalf;
  float *const kraw = reinterpret_cast<float *>(khi + 4 * kHalf), *const vraw = kraw + kHalf;
  const int bh = blockIdx.y, warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const QueryRows qr = query_rows(a.tq, a.tk, a.causal, warp, g);
  const int r0 = qr.r0, kend = qr.kend, lim0 = qr.lim0, lim1 = qr.lim1;
  const float *kp = a.k.p + head_offset(a.k.batch, a.k.head, bh, a.heads);
  const float *vp = a.v.p + head_offset(a.v.batch, a.v.head, bh, a.heads);

  fetch_kv(kraw, vraw, a, kp, vp, 0, kend);
  FragA qf[D / 8];
  load_own<D>(qf, a.q.p + head_offset(a.q.batch, a.q.head, bh, a.heads), a.q.row, r0, a.tq, a.scale2);
  float o[D / 8][4] = {}, m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

  for (int k0 = 0; k0 < kend; k0 += kRows) {
    cp_async_wait<0>();
    __syncthreads();  // the fetched tiles are in; every warp's products of the last tile are done
    stage<true, false>(khi, klo, nullptr, nullptr, kraw);
    stage<false, true>(nullptr, nullptr, vhi, vlo, vraw);
    fa::fence_proxy_async();
    __syncthreads();
    fetch_kv(kraw, vraw, a, kp, vp, k0 + kRows, kend);
    float s[32];
    fa::wgmma_fence();
    score(s, qf, fa::smem_u32(khi), fa::smem_u32(klo));
    fa::wgmma_commit();
    fa::wgmma_wait<0>();
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const int key = k0 + 8 * j + 2 * t;
      if (key > lim0) s[4 * j] = -INFINITY;
      if (key + 1 > lim0) s[4 * j + 1] = -INFINITY;
      if (key > lim1) s[4 * j + 2] = -INFINITY;
      if (key + 1 > lim1) s[4 * j + 3] = -INFINITY;
      mx0 = fmaxf(mx0, fmaxf(s[4 * j], s[4 * j + 1]));
      mx1 = fmaxf(mx1, fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
    const SoftmaxStep st = softmax_step(mx0, mx1, m0, m1, l0, l1);
    const float b0 = st.b0, b1 = st.b1, corr0 = st.corr0, corr1 = st.corr1;
    FragA pf[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
      s[4 * j] = exp2f(s[4 * j] - b0), s[4 * j + 1] = exp2f(s[4 * j + 1] - b0);
      s[4 * j + 2] = exp2f(s[4 * j + 2] - b1), s[4 * j + 3] = exp2f(s[4 * j + 3] - b1);
      l0 += s[4 * j] + s[4 * j + 1];
      l1 += s[4 * j + 2] + s[4 * j + 3];
      pf[j] = frag_at(s, j);
    }
    float pv[2][D / 2];  // p v of the tile's two halves, each added to o in float32
    fa::wgmma_fence();
    gather(pv[0], pf, fa::smem_u32(vhi), fa::smem_u32(vlo), 0);
    gather(pv[1], pf + 4, fa::smem_u32(vhi), fa::smem_u32(vlo), 1);
    fa::wgmma_commit();
    fa::wgmma_wait<0>();
#pragma unroll
    for (int nn = 0; nn < D / 8; nn++) {
      o[nn][0] = fmaf(o[nn][0], corr0, pv[0][4 * nn]) + pv[1][4 * nn];
      o[nn][1] = fmaf(o[nn][1], corr0, pv[0][4 * nn + 1]) + pv[1][4 * nn + 1];
      o[nn][2] = fmaf(o[nn][2], corr1, pv[0][4 * nn + 2]) + pv[1][4 * nn + 2];
      o[nn][3] = fmaf(o[nn][3], corr1, pv[0][4 * nn + 3]) + pv[1][4 * nn + 3];
    }
  }
  pdl_release();
  store_forward<D>(a, bh, r0, g, t, o, m0, m1, l0, l1);
}

// dq of the block's 64 query rows; writes delta.
__global__ void __launch_bounds__(kThreads) attn_dq_wg_kernel(BwdArgs a) {
  pdl_wait();
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint32_t *const khi = smem_tiles(smem_raw), *const klo = khi + kHalf, *const vhi = khi + 2 * kHalf,
                  *const vlo = khi + 3 * kHalf, *const kthi = khi + 4 * kHalf, *const ktlo = khi + 5 * kHalf;
  float *const kraw = reinterpret_cast<float *>(khi + 6 * kHalf), *const vraw = kraw + kHalf;
  const int bh = blockIdx.y, warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const QueryRows qr = query_rows(a.tq, a.tk, a.causal, warp, g);
  const int r0 = qr.r0, kend = qr.kend, lim0 = qr.lim0, lim1 = qr.lim1;
  const float *kp = a.k.p + head_offset(a.k.batch, a.k.head, bh, a.heads);
  const float *vp = a.v.p + head_offset(a.v.batch, a.v.head, bh, a.heads);
  fetch_kv(kraw, vraw, a, kp, vp, 0, kend);

  FragA qf[D / 8], gf[D / 8];
  const RowTerms rt = dq_rows<D>(qf, gf, a, bh, r0, g, t);
  const float delta0 = rt.delta0, delta1 = rt.delta1, lse0 = rt.lse0, lse1 = rt.lse1;
  float dq[D / 8][4] = {};

  for (int k0 = 0; k0 < kend; k0 += kRows) {
    cp_async_wait<0>();
    __syncthreads();
    stage<true, true>(khi, klo, kthi, ktlo, kraw);
    stage<true, false>(vhi, vlo, nullptr, nullptr, vraw);
    fa::fence_proxy_async();
    __syncthreads();
    fetch_kv(kraw, vraw, a, kp, vp, k0 + kRows, kend);
    float s[32], dp[32];
    fa::wgmma_fence();
    score(s, qf, fa::smem_u32(khi), fa::smem_u32(klo));
    score(dp, gf, fa::smem_u32(vhi), fa::smem_u32(vlo));
    fa::wgmma_commit();
    fa::wgmma_wait<0>();
    FragA df[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const int key = k0 + 8 * j + 2 * t;
      const float p0 = key > lim0 ? 0.f : exp2f(s[4 * j] - lse0), p1 = key + 1 > lim0 ? 0.f : exp2f(s[4 * j + 1] - lse0);
      const float p2 = key > lim1 ? 0.f : exp2f(s[4 * j + 2] - lse1),
                  p3 = key + 1 > lim1 ? 0.f : exp2f(s[4 * j + 3] - lse1);
      s[4 * j] = p0 * (dp[4 * j] - delta0), s[4 * j + 1] = p1 * (dp[4 * j + 1] - delta0);
      s[4 * j + 2] = p2 * (dp[4 * j + 2] - delta1), s[4 * j + 3] = p3 * (dp[4 * j + 3] - delta1);
      df[j] = frag_at(s, j);
    }
    float part[2][D / 2];
    fa::wgmma_fence();
    gather(part[0], df, fa::smem_u32(kthi), fa::smem_u32(ktlo), 0);
    gather(part[1], df + 4, fa::smem_u32(kthi), fa::smem_u32(ktlo), 1);
    fa::wgmma_commit();
    fa::wgmma_wait<0>();
#pragma unroll
    for (int nn = 0; nn < D / 8; nn++)
#pragma unroll
      for (int e = 0; e < 4; e++) dq[nn][e] = dq[nn][e] + part[0][4 * nn + e] + part[1][4 * nn + e];
  }
  pdl_release();
  store_own<D>(a.dq.p + head_offset(a.dq.batch, a.dq.head, bh, a.heads), a.dq.row, r0, a.tq, dq, a.scale, a.scale);
}

// dk and dv of the block's 64 key rows.
__global__ void __launch_bounds__(kThreads) attn_dkv_wg_kernel(BwdArgs a) {
  pdl_wait();
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ float lse_s[kRows], delta_s[kRows], terms_raw[2 * kRows];
  uint32_t *const qhi = smem_tiles(smem_raw), *const qlo = qhi + kHalf, *const ghi = qhi + 2 * kHalf,
                  *const glo = qhi + 3 * kHalf, *const qthi = qhi + 4 * kHalf, *const qtlo = qhi + 5 * kHalf,
                  *const gthi = qhi + 6 * kHalf, *const gtlo = qhi + 7 * kHalf;
  float *const qraw = reinterpret_cast<float *>(qhi + 8 * kHalf), *const graw = qraw + kHalf;
  const int bh = blockIdx.y, warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const int tile = (int)blockIdx.x;  // the first key tiles see the most queries: first
  const int off = a.tk - a.tq, j0 = tile * kRows + 16 * warp;
  const int qbeg = a.causal ? max(0, tile * kRows - off) : 0;  // the first query the block's first key meets
  const int first0 = a.causal ? j0 + g - off : 0, first1 = first0 + (a.causal ? 8 : 0);  // of rows j0 + g, + 8
  const float *qp = a.q.p + head_offset(a.q.batch, a.q.head, bh, a.heads);
  const float *gp = a.dout.p + head_offset(a.dout.batch, a.dout.head, bh, a.heads);

  // the query tile at i0: q and dout into qraw and graw, its lse and delta into terms_raw
  const auto fetch_queries = [&](int i0) {
    fetch(qraw, qp, a.q.row, i0, a.tq);
    fetch(graw, gp, a.dout.row, i0, a.tq);
    const int r = threadIdx.x & (kRows - 1);
    const float *src = (threadIdx.x < kRows ? a.lse : a.delta) + (int64_t)bh * a.tq;
    cp_async4(terms_raw + threadIdx.x, i0 + r < a.tq ? src + i0 + r : src, i0 + r < a.tq);
  };
  static_assert(kThreads == 2 * kRows, "a thread for each lse and delta of a tile");
  if (qbeg < a.tq) fetch_queries(qbeg);
  cp_async_commit();
  FragA kf[D / 8], vf[D / 8];
  load_own<D>(kf, a.k.p + head_offset(a.k.batch, a.k.head, bh, a.heads), a.k.row, j0, a.tk, a.scale2);
  load_own<D>(vf, a.v.p + head_offset(a.v.batch, a.v.head, bh, a.heads), a.v.row, j0, a.tk, 1.f);
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};

  for (int i0 = qbeg; i0 < a.tq; i0 += kRows) {
    cp_async_wait<0>();
    __syncthreads();
    stage<true, true>(qhi, qlo, qthi, qtlo, qraw);
    stage<true, true>(ghi, glo, gthi, gtlo, graw);
    if (threadIdx.x < kRows) {  // lse times log2 e and delta; +inf and 0 past tq
      const bool in = i0 + (int)threadIdx.x < a.tq;
      lse_s[threadIdx.x] = in ? terms_raw[threadIdx.x] * kLog2e : INFINITY;
      delta_s[threadIdx.x] = in ? terms_raw[kRows + threadIdx.x] : 0.f;
    }
    fa::fence_proxy_async();
    __syncthreads();
    if (i0 + kRows < a.tq) fetch_queries(i0 + kRows);
    cp_async_commit();
    float s[32], dp[32];
    fa::wgmma_fence();
    score(s, kf, fa::smem_u32(qhi), fa::smem_u32(qlo));
    score(dp, vf, fa::smem_u32(ghi), fa::smem_u32(glo));
    fa::wgmma_commit();
    fa::wgmma_wait<0>();
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const int r = 8 * j + 2 * t, i = i0 + r;  // the queries of columns 2t and 2t + 1
      const float la = lse_s[r], lb = lse_s[r + 1], da = delta_s[r], db = delta_s[r + 1];
      const bool va = i < a.tq, vb = i + 1 < a.tq;
      const float p0 = va && i >= first0 ? exp2f(s[4 * j] - la) : 0.f;
      const float p1 = vb && i + 1 >= first0 ? exp2f(s[4 * j + 1] - lb) : 0.f;
      const float p2 = va && i >= first1 ? exp2f(s[4 * j + 2] - la) : 0.f;
      const float p3 = vb && i + 1 >= first1 ? exp2f(s[4 * j + 3] - lb) : 0.f;
      s[4 * j] = p0, s[4 * j + 1] = p1, s[4 * j + 2] = p2, s[4 * j + 3] = p3;
      dp[4 * j] = p0 * (dp[4 * j] - da), dp[4 * j + 1] = p1 * (dp[4 * j + 1] - db);
      dp[4 * j + 2] = p2 * (dp[4 * j + 2] - da), dp[4 * j + 3] = p3 * (dp[4 * j + 3] - db);
    }
    // Each half of the tile's queries in turn, so only one half's operands are live at a time.
#pragma unroll
    for (int h = 0; h < 2; h++) {
      FragA pf[4], df[4];
#pragma unroll
      for (int j = 0; j < 4; j++) pf[j] = frag_at(s, 4 * h + j), df[j] = frag_at(dp, 4 * h + j);
      float vpart[D / 2], kpart[D / 2];
      fa::wgmma_fence();
      gather(vpart, pf, fa::smem_u32(gthi), fa::smem_u32(gtlo), h);
      gather(kpart, df, fa::smem_u32(qthi), fa::smem_u32(qtlo), h);
      fa::wgmma_commit();
      fa::wgmma_wait<0>();
#pragma unroll
      for (int nn = 0; nn < D / 8; nn++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[nn][e] += kpart[4 * nn + e], dv[nn][e] += vpart[4 * nn + e];
    }
  }
  pdl_release();
  store_own<D>(a.dk.p + head_offset(a.dk.batch, a.dk.head, bh, a.heads), a.dk.row, j0, a.tk, dk, a.scale, a.scale);
  store_own<D>(a.dv.p + head_offset(a.dv.batch, a.dv.head, bh, a.heads), a.dv.row, j0, a.tk, dv, 1.f, 1.f);
}

// Dynamic shared memory: the split tiles (hi and lo halves), the two fetched tiles (the size of
// two halves), plus the slack of the 1024-byte alignment.
constexpr size_t smem_bytes(int halves) { return (size_t)(halves + 2) * kHalf * 4 + 1024; }

template <auto Kernel, class Args>
bool launch(const Context &c, const Args &a, dim3 grid, int halves) {
  if (!allow_smem<Kernel>(smem_bytes(halves))) return false;
  MT_CUDA_CHECK(launch_pdl_smem_if(c.pdl, c, Kernel, grid, dim3(kThreads), smem_bytes(halves), a));
  return true;
}

}  // namespace

bool attention_f32_wgmma_forward(const Context &c, const FwdArgs &a, int64_t bh) {
  return launch<attn_fwd_wg_kernel>(c, a, dim3((unsigned)((a.tq + kRows - 1) / kRows), (unsigned)bh), 4);
}
bool attention_f32_wgmma_dq(const Context &c, const BwdArgs &a, int64_t bh) {
  return launch<attn_dq_wg_kernel>(c, a, dim3((unsigned)((a.tq + kRows - 1) / kRows), (unsigned)bh), 6);
}
bool attention_f32_wgmma_dkv(const Context &c, const BwdArgs &a, int64_t bh) {
  return launch<attn_dkv_wg_kernel>(c, a, dim3((unsigned)((a.tk + kRows - 1) / kRows), (unsigned)bh), 8);
}

}  // namespace attn_f32
}  // namespace cuda
}  // namespace mt
