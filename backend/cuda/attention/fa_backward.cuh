// fa_backward.cuh - the FlashAttention-2 backward kernels, one template each for every
// generation (the policy of fa_common.cuh) and both dQ strategies.
//
//   dvec (B, H, Tq) f32 = rowsum(dO * O)                               flash_bwd_dot_kernel
//   per key tile of BC rows (one CTA), over the query tiles that see it:  flash_bwd_kv_kernel
//     S^T = K Q^T, P^T = exp(scale S^T - lse), dP^T = V dO^T, dS^T = P^T (dP^T - dvec)
//     dV += P^T dO, dK += dS^T Q (registers, f32; dK scaled at the end)
//     ATOMIC: dS goes through shared memory and dQ_acc += dS K by f32 atomics (red.add)
//   dQ (T) = scale * dQ_acc                                              flash_bwd_dq_convert_kernel
//   or, without atomics, a second pass per query tile (one CTA) over the key tiles:
//     dQ = scale * sum_j dS_j K_j, S and dP recomputed                   flash_bwd_dq_kernel
// Each warp of the kv kernel owns 16 key rows (BC = 16 NW) and computes the transposed
// products directly, so P^T and dS^T are A fragments of the dV / dK products without a
// shuffle; the dq kernel is the forward's shape (16 query rows per warp). No T x T buffer:
// what lives in device memory besides the inputs and outputs is dvec and, for ATOMIC,
// dQ_acc (B, H, Tq, D) f32.
#pragma once

#include "backend/cuda/attention/fa_common.cuh"

namespace mt {
namespace cuda {
namespace fa {

struct BwdParams {
  void *dq, *dk, *dv;           // (B, H, Tq, D), (B, H, Tk, D) x 2 of T; written
  float *dq_acc;                // (B, H, Tq, D) f32, zeroed before the kv kernel (ATOMIC)
  const void *q, *k, *v, *o, *dout;
  const float *lse, *dvec;      // (B, H, Tq)
  int tq, tk;
  float scale, scale_log2;
  int causal;
};

template <class T>
__device__ __forceinline__ uint16_t to_bits(float x) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  else return __half_as_ushort(__float2half_rn(x));
}
template <class T>
__device__ __forceinline__ float from_bits(uint16_t x) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) return __bfloat162float(__ushort_as_bfloat16(x));
  else return __half2float(__ushort_as_half(x));
}

// dvec[r] = sum_d dout[r, d] * o[r, d]: D / 8 threads per row, 16 bytes each.
template <class T, int D>
__global__ void flash_bwd_dot_kernel(float *dvec, const T *o, const T *dout, int64_t rows) {
  constexpr int G = D / 8;
  const int64_t gid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t row = gid / G;
  const int c = (int)(gid % G) * 8;
  float acc = 0.f;
  if (row < rows) {
    const int4 a = *reinterpret_cast<const int4 *>(o + row * D + c);
    const int4 b = *reinterpret_cast<const int4 *>(dout + row * D + c);
    const uint16_t *ua = reinterpret_cast<const uint16_t *>(&a), *ub = reinterpret_cast<const uint16_t *>(&b);
#pragma unroll
    for (int i = 0; i < 8; i++) acc = fmaf(from_bits<T>(ua[i]), from_bits<T>(ub[i]), acc);
  }
#pragma unroll
  for (int s = G / 2; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
  if (row < rows && c == 0) dvec[row] = acc;
}

// dq[i] = scale * dq_acc[i]
template <class T>
__global__ void flash_bwd_dq_convert_kernel(T *dq, const float *dq_acc, int64_t n, float scale) {
  for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 2; i < n; i += (int64_t)gridDim.x * blockDim.x * 2)
    store2<T>(dq + i, dq_acc[i] * scale, dq_acc[i + 1] * scale);  // n is even (D is)
}

