// fusions.cu - fused ops of transformer and MLP blocks: bias + activation (forward, and a
// backward that writes dx and the bias gradient's column partials in the same pass), residual
// add + LayerNorm, dropout + residual add.
//
//   bias_act:           y (rows, n) = act(x + bias[col]), bias (n)
//   bias_act_backward:  z = x + bias; dx (rows, n), written = dy act'(z);
//                       dbias (n), written = column sums of dx (two fixed-order stages)
//   add_layer_norm:     s (rows, d), written = x + residual; y (rows, d), written = layer_norm(s),
//                       mean, rstd (rows) written in Compute<T>, as layer_norm saves them
//   dropout_add:        out (n), written = residual + x * keep, keep = (u >= p ? 1/(1-p) : 0),
//                       u the seeded uniform stream; residual null: out = x * keep (the backward)
//
// Napkin math (f32, H100 copy rate ~3 TB/s). bias_act forward reads x and writes y (8 bytes an
// element; the composition add + activation moves 20: 65536 x 1024 is 0.17 ms against ~0.45);
// its backward reads dy and x and writes dx (12 bytes; the composition's activation backward
// plus the bias column sum re-read dy: 20). add_layer_norm reads x, residual and writes s, y
// (16 bytes; add then layer_norm: 20). dropout_add reads x and residual and writes out (12
// bytes; the composition draws u, builds the mask, casts, scales, multiplies and adds: ~50);
// Its Philox-4x32-10 costs ~100 integer ops a counter block; one block per element put the
// kernel near the H100's integer issue rate (85-94% of copy), so a block serves 4 elements
// (philox.h).
//
// Arithmetic follows the unfused kernels so that each op matches its composition: z = x + b
// and s = x + residual in Compute<T>, GELU as x sigmoid(2u) (the form of gelu()), the sum s
// rounded to T before its statistics (the backward normalizes the stored s), and dropout_add's
// products and sums rounded to T one by one with _rn intrinsics (no FMA contraction), which
// makes it equal add(residual, dropout(x)) bit for bit.
//
// Shapes. bias_act forward: 16-byte packs over block_tile's contiguous tiles (one pack a
// thread), the pack's column group by a FastDivmod. bias_act backward (and the forward of
// unaligned rows or of 2^31 packs or more): blocks of (TX, TY) threads, TX lanes over 16-byte
// column packs (fewer than 32 when a row has fewer packs) and TY row lanes; grid (column tiles,
// row chunks) sized to one wave of blocks. A thread keeps its columns' bias, and in the backward
// its columns' sums, in registers while it walks its rows; the block then adds its TY row lanes
// in order and writes one partial row per chunk, which a second kernel adds in order:
// deterministic, no atomics.
// add_layer_norm: rows of up to 32 * 8 packs take a warp each, wider rows up to 512 * 8 packs a
// block each, the row held in registers between the mean and the centred sum of squares (the
// two-pass variance); float64, unaligned or wider rows take a block per row that reads s back
// from global memory (mostly L2). dropout_add: 16-byte packs over block_tile's tiles, a pack's
// draws from whole counter blocks; unaligned buffers an element a thread, grid-stride.
//
// Contents: math | bias_act kernels | add_layer_norm kernels | dropout_add kernels | bias_act forward
//           over flat tiles | launchers
#include <algorithm>
#include <climits>

#include "backend/cuda/context.h"
#include "backend/cuda/fusions.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/row_stats.cuh"
#include "backend/philox.h"

