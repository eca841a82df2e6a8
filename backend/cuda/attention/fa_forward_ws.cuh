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
//   - persistent (PERSIST): a grid of one CTA an SM takes (query tile, head) items in turn, the
//     first by its index and the rest from a counter in global memory, heaviest first under the
//     mask. Q has two buffers (one where two do not fit beside the stages), so the producer
//     loads the next item's Q and key/value tiles while the consumers finish the current one and
//     store it: a buffer is free once its item's last scores are in. The ring of stages and the
//     turns run on across items. What a CTA of the one-item grid spends before its first product
//     and after its last (its start, Q's and the first tile's latency, the epilogue) lies under
//     another item's work. The producer writes the item into a shared slot before the first tile's
//     `full` arrival, and -1 with a plain arrival when no item is left; a buffer's `qempty`
//     completes when every consumer thread has the last scores of the item that used it.
// TMA writes and wgmma reads are both async-proxy accesses: no proxy fence between them.
#pragma once

#include "backend/cuda/attention/fa_forward_wgmma.cuh"
#include "backend/cuda/attention/fa_tma.cuh"

namespace mt {
namespace cuda {
namespace fa {

template <int D, int BC, int STAGES, int NC, bool PERSIST = false>
struct WsFwdShape {
  static constexpr int br = 64 * NC;            // NC consumer warpgroups of 64 query rows
  static constexpr int threads = 128 * NC + 128;  // and the producer warpgroup
  // registers a consumer thread gets by setmaxnreg (the producer keeps 24; 64K a CTA)
  static constexpr int consumer_regs = NC == 2 ? 240 : 160;
  static constexpr int tile = BC * D;  // elements of one K or V tile
  // Q's buffers, STAGES of K and V, 2 STAGES + qslots mbarriers, qslots item slots, and 1024
  // bytes to align the first panel
  static constexpr int bytes(int qb, int slots) {
    return (qb * br * D + 2 * STAGES * tile) * 2 + (2 * STAGES + slots) * 8 + slots * 4 + 1024;
  }
  // A persistent grid's Q has two buffers where they fit beside the stages, else one (D 128 with
  // BC 128 and 3 stages), which the next item's Q overwrites once the item's last scores are in.
  static constexpr int qbufs = PERSIST ? (bytes(2, 2) <= 227 * 1024 ? 2 : 1) : 1;
  static constexpr int qslots = PERSIST ? qbufs : 0;  // a Q buffer's qempty barrier and item slot
  static constexpr int smem_bytes = bytes(qbufs, qslots);
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(BC == 64 || BC == 128, "key tile 64 or 128");
  static_assert(NC == 2 || NC == 3, "two or three consumer warpgroups");
  static_assert(NC * 128 * consumer_regs + 128 * 24 <= 65536, "registers of the SM");
  static_assert(smem_bytes <= 227 * 1024, "shared memory of a CTA");
};

// The persistent grid's item counter: the CTAs take items gridDim.x + 0, 1, ... from it. Each
// CTA's producer fetches until it gets one past the last item, so a launch makes exactly
// `items` fetches, and the one that gets items - 1 (the last) sets it back to 0 for the next
// launch. Launches that share it must not overlap (the library's one stream).
static __device__ unsigned int g_fa_fwd_next_item = 0;

// An item (query tile rank r of head bh, r = item % nq) as the tile's first row and its head:
// under the mask rank 0 is the last tile, the one with the most keys.
__device__ __forceinline__ void fwd_ws_item(const FwdParams &p, int item, int nq, int br, int &q0, int64_t &bh) {
  const int r = item % nq;
  bh = item / nq;
  q0 = (p.causal ? nq - 1 - r : r) * br;
}

// mq, mk, mv: p.q, p.k, p.v as (bh, t, d) tensors, boxes of 64 columns (one panel) by BR (Q) or
// BC (K, V) rows. One item a CTA (grid: query tiles x heads) or, PERSIST, n_bh * nq items over a
// grid of at most one CTA an SM.
template <class T, int D, int BC, int STAGES, int NC, bool PERSIST>
__global__ void __launch_bounds__(128 * NC + 128, 1)
    flash_fwd_ws_kernel(FwdParams p, const __grid_constant__ CUtensorMap mq, const __grid_constant__ CUtensorMap mk,
                        const __grid_constant__ CUtensorMap mv, int n_bh) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = WsFwdShape<D, BC, STAGES, NC, PERSIST>;
  constexpr int BR = S::br, QB = S::qbufs;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint16_t *sQ = reinterpret_cast<uint16_t *>(align1024(smem_raw));  // QB of BR x D
  uint16_t *sK = sQ + QB * BR * D;         // STAGES of BC x D
  uint16_t *sV = sK + STAGES * S::tile;    // STAGES of BC x D
  uint64_t *bars = reinterpret_cast<uint64_t *>(sV + STAGES * S::tile);
  const uint32_t full0 = smem_u32(bars), empty0 = full0 + 8 * STAGES, qempty0 = empty0 + 8 * STAGES;  // 8 bytes each
  volatile int *slot = reinterpret_cast<volatile int *>(bars + 2 * STAGES + S::qslots);  // PERSIST: QB items

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2;
  const int nq = (p.tq + BR - 1) / BR;
  const int items = PERSIST ? nq * n_bh : 1;  // the launcher keeps nq * n_bh + gridDim.x within int
  // The first row and head of `item`; a one-item grid's CTA has its own, blockIdx (x: rank).
  auto locate = [&](int item, int &q0, int64_t &bh) {
    if constexpr (PERSIST) {
      fwd_ws_item(p, item, nq, BR, q0, bh);
    } else {
      q0 = (p.causal ? nq - 1 - (int)blockIdx.x : (int)blockIdx.x) * BR;
      bh = blockIdx.y;
    }
  };
  // key tiles of the item whose first query row is q0. A persistent grid's consumers learn each
  // item from its first tile's arrival, so an item takes at least one: where the mask leaves its
  // rows no key (tk < tq, only through the study hook), the mask hides all of that tile, which
  // gives them what no key gives them (O 0, lse +inf).
  auto key_tiles = [&](int q0) {
    const int n = fwd_key_tiles<BR, BC>(p, q0);
    return PERSIST ? max(n, 1) : n;
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; s++) mbar_init(full0 + 8 * s, 1), mbar_init(empty0 + 8 * s, 128 * NC);
    for (int b = 0; b < S::qslots; b++) mbar_init(qempty0 + 8 * b, 128 * NC);
    fence_proxy_async();  // the initialized barriers visible to the async proxy (TMA's complete_tx)
  }
  __syncthreads();  // the barriers initialized; the last block-wide barrier of the kernel

