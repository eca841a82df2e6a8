// fa_launch.h - between flash_attention.cu (checks, selection, the study hook) and the two
// files that instantiate the kernels (flash_forward.cu, flash_backward.cu).
//
// defines: run_forward, run_forward_wgmma, wgmma_available, run_backward, smem_opt_in,
//          launch_dq_convert, WgmmaRow, dispatch_wgmma
#pragma once

#include "backend/cuda/attention/fa_backward.cuh"
#include "backend/cuda/attention/fa_configs.h"
#include "backend/cuda/attention/fa_forward.cuh"
#include "backend/cuda/context.h"
#include "backend/cuda/kernel_utils.cuh"

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

// A row of MT_FA_WGMMA_D64 / D128 (fa_configs.h) as compile-time values.
template <int BC, int NWG, int KV_BR, int KV_NWG, int DQ_BC, int DQ_NWG, int WS_STAGES, int PERSIST>
struct WgmmaRow {
  static constexpr int bc = BC, nwg = NWG, kv_br = KV_BR, kv_nwg = KV_NWG, dq_bc = DQ_BC, dq_nwg = DQ_NWG,
                       ws_stages = WS_STAGES;
  static constexpr bool persist = PERSIST != 0;
};

// fn(TypeTag<T>, std::integral_constant<int, D>, WgmmaRow<...>) for dtype (bf16, else f16),
// head dim d (64, else 128) and row `config` of that head dim's wgmma table (the launch files
// of the wgmma forward and backward).
template <class Fn>
void dispatch_wgmma(int d, DType dtype, int config, Fn &&fn) {
  auto rows = [&](auto t, auto dd) {
#define MT_X(i, bc, nwg, kv_br, kv_nwg, dq_bc, dq_nwg, ws_stages, persist) \
  case i: fn(t, dd, WgmmaRow<bc, nwg, kv_br, kv_nwg, dq_bc, dq_nwg, ws_stages, persist>{}); return;
    if constexpr (decltype(dd)::value == 64) {
      switch (config) { MT_FA_WGMMA_D64(MT_X) }
    } else {
      switch (config) { MT_FA_WGMMA_D128(MT_X) }
    }
#undef MT_X
    MT_ASSERT(false);
  };
  const bool bf = dtype == DType::BF16;
  if (d == 64) {
    bf ? rows(TypeTag<__nv_bfloat16>{}, std::integral_constant<int, 64>{})
       : rows(TypeTag<__half>{}, std::integral_constant<int, 64>{});
  } else {
    bf ? rows(TypeTag<__nv_bfloat16>{}, std::integral_constant<int, 128>{})
       : rows(TypeTag<__half>{}, std::integral_constant<int, 128>{});
  }
}

// Raises a kernel's dynamic shared-memory limit past 48 KB, once per kernel.
template <class Kernel>
void smem_opt_in(Kernel kernel, int bytes) {
  if (bytes <= 48 * 1024) return;
  MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// dQ = scale * dQ_acc over n elements, the last step of a backward whose key/value pass adds dQ
// (flash_backward.cu's atomic rows, flash_backward_wgmma.cu's fused ones).
template <class T>
void launch_dq_convert(Context &c, const BwdParams &p, int64_t n) {
  flash_bwd_dq_convert_kernel<T><<<grid_1d(n / 2, 256), 256, 0, c.stream>>>(static_cast<T *>(p.dq), p.dq_acc, n, p.scale);
  MT_CUDA_CHECK_LAUNCH("flash_attention backward (dQ conversion)");
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