namespace mt {
namespace cuda {

namespace {

using Act = Backend::Activation;

constexpr int kFusionThreads = 256;    // bias_act blocks, warp-per-row blocks, dropout blocks
constexpr int kBiasActRows = 4;        // rows a bias_act_kernel thread loads before its first store
constexpr int kRowBlockThreads = 512;  // most threads of a block-per-row add_layer_norm
constexpr int kMaxPacksPerLane = 8;

// ---- math -----------------------------------------------------------------------------------

__device__ __forceinline__ float fusion_rsqrt(float v) { return rsqrtf(v); }
__device__ __forceinline__ double fusion_rsqrt(double v) { return 1.0 / sqrt(v); }
// Products and sums rounded on their own (never contracted into an FMA), as separate kernels
// round them.
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

// act(z) and dy * act'(z). GELU (tanh form) as x sigmoid(2u), u = k (x + c x^3): no cancellation
// of 1 + tanh(u) for negative x; gelu'(x) = s + 2 x s (1 - s) k (1 + 3 c x^2), s = sigmoid(2u).
template <Act ACT, class A>
struct Activation {
  static __device__ __forceinline__ A sigmoid2u(A z) {
    const A k = A(0.7978845608028654), c = A(0.044715);
    return A(1) / (A(1) + dexp(A(-2) * k * (z + c * z * z * z)));
  }
  static __device__ __forceinline__ A value(A z) {
    if constexpr (ACT == Act::RELU) return z > A(0) ? z : A(0);  // NaN -> 0, as relu
    else if constexpr (ACT == Act::GELU) return z * sigmoid2u(z);
    else return z;
  }
  static __device__ __forceinline__ A grad(A z, A dy) {
    if constexpr (ACT == Act::RELU) {
      return z > A(0) ? dy : A(0);
    } else if constexpr (ACT == Act::GELU) {
      const A k = A(0.7978845608028654), c = A(0.044715);
      const A s = sigmoid2u(z);
      return dy * (s + A(2) * z * s * (A(1) - s) * k * (A(1) + A(3) * c * z * z));
    } else {
      return dy;
    }
  }
};

// ---- bias_act ---------------------------------------------------------------------------------

// Column group g (V columns) of rows [blockIdx.y * chunk, + chunk), row lanes threadIdx.y.
// Forward (BWD false): out = y. Backward: out = dx (may be null), and when partial is not null
// the block's column sums go to partial[blockIdx.y, :].
template <class T, Act ACT, int V, bool BWD>
__global__ void __launch_bounds__(kFusionThreads)
    bias_act_kernel(T *out, Compute<T> *partial, const T *x, const T *bias, const T *dy, int64_t rows,
                    int64_t groups, int64_t chunk) {
  pdl_enter();  // launched with launch_pdl_smem_if
  using A = Compute<T>;
  using G = Chunk<T, V>;
  using F = Activation<ACT, A>;
  const int64_t n = groups * V;
  const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t r0 = (int64_t)blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
  A acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = A(0);
  if (g < groups) {
    const G bg = G::load(bias + g * V);
    A b[V];
#pragma unroll
    for (int j = 0; j < V; ++j) b[j] = to_compute(bg.v[j]);
    const int64_t step = blockDim.y;
    // One row's output from its loaded x (and dy) packs, its dy terms added to acc in row order.
    auto row = [&](int64_t r, const G &xv, const G &dv) {
      G o;
      if constexpr (BWD) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          o.v[j] = from_compute<T>(F::grad(to_compute(xv.v[j]) + b[j], to_compute(dv.v[j])));
          acc[j] += to_compute(o.v[j]);
        }
        if (out) o.store(out + r * n + g * V);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) o.v[j] = from_compute<T>(F::value(to_compute(xv.v[j]) + b[j]));
        o.store(out + r * n + g * V);
      }
    };
    // kBiasActRows rows at a time: every load of the batch is issued before the first store
    // (the compiler may not move a load of x or dy above a store to out, which could alias it).
    int64_t r = r0 + threadIdx.y;
    for (; r + (kBiasActRows - 1) * step < r1; r += kBiasActRows * step) {
      G xv[kBiasActRows], dv[kBiasActRows];
#pragma unroll
      for (int u = 0; u < kBiasActRows; ++u) {
        xv[u] = G::load(x + (r + u * step) * n + g * V);
        if constexpr (BWD) dv[u] = G::load(dy + (r + u * step) * n + g * V);
      }
#pragma unroll
      for (int u = 0; u < kBiasActRows; ++u) row(r + u * step, xv[u], dv[u]);
    }
    for (; r < r1; r += step) {
      G dv{};
      if constexpr (BWD) dv = G::load(dy + r * n + g * V);
      row(r, G::load(x + r * n + g * V), dv);
    }
  }
  if constexpr (BWD) {
    if (partial) {  // uniform across the block
      __shared__ A lanes[kFusionThreads * V];
      const int t = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
      for (int j = 0; j < V; ++j) lanes[t * V + j] = acc[j];
      __syncthreads();
      if (threadIdx.y == 0 && g < groups) {
        for (int k = 1; k < (int)blockDim.y; ++k)
#pragma unroll
          for (int j = 0; j < V; ++j) acc[j] += lanes[(k * blockDim.x + threadIdx.x) * V + j];
#pragma unroll
        for (int j = 0; j < V; ++j) partial[(int64_t)blockIdx.y * n + g * V + j] = acc[j];
      }
    }
  }
}

