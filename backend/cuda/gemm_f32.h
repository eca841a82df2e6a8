// gemm_f32.h - the float32 GEMM on TF32 tensor cores with float32 accuracy (gemm_f32.cu, and
// its Hopper warpgroup kernel in gemm_f32_wgmma.cu).
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"

namespace mt {
namespace cuda {

// Runs the product (alpha included, with the bias and a_sums where asked for) on the context's
// stream and returns true, or returns false without doing anything where the
// kernel does not apply (not float32, TF32 allowed, beta != 0, both operands transposed, too
// small, or operands that 16-byte copies cannot read): matmul.cu then takes cuBLAS.
bool launch_gemm_f32(const MatmulArgs &g);

// ---- between gemm_f32.cu and gemm_f32_wgmma.cu ----------------------------------------------

struct GemmParams {
  const float *a, *b, *bias;
  float *c, *a_sums;  // a_sums [m] (batch 1, may be null): the rows' sums of op(A), MatmulArgs' a_sums
  float *work;  // splits > 1: the splits' partial tiles [splits][m][n], then their row sums [splits][m]
  int m, n, k, lda, ldb;
  int64_t stride_a, stride_b, stride_c;
  float alpha;
  int splits, k_chunk;  // k range of split s: [s * k_chunk, min(k, (s + 1) * k_chunk))
};

#ifdef __CUDACC__
// A block's share of a product on plan()'s grid (gemm_f32.cu; blockIdx.z = batch * splits +
// split): its batch's operands and its k range [kbeg, kend) of tiles k-steps of kBK.
struct GemmBlock {
  int split, kbeg, kend, tiles;
  int64_t batch;
  const float *a, *b;
};
template <int kBK>
__device__ __forceinline__ GemmBlock gemm_block(const GemmParams &p) {
  GemmBlock w;
  w.split = (int)(blockIdx.z % (unsigned)p.splits);
  w.batch = blockIdx.z / (unsigned)p.splits;
  w.a = p.a + w.batch * p.stride_a, w.b = p.b + w.batch * p.stride_b;
  w.kbeg = w.split * p.k_chunk, w.kend = min(p.k, w.kbeg + p.k_chunk);
  w.tiles = (w.kend - w.kbeg + kBK - 1) / kBK;
  return w;
}
#endif

// The warpgroup (wgmma) kernel's tiles: kWgmmaTileM[i] x kWgmmaTileN[i] of C (a warpgroup per 64
// rows), kWgmmaStages[i] k-steps staged.
constexpr int kWgmmaTiles = 7;
constexpr int kWgmmaTileM[kWgmmaTiles] = {64, 64, 64, 64, 64, 128, 128};
constexpr int kWgmmaTileN[kWgmmaTiles] = {64, 128, 128, 64, 64, 128, 64};
constexpr int kWgmmaStages[kWgmmaTiles] = {3, 2, 3, 4, 2, 2, 3};

// Launches wgmma tile `tile` over `grid` (x: column tiles, y: row tiles, z: batch x splits)
// on `stream`; false (nothing launched) if the runtime refuses the kernel its shared memory.
// Only for a compute capability 9.0 device (the code is sm_90a). a_sums only with trans_a.
bool launch_gemm_f32_wgmma(int tile, const GemmParams &p, dim3 grid, bool trans_a, bool trans_b,
                           cudaStream_t stream);

}  // namespace cuda
}  // namespace mt
