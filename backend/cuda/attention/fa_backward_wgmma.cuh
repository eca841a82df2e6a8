// fa_backward_wgmma.cuh - the FlashAttention-2 backward on Hopper's warpgroup MMA (fa_v5,
// sm_90a): the same two passes as fa_backward.cuh's separate-dQ strategy (BwdParams, dvec from
// flash_bwd_dot_kernel), every product a wgmma reading its shared operands by descriptor from
// the 128-byte-swizzled panel layout of fa_wgmma.cuh:
//
//   key/value pass, a CTA per BC = 64 NWG keys (warpgroup w: keys 64 w .. 64 w + 63), over the
//   query tiles of BR rows that see them (Q, dO, lse, dvec double-buffered by cp.async):
//     S^T = K Q^T, dP^T = V dO^T              A = K / V (K-major), B = Q / dO (K-major)
//     P^T = exp2(S^T scale log2 e - lse log2 e), dS^T = P^T (dP^T - dvec)   (registers)
//     dV += P^T dO, dK += dS^T Q              A = P^T / dS^T (registers), B = dO / Q (N-major)
//   dQ pass, a CTA per BR = 64 NWG queries, over the key tiles of BC rows that they see:
//     S = Q K^T, dP = dO V^T                  A = Q / dO (K-major), B = K / V (K-major)
//     dS = P (dP - dvec), dQ += dS K          A = dS (registers), B = K (N-major)
// dK and dQ are scaled by the softmax scale at the end.
//
// With FUSED_DQ (a row whose dQ key tile is 0) there is no dQ pass: the key/value pass also
// stores dS^T to shared memory and adds its keys' share of dQ to an f32 accumulator,
//     dQ_acc += dS K                          A = dS (M-major: dS^T's rows are keys), B = K (N-major)
// by float2 atomics from the registers (kDqAtomic) or by bulk reductions of whole rows staged
// in shared memory (kDqBulk); flash_bwd_dq_convert_kernel scales and converts it. That saves
// the dQ pass's S and dP (2 of the 7 products) for (Tk / BC) adds of every dQ element in L2.
#pragma once

#include "backend/cuda/attention/fa_backward.cuh"
#include "backend/cuda/attention/fa_forward_wgmma.cuh"
#include "backend/cuda/attention/fa_tma.cuh"

