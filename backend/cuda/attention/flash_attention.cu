// flash_attention.cu - the FlashAttention launchers behind Backend::flash_attention and
// Backend::flash_attention_backward, and the study hook mt_study_flash_config.
//
// The kernels: fa_forward.cuh, fa_backward.cuh (one template each, policies and tiles as
// parameters); the helpers they share: fa_common.cuh; which instantiations exist:
// fa_configs.h; their launches: flash_forward.cu, flash_backward.cu. The generations
// (docs/flash_attention.md has what each changed and measured):
//   fa_v1  simple tiles, 32/16-bit shared loads of the fragments, synchronous tile copies
//   fa_v2  ldmatrix (.trans for the k-major B operands) on an XOR-swizzled shared layout
//   fa_v3  cp.async global -> shared, two stages: the next K/V (Q/dO) tile in flight
//   tuned  fa_v3 with the block sizes and warps of fa_configs.h's table
//   fa_v5  forward and backward on Hopper's warpgroup MMA (wgmma, sm_90a), operands read by
//          descriptor from 128-byte-swizzled shared memory
//
// Contents: selection | launchers | mt_study_flash_config | mt_study_flash_attention
#include <atomic>
#include <cmath>

#include "minitorch.h"  // MT_API
#include "backend/cuda/attention/fa_launch.h"
#include "backend/cuda/attention/flash_attention.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/ops.h"

namespace mt {
namespace cuda {

namespace fa {
namespace {
std::atomic<int> g_generation{0}, g_config{0};  // the study selection; 0: production
}  // namespace

Selection selected(bool forward, int d, int64_t tk, bool causal) {
  const int gen = g_generation.load(std::memory_order_relaxed);
  if (gen != 0) return {gen, g_config.load(std::memory_order_relaxed)};
  if (wgmma_available())
    return {5, forward ? default_wgmma_forward_config(d, tk, causal)
                       : default_wgmma_backward_config(d, tk, deterministic())};
  return {4, forward ? default_forward_config(d) : default_backward_config(d)};
}
}  // namespace fa

namespace {

void check_problem(const char *op, int64_t bh, int64_t tq, int64_t tk, int64_t d, DType dtype, double scale) {
  MT_CHECK(flash_attention_supported(dtype, d), UNSUPPORTED,
           "cuda %s: dtype %s with head dim %lld is not supported (float16 or bfloat16, head dim 64 or 128)", op,
           dtype_name(dtype), (long long)d);
  MT_CHECK(bh >= 0 && tq >= 0 && tk >= 0, INVALID_ARGUMENT, "cuda %s: negative size (BH=%lld, Tq=%lld, Tk=%lld)", op,
           (long long)bh, (long long)tq, (long long)tk);
  MT_CHECK(bh <= 65535, INVALID_ARGUMENT, "cuda %s: B * H = %lld exceeds 65535", op, (long long)bh);
  MT_CHECK(tq < (1LL << 30) && tk < (1LL << 30), INVALID_ARGUMENT, "cuda %s: sequence too long (Tq=%lld, Tk=%lld)",
           op, (long long)tq, (long long)tk);
  MT_CHECK(std::isfinite(scale) && scale > 0, INVALID_ARGUMENT, "cuda %s: scale must be finite and > 0, got %g", op,
           scale);
}

void check_aligned(const char *op, std::initializer_list<const void *> ptrs) {
  for (const void *p : ptrs)
    MT_CHECK(p && is_aligned16(p), INVALID_ARGUMENT, "cuda %s: buffer %p is null or not 16-byte aligned", op, p);
}

}  // namespace

bool flash_attention_supported(DType dtype, int64_t d) {
  return (dtype == DType::BF16 || dtype == DType::F16) && (d == 64 || d == 128);
}

void flash_attention_forward(Context &c, void *o, float *lse, const void *q, const void *k, const void *v, int64_t bh,
                             int64_t tq, int64_t tk, int64_t d, DType dtype, double scale, bool causal) {
  NvtxRange range("flash_attention");
  check_problem("flash_attention", bh, tq, tk, d, dtype, scale);
  if (bh == 0 || tq == 0) return;
  check_aligned("flash_attention", {o, q, k, v});
  MT_CHECK(lse != nullptr, INVALID_ARGUMENT, "cuda flash_attention: null lse");
  if (tk == 0) {  // no key at all: zeros and an lse of +inf, as the kernel gives a row with no key
    MT_CUDA_CHECK(cudaMemsetAsync(o, 0, (size_t)(bh * tq * d * 2), c.stream));
    launch_fill(lse, bh * tq, DType::F32, INFINITY);
    return;
  }
  fa::FwdParams p{o, lse, q, k, v, (int)tq, (int)tk, (float)(scale * 1.4426950408889634), causal ? 1 : 0};
  fa::run_forward(c, p, bh, (int)d, dtype, fa::selected(true, (int)d, tk, causal));
}

void flash_attention_backward(Context &c, void *dq, void *dk, void *dv, const void *q, const void *k, const void *v,
                              const void *o, const float *lse, const void *dout, int64_t bh, int64_t tq, int64_t tk,
                              int64_t d, DType dtype, double scale, bool causal) {
  NvtxRange range("flash_attention_backward");
  check_problem("flash_attention backward", bh, tq, tk, d, dtype, scale);
  if (bh == 0) return;
  if (tq == 0 || tk == 0) {  // nothing flows: zero gradients
    if (tq) MT_CUDA_CHECK(cudaMemsetAsync(dq, 0, (size_t)(bh * tq * d * 2), c.stream));
    if (tk) {
      MT_CUDA_CHECK(cudaMemsetAsync(dk, 0, (size_t)(bh * tk * d * 2), c.stream));
      MT_CUDA_CHECK(cudaMemsetAsync(dv, 0, (size_t)(bh * tk * d * 2), c.stream));
    }
    return;
  }
  check_aligned("flash_attention backward", {dq, dk, dv, q, k, v, o, dout});
  MT_CHECK(lse != nullptr, INVALID_ARGUMENT, "cuda flash_attention backward: null lse");
  fa::BwdParams p{dq, dk, dv, nullptr, q, k, v, o, dout, lse, nullptr, (int)tq, (int)tk, (float)scale,
                  (float)(scale * 1.4426950408889634), causal ? 1 : 0};
  fa::run_backward(c, p, bh, (int)d, dtype, fa::selected(false, (int)d, tk, causal));
}

}  // namespace cuda
}  // namespace mt

