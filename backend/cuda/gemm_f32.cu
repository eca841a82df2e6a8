// gemm_f32.cu - float32 GEMM on TF32 tensor cores with float32 accuracy (3xTF32, tf32x3.cuh).
//
//   C[b] = alpha * op(A[b]) @ op(B[b]) (+ bias[j] on every row)   row-major,
//   op(A) (m, k), op(B) (k, n), C (m, n) with leading dimension n, as matmul.cu's MatmulArgs.
//
// cuBLAS has no float32-accurate tensor-core GEMM on Hopper: CUBLAS_COMPUTE_32F runs on the FMA
// units (about 51 TFLOP/s on an H100, and a char-GPT's skinny products, k or n = 128, get 25-30),
// and CUBLAS_COMPUTE_32F_FAST_TF32 rounds the inputs to TF32 (10-bit mantissa). Three TF32
// products per split pair keep float32 accuracy (each product's error about 2^-21 of |a b| with
// split_tf32_fast, against 2^-24 for an FMA; the sums' rounding dominates either way), at a third
// of the tensor cores' TF32 rate, which is still above the FMA units' float32 rate.
//
// Two kernels: on a compute capability 9.0 device (H100, H200) the warpgroup-MMA kernel of
// gemm_f32_wgmma.cu (pick_tile; about 1.3x this file's kernel at char-GPT's products and 1.5x
// at 4096^3 on an H100), elsewhere this file's mma.sync kernel. Both share applies(), the split
// of k (plan()) and its ordered sum.
//
// The mma.sync kernel: a block computes a BM x BN tile of C (Tile: 64 x 64 with 4 warps in production, 64
// x 128 with 8 for outputs over 2^23 elements; pick_tile), each warp 32 x 32 (2 m16 x 4 n8 mma
// tiles), over k in steps of 32 staged through shared memory by cp.async, 3 stages deep. Each
// operand's tile keeps its global layout in shared memory (no transposes: 16-byte copies for each
// of the products a linear layer and its gradients make, A B, A B^T, A^T B), padded so every
// fragment read is free of bank conflicts:
//   A (m, k) row-major: As[m][32 + 4]      A stored (k, m) (trans_a): As[k][BM + 8]
//   B stored (k, n):    Bs[k][BN + 8]      B stored (n, k) (trans_b): Bs[n][32 + 4]
// The k-contiguous tiles (As[m][..], Bs[n][..]) give their fragments by ldmatrix (an 8 x 4 tile
// of 32-bit values is an m8n8 tile of 16-bit ones, and its thread mapping is the TF32 fragment's:
// 2 instructions for a warp's A fragments of a k-step instead of 8 4-byte loads), the others by
// 4-byte loads. Fragments are split into hi and lo when read (per warp, by split_tf32_fast;
// shared memory holds float32). Every 32-step of k is accumulated into a fresh accumulator and added to the running
// sum in float32 (the tensor cores' accumulation truncates; see tf32x3.cuh).
//
// Split-K: where the output has fewer tiles than the GPU has SMs and k is long (a weight
// gradient dW = dY^T X, k = the batch's rows), blockIdx.z also splits k; each split writes its
// partial tile to the cuBLAS workspace and a second kernel sums the splits in order (so the
// result is deterministic) and adds the bias.
//
// a_sums (the bias gradient beside a weight gradient): the warps whose tiles start C's columns
// also add up the A values they read, so the column sums of dY cost no pass over it.
//
// Used for float32 products (TF32 not allowed, beta 0, not both operands transposed) whose
// leading dimensions, batch strides and pointers allow 16-byte copies, with at least kMinMacs
// multiply-adds (applies()). An infinite input gives NaN (lo = inf - inf), where cuBLAS gives an
// infinity. MT_CUDA_GEMM_CUBLAS in the environment, or mt_study_gemm_f32(1), sends every product
// to cuBLAS instead (for comparisons). Measurements: docs/benchmarks.md, "Float32 GEMMs on tensor
// cores"; scripts/bench/gemm_study.py.
#include <atomic>
#include <cstdlib>