template <int D, int BR, int BC, int NW, class P, bool ATOMIC>
struct BwdKvShape {
  static constexpr int threads = NW * 32;
  static constexpr int elems = 2 * BC * D + 2 * P::stages * BR * D + (ATOMIC ? BR * BC : 0);
  static constexpr int smem_bytes = elems * 2 + 2 * P::stages * BR * 4;
  static_assert(BC == 16 * NW, "each warp owns 16 key rows");
  static_assert(BR % 16 == 0 && NW % (BR / 16) == 0, "the dQ product splits BR / 16 row blocks over the warps");
  static constexpr int mq = BR / 16, wn = NW / mq, nq = D / 8 / wn;  // dQ: n8 tiles per warp
  static_assert(nq % 2 == 0 && nq * wn * 8 == D, "dQ n tiles must pair up");
};

template <class T, int D, int BR, int BC, int NW, class P, bool ATOMIC>
__global__ void __launch_bounds__(NW * 32) flash_bwd_kv_kernel(BwdParams p) {
  using S = BwdKvShape<D, BR, BC, NW, P, ATOMIC>;
  constexpr int NT = S::threads, ST = P::stages;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t *sK = smem;                     // BC x D
  uint16_t *sV = sK + BC * D;              // BC x D
  uint16_t *sQ = sV + BC * D;              // ST x (BR x D)
  uint16_t *sdO = sQ + ST * BR * D;        // ST x (BR x D)
  uint16_t *sdS = sdO + ST * BR * D;       // BR x BC (ATOMIC)
  float *sL = reinterpret_cast<float *>(sdS + (ATOMIC ? BR * BC : 0));  // ST x BR: lse * log2(e)
  float *sD = sL + ST * BR;                                             // ST x BR: dvec

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int k0 = blockIdx.x * BC;
  const int64_t bh = blockIdx.y;
  const uint16_t *gq = static_cast<const uint16_t *>(p.q) + bh * p.tq * D;
  const uint16_t *gdo = static_cast<const uint16_t *>(p.dout) + bh * p.tq * D;
  const uint16_t *gk = static_cast<const uint16_t *>(p.k) + bh * p.tk * D;
  const uint16_t *gv = static_cast<const uint16_t *>(p.v) + bh * p.tk * D;
  const float *glse = p.lse + bh * p.tq, *gdvec = p.dvec + bh * p.tq;
  const int off = p.tk - p.tq;

  const int n_q = (p.tq + BR - 1) / BR;
  int i_begin = 0;
  if (p.causal) {
    const int first = k0 - off;  // the first query row that sees key k0
    i_begin = first <= 0 ? 0 : first / BR;
  }

  auto load_q_tile = [&](int i, int stage) {
    load_tile<BR, D, NT, P>(sQ + stage * BR * D, gq, i * BR, p.tq);
    load_tile<BR, D, NT, P>(sdO + stage * BR * D, gdo, i * BR, p.tq);
    for (int r = threadIdx.x; r < BR; r += NT) {
      const int row = i * BR + r;
      sL[stage * BR + r] = row < p.tq ? glse[row] * kLog2e : INFINITY;
      sD[stage * BR + r] = row < p.tq ? gdvec[row] : 0.f;
    }
  };

  load_tile<BC, D, NT, P>(sK, gk, k0, p.tk);
  load_tile<BC, D, NT, P>(sV, gv, k0, p.tk);
  if constexpr (P::cp_async) {
    if (i_begin < n_q) load_q_tile(i_begin, 0);
    cp_async_commit();
  }

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.f;
  const int key_base = k0 + warp * 16;  // the warp's first key row

  for (int i = i_begin; i < n_q; i++) {
    const int st = ST == 2 ? ((i - i_begin) & 1) : 0;
    if constexpr (P::cp_async) {
      cp_async_wait<0>();
      __syncthreads();
      if (i + 1 < n_q) load_q_tile(i + 1, st ^ 1);
      cp_async_commit();
    } else {
      __syncthreads();
      load_q_tile(i, 0);
      __syncthreads();
    }
    const uint16_t *cQ = sQ + st * BR * D, *cdO = sdO + st * BR * D;
    const float *cL = sL + st * BR, *cD = sD + st * BR;
    const int q0 = i * BR;

    // S^T = K Q^T and dP^T = V dO^T (the warp's 16 keys x BR queries)
    float s[BR / 8][4], dp[BR / 8][4];
#pragma unroll
    for (int n = 0; n < BR / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
      uint32_t ka[4], va[4];
      load_a<D, P>(ka, sK, warp * 16, kk * 16);
      load_a<D, P>(va, sV, warp * 16, kk * 16);
#pragma unroll
      for (int nn = 0; nn < BR / 16; nn++) {
        uint32_t b[2][2];
        load_b2<D, P>(b, cQ, nn * 16, kk * 16);
        mma_16816<T>(s[2 * nn], ka, b[0]);
        mma_16816<T>(s[2 * nn + 1], ka, b[1]);
        load_b2<D, P>(b, cdO, nn * 16, kk * 16);
        mma_16816<T>(dp[2 * nn], va, b[0]);
        mma_16816<T>(dp[2 * nn + 1], va, b[1]);
      }
    }

    // P^T into s, dS^T into dp
    const bool need_mask = q0 + BR > p.tq || k0 + BC > p.tk || (p.causal && q0 + off < k0 + BC - 1);
#pragma unroll
    for (int n = 0; n < BR / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int ql = n * 8 + 2 * t + (e & 1);
        float pv = exp2f(fmaf(s[n][e], p.scale_log2, -cL[ql]));
        if (need_mask) {
          const int key = key_base + g + (e >> 1) * 8, q = q0 + ql;
          if (q >= p.tq || key >= p.tk || (p.causal && key > q + off)) pv = 0.f;
        }
        s[n][e] = pv;
        dp[n][e] = pv * (dp[n][e] - cD[ql]);
      }

    // dV += P^T dO, dK += dS^T Q (A from the accumulators, B k-major)
#pragma unroll
    for (int kq = 0; kq < BR / 16; kq++) {
      uint32_t pa[4], da[4];
      pa[0] = pack2<T>(s[2 * kq][0], s[2 * kq][1]);
      pa[1] = pack2<T>(s[2 * kq][2], s[2 * kq][3]);
      pa[2] = pack2<T>(s[2 * kq + 1][0], s[2 * kq + 1][1]);
      pa[3] = pack2<T>(s[2 * kq + 1][2], s[2 * kq + 1][3]);
      da[0] = pack2<T>(dp[2 * kq][0], dp[2 * kq][1]);
      da[1] = pack2<T>(dp[2 * kq][2], dp[2 * kq][3]);
      da[2] = pack2<T>(dp[2 * kq + 1][0], dp[2 * kq + 1][1]);
      da[3] = pack2<T>(dp[2 * kq + 1][2], dp[2 * kq + 1][3]);
#pragma unroll
      for (int dn = 0; dn < D / 16; dn++) {
        uint32_t b[2][2];
        load_b2_trans<D, P>(b, cdO, kq * 16, dn * 16);
        mma_16816<T>(dv[2 * dn], pa, b[0]);
        mma_16816<T>(dv[2 * dn + 1], pa, b[1]);
        load_b2_trans<D, P>(b, cQ, kq * 16, dn * 16);
        mma_16816<T>(dk[2 * dn], da, b[0]);
        mma_16816<T>(dk[2 * dn + 1], da, b[1]);
      }
    }

    if constexpr (ATOMIC) {
      // dS (BR x BC, query-major) to shared, then dQ_acc += dS K with the warps split over
      // (16-row block, D / wn columns)
#pragma unroll
      for (int n = 0; n < BR / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          sdS[tile_off<BC, P::swizzle>(n * 8 + 2 * t + (e & 1), warp * 16 + g + (e >> 1) * 8)] = to_bits<T>(dp[n][e]);
      __syncthreads();
      constexpr int NQ = S::nq;
      const int mq = warp % S::mq, nb = (warp / S::mq) * NQ * 8;
      float dq[NQ][4];
#pragma unroll
      for (int n = 0; n < NQ; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < BC / 16; kk++) {
        uint32_t a[4];
        load_a<BC, P>(a, sdS, mq * 16, kk * 16);
#pragma unroll
        for (int nn = 0; nn < NQ / 2; nn++) {
          uint32_t b[2][2];
          load_b2_trans<D, P>(b, sK, kk * 16, nb + nn * 16);
          mma_16816<T>(dq[2 * nn], a, b[0]);
          mma_16816<T>(dq[2 * nn + 1], a, b[1]);
        }
      }
      float *gacc = p.dq_acc + bh * p.tq * D;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int row = q0 + mq * 16 + g + 8 * h;
        if (row < p.tq) {
#pragma unroll
          for (int n = 0; n < NQ; n++) {
            float *dst = gacc + (int64_t)row * D + nb + n * 8 + 2 * t;
            atomicAdd(dst, dq[n][2 * h]);
            atomicAdd(dst + 1, dq[n][2 * h + 1]);
          }
        }
      }
    }
  }
  if constexpr (P::cp_async) cp_async_wait<0>();

  T *gdk = static_cast<T *>(p.dk) + bh * p.tk * D;
  T *gdv = static_cast<T *>(p.dv) + bh * p.tk * D;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = key_base + g + 8 * h;
    if (row < p.tk) {
#pragma unroll
      for (int n = 0; n < D / 8; n++) {
        store2<T>(gdk + (int64_t)row * D + n * 8 + 2 * t, dk[n][2 * h] * p.scale, dk[n][2 * h + 1] * p.scale);
        store2<T>(gdv + (int64_t)row * D + n * 8 + 2 * t, dv[n][2 * h], dv[n][2 * h + 1]);
      }
    }
  }
}

