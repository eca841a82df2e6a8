// permute.cu - dimension permutation and dtype conversion.
//
//   permute: x (shape[0..ndim)) -> out with out.shape[i] = shape[perm[i]], ndim <= 8
//   cast:    x (n, x_dtype)     -> out (n, out_dtype), C-cast semantics
//
// Pure data movement: n reads + n writes, no flops; the ceiling is the copy bandwidth
// (~3 TB/s on an H100), e.g. 0.18 ms for a 64M-element f32 transpose.
//
// Permute first simplifies the problem on the host: output dims of size 1 are dropped
// and neighbouring output dims that are also neighbours, in order, in the input are
// merged. What is left is one of
//   - nothing or one contiguous run  -> a device-to-device copy
//   - (C, R) <- (R, C), or batched (B, C, R) <- (B, R, C)
//                                    -> a 32x32 tiled transpose through shared memory,
//                                       so both the reads and the writes are coalesced
//   - anything else                  -> one thread per output element; the input offset
//                                       comes from <= 8 FastDivmod steps
// Kernels move elements as raw 1/2/4/8-byte words, so every dtype shares them; contiguous runs
// of several elements move as words of up to 16 bytes. The cast converts a chunk of up to 8
// elements a thread (16 bytes of the narrower type) where both buffers are aligned to a chunk,
// else one element a thread.
#include <algorithm>
#include <climits>
#include <type_traits>

#include "minitorch.h"  // MT_API
#include "backend/cuda/context.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/study.cuh"

namespace mt {
namespace cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kTile = 32;      // transpose tile edge
constexpr int kTileRows = 8;   // threads per tile column: each thread moves 4 elements

template <class W>
__global__ void __launch_bounds__(kTile *kTileRows) transpose_kernel(W *out, const W *x, int64_t batch,
                                                                     int64_t rows, int64_t cols) {
  // x (batch, rows, cols) -> out (batch, cols, rows). The +1 column of padding puts the
  // column reads of the second phase on distinct shared-memory banks.
  __shared__ W tile[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c0 = (int64_t)blockIdx.x * kTile;
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  for (int64_t z = blockIdx.z; z < batch; z += gridDim.z) {
    const W *src = x + z * rows * cols;
    W *dst = out + z * rows * cols;
    for (int64_t rt = blockIdx.y; rt < row_tiles; rt += gridDim.y) {
      const int64_t r0 = rt * kTile;
#pragma unroll
      for (int k = 0; k < kTile; k += kTileRows) {
        const int64_t r = r0 + ty + k, c = c0 + tx;
        if (r < rows && c < cols) tile[ty + k][tx] = src[r * cols + c];
      }
      __syncthreads();
#pragma unroll
      for (int k = 0; k < kTile; k += kTileRows) {
        const int64_t c = c0 + ty + k, r = r0 + tx;
        if (c < cols && r < rows) dst[c * rows + r] = tile[tx][ty + k];
      }
      __syncthreads();
    }
  }
}

// Output dims innermost first: size and the input stride of each.
struct PermIndex32 {
  int ndim;
  FastDivmod size[kMaxDims];
  uint32_t stride[kMaxDims];
};
struct PermIndex64 {
  int ndim;
  int64_t size[kMaxDims];
  int64_t stride[kMaxDims];
};

template <class W>
__global__ void __launch_bounds__(kThreads) permute32_kernel(W *out, const W *x, uint32_t n, PermIndex32 ix) {
  const uint32_t step = gridDim.x * blockDim.x;  // n + step < 2^32: no wrap
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    uint32_t rest = i, off = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d >= ix.ndim) break;
      uint32_t q, r;
      ix.size[d].divmod(rest, q, r);
      off += r * ix.stride[d];
      rest = q;
    }
    out[i] = x[off];
  }
}

