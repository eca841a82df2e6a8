// fa_forward.cuh - the FlashAttention-2 forward kernel, one template for every generation.
//
//   o (B, H, Tq, D) = softmax(scale * q k^T + causal mask) v,  lse (B, H, Tq) f32 = the
//   natural-log log-sum-exp of each row of scale * q k^T (+inf for a row with no key)
//   q (B, H, Tq, D), k, v (B, H, Tk, D); the causal mask hides key j from query i when
//   j > i + (Tk - Tq) (aligned at the end, as the composed path).
//
// A CTA takes BR query rows of one (b, h) and walks the key/value tiles of BC rows; each of
// its NW warps owns WM = BR / (16 NW) blocks of 16 query rows, keeps their Q fragments and
// their O accumulators (16 x D f32 each) in registers, and runs the online softmax on its
// rows: m (the running max, in log2 units: scores times scale * log2(e)) and l (the
// running sum, per thread, reduced over the row group at the end). Causal: key tiles past
// the last row's diagonal are never loaded; only tiles that cross the diagonal (or the
// sequence tail) pay for the mask.
#pragma once

#include "backend/cuda/attention/fa_common.cuh"

namespace mt {
namespace cuda {
namespace fa {

struct FwdParams {
  void *o;            // (B, H, Tq, D) of T
  float *lse;         // (B, H, Tq)
  const void *q;      // (B, H, Tq, D)
  const void *k, *v;  // (B, H, Tk, D)
  int tq, tk;
  float scale_log2;   // softmax scale * log2(e)
  int causal;
};

template <int D, int BR, int BC, int NW, class P>
struct FwdShape {
  static constexpr int threads = NW * 32;
  static constexpr int wm = BR / (16 * NW);  // 16-row blocks per warp
  static constexpr int smem_elems = BR * D + 2 * P::stages * BC * D;
  static constexpr int smem_bytes = smem_elems * 2;
  static_assert(wm >= 1 && wm * 16 * NW == BR, "BR must be a multiple of 16 * NW");
  static_assert(BC % 16 == 0 && D % 16 == 0, "tiles are made of 16 x 16 blocks");
};

template <class T, int D, int BR, int BC, int NW, class P>
__global__ void __launch_bounds__(NW * 32) flash_fwd_kernel(FwdParams p) {
  using S = FwdShape<D, BR, BC, NW, P>;
  constexpr int WM = S::wm, NT = S::threads, ST = P::stages;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t *sQ = smem;                   // BR x D
  uint16_t *sK = sQ + BR * D;            // ST x (BC x D)
  uint16_t *sV = sK + ST * BC * D;       // ST x (BC x D)

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // causal rows near the end see the most keys: the heaviest tiles start first
  const int qtile = p.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
  const int q0 = qtile * BR;
  const int64_t bh = blockIdx.y;
  const uint16_t *gq = static_cast<const uint16_t *>(p.q) + bh * p.tq * D;
  const uint16_t *gk = static_cast<const uint16_t *>(p.k) + bh * p.tk * D;
  const uint16_t *gv = static_cast<const uint16_t *>(p.v) + bh * p.tk * D;
  const int off = p.tk - p.tq;  // the causal diagonal: key j visible to query i iff j <= i + off

  int n_kv = (p.tk + BC - 1) / BC;
  if (p.causal) {
    const int last_key = q0 + BR - 1 + off;  // the last key any row of this tile sees
    n_kv = min(n_kv, last_key < 0 ? 0 : last_key / BC + 1);
  }

  float o[WM][D / 8][4];
  float m_run[WM][2], l_run[WM][2];
#pragma unroll
  for (int m = 0; m < WM; m++) {
#pragma unroll
    for (int n = 0; n < D / 8; n++) o[m][n][0] = o[m][n][1] = o[m][n][2] = o[m][n][3] = 0.f;
    m_run[m][0] = m_run[m][1] = -INFINITY;
    l_run[m][0] = l_run[m][1] = 0.f;
  }
  uint32_t qf[WM][D / 16][4];
  const int row_base = q0 + warp * 16 * WM;  // the warp's first query row

  load_tile<BR, D, NT, P>(sQ, gq, q0, p.tq);
  if constexpr (P::cp_async) {
    if (n_kv > 0) {
      load_tile<BC, D, NT, P>(sK, gk, 0, p.tk);
      load_tile<BC, D, NT, P>(sV, gv, 0, p.tk);
    }
    cp_async_commit();
  }

  for (int j = 0; j < n_kv; j++) {
    const int k0 = j * BC;
    const int st = ST == 2 ? (j & 1) : 0;
    if constexpr (P::cp_async) {
      cp_async_wait<0>();  // tile j (and Q) landed
      __syncthreads();     // ... for every thread; and every warp is done with tile j - 1
      if (j + 1 < n_kv) {
        load_tile<BC, D, NT, P>(sK + (st ^ 1) * BC * D, gk, k0 + BC, p.tk);
        load_tile<BC, D, NT, P>(sV + (st ^ 1) * BC * D, gv, k0 + BC, p.tk);
      }
      cp_async_commit();
    } else {
      __syncthreads();  // every warp is done with the previous tile
      load_tile<BC, D, NT, P>(sK, gk, k0, p.tk);
      load_tile<BC, D, NT, P>(sV, gv, k0, p.tk);
      __syncthreads();
    }
    const uint16_t *cK = sK + st * BC * D, *cV = sV + st * BC * D;
    if (j == 0) {
#pragma unroll
      for (int m = 0; m < WM; m++)
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) load_a<D, P>(qf[m][kk], sQ, warp * 16 * WM + m * 16, kk * 16);
    }

    // S = Q K^T (16 rows x BC per block of the warp)
    float s[WM][BC / 8][4];
#pragma unroll
    for (int m = 0; m < WM; m++)
#pragma unroll
      for (int n = 0; n < BC / 8; n++) s[m][n][0] = s[m][n][1] = s[m][n][2] = s[m][n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
      for (int nn = 0; nn < BC / 16; nn++) {
        uint32_t b[2][2];
        load_b2<D, P>(b, cK, nn * 16, kk * 16);
#pragma unroll
        for (int m = 0; m < WM; m++) {
          mma_16816<T>(s[m][2 * nn], qf[m][kk], b[0]);
          mma_16816<T>(s[m][2 * nn + 1], qf[m][kk], b[1]);
        }
      }
    }

    // mask the sequence tail and, on tiles crossing the diagonal, the future
    const bool need_mask = k0 + BC > p.tk || (p.causal && k0 + BC - 1 > q0 + off);
    if (need_mask) {
#pragma unroll
      for (int m = 0; m < WM; m++)
#pragma unroll
        for (int n = 0; n < BC / 8; n++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int row = row_base + m * 16 + g + (e >> 1) * 8;
            const int col = k0 + n * 8 + 2 * t + (e & 1);
            if (col >= p.tk || (p.causal && col > row + off)) s[m][n][e] = -INFINITY;
          }
    }

    // online softmax; P overwrites S
#pragma unroll
    for (int m = 0; m < WM; m++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < BC / 8; n++) mx = fmaxf(mx, fmaxf(s[m][n][2 * h], s[m][n][2 * h + 1]));
        mx = quad_max(mx) * p.scale_log2;
        const float m_new = fmaxf(m_run[m][h], mx);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet
        const float alpha = exp2f(m_run[m][h] - m_use);
        m_run[m][h] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < BC / 8; n++) {
          s[m][n][2 * h] = exp2f(fmaf(s[m][n][2 * h], p.scale_log2, -m_use));
          s[m][n][2 * h + 1] = exp2f(fmaf(s[m][n][2 * h + 1], p.scale_log2, -m_use));
          sum += s[m][n][2 * h] + s[m][n][2 * h + 1];
        }
        l_run[m][h] = l_run[m][h] * alpha + sum;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
          o[m][n][2 * h] *= alpha;
          o[m][n][2 * h + 1] *= alpha;
        }
      }

