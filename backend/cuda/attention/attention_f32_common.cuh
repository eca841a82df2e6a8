// attention_f32_common.cuh - what the float32 attention kernels share: attention_f32.cu's (the
// FFMA row kernels and the mma.sync tensor-core kernels) and attention_f32_wgmma.cu's (Hopper's
// warpgroup MMA, sm_90a): the kernels' arguments, the heads' offsets, the 3xTF32 A operands of a
// warp's 16 owned rows and their store, and the launchers of the wgmma kernels.
//
// defines: kLog2e, kLn2, Operand, OutOperand, FwdArgs, BwdArgs, head_offset, for_tile,
//          stage_lse_delta, FragA, set_frag, frag_of_c, load_own, store_own, QueryRows,
//          query_rows, RowTerms, dq_rows, SoftmaxStep, softmax_step, store_forward,
//          attention_f32_wgmma_forward / _dq / _dkv
#pragma once

#include <cstdint>

#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/tf32x3.cuh"

namespace mt {
namespace cuda {

class Context;

namespace attn_f32 {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct Operand {
  const float *p;
  int64_t batch, head, row;
};
struct OutOperand {
  float *p;
  int64_t batch, head, row;
};

__device__ __forceinline__ int64_t head_offset(int64_t batch, int64_t head, int bh, int heads) {
  return (int64_t)(bh / heads) * batch + (int64_t)(bh % heads) * head;
}

// f(r, c, x) for each float4 x (columns c .. c + 3 of row r0 + r) of rows [r0, r0 + ROWS) of src
// (row stride `row`; rows >= n read as 0), the block's THREADS threads taking them in turn.
template <int D, int ROWS, int THREADS, class F>
__device__ __forceinline__ void for_tile(const float *src, int64_t row, int r0, int n, F &&f) {
  constexpr int kVec = D / 4;
  for (int e = threadIdx.x; e < ROWS * kVec; e += THREADS) {
    const int r = e / kVec, c = (e % kVec) * 4;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r0 + r < n) x = *reinterpret_cast<const float4 *>(src + (int64_t)(r0 + r) * row + c);
    f(r, c, x);
  }
}

struct FwdArgs {
  Operand q, k, v;
  OutOperand o;
  float *lse;
  int tq, tk, heads;
  float scale2;  // scale * log2(e)
  int causal;
};

struct BwdArgs {
  Operand q, k, v, o, dout;
  OutOperand dq, dk, dv;
  const float *lse;
  float *delta;  // [BH, tq]: dout_i . out_i, written by the dq kernel
  int tq, tk, heads;
  float scale, scale2;
  int causal;
};

// lse (times log2 e) and delta of queries [i0, i0 + n) into lse_s and delta_s (+inf and 0 past
// tq); called by every thread of a block of THREADS.
template <int THREADS>
__device__ __forceinline__ void stage_lse_delta(float *lse_s, float *delta_s, const BwdArgs &a, int bh, int i0,
                                                int n) {
  for (int r = threadIdx.x; r < n; r += THREADS) {
    const bool in = i0 + r < a.tq;
    lse_s[r] = in ? a.lse[(int64_t)bh * a.tq + i0 + r] * kLog2e : INFINITY;
    delta_s[r] = in ? a.delta[(int64_t)bh * a.tq + i0 + r] : 0.f;
  }
}

// An m16n8k8 A operand in both halves: a[0] (row g, col t), a[1] (g + 8, t), a[2] (g, t + 4),
// a[3] (g + 8, t + 4).
struct FragA {
  uint32_t hi[4], lo[4];
};
// f from the values of a[0] .. a[3], split by split_tf32, or by split_tf32_fast (integer
// arithmetic) when kFast.
template <bool kFast = false>
__device__ __forceinline__ void set_frag(FragA &f, float a0, float a1, float a2, float a3) {
  const float a[4] = {a0, a1, a2, a3};
#pragma unroll
  for (int e = 0; e < 4; e++) {
    const Tf32 x = kFast ? split_tf32_fast(a[e]) : split_tf32(a[e]);
    f.hi[e] = x.hi, f.lo[e] = x.lo;
  }
}
// The A operand of a C-layout tile's entries c0 .. c3 (one n-tile), its columns permuted: A
// column t is C column 2t, column t + 4 is 2t + 1, so the product that takes it reads its B
// operand's rows (k) in that order (row 2t as k = t, row 2t + 1 as k = t + 4, within each 8) and
// sums the same terms.
template <bool kFast = false>
__device__ __forceinline__ FragA frag_of_c(float c0, float c1, float c2, float c3) {
  FragA f;
  set_frag<kFast>(f, c0, c2, c1, c3);
  return f;
}
__device__ __forceinline__ FragA frag_of_c(const float (&c)[4]) { return frag_of_c(c[0], c[1], c[2], c[3]); }

// The warp's 16 rows [r0, r0 + 16) of src (rows >= n as 0), times mul, as D / 8 A operands.
template <int D>
__device__ __forceinline__ void load_own(FragA (&f)[D / 8], const float *src, int64_t row, int r0, int n, float mul) {
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const bool in0 = r0 + g < n, in1 = r0 + g + 8 < n;
  const float *p0 = src + (int64_t)(r0 + g) * row, *p1 = src + (int64_t)(r0 + g + 8) * row;
#pragma unroll
  for (int kk = 0; kk < D / 8; kk++) {
    const int c = 8 * kk + t;
    set_frag(f[kk], in0 ? p0[c] * mul : 0.f, in1 ? p1[c] * mul : 0.f, in0 ? p0[c + 4] * mul : 0.f,
             in1 ? p1[c + 4] * mul : 0.f);
  }
}

// The warp's C-layout accumulators acc[D / 8] (rows r0 + g, r0 + g + 8) times mul0 and mul1
// into dst's rows below n.
template <int D>
__device__ __forceinline__ void store_own(float *dst, int64_t row, int r0, int n, const float (&acc)[D / 8][4],
                                          float mul0, float mul1) {
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
  for (int nn = 0; nn < D / 8; nn++) {
    const int c = 8 * nn + 2 * t;
    if (r0 + g < n)
      *reinterpret_cast<float2 *>(dst + (int64_t)(r0 + g) * row + c) = make_float2(acc[nn][0] * mul0, acc[nn][1] * mul0);
    if (r0 + g + 8 < n)
      *reinterpret_cast<float2 *>(dst + (int64_t)(r0 + g + 8) * row + c) =
          make_float2(acc[nn][2] * mul1, acc[nn][3] * mul1);
  }
}

// The query rows of a forward or dq block of the tensor-core kernels (64 rows, 16 a warp) and
// the keys they see. The block takes query tile `tiles - 1 - blockIdx.x` (the longest causal
// rows first); r0 is the warp's first row, kend one past the last key the block sees, wend one
// past the last key the warp sees, lim0 and lim1 the last keys rows r0 + g and r0 + g + 8 see
// (g = lane / 4).
struct QueryRows {
  int r0, kend, wend, lim0, lim1;
};
__device__ __forceinline__ QueryRows query_rows(const int tq, const int tk, const int causal, const int warp,
                                                const int g) {
  const int tile = (tq + 63) / 64 - 1 - (int)blockIdx.x;
  const int off = tk - tq, r0 = tile * 64 + 16 * warp;
  const int kend = causal ? min(tk, min(tq, (tile + 1) * 64) + off) : tk;
  const int wend = r0 >= tq ? 0 : causal ? min(kend, min(tq - 1, r0 + 15) + off + 1) : kend;
  const int lim0 = causal ? min(tk - 1, r0 + g + off) : tk - 1;
  const int lim1 = causal ? min(tk - 1, r0 + g + 8 + off) : tk - 1;
  return {r0, kend, wend, lim0, lim1};
}

// A dq kernel's own rows: q (times scale2) and dout of rows [r0, r0 + 16) as A operands into qf
// and gf (load_own), and the terms of rows r0 + g and r0 + g + 8 (t = lane % 4): delta = dout .
// out, over the columns this lane's operands hold then the quad, written to a.delta; and the lse
// in base 2 (+inf past tq).
struct RowTerms {
  float delta0, delta1, lse0, lse1;
};
template <int D>
__device__ __forceinline__ RowTerms dq_rows(FragA (&qf)[D / 8], FragA (&gf)[D / 8], const BwdArgs &a, const int bh,
                                            const int r0, const int g, const int t) {
  const float *gp = a.dout.p + head_offset(a.dout.batch, a.dout.head, bh, a.heads);
  const float *op = a.o.p + head_offset(a.o.batch, a.o.head, bh, a.heads);
  load_own<D>(qf, a.q.p + head_offset(a.q.batch, a.q.head, bh, a.heads), a.q.row, r0, a.tq, a.scale2);
  load_own<D>(gf, gp, a.dout.row, r0, a.tq, 1.f);
  const bool in0 = r0 + g < a.tq, in1 = r0 + g + 8 < a.tq;
  RowTerms r{0.f, 0.f, INFINITY, INFINITY};
#pragma unroll
  for (int c = 0; c < D; c += 4) {
    if (in0) r.delta0 += gp[(int64_t)(r0 + g) * a.dout.row + c + t] * op[(int64_t)(r0 + g) * a.o.row + c + t];
    if (in1) r.delta1 += gp[(int64_t)(r0 + g + 8) * a.dout.row + c + t] * op[(int64_t)(r0 + g + 8) * a.o.row + c + t];
  }
  r.delta0 = quad_sum(r.delta0);
  r.delta1 = quad_sum(r.delta1);
  if (t == 0) {
    if (in0) a.delta[(int64_t)bh * a.tq + r0 + g] = r.delta0;
    if (in1) a.delta[(int64_t)bh * a.tq + r0 + g + 8] = r.delta1;
  }
  if (in0) r.lse0 = a.lse[(int64_t)bh * a.tq + r0 + g] * kLog2e;
  if (in1) r.lse1 = a.lse[(int64_t)bh * a.tq + r0 + g + 8] * kLog2e;
  return r;
}

// A forward kernel's online-softmax step for rows r0 + g and r0 + g + 8: mx0 and mx1 are this
// lane's maxima over the row's running max and its new scores, made quad-wide here. The bases b
// that the new scores' exponentials take (0 while a row has seen no key, whose scores are then
// all -inf) and the factors corr that rescale o are returned; m moves to the new maxima and l is
// rescaled.
struct SoftmaxStep {
  float b0, b1, corr0, corr1;
};
__device__ __forceinline__ SoftmaxStep softmax_step(float mx0, float mx1, float &m0, float &m1, float &l0, float &l1) {
  mx0 = quad_max(mx0);
  mx1 = quad_max(mx1);
  const float b0 = mx0 == -INFINITY ? 0.f : mx0, b1 = mx1 == -INFINITY ? 0.f : mx1;
  const SoftmaxStep st{b0, b1, exp2f(m0 - b0), exp2f(m1 - b1)};  // corr 0 while a row had nothing
  m0 = mx0, m1 = mx1;
  l0 *= st.corr0, l1 *= st.corr1;
  return st;
}

// A forward kernel's end for rows r0 + g and r0 + g + 8: the quad's row sums l0 and l1 added,
// o / l stored, and the lse (natural log; +inf for a row with no key) written.
template <int D>
__device__ __forceinline__ void store_forward(const FwdArgs &a, const int bh, const int r0, const int g, const int t,
                                              const float (&o)[D / 8][4], const float m0, const float m1, float l0,
                                              float l1) {
  l0 = quad_sum(l0);
  l1 = quad_sum(l1);
  store_own<D>(a.o.p + head_offset(a.o.batch, a.o.head, bh, a.heads), a.o.row, r0, a.tq, o,
               l0 > 0.f ? 1.f / l0 : 0.f, l1 > 0.f ? 1.f / l1 : 0.f);
  if (t == 0) {
    if (r0 + g < a.tq) a.lse[(int64_t)bh * a.tq + r0 + g] = l0 > 0.f ? (m0 + log2f(l0)) * kLn2 : INFINITY;
    if (r0 + g + 8 < a.tq) a.lse[(int64_t)bh * a.tq + r0 + g + 8] = l1 > 0.f ? (m1 + log2f(l1)) * kLn2 : INFINITY;
  }
}

// The float32 attention on Hopper's warpgroup MMA (attention_f32_wgmma.cu), head dim 32 only:
// the forward, the dq kernel (it also writes delta) and the dk/dv kernel, each queued on c's
// stream. false when the kernel cannot be launched here (its shared memory refused); the caller
// then runs the mma.sync kernel instead. Call only on a compute capability 9.0 device.
bool attention_f32_wgmma_forward(const Context &c, const FwdArgs &a, int64_t bh);
bool attention_f32_wgmma_dq(const Context &c, const BwdArgs &a, int64_t bh);
bool attention_f32_wgmma_dkv(const Context &c, const BwdArgs &a, int64_t bh);

}  // namespace attn_f32
}  // namespace cuda
}  // namespace mt