template <class W>
__global__ void __launch_bounds__(kThreads) permute64_kernel(W *out, const W *x, int64_t n, PermIndex64 ix) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t rest = i, off = 0;
    for (int d = 0; d < ix.ndim; ++d) {
      const int64_t q = rest / ix.size[d];
      off += (rest - q * ix.size[d]) * ix.stride[d];
      rest = q;
    }
    out[i] = x[off];
  }
}

template <class D, class S>
__global__ void __launch_bounds__(kThreads) cast_kernel(D *out, const S *x, int64_t n) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
#pragma unroll 4
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = convert<D>(x[i]);
}

// Elements a thread converts at once in cast_vec_kernel: 16 bytes of the narrower type (at most
// 8 elements), so the narrower side moves as 16-byte words (8 for a 1-byte type) and the wider
// as two to eight of them.
template <class D, class S>
constexpr int kCastVec = (int)(16 / (sizeof(D) < sizeof(S) ? sizeof(D) : sizeof(S))) > 8
                             ? 8
                             : (int)(16 / (sizeof(D) < sizeof(S) ? sizeof(D) : sizeof(S)));

template <class T, int V>
struct alignas(V * sizeof(T)) CastChunk {
  T v[V];
};

// The cast by chunks of V elements (both buffers aligned to a chunk): aligned chunk loads and
// stores where cast_kernel moves 1-8 bytes a thread (a float32 -> bfloat16 cast ran at 66% of
// copy bandwidth on its 2-byte stores). A thread loads U chunks (blockDim apart) before it
// converts and stores them; grid-stride, on any grid. Block 0 converts the last n % V elements.
template <class D, class S, int V, int U>
__global__ void __launch_bounds__(kThreads) cast_vec_kernel(D *__restrict__ out, const S *__restrict__ x,
                                                            int64_t n) {
  const int64_t chunks = n / V, step = (int64_t)gridDim.x * blockDim.x * U;
  const auto *xs = reinterpret_cast<const CastChunk<S, V> *>(x);
  auto *os = reinterpret_cast<CastChunk<D, V> *>(out);
  for (int64_t base = (int64_t)blockIdx.x * blockDim.x * U + threadIdx.x; base < chunks; base += step) {
    CastChunk<S, V> a[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (base + (int64_t)u * blockDim.x < chunks) a[u] = xs[base + (int64_t)u * blockDim.x];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (base + (int64_t)u * blockDim.x < chunks) {
        CastChunk<D, V> b;
#pragma unroll
        for (int j = 0; j < V; ++j) b.v[j] = convert<D>(a[u].v[j]);
        os[base + (int64_t)u * blockDim.x] = b;
      }
    }
  }
  const int64_t tail = chunks * V + threadIdx.x;
  if (blockIdx.x == 0 && tail < n) out[tail] = convert<D>(x[tail]);
}

// One cast launch: variant 1 cast_kernel, 2-4 cast_vec_kernel with U = 1, 2, 4 on one wave of
// resident blocks, 5-7 the same with a block for every blockDim x U chunks. False when a chunked
// variant cannot take the buffers' alignment.
template <class D, class S>
bool launch_cast_variant(Context &c, int variant, D *out, const S *x, int64_t n) {
  constexpr int V = kCastVec<D, S>;
  if (variant == 1) {
    constexpr auto kernel = cast_kernel<D, S>;
    kernel<<<wave_grid<kernel>(c.sm_count, n, kThreads, kThreads), kThreads, 0, c.stream>>>(out, x, n);
    return true;
  }
  if ((uintptr_t)out % (V * sizeof(D)) != 0 || (uintptr_t)x % (V * sizeof(S)) != 0) return false;
  const int U = variant == 2 || variant == 5 ? 1 : variant == 3 || variant == 6 ? 2 : 4;
  const bool wave = variant <= 4;
  auto go = [&](auto kernel) {
    const int64_t per_block = (int64_t)kThreads * U, need = (n / V + per_block - 1) / per_block;
    const unsigned grid = wave ? wave_grid<decltype(kernel)::value>(c.sm_count, n / V, per_block, kThreads)
                               : (unsigned)std::max<int64_t>(1, std::min<int64_t>(need, INT_MAX));
    decltype(kernel)::value<<<grid, kThreads, 0, c.stream>>>(out, x, n);
  };
  if (U == 1) go(std::integral_constant<decltype(&cast_vec_kernel<D, S, V, 1>), &cast_vec_kernel<D, S, V, 1>>{});
  else if (U == 2) go(std::integral_constant<decltype(&cast_vec_kernel<D, S, V, 2>), &cast_vec_kernel<D, S, V, 2>>{});
  else go(std::integral_constant<decltype(&cast_vec_kernel<D, S, V, 4>), &cast_vec_kernel<D, S, V, 4>>{});
  return true;
}

