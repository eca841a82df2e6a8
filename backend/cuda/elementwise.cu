// elementwise.cu - fill, unary and broadcast binary kernels.
//
//   fill:   out[i] = (T)value                         out (n)
//   arange: out[i] = (T)(start + i * step)            out (n)
//   unary:  out[i] = f(x[i])                          out, x (n)
//   binary: out[i] = f(a[ia(i)], b[ib(i)])            out (plan.numel), a, b broadcast
//
// All are bandwidth bound: unary moves 2n elements and binary 3n, for 1-20 flops each,
// so an H100 (~3 TB/s copy) should run a 64M-element f32 unary in ~0.18 ms and a binary
// in ~0.27 ms. What buys that: 16-byte loads and stores (float4 / double2 / 8 halves) on
// the flat path whenever every pointer is 16-byte aligned, each block owning one contiguous
// tile of 256 threads x 1 pack with every load issued before the first store (block_tile),
// and a scalar tail; unaligned pointers take a grid-stride loop of single elements.
// The broadcast path (plan.same false) maps each output index to the two input offsets
// with at most 8 divisions by constants, done as multiply-high + shift (FastDivmod)
// while numel < 2^31, which keeps it bandwidth bound too.
//
// Math is the precise libdevice kind (expf, logf, tanhf: <= 2 ulp); F16/BF16 compute in
// float, F64 in double. Sigmoid is evaluated so that exp never overflows.
#include <algorithm>
#include <climits>

#include "minitorch.h"  // MT_API
#include "backend/cuda/context.h"
#include "backend/philox.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/study.cuh"

