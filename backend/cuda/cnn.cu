// cnn.cu - convolutions as im2col + GEMM or as direct kernels, pooling, batch norm;
// and the choice between those paths and cuDNN (cudnn.cu) for each conv shape.
//
// Shapes (NCHW): x (N, C, H, W), w (K, C, R, S) = (K, CRS) row-major, y (N, K, Ho, Wo)
// = (N, K, P) with P = Ho * Wo. The batch goes in chunks of nb images so the column
// buffers stay under kColumnBudget bytes (pool memory, freed stream-ordered).
//
//   forward        col[n] (CRS, P) = im2col(x[n]);   y[n] (K, P) = w (K, CRS) @ col[n]
//                  one strided-batched GEMM per chunk (w broadcast, stride 0); + bias[k]
//   backward data  dcol[n] (CRS, P) = w^T @ dy[n];  dx = col2im(dcol) (a generation below)
//   backward filt  col (CRS, nb*P) = im2col of the chunk, image-minor; dyT (K, nb*P) = dy chunk
//                  permuted; dw (K, CRS) = dyT @ col^T, one GEMM per chunk (beta 0: the first
//                  into dw, the others into a scratch added to dw)
//   1x1, stride 1, no padding: x is its own column matrix (no im2col / col2im copies).
// The GEMMs are matmul.cu's: float32 on the 3xTF32 tensor-core kernel (gemm_f32.cu), which
// takes no beta, float64 on cuBLAS.
//
// Napkin math (the ResNet layer, N=64, 64->64, 3x3, 56x56, pad 1, float32 on an H200): each GEMM
// is 2*64*576*3136*64 = 14.8 GFLOP, about 0.15 ms at the 3xTF32 kernel's rate; the column matrix
// 576*3136*64*4 = 462 MB, written and read once per direction, about 0.22 ms at 4.2 TB/s. So
// about 0.35 ms a direction, 1.1 ms forward+backward; measured 0.48 and 1.53 ms (cuDNN 0.26 and
// 1.09 ms, PyTorch 0.40 and 1.32 ms; docs/benchmarks.md).
//
// Napkin math (LeNet-5 conv2, N=256, C=6, K=16, 5x5, 14x14 -> 10x10): GEMM 2*K*CRS*P*N
// = 2*16*150*100*256 = 123 MFLOP, the column matrix 150*100*256*4 = 15 MB written and read
// once: bandwidth-bound at ~10 us on an H100 (3 TB/s); small convs are launch-bound.
//
// The direct path (small convs): forward one launch (bias included), one thread per output
// pixel and 8 filters; backward data one launch, one thread per input pixel and 4 channels;
// backward filter a block per (filter, channel, span of pixels) and a launch adding the spans.
// Napkin math (roadmap CNN conv2, N=64, 8->16, 3x3, 14x14): 2*64*16*196*72 = 29 MFLOP and
// 0.4 MB in, 0.8 MB out: about a microsecond of work, so the launch count is what matters:
// im2col + GEMM + bias is three launches and cuBLAS's host path, the direct forward one.
//
// col2im generations (side by side; mt_study_col2im selects one, kCol2imProduction is variant 0):
//   (1) gather   col2im_plane_kernel: one thread per input pixel sums its R*S possible taps
//                straight from dcol (no atomics, coalesced writes and, at stride 1, reads; at
//                stride s only one lane in s has a tap to read per (r, s), the others idle)
//   (2) shared   col2im_shared_kernel: a block owns a th x tw tile of one plane (n, c); it loads
//                the slab of dcol whose taps land in the tile, (R*S, ceil(th/sh), ceil(tw/sw)),
//                a row of consecutive output positions at a time (coalesced at any stride; each
//                dcol element in at most one slab), then each thread sums its pixel's taps from
//                shared memory in the gather's order (bit-identical results). Falls back to (1)
//                where one row of pixels would need a slab over 48 KB (R*S > 192 in float64).
//                Napkin math: both read dcol once and write dx once; (2) adds a shared-memory
//                round trip and two barriers per tile, so it can only win where (1)'s strided
//                reads idle lanes (stride > 1); at stride 1 expect a tie or a small loss.
// Production: (1). Measured on an H200 (scripts/bench/workloads_cnn.py, the path-1 rows
// "col2im 1 / 2", forward+backward, 2026-11-26): ResNet 64->64 56x56 4.38 ms (1) against
// 6.22 ms (2); roadmap conv1 106.6 us against 105.6 us; conv2 104.1 us against 116.5 us. As
// expected at stride 1, (2) does not pay; it stays for strided shapes and as the reference.
// (1) was a flat kernel then, with 64-bit index arithmetic; as a plane kernel (below) the ResNet
// row is 1.53 ms against 4.04 ms for (2) (the same rows, on an H200, 2026-11-29).
//
// Pools: one thread per output (forward) or per input pixel (backward, a gather over the
// windows that hold the pixel, in the CPU reference's order: float results bit-identical).
// Batch norm: one block per channel for the statistics (double accumulation, fixed-order
// block reduction: deterministic), one elementwise kernel to normalize; the backward is
// one block per channel for sum(dy) and sum(dy * xhat), then one elementwise kernel for dx.
//
// Contents: the plane kernels (im2col, col2im) | bias | pools | batch norm | direct kernels | helpers |
//           col2im generations | the im2col path | the direct path | conv path choice |
//           launchers | the study hooks (mt_study_col2im, mt_study_conv_index64)
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "minitorch.h"  // MT_API (the study hook)
#include "backend/cuda/cnn.h"
#include "backend/cuda/context.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/ops.h"