#include "minitorch.h"  // MT_API (the study hook)
#include "backend/cuda/context.h"
#include "backend/cuda/gemm_f32.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/study.cuh"
#include "backend/cuda/tf32x3.cuh"
#include "backend/cuda/attention/fa_common.cuh"  // ldmatrix_x4

namespace mt {
namespace cuda {

namespace {

constexpr int kBK = 32, kStages = 3;
constexpr int kPadK = kBK + 4;  // rows of k-contiguous tiles (As[m][..], Bs[n][..])
constexpr int64_t kMinMacs = 1ll << 21;  // not tuned: products this small take a few us either way

// A block's tile of C, BM x BN, with a warp for every 32 x 32 of it (2 m16 x 4 n8 mma tiles).
template <int BM_, int BN_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_;
  static constexpr int WARPS_N = BN / 32, THREADS = 32 * (BM / 32) * WARPS_N;
  static constexpr int PAD_M = BM + 8;  // rows of m-contiguous A tiles (As[k][..])
  static constexpr int PAD_N = BN + 8;  // rows of n-contiguous B tiles (Bs[k][..])
  static constexpr int A_SIZE = BM * kPadK > kBK * PAD_M ? BM * kPadK : kBK * PAD_M;
  static constexpr int B_SIZE = BN * kPadK > kBK * PAD_N ? BN * kPadK : kBK * PAD_N;
  static constexpr int STAGE = A_SIZE + B_SIZE;  // floats
  static constexpr size_t SMEM = (size_t)kStages * STAGE * sizeof(float);
  static constexpr int MIN_BLOCKS = 512 / THREADS;  // 128 registers a thread
  static_assert(BM * kBK / 4 % THREADS == 0 && BN * kBK / 4 % THREADS == 0, "whole copies a thread");
};

// Issues the cp.async copies of one k-tile [k0, k0 + kBK) (zero past kend and past m, n).
template <class S, bool TA, bool TB>
__device__ __forceinline__ void load_tile(float *as, float *bs, const GemmParams &p, const float *a, const float *b,
                                          int m0, int n0, int k0, int kend) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < S::BM * kBK / 4 / S::THREADS; i++) {
    const int idx = tid + i * S::THREADS;
    if (!TA) {  // A (m, k): kBK / 4 float4 a row
      const int r = idx / (kBK / 4), c = idx % (kBK / 4) * 4;
      const bool ok = m0 + r < p.m && k0 + c < kend;
      cp_async16(&as[r * kPadK + c], ok ? a + (int64_t)(m0 + r) * p.lda + k0 + c : a, ok);
    } else {  // A stored (k, m): BM / 4 float4 a row
      const int r = idx / (S::BM / 4), c = idx % (S::BM / 4) * 4;
      const bool ok = k0 + r < kend && m0 + c < p.m;
      cp_async16(&as[r * S::PAD_M + c], ok ? a + (int64_t)(k0 + r) * p.lda + m0 + c : a, ok);
    }
  }
#pragma unroll
  for (int i = 0; i < S::BN * kBK / 4 / S::THREADS; i++) {
    const int idx = tid + i * S::THREADS;
    if (!TB) {  // B stored (k, n): BN / 4 float4 a row
      const int r = idx / (S::BN / 4), c = idx % (S::BN / 4) * 4;
      const bool ok = k0 + r < kend && n0 + c < p.n;
      cp_async16(&bs[r * S::PAD_N + c], ok ? b + (int64_t)(k0 + r) * p.ldb + n0 + c : b, ok);
    } else {  // B stored (n, k): kBK / 4 float4 a row
      const int r = idx / (kBK / 4), c = idx % (kBK / 4) * 4;
      const bool ok = n0 + r < p.n && k0 + c < kend;
      cp_async16(&bs[r * kPadK + c], ok ? b + (int64_t)(n0 + r) * p.ldb + k0 + c : b, ok);
    }
  }
}

