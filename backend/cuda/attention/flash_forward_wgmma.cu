// flash_forward_wgmma.cu - instantiates and launches the Hopper forward (fa_forward_wgmma.cuh,
// generation 5) for the rows of fa_configs.h's wgmma tables. Built for sm_90a alone (the
// Makefile gives this file its own -gencode): wgmma exists only there, so the host side asks
// the device for compute capability 9.0 before it selects these kernels.
#include "backend/cuda/attention/fa_forward_wgmma.cuh"
#include "backend/cuda/attention/fa_forward_ws.cuh"
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

template <class T, int D, int BC, int STAGES, int NC, bool PERSIST>
void launch_ws(Context &c, const FwdParams &p, int64_t bh) {
  using S = WsFwdShape<D, BC, STAGES, NC, PERSIST>;
  const int64_t nq = (p.tq + S::br - 1) / S::br;
  // A persistent grid numbers its items in int, its counter in unsigned int: where nq * bh and
  // the grid do not fit, the one-item grid takes the launch.
  if constexpr (PERSIST) {
    if (nq * bh + c.sm_count > INT_MAX) return launch_ws<T, D, BC, STAGES, NC, false>(c, p, bh);
  }
  auto kernel = flash_fwd_ws_kernel<T, D, BC, STAGES, NC, PERSIST>;
  static const bool opted = (smem_opt_in(kernel, S::smem_bytes), true);
  (void)opted;
  const CUtensorMap mq = tensor_map<T, D>(p.q, bh, p.tq, S::br), mk = tensor_map<T, D>(p.k, bh, p.tk, BC),
                    mv = tensor_map<T, D>(p.v, bh, p.tk, BC);
  // one CTA an SM (its registers), no more CTAs than items
  const dim3 grid = PERSIST ? dim3((unsigned)std::min<int64_t>(nq * bh, c.sm_count)) : dim3((unsigned)nq, (unsigned)bh);
  kernel<<<grid, S::threads, S::smem_bytes, c.stream>>>(p, mq, mk, mv, (int)bh);
  MT_CUDA_CHECK_LAUNCH(PERSIST ? "flash_attention (wgmma, persistent)" : "flash_attention (wgmma, producer warpgroup)");
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
  dispatch_wgmma(d, dtype, config, [&](auto t, auto dd, auto row) {
    using R = decltype(row);
    if constexpr (R::ws_stages > 0)
      launch_ws<typename decltype(t)::type, decltype(dd)::value, R::bc, R::ws_stages, R::nwg, R::persist>(c, p, bh);
    else
      launch<typename decltype(t)::type, decltype(dd)::value, R::bc, R::nwg>(c, p, bh);
  });
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