// dbias[c] = sum over the chunks k of partial[k, c], in a fixed order: a block of 32 columns x
// kTotalSplit warps, warp w adding the chunks w, w + kTotalSplit, ... in order, then the warps'
// sums added in order w = 0, 1, ... (the same bits every run; the chunk reads of all warps in
// flight together rather than one chain of chunks loads per column).
constexpr int kTotalSplit = 16;
template <class T>
__global__ void __launch_bounds__(32 * kTotalSplit)
    column_total_kernel(T *dbias, const Compute<T> *partial, int64_t chunks, int64_t n) {
  pdl_enter();  // launched with launch_pdl_smem_if
  __shared__ Compute<T> part[kTotalSplit][32];
  const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
  Compute<T> s = 0;
  if (c < n)
    for (int64_t k = threadIdx.y; k < chunks; k += kTotalSplit) s += partial[k * n + c];
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < n) {
    for (int w = 1; w < kTotalSplit; ++w) s += part[w][threadIdx.x];
    dbias[c] = from_compute<T>(s);
  }
}

// ---- add_layer_norm -----------------------------------------------------------------------------

// (cached) BLOCK false: a warp per row, blockDim.x / 32 rows a block; BLOCK true: a block per
// row. Each lane holds up to PL 16-byte packs of s (pack p = lane + k * lanes).
template <class T, int PL, bool BLOCK>
__global__ void __launch_bounds__(BLOCK ? kRowBlockThreads : kFusionThreads)
    add_ln_cached_kernel(T *s, T *y, Compute<T> *mean, Compute<T> *rstd, const T *x, const T *res, const T *gamma,
                         const T *beta, int64_t rows, int64_t d, Compute<T> eps) {
  pdl_enter();  // launched with launch_pdl_smem_if
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  __shared__ A red[32];
  const int lanes = BLOCK ? (int)blockDim.x : 32;
  const int lane = BLOCK ? (int)threadIdx.x : (int)(threadIdx.x & 31);
  const int64_t r = BLOCK ? (int64_t)blockIdx.x : (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (!BLOCK && r >= rows) return;  // a whole warp leaves together; no block barrier in this mode
  const int64_t packs = d / N;
  auto allsum = [&](A v) -> A {
    if constexpr (BLOCK) return block_allsum(v, red);
    else return group_sum(v, 32);
  };
  Pack<T> v[PL];
  A sum = 0;
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    const int64_t p = lane + (int64_t)k * lanes;
    if (p < packs) {
      const Pack<T> a = load128(x + r * d + p * N), b = load128(res + r * d + p * N);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        v[k].v[j] = from_compute<T>(to_compute(a.v[j]) + to_compute(b.v[j]));
        sum += to_compute(v[k].v[j]);
      }
      store128(s + r * d + p * N, v[k]);
    }
  }
  const A m = allsum(sum) / A(d);
  A q = 0;
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    const int64_t p = lane + (int64_t)k * lanes;
    if (p < packs) {
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const A c = to_compute(v[k].v[j]) - m;
        q += c * c;
      }
    }
  }
  const A rs = fusion_rsqrt(allsum(q) / A(d) + eps);
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    const int64_t p = lane + (int64_t)k * lanes;
    if (p < packs) {
      Pack<T> o;
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const int64_t c = p * N + j;
        const A w = gamma ? to_compute(gamma[c]) : A(1), b = beta ? to_compute(beta[c]) : A(0);
        o.v[j] = from_compute<T>((to_compute(v[k].v[j]) - m) * rs * w + b);
      }
      store128(y + r * d + p * N, o);
    }
  }
}

