// flash_forward_wgmma.cu - instantiates and launches the Hopper forward (fa_forward_wgmma.cuh,
// generation 5) for the rows of fa_configs.h's wgmma tables. Built for sm_90a alone (the
// Makefile gives this file its own -gencode): wgmma exists only there, so the host side asks
// the device for compute capability 9.0 before it selects these kernels.
#include "backend/cuda/attention/fa_forward_wgmma.cuh"
#include "backend/cuda/attention/fa_forward_ws.cuh"
#include "backend/cuda/attention/fa_launch.h"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <type_traits>

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

// cuTensorMapEncodeTiled from the driver, found once through the runtime (no link to libcuda).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void *f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A tensor map over base as (bh, t, D) of 16-bit T, read in boxes of 64 columns by `rows` rows
// into 128-byte-swizzled panels; rows past t read as zeros.
template <class T, int D>
CUtensorMap tensor_map(const void *base, int64_t bh, int64_t t, int rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  MT_CHECK(encode != nullptr, CUDA, "cuda flash_attention: the driver has no cuTensorMapEncodeTiled");
  CUtensorMap m;
  const cuuint64_t dims[3] = {(cuuint64_t)D, (cuuint64_t)t, (cuuint64_t)bh};
  const cuuint64_t strides[2] = {(cuuint64_t)D * 2, (cuuint64_t)(t * D * 2)};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {64, (cuuint32_t)rows, 1}, elem[3] = {1, 1, 1};
  const CUresult r = encode(&m, std::is_same<T, __nv_bfloat16>::value ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                        : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                            3, const_cast<void *>(base), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  MT_CHECK(r == CUDA_SUCCESS, CUDA, "cuda flash_attention: cuTensorMapEncodeTiled failed (%d) for bh %lld, t %lld, d %d",
           (int)r, (long long)bh, (long long)t, D);
  return m;
}

template <class T, int D, int BC, int STAGES>
void launch_ws(Context &c, const FwdParams &p, int64_t bh) {
  using S = WsFwdShape<D, BC, STAGES>;
  auto kernel = flash_fwd_ws_kernel<T, D, BC, STAGES>;
  static const bool opted = (smem_opt_in(kernel, S::smem_bytes), true);
  (void)opted;
  const CUtensorMap mq = tensor_map<T, D>(p.q, bh, p.tq, S::br), mk = tensor_map<T, D>(p.k, bh, p.tk, BC),
                    mv = tensor_map<T, D>(p.v, bh, p.tk, BC);
  const dim3 grid((unsigned)((p.tq + S::br - 1) / S::br), (unsigned)bh);
  kernel<<<grid, S::threads, S::smem_bytes, c.stream>>>(p, mq, mk, mv);
  MT_CUDA_CHECK_LAUNCH("flash_attention (wgmma, producer warpgroup)");
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
      launch_ws<typename decltype(t)::type, decltype(dd)::value, R::bc, R::ws_stages>(c, p, bh);
    else
      launch<typename decltype(t)::type, decltype(dd)::value, R::bc, R::nwg>(c, p, bh);
  });
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