// op(A)[r][c] and op(B)[r][c] of a staged tile.
template <class S, bool TA>
__device__ __forceinline__ float a_at(const float *as, int r, int c) {
  return TA ? as[c * S::PAD_M + r] : as[r * kPadK + c];
}
template <class S, bool TB>
__device__ __forceinline__ float b_at(const float *bs, int r, int c) {
  return TB ? bs[c * kPadK + r] : bs[r * S::PAD_N + c];
}

// SUMS: also write a_sums (a template argument: the running sums cost registers the products
// without them would spill for).
template <class S, bool TA, bool TB, bool SUMS>
__global__ void __launch_bounds__(S::THREADS, S::MIN_BLOCKS) gemm_f32_kernel(const GemmParams p) {
  pdl_wait();  // a no-op (a plain launch); pdl_release() lets a dependent grid in for the epilogue
  extern __shared__ __align__(16) float smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = warp / S::WARPS_N * 32, wn = warp % S::WARPS_N * 32;
  const int m0 = blockIdx.y * S::BM, n0 = blockIdx.x * S::BN;
  const GemmBlock blk = gemm_block<kBK>(p);
  const int split = blk.split, kbeg = blk.kbeg, kend = blk.kend, tiles = blk.tiles;
  const int64_t batch = blk.batch;
  const float *a = blk.a, *b = blk.b;

#pragma unroll
  for (int s = 0; s < kStages - 1; s++) {
    if (s < tiles) load_tile<S, TA, TB>(smem + s * S::STAGE, smem + s * S::STAGE + S::A_SIZE, p, a, b, m0, n0,
                                        kbeg + s * kBK, kend);
    cp_async_commit();
  }

  // a_sums: the warps of the first column of tiles add up the A fragments they read (rows wm +
  // 16i + g + 8h, columns t and t + 4 of each k-step of 8), per k-tile into a fresh partial.
  const bool row_sums = SUMS && blockIdx.x == 0 && wn == 0;  // warp-uniform
  float rsum[2][2] = {};
  float acc[2][4][4] = {};
  for (int kt = 0; kt < tiles; kt++) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile kt is in; every warp is done with the stage the next copies overwrite
    const int next = kt + kStages - 1;
    if (next < tiles) {
      float *st = smem + (next % kStages) * S::STAGE;
      load_tile<S, TA, TB>(st, st + S::A_SIZE, p, a, b, m0, n0, kbeg + next * kBK, kend);
    }
    cp_async_commit();
    const float *as = smem + (kt % kStages) * S::STAGE, *bs = as + S::A_SIZE;
    float part[2][4][4] = {}, rpart[2][2] = {};
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 8) {
      uint32_t ah[2][4], al[2][4], bh[4][2], bl[4][2];
#pragma unroll
      for (int i = 0; i < 2; i++) {
        const int r = wm + i * 16 + g;
        float x[4];
        if constexpr (!TA) {  // k-contiguous rows: the fragment is ldmatrix's four 8 x 4 tiles
          uint32_t v[4];
          fa::ldmatrix_x4(v, as + (wm + i * 16 + (lane & 7) + (lane & 8)) * kPadK + kk + (lane >> 4) * 4);
#pragma unroll
          for (int e = 0; e < 4; e++) x[e] = __uint_as_float(v[e]);
        } else {
          x[0] = a_at<S, TA>(as, r, kk + t), x[1] = a_at<S, TA>(as, r + 8, kk + t);
          x[2] = a_at<S, TA>(as, r, kk + t + 4), x[3] = a_at<S, TA>(as, r + 8, kk + t + 4);
        }
        if (row_sums) {
          rpart[i][0] += x[0], rpart[i][1] += x[1];
          rpart[i][0] += x[2], rpart[i][1] += x[3];
        }
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const Tf32 s = split_tf32_fast(x[e]);
          ah[i][e] = s.hi, al[i][e] = s.lo;
        }
      }
      float y[4][2];  // B fragments: y[j] = (b0, b1) of n-tile j
      if constexpr (TB) {  // k-contiguous rows: two n-tiles' fragments a ldmatrix
#pragma unroll
        for (int j = 0; j < 4; j += 2) {
          uint32_t v[4];
          fa::ldmatrix_x4(v, bs + (wn + (j + (lane >> 4)) * 8 + (lane & 7)) * kPadK + kk + (lane & 8) / 2);
          y[j][0] = __uint_as_float(v[0]), y[j][1] = __uint_as_float(v[1]);
          y[j + 1][0] = __uint_as_float(v[2]), y[j + 1][1] = __uint_as_float(v[3]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; j++) {
          const int cn = wn + j * 8 + g;
          y[j][0] = b_at<S, TB>(bs, kk + t, cn), y[j][1] = b_at<S, TB>(bs, kk + t + 4, cn);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const Tf32 s0 = split_tf32_fast(y[j][0]), s1 = split_tf32_fast(y[j][1]);
        bh[j][0] = s0.hi, bh[j][1] = s1.hi, bl[j][0] = s0.lo, bl[j][1] = s1.lo;
      }
#pragma unroll
      for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) mma_tf32x3(part[i][j], ah[i], al[i], bh[j][0], bh[j][1], bl[j][0], bl[j][1]);
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[i][j][e] += part[i][j][e];
    if (row_sums)
#pragma unroll
      for (int i = 0; i < 2; i++) rsum[i][0] += rpart[i][0], rsum[i][1] += rpart[i][1];
  }
  cp_async_wait<0>();
  pdl_release();

  if (row_sums) {  // the 4 lanes of a row (t = 0..3) add theirs as a fixed tree: the same bits every run
    float *sums = p.splits > 1 ? p.work + (int64_t)p.splits * p.m * p.n + (int64_t)split * p.m : p.a_sums;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        float v = rsum[i][h];
        v += __shfl_xor_sync(0xffffffffu, v, 1);
        v += __shfl_xor_sync(0xffffffffu, v, 2);
        const int row = m0 + wm + i * 16 + g + h * 8;
        if (t == 0 && row < p.m) sums[row] = v;
      }
  }

  // C fragment e of tile (i, j): row wm + 16i + g (+ 8 for e >= 2), column wn + 8j + 2t (+ 1 for odd e).
  float *c = p.splits > 1 ? p.work + (int64_t)split * p.m * p.n : p.c + batch * p.stride_c;
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int row = m0 + wm + i * 16 + g + (e >> 1) * 8, col = n0 + wn + j * 8 + 2 * t + (e & 1);
        if (row >= p.m || col >= p.n) continue;
        float v = p.alpha * acc[i][j][e];
        float *out = c + (int64_t)row * p.n + col;
        if (p.splits == 1 && p.bias) v += p.bias[col];
        *out = v;
      }
}

