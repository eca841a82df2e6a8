// fa_forward_wgmma.cuh - the FlashAttention-2 forward on Hopper's warpgroup MMA (fa_v5, sm_90a).
//
// The same function as fa_forward.cuh (FwdParams; output, lse, causal alignment and the
// no-key rows alike), on wgmma.mma_async instead of mma.sync:
//   - a CTA takes BR = 64 NWG query rows of one (b, h); warpgroup w (4 warps) owns rows
//     64 w .. 64 w + 63, warp i of it rows 16 i .. 16 i + 15 (the wgmma accumulator layout is
//     the m16n8 C layout of mma.sync, one 16-row slice per warp);
//   - S = Q K^T: one m64nBCk16 wgmma per 16 of the head dim, Q and K both read from shared
//     memory by descriptor (128-byte swizzle, fa_wgmma.cuh), 64 x BC f32 in registers;
//   - online softmax on the accumulators (exp2f with the scale folded in), exactly as fa_v3;
//   - O += P V: P goes from the S accumulators to A fragments in registers (same packing as
//     fa_v3) and one m64nDk16 wgmma per 16 keys reads V from shared memory N-major (the
//     transposed-B mode): no ldmatrix, no per-warp B fragments at all;
//   - K/V tiles by cp.async, two stages, the next tile in flight during the math; each stage
//     is fenced for the async proxy before the barrier that publishes it.
#pragma once

#include "backend/cuda/attention/fa_forward.cuh"
#include "backend/cuda/attention/fa_wgmma.cuh"

namespace mt {
namespace cuda {
namespace fa {

template <int D, int BC, int NWG>
struct WgmmaFwdShape {
  static constexpr int br = 64 * NWG;
  static constexpr int threads = 128 * NWG;
  // Q, two stages of K and V, and 1024 bytes to align the first panel
  static constexpr int smem_bytes = (br * D + 4 * BC * D) * 2 + 1024;
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(BC == 64 || BC == 128, "key tile 64 or 128");
};

template <class T, int N, int TR, int TA = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int acc) {
  if constexpr (N == 64) wgmma_ss_n64<T, TR, TA>(d, da, db, acc);
  else wgmma_ss_n128<T, TR, TA>(d, da, db, acc);
}
template <class T, int N, int TR>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int acc) {
  if constexpr (N == 64) wgmma_rs_n64<T, TR>(d, a, db, acc);
  else wgmma_rs_n128<T, TR>(d, a, db, acc);
}

// The pieces of a forward CTA's work that fa_forward_ws.cuh's kernel shares. A warpgroup holds
// 64 query rows; warp i of it rows row_base .. row_base + 15, where row_base is the warp's first
// query row (the m16n8 C layout: a thread has rows g and g + 8, columns 2 t and 2 t + 1 of each
// 8-column block). FwdParams goes by value: through a reference, ptxas made the lockstep
// kernel's code 2-6% longer.

// The accumulators before the first key tile: O and S zero, the running max -inf, the sum 0.
template <int D, int BC>
__device__ __forceinline__ void fwd_start(float (&o)[D / 2], float (&s)[BC / 2], float (&m_run)[2], float (&l_run)[2]) {
#pragma unroll
  for (int i = 0; i < D / 2; i++) o[i] = 0.f;
#pragma unroll
  for (int i = 0; i < BC / 2; i++) s[i] = 0.f;
  m_run[0] = m_run[1] = -INFINITY;
  l_run[0] = l_run[1] = 0.f;
}

// How many key tiles of BC the CTA of BR query rows from q0 visits (causal: up to the key of its
// last row).
template <int BR, int BC>
__device__ __forceinline__ int fwd_key_tiles(FwdParams p, int q0) {
  int n_kv = (p.tk + BC - 1) / BC;
  if (p.causal) {
    const int last_key = q0 + BR - 1 + p.tk - p.tq;
    n_kv = min(n_kv, last_key < 0 ? 0 : last_key / BC + 1);
  }
  return n_kv;
}

// S = Q K^T of one key tile, the head dim in k16 steps (4 per 64-column panel). q_addr: the
// warpgroup's rows of Q's panel 0, a panel BR rows; k_addr: the tile's panel 0, a panel BC rows.
// Issues only: the caller fences, commits and waits.
template <class T, int D, int BC, int BR>
__device__ __forceinline__ void fwd_scores(float (&s)[BC / 2], uint32_t q_addr, uint32_t k_addr) {
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    const uint32_t step = (kk & 3) * 32;  // bytes into the panel's 128-byte rows
    const uint64_t da = smem_desc(q_addr + (kk >> 2) * BR * 128 + step, 16, 1024);
    const uint64_t db = smem_desc(k_addr + (kk >> 2) * BC * 128 + step, 16, 1024);
    wgmma_ss<T, BC, 0>(s, da, db, kk > 0);
  }
}

