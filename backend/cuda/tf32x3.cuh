// tf32x3.cuh - float32 products on TF32 tensor cores with float32 accuracy (the 3xTF32 split,
// as CUTLASS's OpMultiplyAddFastF32 and PyTorch's float32 memory-efficient attention do it):
// x = hi + lo with hi = x rounded to TF32 and lo = (x - hi) rounded to TF32, and
// a * b = a.lo * b.hi + a.hi * b.lo + a.hi * b.hi (a.lo * b.lo, about 2^-22 of the product, is
// dropped). The small terms go first, so they are not lost against the large one.
//
// The tensor cores' float32 accumulation truncates instead of rounding: a long running sum
// drifts (by up to 8e-6 of its norm over 375 products in attention_f32.cu). Callers accumulate
// a few k-steps at a time into a fresh accumulator and add it to the running sum in float32.
//
//   Tf32, to_tf32, split_tf32   the split
//   split_tf32_fast             the split without conversion instructions (lo left to the tensor cores)
//   mma_tf32                    c += a * b, mma.sync m16n8k8 row.col TF32 (sm_80+); fragments
//                               (g = lane / 4, t = lane % 4):
//                               A a[0] (row g, col t), a[1] (g + 8, t), a[2] (g, t + 4), a[3] (g + 8, t + 4)
//                               B b0 (row t, col g), b1 (t + 4, g)
//                               C c[0] (g, 2t), c[1] (g, 2t + 1), c[2] (g + 8, 2t), c[3] (g + 8, 2t + 1)
//   mma_tf32x3                  the three products of one split pair
//
// defines: the names above
#pragma once

#include <cstdint>

namespace mt {
namespace cuda {

struct Tf32 {
  uint32_t hi, lo;
};
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ Tf32 split_tf32(float x) {
  const uint32_t hi = to_tf32(x);
  return {hi, to_tf32(x - __uint_as_float(hi))};
}

// The split in integer and float32 arithmetic, for kernels that split every fragment they read:
// cvt.rna.tf32.f32 runs on the conversion units, a quarter of the FMA units' rate, and at 2
// conversions a value it bounded gemm_f32.cu's kernel. hi = x rounded to TF32 (to nearest, ties
// away from zero, as cvt.rna: add half a TF32 ulp to the magnitude, clear the 13 low bits);
// lo = x - hi exactly, left for the tensor cores to truncate to TF32 (they ignore an operand's 13
// low bits), so lo keeps about 10 bits where cvt.rna would round it: the product's error grows
// from about 2^-22 to 2^-21 of |a b|. NaN stays NaN; an infinity (and a value within half a TF32
// ulp of FLT_MAX, which rounds up to one) gives lo = NaN, as split_tf32 does for an infinity.
__device__ __forceinline__ Tf32 split_tf32_fast(float x) {
  const uint32_t hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  return {hi, __float_as_uint(x - __uint_as_float(hi))};
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a * b in the 3xTF32 split: a_hi/a_lo an A operand's halves, (bh0, bh1) and (bl0, bl1) a B
// operand's.
__device__ __forceinline__ void mma_tf32x3(float (&c)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                           uint32_t bh0, uint32_t bh1, uint32_t bl0, uint32_t bl1) {
  mma_tf32(c, a_lo, bh0, bh1);
  mma_tf32(c, a_hi, bl0, bl1);
  mma_tf32(c, a_hi, bh0, bh1);
}

}  // namespace cuda
}  // namespace mt
