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

template <class T, int N, int TR>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int acc) {
  if constexpr (N == 64) wgmma_ss_n64<T, TR>(d, da, db, acc);
  else wgmma_ss_n128<T, TR>(d, da, db, acc);
}
template <class T, int N, int TR>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int acc) {
  if constexpr (N == 64) wgmma_rs_n64<T, TR>(d, a, db, acc);
  else wgmma_rs_n128<T, TR>(d, a, db, acc);
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
  const int off = p.tk - p.tq;

  int n_kv = (p.tk + BC - 1) / BC;
  if (p.causal) {
    const int last_key = q0 + BR - 1 + off;
    n_kv = min(n_kv, last_key < 0 ? 0 : last_key / BC + 1);
  }
  const int row_base = q0 + wg * 64 + (warp & 3) * 16;  // the warp's first query row

  float o[D / 2], s[BC / 2];
#pragma unroll
  for (int i = 0; i < D / 2; i++) o[i] = 0.f;
#pragma unroll
  for (int i = 0; i < BC / 2; i++) s[i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

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

    // S = Q K^T: the head dim in k16 steps, 4 per 64-column panel
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
      const uint32_t step = (kk & 3) * 32;  // bytes into the panel's 128-byte rows
      const uint64_t da = smem_desc(q_addr + (kk >> 2) * BR * 128 + step, 16, 1024);
      const uint64_t db = smem_desc(k_addr + (kk >> 2) * BC * 128 + step, 16, 1024);
      wgmma_ss<T, BC, 0>(s, da, db, kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();

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

    // online softmax (rows g and g + 8 of the warp's slice); P overwrites S
#pragma unroll
    for (int h = 0; h < 2; h++) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < BC / 8; n++) mx = fmaxf(mx, fmaxf(s[n * 4 + 2 * h], s[n * 4 + 2 * h + 1]));
      mx = quad_max(mx) * p.scale_log2;
      const float m_new = fmaxf(m_run[h], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = exp2f(m_run[h] - m_use);
      m_run[h] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < BC / 8; n++) {
        s[n * 4 + 2 * h] = exp2f(fmaf(s[n * 4 + 2 * h], p.scale_log2, -m_use));
        s[n * 4 + 2 * h + 1] = exp2f(fmaf(s[n * 4 + 2 * h + 1], p.scale_log2, -m_use));
        sum += s[n * 4 + 2 * h] + s[n * 4 + 2 * h + 1];
      }
      l_run[h] = l_run[h] * alpha + sum;
#pragma unroll
      for (int n = 0; n < D / 8; n++) {
        o[n * 4 + 2 * h] *= alpha;
        o[n * 4 + 2 * h + 1] *= alpha;
      }
    }

    // O += P V: P as register A fragments, V N-major from shared memory, 16 keys per step
    uint32_t pa[BC / 16][4];
    pack_a<T, BC>(pa, s);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BC / 16; kk++)
      wgmma_rs<T, D, 1>(o, pa[kk], smem_desc(v_addr + kk * 2048, BC * 128, 1024), 1);
    wgmma_commit();
    wgmma_wait<0>();
  }
  cp_async_wait<0>();

  // epilogue: O / l, lse = (m + log2 l) ln 2
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
#endif
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