namespace mt {
namespace cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kColumnBudget = 256ll << 20;  // bytes of column buffers per conv call

// The convolution geometry on the device.
struct Geom {
  int64_t c, h, w, k, r, s, ho, wo, sh, sw, ph, pw, dh, dw;
};
Geom geom(const Conv2dArgs &a) {
  return {a.c, a.h, a.w, a.k, a.r, a.s, a.ho, a.wo, a.stride_h, a.stride_w, a.pad_h, a.pad_w, a.dil_h, a.dil_w};
}

// ---- the plane kernels: im2col, col2im ---------------------------------------------------
//
// One block a row of col (im2col: one (n, c, r, s)) or a plane of dx (col2im: one (n, c)), its
// threads bx x by (bx the least of 16, 32, 64 that covers the width, else 64; by kThreads / bx,
// or fewer where the plane needs fewer rows of threads) walking the plane's rows and columns, so
// an element costs a few integer instructions and a tap at unit stride no division at all;
// writes, and the reads along a row, are coalesced. Coordinates within a plane
// are I: int where plane_fits32 takes the geometry, else int64_t (mt_study_conv_index64 forces
// int64_t, for the tests); offsets of planes and rows are 64-bit either way.
//
// The kernels these replaced walked col (dx) flat, one element (pixel) a thread, and split
// every index into (n, c, r, s, oh, ow) with 64-bit div/mod: a software routine of some 60
// instructions each, five pairs an element in im2col and four a tap in col2im. At the ResNet
// layer (x 64x64x56x56, w 64x64x3x3, pad 1) that bound them at over a millisecond each on an
// H200, where their bytes take about 0.1 ms. Results are the same bits: the same values, each
// pixel's taps summed in the same order (r, then s).

// The block shape for planes `width` wide whose threads need at most `rows` rows of threads
// (im2col: a thread takes kPlaneUnroll output rows; col2im: one input row), so that a small
// plane gets a small block. im2col at 14x14 takes 16x4, not 16x16 with 60 threads idle: at
// 2000x8x14x14 it ran 408 -> 116 us under ncu on an H200 (docs/benchmarks.md).
inline dim3 plane_block(int64_t width, int64_t rows) {
  const unsigned bx = width <= 16 ? 16 : width <= 32 ? 32 : 64;
  return dim3(bx, (unsigned)std::max<int64_t>(1, std::min<int64_t>(kThreads / bx, rows)));
}

// Runs launch(first, blocks) over [0, units) in launches of at most INT_MAX blocks (grid.x's
// limit), a block a row or plane: the plane kernels do not grid-stride, since a loop around
// their body cost them the loads in flight (col2im at the ResNet layer took 207 us against 108
// with one, im2col 201 against 150: ncu on an H200; docs/benchmarks.md).
template <class Launch>
void plane_launches(int64_t units, Launch &&launch) {
  for (int64_t first = 0; first < units; first += INT_MAX)
    launch(first, (unsigned)std::min<int64_t>(units - first, INT_MAX));
}

// True where 32-bit plane coordinates cannot overflow: every extent, stride, padding and dilated
// filter extent under 2^30, and so are the planes' sizes and the largest input coordinate a tap
// reaches (im2col: (ho + the unroll's overrun) * sh + (r - 1) * dh, below kThreads rows past ho;
// col2im: h + ph). Each factor is checked first, so the products stay inside int64.
bool plane_fits32(const Geom &g) {
  const int64_t lim = 1ll << 30;
  for (int64_t v : {g.h, g.w, g.ho, g.wo, g.sh, g.sw, g.ph, g.pw, g.r, g.s, g.dh, g.dw})
    if (v >= lim) return false;
  if (g.dh * g.r >= lim || g.dw * g.s >= lim) return false;
  return g.h * g.w < lim && g.ho * g.wo < lim && (g.ho + kThreads) * g.sh + g.dh * g.r + g.ph < lim &&
         (g.wo + kThreads) * g.sw + g.dw * g.s + g.pw < lim && g.h + g.ph + g.dh * g.r < lim &&
         g.w + g.pw + g.dw * g.s < lim;
}

// col (written) = im2col of images [0, nb) of x: row (n, crs) of P elements, 0 where the tap
// falls into the padding; rows image-major (row n * CRS + crs: col (nb, CRS, P)) for the forward,
// image-minor (row crs * nb + n: col (CRS, nb, P)) for dw. A thread loads kPlaneUnroll rows'
// elements before it stores them: with one load in flight a thread the copy was latency-bound
// (ResNet layer, forward+backward on an H200: 2.15 ms; 1.75 ms with these loads and col2im's in
// flight; docs/benchmarks.md).
constexpr int kPlaneUnroll = 4;

template <class T, class I, bool IMAGE_MINOR>
__global__ void __launch_bounds__(kThreads) im2col_plane_kernel(T *__restrict__ col, const T *__restrict__ x,
                                                                int64_t nb, Geom g, int64_t first) {
  const int64_t RS = g.r * g.s, CRS = g.c * RS, row = first + blockIdx.x;
  const int64_t n = IMAGE_MINOR ? row % nb : row / CRS, crs = IMAGE_MINOR ? row / nb : row % CRS;
  const int64_t ch = crs / RS, r = crs % RS / g.s, s = crs % g.s;
  const I h = (I)g.h, w = (I)g.w, ho = (I)g.ho, wo = (I)g.wo, sh = (I)g.sh, sw = (I)g.sw, by = (I)blockDim.y;
  const I oh_off = (I)(r * g.dh - g.ph), ow_off = (I)(s * g.dw - g.pw);
  const T *plane = x + (n * g.c + ch) * g.h * g.w;
  T *out = col + row * g.ho * g.wo;
  for (I ow = threadIdx.x; ow < wo; ow += blockDim.x) {
    const I iw = ow * sw + ow_off;
    const bool col_in = iw >= 0 && iw < w;
    for (I oh0 = threadIdx.y; oh0 < ho; oh0 += kPlaneUnroll * by) {
      T v[kPlaneUnroll];
#pragma unroll
      for (int u = 0; u < kPlaneUnroll; u++) {
        const I oh = oh0 + u * by, ih = oh * sh + oh_off;
        v[u] = col_in && oh < ho && ih >= 0 && ih < h ? plane[ih * w + iw] : from_compute<T>(Compute<T>(0));
      }
#pragma unroll
      for (int u = 0; u < kPlaneUnroll; u++)
        if (oh0 + u * by < ho) out[(oh0 + u * by) * wo + ow] = v[u];
    }
  }
}

// Along one axis: whether an output's tap reads input offset o (the input position plus the
// padding less the tap's dilated offset); if so, o becomes that output's position. Returning the
// position or -1 instead timed the ResNet layer's forward+backward at 1.62 against 1.53 ms (H200,
// one run), so the test and the position stay apart.
template <bool UNIT, class I>
__device__ __forceinline__ bool tap_output(I &o, I stride, I extent) {
  if (UNIT) return o >= 0 && o < extent;
  if (o < 0 || o % stride) return false;
  o /= stride;
  return o < extent;
}

// dx (written) for images [0, nb) from dcol (nb, CRS, P): each pixel sums the taps that read it,
// one plane (n, c) a block. UNIT: both strides 1, so a tap's output position is a subtraction.
// KR x KS: the filter's size where it is fixed at compile time (0: read from g), so the taps'
// loads are unrolled and in flight together.
template <class T, class I, bool UNIT, int KR, int KS>
__global__ void __launch_bounds__(kThreads) col2im_plane_kernel(T *__restrict__ dx, const T *__restrict__ dcol,
                                                                Geom g, int64_t first) {
  const int64_t P = g.ho * g.wo, plane = first + blockIdx.x;
  const int R = KR > 0 ? KR : (int)g.r, S = KR > 0 ? KS : (int)g.s;
  const I h = (I)g.h, w = (I)g.w, ho = (I)g.ho, wo = (I)g.wo, sh = (I)g.sh, sw = (I)g.sw, ph = (I)g.ph,
          pw = (I)g.pw, dh = (I)g.dh, dw = (I)g.dw;
  const T *base = dcol + plane * R * S * P;  // dcol[n] from row ch * R * S: plane = n * C + ch
  T *out = dx + plane * g.h * g.w;
  for (I ih = threadIdx.y; ih < h; ih += blockDim.y) {
    for (I iw = threadIdx.x; iw < w; iw += blockDim.x) {
      Compute<T> acc = 0;
#pragma unroll
      for (int r = 0; r < R; r++) {
        I oh = ih + ph - r * dh;
        if (!tap_output<UNIT>(oh, sh, ho)) continue;
        const T *taps = base + (int64_t)r * S * P + oh * wo;
#pragma unroll
        for (int s = 0; s < S; s++) {
          I ow = iw + pw - s * dw;
          if (!tap_output<UNIT>(ow, sw, wo)) continue;
          acc += to_compute(taps[(int64_t)s * P + ow]);
        }
      }
      out[ih * w + iw] = from_compute<T>(acc);
    }
  }
}

// a / b rounded toward minus infinity (b > 0; a may be negative).
__host__ __device__ __forceinline__ int64_t floor_div(int64_t a, int64_t b) {
  return a / b - (a % b != 0 && a < 0);
}

// The first output position o (along one axis) whose tap at offset off = pad - tap * dil lands at
// or after input position i0: the least o with o * stride >= i0 + off (may be negative).
__device__ __forceinline__ int64_t first_window(int64_t i0, int64_t off, int64_t stride) {
  return floor_div(i0 + off + stride - 1, stride);
}

// dx (written) for images [0, nb) from dcol (nb, CRS, P), staged through shared memory. Block
// (blockDim.x = tw, blockDim.y = th) owns a th x tw tile of one plane (n, ch) at (ih0, iw0). For
// tap (r, s) the outputs whose tap lands in the tile are oh = first_window(ih0, ph - r*dh, sh) + i,
// i < oht = ceil(th / sh), and likewise ow with j < owt = ceil(tw / sw): the slab (R*S, oht, owt)
// holds them, each dcol element of the plane in at most one tile's slab (no halo re-reads). It is
// loaded a row of ow at a time (contiguous in dcol: coalesced at any stride), then each thread
// sums its pixel's taps from it in the gather's order (r, then s): results bit-identical to it.
template <class T>
__global__ void __launch_bounds__(kThreads) col2im_shared_kernel(T *dx, const T *dcol, int64_t nb, Geom g, int oht,
                                                                 int owt) {
  extern __shared__ __align__(16) unsigned char col2im_smem[];
  T *slab = reinterpret_cast<T *>(col2im_smem);  // (R*S, oht, owt)
  const int tw = blockDim.x, th = blockDim.y, rs_n = (int)(g.r * g.s), rows = rs_n * oht;
  const int64_t P = g.ho * g.wo, tiles_w = (g.w + tw - 1) / tw, tiles = tiles_w * ((g.h + th - 1) / th);
  const int64_t blocks = nb * g.c * tiles;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t plane = b / tiles, t = b % tiles, ih0 = (t / tiles_w) * th, iw0 = (t % tiles_w) * tw;
    const T *src = dcol + plane * rs_n * P;  // dcol[n] rows ch*R*S .. : plane = n * C + ch
    __syncthreads();                         // the previous tile's sums are done with the slab
    for (int q = threadIdx.y; q < rows; q += th) {
      const int i = q % oht, rs = q / oht;
      const int64_t oh = first_window(ih0, g.ph - (rs / g.s) * g.dh, g.sh) + i;
      const int64_t ow = first_window(iw0, g.pw - (rs % g.s) * g.dw, g.sw) + threadIdx.x;
      if (threadIdx.x < owt)
        slab[q * owt + threadIdx.x] = (oh >= 0 && oh < g.ho && ow >= 0 && ow < g.wo)
                                          ? src[rs * P + oh * g.wo + ow] : from_compute<T>(Compute<T>(0));
    }
    __syncthreads();
    const int64_t ih = ih0 + threadIdx.y, iw = iw0 + threadIdx.x;
    if (ih >= g.h || iw >= g.w) continue;
    Compute<T> acc = 0;
    for (int64_t r = 0; r < g.r; r++) {
      const int64_t th_ = ih + g.ph - r * g.dh;
      if (th_ < 0 || th_ % g.sh) continue;
      const int64_t oh = th_ / g.sh;
      if (oh >= g.ho) continue;
      const T *row = slab + (r * g.s * oht + (oh - first_window(ih0, g.ph - r * g.dh, g.sh))) * owt;
      for (int64_t s = 0; s < g.s; s++) {
        const int64_t tw_ = iw + g.pw - s * g.dw;
        if (tw_ < 0 || tw_ % g.sw) continue;
        const int64_t ow = tw_ / g.sw;
        if (ow >= g.wo) continue;
        acc += to_compute(row[s * oht * owt + ow - first_window(iw0, g.pw - s * g.dw, g.sw)]);
      }
    }
    dx[plane * g.h * g.w + ih * g.w + iw] = from_compute<T>(acc);
  }
}