namespace mt {
namespace cuda {
namespace fa {

// How the key/value pass adds dQ (FUSED_DQ): not at all (the dQ pass does), by atomics, by bulk
// reductions.
enum DqAdd { kDqPass = 0, kDqAtomic = 1, kDqBulk = 2 };

template <int D, int BR, int NWG, int FUSED_DQ = kDqPass>
struct WgmmaBwdKvShape {
  static constexpr int bc = 64 * NWG;
  static constexpr int threads = 128 * NWG;
  // FUSED_DQ: dQ's (BR / 64) x (D / 64) blocks of 64 x 64, dealt round the warpgroups; each
  // accumulates in the registers of S^T and dP^T (BR floats a thread), free by then.
  static constexpr int dq_blocks = (BR / 64) * (D / 64);
  static constexpr int dq_per_wg = (dq_blocks + NWG - 1) / NWG;
  static_assert(dq_per_wg * 32 <= BR, "dQ blocks fit in the registers of S^T and dP^T");
  // Whether block b = wg + NWG * j exists: the last round of the deal may leave warpgroups out.
  static __device__ __forceinline__ bool has_dq_block(int b) { return dq_blocks % NWG == 0 || b < dq_blocks; }
  // kDqBulk stages a warpgroup's blocks as rows of 64 f32, kStageRow floats apart: with 8 floats
  // of padding the half-warp of a float2 store (rows g 0..3 of 8 lanes) covers the 32 banks once
  static constexpr int kStageRow = 72;
  static constexpr int stage_floats = FUSED_DQ == kDqBulk ? NWG * dq_per_wg * 64 * kStageRow : 0;
  // Each query tile's lse and dvec arrive by cp.async, except where dQ by atomics at BR 128 keeps
  // its accumulators in S^T's and dP^T's 128 registers: there ptxas spilled 56 and 64 bytes with
  // the copies (0 and 12 without), and wgmma row 9 at D 64 lost 2% (docs/benchmarks.md, "Where
  // the backward's time goes, and lse and dvec by cp.async").
  static constexpr bool kScalarsAsync = !(FUSED_DQ == kDqAtomic && BR == 128);
  // K, V; two stages of Q and dO; dS^T (FUSED_DQ); two stages of lse and dvec (f32); the dQ
  // staging (kDqBulk); 1024 bytes of alignment
  static constexpr int smem_bytes =
      (2 * bc * D + 4 * BR * D + (FUSED_DQ ? bc * BR : 0)) * 2 + 4 * BR * 4 + stage_floats * 4 + 1024;
  static_assert(BR == 64 || BR == 128, "query tile 64 or 128");
};

template <int D, int BC, int NWG>
struct WgmmaBwdDqShape {
  static constexpr int br = 64 * NWG;
  static constexpr int threads = 128 * NWG;
  static constexpr int smem_bytes = (2 * br * D + 4 * BC * D) * 2 + 1024;
  static_assert(BC == 64 || BC == 128, "key tile 64 or 128");
};

// acc (64 x N) = A (64 rows at a_addr of a panel tile of A_ROWS rows) * B^T (N rows at b_addr of
// a panel tile of N rows), reducing over the head dim D: both operands K-major.
template <class T, int D, int N, int A_ROWS>
__device__ __forceinline__ void wgmma_rows_by_rows(float (&acc)[N / 2], uint32_t a_addr, uint32_t b_addr) {
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    const uint32_t step = (kk & 3) * 32;
    wgmma_ss<T, N, 0>(acc, smem_desc(a_addr + (kk >> 2) * A_ROWS * 128 + step, 16, 1024),
                      smem_desc(b_addr + (kk >> 2) * N * 128 + step, 16, 1024), kk > 0);
  }
}

// acc (64 x D) += A (64 x K in registers, K / 16 fragments) * B (K rows x D at b_addr, a panel
// tile of K rows read N-major).
template <class T, int D, int K>
__device__ __forceinline__ void wgmma_regs_by_panel(float (&acc)[D / 2], const uint32_t (&a)[K / 16][4],
                                                    uint32_t b_addr) {
#pragma unroll
  for (int kk = 0; kk < K / 16; kk++) wgmma_rs<T, D, 1>(acc, a[kk], smem_desc(b_addr + kk * 2048, K * 128, 1024), 1);
}

// The f32 registers of S^T (s) and dP^T (dp), BR / 2 each, as 64 x 64 accumulator j.
template <int BR>
__device__ __forceinline__ float (&dq_block(float (&s)[BR / 2], float (&dp)[BR / 2], int j))[32] {
  float *base = j * 32 < BR / 2 ? s + j * 32 : dp + (j * 32 - BR / 2);
  return *reinterpret_cast<float(*)[32]>(base);
}

template <class T, int D, int BR, int NWG, int FUSED_DQ = kDqPass>
__global__ void __launch_bounds__(NWG * 128, 1) flash_bwd_kv_wgmma_kernel(BwdParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = WgmmaBwdKvShape<D, BR, NWG, FUSED_DQ>;
  constexpr int BC = S::bc, NT = S::threads;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint16_t *sK = reinterpret_cast<uint16_t *>(align1024(smem_raw));  // BC x D
  uint16_t *sV = sK + BC * D;                                         // BC x D
  uint16_t *sQ = sV + BC * D;                                         // 2 x (BR x D)
  uint16_t *sdO = sQ + 2 * BR * D;                                    // 2 x (BR x D)
  uint16_t *sdS = sdO + 2 * BR * D;                                   // BC x BR: dS^T (FUSED_DQ)
  float *sL = reinterpret_cast<float *>(sdS + (FUSED_DQ ? BC * BR : 0));  // 2 x BR: lse * log2(e)
  float *sD = sL + 2 * BR;                                            // 2 x BR: dvec
  float *sStage = sD + 2 * BR;  // kDqBulk: NWG x dq_per_wg x (64 x kStageRow) f32 (16-aligned)

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2;
  const int k0 = blockIdx.x * BC;
  const int64_t bh = blockIdx.y;
  const uint16_t *gq = static_cast<const uint16_t *>(p.q) + bh * p.tq * D;
  const uint16_t *gdo = static_cast<const uint16_t *>(p.dout) + bh * p.tq * D;
  const uint16_t *gk = static_cast<const uint16_t *>(p.k) + bh * p.tk * D;
  const uint16_t *gv = static_cast<const uint16_t *>(p.v) + bh * p.tk * D;
  const float *glse = p.lse + bh * p.tq, *gdvec = p.dvec + bh * p.tq;
  const int off = p.tk - p.tq;

  const int n_q = (p.tq + BR - 1) / BR;
  int i_begin = 0;
  if (p.causal) {
    const int first = k0 - off;  // the first query row that sees key k0
    i_begin = first <= 0 ? 0 : first / BR;
  }
  auto load_q_tile = [&](int i, int stage) {
    load_tile_sw128<BR, D, NT>(sQ + stage * BR * D, gq, i * BR, p.tq);
    load_tile_sw128<BR, D, NT>(sdO + stage * BR * D, gdo, i * BR, p.tq);
    // lse and dvec by cp.async too (S::kScalarsAsync): a load into registers here holds its warp,
    // and so its warpgroup's next wgmma, for the global latency every tile. Rows past tq read 0;
    // the mask zeroes their P. The thread that copied an lse scales it by log2(e) once it landed.
    for (int r = threadIdx.x; r < BR; r += NT) {
      const int row = i * BR + r;
      const bool ok = row < p.tq;
      if constexpr (S::kScalarsAsync) {
        cp_async4(sL + stage * BR + r, glse + (ok ? row : 0), ok);
        cp_async4(sD + stage * BR + r, gdvec + (ok ? row : 0), ok);
      } else {
        sL[stage * BR + r] = ok ? glse[row] * kLog2e : INFINITY;
        sD[stage * BR + r] = ok ? gdvec[row] : 0.f;
      }
    }
  };

  load_tile_sw128<BC, D, NT>(sK, gk, k0, p.tk);
  load_tile_sw128<BC, D, NT>(sV, gv, k0, p.tk);
  if (i_begin < n_q) load_q_tile(i_begin, 0);
  cp_async_commit();

  float dk[D / 2], dv[D / 2], s[BR / 2], dp[BR / 2];
#pragma unroll
  for (int i = 0; i < D / 2; i++) dk[i] = dv[i] = 0.f;
#pragma unroll
  for (int i = 0; i < BR / 2; i++) s[i] = dp[i] = 0.f;
  const int key_base = k0 + wg * 64 + (warp & 3) * 16;  // the warp's first key
  const uint32_t k_addr = smem_u32(sK) + wg * 64 * 128, v_addr = smem_u32(sV) + wg * 64 * 128;

  for (int i = i_begin; i < n_q; i++) {
    const int st = (i - i_begin) & 1;
    cp_async_wait<0>();
    if constexpr (S::kScalarsAsync)
      for (int r = threadIdx.x; r < BR; r += NT) sL[st * BR + r] *= kLog2e;  // this thread's copies
    fence_proxy_async();
    __syncthreads();  // tile i visible (to the tensor cores too); everyone done with tile i - 1
    if (i + 1 < n_q) load_q_tile(i + 1, st ^ 1);
    cp_async_commit();
    const uint32_t q_addr = smem_u32(sQ + st * BR * D), do_addr = smem_u32(sdO + st * BR * D);
    const float *cL = sL + st * BR, *cD = sD + st * BR;
    const int q0 = i * BR;

    // S^T = K Q^T and dP^T = V dO^T (the warpgroup's 64 keys x BR queries)
    wgmma_fence();
    wgmma_rows_by_rows<T, D, BR, BC>(s, k_addr, q_addr);
    wgmma_rows_by_rows<T, D, BR, BC>(dp, v_addr, do_addr);
    wgmma_commit();
    wgmma_wait<0>();

    // P^T into s, dS^T into dp
    const bool need_mask = q0 + BR > p.tq || k0 + BC > p.tk || (p.causal && q0 + off < k0 + BC - 1);
#pragma unroll
    for (int n = 0; n < BR / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int ql = n * 8 + 2 * t + (e & 1);
        float pv = exp2f(fmaf(s[n * 4 + e], p.scale_log2, -cL[ql]));
        if (need_mask) {
          const int key = key_base + g + (e >> 1) * 8, q = q0 + ql;
          if (q >= p.tq || key >= p.tk || (p.causal && key > q + off)) pv = 0.f;
        }
        s[n * 4 + e] = pv;
        dp[n * 4 + e] = pv * (dp[n * 4 + e] - cD[ql]);
      }

    // dV += P^T dO, dK += dS^T Q
    uint32_t pa[BR / 16][4], da[BR / 16][4];
    pack_a<T, BR>(pa, s);
    pack_a<T, BR>(da, dp);
    if constexpr (FUSED_DQ) {
      // dS^T (the warp's 16 keys x BR queries) into the panel tile of BC rows: fragment word
      // w of step kk holds row g + 8 (w & 1), columns 16 kk + 8 (w >> 1) + 2 t and the next
      const int row = key_base - k0 + g;
#pragma unroll
      for (int kk = 0; kk < BR / 16; kk++)
#pragma unroll
        for (int w = 0; w < 4; w++)
          *reinterpret_cast<uint32_t *>(sdS + sw128_off<BC>(row + 8 * (w & 1), 16 * kk + 8 * (w >> 1) + 2 * t)) =
              da[kk][w];
      fence_proxy_async();
      __syncthreads();  // every warpgroup's dS^T written before any reads it
    }
    wgmma_fence();
    wgmma_regs_by_panel<T, D, BR>(dv, pa, do_addr);
    wgmma_regs_by_panel<T, D, BR>(dk, da, q_addr);
    if constexpr (FUSED_DQ) {
      // dQ block b = (query rows 64 mi.., head columns 64 nj..) += dS K over the CTA's BC keys:
      // A from dS^T's panel mi (M-major, 16 keys a step = 2048 bytes), B from K's panel nj
      const uint32_t ds_addr = smem_u32(sdS), kt_addr = smem_u32(sK);
#pragma unroll
      for (int j = 0; j < S::dq_per_wg; j++) {
        const int b = wg + NWG * j;
        if (S::has_dq_block(b)) {
          const int mi = b / (D / 64), nj = b % (D / 64);
          float(&acc)[32] = dq_block<BR>(s, dp, j);
#pragma unroll
          for (int kk = 0; kk < BC / 16; kk++)
            wgmma_ss<T, 64, 1, 1>(acc, smem_desc(ds_addr + mi * BC * 128 + kk * 2048, BC * 128, 1024),
                                  smem_desc(kt_addr + nj * BC * 128 + kk * 2048, BC * 128, 1024), kk > 0);
        }
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
    if constexpr (FUSED_DQ == kDqBulk) {
      // The warpgroup's blocks into its staging rows, then a row of 64 f32 (256 bytes) a thread
      // of the first 64 reduced into dQ_acc. The staging is written again only after this
      // thread's reductions of the last tile have read it and the warpgroup has met.
      float *stage = sStage + wg * S::dq_per_wg * 64 * S::kStageRow;
      const int lt = threadIdx.x & 127;
      bulk_wait<0, true>();
      named_sync(1 + wg, 128);
#pragma unroll
      for (int j = 0; j < S::dq_per_wg; j++) {
        if (S::has_dq_block(wg + NWG * j)) {
          const float(&acc)[32] = dq_block<BR>(s, dp, j);
#pragma unroll
          for (int h = 0; h < 2; h++) {
            float *row = stage + (j * 64 + (warp & 3) * 16 + g + 8 * h) * S::kStageRow;
#pragma unroll
            for (int n = 0; n < 8; n++)
              *reinterpret_cast<float2 *>(row + n * 8 + 2 * t) = make_float2(acc[n * 4 + 2 * h], acc[n * 4 + 2 * h + 1]);
          }
        }
      }
      fence_proxy_async();
      named_sync(1 + wg, 128);
      if (lt < 64) {
        float *gacc = p.dq_acc + bh * p.tq * D;
#pragma unroll
        for (int j = 0; j < S::dq_per_wg; j++) {
          const int b = wg + NWG * j;
          const int q = q0 + (b / (D / 64)) * 64 + lt;
          if (S::has_dq_block(b) && q < p.tq)
            bulk_reduce_add_f32(gacc + (int64_t)q * D + (b % (D / 64)) * 64, stage + (j * 64 + lt) * S::kStageRow,
                                256);
        }
        bulk_commit();
      }
    }
    if constexpr (FUSED_DQ == kDqAtomic) {
      float *gacc = p.dq_acc + bh * p.tq * D;
#pragma unroll
      for (int j = 0; j < S::dq_per_wg; j++) {
        const int b = wg + NWG * j;
        if (S::has_dq_block(b)) {
          const int mi = b / (D / 64), nj = b % (D / 64);
          const float(&acc)[32] = dq_block<BR>(s, dp, j);
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const int q = q0 + mi * 64 + (warp & 3) * 16 + g + 8 * h;
            if (q < p.tq) {
#pragma unroll
              for (int n = 0; n < 8; n++)
                atomicAdd(reinterpret_cast<float2 *>(gacc + (int64_t)q * D + nj * 64 + n * 8 + 2 * t),
                          make_float2(acc[n * 4 + 2 * h], acc[n * 4 + 2 * h + 1]));
            }
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  if constexpr (FUSED_DQ == kDqBulk) bulk_wait<0, false>();

  T *gdk = static_cast<T *>(p.dk) + bh * p.tk * D;
  T *gdv = static_cast<T *>(p.dv) + bh * p.tk * D;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = key_base + g + 8 * h;
    if (row < p.tk) {
#pragma unroll
      for (int n = 0; n < D / 8; n++) {
        store2<T>(gdk + (int64_t)row * D + n * 8 + 2 * t, dk[n * 4 + 2 * h] * p.scale, dk[n * 4 + 2 * h + 1] * p.scale);
        store2<T>(gdv + (int64_t)row * D + n * 8 + 2 * t, dv[n * 4 + 2 * h], dv[n * 4 + 2 * h + 1]);
      }
    }
  }
#endif
}

template <class T, int D, int BC, int NWG>
__global__ void __launch_bounds__(NWG * 128, 1) flash_bwd_dq_wgmma_kernel(BwdParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = WgmmaBwdDqShape<D, BC, NWG>;
  constexpr int BR = S::br, NT = S::threads;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint16_t *sQ = reinterpret_cast<uint16_t *>(align1024(smem_raw));  // BR x D
  uint16_t *sdO = sQ + BR * D;                                        // BR x D
  uint16_t *sK = sdO + BR * D;                                        // 2 x (BC x D)
  uint16_t *sV = sK + 2 * BC * D;                                     // 2 x (BC x D)

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2;
  const int qtile = p.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
  const int q0 = qtile * BR;
  const int64_t bh = blockIdx.y;
  const uint16_t *gq = static_cast<const uint16_t *>(p.q) + bh * p.tq * D;
  const uint16_t *gdo = static_cast<const uint16_t *>(p.dout) + bh * p.tq * D;
  const uint16_t *gk = static_cast<const uint16_t *>(p.k) + bh * p.tk * D;
  const uint16_t *gv = static_cast<const uint16_t *>(p.v) + bh * p.tk * D;
  const int off = p.tk - p.tq;

  int n_kv = (p.tk + BC - 1) / BC;
  if (p.causal) {
    const int last_key = q0 + BR - 1 + off;
    n_kv = min(n_kv, last_key < 0 ? 0 : last_key / BC + 1);
  }
  const int row_base = q0 + wg * 64 + (warp & 3) * 16;
  float lse2[2], dd[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = row_base + g + 8 * h;
    lse2[h] = row < p.tq ? p.lse[bh * p.tq + row] * kLog2e : INFINITY;
    dd[h] = row < p.tq ? p.dvec[bh * p.tq + row] : 0.f;
  }

  load_tile_sw128<BR, D, NT>(sQ, gq, q0, p.tq);
  load_tile_sw128<BR, D, NT>(sdO, gdo, q0, p.tq);
  if (n_kv > 0) {
    load_tile_sw128<BC, D, NT>(sK, gk, 0, p.tk);
    load_tile_sw128<BC, D, NT>(sV, gv, 0, p.tk);
  }
  cp_async_commit();

  float dq[D / 2], s[BC / 2], dp[BC / 2];
#pragma unroll
  for (int i = 0; i < D / 2; i++) dq[i] = 0.f;
#pragma unroll
  for (int i = 0; i < BC / 2; i++) s[i] = dp[i] = 0.f;
  const uint32_t q_addr = smem_u32(sQ) + wg * 64 * 128, do_addr = smem_u32(sdO) + wg * 64 * 128;

  for (int j = 0; j < n_kv; j++) {
    const int k0 = j * BC, st = j & 1;
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    if (j + 1 < n_kv) {
      load_tile_sw128<BC, D, NT>(sK + (st ^ 1) * BC * D, gk, k0 + BC, p.tk);
      load_tile_sw128<BC, D, NT>(sV + (st ^ 1) * BC * D, gv, k0 + BC, p.tk);
    }
    cp_async_commit();
    const uint32_t k_addr = smem_u32(sK + st * BC * D), v_addr = smem_u32(sV + st * BC * D);

    wgmma_fence();
    wgmma_rows_by_rows<T, D, BC, BR>(s, q_addr, k_addr);
    wgmma_rows_by_rows<T, D, BC, BR>(dp, do_addr, v_addr);
    wgmma_commit();
    wgmma_wait<0>();

    const bool need_mask = k0 + BC > p.tk || (p.causal && k0 + BC - 1 > q0 + off);
#pragma unroll
    for (int n = 0; n < BC / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float pv = exp2f(fmaf(s[n * 4 + e], p.scale_log2, -lse2[e >> 1]));
        if (need_mask) {
          const int row = row_base + g + (e >> 1) * 8, col = k0 + n * 8 + 2 * t + (e & 1);
          if (col >= p.tk || (p.causal && col > row + off)) pv = 0.f;
        }
        dp[n * 4 + e] = pv * (dp[n * 4 + e] - dd[e >> 1]);  // dS
      }

    uint32_t da[BC / 16][4];
    pack_a<T, BC>(da, dp);
    wgmma_fence();
    wgmma_regs_by_panel<T, D, BC>(dq, da, k_addr);
    wgmma_commit();
    wgmma_wait<0>();
  }
  cp_async_wait<0>();

  T *gdq = static_cast<T *>(p.dq) + bh * p.tq * D;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = row_base + g + 8 * h;
    if (row < p.tq) {
#pragma unroll
      for (int n = 0; n < D / 8; n++)
        store2<T>(gdq + (int64_t)row * D + n * 8 + 2 * t, dq[n * 4 + 2 * h] * p.scale, dq[n * 4 + 2 * h + 1] * p.scale);
    }
  }
#endif
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
