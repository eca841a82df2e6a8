// fa_tma.cuh - what a producer-warpgroup kernel (fa_forward_ws.cuh) uses besides the mbarriers
// of kernel_utils.cuh: TMA tile loads, bulk reductions (the fused-dQ backward) and named
// barriers on the device; on the host, the tensor maps its launcher passes (16-bit (bh, t, D)
// tensors in boxes of 64 columns, the 128-byte swizzle of fa_wgmma.cuh's panels). sm_90a.
#pragma once

#include <cuda.h>          // CUtensorMap (the launcher gets the driver entry point at run time)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <type_traits>

#include "backend/cuda/attention/fa_wgmma.cuh"
#include "backend/cuda/context.h"

namespace mt {
namespace cuda {
namespace fa {

// The box at (x, y, z) of tensor map m into shared memory at dst, completing on bar.
__device__ __forceinline__ void tma_load_3d(void *dst, const CUtensorMap *m, int x, int y, int z, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
          smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(m)), "r"(x), "r"(y), "r"(z), "r"(bar)
      : "memory");
}
// Named barrier `id` of n threads: sync waits for it, arrive counts in without waiting.
__device__ __forceinline__ void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

// Bulk reductions (the async proxy): global[dst .. + bytes) += shared[src ..) as f32, both
// 16-byte aligned, bytes a multiple of 16; a thread's reductions complete in its bulk groups.
__device__ __forceinline__ void bulk_reduce_add_f32(float *dst, const float *src, int bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
               "r"(smem_u32(src)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N of the thread's bulk groups are pending: READ, until their sources have
// been read (the shared memory may be written again); else until they have completed.
template <int N, bool READ>
__device__ __forceinline__ void bulk_wait() {
  if constexpr (READ) asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
  else asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// cuTensorMapEncodeTiled from the driver, found once through the runtime (no link to libcuda).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void *f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A tensor map over base as (bh, t, D) of 16-bit T, read in boxes of 64 columns by `rows` rows
// into 128-byte-swizzled panels; rows past t read as zeros.
template <class T, int D>
inline CUtensorMap tensor_map(const void *base, int64_t bh, int64_t t, int rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  MT_CHECK(encode != nullptr, CUDA, "cuda flash_attention: the driver has no cuTensorMapEncodeTiled");
  CUtensorMap m;
  const cuuint64_t dims[3] = {(cuuint64_t)D, (cuuint64_t)t, (cuuint64_t)bh};
  const cuuint64_t strides[2] = {(cuuint64_t)D * 2, (cuuint64_t)(t * D * 2)};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {64, (cuuint32_t)rows, 1}, elem[3] = {1, 1, 1};
  const CUresult r = encode(&m, std::is_same<T, __nv_bfloat16>::value ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                        : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                            3, const_cast<void *>(base), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  MT_CHECK(r == CUDA_SUCCESS, CUDA, "cuda flash_attention: cuTensorMapEncodeTiled failed (%d) for bh %lld, t %lld, d %d",
           (int)r, (long long)bh, (long long)t, D);
  return m;
}

}  // namespace fa
}  // namespace cuda
}  // namespace mt