// ---- bias ------------------------------------------------------------------------------

// y (n, k, p) += bias[k], a plane (n, k) a block, from plane `first` (the flat kernel this
// replaced took a 64-bit (e / p) % k an element, and half the copy bandwidth with it).
template <class T>
__global__ void __launch_bounds__(kThreads) bias_add_kernel(T *__restrict__ y, const T *__restrict__ bias,
                                                            int64_t first, int64_t k, int64_t p) {
  const int64_t plane = first + blockIdx.x;
  const Compute<T> b = to_compute(bias[plane % k]);
  T *yp = y + plane * p;
  for (int64_t i = threadIdx.x; i < p; i += kThreads) yp[i] = from_compute<T>(to_compute(yp[i]) + b);
}

// ---- pools -----------------------------------------------------------------------------

template <class T>
__global__ void __launch_bounds__(kThreads) max_pool_kernel(T *y, int64_t *idx, const T *x, Pool2dArgs a) {
  const int64_t total = a.planes * a.ho * a.wo;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ow = e % a.wo, oh = (e / a.wo) % a.ho, pl = e / (a.wo * a.ho);
    const T *xp = x + pl * a.h * a.w;
    int64_t best = oh * a.stride * a.w + ow * a.stride;
    Compute<T> bv = to_compute(xp[best]);
    for (int64_t i = 0; i < a.kernel; i++)
      for (int64_t j = 0; j < a.kernel; j++) {
        const int64_t at = (oh * a.stride + i) * a.w + ow * a.stride + j;
        const Compute<T> v = to_compute(xp[at]);
        if (v > bv || (isnan(v) && !isnan(bv))) { best = at; bv = v; }  // the first NaN wins
      }
    y[e] = xp[best];
    idx[e] = best;
  }
}

// The windows o (along one axis) that hold input position i: o * stride <= i < o * stride + kernel.
__device__ __forceinline__ void windows_of(int64_t i, int64_t kernel, int64_t stride, int64_t out, int64_t &lo,
                                           int64_t &hi) {
  lo = i < kernel ? 0 : (i - kernel) / stride + 1;
  hi = min(i / stride + 1, out);
}

// dx (written): per input pixel, the sum over the windows that hold it of dy (MAX: where the
// window's argmax is the pixel; AVG: times 1 / kernel^2), in (oh, ow) order.
template <class T, bool MAX>
__global__ void __launch_bounds__(kThreads) pool_backward_kernel(T *dx, const int64_t *idx, const T *dy, Pool2dArgs a) {
  const int64_t total = a.planes * a.h * a.w;
  const Compute<T> scale = Compute<T>(1) / Compute<T>(a.kernel * a.kernel);
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t iw = e % a.w, ih = (e / a.w) % a.h, pl = e / (a.w * a.h), at = ih * a.w + iw;
    int64_t oh0, oh1, ow0, ow1;
    windows_of(ih, a.kernel, a.stride, a.ho, oh0, oh1);
    windows_of(iw, a.kernel, a.stride, a.wo, ow0, ow1);
    const int64_t base = pl * a.ho * a.wo;
    Compute<T> acc = 0;
    for (int64_t oh = oh0; oh < oh1; oh++)
      for (int64_t ow = ow0; ow < ow1; ow++) {
        const int64_t o = base + oh * a.wo + ow;
        if (MAX) {
          if (idx[o] == at) acc += to_compute(dy[o]);
        } else {
          acc += to_compute(dy[o]) * scale;
        }
      }
    dx[e] = from_compute<T>(acc);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) avg_pool_kernel(T *y, const T *x, Pool2dArgs a) {
  const int64_t total = a.planes * a.ho * a.wo;
  const Compute<T> scale = Compute<T>(1) / Compute<T>(a.kernel * a.kernel);
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ow = e % a.wo, oh = (e / a.wo) % a.ho, pl = e / (a.wo * a.ho);
    const T *xp = x + pl * a.h * a.w + oh * a.stride * a.w + ow * a.stride;
    Compute<T> acc = 0;
    for (int64_t i = 0; i < a.kernel; i++)
      for (int64_t j = 0; j < a.kernel; j++) acc += to_compute(xp[i * a.w + j]);
    y[e] = from_compute<T>(acc * scale);
  }
}

// ---- batch norm ------------------------------------------------------------------------

// Block c: the statistics of channel c (x viewed as (n, C, hw)). Training: mean and biased
// variance in two passes (double accumulation), running stats updated; eval: from the
// running stats. Writes mean[c], invstd[c].
template <class T>
__global__ void __launch_bounds__(kThreads) bn_stats_kernel(T *mean, T *invstd, T *rm, T *rv, const T *x, BatchNormArgs a) {
  const int64_t c = blockIdx.x, m = a.n * a.hw;
  __shared__ double mu_s;
  if (!a.training) {
    if (threadIdx.x == 0) {
      mean[c] = rm[c];
      invstd[c] = from_compute<T>((Compute<T>)(1.0 / sqrt((double)to_compute(rv[c]) + a.eps)));
    }
    return;
  }
  double sum = 0;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) sum += (double)to_compute(x[((j / a.hw) * a.c + c) * a.hw + j % a.hw]);
  sum = block_sum(sum);
  if (threadIdx.x == 0) mu_s = sum / (double)m;
  __syncthreads();
  const double mu = mu_s;
  double sq = 0;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    const double d = (double)to_compute(x[((j / a.hw) * a.c + c) * a.hw + j % a.hw]) - mu;
    sq += d * d;
  }
  sq = block_sum(sq);
  if (threadIdx.x == 0) {
    mean[c] = from_compute<T>((Compute<T>)mu);
    invstd[c] = from_compute<T>((Compute<T>)(1.0 / sqrt(sq / (double)m + a.eps)));
    if (rm) rm[c] = from_compute<T>((Compute<T>)((1 - a.momentum) * (double)to_compute(rm[c]) + a.momentum * mu));
    if (rv)
      rv[c] = from_compute<T>(
          (Compute<T>)((1 - a.momentum) * (double)to_compute(rv[c]) + a.momentum * sq / (double)(m - 1)));
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) bn_normalize_kernel(T *y, const T *x, const T *mean, const T *invstd,
                                                                 const T *gamma, const T *beta, BatchNormArgs a) {
  const int64_t total = a.n * a.c * a.hw;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t c = (e / a.hw) % a.c;
    const Compute<T> g = gamma ? to_compute(gamma[c]) : Compute<T>(1), b = beta ? to_compute(beta[c]) : Compute<T>(0);
    y[e] = from_compute<T>((to_compute(x[e]) - to_compute(mean[c])) * to_compute(invstd[c]) * g + b);
  }
}

