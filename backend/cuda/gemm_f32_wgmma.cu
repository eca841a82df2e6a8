// gemm_f32_wgmma.cu - the float32 GEMM of gemm_f32.cu (3xTF32, float32 accuracy) on Hopper's
// warpgroup MMA (wgmma, sm_90a; built for that target alone, launched only on a 9.0 device).
//
// A block of BM / 64 warpgroups (4 warps, 128 threads each) computes a BM x BN tile of C over k
// in steps of 32; warpgroup w owns rows 64w .. 64w + 63, each warp 16 of them.
//   A comes from registers: each warp reads its m16n8k8 TF32 fragments (tf32x3.cuh) from the
//     staged step (ldmatrix from the swizzled tile when A is K-major, 4-byte loads from [32][BM +
//     8] when A is stored (k, m)) and splits them into hi and lo there, once per block.
//   B comes from shared memory. TF32 wgmma reads it K-major only (no transposed forms, unlike
//     16-bit types), in rows of 32 floats = 128 bytes with the 128-byte swizzle (16-byte chunk c
//     of row r at chunk c ^ (r % 8), tiles 1024-byte aligned; fa_wgmma.cuh's layout), so each
//     step of B is split once, by the whole block, into hi and lo tiles in that layout:
//     K-major in memory (trans_b): cp.async writes the chunks straight into the hi tile,
//       swizzled; the split rewrites hi in place and writes lo beside it;
//     N-major (B stored (k, n)): cp.async lands the step as it is, [32][BN], in the lo tile; the
//       split reads it into registers and after a barrier writes hi and lo transposed (a warp's
//       32 consecutive rows: the reads are conflict-free, and 8 rows of one chunk column write 8
//       different banks' chunks).
// The mma.sync kernel splits each fragment in every warp that reads it; here each value is split
// once (B's once for all the block's warpgroups), and the tensor cores read only B from shared
// memory. A k-step is 4 k8 steps x 3 products (lo x hi, hi x lo, hi x hi: small terms first) into
// a fresh accumulator that is added to the running sum in float32 (the tensor cores truncate as
// they accumulate; tf32x3.cuh). The products of step i run while the block splits B's step i + 1
// and reads A's; STAGES steps are in flight (the copies of i + 2 .. i + STAGES - 1 as well).
//
// a_sums (trans_a only): each thread adds up the A values of its fragments (rows 16 warp + g and
// + 8), per step into a fresh partial; the 4 lanes of a row are added as a fixed tree at the end.
//
// Tiles (gemm_f32.h's table; the choice is gemm_f32.cu's pick_tile): 64 x 64 (2 or 3 stages),
// 64 x 128 (2), and 128 x 128 (2) in production; the others for gemm_study.py's comparisons.
#include "backend/cuda/gemm_f32.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/tf32x3.cuh"
#include "backend/cuda/attention/fa_wgmma.cuh"

