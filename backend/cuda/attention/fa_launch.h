// fa_launch.h - between flash_attention.cu (checks, selection, the study hook) and the two
// files that instantiate the kernels (flash_forward.cu, flash_backward.cu).
//
// defines: run_forward, run_forward_wgmma, wgmma_available, run_backward, smem_opt_in
#pragma once

#include "backend/cuda/attention/fa_backward.cuh"
#include "backend/cuda/attention/fa_configs.h"
#include "backend/cuda/attention/fa_forward.cuh"
#include "backend/cuda/context.h"

namespace mt {
namespace cuda {
namespace fa {

// grid.y = bh (B * H): checked <= 65535 by the caller.
void run_forward(Context &c, const FwdParams &p, int64_t bh, int d, DType dtype, Selection sel);
// The wgmma forward (flash_forward_wgmma.cu, built for sm_90a): row `config` of
// MT_FA_WGMMA_D64 / D128. Only for a device of compute capability 9.0 (wgmma_available).
void run_forward_wgmma(Context &c, const FwdParams &p, int64_t bh, int d, DType dtype, int config);
bool wgmma_available();
// The wgmma backward (flash_backward_wgmma.cu): the same rows; p.dvec is set here.
void run_backward_wgmma(Context &c, BwdParams p, int64_t bh, int d, DType dtype, int config);
// p.dq_acc and p.dvec are set here (pool temporaries).
void run_backward(Context &c, BwdParams p, int64_t bh, int d, DType dtype, Selection sel);

// Raises a kernel's dynamic shared-memory limit past 48 KB, once per kernel.
template <class Kernel>
void smem_opt_in(Kernel kernel, int bytes) {
  if (bytes <= 48 * 1024) return;
  MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