// Block c: dbeta[c] = sum dy, dgamma[c] = sum dy * xhat over channel c (double accumulation).
template <class T>
__global__ void __launch_bounds__(kThreads) bn_backward_reduce_kernel(T *dgamma, T *dbeta, const T *dy, const T *x,
                                                                      const T *mean, const T *invstd, BatchNormArgs a) {
  const int64_t c = blockIdx.x, m = a.n * a.hw;
  const double mu = (double)to_compute(mean[c]), is = (double)to_compute(invstd[c]);
  double sdy = 0, sdyx = 0;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    const int64_t at = ((j / a.hw) * a.c + c) * a.hw + j % a.hw;
    const double g = (double)to_compute(dy[at]);
    sdy += g;
    sdyx += g * ((double)to_compute(x[at]) - mu) * is;
  }
  sdy = block_sum(sdy);
  sdyx = block_sum(sdyx);
  if (threadIdx.x == 0) {
    dbeta[c] = from_compute<T>((Compute<T>)sdy);
    dgamma[c] = from_compute<T>((Compute<T>)sdyx);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) bn_backward_dx_kernel(T *dx, const T *dy, const T *x, const T *mean,
                                                                  const T *invstd, const T *gamma, const T *dgamma,
                                                                  const T *dbeta, BatchNormArgs a) {
  const int64_t total = a.n * a.c * a.hw;
  const Compute<T> inv_m = Compute<T>(1) / Compute<T>(a.n * a.hw);
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t c = (e / a.hw) % a.c;
    const Compute<T> is = to_compute(invstd[c]), g = gamma ? to_compute(gamma[c]) : Compute<T>(1);
    Compute<T> d = to_compute(dy[e]);
    if (a.training) {
      const Compute<T> xhat = (to_compute(x[e]) - to_compute(mean[c])) * is;
      d -= (to_compute(dbeta[c]) + xhat * to_compute(dgamma[c])) * inv_m;
    }
    dx[e] = from_compute<T>(g * is * d);
  }
}

// ---- direct kernels ----------------------------------------------------------------------
//
// The direct path: one launch per direction, no column matrix, for convolutions small enough
// that the launches and the column traffic of im2col + GEMM (or cuDNN's setup) dominate, e.g.
// the roadmap CNN's 1->8 and 8->16 3x3 layers. The geometry in 32-bit integers (the path takes
// tensors of fewer than 2^29 elements, direct_geom). Each thread sums its taps in a fixed order:
// results are deterministic.

struct GeomI {
  int c, h, w, k, r, s, ho, wo, sh, sw, ph, pw, dh, dw;
};

// Filters (channels) per thread in the forward (backward data): the accumulators a thread keeps,
// and the shared-memory chunk each block stages: kDirectChunk * C * R * S (forward) or
// kDirectDxChunk * K * R * S (backward data).
constexpr int kDirectChunk = 8, kDirectDxChunk = 4;
// The largest kernel window the weight-gradient kernel keeps accumulators for (5 x 5).
constexpr int kDirectMaxTaps = 25;
// Shared memory a block's chunk of weights may take (the default limit: no opt-in).
constexpr int64_t kDirectSmemBytes = 48 << 10;
// Algo 0 times the direct path only for filters of at most this many weights (K * C * R * S):
// its threads each loop over a whole C * R * S window, so larger filters are im2col's and
// cuDNN's, and timing it there would only cost time once per shape.
constexpr int64_t kDirectAutoWeights = 4096;

// y (written) = conv(x, w) + bias for images [0, n): one thread per output pixel (img, oh, ow)
// and the kDirectChunk filters k0 = blockIdx.y * kDirectChunk.. of it; the chunk's weights in
// shared memory as [crs][j], read by every lane at one address (a broadcast).
template <class T>
__global__ void __launch_bounds__(kThreads) conv_direct_kernel(T *y, const T *x, const T *w, const T *bias, int n,
                                                               GeomI g) {
  using A = Compute<T>;
  constexpr int KT = kDirectChunk;
  extern __shared__ __align__(16) unsigned char direct_smem[];
  A *ws = reinterpret_cast<A *>(direct_smem);
  const int CRS = g.c * g.r * g.s, P = g.ho * g.wo, k0 = (int)blockIdx.y * KT;
  for (int i = threadIdx.x; i < CRS * KT; i += blockDim.x) {
    const int j = i % KT, crs = i / KT;
    ws[i] = k0 + j < g.k ? to_compute(w[(int64_t)(k0 + j) * CRS + crs]) : A(0);
  }
  __syncthreads();
  const int e = (int)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= n * P) return;
  const int img = e / P, p = e % P, oh = p / g.wo, ow = p % g.wo;
  const int ih0 = oh * g.sh - g.ph, iw0 = ow * g.sw - g.pw;
  A acc[KT];