namespace mt {
namespace cuda {

namespace {

constexpr int kBK = 32;  // k a step: one 128-byte row per m or n, the swizzle's width

// BM / 64 warpgroups, each 64 rows of the tile; they share the split B tiles.
template <int BM_, int BN_, int STAGES_>
struct WgTile {
  static constexpr int BM = BM_, BN = BN_, STAGES = STAGES_, THREADS = 2 * BM;
  static constexpr int PAD_M = BM + 8;  // rows of an M-major A step as staged, [kBK][BM + 8]
  static constexpr int B_TILE = BN * kBK;  // floats of B's hi or lo tile
  // A as staged (swizzled K-major, or [kBK][PAD_M]) rounded to 1024 bytes, then B hi, B lo
  static constexpr int A_STAGE = (kBK * PAD_M * 4 + 1023) / 1024 * 1024 / 4;
  static constexpr int STAGE = A_STAGE + 2 * B_TILE;
  static constexpr size_t SMEM = (size_t)STAGES * STAGE * sizeof(float) + 1024;  // + alignment slack
};

// Float offset of 16-byte chunk ch (k = 4 ch .. 4 ch + 3) of row r in a swizzled tile.
__device__ __forceinline__ int swz(int r, int ch) { return r * kBK + ((ch ^ (r & 7)) << 2); }

// Issues the copies of rows [row0, row0 + R) x k [k0, k0 + kBK) of one operand (zero past rows
// and kend). KMAJOR: g[row * ld + k] into hi, swizzled; else g[k * ld + row] into lo as [kBK][R].
template <int R, bool KMAJOR, int NT>
__device__ __forceinline__ void load_operand(float *hi, float *lo, const float *g, int ld, int rows, int row0,
                                             int k0, int kend) {
  static_assert(R * 8 % NT == 0, "whole copies a thread");
#pragma unroll
  for (int it = 0; it < R * 8 / NT; it++) {
    const int i = threadIdx.x + it * NT;
    if (KMAJOR) {
      const int r = i >> 3, ch = i & 7;
      const bool ok = row0 + r < rows && k0 + ch * 4 < kend;
      cp_async16(hi + swz(r, ch), ok ? g + (int64_t)(row0 + r) * ld + k0 + ch * 4 : g, ok);
    } else {
      const int kr = i / (R / 4), c = i % (R / 4) * 4;
      const bool ok = k0 + kr < kend && row0 + c < rows;
      cp_async16(lo + kr * R + c, ok ? g + (int64_t)(k0 + kr) * ld + row0 + c : g, ok);
    }
  }
}

// The values one thread (of NT) splits: chunk (r, ch) for i = tid + it * NT, r = i % R, ch = i / R
// (M/N-major: consecutive rows a warp) or r = i / 8, ch = i % 8 (K-major: as copied).
template <int R, bool KMAJOR, int NT>
struct Chunks {
  static_assert(R * 8 % NT == 0, "whole chunks a thread");
  static constexpr int N = R * 8 / NT;
  float4 v[N];
  __device__ __forceinline__ static int row(int it) {
    const int i = threadIdx.x + it * NT;
    return KMAJOR ? i >> 3 : i % R;
  }
  __device__ __forceinline__ static int chunk(int it) {
    const int i = threadIdx.x + it * NT;
    return KMAJOR ? i & 7 : i / R;
  }
  __device__ __forceinline__ void read(const float *hi, const float *lo) {
#pragma unroll
    for (int it = 0; it < N; it++) {
      const int r = row(it), ch = chunk(it);
      if (KMAJOR) {
        v[it] = *reinterpret_cast<const float4 *>(hi + swz(r, ch));
      } else {
        v[it].x = lo[(4 * ch + 0) * R + r], v[it].y = lo[(4 * ch + 1) * R + r];
        v[it].z = lo[(4 * ch + 2) * R + r], v[it].w = lo[(4 * ch + 3) * R + r];
      }
    }
  }
  __device__ __forceinline__ void write(float *hi, float *lo) const {
#pragma unroll
    for (int it = 0; it < N; it++) {
      const int off = swz(row(it), chunk(it));
      const Tf32 x = split_tf32_fast(v[it].x), y = split_tf32_fast(v[it].y), z = split_tf32_fast(v[it].z),
                 w = split_tf32_fast(v[it].w);
      *reinterpret_cast<uint4 *>(hi + off) = make_uint4(x.hi, y.hi, z.hi, w.hi);
      *reinterpret_cast<uint4 *>(lo + off) = make_uint4(x.lo, y.lo, z.lo, w.lo);
    }
  }
};

template <int BN>
__device__ __forceinline__ void wgmma_tf32(float (&d)[BN / 2], const uint32_t (&a)[4], uint64_t db, int accumulate) {
  if constexpr (BN == 64) fa::wgmma_rs_tf32_n64(d, a, db, accumulate);
  else fa::wgmma_rs_tf32_n128(d, a, db, accumulate);
}

// This warp's A fragments of a staged step (rows 16 warp + g (+ 8), k 8 kk + t (+ 4); the
// m16n8k8 TF32 layout, tf32x3.cuh): K-major by ldmatrix from the swizzled tile (8 rows of one
// 16-byte chunk are an 8 x 4 tile of 32-bit values), M-major by 4-byte loads.
template <bool TA, int PAD_M>
__device__ __forceinline__ void read_a_frags(float (&x)[kBK / 8][4], const float *as) {
  const int lane = threadIdx.x & 31, r0 = (threadIdx.x >> 5) * 16;
#pragma unroll
  for (int kk = 0; kk < kBK / 8; kk++) {
    if constexpr (!TA) {
      uint32_t v[4];
      fa::ldmatrix_x4(v, as + swz(r0 + (lane & 7) + (lane & 8), 2 * kk + (lane >> 4)));
#pragma unroll
      for (int e = 0; e < 4; e++) x[kk][e] = __uint_as_float(v[e]);
    } else {
      const int r = r0 + (lane >> 2), k = 8 * kk + (lane & 3);
      x[kk][0] = as[k * PAD_M + r], x[kk][1] = as[k * PAD_M + r + 8];
      x[kk][2] = as[(k + 4) * PAD_M + r], x[kk][3] = as[(k + 4) * PAD_M + r + 8];
    }
  }
}

template <class S, bool TA, bool TB, bool SUMS>
__global__ void __launch_bounds__(S::THREADS) gemm_f32_wgmma_kernel(const GemmParams p) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  float *smem = reinterpret_cast<float *>(fa::align1024(smem_raw));
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = blockIdx.y * S::BM, n0 = blockIdx.x * S::BN;
  const GemmBlock blk = gemm_block<kBK>(p);
  const int split = blk.split, kbeg = blk.kbeg, kend = blk.kend, tiles = blk.tiles;
  const int64_t batch = blk.batch;
  const float *a = blk.a, *b = blk.b;
  constexpr bool B_K = TB;  // B K-major in memory (A: !TA)

