// flash_forward.cu - instantiates and launches the forward kernel (fa_forward.cuh) of every
// generation and tuned configuration (fa_configs.h).
//
// Napkin math (H100 SXM, dense bf16 mma.sync ~ 660 TFLOP/s peak, ~ 3 TB/s): 4 B H T^2 D
// flops (half of it causal) against 4 B H T D 2 bytes moved; at T = 4096, D = 128, B H = 64
// that is 550 GFLOP (~ 0.8 ms at peak) for 270 MB (~ 0.09 ms): compute bound from T ~ 512 up.
#include "backend/cuda/attention/fa_launch.h"

namespace mt {
namespace cuda {
namespace fa {
namespace {

template <class T, int D, int BR, int BC, int NW, class P>
void launch(Context &c, const FwdParams &p, int64_t bh) {
  using S = FwdShape<D, BR, BC, NW, P>;
  auto kernel = flash_fwd_kernel<T, D, BR, BC, NW, P>;
  static const bool opted = (smem_opt_in(kernel, S::smem_bytes), true);
  (void)opted;
  const dim3 grid((unsigned)((p.tq + BR - 1) / BR), (unsigned)bh);
  kernel<<<grid, S::threads, S::smem_bytes, c.stream>>>(p);
  MT_CUDA_CHECK_LAUNCH("flash_attention");
}

template <class T, int D>
void run_d(Context &c, const FwdParams &p, int64_t bh, Selection sel) {
  switch (sel.generation) {
    case 1: launch<T, D, 64, 64, 4, PolicyV1>(c, p, bh); return;
    case 2: launch<T, D, 64, 64, 4, PolicyV2>(c, p, bh); return;
    case 3: launch<T, D, 64, 64, 4, PolicyV3>(c, p, bh); return;
    default: break;
  }
#define MT_X(i, fbr, fbc, fnw, bbr, bbc, bnw, atomic) \
  case i: launch<T, D, fbr, fbc, fnw, PolicyV3>(c, p, bh); return;
  if constexpr (D == 64) {
    switch (sel.config) { MT_FA_TUNED_D64(MT_X) }
  } else {
    switch (sel.config) { MT_FA_TUNED_D128(MT_X) }
  }
#undef MT_X
  MT_ASSERT(false);
}

}  // namespace

void run_forward(Context &c, const FwdParams &p, int64_t bh, int d, DType dtype, Selection sel) {
  if (sel.generation == 5) return run_forward_wgmma(c, p, bh, d, dtype, sel.config);
  const bool bf = dtype == DType::BF16;
  if (d == 64) bf ? run_d<__nv_bfloat16, 64>(c, p, bh, sel) : run_d<__half, 64>(c, p, bh, sel);
  else bf ? run_d<__nv_bfloat16, 128>(c, p, bh, sel) : run_d<__half, 128>(c, p, bh, sel);
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
