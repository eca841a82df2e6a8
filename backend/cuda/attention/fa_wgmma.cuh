// fa_wgmma.cuh - Hopper (sm_90a) pieces of the wgmma FlashAttention forward: warpgroup MMA
// wrappers, shared-memory matrix descriptors, and the 128-byte-swizzled tile layout they read.
//
// Layout. A tile of ROWS x W 16-bit elements (W = the head dim, 64 or 128) is stored as
// W / 64 column panels of ROWS x 64, one after the other; a panel row is 128 bytes (8 chunks of
// 16 bytes) and chunk c of row r sits at chunk c ^ (r % 8). Every panel starts on a 1024-byte
// boundary, so this is exactly the hardware's 128-byte swizzle (address bits 4-6 XOR bits 7-9)
// and the wgmma descriptors below read it with base offset 0:
//   K-major operand (Q as A, K as B of S = Q K^T: the reduction dim is contiguous): rows are M
//     or N, 8-row groups 1024 bytes apart (SBO); a k16 step inside a panel moves the start
//     address by 32 bytes, the next panel by ROWS * 128 bytes. LBO is unused (1).
//   N-major operand (V as B of O = P V: N = the head dim is contiguous): the K rows (keys) are
//     128 bytes apart, 8-row groups 1024 bytes apart (SBO); the next 64 columns of N are the
//     next panel, ROWS * 128 bytes on (LBO); a k16 step moves the start by 16 rows, 2048 bytes.
//
// defines: wgmma_fence, wgmma_commit, wgmma_wait, fence_proxy_async, smem_desc,
//          wgmma_ss_n64/n128, wgmma_rs_n64/n128 (fa_wgmma_ops.inc), align1024, pack_a, sw128_off,
//          load_tile_sw128
#pragma once

#include "backend/cuda/attention/fa_common.cuh"

namespace mt {
namespace cuda {
namespace fa {

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Orders this thread's generic-proxy shared-memory writes (cp.async included) before later
// reads by the async proxy (wgmma operands); a barrier must follow.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// A wgmma shared-memory matrix descriptor with the 128-byte swizzle (mode 1): start address,
// leading and stride byte offsets, each encoded as (x & 0x3FFFF) >> 4.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo & 0x3FFFF) >> 4) << 16) |
         ((uint64_t)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

#include "backend/cuda/attention/fa_wgmma_ops.inc"

// The first 1024-byte boundary at or after p (the dynamic shared-memory base is 16-aligned).
__device__ __forceinline__ uint8_t *align1024(uint8_t *p) {
  return p + ((1024 - (smem_u32(p) & 1023)) & 1023);
}

// P and dS from registers as the A fragments of 16-column steps (C -> A, as the forward's P).
template <class T, int N>
__device__ __forceinline__ void pack_a(uint32_t (&a)[N / 16][4], const float (&c)[N / 2]) {
#pragma unroll
  for (int kk = 0; kk < N / 16; kk++) {
    a[kk][0] = pack2<T>(c[8 * kk + 0], c[8 * kk + 1]);
    a[kk][1] = pack2<T>(c[8 * kk + 2], c[8 * kk + 3]);
    a[kk][2] = pack2<T>(c[8 * kk + 4], c[8 * kk + 5]);
    a[kk][3] = pack2<T>(c[8 * kk + 6], c[8 * kk + 7]);
  }
}

// Element offset of (row, col) in the panel layout above (ROWS rows per panel).
template <int ROWS>
__device__ __forceinline__ int sw128_off(int row, int col) {
  return (col >> 6) * ROWS * 64 + row * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & 7);
}

// Rows [r0, r0 + ROWS) of a row-major [len, W] matrix g into the panel tile s (rows past len
// are zero-filled) by cp.async, NT threads, 16 bytes each per step, a warp reading whole rows.
// Only issued: commit, wait, fence_proxy_async and a barrier before wgmma reads s.
template <int ROWS, int W, int NT>
__device__ __forceinline__ void load_tile_sw128(uint16_t *s, const uint16_t *g, int r0, int len) {
  constexpr int CPR = W / 8, TOTAL = ROWS * CPR;
#pragma unroll
  for (int it = 0; it < (TOTAL + NT - 1) / NT; it++) {
    const int i = (int)threadIdx.x + it * NT;
    if (TOTAL % NT != 0 && i >= TOTAL) break;
    const int r = i / CPR, c = (i % CPR) * 8;
    const bool ok = r0 + r < len;
    cp_async16(s + sw128_off<ROWS>(r, c), g + (int64_t)(ok ? r0 + r : 0) * W + c, ok);
  }
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