namespace mt {
namespace cuda {

namespace {

constexpr int kThreads = 256;
// 16-byte packs per thread and operand in a flat map's tile. bw_study.py on an H200, relu over
// 64M / 16M f32: one pack 128.9 / 35.5 us, two 133.8 / 40.4 us, PyTorch 129.8 / 39.4 us.
constexpr int kUnroll = 1;
constexpr int kSplatUnroll = 2;  // 16-byte stores per thread of splat_kernel

// ---- math by compute type ---------------------------------------------------------------

__device__ __forceinline__ float dexp(float x) { return expf(x); }
__device__ __forceinline__ double dexp(double x) { return exp(x); }
__device__ __forceinline__ float dlog(float x) { return logf(x); }
__device__ __forceinline__ double dlog(double x) { return log(x); }
__device__ __forceinline__ float dtanh(float x) { return tanhf(x); }
__device__ __forceinline__ double dtanh(double x) { return tanh(x); }
__device__ __forceinline__ float dsqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double dsqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float dpow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double dpow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float dabs(float x) { return fabsf(x); }
__device__ __forceinline__ double dabs(double x) { return fabs(x); }

template <Unary OP, class C>
struct UnaryFn {
  C s;
  __device__ __forceinline__ C operator()(C x) const {
    if constexpr (OP == Unary::NEG) return -x;
    else if constexpr (OP == Unary::EXP) return dexp(x);
    else if constexpr (OP == Unary::LOG) return dlog(x);
    else if constexpr (OP == Unary::RELU) return x > C(0) ? x : C(0);  // as the CPU reference: NaN -> 0
    else if constexpr (OP == Unary::SIGMOID) {
      // exp of a non-positive argument only: no overflow, no inf/inf.
      if (x >= C(0)) return C(1) / (C(1) + dexp(-x));
      const C z = dexp(x);
      return z / (C(1) + z);
    }
    else if constexpr (OP == Unary::TANH) return dtanh(x);
    else if constexpr (OP == Unary::ADD_SCALAR) return x + s;
    else if constexpr (OP == Unary::MUL_SCALAR) return x * s;
    else if constexpr (OP == Unary::POW_SCALAR) return dpow(x, s);
    else if constexpr (OP == Unary::SQRT) return dsqrt(x);
    else if constexpr (OP == Unary::ABS) return dabs(x);
    else if constexpr (OP == Unary::SIGN) return C((x > C(0)) - (x < C(0)));  // NaN -> 0, as the CPU
    else if constexpr (OP == Unary::SQUARE) return x * x;
    else if constexpr (OP == Unary::RECIPROCAL) return C(1) / x;
    else static_assert(OP != OP, "unhandled unary op");
  }
};

// Semantics follow the CPU reference exactly, NaN handling included (a NaN in either
// input makes MAXIMUM/MINIMUM return NaN, as torch.maximum).
template <Binary OP, class C>
struct BinaryFn {
  static constexpr bool reads_a = OP != Binary::COPY_B;  // COPY_B: a may be null
  __device__ __forceinline__ C operator()(C a, C b) const {
    if constexpr (OP == Binary::ADD) return a + b;
    else if constexpr (OP == Binary::SUB) return a - b;
    else if constexpr (OP == Binary::MUL) return a * b;
    else if constexpr (OP == Binary::DIV) return a / b;
    else if constexpr (OP == Binary::MAXIMUM) return (a > b || a != a) ? a : b;
    else if constexpr (OP == Binary::MINIMUM) return (a < b || a != a) ? a : b;
    else if constexpr (OP == Binary::RELU_BWD) return b > C(0) ? a : C(0);
    else if constexpr (OP == Binary::SIGMOID_BWD) return a * b * (C(1) - b);
    else if constexpr (OP == Binary::TANH_BWD) return a * (C(1) - b * b);
    else if constexpr (OP == Binary::COPY_B) { (void)a; return b; }
    else static_assert(OP != OP, "unhandled binary op");
  }
};

// ---- kernels -----------------------------------------------------------------------------

template <class T, bool VEC>
__global__ void __launch_bounds__(kThreads) fill_kernel(T *out, int64_t n, double value) {
  const T v = convert<T>(value);
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if constexpr (VEC) {
    constexpr int N = Pack<T>::N;
    Pack<T> p;
#pragma unroll
    for (int k = 0; k < N; ++k) p.v[k] = v;
    const int64_t nv = n / N;
    for (int64_t i = tid; i < nv; i += stride) store128(out + i * N, p);
    const int64_t t = nv * N + tid;
    if (t < n) out[t] = v;
  } else {
    for (int64_t i = tid; i < n; i += stride) out[i] = v;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) arange_kernel(T *out, int64_t n, double start, double step) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = convert<T>(start + (double)i * step);
}

// One output element of a flat map: fn(a) (ARITY 1) or fn(a, b) (ARITY 2), in Compute<T>.
template <class T, int ARITY, class Fn>
__device__ __forceinline__ T map_one(const Fn &fn, T a, T b) {
  if constexpr (ARITY == 1) { (void)b; return from_compute<T>(fn(to_compute(a))); }
  else return from_compute<T>(fn(to_compute(a), to_compute(b)));
}

// out[i] = fn(a[i]) (ARITY 1) or fn(a[i], b[i]) (ARITY 2) over n flat elements, production
// kernel: every pointer 16-byte aligned, elements moved in Pack<T> groups of 16 bytes over
// block-local tiles of THREADS x UNROLL packs (block_tile: a thread's loads are all issued
// before it computes and stores); the n % N elements after the last pack are done by the
// first threads of block 0. In-place use (out == a) is safe: every element is read before it
// is written, by the same thread.
template <class T, int ARITY, class Fn, int THREADS = kThreads, int UNROLL = kUnroll>
__global__ void __launch_bounds__(THREADS) map_tile_kernel(T *out, const T *a, const T *b,
                                                           int64_t n, Fn fn) {
  pdl_enter();
  map_packs<THREADS, UNROLL, ARITY == 2>(out, a, b, n, [&](T x, T y) { return map_one<T, ARITY>(fn, x, y); });
}

// out (n) = *src in every element: COPY_B of a single element (the gradient of a sum, spread back
// over its input's shape). 16-byte stores over block-local tiles of kThreads x kSplatUnroll packs, the
// n % N elements after the last pack by the first threads of block 0; out 16-byte aligned. The
// general broadcast kernel stored 4 bytes a thread after its index math: 36 us for 32M float32
// on an H200 against a write-only 31 us.
template <class T>
__global__ void __launch_bounds__(kThreads) splat_kernel(T *out, const T *src, int64_t n) {
  pdl_enter();
  constexpr int N = Pack<T>::N;
  const T v = *src;
  Pack<T> p;
#pragma unroll
  for (int j = 0; j < N; ++j) p.v[j] = v;
  const int64_t packs = n / N;
  const int64_t base = (int64_t)blockIdx.x * (kThreads * kSplatUnroll) + threadIdx.x;
#pragma unroll
  for (int u = 0; u < kSplatUnroll; ++u) {
    const int64_t i = base + (int64_t)u * kThreads;
    if (i < packs) store128(out + i * N, p);
  }
  if (blockIdx.x == 0 && threadIdx.x < n - packs * N) out[packs * N + threadIdx.x] = v;
}

// The same map on a grid-stride grid: the path for pointers that are not 16-byte aligned
// (VEC false: one element per step), and with VEC the earlier production walk the study
// compares against (mt_study_relu): each thread's UNROLL packs a whole grid apart.
template <class T, bool VEC, int ARITY, class Fn, int UNROLL = 4>
__global__ void __launch_bounds__(kThreads) map_flat_kernel(T *out, const T *a, const T *b,
                                                            int64_t n, Fn fn) {
  pdl_enter();
  constexpr int N = VEC ? Pack<T>::N : 1;
  using V = typename std::conditional<VEC, Pack<T>, T>::type;
  auto load = [](const T *p) -> V {
    if constexpr (VEC) return load128(p);
    else return *p;
  };
  auto compute = [&](const V &x, const V &y) -> V {
    if constexpr (VEC) {
      V r;
#pragma unroll
      for (int k = 0; k < N; ++k) r.v[k] = map_one<T, ARITY>(fn, x.v[k], y.v[k]);
      return r;
    } else {
      return map_one<T, ARITY>(fn, x, y);
    }
  };
  auto store = [](T *p, const V &v) {
    if constexpr (VEC) store128(p, v);
    else *p = v;
  };

  const int64_t nv = n / N;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  int64_t i = tid;
  for (; i + (UNROLL - 1) * stride < nv; i += UNROLL * stride) {
    V xa[UNROLL], xb[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      xa[u] = load(a + (i + u * stride) * N);
      xb[u] = ARITY == 2 ? load(b + (i + u * stride) * N) : xa[u];
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) store(out + (i + u * stride) * N, compute(xa[u], xb[u]));
  }
  for (; i < nv; i += stride) {
    const V xa = load(a + i * N);
    store(out + i * N, compute(xa, ARITY == 2 ? load(b + i * N) : xa));
  }
  if constexpr (VEC) {  // the n % N elements after the last whole pack
    const int64_t t = nv * N + tid;
    if (t < n) out[t] = map_one<T, ARITY>(fn, a[t], ARITY == 2 ? b[t] : a[t]);
  }
}

// Offsets of output index i into a and b, dims stored innermost first.
struct BcastIndex32 {
  int ndim;
  FastDivmod size[kMaxDims];
  uint32_t a_stride[kMaxDims], b_stride[kMaxDims];
};
struct BcastIndex64 {
  int ndim;
  int64_t size[kMaxDims];
  int64_t a_stride[kMaxDims], b_stride[kMaxDims];
};

template <class T, class Fn>
__global__ void __launch_bounds__(kThreads) binary_bcast32_kernel(T *out, const T *a, const T *b,
                                                                  uint32_t n, BcastIndex32 ix, Fn fn) {
  const uint32_t stride = gridDim.x * blockDim.x;  // n + stride < 2^32: no wrap
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    uint32_t rest = i, ao = 0, bo = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d >= ix.ndim) break;
      uint32_t q, r;
      ix.size[d].divmod(rest, q, r);
      ao += r * ix.a_stride[d];
      bo += r * ix.b_stride[d];
      rest = q;
    }
    const Compute<T> av = Fn::reads_a ? to_compute(a[ao]) : Compute<T>(0);
    out[i] = from_compute<T>(fn(av, to_compute(b[bo])));
  }
}

