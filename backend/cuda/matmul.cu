// matmul.cu - batched GEMM through cuBLAS.
//
//   C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b]      op(A) (m, k), op(B) (k, n), C (m, n)
//   row-major, A[b] = a + b * stride_a (stride 0 broadcasts), likewise B and C.
//
// 2*batch*m*n*k flops against (mk + kn + mn) * batch elements moved: compute bound
// from a few hundred on a side. Ceilings on an H100 (docs/PERF.md): ~51 TFLOP/s f32,
// ~375 TF32, ~700+ bf16/f16.
//
// cuBLAS is column-major. A row-major (r, c) matrix is the column-major (c, r) matrix
// with the same memory, so instead of C = op(A) op(B) we ask for
// C^T = op(B)^T op(A)^T, an (n, m) column-major product with ldc = n:
//   first operand  B: stored (k, n) row-major = (n, k) col-major, ld n  -> CUBLAS_OP_N
//                     trans_b: stored (n, k)   = (k, n) col-major, ld k  -> CUBLAS_OP_T
//   second operand A: stored (m, k) row-major = (k, m) col-major, ld k  -> CUBLAS_OP_N
//                     trans_a: stored (k, m)   = (m, k) col-major, ld m  -> CUBLAS_OP_T
// Compute types: F32 -> CUBLAS_COMPUTE_32F (CUBLAS_COMPUTE_32F_FAST_TF32 when allow_tf32),
// F64 -> 64F, F16/BF16 -> 32F accumulation; alpha and beta are passed in the compute type.
// k == 0 is done here (C = beta * C, or 0) rather than trusting every cuBLAS path with it.
#include <climits>

#include "backend/cuda/context.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/ops.h"

namespace mt {
namespace cuda {

namespace {

constexpr int kThreads = 256;

// C[b][j] = beta * C[b][j] (0 when beta == 0, without reading C) for the k == 0 case.
template <class T>
__global__ void __launch_bounds__(kThreads) scale_batches_kernel(T *c, int64_t batch, int64_t mn,
                                                                 int64_t stride_c, Compute<T> beta) {
  const int64_t total = batch * mn;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const int64_t b = idx / mn, j = idx - b * mn;
    T *p = c + b * stride_c + j;
    *p = beta == Compute<T>(0) ? from_compute<T>(Compute<T>(0)) : from_compute<T>(beta * to_compute(*p));
  }
}

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

}  // namespace

void launch_matmul(const MatmulArgs &g) {
  NvtxRange range("matmul");
  MT_CHECK(g.batch >= 0 && g.m >= 0 && g.n >= 0 && g.k >= 0, INVALID_ARGUMENT,
           "cuda matmul: negative size (batch=%lld, m=%lld, n=%lld, k=%lld)", (long long)g.batch,
           (long long)g.m, (long long)g.n, (long long)g.k);
  if (g.batch == 0 || g.m == 0 || g.n == 0) return;
  MT_CHECK(g.c && ((g.a && g.b) || g.k == 0), INVALID_ARGUMENT,
           "cuda matmul: null buffer (c=%p, a=%p, b=%p)", g.c, g.a, g.b);
  MT_CHECK(g.stride_a >= 0 && g.stride_b >= 0 && g.stride_c >= 0, INVALID_ARGUMENT,
           "cuda matmul: negative batch stride (a=%lld, b=%lld, c=%lld)", (long long)g.stride_a,
           (long long)g.stride_b, (long long)g.stride_c);
  MT_CHECK(g.batch == 1 || g.stride_c >= g.m * g.n, INVALID_ARGUMENT,
           "cuda matmul: output batches overlap (stride_c=%lld < m*n=%lld with batch=%lld)",
           (long long)g.stride_c, (long long)(g.m * g.n), (long long)g.batch);

  cudaDataType_t type;
  cublasComputeType_t compute;
  switch (g.dtype) {
    case DType::F32:
      type = CUDA_R_32F;
      compute = g.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      break;
    case DType::F64: type = CUDA_R_64F; compute = CUBLAS_COMPUTE_64F; break;
    case DType::F16: type = CUDA_R_16F; compute = CUBLAS_COMPUTE_32F; break;
    case DType::BF16: type = CUDA_R_16BF; compute = CUBLAS_COMPUTE_32F; break;
    default:
      fail(Code::DTYPE, "cuda matmul: dtype %s is not supported (float32, float64, float16, bfloat16 are)",
           dtype_name(g.dtype));
  }

  Context &c = context();
  if (g.k == 0) {  // empty sum: C = beta * C
    dispatch_float(g.dtype, "matmul", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const int64_t mn = g.m * g.n;
      scale_batches_kernel<T><<<grid_1d(g.batch * mn, kThreads), kThreads, 0, c.stream>>>(
          static_cast<T *>(g.c), g.batch, mn, g.stride_c, (Compute<T>)g.beta);
      MT_CUDA_CHECK_LAUNCH("matmul");
    });
    return;
  }

  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t ld_b = g.trans_b ? g.k : g.n;
  const int64_t ld_a = g.trans_a ? g.m : g.k;
  const int64_t ld_c = g.n;

  const float alpha32 = (float)g.alpha, beta32 = (float)g.beta;
  const double alpha64 = g.alpha, beta64 = g.beta;
  const void *alpha = g.dtype == DType::F64 ? (const void *)&alpha64 : (const void *)&alpha32;
  const void *beta = g.dtype == DType::F64 ? (const void *)&beta64 : (const void *)&beta32;

  if (fits_int(g.m) && fits_int(g.n) && fits_int(g.k) && fits_int(g.batch)) {
    MT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        c.cublas, op_b, op_a, (int)g.n, (int)g.m, (int)g.k, alpha, g.b, type, (int)ld_b, g.stride_b, g.a,
        type, (int)ld_a, g.stride_a, beta, g.c, type, (int)ld_c, g.stride_c, (int)g.batch, compute,
        CUBLAS_GEMM_DEFAULT));
  } else {
    MT_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
        c.cublas, op_b, op_a, g.n, g.m, g.k, alpha, g.b, type, ld_b, g.stride_b, g.a, type, ld_a,
        g.stride_a, beta, g.c, type, ld_c, g.stride_c, g.batch, compute, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace cuda
}  // namespace mt
