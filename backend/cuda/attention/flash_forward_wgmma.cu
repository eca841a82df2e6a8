// flash_forward_wgmma.cu - instantiates and launches the Hopper forward (fa_forward_wgmma.cuh,
// generation 5) for the rows of fa_configs.h's wgmma tables. Built for sm_90a alone (the
// Makefile gives this file its own -gencode): wgmma exists only there, so the host side asks
// the device for compute capability 9.0 before it selects these kernels.
#include "backend/cuda/attention/fa_forward_wgmma.cuh"
#include "backend/cuda/attention/fa_launch.h"

namespace mt {
namespace cuda {
namespace fa {
namespace {

template <class T, int D, int BC, int NWG>
void launch(Context &c, const FwdParams &p, int64_t bh) {
  using S = WgmmaFwdShape<D, BC, NWG>;
  auto kernel = flash_fwd_wgmma_kernel<T, D, BC, NWG>;
  static const bool opted = (smem_opt_in(kernel, S::smem_bytes), true);
  (void)opted;
  const dim3 grid((unsigned)((p.tq + S::br - 1) / S::br), (unsigned)bh);
  kernel<<<grid, S::threads, S::smem_bytes, c.stream>>>(p);
  MT_CUDA_CHECK_LAUNCH("flash_attention (wgmma)");
}

template <class T, int D>
void run_d(Context &c, const FwdParams &p, int64_t bh, int config) {
#define MT_X(i, bc, nwg, kv_br, kv_nwg, dq_bc, dq_nwg) \
  case i: launch<T, D, bc, nwg>(c, p, bh); return;
  if constexpr (D == 64) {
    switch (config) { MT_FA_WGMMA_D64(MT_X) }
  } else {
    switch (config) { MT_FA_WGMMA_D128(MT_X) }
  }
#undef MT_X
  MT_ASSERT(false);
}

}  // namespace

bool wgmma_available() {
  static const bool yes = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) return false;
    return major == 9 && minor == 0;
  }();
  return yes;
}

void run_forward_wgmma(Context &c, const FwdParams &p, int64_t bh, int d, DType dtype, int config) {
  MT_CHECK(wgmma_available(), UNSUPPORTED, "cuda flash_attention: the wgmma kernels need a compute capability 9.0 device");
  const bool bf = dtype == DType::BF16;
  if (d == 64) bf ? run_d<__nv_bfloat16, 64>(c, p, bh, config) : run_d<__half, 64>(c, p, bh, config);
  else bf ? run_d<__nv_bfloat16, 128>(c, p, bh, config) : run_d<__half, 128>(c, p, bh, config);
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
