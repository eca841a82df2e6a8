// flash_backward_wgmma.cu - instantiates and launches the Hopper backward (fa_backward_wgmma.cuh,
// generation 5): rowsum(dO * O), the key/value pass, the dQ pass (or, for a row whose dQ key
// tile is 0, the key/value pass adding dQ itself and the conversion of dQ). Built for sm_90a
// alone, as flash_forward_wgmma.cu.
#include "backend/cuda/attention/fa_backward_wgmma.cuh"
#include "backend/cuda/attention/fa_launch.h"

namespace mt {
namespace cuda {
namespace fa {
namespace {

template <class T, int D, int KV_BR, int KV_NWG, int DQ_BC, int DQ_NWG>
void launch(Context &c, BwdParams p, int64_t bh) {
  constexpr int fused = DQ_BC == 0 ? DQ_NWG : kDqPass;  // a dQ key tile of 0: the kind of FUSED_DQ
  const int64_t rows = bh * p.tq;
  PoolBuffer dvec(rows * 4);
  PoolBuffer acc(fused ? rows * D * 4 : 0);
  p.dvec = dvec.as<float>();
  p.dq_acc = fused ? acc.as<float>() : nullptr;
  if (fused) MT_CUDA_CHECK(cudaMemsetAsync(p.dq_acc, 0, (size_t)(rows * D * 4), c.stream));
  constexpr int kDotThreads = 256;
  const int64_t dot_threads = rows * (D / 8);
  flash_bwd_dot_kernel<T, D><<<(unsigned)((dot_threads + kDotThreads - 1) / kDotThreads), kDotThreads, 0, c.stream>>>(
      dvec.as<float>(), static_cast<const T *>(p.o), static_cast<const T *>(p.dout), rows);
  MT_CUDA_CHECK_LAUNCH("flash_attention backward (rowsum dO * O)");

  using KV = WgmmaBwdKvShape<D, KV_BR, KV_NWG, fused>;
  auto kv = flash_bwd_kv_wgmma_kernel<T, D, KV_BR, KV_NWG, fused>;
  static const bool opted = (smem_opt_in(kv, KV::smem_bytes), true);
  (void)opted;
  kv<<<dim3((unsigned)((p.tk + KV::bc - 1) / KV::bc), (unsigned)bh), KV::threads, KV::smem_bytes, c.stream>>>(p);
  MT_CUDA_CHECK_LAUNCH("flash_attention backward (dK, dV; wgmma)");

  if constexpr (fused) {
    launch_dq_convert<T>(c, p, rows * D);
  } else {
    using Q = WgmmaBwdDqShape<D, DQ_BC, DQ_NWG>;
    auto dq = flash_bwd_dq_wgmma_kernel<T, D, DQ_BC, DQ_NWG>;
    static const bool opted_dq = (smem_opt_in(dq, Q::smem_bytes), true);
    (void)opted_dq;
    dq<<<dim3((unsigned)((p.tq + Q::br - 1) / Q::br), (unsigned)bh), Q::threads, Q::smem_bytes, c.stream>>>(p);
    MT_CUDA_CHECK_LAUNCH("flash_attention backward (dQ pass; wgmma)");
  }
}

}  // namespace

void run_backward_wgmma(Context &c, BwdParams p, int64_t bh, int d, DType dtype, int config) {
  MT_CHECK(wgmma_available(), UNSUPPORTED,
           "cuda flash_attention backward: the wgmma kernels need a compute capability 9.0 device");
  dispatch_wgmma(d, dtype, config, [&](auto t, auto dd, auto row) {
    using R = decltype(row);
    launch<typename decltype(t)::type, decltype(dd)::value, R::kv_br, R::kv_nwg, R::dq_bc, R::dq_nwg>(c, p, bh);
  });
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