#pragma unroll
  for (int j = 0; j < KT; ++j) acc[j] = 0;
  const T *xi = x + (int64_t)img * g.c * g.h * g.w;
  for (int ch = 0; ch < g.c; ++ch) {
    for (int r = 0; r < g.r; ++r) {
      const int ih = ih0 + r * g.dh;
      if (ih < 0 || ih >= g.h) continue;
      const T *xrow = xi + ((int64_t)ch * g.h + ih) * g.w;
      const A *wr = ws + ((ch * g.r + r) * g.s) * KT;
      for (int s = 0; s < g.s; ++s) {
        const int iw = iw0 + s * g.dw;
        if (iw < 0 || iw >= g.w) continue;
        const A xv = to_compute(xrow[iw]);
#pragma unroll
        for (int j = 0; j < KT; ++j) acc[j] += xv * wr[s * KT + j];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < KT; ++j) {
    const int k = k0 + j;
    if (k < g.k) y[((int64_t)img * g.k + k) * P + p] = from_compute<T>(acc[j] + (bias ? to_compute(bias[k]) : A(0)));
  }
}

// dx (written) from dy for images [0, n): one thread per input pixel (img, ih, iw) and the
// kDirectDxChunk channels c0 = blockIdx.y * kDirectDxChunk.. of it, summing over (k, r, s) the
// taps that read the pixel (col2im_plane_kernel's gather without the column matrix); the chunk's
// weights in shared memory as [k][r][s][j]. UNIT: both strides 1, so a tap's output position
// needs no division. Half the forward's chunk: a conv's input often has fewer channels than its
// output has filters (roadmap conv2: 8 against 16), and the grid has a block per 256 pixels and
// chunk.
template <class T, bool UNIT>
__global__ void __launch_bounds__(kThreads) conv_direct_dx_kernel(T *dx, const T *dy, const T *w, int n, GeomI g) {
  using A = Compute<T>;
  constexpr int CT = kDirectDxChunk;
  extern __shared__ __align__(16) unsigned char direct_smem[];
  A *ws = reinterpret_cast<A *>(direct_smem);
  const int RS = g.r * g.s, KRS = g.k * RS, HW = g.h * g.w, P = g.ho * g.wo, c0 = (int)blockIdx.y * CT;
  for (int i = threadIdx.x; i < KRS * CT; i += blockDim.x) {
    const int j = i % CT, krs = i / CT, k = krs / RS, rs = krs % RS;
    ws[i] = c0 + j < g.c ? to_compute(w[((int64_t)k * g.c + c0 + j) * RS + rs]) : A(0);
  }
  __syncthreads();
  const int e = (int)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= n * HW) return;
  const int img = e / HW, q = e % HW, ih = q / g.w, iw = q % g.w;
  A acc[CT];
#pragma unroll
  for (int j = 0; j < CT; ++j) acc[j] = 0;
  const T *dyi = dy + (int64_t)img * g.k * P;
  for (int k = 0; k < g.k; ++k) {
    for (int r = 0; r < g.r; ++r) {
      const int th = ih + g.ph - r * g.dh;
      if (th < 0 || (!UNIT && th % g.sh)) continue;
      const int oh = UNIT ? th : th / g.sh;
      if (oh >= g.ho) continue;
      const T *dyrow = dyi + ((int64_t)k * g.ho + oh) * g.wo;
      const A *wr = ws + ((k * g.r + r) * g.s) * CT;
      for (int s = 0; s < g.s; ++s) {
        const int tw = iw + g.pw - s * g.dw;
        if (tw < 0 || (!UNIT && tw % g.sw)) continue;
        const int ow = UNIT ? tw : tw / g.sw;
        if (ow >= g.wo) continue;
        const A d = to_compute(dyrow[ow]);
#pragma unroll
        for (int j = 0; j < CT; ++j) acc[j] += d * wr[s * CT + j];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < CT; ++j)
    if (c0 + j < g.c) dx[((int64_t)img * g.c + c0 + j) * HW + q] = from_compute<T>(acc[j]);
}

// The weight gradient in two launches. conv_direct_dw_kernel: block (kc, sp) takes filter
// k = kc / C, channel ch = kc % C and the sp-th of gridDim.y equal spans of the n * P output
// pixels; its threads stride over the span keeping the R * S tap sums dy * x (KR x KS taps when
// known at compile time, else up to kDirectMaxTaps), reduce them over each warp and then over
// the warps in a fixed order into part[(kc * splits + sp) * RS + t]. conv_direct_dw_sum_kernel
// adds the spans in order: dw[kc * RS + t]. Deterministic for a given grid.
template <class T, int KR, int KS>
__global__ void __launch_bounds__(kThreads) conv_direct_dw_kernel(Compute<T> *part, const T *dy, const T *x, int n,
                                                                  GeomI g) {
  using A = Compute<T>;
  constexpr int kTaps = KR > 0 ? KR * KS : kDirectMaxTaps;
  __shared__ A red[kTaps][kThreads / 32];
  const int R = KR > 0 ? KR : g.r, S = KR > 0 ? KS : g.s, RS = R * S;
  const int kc = (int)blockIdx.x, k = kc / g.c, ch = kc % g.c, P = g.ho * g.wo;
  const int total = n * P, span = (total + (int)gridDim.y - 1) / (int)gridDim.y;
  const int e0 = (int)blockIdx.y * span, e1 = min(total, e0 + span);
  A acc[kTaps];
#pragma unroll
  for (int t = 0; t < kTaps; ++t) acc[t] = 0;
  for (int e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
    const int img = e / P, p = e % P, oh = p / g.wo, ow = p % g.wo;
    const A d = to_compute(dy[((int64_t)img * g.k + k) * P + p]);
    const T *xp = x + ((int64_t)img * g.c + ch) * g.h * g.w;
    const int ih0 = oh * g.sh - g.ph, iw0 = ow * g.sw - g.pw;
#pragma unroll
    for (int t = 0; t < kTaps; ++t) {
      if (t >= RS) break;
      const int r = t / S, s = t % S;  // constants where KR > 0
      const int ih = ih0 + r * g.dh, iw = iw0 + s * g.dw;
      if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) acc[t] += d * to_compute(xp[(int64_t)ih * g.w + iw]);
    }
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int t = 0; t < kTaps; ++t) {
    if (t >= RS) break;
    const A v = warp_sum(acc[t]);
    if (lane == 0) red[t][warp] = v;
  }
  __syncthreads();
  if ((int)threadIdx.x < RS) {
    A v = 0;
#pragma unroll
    for (int i = 0; i < kThreads / 32; ++i) v += red[threadIdx.x][i];
    part[((int64_t)kc * gridDim.y + blockIdx.y) * RS + threadIdx.x] = v;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) conv_direct_dw_sum_kernel(T *dw, const Compute<T> *part, int kcrs, int RS,
                                                                      int splits) {
  const int i = (int)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kcrs) return;
  const int kc = i / RS, t = i % RS;
  Compute<T> v = 0;
  for (int sp = 0; sp < splits; ++sp) v += part[((int64_t)kc * splits + sp) * RS + t];
  dw[i] = from_compute<T>(v);
}

// ---- helpers ---------------------------------------------------------------------------

// Calls fn(TypeTag<T>) for float32 / float64; the convolutional family takes no other dtype.
template <class Fn>
void dispatch_f32_f64(DType d, const char *op, Fn &&fn) {
  if (d == DType::F32) return fn(TypeTag<float>{});
  if (d == DType::F64) return fn(TypeTag<double>{});
  fail(Code::DTYPE, "cuda %s: dtype %s is not supported (float32 and float64 are)", op, dtype_name(d));
}

// Images per chunk so that nb * bytes_per_image stays within the column budget (at least 1).
int64_t chunk_images(int64_t n, int64_t bytes_per_image) {
  const int64_t nb = bytes_per_image > 0 ? kColumnBudget / bytes_per_image : n;
  return std::max<int64_t>(1, std::min(n, nb));
}

bool is_pointwise(const Conv2dArgs &a) {  // 1x1, stride 1, no padding: x is its own column matrix
  return a.r == 1 && a.s == 1 && a.stride_h == 1 && a.stride_w == 1 && a.pad_h == 0 && a.pad_w == 0;
}

void gemm(Context &c, DType dtype, void *out, const void *a, bool ta, const void *b, bool tb, int64_t batch, int64_t m,
          int64_t n, int64_t k, int64_t sa, int64_t sb, int64_t sc, double beta) {
  MatmulArgs g;
  g.c = out, g.a = a, g.b = b;
  g.batch = batch, g.m = m, g.n = n, g.k = k;
  g.trans_a = ta, g.trans_b = tb;
  g.beta = beta;
  g.stride_a = sa, g.stride_b = sb, g.stride_c = sc;
  g.dtype = dtype;
  g.allow_tf32 = false;  // convolutions compute in full float32
  launch_matmul(g);
}

template <class Kernel, class... Args>
void launch(Context &c, const char *op, int64_t total, Kernel kernel, Args... args) {
  if (total == 0) return;
  kernel<<<grid_1d(total, kThreads), kThreads, 0, c.stream>>>(args...);
  MT_CUDA_CHECK_LAUNCH(op);
}

// ---- the col2im generations ---------------------------------------------------------------

enum Col2imGeneration : int { COL2IM_GATHER = 1, COL2IM_SHARED = 2 };

// PRODUCTION CHOICE: the col2im that backward data runs when the study hook selects 0. The
// gather until both generations are measured on the GPU (scripts/bench/workloads_cnn.py).
constexpr int kCol2imProduction = COL2IM_GATHER;

// The generation selected by mt_study_col2im: 0 production, else a Col2imGeneration.
std::atomic<int> g_col2im_generation{0};

// Set by mt_study_conv_index64: the plane kernels take 64-bit coordinates whatever the geometry.
std::atomic<bool> g_conv_index64{false};

// Whether the plane kernels run with 32-bit coordinates.
bool narrow_planes(const Geom &g) {
  return plane_fits32(g) && !g_conv_index64.load(std::memory_order_relaxed);
}

// Dynamic shared memory a slab may take: the default per-block limit, so no opt-in is needed.
constexpr int64_t kCol2imSlabBytes = 48 << 10;

// The shared generation's tile for this geometry: tw x th threads (tw the least of 8, 16, 32 that
// covers w, else 32; th as many rows as fill kThreads threads but not past h rounded up to a
// power of two, halved until the slab fits), the slab oht x owt per tap. False when one row of pixels
// still needs more than kCol2imSlabBytes: the gather runs then.
bool col2im_tile(const Geom &g, int64_t elem_bytes, int &tw, int &th, int &oht, int &owt) {
  for (tw = 8; tw < 32 && tw < g.w;) tw *= 2;
  for (th = kThreads / tw; th > 1 && th / 2 >= g.h;) th /= 2;
  owt = (int)((tw + g.sw - 1) / g.sw);
  for (; th >= 1; th /= 2) {
    oht = (int)((th + g.sh - 1) / g.sh);
    if (g.r * g.s * oht * owt * elem_bytes <= kCol2imSlabBytes) return true;
  }
  return false;
}

// dx (written) for images [0, nb) from dcol (nb, CRS, P) with the selected generation.
template <class T>
void col2im(Context &c, T *dx, const T *dcol, int64_t nb, const Geom &g) {
  const int selected = g_col2im_generation.load(std::memory_order_relaxed);
  const int gen = selected == 0 ? kCol2imProduction : selected;
  int tw, th, oht, owt;
  if (gen == COL2IM_SHARED && col2im_tile(g, (int64_t)sizeof(T), tw, th, oht, owt)) {
    const int64_t blocks = nb * g.c * ((g.h + th - 1) / th) * ((g.w + tw - 1) / tw);
    if (blocks == 0) return;
    const size_t bytes = (size_t)(g.r * g.s * oht * owt) * sizeof(T);
    col2im_shared_kernel<T><<<grid_1d(blocks, 1), dim3(tw, th), bytes, c.stream>>>(dx, dcol, nb, g, oht, owt);
    MT_CUDA_CHECK_LAUNCH("conv2d col2im (shared)");
    return;
  }
  const int64_t planes = nb * g.c;
  if (planes == 0 || g.h * g.w == 0) return;
  auto go = [&](auto index) {
    using I = decltype(index);
    const bool unit = g.sh == 1 && g.sw == 1, k3 = g.r == 3 && g.s == 3;
    const auto kernel = k3 ? (unit ? col2im_plane_kernel<T, I, true, 3, 3> : col2im_plane_kernel<T, I, false, 3, 3>)
                           : (unit ? col2im_plane_kernel<T, I, true, 0, 0> : col2im_plane_kernel<T, I, false, 0, 0>);
    plane_launches(planes, [&](int64_t first, unsigned blocks) {
      kernel<<<blocks, plane_block(g.w, g.h), 0, c.stream>>>(dx, dcol, g, first);
    });
  };
  if (narrow_planes(g))
    go(int{});
  else
    go(int64_t{});
  MT_CUDA_CHECK_LAUNCH("conv2d col2im");
}

// col (written) = im2col of images [0, nb) of x: (nb, CRS, P), or (CRS, nb, P) if IMAGE_MINOR.
template <class T, bool IMAGE_MINOR>
void im2col(Context &c, T *col, const T *x, int64_t nb, const Geom &g) {
  const int64_t rows = nb * g.c * g.r * g.s;
  if (rows == 0 || g.ho * g.wo == 0) return;
  const auto kernel = narrow_planes(g) ? im2col_plane_kernel<T, int, IMAGE_MINOR>
                                       : im2col_plane_kernel<T, int64_t, IMAGE_MINOR>;
  plane_launches(rows, [&](int64_t first, unsigned blocks) {
    kernel<<<blocks, plane_block(g.wo, (g.ho + kPlaneUnroll - 1) / kPlaneUnroll), 0, c.stream>>>(
        col, x, nb, g, first);
  });
  MT_CUDA_CHECK_LAUNCH("conv2d im2col");
}

// ---- the im2col path ---------------------------------------------------------------------

void im2col_forward(Context &c, void *y, const void *x, const void *w, const Conv2dArgs &a) {
  dispatch_f32_f64(a.dtype, "conv2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t P = a.ho * a.wo, CRS = a.c * a.r * a.s, hw = a.h * a.w;
    if (is_pointwise(a)) {  // y[n] = w (K, C) @ x[n] (C, HW)
      gemm(c, a.dtype, y, w, false, x, false, a.n, a.k, P, CRS, 0, a.c * hw, a.k * P, 0.0);
      return;
    }
    const int64_t nb = chunk_images(a.n, CRS * P * (int64_t)sizeof(T));
    PoolBuffer col(nb * CRS * P * (int64_t)sizeof(T));
    for (int64_t n0 = 0; n0 < a.n; n0 += nb) {
      const int64_t cnt = std::min(nb, a.n - n0);
      im2col<T, false>(c, col.as<T>(), (const T *)x + n0 * a.c * hw, cnt, geom(a));
      gemm(c, a.dtype, (T *)y + n0 * a.k * P, w, false, col.as<T>(), false, cnt, a.k, P, CRS, 0, CRS * P, a.k * P, 0.0);
    }
  });
}

