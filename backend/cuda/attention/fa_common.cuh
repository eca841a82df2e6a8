// fa_common.cuh - what the FlashAttention kernels share: the generation policies, the
// tensor-core fragment helpers (mma.sync m16n8k16, ldmatrix), cp.async, the shared-memory
// tile layout (plain or XOR-swizzled) and the global -> shared tile copy.
//
// Fragment layouts of mma.sync.aligned.m16n8k16.row.col (f32 accumulators), for lane l with
// g = l / 4 (the row group) and t = l % 4 (the thread in the group):
//   A (16 x 16, row-major)   a0 = A[g][2t..2t+1]    a1 = A[g+8][2t..2t+1]
//                            a2 = A[g][2t+8..2t+9]  a3 = A[g+8][2t+8..2t+9]
//   B (16 x 8, k x n)        b0 = B[2t..2t+1][g]    b1 = B[2t+8..2t+9][g]
//   C (16 x 8, f32)          c0, c1 = C[g][2t..2t+1]  c2, c3 = C[g+8][2t..2t+1]
// Two neighbouring C tiles (columns 16j..16j+15) are, packed to 16 bits, exactly the A
// fragment of columns 16j..16j+15: this is how P and dS feed the next product without a
// trip through shared memory.
//
// Shared tiles hold `rows x W` 16-bit elements, W = 64 or 128 (the head dim, or the key
// tile for dS), as rows of W / 8 chunks of 16 bytes. The swizzled layout stores logical
// chunk c of row r at chunk c ^ (r % 8): the 8 rows an ldmatrix 8x8 reads (one chunk each)
// or a 16-byte store of 8 neighbouring rows land on 8 different 4-bank groups, so neither
// conflicts (rows are 128 or 256 bytes, a multiple of the 32 banks).
//
// defines: PolicyV1/V2/V3, tile_off, mma_16816, load_a, load_b2, load_b2_trans,
//          pack2, load_tile (quad_max, quad_sum: kernel_utils.cuh)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/kernel_utils.cuh"  // cp_async16, cp_async_commit, cp_async_wait, quad_max, quad_sum