// The variant production runs where the buffers are aligned to a chunk (else variant 1): one
// chunk a thread, a block for every 256 chunks. 64M elements on an H200 (scripts/bench/cast_study.py,
// docs/benchmarks.md): float32 -> bfloat16 95.4 us against 101.7 on one wave (grid-stride) and
// 144.5 element-wise, bfloat16 -> float32 108.3 against 151.3 and 157.8.
constexpr int kCastVariant = 5;

// Calls fn(TypeTag<W>{}) with the unsigned word type of `bytes` bytes.
template <class Fn>
void dispatch_word(int64_t bytes, Fn &&fn) {
  switch (bytes) {
    case 1: fn(TypeTag<uint8_t>{}); return;
    case 2: fn(TypeTag<uint16_t>{}); return;
    case 4: fn(TypeTag<uint32_t>{}); return;
    case 8: fn(TypeTag<uint64_t>{}); return;
    case 16: fn(TypeTag<uint4>{}); return;
  }
  MT_ASSERT(false && "element size");
}

}  // namespace

void launch_permute(void *out, const void *x, const int64_t *shape, const int64_t *perm, int ndim,
                    DType dtype) {
  NvtxRange range("permute");
  MT_CHECK(ndim >= 0 && ndim <= kMaxDims, INVALID_ARGUMENT, "cuda permute: ndim %d outside [0, %d]", ndim,
           kMaxDims);
  MT_CHECK(ndim == 0 || (shape && perm), INVALID_ARGUMENT, "cuda permute: null shape or perm");
  int64_t esize = dtype_size(dtype);  // widened below where runs allow
  MT_CHECK(esize > 0, DTYPE, "cuda permute: invalid dtype %d", (int)dtype);
  int64_t numel = 1, in_stride[kMaxDims];
  bool seen[kMaxDims] = {};
  for (int d = ndim - 1; d >= 0; --d) {
    MT_CHECK(shape[d] >= 0, INVALID_ARGUMENT, "cuda permute: shape[%d] = %lld", d, (long long)shape[d]);
    in_stride[d] = numel;
    numel *= shape[d];
  }
  for (int d = 0; d < ndim; ++d) {
    MT_CHECK(perm[d] >= 0 && perm[d] < ndim && !seen[perm[d]], INVALID_ARGUMENT,
             "cuda permute: perm is not a permutation of 0..%d (perm[%d] = %lld)", ndim - 1, d,
             (long long)perm[d]);
    seen[perm[d]] = true;
  }
  if (numel == 0) return;
  MT_CHECK(out && x, INVALID_ARGUMENT, "cuda permute: null buffer (out=%p, x=%p)", out, x);

  // Simplify: output dims (outermost first) with their input strides, size-1 dims dropped,
  // runs that stay contiguous in the input merged.
  int m = 0;
  int64_t size[kMaxDims], stride[kMaxDims];
  for (int d = 0; d < ndim; ++d) {
    const int64_t sz = shape[perm[d]], st = in_stride[perm[d]];
    if (sz == 1) continue;
    if (m > 0 && stride[m - 1] == st * sz) {
      size[m - 1] *= sz;
      stride[m - 1] = st;
    } else {
      size[m] = sz;
      stride[m] = st;
      ++m;
    }
  }

  // Rows of the innermost output dim that are contiguous in the input move as wider words (up to
  // 16 bytes) where the run's length, every other stride and both buffers allow: a head split
  // [B, T, H, 64] -> [B, H, T, 64] in bfloat16 moves 128-byte runs as 8 words of 16 bytes, not
  // 64 of 2 (a thread's index arithmetic was the kernel's cost; docs/benchmarks.md).
  if (m >= 2 && stride[m - 1] == 1) {
    const uintptr_t addr = (uintptr_t)out | (uintptr_t)x;
    for (int64_t w = 16; w > esize; w /= 2) {
      const int64_t f = w / esize;
      bool fits = size[m - 1] % f == 0 && addr % (uintptr_t)w == 0;
      for (int d = 0; d < m - 1 && fits; ++d) fits = stride[d] % f == 0;
      if (!fits) continue;
      size[m - 1] /= f;
      for (int d = 0; d < m - 1; ++d) stride[d] /= f;
      numel /= f;
      esize = w;
      if (size[m - 1] == 1) --m;  // one word a run: the dim is gone
      break;
    }
  }

  Context &c = context();
  if (m == 0 || (m == 1 && stride[0] == 1)) {
    if (out != x)
      MT_CUDA_CHECK(cudaMemcpyAsync(out, x, (size_t)(numel * esize), cudaMemcpyDeviceToDevice, c.stream));
    return;
  }
  // Out (A, B) with input strides (1, A) is the transpose of an input (B, A); with a leading
  // batch dim of input stride A*B it is the batched transpose.
  int64_t batch = 0, rows = 0, cols = 0;
  if (m == 2 && stride[0] == 1 && stride[1] == size[0]) {
    batch = 1, rows = size[1], cols = size[0];
  } else if (m == 3 && stride[1] == 1 && stride[2] == size[1] && stride[0] == size[1] * size[2]) {
    batch = size[0], rows = size[2], cols = size[1];
  }

  dispatch_word(esize, [&](auto tag) {
    using W = typename decltype(tag)::type;
    W *o = static_cast<W *>(out);
    const W *in = static_cast<const W *>(x);
    if (batch > 0) {
      const int64_t gx = (cols + kTile - 1) / kTile, gy = (rows + kTile - 1) / kTile;
      MT_CHECK(gx < (int64_t(1) << 31), INVALID_ARGUMENT, "cuda permute: %lld columns is too many",
               (long long)cols);
      const dim3 grid((unsigned)gx, (unsigned)(gy < 65535 ? gy : 65535),
                      (unsigned)(batch < 65535 ? batch : 65535));
      transpose_kernel<W><<<grid, dim3(kTile, kTileRows), 0, c.stream>>>(o, in, batch, rows, cols);
    } else if (numel < (int64_t(1) << 31)) {
      PermIndex32 ix{};
      ix.ndim = m;
      for (int d = 0; d < m; ++d) {
        ix.size[d] = FastDivmod((uint32_t)size[m - 1 - d]);
        ix.stride[d] = (uint32_t)stride[m - 1 - d];
      }
      constexpr auto kernel = permute32_kernel<W>;
      kernel<<<wave_grid<kernel>(c.sm_count, numel, kThreads, kThreads), kThreads, 0, c.stream>>>(
          o, in, (uint32_t)numel, ix);
    } else {
      PermIndex64 ix{};
      ix.ndim = m;
      for (int d = 0; d < m; ++d) {
        ix.size[d] = size[m - 1 - d];
        ix.stride[d] = stride[m - 1 - d];
      }
      constexpr auto kernel = permute64_kernel<W>;
      kernel<<<wave_grid<kernel>(c.sm_count, numel, kThreads, kThreads), kThreads, 0, c.stream>>>(o, in, numel, ix);
    }
    MT_CUDA_CHECK_LAUNCH("permute");
  });
}