// (uncached) A block per row, any d and alignment: s written in the first pass and read back
// (each thread reads only the elements it wrote) for the centred squares and for y.
template <class T>
__global__ void __launch_bounds__(kFusionThreads)
    add_ln_rows_kernel(T *s, T *y, Compute<T> *mean, Compute<T> *rstd, const T *x, const T *res, const T *gamma,
                       const T *beta, int64_t d, Compute<T> eps) {
  using A = Compute<T>;
  __shared__ A red[32];
  const int64_t r = blockIdx.x;
  T *sr = s + r * d, *yr = y + r * d;
  const T *xr = x + r * d, *rr = res + r * d;
  A sum = 0;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    const T v = from_compute<T>(to_compute(xr[c]) + to_compute(rr[c]));
    sr[c] = v;
    sum += to_compute(v);
  }
  const A m = block_allsum(sum, red) / A(d);
  A q = 0;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    const A v = to_compute(sr[c]) - m;
    q += v * v;
  }
  const A rs = fusion_rsqrt(block_allsum(q, red) / A(d) + eps);
  if (threadIdx.x == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    const A w = gamma ? to_compute(gamma[c]) : A(1), b = beta ? to_compute(beta[c]) : A(0);
    yr[c] = from_compute<T>((to_compute(sr[c]) - m) * rs * w + b);
  }
}

// ---- dropout_add ------------------------------------------------------------------------------

// The uniform draw of element i as rand() makes it in dtype T (float32/float64 on the device,
// float16/bfloat16 drawn in float and rounded to T), in Compute<T>; uniform_of: the draw of
// word k of a counter block already run.
template <class T>
__device__ __forceinline__ Compute<T> uniform_of(const PhiloxUniformBlock &blk, int k) {
  if constexpr (std::is_same<T, double>::value) return blk.draw(k, true);
  else return to_compute(from_compute<T>((float)blk.draw(k, false)));
}
template <class T>
__device__ __forceinline__ Compute<T> uniform_as(uint64_t seed, int64_t i) {
  if constexpr (std::is_same<T, double>::value) return philox_uniform_at(seed, i, true);
  else return to_compute(from_compute<T>((float)philox_uniform_at(seed, i, false)));
}

// residual + x * keep (residual null: x * keep) for one element with uniform draw u.
template <class T>
struct DropoutAdd {
  using A = Compute<T>;
  A thresh, keep;
  __device__ DropoutAdd(double p, double scale)
      : thresh(to_compute(convert<T>(p))),                // full({}, p) in dtype T
        keep(to_compute(from_compute<T>((A)scale))) {}  // mask (0/1) cast to T, times 1/(1-p)
  __device__ __forceinline__ T operator()(A u, T xv, const T *rp) const {
    const T dropped = from_compute<T>(mul_rn(to_compute(xv), u >= thresh ? keep : A(0)));
    return rp ? from_compute<T>(add_rn(to_compute(*rp), to_compute(dropped))) : dropped;
  }
};