// C[i] = sum over splits s (in order) of the partial tiles' element i, + bias[i % n]; then
// a_sums[r] = sum over splits (in order) of their row sums' element r.
__global__ void __launch_bounds__(256) gemm_splits_sum_kernel(const GemmParams p) {
  pdl_enter();  // launched with launch_pdl_wide
  const int64_t mn = (int64_t)p.m * p.n, total = mn + (p.a_sums ? p.m : 0);
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const bool in_c = i < mn;
    const float *part = in_c ? p.work + i : p.work + p.splits * mn + (i - mn);
    const int64_t stride = in_c ? mn : p.m;
    float v = 0.f;
    for (int s = 0; s < p.splits; s++) v += part[s * stride];
    if (!in_c) p.a_sums[i - mn] = v;
    else p.c[i] = p.bias ? v + p.bias[i % p.n] : v;
  }
}

// The kernels selected by mt_study_gemm_f32: 0 production (this file's kernel where
// applies(), its tile by pick_tile), 1 cuBLAS for every product, 3 + i the kernel with tile i of
// kTiles where it applies. MT_CUDA_GEMM_CUBLAS set in the environment starts the process on 1.
std::atomic<int> g_gemm_variant{std::getenv("MT_CUDA_GEMM_CUBLAS") != nullptr ? 1 : 0};
std::atomic<int64_t> g_gemm_runs{0};  // products launched here (mt_study_gemm_f32(2) reads it)

