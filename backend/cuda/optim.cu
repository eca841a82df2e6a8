// optim.cu - the fused multi-tensor SGD step.
//
// For every parameter tensor t (numel[t] elements), torch.optim.SGD with dampening 0:
//   g = grad + weight_decay * p
//   if momentum != 0: v = first_step ? g : momentum * v + g;  g = nesterov ? g + momentum * v : v
//   p -= lr * g
//
// Bandwidth bound: per element read p, grad (and v), write p (and v): 12-20 bytes in
// f32 for ~6 flops. A 124M-parameter f32 step with momentum moves ~2.5 GB, ~0.8 ms
// at 3 TB/s. Launch count matters as much for small models (an MLP has a handful of
// tiny tensors), so all tensors go in ONE launch per 64 tensors: the pointer table is a
// __grid_constant__ kernel parameter (~2.6 KB), which needs no host buffer, no copy
// and no synchronization, and is captured by value into a CUDA graph. Each block owns
// one kChunk-element chunk of one tensor and finds its tensor by binary search in the
// table's prefix sums of blocks.
#include "backend/cuda/context.h"
#include "backend/cuda/multi_tensor.cuh"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/ops.h"

namespace mt {
namespace cuda {

namespace {

constexpr int kThreads = kMultiThreads;
constexpr int kMaxTensors = kMultiMaxTensors;
constexpr int64_t kChunk = kMultiChunk;

struct SgdTable {
  void *p[kMaxTensors];
  const void *g[kMaxTensors];
  void *v[kMaxTensors];  // null when momentum == 0
  int64_t n[kMaxTensors];
  int64_t block_start[kMaxTensors];  // first block of tensor t; ascending
  int count;
};
static_assert(sizeof(SgdTable) <= 4000, "kernel parameters are limited to 4 KB");

template <class A>
struct SgdHyper {
  A lr, momentum, weight_decay;
  bool nesterov, first_step;
  const double *lr_device;  // when set, lr is read from here
};

// One element's update; v is read only when momentum != 0 and not on the first step.
template <class A>
__device__ __forceinline__ void sgd_update(A &p, A g, A &v, const SgdHyper<A> &h) {
  A d = g + h.weight_decay * p;
  if (h.momentum != A(0)) {
    const A vi = h.first_step ? d : h.momentum * v + d;
    v = vi;
    d = h.nesterov ? d + h.momentum * vi : vi;
  }
  p -= h.lr * d;
}

template <class T>
__global__ void __launch_bounds__(kThreads) sgd_kernel(const __grid_constant__ SgdTable tab,
                                                       SgdHyper<Compute<T>> h) {
  pdl_enter();
  using A = Compute<T>;
  const int t = table_tensor_of_block(tab);
  T *p = static_cast<T *>(tab.p[t]);
  const T *g = static_cast<const T *>(tab.g[t]);
  T *v = static_cast<T *>(tab.v[t]);
  if (h.lr_device) h.lr = (A)*h.lr_device;
  const bool mom = h.momentum != A(0);
  int64_t begin, end;
  chunk_bounds(tab, t, kChunk, begin, end);

  int64_t rest = begin;
  constexpr int N = Pack<T>::N;
  if ((((uintptr_t)p | (uintptr_t)g | (uintptr_t)v) & 15u) == 0) {  // begin is a multiple of N
    const int64_t vend = begin + (end - begin) / N * N;
#pragma unroll 2
    for (int64_t i = begin + (int64_t)threadIdx.x * N; i < vend; i += (int64_t)blockDim.x * N) {
      Pack<T> pp = load128(p + i);
      const Pack<T> gp = load128(g + i);
      Pack<T> vp;
      if (mom && !h.first_step) vp = load128(v + i);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        A pk = to_compute(pp.v[k]);
        A vk = mom && !h.first_step ? to_compute(vp.v[k]) : A(0);
        sgd_update(pk, to_compute(gp.v[k]), vk, h);
        pp.v[k] = from_compute<T>(pk);
        if (mom) vp.v[k] = from_compute<T>(vk);
      }
      store128(p + i, pp);
      if (mom) store128(v + i, vp);
    }
    rest = vend;
  }
  for (int64_t i = rest + threadIdx.x; i < end; i += blockDim.x) {
    A pk = to_compute(p[i]);
    A vk = mom && !h.first_step ? to_compute(v[i]) : A(0);
    sgd_update(pk, to_compute(g[i]), vk, h);
    p[i] = from_compute<T>(pk);
    if (mom) v[i] = from_compute<T>(vk);
  }
}

}  // namespace

void launch_sgd_step(const SgdArgs &a) {
  NvtxRange range("sgd_step");
  MT_CHECK(a.count >= 0, INVALID_ARGUMENT, "cuda sgd_step: negative tensor count %lld", (long long)a.count);
  if (a.count == 0) return;
  MT_CHECK(a.params && a.grads && a.numel, INVALID_ARGUMENT,
           "cuda sgd_step: null array (params=%p, grads=%p, numel=%p)", (const void *)a.params,
           (const void *)a.grads, (const void *)a.numel);
  const bool mom = a.momentum != 0.0;
  MT_CHECK(!mom || a.velocity, INVALID_ARGUMENT, "cuda sgd_step: momentum %g needs velocity buffers",
           a.momentum);
  for (int64_t i = 0; i < a.count; ++i) {
    MT_CHECK(a.numel[i] >= 0, INVALID_ARGUMENT, "cuda sgd_step: numel[%lld] = %lld", (long long)i,
             (long long)a.numel[i]);
    if (a.numel[i] == 0) continue;
    MT_CHECK(a.params[i] && a.grads[i] && (!mom || a.velocity[i]), INVALID_ARGUMENT,
             "cuda sgd_step: tensor %lld has a null buffer (param=%p, grad=%p, velocity=%p)", (long long)i,
             a.params[i], a.grads[i], mom ? a.velocity[i] : nullptr);
  }

  Context &c = context();
  dispatch_float(a.dtype, "sgd_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Compute<T>;
    const SgdHyper<A> h{(A)a.lr, (A)a.momentum, (A)a.weight_decay, a.nesterov, a.first_step, a.lr_device};
    for_each_table<SgdTable, kMaxTensors>(
        "sgd_step", a.count, a.numel, kChunk,
        [&](SgdTable &tab, int t, int64_t i) {
          tab.p[t] = a.params[i];
          tab.g[t] = a.grads[i];
          tab.v[t] = mom ? a.velocity[i] : nullptr;
        },
        [&](const SgdTable &tab, unsigned blocks) {
          MT_CUDA_CHECK(launch_pdl(c, sgd_kernel<T>, dim3(blocks), kThreads, tab, h));
        });
  });
}

}  // namespace cuda
}  // namespace mt