template <class T, class Fn>
__global__ void __launch_bounds__(kThreads) binary_bcast64_kernel(T *out, const T *a, const T *b,
                                                                  int64_t n, BcastIndex64 ix, Fn fn) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t rest = i, ao = 0, bo = 0;
    for (int d = 0; d < ix.ndim; ++d) {
      const int64_t q = rest / ix.size[d];
      const int64_t r = rest - q * ix.size[d];
      ao += r * ix.a_stride[d];
      bo += r * ix.b_stride[d];
      rest = q;
    }
    const Compute<T> av = Fn::reads_a ? to_compute(a[ao]) : Compute<T>(0);
    out[i] = from_compute<T>(fn(av, to_compute(b[bo])));
  }
}

// ---- launch helpers ---------------------------------------------------------------------

// How a flat map walks its elements when every pointer is 16-byte aligned. TILE (production):
// map_tile_kernel, one block per THREADS * UNROLL packs. SPREAD: map_flat_kernel with one block
// per kThreads * UNROLL packs, each thread's packs a grid apart (production until bw_study.py
// on an H100 measured relu over 64M f32 at 185 us against TILE's 182 us, PyTorch's 182 us).
// WAVE: map_flat_kernel on one wave of resident blocks (grid-stride; 196 us there). SPREAD and
// WAVE, and THREADS/UNROLL other than the defaults, are study variants (mt_study_relu).
enum class Walk { TILE, SPREAD, WAVE };

