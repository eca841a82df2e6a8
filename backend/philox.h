// philox.h - Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC'11), the counter-based generator cuRAND also uses. Element i of a
// tensor drawn with `seed` uses counter block i (of which it keeps one or two words), so
// any device (or a kernel thread) can produce any element independently and every
// device agrees.
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

// Element i of uniform [0,1) / standard-normal streams. double_precision selects 53-bit draws.
// Normal: Box-Muller over a pair of uniforms from the same block (element i uses block i).
MT_HD double philox_uniform_at(uint64_t seed, int64_t i, bool double_precision) {
  Philox4 r = philox4x32_10((uint64_t)i, seed);
  return double_precision ? philox_uniform53(r.v[0], r.v[1]) : philox_uniform24(r.v[0]);
}
MT_HD double philox_normal_at(uint64_t seed, int64_t i, bool double_precision) {
  Philox4 r = philox4x32_10((uint64_t)i, seed ^ 0x5DEECE66DULL);
  double u1 = double_precision ? philox_uniform53(r.v[0], r.v[1]) : philox_uniform24(r.v[0]);
  double u2 = double_precision ? philox_uniform53(r.v[2], r.v[3]) : philox_uniform24(r.v[2]);
  u1 = 1.0 - u1;  // (0, 1]: log is finite
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

}  // namespace mt