void launch_cast(void *out, DType out_dtype, const void *x, DType x_dtype, int64_t n) {
  NvtxRange range("cast");
  MT_CHECK(n >= 0, INVALID_ARGUMENT, "cuda cast: negative element count %lld", (long long)n);
  MT_CHECK(dtype_size(out_dtype) > 0 && dtype_size(x_dtype) > 0, DTYPE, "cuda cast: invalid dtype (%d -> %d)",
           (int)x_dtype, (int)out_dtype);
  if (n == 0) return;
  MT_CHECK(out && x, INVALID_ARGUMENT, "cuda cast: null buffer (out=%p, x=%p)", out, x);
  Context &c = context();
  if (out_dtype == x_dtype) {
    if (out != x)
      MT_CUDA_CHECK(cudaMemcpyAsync(out, x, (size_t)(n * dtype_size(x_dtype)), cudaMemcpyDeviceToDevice,
                                    c.stream));
    return;
  }
  dispatch_any(x_dtype, "cast", [&](auto stag) {
    using S = typename decltype(stag)::type;
    dispatch_any(out_dtype, "cast", [&](auto dtag) {
      using D = typename decltype(dtag)::type;
      D *o = static_cast<D *>(out);
      const S *in = static_cast<const S *>(x);
      if (!launch_cast_variant<D, S>(c, kCastVariant, o, in, n)) launch_cast_variant<D, S>(c, 1, o, in, n);
      MT_CUDA_CHECK_LAUNCH("cast");
    });
  });
}

}  // namespace cuda
}  // namespace mt