void im2col_backward_data(Context &c, void *dx, const void *dy, const void *w, const Conv2dArgs &a) {
  dispatch_f32_f64(a.dtype, "conv2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t P = a.ho * a.wo, CRS = a.c * a.r * a.s, hw = a.h * a.w;
    if (is_pointwise(a)) {  // dx[n] (C, HW) = w^T (C, K) @ dy[n] (K, HW)
      gemm(c, a.dtype, dx, w, true, dy, false, a.n, a.c, P, a.k, 0, a.k * P, a.c * hw, 0.0);
      return;
    }
    const int64_t nb = chunk_images(a.n, CRS * P * (int64_t)sizeof(T));
    PoolBuffer dcol(nb * CRS * P * (int64_t)sizeof(T));
    for (int64_t n0 = 0; n0 < a.n; n0 += nb) {
      const int64_t cnt = std::min(nb, a.n - n0);
      gemm(c, a.dtype, dcol.as<T>(), w, true, (const T *)dy + n0 * a.k * P, false, cnt, CRS, P, a.k, 0, a.k * P,
           CRS * P, 0.0);
      col2im(c, (T *)dx + n0 * a.c * hw, (const T *)dcol.as<T>(), cnt, geom(a));
    }
  });
}

void im2col_backward_filter(Context &c, void *dw, const void *dy, const void *x, const Conv2dArgs &a) {
  dispatch_f32_f64(a.dtype, "conv2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t P = a.ho * a.wo, CRS = a.c * a.r * a.s, hw = a.h * a.w;
    const int64_t nb = chunk_images(a.n, (CRS + a.k) * P * (int64_t)sizeof(T));
    PoolBuffer col(nb * CRS * P * (int64_t)sizeof(T)), dyt(nb * a.k * P * (int64_t)sizeof(T));
    // Every chunk's product with beta 0 (the float32 tensor-core GEMM takes no beta): the first
    // into dw, the others into part, added to dw in chunk order.
    PoolBuffer part(nb < a.n ? a.k * CRS * (int64_t)sizeof(T) : 0);
    BroadcastPlan sum;  // dw += part, elementwise over K * CRS
    sum.same = true;
    sum.numel = a.k * CRS;
    for (int64_t n0 = 0; n0 < a.n; n0 += nb) {
      const int64_t cnt = std::min(nb, a.n - n0);
      im2col<T, true>(c, col.as<T>(), (const T *)x + n0 * a.c * hw, cnt, geom(a));
      const int64_t shape[3] = {cnt, a.k, P}, perm[3] = {1, 0, 2};  // (cnt, K, P) -> (K, cnt, P)
      launch_permute(dyt.as<T>(), (const T *)dy + n0 * a.k * P, shape, perm, 3, a.dtype);
      gemm(c, a.dtype, n0 == 0 ? dw : part.as<T>(), dyt.as<T>(), false, col.as<T>(), true, 1, a.k, CRS, cnt * P, 0, 0,
           0, 0.0);
      if (n0 > 0) launch_binary(Binary::ADD, dw, dw, part.as<T>(), sum, a.dtype);
    }
  });
}

// ---- the direct path ------------------------------------------------------------------------

// The geometry in 32-bit integers, or false where the direct kernels cannot take the conv: a
// tensor of 2^29 elements or more (or a stride, padding or dilated extent as large), more than
// kDirectMaxTaps taps a window, or C * R * S or K * R * S weights of kDirectChunk filters or
// channels over kDirectSmemBytes (one rule for both directions, though backward data stages
// chunks of kDirectDxChunk).
bool direct_geom(const Conv2dArgs &a, GeomI &g) {
  const int64_t es = a.dtype == DType::F64 ? 8 : 4, lim = INT_MAX / 4;
  const int64_t v[] = {a.n * a.c * a.h * a.w, a.n * a.k * a.ho * a.wo, a.k * a.c * a.r * a.s, a.stride_h, a.stride_w,
                       a.pad_h, a.pad_w, a.dil_h * a.r, a.dil_w * a.s};
  for (int64_t x : v)
    if (x >= lim) return false;
  if (a.r * a.s > kDirectMaxTaps || kDirectChunk * a.c * a.r * a.s * es > kDirectSmemBytes ||
      kDirectChunk * a.k * a.r * a.s * es > kDirectSmemBytes)
    return false;
  g = {(int)a.c, (int)a.h, (int)a.w, (int)a.k, (int)a.r, (int)a.s, (int)a.ho, (int)a.wo,
       (int)a.stride_h, (int)a.stride_w, (int)a.pad_h, (int)a.pad_w, (int)a.dil_h, (int)a.dil_w};
  return true;
}

void direct_forward(Context &c, void *y, const void *x, const void *w, const void *bias, const Conv2dArgs &a,
                    const GeomI &g) {
  dispatch_f32_f64(a.dtype, "conv2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const dim3 grid((unsigned)((a.n * a.ho * a.wo + kThreads - 1) / kThreads),
                    (unsigned)((a.k + kDirectChunk - 1) / kDirectChunk));
    const size_t smem = (size_t)kDirectChunk * g.c * g.r * g.s * sizeof(Compute<T>);
    conv_direct_kernel<T><<<grid, kThreads, smem, c.stream>>>((T *)y, (const T *)x, (const T *)w, (const T *)bias,
                                                              (int)a.n, g);
    MT_CUDA_CHECK_LAUNCH("conv2d direct");
  });
}

