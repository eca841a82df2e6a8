// mse.cpp - CPU reference of the fused MSE backward: one plain loop.
//
//   d = ((pred[i] - target[i]) * dloss) * scale,  dpred[i] = d,  dtarget[i] = -d
//
// rounded to the dtype after each step, as the three elementwise ops it replaces (SUB, MUL by
// the broadcast dloss, MUL_SCALAR, and NEG for the target) round them: the same bits.
#include "backend/cpu/mse.h"

namespace mt {
namespace cpu {
namespace {

template <class T>
void mse_backward_loop(T *dpred, T *dtarget, const T *pred, const T *target, const T *dloss, int64_t n, T scale) {
  const T g = dloss ? *dloss : T(1);  // null: the loss is the root (d loss = 1)
  for (int64_t i = 0; i < n; i++) {
    T d = pred[i] - target[i];
    d = d * g;
    d = d * scale;
    if (dpred) dpred[i] = d;
    if (dtarget) dtarget[i] = -d;
  }
}

}  // namespace

void mse_backward(void *dpred, void *dtarget, const void *pred, const void *target, const void *dloss, int64_t n,
                  DType dtype, double scale) {
  MT_CHECK(n >= 0, INVALID_ARGUMENT, "cpu mse_backward: negative element count %lld", (long long)n);
  if (n == 0 || (!dpred && !dtarget)) return;
  MT_CHECK(pred && target, INVALID_ARGUMENT, "cpu mse_backward: null input (pred=%p, target=%p)", pred, target);
  switch (dtype) {
    case DType::F32:
      mse_backward_loop((float *)dpred, (float *)dtarget, (const float *)pred, (const float *)target,
                        (const float *)dloss, n, (float)scale);
      return;
    case DType::F64:
      mse_backward_loop((double *)dpred, (double *)dtarget, (const double *)pred, (const double *)target,
                        (const double *)dloss, n, scale);
      return;
    default:
      fail(Code::DTYPE, "mse backward on the cpu supports float32 and float64, got %s", dtype_name(dtype));
  }
}

}  // namespace cpu
}  // namespace mt