// mt_study_cast: out = x cast from x_dtype to out_dtype, n elements, by study variant `variant`
// (launch_cast_variant; 0 production: kCastVariant where the buffers are aligned to a chunk, else
// the element-wise kernel). For scripts/bench/cast_study.py and tests/gpu/test_cast.py. Buffers
// borrowed, the work queued on the library's stream; the statuses of study.cuh.
extern "C" MT_API int mt_study_cast(void *out, const void *x, int64_t n, int32_t out_dtype, int32_t x_dtype,
                                    int32_t variant) {
  using namespace mt;
  using namespace mt::cuda;
  return study_entry("mt_study_cast", [&] {
    check_variant(variant, 7);
    MT_CHECK(out_dtype >= 0 && out_dtype < kNumDTypes, DTYPE, "invalid dtype %d (out_dtype)", (int)out_dtype);
    MT_CHECK(x_dtype >= 0 && x_dtype < kNumDTypes, DTYPE, "invalid dtype %d (x_dtype)", (int)x_dtype);
    MT_CHECK(n >= 0, INVALID_ARGUMENT, "negative element count %lld", (long long)n);
    if (n == 0) return;
    MT_CHECK(out && x, INVALID_ARGUMENT, "null buffer (out=%p, x=%p)", out, x);
    MT_CHECK(out_dtype != x_dtype, UNSUPPORTED, "the same dtype %s is a copy, not a cast",
             dtype_name((DType)x_dtype));
    Context &c = context();
    dispatch_any((DType)x_dtype, "mt_study_cast", [&](auto stag) {
      using S = typename decltype(stag)::type;
      dispatch_any((DType)out_dtype, "mt_study_cast", [&](auto dtag) {
        using D = typename decltype(dtag)::type;
        D *o = static_cast<D *>(out);
        const S *in = static_cast<const S *>(x);
        if (variant == 0) {
          if (!launch_cast_variant<D, S>(c, kCastVariant, o, in, n)) launch_cast_variant<D, S>(c, 1, o, in, n);
        } else {
          const bool ok = launch_cast_variant<D, S>(c, variant, o, in, n);
          MT_CHECK(ok, UNSUPPORTED, "variant %d needs buffers aligned to %d-element chunks (out=%p, x=%p)",
                   (int)variant, kCastVec<D, S>, out, x);
        }
        MT_CUDA_CHECK_LAUNCH("mt_study_cast");
      });
    });
  });
}