void direct_backward_data(Context &c, void *dx, const void *dy, const void *w, const Conv2dArgs &a, const GeomI &g) {
  dispatch_f32_f64(a.dtype, "conv2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const dim3 grid((unsigned)((a.n * a.h * a.w + kThreads - 1) / kThreads),
                    (unsigned)((a.c + kDirectDxChunk - 1) / kDirectDxChunk));
    const size_t smem = (size_t)kDirectDxChunk * g.k * g.r * g.s * sizeof(Compute<T>);
    const auto kernel = g.sh == 1 && g.sw == 1 ? conv_direct_dx_kernel<T, true> : conv_direct_dx_kernel<T, false>;
    kernel<<<grid, kThreads, smem, c.stream>>>((T *)dx, (const T *)dy, (const T *)w, (int)a.n, g);
    MT_CUDA_CHECK_LAUNCH("conv2d direct backward data");
  });
}

void direct_backward_filter(Context &c, void *dw, const void *dy, const void *x, const Conv2dArgs &a, const GeomI &g) {
  dispatch_f32_f64(a.dtype, "conv2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Compute<T>;
    // About two blocks per SM in all, each span at least 4 pixels a thread.
    const int64_t kc = a.k * a.c, RS = a.r * a.s, pixels = a.n * a.ho * a.wo;
    const int64_t splits = std::max<int64_t>(
        1, std::min<int64_t>((2 * c.sm_count + kc - 1) / kc, pixels / (4 * kThreads)));
    PoolBuffer part(kc * splits * RS * (int64_t)sizeof(A));
    const dim3 grid((unsigned)kc, (unsigned)splits);
    auto run = [&](auto kernel) {
      kernel<<<grid, kThreads, 0, c.stream>>>(part.as<A>(), (const T *)dy, (const T *)x, (int)a.n, g);
    };
    if (a.r == 3 && a.s == 3)
      run(conv_direct_dw_kernel<T, 3, 3>);
    else if (a.r == 5 && a.s == 5)
      run(conv_direct_dw_kernel<T, 5, 5>);
    else
      run(conv_direct_dw_kernel<T, 0, 0>);
    MT_CUDA_CHECK_LAUNCH("conv2d direct backward filter");
    launch(c, "conv2d direct backward filter (sum)", kc * RS, conv_direct_dw_sum_kernel<T>, (T *)dw,
           (const A *)part.as<A>(), (int)(kc * RS), (int)RS, (int)splits);
  });
}

// ---- the choice between the paths ----------------------------------------------------------

enum class Dir : int64_t { FORWARD, DATA, FILTER };

// Milliseconds per run of f: one warm-up (where cuDNN searches its algorithms), one run between
// two events, then the mean of as many more as fill about a millisecond (3 to 20): a small conv
// takes microseconds, where three runs would leave the choice to one launch's jitter.
template <class F>
float time_ms(Context &c, F &&f) {
  f();
  cudaEvent_t start, stop;
  MT_CUDA_CHECK(cudaEventCreate(&start));
  MT_CUDA_CHECK(cudaEventCreate(&stop));
  float ms = 0;
  int reps = 1;
  cudaError_t err = cudaSuccess;
  try {
    for (int round = 0; round < 2 && err == cudaSuccess; round++) {
      if (round == 1) reps = std::max(3, std::min(20, (int)(1.f / std::max(ms, 1e-3f))));
      err = cudaEventRecord(start, c.stream);
      for (int i = 0; i < reps && err == cudaSuccess; i++) f();
      if (err == cudaSuccess) err = cudaEventRecord(stop, c.stream);
      if (err == cudaSuccess) err = cudaEventSynchronize(stop);
      if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, start, stop);
    }
  } catch (...) {
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(stop);
    throw;
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  if (err != cudaSuccess) cuda_fail(err, "timing the conv paths", __FILE__, __LINE__);
  return ms / reps;
}

// Runs one direction of a conv through the im2col path, cuDNN or the direct kernels. algo 1 / 2
// / 3 force a path (cuDNN only for float32 in a build that has it, the direct kernels only where
// direct_geom takes the shape; im2col otherwise); algo 0 times the candidates the first time a
// shape is seen (not while a graph is being recorded: then im2col until a choice is cached) and
// keeps the fastest for that shape and direction for the life of the process. The candidates:
// im2col, cuDNN where it can run, the direct kernels where they can and the filter has at most
// kDirectAutoWeights weights. MT_CONV_LOG set in the environment prints each timing and choice
// to stderr. With deterministic() algo 0 times nothing, since timings differ between runs: the
// first candidate of direct, cuDNN, im2col that takes the shape.
enum Path : int { PATH_IM2COL, PATH_CUDNN, PATH_DIRECT };

template <class Im2col, class Cudnn, class Direct>
void run_conv(Context &c, Dir dir, const Conv2dArgs &a, Im2col &&im2col, Cudnn &&cudnn, Direct &&direct) {
  GeomI g;
  const bool direct_fits = direct_geom(a, g);
  const bool cudnn_fits = cudnn_available() && a.dtype == DType::F32;
  if (a.algo == 1 || (a.algo == 2 && !cudnn_fits) || (a.algo == 3 && !direct_fits)) return im2col();
  if (a.algo == 2) return cudnn();
  if (a.algo == 3) return direct(g);
  const bool try_direct = direct_fits && a.k * a.c * a.r * a.s <= kDirectAutoWeights;
  if (!cudnn_fits && !try_direct) return im2col();
  if (deterministic()) {
    if (try_direct) return direct(g);
    try {
      return cudnn();
    } catch (const Error &) {  // cuDNN cannot run this shape (with a deterministic algorithm)
      return im2col();
    }
  }
  using Key = std::array<int64_t, 16>;
  static std::mutex mu;
  static std::map<Key, int> *chosen = new std::map<Key, int>();  // never destroyed, like the context
  const Key key = {(int64_t)dir, a.n, a.c, a.h, a.w, a.k, a.r, a.s, a.stride_h, a.stride_w, a.pad_h, a.pad_w,
                   a.dil_h, a.dil_w, (int64_t)a.dtype, 0};
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = chosen->find(key);
    if (it != chosen->end()) {
      if (it->second == PATH_CUDNN) return cudnn();
      if (it->second == PATH_DIRECT) return direct(g);
      return im2col();
    }
  }
  if (c.capturing()) return im2col();
  float t[3] = {time_ms(c, im2col), -1, -1};  // ms per path; -1 not timed
  bool written = true;  // every timed run writes the whole output: the last one that succeeded holds it
  if (cudnn_fits) {
    try {
      t[PATH_CUDNN] = time_ms(c, cudnn);
    } catch (const Error &) {  // cuDNN cannot run this shape
      written = false;
    }
  }
  if (try_direct) {
    t[PATH_DIRECT] = time_ms(c, [&] { direct(g); });
    written = true;
  }
  int best = PATH_IM2COL;
  for (int p : {PATH_CUDNN, PATH_DIRECT})
    if (t[p] >= 0 && t[p] < t[best]) best = p;
  {
    std::lock_guard<std::mutex> lock(mu);
    (*chosen)[key] = best;
  }
  static const bool log = std::getenv("MT_CONV_LOG") != nullptr;
  if (log) {
    static const char *const kDir[] = {"forward", "backward data", "backward filter"};
    static const char *const kPath[] = {"im2col", "cuDNN", "direct"};
    std::fprintf(stderr,
                 "minitorch conv2d %s: x %lldx%lldx%lldx%lld, w %lldx%lldx%lldx%lld, stride %lldx%lld, pad %lldx%lld, "
                 "dil %lldx%lld, %s: im2col %.4f ms, cuDNN %.4f ms, direct %.4f ms (-1: not timed) -> %s\n",
                 kDir[(int)dir], (long long)a.n, (long long)a.c, (long long)a.h, (long long)a.w, (long long)a.k,
                 (long long)a.c, (long long)a.r, (long long)a.s, (long long)a.stride_h, (long long)a.stride_w,
                 (long long)a.pad_h, (long long)a.pad_w, (long long)a.dil_h, (long long)a.dil_w, dtype_name(a.dtype),
                 t[PATH_IM2COL], t[PATH_CUDNN], t[PATH_DIRECT], kPath[best]);
  }
  if (!written) im2col();
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------