// 16-byte packs over block_tile's tiles (every pointer aligned): the counter blocks under a
// pack's N elements (4 elements a block) each run once, where one block per element ran the 10
// rounds 4 times as often and made the kernel compute-bound (85-94% of copy); float64 runs the
// low words' block as well. The n % N tail: the first threads of block 0, an element each.
template <class T, int THREADS, int UNROLL>
__global__ void __launch_bounds__(THREADS)
    dropout_add_kernel(T *out, const T *x, const T *res, int64_t n, double p, double scale, uint64_t seed) {
  constexpr int N = Pack<T>::N, kPer = kPhiloxPerBlock;
  constexpr int kBlocks = (N + kPer - 1) / kPer, kWords = N < kPer ? N : kPer;  // per pack
  constexpr bool kDp = std::is_same<T, double>::value;
  static_assert(N % kPer == 0 || kPer % N == 0, "packs and counter blocks nest");
  const DropoutAdd<T> one(p, scale);
  block_tile<THREADS, UNROLL>(
      n / N, [&](int64_t q) { return load_pack_pair<T>(x, res, q); },  // y: res's pack (unread when null)
      [&](int64_t q, const PackPair<T> &v) {
        const int64_t first = q * N;              // the pack's first element
        const int w0 = (int)(first % kPer);       // its word in the first block (0 unless N < 4)
        Pack<T> o;
#pragma unroll
        for (int b = 0; b < kBlocks; ++b) {
          const PhiloxUniformBlock blk(seed, (uint64_t)(first / kPer + b), kDp);
#pragma unroll
          for (int k = 0; k < kWords; ++k) {
            const int j = b * kPer + k;
            o.v[j] = one(uniform_of<T>(blk, w0 + k), v.x.v[j], res ? &v.y.v[j] : nullptr);
          }
        }
        store128(out + q * N, o);
      });
  const int64_t t = n / N * N + threadIdx.x;
  if (blockIdx.x == 0 && t < n) out[t] = one(uniform_as<T>(seed, t), x[t], res ? res + t : nullptr);
}

// Unaligned buffers: an element per thread, grid-stride.
template <class T>
__global__ void __launch_bounds__(kFusionThreads)
    dropout_add_scalar_kernel(T *out, const T *x, const T *res, int64_t n, double p, double scale, uint64_t seed) {
  const DropoutAdd<T> one(p, scale);
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = one(uniform_as<T>(seed, i), x[i], res ? res + i : nullptr);
}

// ---- bias_act forward over flat tiles -----------------------------------------------------------

// y = act(x + bias[col]) over 16-byte packs in block_tile's tiles, the column group of pack q
// being q mod groups (packs < 2^31, FastDivmod's range). The row-walking bias_act_kernel, which
// the backward needs for its column sums, ran the forward at 85-89% of copy: one wave of blocks
// each striding over far-apart rows, the layout the flat maps lost with.
template <class T, Act ACT, int THREADS>
__global__ void __launch_bounds__(THREADS)
    bias_act_tiles_kernel(T *y, const T *x, const T *bias, int64_t packs, FastDivmod groups) {
  pdl_enter();  // launched with launch_pdl_smem_if
  constexpr int N = Pack<T>::N;
  using F = Activation<ACT, Compute<T>>;
  struct In { Pack<T> x, b; };
  block_tile<THREADS, 1>(
      packs,
      [&](int64_t q) {
        uint32_t row, g;
        groups.divmod((uint32_t)q, row, g);
        In v;
        v.x = load128(x + q * N);
        v.b = load128(bias + (int64_t)g * N);  // 16 bytes of a small vector: L1 and L2 hits
        return v;
      },
      [&](int64_t q, const In &v) {
        Pack<T> o;
#pragma unroll
        for (int j = 0; j < N; ++j) o.v[j] = from_compute<T>(F::value(to_compute(v.x.v[j]) + to_compute(v.b.v[j])));
        store128(y + q * N, o);
      });
}

// ---- shapes and dispatch ----------------------------------------------------------------------

unsigned clamp_grid(int64_t blocks) { return (unsigned)std::min<int64_t>(std::max<int64_t>(blocks, 1), INT_MAX); }