using Tile0 = Tile<64, 128>;
using Tile1 = Tile<64, 64>;
using Tile2 = Tile<128, 64>;
using Tile3 = Tile<32, 128>;
using Tile4 = Tile<128, 128>;
constexpr int kMmaTiles = 5;
constexpr int kTiles = kMmaTiles + kWgmmaTiles;  // then the wgmma tiles (gemm_f32.h)

bool applies(const MatmulArgs &g) {
  if (g_gemm_variant.load(std::memory_order_relaxed) == 1) return false;
  if (g.dtype != DType::F32 || g.allow_tf32 || g.beta != 0.0 || (g.trans_a && g.trans_b)) return false;
  if (g.a_sums && !g.trans_a) return false;  // the kernel sums op(A)'s rows only in the weight gradient's A^T B
  if (g.m * g.n * g.k * g.batch < kMinMacs) return false;
  if (g.m > INT_MAX || g.n > INT_MAX || g.k > INT_MAX || g.batch > 65535) return false;
  const int64_t lda = g.trans_a ? g.m : g.k, ldb = g.trans_b ? g.k : g.n;
  // Every 16-byte copy lies inside one row of an operand: rows of whole float4s, 16-byte aligned.
  return lda % 4 == 0 && ldb % 4 == 0 && g.stride_a % 4 == 0 && g.stride_b % 4 == 0 && is_aligned16(g.a) &&
         is_aligned16(g.b);
}

// The mma.sync kernel's tile, off Hopper: 64 x 64 (4 warps, up to 4 blocks an SM) unless the
// output has more than 2^23 elements, where 64 x 128 (8 warps, 2 blocks an SM) is 10% faster
// (4096^3: 2434 against 2707 us on an H200). At char-GPT's products (outputs of 2^20 to 2^22, k 128 to 8192) 64 x 64 took 307 us
// where 64 x 128 took 360, 128 x 64 365, 32 x 128 328, 128 x 128 450 and (in another run) 32 x 64
// 371 (scripts/bench/gemm_study.py).
// On a compute capability 9.0 device, the wgmma kernel (gemm_f32_wgmma.cu): 128 x 128 tiles (two
// warpgroups sharing B's split) for outputs of 2^24 elements or more, 64 x 128 with 2 stages from
// 2^22, else 64 x 64 with 2 stages where k is at most 128 (one pass of 4 steps: 3 blocks an SM
// fit) and 3 stages where it is longer (H100, gemm_study.py: char-GPT's products 240.7 us against
// 306.7 for the mma.sync kernel in one run; 4096^3 1641 against 1906 for 64 x 128 in another,
// where the mma.sync kernel took 2413-2427 in the runs before). Two exceptions, from the
// convolutions' products (cnn.cu, the ResNet layer 64->64 3x3 56x56 batch 64, H200, ncu, two
// chunks each): k of at most 64 (backward data, dcol = w^T dy, out 576 x 3136 a chunk's image, k
// 64): 64 x 64 with 2 stages, 393 us against 454 for 128 x 128 and 411 for 64 x 128; and long-k
// products of B stored (n, k) with a small output (backward filter, dw = dyT col^T, 64 x 576, k
// 100352, split): 64 x 128 with 2 stages, 297 us against 534 for 64 x 64 with 3 stages (353
// with twice the splits). Neither changes a char-GPT product's tile: those with k <= 64 have
// outputs under 2^22 (64 x 64 with 2 stages already), and their weight gradients store A as
// (k, m), not B as (n, k).
// The k <= 64 rule also holds at large outputs (gemm_study.py --shapes shortk, H200): from
// 4096 x 4096 up it is the fastest of the three tiles or within 2.4% (8192 x 8192 x 64: 170-181
// us against 178-191 for 64 x 128 and 128 x 128), and it gives up about 1 us of 16 at
// 2048 x 2048 x 64 (docs/benchmarks.md, "The k <= 64 tile rule at large outputs").
int pick_tile(const Context &c, const MatmulArgs &g) {
  const int v = g_gemm_variant.load(std::memory_order_relaxed);
  if (v >= 3) return v - 3;
  if (c.cc_major == 9) {
    const int64_t out = g.m * g.n * g.batch;
    if (g.k <= 64) return kMmaTiles + 4;
    if (g.trans_b && g.batch == 1 && out <= (1ll << 20) && g.k >= (1 << 14)) return kMmaTiles + 1;
    return kMmaTiles + (out >= (1ll << 24) ? 5 : out >= (1ll << 22) ? 1 : g.k <= 128 ? 4 : 0);
  }
  return g.m * g.n * g.batch > (1ll << 23) ? 0 : 1;
}