  auto a_st = [&](int s) { return smem + s * S::STAGE; };  // A as staged
  auto b_hi = [&](int s) { return smem + s * S::STAGE + S::A_STAGE; };
  auto b_lo = [&](int s) { return smem + s * S::STAGE + S::A_STAGE + S::B_TILE; };
  auto load = [&](int s, int k0) {
    if constexpr (TA) {  // [kBK][PAD_M]: the fragments' 4-byte loads are conflict-free
#pragma unroll
      for (int it = 0; it < S::BM * 8 / S::THREADS; it++) {
        const int i = threadIdx.x + it * S::THREADS, kr = i / (S::BM / 4), c = i % (S::BM / 4) * 4;
        const bool ok = k0 + kr < kend && m0 + c < p.m;
        cp_async16(a_st(s) + kr * S::PAD_M + c, ok ? a + (int64_t)(k0 + kr) * p.lda + m0 + c : a, ok);
      }
    } else {
      load_operand<S::BM, true, S::THREADS>(a_st(s), nullptr, a, p.lda, p.m, m0, k0, kend);
    }
    load_operand<S::BN, B_K, S::THREADS>(b_hi(s), b_lo(s), b, p.ldb, p.n, n0, k0, kend);
  };
  const bool row_sums = SUMS && blockIdx.x == 0;  // block-uniform
  float rsum[2] = {};  // rows 16 warp + g (+ 8): the sums of this thread's fragments
  auto split_b = [&](int s) {
    Chunks<S::BN, B_K, S::THREADS> cb;
    cb.read(b_hi(s), b_lo(s));
    if (!B_K) __syncthreads();  // every raw value is read before lo is overwritten
    cb.write(b_hi(s), b_lo(s));
    fa::fence_proxy_async();  // the split tiles are read by wgmma next
  };
  // The A fragments of the step in flight, split; x the next step's as read.
  uint32_t ah[kBK / 8][4], al[kBK / 8][4];
  float x[kBK / 8][4];
  auto split_a = [&]() {
    if (row_sums) {  // per step into a fresh partial
      float part[2] = {};
#pragma unroll
      for (int kk = 0; kk < kBK / 8; kk++) part[0] += x[kk][0] + x[kk][2], part[1] += x[kk][1] + x[kk][3];
      rsum[0] += part[0], rsum[1] += part[1];
    }
#pragma unroll
    for (int kk = 0; kk < kBK / 8; kk++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const Tf32 v = split_tf32_fast(x[kk][e]);
        ah[kk][e] = v.hi, al[kk][e] = v.lo;
      }
  };

#pragma unroll
  for (int s = 0; s < S::STAGES; s++) {
    if (s < tiles) load(s, kbeg + s * kBK);
    cp_async_commit();
  }
  cp_async_wait<S::STAGES - 1>();
  __syncthreads();
  split_b(0);
  read_a_frags<TA, S::PAD_M>(x, a_st(0));
  split_a();
  __syncthreads();

  float acc[S::BN / 2] = {}, part[S::BN / 2] = {};
  for (int kt = 0; kt < tiles; kt++) {
    const int s = kt % S::STAGES;
    const uint32_t bhi = fa::smem_u32(b_hi(s)), blo = fa::smem_u32(b_lo(s));
    fa::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 8; kk++) {  // a k8 step is 32 bytes along the swizzled rows
      const uint64_t dbh = fa::smem_desc(bhi + kk * 32, 16, 1024), dbl = fa::smem_desc(blo + kk * 32, 16, 1024);
      wgmma_tf32<S::BN>(part, al[kk], dbh, kk > 0);
      wgmma_tf32<S::BN>(part, ah[kk], dbl, 1);
      wgmma_tf32<S::BN>(part, ah[kk], dbh, 1);
    }
    fa::wgmma_commit();
    if (kt + 1 < tiles) {  // split the next step while the tensor cores work
      cp_async_wait<S::STAGES - 2>();
      __syncthreads();
      split_b((kt + 1) % S::STAGES);
      read_a_frags<TA, S::PAD_M>(x, a_st((kt + 1) % S::STAGES));
    }
    fa::wgmma_wait<0>();
    if (kt + 1 < tiles) split_a();  // the products that read ah, al are done
#pragma unroll
    for (int i = 0; i < S::BN / 2; i++) acc[i] += part[i];
    __syncthreads();  // the products of step kt are done in every warp; the split of kt + 1 is visible
    if (kt + S::STAGES < tiles) load(s, kbeg + (kt + S::STAGES) * kBK);
    cp_async_commit();
  }
  cp_async_wait<0>();