template <class T, int ARITY, class Fn, Walk WALK = Walk::TILE, int THREADS = kThreads, int UNROLL = kUnroll>
void launch_flat(const char *op, T *out, const T *a, const T *b, int64_t n, Fn fn) {
  Context &c = context();
  const bool vec = is_aligned16(out) && is_aligned16(a) && (ARITY == 1 || is_aligned16(b));
  const int64_t packs = n / Pack<T>::N;
  if (vec && WALK == Walk::TILE) {
    constexpr auto kernel = map_tile_kernel<T, ARITY, Fn, THREADS, UNROLL>;
    MT_CUDA_CHECK(launch_pdl_wide(c, kernel, dim3(tiles_of(packs, THREADS, UNROLL)), THREADS, out, a, b, n, fn));
  } else if (vec) {
    constexpr auto kernel = map_flat_kernel<T, true, ARITY, Fn, UNROLL>;
    const unsigned grid = WALK == Walk::WAVE ? wave_grid<kernel>(c.sm_count, packs, kThreads, kThreads)
                                             : tiles_of(packs, kThreads, UNROLL);
    MT_CUDA_CHECK(launch_pdl(c, kernel, dim3(grid), kThreads, out, a, b, n, fn));
  } else {
    constexpr auto kernel = map_flat_kernel<T, false, ARITY, Fn>;
    const unsigned grid = wave_grid<kernel>(c.sm_count, n, kThreads, kThreads);
    MT_CUDA_CHECK(launch_pdl(c, kernel, dim3(grid), kThreads, out, a, b, n, fn));
  }
  MT_CUDA_CHECK_LAUNCH(op);
}

template <class T, class Fn>
void launch_bcast(const char *op, T *out, const T *a, const T *b, const BroadcastPlan &plan, Fn fn) {
  Context &c = context();
  const int64_t n = plan.numel;
  if (n < (int64_t(1) << 31)) {
    // Every offset is < n: a and b never span more elements than the output.
    BcastIndex32 ix{};
    ix.ndim = plan.ndim;
    for (int d = 0; d < plan.ndim; ++d) {
      const int src = plan.ndim - 1 - d;  // innermost first
      ix.size[d] = FastDivmod((uint32_t)plan.shape[src]);
      ix.a_stride[d] = (uint32_t)plan.a_stride[src];
      ix.b_stride[d] = (uint32_t)plan.b_stride[src];
    }
    constexpr auto kernel = binary_bcast32_kernel<T, Fn>;
    const unsigned grid = wave_grid<kernel>(c.sm_count, n, kThreads, kThreads);
    kernel<<<grid, kThreads, 0, c.stream>>>(out, a, b, (uint32_t)n, ix, fn);
  } else {
    BcastIndex64 ix{};
    ix.ndim = plan.ndim;
    for (int d = 0; d < plan.ndim; ++d) {
      const int src = plan.ndim - 1 - d;
      ix.size[d] = plan.shape[src];
      ix.a_stride[d] = plan.a_stride[src];
      ix.b_stride[d] = plan.b_stride[src];
    }
    constexpr auto kernel = binary_bcast64_kernel<T, Fn>;
    const unsigned grid = wave_grid<kernel>(c.sm_count, n, kThreads, kThreads);
    kernel<<<grid, kThreads, 0, c.stream>>>(out, a, b, n, ix, fn);
  }
  MT_CUDA_CHECK_LAUNCH(op);
}