// ---- the study hook ---------------------------------------------------------------------------
//
// mt_study_flash_config: an internal hook for scripts/bench/tune_attention.py,
// scripts/bench/workloads_attention.py and tests/gpu/test_flash_attention.py, NOT part of the
// public API (no stability promise; exported only because they drive it through ctypes).
// It picks the kernels every later flash attention launch of the process uses (forward and
// backward), until the next call:
//   generation 0           production (config ignored)
//   generation 1, 2, 3     fa_v1, fa_v2, fa_v3 (config must be 0)
//   generation 4           the tuned kernel, row `config` (0 .. count - 1) of fa_configs.h's
//                          table of the head dim in use
//   generation 5           the wgmma kernels, row `config` of fa_configs.h's wgmma table
//                          (0 .. kNumWgmmaConfigs - 1), forward and backward.
//                          MT_ERR_UNSUPPORTED on a device without compute capability 9.0
//   generation -1          changes nothing; returns the number of tuned rows
//   generation -2          changes nothing; returns the number of wgmma rows (0 without sm_90)
// Returns 0 (MT_OK) or MT_ERR_INVALID_ARGUMENT for another pair (the selection is then left
// as it was). It leaves mt_last_error() alone. Not thread-safe against launches running
// concurrently in other threads (they may see either selection).
extern "C" MT_API int64_t mt_study_flash_config(int64_t generation, int64_t config) {
  using namespace mt::cuda::fa;
  if (generation == -1) return kNumTunedConfigs;
  if (generation == -2) return wgmma_available() ? kNumWgmmaConfigs : 0;
  const bool ok = (generation == 0) || (generation >= 1 && generation <= 3 && config == 0) ||
                  (generation == 4 && config >= 0 && config < kNumTunedConfigs) ||
                  (generation == 5 && config >= 0 && config < kNumWgmmaConfigs);
  if (!ok) return (int64_t)mt::Code::INVALID_ARGUMENT;
  if (generation == 5 && !wgmma_available()) return (int64_t)mt::Code::UNSUPPORTED;
  g_config.store(generation == 0 ? 0 : (int)config, std::memory_order_relaxed);
  g_generation.store((int)generation, std::memory_order_relaxed);
  return 0;
}

// mt_study_flash_attention: the same internal status as mt_study_flash_config; it runs one
// direction of the kernels the selection picks on raw device buffers, so that the tuner and
// the benchmark time the kernels alone (no tensors, no tape):
//   backward 0: out (bh, tq, d) and lse (bh, tq) f32 written from q (bh, tq, d), k, v (bh, tk, d)
//   backward 1: dq (bh, tq, d), dk, dv (bh, tk, d) written from q, k, v, out, lse and dout
// dtype an mt_dtype (MT_F16 or MT_BF16); scale <= 0 means 1/sqrt(d). Buffers are borrowed for
// the call and must be 16-byte aligned; the work is queued on the library's stream (call
// mt_synchronize() before reading results; synchronize the stream that wrote the inputs first).
// Returns 0 or an mt_status value (MT_ERR_UNSUPPORTED for another dtype or head dim,
// MT_ERR_INVALID_ARGUMENT for bad sizes or pointers, MT_ERR_CUDA, MT_ERR_DEVICE).
extern "C" MT_API int64_t mt_study_flash_attention(void *out, void *lse, const void *q, const void *k, const void *v,
                                                   void *dq, void *dk, void *dv, const void *dout, int64_t bh,
                                                   int64_t tq, int64_t tk, int64_t d, int64_t dtype, double scale,
                                                   int64_t causal, int64_t backward) {
  using namespace mt;
  try {
    MT_CHECK(dtype >= 0 && dtype < kNumDTypes, DTYPE, "mt_study_flash_attention: invalid dtype %lld", (long long)dtype);
    MT_CHECK(d > 0, INVALID_ARGUMENT, "mt_study_flash_attention: head dim %lld", (long long)d);
    const double s = scale > 0 ? scale : 1.0 / std::sqrt((double)d);
    cuda::Context &c = cuda::context();
    if (backward)
      cuda::flash_attention_backward(c, dq, dk, dv, q, k, v, out, static_cast<const float *>(lse), dout, bh, tq, tk, d,
                                     (DType)dtype, s, causal != 0);
    else
      cuda::flash_attention_forward(c, out, static_cast<float *>(lse), q, k, v, bh, tq, tk, d, (DType)dtype, s,
                                    causal != 0);
    return 0;
  } catch (const Error &e) {
    return (int64_t)e.code();
  } catch (...) {
    return (int64_t)Code::INTERNAL;
  }
}