void conv2d(Context &c, void *y, const void *x, const void *w, const void *bias, const Conv2dArgs &a) {
  NvtxRange range("conv2d");
  MT_CHECK(y && x && w, INVALID_ARGUMENT, "cuda conv2d: null buffer (y=%p, x=%p, w=%p)", y, x, w);
  if (a.n * a.k * a.ho * a.wo == 0) return;
  auto add_bias = [&] {  // the direct kernel adds it in its own launch; the other paths after theirs
    if (!bias) return;
    dispatch_f32_f64(a.dtype, "conv2d", [&](auto tag) {
      using T = typename decltype(tag)::type;
      plane_launches(a.n * a.k, [&](int64_t first, unsigned blocks) {
        bias_add_kernel<T><<<blocks, kThreads, 0, c.stream>>>((T *)y, (const T *)bias, first, a.k, a.ho * a.wo);
        MT_CUDA_CHECK_LAUNCH("conv2d bias");
      });
    });
  };
  run_conv(
      c, Dir::FORWARD, a,
      [&] {
        im2col_forward(c, y, x, w, a);
        add_bias();
      },
      [&] {
        cudnn_conv2d(c, y, x, w, a);
        add_bias();
      },
      [&](const GeomI &g) { direct_forward(c, y, x, w, bias, a, g); });
}

void conv2d_backward_data(Context &c, void *dx, const void *dy, const void *w, const Conv2dArgs &a) {
  NvtxRange range("conv2d_backward_data");
  MT_CHECK(dx && dy && w, INVALID_ARGUMENT, "cuda conv2d backward: null buffer (dx=%p, dy=%p, w=%p)", dx, dy, w);
  if (a.n * a.c * a.h * a.w == 0) return;
  run_conv(c, Dir::DATA, a, [&] { im2col_backward_data(c, dx, dy, w, a); },
           [&] { cudnn_conv2d_backward_data(c, dx, dy, w, a); },
           [&](const GeomI &g) { direct_backward_data(c, dx, dy, w, a, g); });
}

void conv2d_backward_filter(Context &c, void *dw, const void *dy, const void *x, const Conv2dArgs &a) {
  NvtxRange range("conv2d_backward_filter");
  MT_CHECK(dw && dy && x, INVALID_ARGUMENT, "cuda conv2d backward: null buffer (dw=%p, dy=%p, x=%p)", dw, dy, x);
  if (a.k * a.c * a.r * a.s == 0) return;
  if (a.n * a.ho * a.wo == 0) {  // an empty sum
    launch_fill(dw, a.k * a.c * a.r * a.s, a.dtype, 0.0);
    return;
  }
  run_conv(c, Dir::FILTER, a, [&] { im2col_backward_filter(c, dw, dy, x, a); },
           [&] { cudnn_conv2d_backward_filter(c, dw, dy, x, a); },
           [&](const GeomI &g) { direct_backward_filter(c, dw, dy, x, a, g); });
}

void max_pool2d(Context &c, void *y, int64_t *indices, const void *x, const Pool2dArgs &a) {
  NvtxRange range("max_pool2d");
  dispatch_f32_f64(a.dtype, "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(c, "max_pool2d", a.planes * a.ho * a.wo, max_pool_kernel<T>, (T *)y, indices, (const T *)x, a);
  });
}

void max_pool2d_backward(Context &c, void *dx, const int64_t *indices, const void *dy, const Pool2dArgs &a) {
  NvtxRange range("max_pool2d_backward");
  dispatch_f32_f64(a.dtype, "max_pool2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(c, "max_pool2d backward", a.planes * a.h * a.w, pool_backward_kernel<T, true>, (T *)dx, indices,
           (const T *)dy, a);
  });
}

void avg_pool2d(Context &c, void *y, const void *x, const Pool2dArgs &a) {
  NvtxRange range("avg_pool2d");
  dispatch_f32_f64(a.dtype, "avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(c, "avg_pool2d", a.planes * a.ho * a.wo, avg_pool_kernel<T>, (T *)y, (const T *)x, a);
  });
}

void avg_pool2d_backward(Context &c, void *dx, const void *dy, const Pool2dArgs &a) {
  NvtxRange range("avg_pool2d_backward");
  dispatch_f32_f64(a.dtype, "avg_pool2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(c, "avg_pool2d backward", a.planes * a.h * a.w, pool_backward_kernel<T, false>, (T *)dx,
           (const int64_t *)nullptr, (const T *)dy, a);
  });
}

void batch_norm(Context &c, void *y, void *mean, void *invstd, const void *x, const void *gamma, const void *beta,
                void *running_mean, void *running_var, const BatchNormArgs &a) {
  NvtxRange range("batch_norm");
  MT_CHECK(a.c <= INT_MAX, INVALID_ARGUMENT, "cuda batch_norm: %lld channels", (long long)a.c);
  if (a.c == 0) return;
  dispatch_f32_f64(a.dtype, "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    bn_stats_kernel<T><<<(unsigned)a.c, kThreads, 0, c.stream>>>((T *)mean, (T *)invstd, (T *)running_mean,
                                                                  (T *)running_var, (const T *)x, a);
    MT_CUDA_CHECK_LAUNCH("batch_norm statistics");
    launch(c, "batch_norm", a.n * a.c * a.hw, bn_normalize_kernel<T>, (T *)y, (const T *)x, (const T *)mean,
           (const T *)invstd, (const T *)gamma, (const T *)beta, a);
  });
}

void batch_norm_backward(Context &c, void *dx, void *dgamma, void *dbeta, const void *dy, const void *x,
                         const void *mean, const void *invstd, const void *gamma, const BatchNormArgs &a) {
  NvtxRange range("batch_norm_backward");
  MT_CHECK(a.c <= INT_MAX, INVALID_ARGUMENT, "cuda batch_norm backward: %lld channels", (long long)a.c);
  MT_CHECK(dgamma && dbeta, INVALID_ARGUMENT, "cuda batch_norm backward: null buffer (dgamma=%p, dbeta=%p)", dgamma,
           dbeta);
  if (a.c == 0) return;
  dispatch_f32_f64(a.dtype, "batch_norm backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    bn_backward_reduce_kernel<T><<<(unsigned)a.c, kThreads, 0, c.stream>>>(
        (T *)dgamma, (T *)dbeta, (const T *)dy, (const T *)x, (const T *)mean, (const T *)invstd, a);
    MT_CUDA_CHECK_LAUNCH("batch_norm backward reduction");
    if (dx)
      launch(c, "batch_norm backward", a.n * a.c * a.hw, bn_backward_dx_kernel<T>, (T *)dx, (const T *)dy,
             (const T *)x, (const T *)mean, (const T *)invstd, (const T *)gamma, (const T *)dgamma,
             (const T *)dbeta, a);
  });
}

}  // namespace cuda
}  // namespace mt

// ---- the study hooks --------------------------------------------------------------------------
//
// mt_study_col2im: an internal hook for scripts/bench/workloads_cnn.py and
// tests/gpu/test_cnn_parity.py, NOT part of the public API (no stability promise; exported only
// because they drive it through ctypes). It picks the col2im that every later backward data of
// the im2col path (mt_set_conv_algo 1, or 0 when it picks im2col) runs, until the next call:
//   variant 0  production (kCol2imProduction: the gather)
//   variant 1  the gather (col2im_plane_kernel)
//   variant 2  shared-memory tiles (col2im_shared_kernel; the gather where the slab does not fit)
// Returns 0 (MT_OK) or MT_ERR_INVALID_ARGUMENT for another variant (the selection is then left as
// it was). It leaves mt_last_error() alone. Not thread-safe against launches running
// concurrently in other threads (they may see either selection). The per-shape timing of algo 0
// is cached across selections: force the path with mt_set_conv_algo(1) when comparing them.
extern "C" MT_API int64_t mt_study_col2im(int64_t variant) {
  if (variant < 0 || variant > mt::cuda::COL2IM_SHARED) return (int64_t)mt::Code::INVALID_ARGUMENT;
  mt::cuda::g_col2im_generation.store((int)variant, std::memory_order_relaxed);
  return 0;
}

// mt_study_conv_index64: an internal hook for tests/gpu/test_cnn_parity.py, NOT part of the public
// API (as mt_study_col2im). on = 1: every later im2col and gather col2im runs its plane kernel with
// 64-bit coordinates, the instantiation only geometries past plane_fits32 take otherwise (a plane,
// an extent, a stride or a padding of 2^30), so the tests can run it on small shapes; on = 0:
// back to the choice by geometry. Returns 0 (MT_OK) or MT_ERR_INVALID_ARGUMENT for another
// value; leaves mt_last_error() alone. Not thread-safe against launches in other threads.
extern "C" MT_API int64_t mt_study_conv_index64(int64_t on) {
  if (on != 0 && on != 1) return (int64_t)mt::Code::INVALID_ARGUMENT;
  mt::cuda::g_conv_index64.store(on == 1, std::memory_order_relaxed);
  return 0;
}