namespace mt {
namespace cuda {
namespace fa {

// ---- generation policies -------------------------------------------------------------
// LDMATRIX: fragments by ldmatrix (.trans for B operands stored k-major) instead of 32-bit
//           and 16-bit shared loads; SWIZZLE: the XOR layout above; CP_ASYNC: global ->
//           shared by cp.async into two stages, the next tile in flight during the math.
template <bool LDMATRIX, bool SWIZZLE, bool CP_ASYNC>
struct Policy {
  static constexpr bool ldmatrix = LDMATRIX, swizzle = SWIZZLE, cp_async = CP_ASYNC;
  static constexpr int stages = CP_ASYNC ? 2 : 1;
};
using PolicyV1 = Policy<false, false, false>;  // fa_v1: plain shared loads, no pipelining
using PolicyV2 = Policy<true, true, false>;    // fa_v2: ldmatrix + swizzled shared memory
using PolicyV3 = Policy<true, true, true>;     // fa_v3: + cp.async double buffering

// ---- shared layout ----------------------------------------------------------------------
// Element offset of (row, col) in a tile of rows of W elements.
template <int W, bool SWZ>
__device__ __forceinline__ int tile_off(int row, int col) {
  static_assert(W % 64 == 0, "tile rows must be a multiple of 8 chunks of 16 bytes");
  if constexpr (SWZ) return row * W + ((((col >> 3) ^ row) & 7) | ((col >> 3) & ~7)) * 8 + (col & 7);
  else return row * W + col;
}

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

// ---- tensor-core primitives --------------------------------------------------------------
template <class T>
__device__ __forceinline__ void mma_16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    static_assert(std::is_same<T, __half>::value, "mma_16816 takes bf16 or f16");
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// Two floats as one register of two 16-bit values, lo in the low half (the lower index).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    r = *reinterpret_cast<uint32_t *>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    r = *reinterpret_cast<uint32_t *>(&v);
  }
  return r;
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

__device__ __forceinline__ uint32_t lds32(const uint16_t *p) { return *reinterpret_cast<const uint32_t *>(p); }
__device__ __forceinline__ uint32_t lds_pair(const uint16_t *lo, const uint16_t *hi) {
  return (uint32_t)*lo | ((uint32_t)*hi << 16);
}

// A fragment of the 16 x 16 block at (r0, k0) of a row-major tile s (rows of W).
template <int W, class P>
__device__ __forceinline__ void load_a(uint32_t a[4], const uint16_t *s, int r0, int k0) {
  const int lane = threadIdx.x & 31;
  if constexpr (P::ldmatrix) {
    // lanes 0-15 address rows r0..r0+15 at k0, lanes 16-31 the same rows at k0 + 8
    ldmatrix_x4(a, s + tile_off<W, P::swizzle>(r0 + (lane & 15), k0 + (lane >> 4) * 8));
  } else {
    const int g = lane >> 2, t = lane & 3;
    a[0] = lds32(s + tile_off<W, P::swizzle>(r0 + g, k0 + 2 * t));
    a[1] = lds32(s + tile_off<W, P::swizzle>(r0 + g + 8, k0 + 2 * t));
    a[2] = lds32(s + tile_off<W, P::swizzle>(r0 + g, k0 + 2 * t + 8));
    a[3] = lds32(s + tile_off<W, P::swizzle>(r0 + g + 8, k0 + 2 * t + 8));
  }
}

// B fragments of two n8 tiles (n0, n0 + 8) x k16 at k0 where B[k][n] = s[n][k]: the tile
// holds n as rows (K for S = Q K^T, Q for S^T = K Q^T, V for dP = dO V^T).
template <int W, class P>
__device__ __forceinline__ void load_b2(uint32_t b[2][2], const uint16_t *s, int n0, int k0) {
  const int lane = threadIdx.x & 31;
  if constexpr (P::ldmatrix) {
    // matrices: (n0, k0) (n0, k0+8) (n0+8, k0) (n0+8, k0+8)
    const int mi = lane >> 3;
    uint32_t r[4];
    ldmatrix_x4(r, s + tile_off<W, P::swizzle>(n0 + (mi >> 1) * 8 + (lane & 7), k0 + (mi & 1) * 8));
    b[0][0] = r[0]; b[0][1] = r[1]; b[1][0] = r[2]; b[1][1] = r[3];
  } else {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
      b[h][0] = lds32(s + tile_off<W, P::swizzle>(n0 + 8 * h + g, k0 + 2 * t));
      b[h][1] = lds32(s + tile_off<W, P::swizzle>(n0 + 8 * h + g, k0 + 2 * t + 8));
    }
  }
}

// B fragments of two n8 tiles (n0, n0 + 8) x k16 at k0 where B[k][n] = s[k][n]: the tile
// holds k as rows (V for O = P V, K for dQ = dS K, dO and Q for dV / dK).
template <int W, class P>
__device__ __forceinline__ void load_b2_trans(uint32_t b[2][2], const uint16_t *s, int k0, int n0) {
  const int lane = threadIdx.x & 31;
  if constexpr (P::ldmatrix) {
    // matrices: (k0, n0) (k0+8, n0) (k0, n0+8) (k0+8, n0+8), each transposed on the way
    const int mi = lane >> 3;
    uint32_t r[4];
    ldmatrix_x4_trans(r, s + tile_off<W, P::swizzle>(k0 + (mi & 1) * 8 + (lane & 7), n0 + (mi >> 1) * 8));
    b[0][0] = r[0]; b[0][1] = r[1]; b[1][0] = r[2]; b[1][1] = r[3];
  } else {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int n = n0 + 8 * h + g;
      b[h][0] = lds_pair(s + tile_off<W, P::swizzle>(k0 + 2 * t, n), s + tile_off<W, P::swizzle>(k0 + 2 * t + 1, n));
      b[h][1] = lds_pair(s + tile_off<W, P::swizzle>(k0 + 2 * t + 8, n), s + tile_off<W, P::swizzle>(k0 + 2 * t + 9, n));
    }
  }
}

// Rows [r0, r0 + ROWS) of a row-major [len, W] matrix g into the shared tile s (rows past
// len are zeros), by the NT threads of the block: 16 bytes per thread per step, a warp
// covering whole rows (coalesced). With P::cp_async the copy is only issued: commit and
// wait before reading s.
template <int ROWS, int W, int NT, class P>
__device__ __forceinline__ void load_tile(uint16_t *s, const uint16_t *g, int r0, int len) {
  constexpr int CPR = W / 8, TOTAL = ROWS * CPR;
  static_assert(TOTAL % NT == 0, "the tile must split evenly over the threads");
#pragma unroll
  for (int it = 0; it < TOTAL / NT; it++) {
    const int i = (int)threadIdx.x + it * NT;
    const int r = i / CPR, c = (i % CPR) * 8;
    const bool ok = r0 + r < len;
    const uint16_t *src = g + (int64_t)(ok ? r0 + r : 0) * W + c;
    uint16_t *dst = s + tile_off<W, P::swizzle>(r, c);
    if constexpr (P::cp_async) {
      cp_async16(dst, src, ok);
    } else {
      int4 v = ok ? *reinterpret_cast<const int4 *>(src) : make_int4(0, 0, 0, 0);
      *reinterpret_cast<int4 *>(dst) = v;
    }
  }
}

// Stores two floats as two 16-bit values of T at p (4-byte aligned).
template <class T>
__device__ __forceinline__ void store2(T *p, float lo, float hi) {
  *reinterpret_cast<uint32_t *>(p) = pack2<T>(lo, hi);
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

}  // namespace fa
}  // namespace cuda
}  // namespace mt
