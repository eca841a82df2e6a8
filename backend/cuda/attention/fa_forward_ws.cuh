// fa_forward_ws.cuh - the Hopper forward with a producer warpgroup and two consumer warpgroups
// that take turns on the tensor cores (fa_v5's rows with producer stages in fa_configs.h,
// sm_90a).
//
// The function is fa_forward_wgmma.cuh's (FwdParams; output, lse, causal alignment, no-key
// rows) and so is the math of a key tile, through the same fwd_* pieces; what differs is who waits
// for what:
//   - warpgroup 2 is the producer: one of its threads copies Q and the key/value tiles into a
//     ring of STAGES stages by TMA (cp.async.bulk.tensor, three tensor maps over (bh, t, d)
//     made by the launcher, the 128-byte swizzle of fa_wgmma.cuh's panels; rows past the
//     sequence arrive as zeros). A stage's `full` barrier completes when its bytes have landed;
//     the producer waits only for a stage to be free again (`empty`, 256 arrivals: every
//     consumer thread once it has no product in flight that reads the stage). The producer
//     gives up registers (setmaxnreg) so that the consumers can hold 64 x 128 score tiles;
//   - warpgroups 0 and 1 each own 64 query rows. Neither waits for the other at a tile boundary
//     (no __syncthreads after the set-up); they only take turns issuing products, through two
//     named barriers: a turn issues S = Q K^T of tile j and then O += P V of tile j - 1, then
//     hands the turn over; the warpgroup runs tile j's online softmax as soon as its scores are
//     in, while its own P V and the other warpgroup's products run. O is rescaled and the new
//     P packed only after that P V is done (it reads P's registers and accumulates into O).
//     So a warpgroup's softmax lies under products instead of both softmaxes leaving the tensor
//     cores idle at the same time.
// TMA writes and wgmma reads are both async-proxy accesses: no proxy fence between them.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: the launcher gets the driver entry point at run time)

#include "backend/cuda/attention/fa_forward_wgmma.cuh"

namespace mt {
namespace cuda {
namespace fa {

template <int D, int BC, int STAGES>
struct WsFwdShape {
  static constexpr int br = 128;       // two consumer warpgroups of 64 query rows
  static constexpr int threads = 384;  // and the producer warpgroup
  static constexpr int tile = BC * D;  // elements of one K or V tile
  // Q, STAGES of K and V, 2 STAGES mbarriers, and 1024 bytes to align the first panel
  static constexpr int smem_bytes = (br * D + 2 * STAGES * tile) * 2 + 2 * STAGES * 8 + 1024;
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(BC == 64 || BC == 128, "key tile 64 or 128");
};

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// An arrival on bar that also expects `bytes` more of asynchronous copies in this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// The box at (x, y, z) of tensor map m into shared memory at dst, completing on bar.
__device__ __forceinline__ void tma_load_3d(void *dst, const CUtensorMap *m, int x, int y, int z, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
          smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(m)), "r"(x), "r"(y), "r"(z), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// Named barrier `id` of n threads: sync waits for it, arrive counts in without waiting.
__device__ __forceinline__ void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

// mq, mk, mv: p.q, p.k, p.v as (bh, t, d) tensors, boxes of 64 columns (one panel) by BR (Q) or
// BC (K, V) rows.
template <class T, int D, int BC, int STAGES>
__global__ void __launch_bounds__(384, 1)
    flash_fwd_ws_kernel(FwdParams p, const __grid_constant__ CUtensorMap mq, const __grid_constant__ CUtensorMap mk,
                        const __grid_constant__ CUtensorMap mv) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = WsFwdShape<D, BC, STAGES>;
  constexpr int BR = S::br;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint16_t *sQ = reinterpret_cast<uint16_t *>(align1024(smem_raw));
  uint16_t *sK = sQ + BR * D;              // STAGES of BC x D
  uint16_t *sV = sK + STAGES * S::tile;    // STAGES of BC x D
  const uint32_t full0 = smem_u32(sV + STAGES * S::tile), empty0 = full0 + 8 * STAGES;  // 8 bytes each

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2;
  const int qtile = p.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
  const int q0 = qtile * BR;
  const int64_t bh = blockIdx.y;
  const int n_kv = fwd_key_tiles<BR, BC>(p, q0);

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; s++) mbar_init(full0 + 8 * s, 1), mbar_init(empty0 + 8 * s, 256);
    fence_proxy_async();  // the initialized barriers visible to the async proxy (TMA's complete_tx)
  }
  __syncthreads();  // the barriers initialized; the last block-wide barrier of the kernel

