// flash_backward.cu - instantiates and launches the backward kernels (fa_backward.cuh) of
// every generation and tuned configuration (fa_configs.h): rowsum(dO * O), the key/value
// kernel, then the dQ conversion (atomics) or the dQ pass.
//
// Napkin math: 2.5x the forward's flops (five T^2 D products against two), so compute
// bound like the forward; the atomic dQ adds (T / BC) x T D f32 reductions in L2.
#include <algorithm>

#include "backend/cuda/attention/fa_launch.h"

namespace mt {
namespace cuda {
namespace fa {
namespace {

template <class T, int D, int BR, int BC, int NW, class P, bool ATOMIC>
void launch(Context &c, BwdParams p, int64_t bh) {
  const int64_t rows = bh * p.tq;
  PoolBuffer dvec(rows * 4);
  PoolBuffer acc(ATOMIC ? rows * D * 4 : 0);
  p.dvec = dvec.as<float>();
  p.dq_acc = ATOMIC ? acc.as<float>() : nullptr;

  constexpr int kDotThreads = 256;
  const int64_t dot_threads = rows * (D / 8);
  flash_bwd_dot_kernel<T, D><<<(unsigned)((dot_threads + kDotThreads - 1) / kDotThreads), kDotThreads, 0, c.stream>>>(
      dvec.as<float>(), static_cast<const T *>(p.o), static_cast<const T *>(p.dout), rows);
  MT_CUDA_CHECK_LAUNCH("flash_attention backward (rowsum dO * O)");
  if (ATOMIC) MT_CUDA_CHECK(cudaMemsetAsync(p.dq_acc, 0, (size_t)(rows * D * 4), c.stream));

  using S = BwdKvShape<D, BR, BC, NW, P, ATOMIC>;
  auto kv = flash_bwd_kv_kernel<T, D, BR, BC, NW, P, ATOMIC>;
  static const bool opted = (smem_opt_in(kv, S::smem_bytes), true);
  (void)opted;
  kv<<<dim3((unsigned)((p.tk + BC - 1) / BC), (unsigned)bh), S::threads, S::smem_bytes, c.stream>>>(p);
  MT_CUDA_CHECK_LAUNCH("flash_attention backward (dK, dV)");

  if constexpr (ATOMIC) {
    launch_dq_convert<T>(c, p, rows * D);
  } else {
    // the dQ pass: 16 query rows per warp (BC of the kv kernel), key tiles of BR
    using Q = BwdDqShape<D, BC, BR, NW, P>;
    auto dq = flash_bwd_dq_kernel<T, D, BC, BR, NW, P>;
    static const bool opted_dq = (smem_opt_in(dq, Q::smem_bytes), true);
    (void)opted_dq;
    dq<<<dim3((unsigned)((p.tq + BC - 1) / BC), (unsigned)bh), Q::threads, Q::smem_bytes, c.stream>>>(p);
    MT_CUDA_CHECK_LAUNCH("flash_attention backward (dQ pass)");
  }
}

template <class T, int D>
void run_d(Context &c, const BwdParams &p, int64_t bh, Selection sel) {
  switch (sel.generation) {
    case 1: launch<T, D, kGenBackwardBR<D>, 64, 4, PolicyV1, true>(c, p, bh); return;
    case 2: launch<T, D, kGenBackwardBR<D>, 64, 4, PolicyV2, true>(c, p, bh); return;
    case 3: launch<T, D, kGenBackwardBR<D>, 64, 4, PolicyV3, true>(c, p, bh); return;
    default: break;
  }
#define MT_X(i, fbr, fbc, fnw, bbr, bbc, bnw, atomic) \
  case i: launch<T, D, bbr, bbc, bnw, PolicyV3, atomic>(c, p, bh); return;
  if constexpr (D == 64) {
    switch (sel.config) { MT_FA_TUNED_D64(MT_X) }
  } else {
    switch (sel.config) { MT_FA_TUNED_D128(MT_X) }
  }
#undef MT_X
  MT_ASSERT(false);
}

}  // namespace

void run_backward(Context &c, BwdParams p, int64_t bh, int d, DType dtype, Selection sel) {
  if (sel.generation == 5) return run_backward_wgmma(c, p, bh, d, dtype, sel.config);
  const bool bf = dtype == DType::BF16;
  if (d == 64) bf ? run_d<__nv_bfloat16, 64>(c, p, bh, sel) : run_d<__half, 64>(c, p, bh, sel);
  else bf ? run_d<__nv_bfloat16, 128>(c, p, bh, sel) : run_d<__half, 128>(c, p, bh, sel);
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