template <class T>
bool packs_fit(int64_t n, std::initializer_list<const void *> ptrs) {
  if (n % Pack<T>::N != 0) return false;
  for (const void *p : ptrs)
    if (!is_aligned16(p)) return false;  // a null pointer counts as aligned
  return true;
}

// The bias_act grid: (TX, TY) threads over `groups` column groups and the rows in `chunks` chunks
// of `chunk` rows, about one wave of blocks (`per_sm` of the kernel fit on an SM). Depends only on
// the shape, the kernel and the device, so the backward's sums come in the same order on every run.
struct BiasActShape {
  dim3 block, grid;
  int64_t chunk = 1, chunks = 1;
};
BiasActShape bias_act_shape(const Context &c, int64_t rows, int64_t groups, int per_sm) {
  BiasActShape s;
  const int tx = groups >= 32 ? 32 : next_pow2(groups), ty = kFusionThreads / tx;
  const int64_t tiles = (groups + tx - 1) / tx;
  const int64_t want = std::max<int64_t>(1, (int64_t)c.sm_count * per_sm / tiles);
  s.chunks = std::min<int64_t>({want, (rows + ty - 1) / ty, 65535});
  s.chunk = (rows + s.chunks - 1) / s.chunks;
  s.chunks = (rows + s.chunk - 1) / s.chunk;
  MT_CHECK(tiles <= INT_MAX, INVALID_ARGUMENT, "cuda bias_act: n %lld is too large", (long long)groups);
  s.block = dim3((unsigned)tx, (unsigned)ty);
  s.grid = dim3((unsigned)tiles, (unsigned)s.chunks);
  return s;
}

// fn(std::integral_constant<Act, act>) for the runtime activation.
template <class Fn>
void with_act(Act act, Fn &&fn) {
  switch (act) {
    case Act::IDENTITY: fn(std::integral_constant<Act, Act::IDENTITY>{}); return;
    case Act::RELU: fn(std::integral_constant<Act, Act::RELU>{}); return;
    case Act::GELU: fn(std::integral_constant<Act, Act::GELU>{}); return;
  }
  fail(Code::INVALID_ARGUMENT, "cuda bias_act: invalid activation %d", (int)act);
}

template <class T, bool BWD>
void bias_act_t(Context &c, T *out, T *dbias, const T *x, const T *bias, const T *dy, int64_t rows, int64_t n,
                Act act) {
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  const bool vec = packs_fit<T>(n, {out, x, bias, dy});
  const int64_t groups = vec ? n / N : n;
  if (!BWD && vec && rows * groups <= INT_MAX) {  // the forward over flat tiles
    const int64_t packs = rows * groups;
    with_act(act, [&](auto a) {
      MT_CUDA_CHECK(launch_pdl_smem_if(c.pdl, c, bias_act_tiles_kernel<T, decltype(a)::value, kFusionThreads>,
                                       dim3(tiles_of(packs, kFusionThreads, 1)), dim3(kFusionThreads), 0, out, x,
                                       bias, packs, FastDivmod((uint32_t)groups)));
    });
    MT_CUDA_CHECK_LAUNCH("bias_act");
    return;
  }
  with_act(act, [&](auto a) {
    constexpr Act ACT = decltype(a)::value;
    auto run = [&](auto v) {  // V: elements a thread loads at once (a 16-byte pack, or 1)
      constexpr auto kernel = bias_act_kernel<T, ACT, decltype(v)::value, BWD>;
      const BiasActShape s = bias_act_shape(c, rows, groups, resident_blocks_per_sm<kernel>(kFusionThreads));
      if (!BWD || !dbias) {
        MT_CUDA_CHECK(launch_pdl_smem_if(c.pdl, c, kernel, s.grid, s.block, 0, out, (A *)nullptr, x, bias, dy, rows,
                                         groups, s.chunk));
        MT_CUDA_CHECK_LAUNCH(BWD ? "bias_act backward" : "bias_act");
        return;
      }
      PoolBuffer partial(s.chunks * n * (int64_t)sizeof(A));
      MT_CUDA_CHECK(launch_pdl_smem_if(c.pdl, c, kernel, s.grid, s.block, 0, out, partial.as<A>(), x, bias, dy, rows,
                                       groups, s.chunk));
      MT_CUDA_CHECK_LAUNCH("bias_act backward");
      MT_CHECK((n + 31) / 32 <= INT_MAX, INVALID_ARGUMENT, "cuda bias_act backward: n %lld is too large",
               (long long)n);
      MT_CUDA_CHECK(launch_pdl_smem_if(c.pdl, c, column_total_kernel<T>, dim3((unsigned)((n + 31) / 32)),
                                       dim3(32, kTotalSplit), 0, dbias, (const A *)partial.as<A>(), s.chunks, n));
      MT_CUDA_CHECK_LAUNCH("bias_act backward (dbias)");
    };
    if (vec) run(IntC<N>{});
    else run(IntC<1>{});
  });
}