// Fills p's split of k for a BM x BN tile and returns the grid; false if it would pass CUDA's
// limits (more than 65535 tiles of rows: over 4M rows at BM = 64).
bool plan(const Context &c, const MatmulArgs &g, GemmParams &p, int bm, int bn, dim3 &grid) {
  const int64_t tiles_m = (g.m + bm - 1) / bm, tiles_n = (g.n + bn - 1) / bn;
  const int64_t tiles = tiles_m * tiles_n * g.batch;
  // Split k where the tiles leave SMs idle, in chunks of at least 8 k-tiles, while the partial
  // tiles (and row sums) fit the workspace.
  int64_t splits = 1;
  if (g.batch == 1 && tiles < c.sm_count) {
    splits = std::min<int64_t>((2 * c.sm_count + tiles - 1) / tiles, g.k / (8 * kBK));
    const int64_t per_split = g.m * g.n + (g.a_sums ? g.m : 0);
    splits = std::min<int64_t>(splits, Context::kCublasWorkspaceBytes / (int64_t)sizeof(float) / per_split);
    splits = std::max<int64_t>(splits, 1);
  }
  const int64_t chunk = ((g.k + splits - 1) / splits + kBK - 1) / kBK * kBK;
  p.k_chunk = (int)chunk;
  p.splits = (int)((g.k + chunk - 1) / chunk);
  if (tiles_m > 65535 || g.batch * p.splits > 65535) return false;  // the grid's y and z limits
  grid = dim3((unsigned)tiles_n, (unsigned)tiles_m, (unsigned)(g.batch * p.splits));
  return true;
}

// The split-K sum, after a product launched with p.splits > 1.
void launch_splits_sum(Context &c, const MatmulArgs &g, const GemmParams &p) {
  const int64_t sums = g.m * g.n + (g.a_sums ? g.m : 0);
  MT_CUDA_CHECK(launch_pdl_wide(c, gemm_splits_sum_kernel,
                                grid_of(std::min<int64_t>((sums + 255) / 256, 4 * c.sm_count)), 256, p));
  MT_CUDA_CHECK_LAUNCH("matmul (gemm_f32 split-K sum)");
}

// Launches the product with tile S (and the split-K sum); false (nothing launched) if plan()
// refuses the grid or the runtime refuses the kernel its shared memory.
template <class S>
bool launch_tile(Context &c, const MatmulArgs &g, GemmParams &p) {
  dim3 grid;
  if (!plan(c, g, p, S::BM, S::BN, grid)) return false;
  auto go = [&](auto kernel) {
    if (!allow_smem<decltype(kernel)::value>(S::SMEM)) return false;
    // Not a programmatic dependent launch: launched so, char-GPT's products back to back took
    // 362 us against 305 (H200, gemm_study.py; docs/benchmarks.md). Not profiled; the likely
    // cause is placement: blocks scheduled early go to the SMs that have room as the kernel
    // before drains, up to 4 an SM, where a plain launch spreads a 256-block grid 2 an SM.
    decltype(kernel)::value<<<grid, S::THREADS, S::SMEM, c.stream>>>(p);
    return true;
  };
#define MT_GEMM_KERNEL(TA, TB, SUMS) \
  std::integral_constant<decltype(&gemm_f32_kernel<S, TA, TB, SUMS>), &gemm_f32_kernel<S, TA, TB, SUMS>>()
  const bool launched = g.a_sums    ? go(MT_GEMM_KERNEL(true, false, true))  // applies(): a_sums only with trans_a
                        : g.trans_a ? go(MT_GEMM_KERNEL(true, false, false))
                        : g.trans_b ? go(MT_GEMM_KERNEL(false, true, false))
                                    : go(MT_GEMM_KERNEL(false, false, false));
#undef MT_GEMM_KERNEL
  if (!launched) return false;
  MT_CUDA_CHECK_LAUNCH("matmul (gemm_f32)");
  if (p.splits > 1) launch_splits_sum(c, g, p);
  return true;
}