const char *unary_name(Unary op) {
  switch (op) {
#define MT_X(name) case Unary::name: return #name;
    MT_UNARY_OPS(MT_X)
#undef MT_X
  }
  return "?";
}

const char *binary_name(Binary op) {
  switch (op) {
#define MT_X(name) case Binary::name: return #name;
    MT_BINARY_OPS(MT_X)
#undef MT_X
  }
  return "?";
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------

// out[i] = element i of the seeded uniform stream (philox.h): a thread per counter block, which
// gives the 4 neighbouring elements [4 b, 4 b + 4) (doubles: and the block of the low words), so
// the bits equal the CPU's; 16-byte stores where out is aligned.
template <class T>
__global__ void __launch_bounds__(kThreads) fill_uniform_kernel(T *out, int64_t n, uint64_t seed, bool aligned) {
  constexpr bool kDp = sizeof(T) == 8;
  constexpr int kPer = kPhiloxPerBlock, N = Pack<T>::N;
  static_assert(kPer % N == 0, "a counter block fills whole packs");
  const int64_t blocks = (n + kPer - 1) / kPer, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < blocks; b += stride) {
    const PhiloxUniformBlock blk(seed, (uint64_t)b, kDp);
    T v[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) v[k] = (T)blk.draw(k, kDp);
    const int64_t i0 = b * kPer;
    if (aligned && i0 + kPer <= n) {
#pragma unroll
      for (int h = 0; h < kPer / N; ++h) {
        Pack<T> o;
#pragma unroll
        for (int k = 0; k < N; ++k) o.v[k] = v[h * N + k];
        store128(out + i0 + h * N, o);
      }
    } else {
#pragma unroll
      for (int k = 0; k < kPer; ++k)
        if (i0 + k < n) out[i0 + k] = v[k];
    }
  }
}

void launch_fill_uniform(void *out, int64_t n, DType dtype, uint64_t seed) {
  NvtxRange range("fill_uniform");
  MT_CHECK(dtype == DType::F32 || dtype == DType::F64, DTYPE, "cuda fill_uniform: float32 or float64, got %s",
           dtype_name(dtype));
  if (n <= 0) return;
  Context &c = context();
  const bool aligned = is_aligned16(out);
  if (dtype == DType::F32) {
    constexpr auto kernel = fill_uniform_kernel<float>;
    kernel<<<wave_grid<kernel>(c.sm_count, (n + 3) / 4, kThreads, kThreads), kThreads, 0, c.stream>>>(
        (float *)out, n, seed, aligned);
  } else {
    constexpr auto kernel = fill_uniform_kernel<double>;
    kernel<<<wave_grid<kernel>(c.sm_count, (n + 3) / 4, kThreads, kThreads), kThreads, 0, c.stream>>>(
        (double *)out, n, seed, aligned);
  }
  MT_CUDA_CHECK_LAUNCH("fill_uniform");
}

namespace {
// The argument checks of the writers (fill, arange): false when there is nothing to write.
bool writes_any(const char *op, const void *out, int64_t n) {
  MT_CHECK(n >= 0, INVALID_ARGUMENT, "cuda %s: negative element count %lld", op, (long long)n);
  if (n == 0) return false;
  MT_CHECK(out != nullptr, INVALID_ARGUMENT, "cuda %s: out is null for %lld elements", op, (long long)n);
  return true;
}
}  // namespace

void launch_fill(void *out, int64_t n, DType dtype, double value) {
  NvtxRange range("fill");
  if (!writes_any("fill", out, n)) return;
  Context &c = context();
  dispatch_any(dtype, "fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T *o = static_cast<T *>(out);
    if (is_aligned16(o)) {
      constexpr auto kernel = fill_kernel<T, true>;
      kernel<<<wave_grid<kernel>(c.sm_count, n / Pack<T>::N + 1, kThreads, kThreads), kThreads, 0, c.stream>>>(
          o, n, value);
    } else {
      constexpr auto kernel = fill_kernel<T, false>;
      kernel<<<wave_grid<kernel>(c.sm_count, n, kThreads, kThreads), kThreads, 0, c.stream>>>(o, n, value);
    }
    MT_CUDA_CHECK_LAUNCH("fill");
  });
}