  if (row_sums) {  // the 4 lanes of a row (t = 0..3) add theirs as a fixed tree
    float *sums = p.splits > 1 ? p.work + (int64_t)p.splits * p.m * p.n + (int64_t)split * p.m : p.a_sums;
#pragma unroll
    for (int h = 0; h < 2; h++) {
      float v = rsum[h];
      v += __shfl_xor_sync(0xffffffffu, v, 1);
      v += __shfl_xor_sync(0xffffffffu, v, 2);
      const int row = m0 + 16 * warp + g + 8 * h;
      if (t == 0 && row < p.m) sums[row] = v;
    }
  }

  // Accumulator 4j + 2h + e: row 16 warp + g + 8h, column 8j + 2t + e.
  float *c = p.splits > 1 ? p.work + (int64_t)split * p.m * p.n : p.c + batch * p.stride_c;
  const bool bias = p.splits == 1 && p.bias;
  const bool pairs = (p.n & 1) == 0 && (p.splits > 1 || (p.stride_c & 1) == 0);  // 8-byte aligned pairs
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = m0 + 16 * warp + g + 8 * h;
    if (row >= p.m) continue;
    float *out = c + (int64_t)row * p.n;
#pragma unroll
    for (int j = 0; j < S::BN / 8; j++) {
      const int col = n0 + 8 * j + 2 * t;
      float v0 = p.alpha * acc[4 * j + 2 * h], v1 = p.alpha * acc[4 * j + 2 * h + 1];
      if (pairs && col + 1 < p.n) {
        if (bias) v0 += p.bias[col], v1 += p.bias[col + 1];
        *reinterpret_cast<float2 *>(out + col) = make_float2(v0, v1);
      } else {
        if (col < p.n) out[col] = bias ? v0 + p.bias[col] : v0;
        if (col + 1 < p.n) out[col + 1] = bias ? v1 + p.bias[col + 1] : v1;
      }
    }
  }
}

template <class S>
bool launch(const GemmParams &p, dim3 grid, bool ta, bool tb, cudaStream_t stream) {
  auto go = [&](auto kernel) {
    if (!allow_smem<decltype(kernel)::value>(S::SMEM)) return false;
    decltype(kernel)::value<<<grid, S::THREADS, S::SMEM, stream>>>(p);
    return true;
  };
#define MT_WG_KERNEL(TA, TB, SUMS)                                                                      \
  std::integral_constant<decltype(&gemm_f32_wgmma_kernel<S, TA, TB, SUMS>), &gemm_f32_wgmma_kernel<S, TA, TB, SUMS>>()
  return p.a_sums ? go(MT_WG_KERNEL(true, false, true))
         : ta     ? go(MT_WG_KERNEL(true, false, false))
         : tb     ? go(MT_WG_KERNEL(false, true, false))
                  : go(MT_WG_KERNEL(false, false, false));
#undef MT_WG_KERNEL
}

}  // namespace

bool launch_gemm_f32_wgmma(int tile, const GemmParams &p, dim3 grid, bool trans_a, bool trans_b,
                           cudaStream_t stream) {
  switch (tile) {
#define MT_WG_TILE(i, BM, BN, ST)                                                                            \
  case i:                                                                                                   \
    static_assert(kWgmmaTileM[i] == BM && kWgmmaTileN[i] == BN && kWgmmaStages[i] == ST, "gemm_f32.h's table"); \
    return launch<WgTile<BM, BN, ST>>(p, grid, trans_a, trans_b, stream);
    MT_WG_TILE(0, 64, 64, 3)
    MT_WG_TILE(1, 64, 128, 2)
    MT_WG_TILE(2, 64, 128, 3)
    MT_WG_TILE(3, 64, 64, 4)
    MT_WG_TILE(4, 64, 64, 2)
    MT_WG_TILE(5, 128, 128, 2)
    MT_WG_TILE(6, 128, 64, 3)
#undef MT_WG_TILE
    default: return false;
  }
}

}  // namespace cuda
}  // namespace mt
