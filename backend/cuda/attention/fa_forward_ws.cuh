// fa_forward_ws.cuh - the Hopper forward with a producer warpgroup and NC = 2 or 3 consumer
// warpgroups that take turns on the tensor cores (fa_v5's rows with producer stages in
// fa_configs.h, sm_90a).
//
// The function is fa_forward_wgmma.cuh's (FwdParams; output, lse, causal alignment, no-key
// rows) and so is the math of a key tile, through the same fwd_* pieces; what differs is who
// waits for what:
//   - warpgroup NC is the producer: one of its threads copies Q and the key/value tiles into a
//     ring of STAGES stages by TMA (cp.async.bulk.tensor, three tensor maps over (bh, t, d)
//     made by the launcher, the 128-byte swizzle of fa_wgmma.cuh's panels; rows past the
//     sequence arrive as zeros). A stage's `full` barrier completes when its bytes have landed;
//     the producer waits only for a stage to be free again (`empty`, 128 NC arrivals: every
//     consumer thread once it has no product in flight that reads the stage). The producer
//     gives up registers (setmaxnreg) so that the consumers can hold their score tiles: 240 a
//     thread with two consumers (64 x 128 scores at D 128), 160 with three;
//   - each consumer warpgroup owns 64 query rows. None waits for another at a tile boundary
//     (no __syncthreads after the set-up); they only take turns issuing products, in a ring of
//     named barriers: a turn issues S = Q K^T of tile j and then O += P V of tile j - 1, then
//     hands the turn to the next warpgroup; the warpgroup runs tile j's online softmax as soon
//     as its scores are in, while its own P V and the other warpgroups' products run. O is
//     rescaled and the new P packed only after that P V is done (it reads P's registers and
//     accumulates into O). So a warpgroup's softmax lies under products instead of all the
//     softmaxes leaving the tensor cores idle at the same time.
//   - three consumers (BR 192) share each key/value tile among more query rows: fewer bytes a
//     product, which pays at D 64 (fa_configs.h).
// TMA writes and wgmma reads are both async-proxy accesses: no proxy fence between them.
#pragma once

#include "backend/cuda/attention/fa_forward_wgmma.cuh"
#include "backend/cuda/attention/fa_tma.cuh"

namespace mt {
namespace cuda {
namespace fa {

template <int D, int BC, int STAGES, int NC>
struct WsFwdShape {
  static constexpr int br = 64 * NC;            // NC consumer warpgroups of 64 query rows
  static constexpr int threads = 128 * NC + 128;  // and the producer warpgroup
  // registers a consumer thread gets by setmaxnreg (the producer keeps 24; 64K a CTA)
  static constexpr int consumer_regs = NC == 2 ? 240 : 160;
  static constexpr int tile = BC * D;  // elements of one K or V tile
  // Q, STAGES of K and V, 2 STAGES mbarriers, and 1024 bytes to align the first panel
  static constexpr int smem_bytes = (br * D + 2 * STAGES * tile) * 2 + 2 * STAGES * 8 + 1024;
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(BC == 64 || BC == 128, "key tile 64 or 128");
  static_assert(NC == 2 || NC == 3, "two or three consumer warpgroups");
  static_assert(NC * 128 * consumer_regs + 128 * 24 <= 65536, "registers of the SM");
};

// mq, mk, mv: p.q, p.k, p.v as (bh, t, d) tensors, boxes of 64 columns (one panel) by BR (Q) or
// BC (K, V) rows.
template <class T, int D, int BC, int STAGES, int NC>
__global__ void __launch_bounds__(128 * NC + 128, 1)
    flash_fwd_ws_kernel(FwdParams p, const __grid_constant__ CUtensorMap mq, const __grid_constant__ CUtensorMap mk,
                        const __grid_constant__ CUtensorMap mv) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = WsFwdShape<D, BC, STAGES, NC>;
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
    for (int s = 0; s < STAGES; s++) mbar_init(full0 + 8 * s, 1), mbar_init(empty0 + 8 * s, 128 * NC);
    fence_proxy_async();  // the initialized barriers visible to the async proxy (TMA's complete_tx)
  }
  __syncthreads();  // the barriers initialized; the last block-wide barrier of the kernel

  if (wg == NC) {  // the producer: one thread issues, the warpgroup keeps 24 registers a thread
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (threadIdx.x == 128 * NC) {
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

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(S::consumer_regs) : "memory");
  const int row_base = q0 + wg * 64 + (warp & 3) * 16;  // the warp's first query row
  float o[D / 2], s[BC / 2];
  float m_run[2], l_run[2];
  fwd_start<D, BC>(o, s, m_run, l_run);
  uint32_t pa[BC / 16][4];

  const uint32_t q_addr = smem_u32(sQ) + wg * 64 * 128;  // this warpgroup's rows of panel 0
  const int mine = 1 + wg, next = wg == NC - 1 ? 1 : wg + 2;  // the named barriers of the turns
  auto scores = [&](int st) { fwd_scores<T, D, BC, BR>(s, q_addr, smem_u32(sK + st * S::tile)); };
  auto pv = [&](int st) { fwd_pv<T, D, BC>(o, pa, smem_u32(sV + st * S::tile)); };
  float alpha[2];
  auto softmax = [&](int j) { fwd_softmax<BC>(s, m_run, l_run, alpha, p, j * BC, q0, row_base, g, t); };
  auto rescale_pack = [&]() {  // O *= alpha (no product in flight on it), P packed into pa
    fwd_rescale<D>(o, alpha);
    pack_a<T, BC>(pa, s);
  };
  auto await_tile = [&](int j) { mbar_wait(full0 + 8 * (j % STAGES), (j / STAGES) & 1); };

  // Turns, in the order of the warpgroups: warpgroup w waits on barrier 1 + w for the one before
  // it and hands over to the next. Warpgroup 0 goes first. Each warpgroup takes n_kv + 1 turns
  // and hands each one over, except the last warpgroup its last (warpgroup 0 has none left).
  if (n_kv > 0) {
    if (wg == NC - 1) named_arrive(next, 256);
    await_tile(0);
    named_sync(mine, 256);
    wgmma_fence();
    scores(0);
    wgmma_commit();
    named_arrive(next, 256);
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
      named_arrive(next, 256);
      wgmma_wait<1>();  // the scores (groups complete in order)
      softmax(j);       // under this warpgroup's P V of tile j - 1 and the others' products
      wgmma_wait<0>();
      mbar_arrive(empty0 + 8 * ((j - 1) % STAGES));  // tile j - 1 read
      rescale_pack();
    }
    named_sync(mine, 256);
    wgmma_fence();
    pv((n_kv - 1) % STAGES);
    wgmma_commit();
    if (wg != NC - 1) named_arrive(next, 256);
    wgmma_wait<0>();
  }

  fwd_store<T, D>(p, bh, o, m_run, l_run, row_base, g, t);
#endif
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