template <int D, int BR, int BC, int NW, class P>
struct BwdDqShape {
  static constexpr int threads = NW * 32;
  static constexpr int smem_bytes = (2 * BR * D + 2 * P::stages * BC * D) * 2;
  static_assert(BR == 16 * NW, "each warp owns 16 query rows");
};

// The dQ pass without atomics: one CTA per BR query rows, over the key tiles they see.
template <class T, int D, int BR, int BC, int NW, class P>
__global__ void __launch_bounds__(NW * 32) flash_bwd_dq_kernel(BwdParams p) {
  constexpr int NT = NW * 32, ST = P::stages;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t *sQ = smem;               // BR x D
  uint16_t *sdO = sQ + BR * D;       // BR x D
  uint16_t *sK = sdO + BR * D;       // ST x (BC x D)
  uint16_t *sV = sK + ST * BC * D;   // ST x (BC x D)

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int qtile = p.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
  const int q0 = qtile * BR;
  const int64_t bh = blockIdx.y;
  const uint16_t *gq = static_cast<const uint16_t *>(p.q) + bh * p.tq * D;
  const uint16_t *gdo = static_cast<const uint16_t *>(p.dout) + bh * p.tq * D;
  const uint16_t *gk = static_cast<const uint16_t *>(p.k) + bh * p.tk * D;
  const uint16_t *gv = static_cast<const uint16_t *>(p.v) + bh * p.tk * D;
  const int off = p.tk - p.tq;

  int n_kv = (p.tk + BC - 1) / BC;
  if (p.causal) {
    const int last_key = q0 + BR - 1 + off;
    n_kv = min(n_kv, last_key < 0 ? 0 : last_key / BC + 1);
  }
  const int row_base = q0 + warp * 16;
  float lse2[2], dd[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = row_base + g + 8 * h;
    lse2[h] = row < p.tq ? p.lse[bh * p.tq + row] * kLog2e : INFINITY;
    dd[h] = row < p.tq ? p.dvec[bh * p.tq + row] : 0.f;
  }

  load_tile<BR, D, NT, P>(sQ, gq, q0, p.tq);
  load_tile<BR, D, NT, P>(sdO, gdo, q0, p.tq);
  if constexpr (P::cp_async) {
    if (n_kv > 0) {
      load_tile<BC, D, NT, P>(sK, gk, 0, p.tk);
      load_tile<BC, D, NT, P>(sV, gv, 0, p.tk);
    }
    cp_async_commit();
  }

  float dq[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.f;

  for (int j = 0; j < n_kv; j++) {
    const int k0 = j * BC;
    const int st = ST == 2 ? (j & 1) : 0;
    if constexpr (P::cp_async) {
      cp_async_wait<0>();
      __syncthreads();
      if (j + 1 < n_kv) {
        load_tile<BC, D, NT, P>(sK + (st ^ 1) * BC * D, gk, k0 + BC, p.tk);
        load_tile<BC, D, NT, P>(sV + (st ^ 1) * BC * D, gv, k0 + BC, p.tk);
      }
      cp_async_commit();
    } else {
      __syncthreads();
      load_tile<BC, D, NT, P>(sK, gk, k0, p.tk);
      load_tile<BC, D, NT, P>(sV, gv, k0, p.tk);
      __syncthreads();
    }
    const uint16_t *cK = sK + st * BC * D, *cV = sV + st * BC * D;

    float s[BC / 8][4], dp[BC / 8][4];
#pragma unroll
    for (int n = 0; n < BC / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
      uint32_t qa[4], oa[4];
      load_a<D, P>(qa, sQ, warp * 16, kk * 16);
      load_a<D, P>(oa, sdO, warp * 16, kk * 16);
#pragma unroll
      for (int nn = 0; nn < BC / 16; nn++) {
        uint32_t b[2][2];
        load_b2<D, P>(b, cK, nn * 16, kk * 16);
        mma_16816<T>(s[2 * nn], qa, b[0]);
        mma_16816<T>(s[2 * nn + 1], qa, b[1]);
        load_b2<D, P>(b, cV, nn * 16, kk * 16);
        mma_16816<T>(dp[2 * nn], oa, b[0]);
        mma_16816<T>(dp[2 * nn + 1], oa, b[1]);
      }
    }

    const bool need_mask = k0 + BC > p.tk || (p.causal && k0 + BC - 1 > q0 + off);
#pragma unroll
    for (int n = 0; n < BC / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float pv = exp2f(fmaf(s[n][e], p.scale_log2, -lse2[e >> 1]));
        if (need_mask) {
          const int row = row_base + g + (e >> 1) * 8, col = k0 + n * 8 + 2 * t + (e & 1);
          if (col >= p.tk || (p.causal && col > row + off)) pv = 0.f;
        }
        s[n][e] = pv * (dp[n][e] - dd[e >> 1]);  // dS
      }

    // dQ += dS K
#pragma unroll
    for (int kk = 0; kk < BC / 16; kk++) {
      uint32_t a[4];
      a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dn = 0; dn < D / 16; dn++) {
        uint32_t b[2][2];
        load_b2_trans<D, P>(b, cK, kk * 16, dn * 16);
        mma_16816<T>(dq[2 * dn], a, b[0]);
        mma_16816<T>(dq[2 * dn + 1], a, b[1]);
      }
    }
  }
  if constexpr (P::cp_async) cp_async_wait<0>();

  T *gdq = static_cast<T *>(p.dq) + bh * p.tq * D;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = row_base + g + 8 * h;
    if (row < p.tq) {
#pragma unroll
      for (int n = 0; n < D / 8; n++)
        store2<T>(gdq + (int64_t)row * D + n * 8 + 2 * t, dq[n][2 * h] * p.scale, dq[n][2 * h + 1] * p.scale);
    }
  }
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