// Q's descriptors for fwd_scores_qd: the low words (the high word is the same for every step).
// Opaque to the compiler once made, so that a loop over key tiles reads them from registers
// instead of building them again from the item's buffer each tile.
template <int D, int BR>
__device__ __forceinline__ void fwd_q_descs(uint32_t (&qd)[D / 16], uint32_t q_addr) {
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    qd[kk] = (uint32_t)smem_desc(q_addr + (kk >> 2) * BR * 128 + (kk & 3) * 32, 16, 1024);
    asm volatile("" : "+r"(qd[kk]));
  }
}

// fwd_scores with Q's descriptors from fwd_q_descs.
template <class T, int D, int BC>
__device__ __forceinline__ void fwd_scores_qd(float (&s)[BC / 2], const uint32_t (&qd)[D / 16], uint32_t k_addr) {
  const uint64_t hi = smem_desc(0, 0, 1024) & ~0xFFFFFFFFull;
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    const uint64_t db = smem_desc(k_addr + (kk >> 2) * BC * 128 + (kk & 3) * 32, 16, 1024);
    wgmma_ss<T, BC, 0>(s, hi | qd[kk], db, kk > 0);
  }
}

// O += P V: P as register A fragments, V N-major at v_addr, 16 keys a step. Issues only.
template <class T, int D, int BC>
__device__ __forceinline__ void fwd_pv(float (&o)[D / 2], const uint32_t (&pa)[BC / 16][4], uint32_t v_addr) {
#pragma unroll
  for (int kk = 0; kk < BC / 16; kk++) wgmma_rs<T, D, 1>(o, pa[kk], smem_desc(v_addr + kk * 2048, BC * 128, 1024), 1);
}

// The mask and online softmax of the key tile from k0 on the scores in s (exp2f with the scale
// folded in): P overwrites S, the running max and sum move on, and alpha is what O must be
// multiplied by before P V is added. The CTA's first query row is q0.
template <int BC>
__device__ __forceinline__ void fwd_softmax(float (&s)[BC / 2], float (&m_run)[2], float (&l_run)[2],
                                            float (&alpha)[2], FwdParams p, int k0, int q0, int row_base,
                                            int g, int t) {
  const int off = p.tk - p.tq;
  const bool need_mask = k0 + BC > p.tk || (p.causal && k0 + BC - 1 > q0 + off);
  if (need_mask) {
#pragma unroll
    for (int n = 0; n < BC / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int row = row_base + g + (e >> 1) * 8;
        const int col = k0 + n * 8 + 2 * t + (e & 1);
        if (col >= p.tk || (p.causal && col > row + off)) s[n * 4 + e] = -INFINITY;
      }
  }
#pragma unroll
  for (int h = 0; h < 2; h++) {  // rows g and g + 8 of the warp's slice
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < BC / 8; n++) mx = fmaxf(mx, fmaxf(s[n * 4 + 2 * h], s[n * 4 + 2 * h + 1]));
    mx = quad_max(mx) * p.scale_log2;
    const float m_new = fmaxf(m_run[h], mx);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    alpha[h] = exp2f(m_run[h] - m_use);
    m_run[h] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < BC / 8; n++) {
      s[n * 4 + 2 * h] = exp2f(fmaf(s[n * 4 + 2 * h], p.scale_log2, -m_use));
      s[n * 4 + 2 * h + 1] = exp2f(fmaf(s[n * 4 + 2 * h + 1], p.scale_log2, -m_use));
      sum += s[n * 4 + 2 * h] + s[n * 4 + 2 * h + 1];
    }
    l_run[h] = l_run[h] * alpha[h] + sum;
  }
}

template <int D>
__device__ __forceinline__ void fwd_rescale(float (&o)[D / 2], const float (&alpha)[2]) {
#pragma unroll
  for (int h = 0; h < 2; h++)
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      o[n * 4 + 2 * h] *= alpha[h];
      o[n * 4 + 2 * h + 1] *= alpha[h];
    }
}