template <class T>
void add_layer_norm_t(Context &c, T *s, T *y, Compute<T> *mean, Compute<T> *rstd, const T *x, const T *res,
                      const T *gamma, const T *beta, int64_t rows, int64_t d, double eps) {
  using A = Compute<T>;
  constexpr int N = Pack<T>::N;
  const int64_t packs = d / N;
  const bool cached = sizeof(T) <= 4 && packs_fit<T>(d, {s, y, x, res, gamma, beta}) &&
                      packs <= (int64_t)kRowBlockThreads * kMaxPacksPerLane;
  if (cached && packs <= 32 * kMaxPacksPerLane) {  // a warp per row
    const int pl = next_pow2((packs + 31) / 32);
    const int64_t per_block = kFusionThreads / 32;
    dispatch_pl<8>(pl, [&](auto k) {
      MT_CUDA_CHECK(launch_pdl_smem_if(c.pdl, c, add_ln_cached_kernel<T, decltype(k)::value, false>,
                                       dim3(clamp_grid((rows + per_block - 1) / per_block)), dim3(kFusionThreads), 0,
                                       s, y, mean, rstd, x, res, gamma, beta, rows, d, (A)eps));
    });
  } else if (cached) {  // a block per row: the fewest packs per lane that fit kRowBlockThreads lanes
    int pl = 1;
    while ((packs + pl - 1) / pl > kRowBlockThreads) pl <<= 1;
    const int threads = (int)(((packs + pl - 1) / pl + 31) / 32 * 32);
    dispatch_pl<8>(pl, [&](auto k) {
      MT_CUDA_CHECK(launch_pdl_smem_if(c.pdl, c, add_ln_cached_kernel<T, decltype(k)::value, true>,
                                       dim3(clamp_grid(rows)), dim3(threads), 0, s, y, mean, rstd, x, res, gamma, beta,
                                       rows, d, (A)eps));
    });
  } else {
    add_ln_rows_kernel<T><<<clamp_grid(rows), kFusionThreads, 0, c.stream>>>(s, y, mean, rstd, x, res, gamma, beta, d,
                                                                             (A)eps);
  }
  MT_CUDA_CHECK_LAUNCH("add_layer_norm");
}

template <class T>
void dropout_add_t(Context &c, T *out, const T *x, const T *res, int64_t n, double p, uint64_t seed) {
  constexpr int N = Pack<T>::N;
  const double scale = 1.0 / (1.0 - p);
  if (packs_fit<T>(0, {out, x, res})) {
    dropout_add_kernel<T, kFusionThreads, 1>
        <<<tiles_of(n / N, kFusionThreads, 1), kFusionThreads, 0, c.stream>>>(out, x, res, n, p, scale, seed);
  } else {
    constexpr auto kernel = dropout_add_scalar_kernel<T>;
    kernel<<<wave_grid<kernel>(c.sm_count, n, kFusionThreads, kFusionThreads), kFusionThreads, 0, c.stream>>>(
        out, x, res, n, p, scale, seed);
  }
  MT_CUDA_CHECK_LAUNCH(res ? "dropout_add" : "dropout_add backward");
}