  if (wg == NC) {  // the producer: one thread issues, the warpgroup keeps 24 registers a thread
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (threadIdx.x == 128 * NC) {
      int J = 0;  // key/value tiles loaded so far (over the CTA's items)
      for (int ord = 0, item = PERSIST ? (int)blockIdx.x : 0;; ord++) {
        const int b = ord % QB;
        if (PERSIST && ord >= QB) mbar_wait(qempty0 + 8 * b, (ord / QB - 1) & 1);  // item ord - QB past its last scores
        if constexpr (PERSIST) slot[b] = item < items ? item : -1;
        if (PERSIST && item >= items) {  // no item left: -1 and a plain arrival on the next tile's stage
          if (J >= STAGES) mbar_wait(empty0 + 8 * (J % STAGES), (J / STAGES - 1) & 1);
          mbar_arrive(full0 + 8 * (J % STAGES));
          break;
        }
        int q0;
        int64_t bh;
        locate(item, q0, bh);
        const int n_kv = key_tiles(q0);
        for (int j = 0; j < n_kv; j++, J++) {
          const int st = J % STAGES;
          const uint32_t full = full0 + 8 * st;
          if (J >= STAGES) mbar_wait(empty0 + 8 * st, (J / STAGES - 1) & 1);  // tile J - STAGES consumed
          mbar_arrive_expect_tx(full, (2 * S::tile + (j == 0 ? BR * D : 0)) * 2);
#pragma unroll
          for (int c = 0; c < D / 64; c++) {  // a panel of 64 columns a box
            if (j == 0) tma_load_3d(sQ + b * BR * D + c * BR * 64, &mq, 64 * c, q0, (int)bh, full);
            tma_load_3d(sK + st * S::tile + c * BC * 64, &mk, 64 * c, j * BC, (int)bh, full);
            tma_load_3d(sV + st * S::tile + c * BC * 64, &mv, 64 * c, j * BC, (int)bh, full);
          }
        }
        if constexpr (!PERSIST) break;
        const unsigned int v = atomicAdd(&g_fa_fwd_next_item, 1u);
        if (v == (unsigned int)items - 1) atomicExch(&g_fa_fwd_next_item, 0u);  // the launch's last fetch
        item = (int)gridDim.x + (int)v;
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(S::consumer_regs) : "memory");
  const int mine = 1 + wg, next = wg == NC - 1 ? 1 : wg + 2;  // the named barriers of the turns
  auto await_tile = [&](int J) { mbar_wait(full0 + 8 * (J % STAGES), (J / STAGES) & 1); };
  // Turns, in the order of the warpgroups: warpgroup w waits on barrier 1 + w for the one before
  // it and hands over to the next. Warpgroup 0 goes first. Each warpgroup takes n_kv + 1 turns
  // an item and hands each one over, except the last warpgroup its last of the grid's last
  // item (warpgroup 0 has none left): in a one-item grid, its last turn; in a persistent one,
  // warpgroup 0 takes that hand-over when it learns that no item is left.
  if (PERSIST && wg == NC - 1) named_arrive(next, 256);
  int J = 0;  // the first key/value tile of the item (over the CTA's items)
  for (int ord = 0;; ord++) {
    int item = 0;
    if constexpr (PERSIST) {
      await_tile(J);  // the item's first tile, or the end
      // from lane 0, so that the compiler knows the item warp-uniform and keeps more of the
      // products' descriptor arithmetic in uniform registers (read by each thread: row 12 at
      // D 64, T 16384, 366-383 TFLOP/s against 393-398; docs/flash_attention.md)
      item = __shfl_sync(0xffffffffu, slot[ord % QB], 0);
      if (item < 0) {
        if (wg == 0) named_sync(mine, 256);
        break;
      }
    }
    int q0;
    int64_t bh;
    locate(item, q0, bh);
    const int n_kv = key_tiles(q0);
    const int row_base = q0 + wg * 64 + (warp & 3) * 16;  // the warp's first query row
    float o[D / 2], s[BC / 2];
    float m_run[2], l_run[2];
    fwd_start<D, BC>(o, s, m_run, l_run);
    uint32_t pa[BC / 16][4];

    const uint32_t q_addr = smem_u32(sQ + (ord % QB) * BR * D) + wg * 64 * 128;  // this warpgroup's rows of panel 0
    // A persistent grid's Q buffer changes with the item, and its tile loop built Q's descriptors
    // again every tile; made once an item they gave row 12 at D 128 6-10% (D 64 and row 13
    // unchanged). The one-item rows keep fwd_scores, which their loop already hoists (row 5 at
    // D 64 lost 3% at 2048 keys with fwd_q_descs). docs/flash_attention.md.
    uint32_t qd[D / 16];
    if constexpr (PERSIST) fwd_q_descs<D, BR>(qd, q_addr);
    auto scores = [&](int st) {
      if constexpr (PERSIST)
        fwd_scores_qd<T, D, BC>(s, qd, smem_u32(sK + st * S::tile));
      else
        fwd_scores<T, D, BC, BR>(s, q_addr, smem_u32(sK + st * S::tile));
    };
    auto pv = [&](int st) { fwd_pv<T, D, BC>(o, pa, smem_u32(sV + st * S::tile)); };
    // the item's last scores are in: its Q buffer is free for the item QB on (under this item's
    // last softmax, P V and store)
    auto q_read = [&]() { mbar_arrive(qempty0 + 8 * (ord % QB)); };
    float alpha[2];
    auto softmax = [&](int j) { fwd_softmax<BC>(s, m_run, l_run, alpha, p, j * BC, q0, row_base, g, t); };
    auto rescale_pack = [&]() {  // O *= alpha (no product in flight on it), P packed into pa
      fwd_rescale<D>(o, alpha);
      pack_a<T, BC>(pa, s);
    };

    if (n_kv > 0) {
      if (!PERSIST && wg == NC - 1) named_arrive(next, 256);
      await_tile(J);
      named_sync(mine, 256);
      wgmma_fence();
      scores(J % STAGES);
      wgmma_commit();
      named_arrive(next, 256);
      wgmma_wait<0>();
      if (PERSIST && n_kv == 1) q_read();
      softmax(0);
      rescale_pack();
      for (int j = 1; j < n_kv; j++) {
        await_tile(J + j);
        named_sync(mine, 256);
        wgmma_fence();
        scores((J + j) % STAGES);
        wgmma_commit();
        pv((J + j - 1) % STAGES);
        wgmma_commit();
        named_arrive(next, 256);
        wgmma_wait<1>();  // the scores (groups complete in order)
        if (PERSIST && j == n_kv - 1) q_read();
        softmax(j);       // under this warpgroup's P V of tile j - 1 and the others' products
        wgmma_wait<0>();
        mbar_arrive(empty0 + 8 * ((J + j - 1) % STAGES));  // tile j - 1 read
        rescale_pack();
      }
      named_sync(mine, 256);
      wgmma_fence();
      pv((J + n_kv - 1) % STAGES);
      wgmma_commit();
      if (PERSIST || wg != NC - 1) named_arrive(next, 256);
      wgmma_wait<0>();
      if constexpr (PERSIST) mbar_arrive(empty0 + 8 * ((J + n_kv - 1) % STAGES));  // the item's last tile read
    }

    fwd_store<T, D>(p, bh, o, m_run, l_run, row_base, g, t);
    if constexpr (!PERSIST) break;
    J += n_kv;
  }
#endif
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