// The epilogue of the warp's rows: O / l into p.o, lse = (m + log2 l) ln 2 into p.lse (+inf for a
// row without keys, whose O is 0).
template <class T, int D>
__device__ __forceinline__ void fwd_store(FwdParams p, int64_t bh, const float (&o)[D / 2],
                                          const float (&m_run)[2], const float (&l_run)[2], int row_base, int g,
                                          int t) {
  T *go = static_cast<T *>(p.o) + bh * p.tq * D;
  float *glse = p.lse + bh * p.tq;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const float l = quad_sum(l_run[h]);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int row = row_base + g + 8 * h;
    if (row < p.tq) {
#pragma unroll
      for (int n = 0; n < D / 8; n++)
        store2<T>(go + (int64_t)row * D + n * 8 + 2 * t, o[n * 4 + 2 * h] * inv, o[n * 4 + 2 * h + 1] * inv);
      if (t == 0) glse[row] = l > 0.f ? (m_run[h] + log2f(l)) * kLn2 : INFINITY;
    }
  }
}

template <class T, int D, int BC, int NWG>
__global__ void __launch_bounds__(NWG * 128, 1) flash_fwd_wgmma_kernel(FwdParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = WgmmaFwdShape<D, BC, NWG>;
  constexpr int BR = S::br, NT = S::threads;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint16_t *sQ = reinterpret_cast<uint16_t *>(align1024(smem_raw));
  uint16_t *sK = sQ + BR * D;      // 2 stages of BC x D
  uint16_t *sV = sK + 2 * BC * D;  // 2 stages of BC x D

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2;
  const int qtile = p.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
  const int q0 = qtile * BR;
  const int64_t bh = blockIdx.y;
  const uint16_t *gq = static_cast<const uint16_t *>(p.q) + bh * p.tq * D;
  const uint16_t *gk = static_cast<const uint16_t *>(p.k) + bh * p.tk * D;
  const uint16_t *gv = static_cast<const uint16_t *>(p.v) + bh * p.tk * D;
  const int n_kv = fwd_key_tiles<BR, BC>(p, q0);
  const int row_base = q0 + wg * 64 + (warp & 3) * 16;  // the warp's first query row

  float o[D / 2], s[BC / 2];
  float m_run[2], l_run[2];
  fwd_start<D, BC>(o, s, m_run, l_run);

  load_tile_sw128<BR, D, NT>(sQ, gq, q0, p.tq);
  if (n_kv > 0) {
    load_tile_sw128<BC, D, NT>(sK, gk, 0, p.tk);
    load_tile_sw128<BC, D, NT>(sV, gv, 0, p.tk);
  }
  cp_async_commit();

  const uint32_t q_addr = smem_u32(sQ) + wg * 64 * 128;  // this warpgroup's rows of panel 0
  for (int j = 0; j < n_kv; j++) {
    const int k0 = j * BC, st = j & 1;
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();  // tile j visible to the tensor cores; every warpgroup done with tile j - 1
    if (j + 1 < n_kv) {
      load_tile_sw128<BC, D, NT>(sK + (st ^ 1) * BC * D, gk, k0 + BC, p.tk);
      load_tile_sw128<BC, D, NT>(sV + (st ^ 1) * BC * D, gv, k0 + BC, p.tk);
    }
    cp_async_commit();
    const uint32_t k_addr = smem_u32(sK + st * BC * D), v_addr = smem_u32(sV + st * BC * D);

    wgmma_fence();
    fwd_scores<T, D, BC, BR>(s, q_addr, k_addr);
    wgmma_commit();
    wgmma_wait<0>();

    float alpha[2];
    fwd_softmax<BC>(s, m_run, l_run, alpha, p, k0, q0, row_base, g, t);
    fwd_rescale<D>(o, alpha);

    uint32_t pa[BC / 16][4];
    pack_a<T, BC>(pa, s);
    wgmma_fence();
    fwd_pv<T, D, BC>(o, pa, v_addr);
    wgmma_commit();
    wgmma_wait<0>();
  }
  cp_async_wait<0>();
  fwd_store<T, D>(p, bh, o, m_run, l_run, row_base, g, t);
#endif
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