void check_sizes(const char *op, int64_t a, int64_t b) {
  MT_CHECK(a >= 0 && b >= 0, INVALID_ARGUMENT, "cuda %s: negative size (%lld, %lld)", op, (long long)a, (long long)b);
}

}  // namespace

// ---- launchers --------------------------------------------------------------------------------

void bias_act(Context &c, void *y, const void *x, const void *bias, int64_t rows, int64_t n, Backend::Activation act,
              DType dtype) {
  NvtxRange range("bias_act");
  check_sizes("bias_act", rows, n);
  if (rows == 0 || n == 0) return;
  MT_CHECK(y && x && bias, INVALID_ARGUMENT, "cuda bias_act: null buffer (y=%p, x=%p, bias=%p)", y, x, bias);
  dispatch_float(dtype, "bias_act", [&](auto tag) {
    using T = typename decltype(tag)::type;
    bias_act_t<T, false>(c, static_cast<T *>(y), nullptr, static_cast<const T *>(x), static_cast<const T *>(bias),
                         nullptr, rows, n, act);
  });
}

void bias_act_backward(Context &c, void *dx, void *dbias, const void *dy, const void *x, const void *bias,
                       int64_t rows, int64_t n, Backend::Activation act, DType dtype) {
  NvtxRange range("bias_act_backward");
  check_sizes("bias_act backward", rows, n);
  if (rows == 0 || n == 0 || (!dx && !dbias)) return;
  MT_CHECK(dy && x && bias, INVALID_ARGUMENT, "cuda bias_act backward: null buffer (dy=%p, x=%p, bias=%p)", dy, x,
           bias);
  dispatch_float(dtype, "bias_act backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    bias_act_t<T, true>(c, static_cast<T *>(dx), static_cast<T *>(dbias), static_cast<const T *>(x),
                        static_cast<const T *>(bias), static_cast<const T *>(dy), rows, n, act);
  });
}

void add_layer_norm(Context &c, void *s, void *y, void *mean, void *rstd, const void *x, const void *residual,
                    const void *gamma, const void *beta, int64_t rows, int64_t d, double eps, DType dtype) {
  NvtxRange range("add_layer_norm");
  check_sizes("add_layer_norm", rows, d);
  if (rows == 0 || d == 0) return;
  MT_CHECK(s && y && mean && rstd && x && residual, INVALID_ARGUMENT,
           "cuda add_layer_norm: null buffer (s=%p, y=%p, mean=%p, rstd=%p, x=%p, residual=%p)", s, y, mean, rstd, x,
           residual);
  dispatch_float(dtype, "add_layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Compute<T>;
    add_layer_norm_t<T>(c, static_cast<T *>(s), static_cast<T *>(y), static_cast<A *>(mean), static_cast<A *>(rstd),
                        static_cast<const T *>(x), static_cast<const T *>(residual), static_cast<const T *>(gamma),
                        static_cast<const T *>(beta), rows, d, eps);
  });
}

void dropout_add(Context &c, void *out, const void *x, const void *residual, int64_t n, double p, uint64_t seed,
                 DType dtype) {
  NvtxRange range(residual ? "dropout_add" : "dropout_add_backward");
  check_sizes("dropout_add", n, 0);
  if (n == 0) return;
  MT_CHECK(out && x, INVALID_ARGUMENT, "cuda dropout_add: null buffer (out=%p, x=%p)", out, x);
  MT_CHECK(p >= 0 && p < 1, INVALID_ARGUMENT, "cuda dropout_add: p must be in [0, 1), got %g", p);
  dispatch_float(dtype, "dropout_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_add_t<T>(c, static_cast<T *>(out), static_cast<const T *>(x), static_cast<const T *>(residual), n, p,
                     seed);
  });
}

}  // namespace cuda
}  // namespace mt