  if (wg == 2) {  // the producer: one thread issues, the warpgroup keeps 24 registers a thread
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (threadIdx.x == 256) {
      for (int j = 0; j < n_kv; j++) {
        const int st = j % STAGES;
        const uint32_t full = full0 + 8 * st;
        if (j >= STAGES) mbar_wait(empty0 + 8 * st, (j / STAGES - 1) & 1);  // tile j - STAGES consumed
        mbar_arrive_expect_tx(full, (2 * S::tile + (j == 0 ? BR * D : 0)) * 2);
#pragma unroll
        for (int c = 0; c < D / 64; c++) {  // a panel of 64 columns a box
          if (j == 0) tma_load_3d(sQ + c * BR * 64, &mq, 64 * c, q0, (int)bh, full);
          tma_load_3d(sK + st * S::tile + c * BC * 64, &mk, 64 * c, j * BC, (int)bh, full);
          tma_load_3d(sV + st * S::tile + c * BC * 64, &mv, 64 * c, j * BC, (int)bh, full);
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
  const int row_base = q0 + wg * 64 + (warp & 3) * 16;  // the warp's first query row
  float o[D / 2], s[BC / 2];
  float m_run[2], l_run[2];
  fwd_start<D, BC>(o, s, m_run, l_run);
  uint32_t pa[BC / 16][4];

  const uint32_t q_addr = smem_u32(sQ) + wg * 64 * 128;  // this warpgroup's rows of panel 0
  const int mine = 1 + wg, other = 2 - wg;               // the named barriers of the turns
  auto scores = [&](int st) { fwd_scores<T, D, BC, BR>(s, q_addr, smem_u32(sK + st * S::tile)); };
  auto pv = [&](int st) { fwd_pv<T, D, BC>(o, pa, smem_u32(sV + st * S::tile)); };
  float alpha[2];
  auto softmax = [&](int j) { fwd_softmax<BC>(s, m_run, l_run, alpha, p, j * BC, q0, row_base, g, t); };
  auto rescale_pack = [&]() {  // O *= alpha (no product in flight on it), P packed into pa
    fwd_rescale<D>(o, alpha);
    pack_a<T, BC>(pa, s);
  };
  auto await_tile = [&](int j) { mbar_wait(full0 + 8 * (j % STAGES), (j / STAGES) & 1); };

  // Turns: warpgroup 0 goes first. Each warpgroup takes n_kv + 1 turns and hands each one over,
  // except warpgroup 1 its last (warpgroup 0 has none left to take).
  if (n_kv > 0) {
    if (wg == 1) named_arrive(other, 256);
    await_tile(0);
    named_sync(mine, 256);
    wgmma_fence();
    scores(0);
    wgmma_commit();
    named_arrive(other, 256);
    wgmma_wait<0>();
    softmax(0);
    rescale_pack();
    for (int j = 1; j < n_kv; j++) {
      await_tile(j);
      named_sync(mine, 256);
      wgmma_fence();
      scores(j % STAGES);
      wgmma_commit();
      pv((j - 1) % STAGES);
      wgmma_commit();
      named_arrive(other, 256);
      wgmma_wait<1>();  // the scores (groups complete in order)
      softmax(j);       // under this warpgroup's P V of tile j - 1 and the other's products
      wgmma_wait<0>();
      mbar_arrive(empty0 + 8 * ((j - 1) % STAGES));  // tile j - 1 read
      rescale_pack();
    }
    named_sync(mine, 256);
    wgmma_fence();
    pv((n_kv - 1) % STAGES);
    wgmma_commit();
    if (wg == 0) named_arrive(other, 256);
    wgmma_wait<0>();
  }

  fwd_store<T, D>(p, bh, o, m_run, l_run, row_base, g, t);
#endif
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
