// philox.h - Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC'11), the counter-based generator cuRAND also uses. A counter block gives four
// 32-bit words: element i of a uniform stream keyed by `seed` takes word i % 4 of block i / 4,
// which is its 24-bit (float) draw and the high half of its 53-bit (double) draw; the low half
// is word i % 4 of block i / 4 under the key seed ^ kPhiloxLowKey. So a kernel thread that owns
// 4 neighbouring elements runs the 10 rounds once for them (twice for doubles), any device can
// still produce any element on its own, every device agrees, and a float draw is the double
// draw cut to 24 bits. A normal draw takes a whole block i (Box-Muller over two uniforms).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define MT_HD __host__ __device__ inline
#else
#define MT_HD inline
#endif

namespace mt {

struct Philox4 { uint32_t v[4]; };

MT_HD Philox4 philox4x32_10(uint64_t counter, uint64_t key) {
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0;
    uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  Philox4 r;
  r.v[0] = c0; r.v[1] = c1; r.v[2] = c2; r.v[3] = c3;
  return r;
}

// Uniform in [0,1) from 32 bits (24 significant, exact in float) and from 64 bits (53 significant).
MT_HD double philox_uniform24(uint32_t x) { return (double)(x >> 8) * (1.0 / 16777216.0); }
MT_HD double philox_uniform53(uint32_t hi, uint32_t lo) {
  return (double)((((uint64_t)hi << 32) | lo) >> 11) * (1.0 / 9007199254740992.0);
}

// The key of the low words of 53-bit draws, relative to the stream's seed.
constexpr uint64_t kPhiloxLowKey = 0x6C6F77776F726473ULL;  // "lowwords"
// Elements of the uniform stream per counter block.
constexpr int kPhiloxPerBlock = 4;

// Word k (0..3) of r. Selects, not r.v[k]: a variable index would put r in local memory on
// the device.
MT_HD uint32_t philox_word(const Philox4 &r, int k) {
  return k == 0 ? r.v[0] : k == 1 ? r.v[1] : k == 2 ? r.v[2] : r.v[3];
}

// Counter block b of the uniform stream keyed by seed, run once for its 4 elements: the high
// words, and for 53-bit draws the low words' block (zero otherwise). The draws of whole blocks
// (philox_uniforms, the fill and dropout kernels) come from here; philox_uniform_at, one element
// of a block, is written out for a single word.
struct PhiloxUniformBlock {
  Philox4 hi, lo;
  MT_HD PhiloxUniformBlock(uint64_t seed, uint64_t b, bool double_precision) : hi(philox4x32_10(b, seed)), lo{} {
    if (double_precision) lo = philox4x32_10(b, seed ^ kPhiloxLowKey);
  }
  // Element 4 b + k (k in 0..3) of the stream.
  MT_HD double draw(int k, bool double_precision) const {
    const uint32_t h = philox_word(hi, k);
    return double_precision ? philox_uniform53(h, philox_word(lo, k)) : philox_uniform24(h);
  }
};

// Element i of the uniform [0,1) stream. double_precision selects 53-bit draws.
MT_HD double philox_uniform_at(uint64_t seed, int64_t i, bool double_precision) {
  const uint64_t b = (uint64_t)i / kPhiloxPerBlock;
  const int k = (int)((uint64_t)i % kPhiloxPerBlock);
  const uint32_t hi = philox_word(philox4x32_10(b, seed), k);
  if (!double_precision) return philox_uniform24(hi);
  return philox_uniform53(hi, philox_word(philox4x32_10(b, seed ^ kPhiloxLowKey), k));
}

// put(i, u) for the elements i in [i0, i1) of the uniform stream (i0 a multiple of
// kPhiloxPerBlock), each counter block run once (twice for 53-bit draws) for its 4 elements: the
// values of philox_uniform_at.
template <class Put>
inline void philox_uniforms(uint64_t seed, int64_t i0, int64_t i1, bool double_precision, Put &&put) {
  for (int64_t b0 = i0; b0 < i1; b0 += kPhiloxPerBlock) {
    const PhiloxUniformBlock blk(seed, (uint64_t)b0 / kPhiloxPerBlock, double_precision);
    for (int k = 0; k < kPhiloxPerBlock && b0 + k < i1; k++) put(b0 + k, blk.draw(k, double_precision));
  }
}

// The elements [0, n).
template <class Put>
inline void philox_uniforms(uint64_t seed, int64_t n, bool double_precision, Put &&put) {
  philox_uniforms(seed, 0, n, double_precision, put);
}

// Element i of the standard-normal stream: Box-Muller over a pair of uniforms from block i.
MT_HD double philox_normal_at(uint64_t seed, int64_t i, bool double_precision) {
  Philox4 r = philox4x32_10((uint64_t)i, seed ^ 0x5DEECE66DULL);
  double u1 = double_precision ? philox_uniform53(r.v[0], r.v[1]) : philox_uniform24(r.v[0]);
  double u2 = double_precision ? philox_uniform53(r.v[2], r.v[3]) : philox_uniform24(r.v[2]);
  u1 = 1.0 - u1;  // (0, 1]: log is finite
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

}  // namespace mt
