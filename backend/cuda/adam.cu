// adam.cu - the fused multi-tensor Adam / AdamW step, and gradient-norm clipping in three
// launches (sum of squares, norm and factor, scale) whatever the number of tensors.
//
// For every parameter tensor t (numel[t] elements), torch.optim.Adam / AdamW as the CPU
// reference writes them (backend/cpu/classify.cpp, AdamArgs in backend/backend.h):
//   Adam:  g = grad + weight_decay * p          AdamW: p = p * (1 - lr * weight_decay), g = grad
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
//   p = p - lr * (m / bc1) / (sqrt(v / bc2) + eps),  bc1 = 1 - beta1^step, bc2 = 1 - beta2^step
// Arithmetic in float for F32/F16/BF16, in double for F64; the bias corrections are computed
// in double, once on the host from args.step, or per block from the tensor's device step
// counter (args.step_counters: then a graph replay advances the step as an eager call does).
//
// Bandwidth bound: per element read p, g, m, v and write p, m, v: 28 bytes in f32 for ~15
// flops and a sqrt. A 124M-parameter f32 step moves ~3.5 GB: ~1.2 ms at 2.98 TB/s. As in
// optim.cu's SGD, all tensors go in one launch per 64 tensors: the pointer table is a
// __grid_constant__ kernel parameter (~3.1 KB; no host buffer, no copy, no synchronization,
// captured by value into a CUDA graph), each block owns one kChunk-element chunk of one tensor
// and finds it by binary search in the table's block prefix sums. 16-byte packs when all four
// pointers of a tensor are 16-byte aligned, scalars otherwise and for the tail.
#include <cmath>

#include "backend/cuda/classify.h"
#include "backend/cuda/context.h"
#include "backend/cuda/multi_tensor.cuh"
#include "backend/cuda/kernel_utils.cuh"

