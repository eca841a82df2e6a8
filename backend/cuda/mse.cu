// mse.cu - the fused MSE backward: the gradient of mean((pred - target)^2) in one launch.
//
//   d = ((pred[i] - target[i]) * dloss) * scale,  dpred[i] = d (written),  dtarget[i] = -d (written)
//   pred, target, dpred, dtarget (n); dloss one element on the device (the upstream gradient).
//
// It replaces three launches (SUB, MUL by the broadcast dloss, MUL_SCALAR; a fourth, NEG, when
// the target needs a gradient) by one and rounds to the dtype after each step as they did, so
// the bits are the same. Bandwidth bound and tiny in practice (a loss over a batch of
// predictions): 2n reads and n or 2n writes; the launch is what it saves.
#include "backend/cuda/context.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/mse.h"

namespace mt {
namespace cuda {

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void __launch_bounds__(kThreads) mse_backward_kernel(T *dpred, T *dtarget, const T *pred, const T *target,
                                                                 const T *dloss, int64_t n, Compute<T> scale) {
  pdl_enter();
  using C = Compute<T>;
  const C g = dloss ? to_compute(*dloss) : C(1);  // null: the loss is the root (d loss = 1)
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const T diff = from_compute<T>(to_compute(pred[i]) - to_compute(target[i]));
    const T dg = from_compute<T>(to_compute(diff) * g);
    const T d = from_compute<T>(to_compute(dg) * scale);
    if (dpred) dpred[i] = d;
    if (dtarget) dtarget[i] = from_compute<T>(-to_compute(d));
  }
}

}  // namespace

void mse_backward(Context &c, void *dpred, void *dtarget, const void *pred, const void *target, const void *dloss,
                  int64_t n, DType dtype, double scale) {
  NvtxRange range("mse_backward");
  MT_CHECK(n >= 0, INVALID_ARGUMENT, "cuda mse_backward: negative element count %lld", (long long)n);
  if (n == 0 || (!dpred && !dtarget)) return;
  MT_CHECK(pred && target, INVALID_ARGUMENT, "cuda mse_backward: null input (pred=%p, target=%p)", pred, target);
  dispatch_float(dtype, "mse_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    MT_CUDA_CHECK(launch_pdl(c, mse_backward_kernel<T>, dim3(grid_1d(n, kThreads)), kThreads, static_cast<T *>(dpred),
                             static_cast<T *>(dtarget), static_cast<const T *>(pred), static_cast<const T *>(target),
                             static_cast<const T *>(dloss), n, (Compute<T>)scale));
    MT_CUDA_CHECK_LAUNCH("mse_backward");
  });
}

}  // namespace cuda
}  // namespace mt