void launch_arange(void *out, int64_t n, DType dtype, double start, double step) {
  NvtxRange range("arange");
  if (!writes_any("arange", out, n)) return;
  Context &c = context();
  dispatch_any(dtype, "arange", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr auto kernel = arange_kernel<T>;
    kernel<<<wave_grid<kernel>(c.sm_count, n, kThreads, kThreads), kThreads, 0, c.stream>>>(static_cast<T *>(out), n,
                                                                                             start, step);
    MT_CUDA_CHECK_LAUNCH("arange");
  });
}

void launch_unary(Unary op, void *out, const void *x, int64_t n, DType dtype, double s) {
  NvtxRange range(unary_name(op));
  MT_CHECK(n >= 0, INVALID_ARGUMENT, "cuda unary %s: negative element count %lld", unary_name(op),
           (long long)n);
  if (n == 0) return;
  MT_CHECK(out && x, INVALID_ARGUMENT, "cuda unary %s: null buffer (out=%p, x=%p)", unary_name(op), out, x);
  dispatch_float(dtype, unary_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    T *o = static_cast<T *>(out);
    const T *in = static_cast<const T *>(x);
    switch (op) {
#define MT_X(name) \
  case Unary::name: launch_flat<T, 1>(#name, o, in, in, n, UnaryFn<Unary::name, C>{(C)s}); return;
      MT_UNARY_OPS(MT_X)
#undef MT_X
    }
    fail(Code::INVALID_ARGUMENT, "cuda unary: invalid op %d", (int)op);
  });
}

void launch_binary(Binary op, void *out, const void *a, const void *b, const BroadcastPlan &plan,
                   DType dtype) {
  NvtxRange range(binary_name(op));
  const char *name = binary_name(op);
  MT_CHECK(plan.numel >= 0, INVALID_ARGUMENT, "cuda binary %s: negative numel %lld", name,
           (long long)plan.numel);
  if (plan.numel == 0) return;
  MT_CHECK(out && b && (a || op == Binary::COPY_B), INVALID_ARGUMENT,
           "cuda binary %s: null buffer (out=%p, a=%p, b=%p)", name, out, a, b);
  if (!plan.same) {
    MT_CHECK(plan.ndim >= 0 && plan.ndim <= kMaxDims, INVALID_ARGUMENT,
             "cuda binary %s: plan.ndim %d outside [0, %d]", name, plan.ndim, kMaxDims);
    int64_t prod = 1;
    for (int d = 0; d < plan.ndim; ++d) {
      MT_CHECK(plan.shape[d] > 0, INVALID_ARGUMENT, "cuda binary %s: plan.shape[%d] = %lld", name, d,
               (long long)plan.shape[d]);
      prod *= plan.shape[d];
    }
    MT_CHECK(prod == plan.numel, INVALID_ARGUMENT,
             "cuda binary %s: plan shape holds %lld elements but numel is %lld", name, (long long)prod,
             (long long)plan.numel);
  }
  dispatch_float(dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    T *o = static_cast<T *>(out);
    if (op == Binary::COPY_B && plan.same) {  // a plain copy
      if (out != b)
        MT_CUDA_CHECK(cudaMemcpyAsync(out, b, (size_t)plan.numel * sizeof(T), cudaMemcpyDeviceToDevice,
                                      context().stream));
      return;
    }
    const T *pa = static_cast<const T *>(a);
    const T *pb = static_cast<const T *>(b);
    if (op == Binary::COPY_B && is_aligned16(out) &&
        std::all_of(plan.b_stride, plan.b_stride + plan.ndim, [](int64_t st) { return st == 0; })) {
      Context &c = context();
      MT_CUDA_CHECK(launch_pdl_wide(c, splat_kernel<T>, dim3(tiles_of(plan.numel / Pack<T>::N, kThreads, kSplatUnroll)),
                                    kThreads, o, pb, plan.numel));
      MT_CUDA_CHECK_LAUNCH("COPY_B");
      return;
    }
    switch (op) {
#define MT_X(opname)                                                              \
  case Binary::opname:                                                            \
    if (plan.same) launch_flat<T, 2>(#opname, o, pa, pb, plan.numel, BinaryFn<Binary::opname, C>{}); \
    else launch_bcast<T>(#opname, o, pa, pb, plan, BinaryFn<Binary::opname, C>{});        \
    return;
      MT_BINARY_OPS(MT_X)
#undef MT_X
    }
    fail(Code::INVALID_ARGUMENT, "cuda binary: invalid op %d", (int)op);
  });
}

}  // namespace cuda
}  // namespace mt