namespace mt {
namespace cuda {

namespace {

constexpr int kThreads = kMultiThreads;
constexpr int kMaxTensors = kMultiMaxTensors;
constexpr int64_t kChunk = kMultiChunk;

struct AdamTable {
  void *p[kMaxTensors];
  const void *g[kMaxTensors];
  void *m[kMaxTensors];
  void *v[kMaxTensors];
  int64_t *step[kMaxTensors];        // the device step counters, or all null (steps from the host)
  int64_t n[kMaxTensors];
  int64_t block_start[kMaxTensors];  // first block of tensor t; ascending
  int count;
};
static_assert(sizeof(AdamTable) <= 4000, "kernel parameters are limited to 4 KB");

template <class A>
struct AdamHyper {
  A lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, decay, bc1, bc2;
  bool decoupled;
  double beta1_f64, beta2_f64;  // for bias corrections computed on the device
  double weight_decay_f64;
  const double *lr_device;      // when set, lr (and the AdamW decay) are read from here
};

// One element, in the CPU reference's order of operations.
template <class A>
__device__ __forceinline__ void adam_update(A &p, A g, A &m, A &v, const AdamHyper<A> &h) {
  if (h.decoupled) p *= h.decay;
  else g += h.weight_decay * p;
  m = h.beta1 * m + h.one_minus_beta1 * g;
  v = h.beta2 * v + h.one_minus_beta2 * g * g;
  p = p - h.lr * (m / h.bc1) / (sqrt(v / h.bc2) + h.eps);
}

template <class T>
__global__ void __launch_bounds__(kThreads) adam_kernel(const __grid_constant__ AdamTable tab, AdamHyper<Compute<T>> h) {
  using A = Compute<T>;
  const int t = table_tensor_of_block(tab);
  T *p = static_cast<T *>(tab.p[t]);
  const T *g = static_cast<const T *>(tab.g[t]);
  if (h.lr_device) {
    const double lr = *h.lr_device;
    h.lr = (A)lr;
    h.decay = (A)(1.0 - lr * h.weight_decay_f64);
  }
  if (tab.step[t]) {  // the step lives on the device: this update is step *counter + 1
    const double s = (double)(*tab.step[t] + 1);
    h.bc1 = (A)(1.0 - pow(h.beta1_f64, s));
    h.bc2 = (A)(1.0 - pow(h.beta2_f64, s));
  }
  T *m = static_cast<T *>(tab.m[t]);
  T *v = static_cast<T *>(tab.v[t]);
  int64_t begin, end;
  chunk_bounds(tab, t, kChunk, begin, end);

  constexpr int N = Pack<T>::N;
  for_chunk<N>(
      begin, end, (((uintptr_t)p | (uintptr_t)g | (uintptr_t)m | (uintptr_t)v) & 15u) == 0,
      [&](int64_t i) {
        Pack<T> pp = load128(p + i), mp = load128(m + i), vp = load128(v + i);
        const Pack<T> gp = load128(g + i);
#pragma unroll
        for (int k = 0; k < N; ++k) {
          A pk = to_compute(pp.v[k]), mk = to_compute(mp.v[k]), vk = to_compute(vp.v[k]);
          adam_update(pk, to_compute(gp.v[k]), mk, vk, h);
          pp.v[k] = from_compute<T>(pk);
          mp.v[k] = from_compute<T>(mk);
          vp.v[k] = from_compute<T>(vk);
        }
        store128(p + i, pp);
        store128(m + i, mp);
        store128(v + i, vp);
      },
      [&](int64_t i) {
        A pk = to_compute(p[i]), mk = to_compute(m[i]), vk = to_compute(v[i]);
        adam_update(pk, to_compute(g[i]), mk, vk, h);
        p[i] = from_compute<T>(pk);
        m[i] = from_compute<T>(mk);
        v[i] = from_compute<T>(vk);
      });
}

// Advances the device step counters of one table, after adam_kernel has read them.
__global__ void adam_count_kernel(const __grid_constant__ AdamTable tab) {
  if ((int)threadIdx.x < tab.count) ++*tab.step[threadIdx.x];
}

}  // namespace

void adam_step(Context &c, const AdamArgs &a) {
  NvtxRange range("adam_step");
  MT_CHECK(a.count >= 0, INVALID_ARGUMENT, "cuda adam_step: negative tensor count %lld", (long long)a.count);
  if (a.count == 0) return;
  MT_CHECK(a.params && a.grads && a.m && a.v && a.numel, INVALID_ARGUMENT,
           "cuda adam_step: null array (params=%p, grads=%p, m=%p, v=%p, numel=%p)", (const void *)a.params,
           (const void *)a.grads, (const void *)a.m, (const void *)a.v, (const void *)a.numel);
  MT_CHECK(a.step_counters || a.step >= 1, INVALID_ARGUMENT, "cuda adam_step: step %lld (the first update is step 1)",
           (long long)a.step);
  for (int64_t i = 0; i < a.count; ++i) {
    MT_CHECK(a.numel[i] >= 0, INVALID_ARGUMENT, "cuda adam_step: numel[%lld] = %lld", (long long)i,
             (long long)a.numel[i]);
    if (a.numel[i] == 0) continue;
    MT_CHECK(a.params[i] && a.grads[i] && a.m[i] && a.v[i], INVALID_ARGUMENT,
             "cuda adam_step: tensor %lld has a null buffer (param=%p, grad=%p, m=%p, v=%p)", (long long)i,
             a.params[i], a.grads[i], a.m[i], a.v[i]);
  }

  const double bc1 = 1.0 - std::pow(a.beta1, (double)a.step);
  const double bc2 = 1.0 - std::pow(a.beta2, (double)a.step);
  dispatch_float(a.dtype, "adam_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Compute<T>;
    const AdamHyper<A> h{(A)a.lr,           (A)a.beta1,        (A)a.beta2, (A)(1.0 - a.beta1),
                         (A)(1.0 - a.beta2), (A)a.eps,          (A)a.weight_decay,
                         (A)(1.0 - a.lr * a.weight_decay),      (A)bc1,     (A)bc2,
                         a.decoupled,       a.beta1,           a.beta2,
                         a.weight_decay,    a.lr_device};
    for_each_table<AdamTable, kMaxTensors>(
        "adam_step", a.count, a.numel, kChunk,
        [&](AdamTable &tab, int t, int64_t i) {
          tab.p[t] = a.params[i];
          tab.g[t] = a.grads[i];
          tab.m[t] = a.m[i];
          tab.v[t] = a.v[i];
          tab.step[t] = a.step_counters ? a.step_counters[i] : nullptr;
        },
        [&](const AdamTable &tab, unsigned blocks) {
          adam_kernel<T><<<blocks, kThreads, 0, c.stream>>>(tab, h);
          if (a.step_counters) {
            MT_CUDA_CHECK_LAUNCH("adam_step");
            adam_count_kernel<<<1, kMaxTensors, 0, c.stream>>>(tab);
          }
        });
  });
}

namespace {

// ---- clip_grad_norm --------------------------------------------------------------------
//
// torch.nn.utils.clip_grad_norm_ over every tensor at once. Three launches per 64 tensors at
// most, none synchronizing: (1) each block sums the squares of its chunk in double and writes
// one partial; (2) one block adds the partials in a fixed order (the same bits every run),
// writes the norm in the gradients' dtype and the factor min(1, max_norm / (norm + eps)) in
// double; (3) every element is multiplied by the factor (blocks return at once when it is 1).

struct ClipTable {
  void *g[kMaxTensors];
  int64_t n[kMaxTensors];
  int64_t block_start[kMaxTensors];
  int count;
};
static_assert(sizeof(ClipTable) <= 4000, "kernel parameters are limited to 4 KB");

template <class T>
__global__ void __launch_bounds__(kThreads) clip_sumsq_kernel(const __grid_constant__ ClipTable tab,
                                                              double *partials) {
  const int t = table_tensor_of_block(tab);
  const T *g = static_cast<const T *>(tab.g[t]);
  int64_t begin, end;
  chunk_bounds(tab, t, kChunk, begin, end);
  double acc = 0;
  constexpr int N = Pack<T>::N;
  auto add_square = [&](T e) {
    const double x = (double)to_compute(e);
    acc += x * x;
  };
  for_chunk<N>(
      begin, end, ((uintptr_t)g & 15u) == 0,
      [&](int64_t i) {
        const Pack<T> gp = load128(g + i);
#pragma unroll
        for (int k = 0; k < N; ++k) add_square(gp.v[k]);
      },
      [&](int64_t i) { add_square(g[i]); });
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

template <class T>
__global__ void __launch_bounds__(1024) clip_norm_kernel(const double *partials, int64_t n, T *norm, double *factor,
                                                         double max_norm, double eps) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) {
    const double total = sqrt(acc);
    if (norm) *norm = from_compute<T>((Compute<T>)total);
    *factor = fmin(1.0, max_norm / (total + eps));
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) clip_scale_kernel(const __grid_constant__ ClipTable tab,
                                                              const double *factor) {
  const double f = *factor;
  if (f >= 1.0) return;  // under the limit: nothing changes
  using A = Compute<T>;
  const A s = (A)f;
  const int t = table_tensor_of_block(tab);
  T *g = static_cast<T *>(tab.g[t]);
  int64_t begin, end;
  chunk_bounds(tab, t, kChunk, begin, end);
  constexpr int N = Pack<T>::N;
  for_chunk<N>(
      begin, end, ((uintptr_t)g & 15u) == 0,
      [&](int64_t i) {
        Pack<T> gp = load128(g + i);
#pragma unroll
        for (int k = 0; k < N; ++k) gp.v[k] = from_compute<T>(to_compute(gp.v[k]) * s);
        store128(g + i, gp);
      },
      [&](int64_t i) { g[i] = from_compute<T>(to_compute(g[i]) * s); });
}

}  // namespace

void clip_grad_norm(Context &c, void *norm, void *const *grads, const int64_t *numel, int64_t count, DType dtype,
                    double max_norm, double eps) {
  NvtxRange range("clip_grad_norm");
  MT_CHECK(count >= 0, INVALID_ARGUMENT, "cuda clip_grad_norm: negative tensor count %lld", (long long)count);
  MT_CHECK(max_norm > 0 && eps >= 0, INVALID_ARGUMENT, "cuda clip_grad_norm: max_norm %g, eps %g", max_norm, eps);
  MT_CHECK(count == 0 || (grads && numel), INVALID_ARGUMENT, "cuda clip_grad_norm: null array (grads=%p, numel=%p)",
           (const void *)grads, (const void *)numel);
  int64_t blocks = 0;
  for (int64_t i = 0; i < count; ++i) {
    MT_CHECK(numel[i] >= 0, INVALID_ARGUMENT, "cuda clip_grad_norm: numel[%lld] = %lld", (long long)i,
             (long long)numel[i]);
    MT_CHECK(numel[i] == 0 || grads[i], INVALID_ARGUMENT, "cuda clip_grad_norm: tensor %lld has a null buffer",
             (long long)i);
    blocks += (numel[i] + kChunk - 1) / kChunk;
  }
  dispatch_float(dtype, "clip_grad_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    PoolBuffer partials(std::max<int64_t>(blocks, 1) * (int64_t)sizeof(double)), factor(sizeof(double));
    int64_t done = 0;  // partials written so far
    auto fill = [&](ClipTable &tab, int t, int64_t i) { tab.g[t] = grads[i]; };
    for_each_table<ClipTable, kMaxTensors>(
        "clip_grad_norm", count, numel, kChunk, fill,
        [&](const ClipTable &tab, unsigned nb) {
          clip_sumsq_kernel<T><<<nb, kThreads, 0, c.stream>>>(tab, partials.as<double>() + done);
          done += nb;
        });
    clip_norm_kernel<T><<<1, 1024, 0, c.stream>>>(partials.as<double>(), done, static_cast<T *>(norm),
                                                   factor.as<double>(), max_norm, eps);
    MT_CUDA_CHECK_LAUNCH("clip_grad_norm");
    for_each_table<ClipTable, kMaxTensors>(
        "clip_grad_norm", count, numel, kChunk, fill, [&](const ClipTable &tab, unsigned nb) {
          clip_scale_kernel<T><<<nb, kThreads, 0, c.stream>>>(tab, factor.as<double>());
        });
  });
}

}  // namespace cuda
}  // namespace mt