    // O += P V: P from the accumulators (C -> A), V as k-major B by ldmatrix.trans
#pragma unroll
    for (int kk = 0; kk < BC / 16; kk++) {
      uint32_t pa[WM][4];
#pragma unroll
      for (int m = 0; m < WM; m++) {
        pa[m][0] = pack2<T>(s[m][2 * kk][0], s[m][2 * kk][1]);
        pa[m][1] = pack2<T>(s[m][2 * kk][2], s[m][2 * kk][3]);
        pa[m][2] = pack2<T>(s[m][2 * kk + 1][0], s[m][2 * kk + 1][1]);
        pa[m][3] = pack2<T>(s[m][2 * kk + 1][2], s[m][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dn = 0; dn < D / 16; dn++) {
        uint32_t b[2][2];
        load_b2_trans<D, P>(b, cV, kk * 16, dn * 16);
#pragma unroll
        for (int m = 0; m < WM; m++) {
          mma_16816<T>(o[m][2 * dn], pa[m], b[0]);
          mma_16816<T>(o[m][2 * dn + 1], pa[m], b[1]);
        }
      }
    }
  }
  if constexpr (P::cp_async) cp_async_wait<0>();  // nothing may stay in flight at exit

  // epilogue: O / l, lse = (m + log2 l) ln 2
  T *go = static_cast<T *>(p.o) + bh * p.tq * D;
  float *glse = p.lse + bh * p.tq;
#pragma unroll
  for (int m = 0; m < WM; m++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const float l = quad_sum(l_run[m][h]);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int row = row_base + m * 16 + g + 8 * h;
      if (row < p.tq) {
#pragma unroll
        for (int n = 0; n < D / 8; n++)
          store2<T>(go + (int64_t)row * D + n * 8 + 2 * t, o[m][n][2 * h] * inv, o[m][n][2 * h + 1] * inv);
        if (t == 0) glse[row] = l > 0.f ? (m_run[m][h] + log2f(l)) * kLn2 : INFINITY;
      }
    }
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