// ---- study hooks (backend/cuda/study.cuh has their common rules) --------------------------------
//
// mt_study_stream: *stream = the library's CUDA stream (a cudaStream_t), on which every op and
// study hook queues its work, so that a benchmark can time them with CUDA events recorded on it
// (torch.cuda.ExternalStream). Borrowed: valid until the process ends.
extern "C" MT_API int mt_study_stream(void **stream) {
  return mt::cuda::study_entry("mt_study_stream", [&] {
    MT_CHECK(stream, INVALID_ARGUMENT, "stream is NULL");
    *stream = (void *)mt::cuda::context().stream;
  });
}

// mt_study_relu: out (n) = relu(x (n)), device pointers of dtype (an mt_dtype: F32, F64, F16,
// BF16), borrowed for the call, queued on the library's stream. variant:
//   0  production (what mt_relu runs): block-local tiles of 256 threads x 1 pack (map_tile_kernel)
//   1  4 packs per thread a grid apart, one block per 1024 packs (the earlier production)
//   2  4 packs per thread a grid apart, one wave of resident blocks walking the array (grid-stride)
//   3  tiles of 256 threads x 2 packs (production until an H200 measured 1 pack faster)
//   4  tiles of 128 threads x 2 packs
//   5  tiles of 256 threads x 4 packs
//   6  tiles of 128 threads x 1 pack
// Variants 1..6 need 16-byte aligned out and x (MT_ERR_UNSUPPORTED otherwise).
extern "C" MT_API int mt_study_relu(void *out, const void *x, int64_t n, int32_t dtype, int32_t variant) {
  using namespace mt;
  using namespace mt::cuda;
  return study_entry("mt_study_relu", [&] {
    check_variant(variant, 6);
    MT_CHECK(dtype >= 0 && dtype < kNumDTypes, DTYPE, "invalid dtype %d", (int)dtype);
    MT_CHECK(n >= 0, INVALID_ARGUMENT, "negative element count %lld", (long long)n);
    if (n == 0) return;
    MT_CHECK(out && x, INVALID_ARGUMENT, "null buffer (out=%p, x=%p)", out, x);
    MT_CHECK(variant == 0 || (is_aligned16(out) && is_aligned16(x)), UNSUPPORTED,
             "variant %d needs 16-byte aligned buffers (out=%p, x=%p)", (int)variant, out, x);
    NvtxRange range("study_relu");
    dispatch_float((DType)dtype, "study_relu", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = Compute<T>;
      using Fn = UnaryFn<Unary::RELU, C>;
      T *o = static_cast<T *>(out);
      const T *in = static_cast<const T *>(x);
      const Fn fn{C(0)};
      switch (variant) {
        case 0: launch_flat<T, 1, Fn>("study_relu", o, in, in, n, fn); break;
        case 1: launch_flat<T, 1, Fn, Walk::SPREAD, kThreads, 4>("study_relu", o, in, in, n, fn); break;
        case 2: launch_flat<T, 1, Fn, Walk::WAVE, kThreads, 4>("study_relu", o, in, in, n, fn); break;
        case 3: launch_flat<T, 1, Fn, Walk::TILE, 256, 2>("study_relu", o, in, in, n, fn); break;
        case 4: launch_flat<T, 1, Fn, Walk::TILE, 128, 2>("study_relu", o, in, in, n, fn); break;
        case 5: launch_flat<T, 1, Fn, Walk::TILE, 256, 4>("study_relu", o, in, in, n, fn); break;
        default: launch_flat<T, 1, Fn, Walk::TILE, 128, 1>("study_relu", o, in, in, n, fn); break;
      }
    });
  });
}