// The same with wgmma tile `tile` (gemm_f32_wgmma.cu); false also off a compute capability 9.0
// device, whose sm_90a code this is.
bool launch_wgmma(Context &c, const MatmulArgs &g, GemmParams &p, int tile) {
  dim3 grid;
  if (c.cc_major != 9 || !plan(c, g, p, kWgmmaTileM[tile], kWgmmaTileN[tile], grid)) return false;
  if (!launch_gemm_f32_wgmma(tile, p, grid, g.trans_a, g.trans_b, c.stream)) return false;
  MT_CUDA_CHECK_LAUNCH("matmul (gemm_f32 wgmma)");
  if (p.splits > 1) launch_splits_sum(c, g, p);
  return true;
}

}  // namespace

bool launch_gemm_f32(const MatmulArgs &g) {
  if (!applies(g)) return false;
  Context &c = context();
  GemmParams p;
  p.a = static_cast<const float *>(g.a);
  p.b = static_cast<const float *>(g.b);
  p.bias = static_cast<const float *>(g.bias);
  p.c = static_cast<float *>(g.c);
  p.a_sums = static_cast<float *>(g.a_sums);
  p.work = static_cast<float *>(c.cublas_workspace());
  p.m = (int)g.m, p.n = (int)g.n, p.k = (int)g.k;
  p.lda = (int)(g.trans_a ? g.m : g.k), p.ldb = (int)(g.trans_b ? g.k : g.n);
  p.stride_a = g.stride_a, p.stride_b = g.stride_b, p.stride_c = g.stride_c;
  p.alpha = (float)g.alpha;
  bool launched = false;
  const int tile = pick_tile(c, g);
  switch (tile) {
    case 0: launched = launch_tile<Tile0>(c, g, p); break;
    case 1: launched = launch_tile<Tile1>(c, g, p); break;
    case 2: launched = launch_tile<Tile2>(c, g, p); break;
    case 3: launched = launch_tile<Tile3>(c, g, p); break;
    case 4: launched = launch_tile<Tile4>(c, g, p); break;
    default: launched = launch_wgmma(c, g, p, tile - kMmaTiles); break;
  }
  if (launched) g_gemm_runs.fetch_add(1, std::memory_order_relaxed);
  return launched;
}

}  // namespace cuda
}  // namespace mt

// ---- the study hook ---------------------------------------------------------------------------
//
// mt_study_gemm_f32: an internal hook for scripts/bench and tests/gpu/test_gemm_f32.py, NOT part
// of the public API (no stability promise; exported only because they drive it through ctypes).
// It picks what every later float32 matmul without TF32 runs, until the next call:
//   variant 0  production: the 3xTF32 tensor-core kernel where it applies, else cuBLAS
//   variant 1  cuBLAS (CUBLAS_COMPUTE_32F) for every product
//   variant 3 + i  the tensor-core kernel with tile i (kTiles of them) where it applies
// and returns 0 (MT_OK); variant 2 changes nothing and returns how many products the tensor-core
// kernel has run in this process (the tests' proof that it ran). MT_ERR_INVALID_ARGUMENT for
// another variant. It leaves mt_last_error() alone. Not thread-safe against launches running
// concurrently in other threads (they may see either selection).
extern "C" MT_API int64_t mt_study_gemm_f32(int64_t variant) {
  if (variant == 2) return mt::cuda::g_gemm_runs.load(std::memory_order_relaxed);
  if (variant < 0 || variant >= 3 + mt::cuda::kTiles) return (int64_t)mt::Code::INVALID_ARGUMENT;
  mt::cuda::g_gemm_variant.store((int)variant, std::memory_order_relaxed);
  return 0;
}
