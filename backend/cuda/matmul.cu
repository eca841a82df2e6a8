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
//
// Tiny products (k <= 64 and at most 16384 outputs in all: an XOR or small-MLP layer) skip
// cuBLAS for tiny_gemm_kernel, a thread per output, which also adds the bias and writes
// a_sums (MatmulArgs' extras) in the same launch. Such a layer is all launch latency: inside
// a recorded training step each launch is a graph node of ~1.5-2 us, and the linear layer's
// forward (product and bias) and its weight and bias gradients each become one node instead
// of two.
//
// Float32 products without TF32 of at least 2M multiply-adds (beta 0, not both operands
// transposed), on operands 16-byte copies can read, run gemm_f32.cu's 3xTF32 tensor-core kernel
// (float32 accuracy, bias in its epilogue, a_sums from the A fragments it reads).
//
// Other larger float32 single products with a bias go to cuBLASLt with the bias as the GEMM's
// epilogue (CUBLASLT_EPILOGUE_BIAS: the bias runs along the rows of the column-major (n, m)
// result), so a linear layer's bias costs no pass over its output. Where cuBLASLt offers no
// algorithm (cached per shape, types and alignment), or with MT_CUDA_NO_LT_EPILOGUE set, the
// product takes cuBLAS; launch_matmul then returns false and the backend does the extras as
// separate passes (matmul_extras). Outside the tensor-core kernel a_sums stays a separate pass:
// cuBLASLt's bias-gradient epilogue (BGRADB) ran as a kernel of its own after the product, and a
// char-GPT training step was slower with it than with the column sums of sum_reduce
// (docs/benchmarks.md).
//
// Large float16/bfloat16 products whose stored rows are not whole 16-byte groups run as the
// problem padded to multiples of 8 (padding(), launch_padded()): cuBLAS's kernels for such rows
// are sm75-era and several times slower than its Hopper ones.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "minitorch.h"  // MT_API (the study hook)
#include "backend/cuda/context.h"
#include "backend/cuda/gemm_f32.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/study.cuh"

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

constexpr int64_t kTinyK = 64, kTinyOutputs = 16384;

bool is_tiny(const MatmulArgs &g) { return g.k <= kTinyK && g.batch * g.m * g.n <= kTinyOutputs; }

template <class T>
struct TinyGemm {
  T *c;
  const T *a, *b, *bias;
  T *a_sums;
  int64_t m, n, k;
  int64_t a_rs, a_cs, b_rs, b_cs;  // op(A)[i, p] = a[i * a_rs + p * a_cs], op(B)[p, j] = b[p * b_rs + j * b_cs]
  int64_t stride_a, stride_b, stride_c;
  Compute<T> alpha, beta;
};

// Block (x, batch): threads over the m * n outputs of one batch, each a dot product of length
// k accumulated in Compute<T> (float for float32/16-bit types, double for float64), then
// alpha, beta * C, and the bias. The first batch's threads also walk i < m for a_sums.
template <class T>
__global__ void __launch_bounds__(kThreads) tiny_gemm_kernel(TinyGemm<T> g) {
  pdl_enter();
  using C = Compute<T>;
  const int64_t bi = blockIdx.y;
  const T *a = g.a + bi * g.stride_a, *b = g.b + bi * g.stride_b;
  T *c = g.c + bi * g.stride_c;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x, t0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (int64_t idx = t0; idx < g.m * g.n; idx += stride) {
    const int64_t i = idx / g.n, j = idx - i * g.n;
    C acc = C(0);
    for (int64_t p = 0; p < g.k; p++) acc += to_compute(a[i * g.a_rs + p * g.a_cs]) * to_compute(b[p * g.b_rs + j * g.b_cs]);
    C v = g.alpha * acc;
    if (g.beta != C(0)) v += g.beta * to_compute(c[idx]);
    if (g.bias) v = to_compute(from_compute<T>(v)) + to_compute(g.bias[j]);
    c[idx] = from_compute<T>(v);
  }
  if (g.a_sums && bi == 0) {
    for (int64_t i = t0; i < g.m; i += stride) {
      C s = C(0);
      for (int64_t p = 0; p < g.k; p++) s += to_compute(a[i * g.a_rs + p * g.a_cs]);
      g.a_sums[i] = from_compute<T>(s);
    }
  }
}

void launch_tiny(Context &c, const MatmulArgs &g) {
  dispatch_float(g.dtype, "matmul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    TinyGemm<T> t;
    t.c = static_cast<T *>(g.c);
    t.a = static_cast<const T *>(g.a);
    t.b = static_cast<const T *>(g.b);
    t.bias = static_cast<const T *>(g.bias);
    t.a_sums = static_cast<T *>(g.a_sums);
    t.m = g.m;
    t.n = g.n;
    t.k = g.k;
    t.a_rs = g.trans_a ? 1 : g.k;
    t.a_cs = g.trans_a ? g.m : 1;
    t.b_rs = g.trans_b ? 1 : g.n;
    t.b_cs = g.trans_b ? g.k : 1;
    t.stride_a = g.stride_a;
    t.stride_b = g.stride_b;
    t.stride_c = g.stride_c;
    t.alpha = (Compute<T>)g.alpha;
    t.beta = (Compute<T>)g.beta;
    const int64_t outputs = std::max(g.m * g.n, g.a_sums ? g.m : 0);
    const dim3 grid((unsigned)((outputs + kThreads - 1) / kThreads), (unsigned)g.batch);
    MT_CUDA_CHECK(launch_pdl(c, tiny_gemm_kernel<T>, grid, kThreads, t));
    MT_CUDA_CHECK_LAUNCH("matmul");
  });
}

// A cuBLASLt plan for the products with a bias of one shape, operations, types and operand
// alignment. A plan whose heuristic offered no algorithm is kept too (found = false), so the
// question is asked once.
struct LtKey {
  int64_t m, n, k;
  bool trans_a, trans_b;
  int32_t type, compute;
  uint32_t align_a, align_b, align_c;
  bool operator==(const LtKey &o) const {
    return m == o.m && n == o.n && k == o.k && trans_a == o.trans_a && trans_b == o.trans_b &&
           type == o.type && compute == o.compute && align_a == o.align_a &&
           align_b == o.align_b && align_c == o.align_c;
  }
};

struct LtKeyHash {
  size_t operator()(const LtKey &key) const {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t v : {(uint64_t)key.m, (uint64_t)key.n, (uint64_t)key.k,
                       (uint64_t)key.trans_a << 1 | (uint64_t)key.trans_b, (uint64_t)key.type,
                       (uint64_t)key.compute,
                       (uint64_t)key.align_a << 40 | (uint64_t)key.align_b << 20 | key.align_c})
      h = (h ^ v) * 1099511628211ull;
    return (size_t)h;
  }
};

struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;  // B, A and C, column-major
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
};

// The largest power of two up to 256 that divides the address (cuBLASLt's alignment classes).
uint32_t alignment(const void *p) {
  const uintptr_t v = (uintptr_t)p;
  return v ? (uint32_t)std::min<uintptr_t>(256, v & (~v + 1)) : 256;
}

LtPlan make_lt_plan(const Context &c, const LtKey &key, cudaDataType_t type) {
  LtPlan plan;
  const cublasOperation_t op_b = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  MT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op, (cublasComputeType_t)key.compute, CUDA_R_32F));
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  // The stored (not transposed) matrices, column-major: see the top of the file.
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.first, type, key.trans_b ? key.k : key.n,
                                             key.trans_b ? key.n : key.k, key.trans_b ? key.k : key.n));
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.second, type, key.trans_a ? key.m : key.k,
                                             key.trans_a ? key.k : key.m, key.trans_a ? key.m : key.k));
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.out, type, key.n, key.m, key.n));

  cublasLtMatmulPreference_t pref = nullptr;
  MT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace = (uint64_t)Context::kCublasWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_b, sizeof key.align_b);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_a, sizeof key.align_a);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_c, sizeof key.align_c);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_c, sizeof key.align_c);
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(c.cublas_lt, plan.op, plan.first, plan.second, plan.out,
                                                           plan.out, pref, 1, &result, &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  plan.found = st == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan.found) plan.algo = result.algo;
  return plan;
}

// Runs the product with its bias fused as a cuBLASLt epilogue; false (nothing done) where
// cuBLASLt offers no algorithm for it.
bool launch_lt_bias(Context &c, const MatmulArgs &g, cudaDataType_t type, cublasComputeType_t compute,
                    const float *alpha, const float *beta) {
  static std::mutex mu;
  static std::unordered_map<LtKey, LtPlan, LtKeyHash> plans;  // process-wide, like the context
  const void *bias = g.bias;
  if (alignment(bias) < 16) return false;  // the bias has no alignment preference of its own
  const LtKey key{g.m, g.n, g.k, g.trans_a, g.trans_b, (int32_t)type, (int32_t)compute,
                  alignment(g.a), alignment(g.b), alignment(g.c)};
  std::lock_guard<std::mutex> lock(mu);  // the plan's descriptor carries this call's bias
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_lt_plan(c, key, type)).first;
  const LtPlan &plan = it->second;
  if (!plan.found) return false;
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  MT_CUBLAS_CHECK(cublasLtMatmul(c.cublas_lt, plan.op, alpha, g.b, plan.first, g.a, plan.second, beta, g.c, plan.out,
                                 g.c, plan.out, &plan.algo, c.cublas_workspace(),
                                 (size_t)Context::kCublasWorkspaceBytes, c.stream));
  return true;
}

// One product through cuBLAS, C = alpha op(A) op(B) + beta C with the given leading dimensions
// (column-major arguments: see the top of the file).
void cublas_gemm(Context &c, const MatmulArgs &g, cudaDataType_t type, cublasComputeType_t compute,
                 const void *alpha, const void *beta, const void *a, int64_t ld_a, const void *b, int64_t ld_b,
                 void *cc, int64_t ld_c) {
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (fits_int(g.m) && fits_int(g.n) && fits_int(g.k) && fits_int(g.batch) && fits_int(ld_a) && fits_int(ld_b) &&
      fits_int(ld_c)) {
    MT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        c.cublas, op_b, op_a, (int)g.n, (int)g.m, (int)g.k, alpha, b, type, (int)ld_b, g.stride_b, a,
        type, (int)ld_a, g.stride_a, beta, cc, type, (int)ld_c, g.stride_c, (int)g.batch, compute,
        CUBLAS_GEMM_DEFAULT));
  } else {
    MT_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
        c.cublas, op_b, op_a, g.n, g.m, g.k, alpha, b, type, ld_b, g.stride_b, a, type, ld_a,
        g.stride_a, beta, cc, type, ld_c, g.stride_c, g.batch, compute, CUBLAS_GEMM_DEFAULT));
  }
}

// ---- 16-bit products with sizes that are not whole 16-byte groups ----
//
// cuBLAS runs a float16/bfloat16 product on its Hopper kernels (nvjet) only where the stored
// matrices' rows are whole 16-byte groups (8 elements) and start on 16 bytes; otherwise it falls
// back to sm75/sm80-era kernels (cutlass_75_tensorop_bf16_s1688gemm_..._align1). Padding the
// leading dimensions alone is not enough: with the logits' rows padded from 50257 to 50264
// elements, cuBLAS still took align1 kernels for two of GPT-2's three head products, so the
// problem itself is padded. GPT-2's tied head with its vocabulary of 50257 makes three such
// products a step (the logits x W^T, dx = dlogits W, dW = dlogits^T x): on an H200 they took
// 15.6 ms of a 38 ms step, and the same products at 50304 columns about a quarter of that
// (docs/benchmarks.md).
//
// So a stored matrix whose row length (its inner size: k or m for A, n or k for B, n for C) is
// not a multiple of 8, or whose address is not 16-byte aligned, is copied into a pool buffer of
// the padded problem (m', n', k'), every padded size rounded up to 8 where it is some matrix's
// inner size: zeros past the old sizes, so the padded terms of the k sum are 0 and
// the padded rows and columns of C are discarded; C then comes back from its buffer (both copies:
// repitch_kernel).
// Only where the product is large (at least kPadMinMacs multiply-adds) and each copied matrix small
// against it (its other size at least kPadMinOther: a copy moves 4 bytes an element of it, the
// product does 2 * other flops an element). Batched products and float32 are left as they are,
// and so is a C with beta != 0. Measured on both sides of the thresholds (H200, bfloat16,
// scripts/bench/gemm_pad_study.py): padding loses at 2^26-2^28 multiply-adds (0.60-0.96x) and wins
// from 2^30 (1.33-2.09x at 1024 x 1031 x 1024); at an other size of 64 it wins for one form and
// loses for the other, from 128 it wins for both (1.19-1.47x). MT_CUDA_NO_GEMM_PAD in the
// environment, or mt_study_gemm_pad(1), turns it off.
constexpr int64_t kPadMinMacs = 1ll << 30, kPadMinOther = 128;
std::atomic<int> g_pad_variant{std::getenv("MT_CUDA_NO_GEMM_PAD") != nullptr ? 1 : 0};
std::atomic<int64_t> g_pad_runs{0};  // products run through padded copies (mt_study_gemm_pad(2))

int64_t round_up8(int64_t v) { return (v + 7) / 8 * 8; }

// The padded problem: its sizes and which matrices go through copies.
struct Padding {
  int64_t m = 0, n = 0, k = 0;
  bool a = false, b = false, c = false;
  bool any() const { return a || b || c; }
};

Padding padding(const MatmulArgs &g) {
  Padding pad;
  const int variant = g_pad_variant.load(std::memory_order_relaxed);
  if (variant == 1 || g.batch != 1 || (g.dtype != DType::F16 && g.dtype != DType::BF16)) return pad;
  // Inner sizes: A's is m (trans_a) or k, B's k (trans_b) or n, C's n.
  pad.m = g.trans_a ? round_up8(g.m) : g.m;
  pad.n = round_up8(g.n);
  pad.k = (!g.trans_a || g.trans_b) ? round_up8(g.k) : g.k;
  pad.a = pad.m != g.m || pad.k != g.k || alignment(g.a) < 16;
  pad.b = pad.n != g.n || pad.k != g.k || alignment(g.b) < 16;
  pad.c = pad.m != g.m || pad.n != g.n || alignment(g.c) < 16;
  if (!pad.any() || (pad.c && g.beta != 0.0)) return Padding{};
  if (variant == 3) return pad;
  const bool large = (double)g.m * (double)g.n * (double)g.k >= (double)kPadMinMacs;
  if (!large || (pad.a && g.n < kPadMinOther) || (pad.b && g.m < kPadMinOther) || (pad.c && g.k < kPadMinOther))
    return Padding{};
  return pad;
}

// dst (drows, dcols, contiguous) = src (rows sld apart) where r < srows and j < scols, 0 elsewhere:
// 16-bit elements as raw bits (0 is +0.0 for both types). Into the padded problem (sld = scols)
// and back out of it (srows, scols, sld: the padded C). A block takes kPadPer x kThreads elements
// of a row, its threads' accesses side by side (2-byte loads and stores, coalesced; the rows of
// one side are not whole 16-byte groups, so wider accesses would not line up), kPadPer loads in
// flight a thread. Blocks (x: spans of a row, y: rows).
constexpr int kPadPer = 8;

__global__ void __launch_bounds__(kThreads) repitch_kernel(uint16_t *dst, int64_t drows, int64_t dcols,
                                                           const uint16_t *src, int64_t srows, int64_t scols,
                                                           int64_t sld) {
  const int64_t span = (int64_t)kThreads * kPadPer;
  for (int64_t r = blockIdx.y; r < drows; r += gridDim.y) {
    const int64_t reach = r < srows ? std::min(scols, dcols) : 0;  // src elements in this row
    for (int64_t j0 = (int64_t)blockIdx.x * span; j0 < dcols; j0 += (int64_t)gridDim.x * span) {
      uint16_t v[kPadPer];
#pragma unroll
      for (int e = 0; e < kPadPer; e++) {
        const int64_t j = j0 + e * kThreads + threadIdx.x;
        v[e] = j < reach ? src[r * sld + j] : (uint16_t)0;
      }
#pragma unroll
      for (int e = 0; e < kPadPer; e++) {
        const int64_t j = j0 + e * kThreads + threadIdx.x;
        if (j < dcols) dst[r * dcols + j] = v[e];
      }
    }
  }
}

void repitch(Context &c, void *dst, int64_t drows, int64_t dcols, const void *src, int64_t srows, int64_t scols,
             int64_t sld) {
  const int64_t span = (int64_t)kThreads * kPadPer;
  const dim3 grid((unsigned)std::min<int64_t>((dcols + span - 1) / span, 1024),
                  (unsigned)std::max<int64_t>(1, std::min<int64_t>(drows, 65535)));
  repitch_kernel<<<grid, kThreads, 0, c.stream>>>(static_cast<uint16_t *>(dst), drows, dcols,
                                                  static_cast<const uint16_t *>(src), srows, scols, sld);
  MT_CUDA_CHECK_LAUNCH("matmul (padded copy)");
}

// The product through the padded problem (padding()); C's padded rows and columns are dropped.
// False, with nothing queued, where the pool cannot hold the copies (the caller then runs the
// product unpadded: slower, but no out-of-memory error that the unpadded product would not give).
bool launch_padded(Context &c, const MatmulArgs &g, const Padding &pad, cudaDataType_t type,
                   cublasComputeType_t compute, const void *alpha, const void *beta) {
  // Stored sizes (rows, cols) of A and B, before and after.
  const int64_t ra = g.trans_a ? g.k : g.m, ca = g.trans_a ? g.m : g.k;
  const int64_t pra = g.trans_a ? pad.k : pad.m, pca = g.trans_a ? pad.m : pad.k;
  const int64_t rb = g.trans_b ? g.n : g.k, cb = g.trans_b ? g.k : g.n;
  const int64_t prb = g.trans_b ? pad.n : pad.k, pcb = g.trans_b ? pad.k : pad.n;
  const int64_t e = 2;
  std::unique_ptr<PoolBuffer> ba, bb, bc;
  try {
    if (pad.a) ba.reset(new PoolBuffer(pra * pca * e));
    if (pad.b) bb.reset(new PoolBuffer(prb * pcb * e));
    if (pad.c) bc.reset(new PoolBuffer(pad.m * pad.n * e));
  } catch (const Error &err) {
    if (err.code() != Code::OUT_OF_MEMORY) throw;
    return false;  // the buffers taken so far go back, nothing was queued
  }
  if (pad.a) repitch(c, ba->as<void>(), pra, pca, g.a, ra, ca, ca);
  if (pad.b) repitch(c, bb->as<void>(), prb, pcb, g.b, rb, cb, cb);
  MatmulArgs p = g;
  p.m = pad.m, p.n = pad.n, p.k = pad.k;
  p.a = pad.a ? ba->as<void>() : g.a;
  p.b = pad.b ? bb->as<void>() : g.b;
  p.c = pad.c ? bc->as<void>() : g.c;
  p.stride_c = p.m * p.n;
  cublas_gemm(c, p, type, compute, alpha, beta, p.a, g.trans_a ? p.m : p.k, p.b, g.trans_b ? p.k : p.n, p.c, p.n);
  if (pad.c) repitch(c, g.c, g.m, g.n, bc->as<void>(), pad.m, pad.n, pad.n);
  g_pad_runs.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

bool launch_matmul(const MatmulArgs &g) {
  NvtxRange range("matmul");
  MT_CHECK(g.batch >= 0 && g.m >= 0 && g.n >= 0 && g.k >= 0, INVALID_ARGUMENT,
           "cuda matmul: negative size (batch=%lld, m=%lld, n=%lld, k=%lld)", (long long)g.batch,
           (long long)g.m, (long long)g.n, (long long)g.k);
  if (g.batch == 0 || g.m == 0 || g.n == 0) return false;
  MT_CHECK(g.c && ((g.a && g.b) || g.k == 0), INVALID_ARGUMENT,
           "cuda matmul: null buffer (c=%p, a=%p, b=%p)", g.c, g.a, g.b);
  MT_CHECK(g.stride_a >= 0 && g.stride_b >= 0 && g.stride_c >= 0, INVALID_ARGUMENT,
           "cuda matmul: negative batch stride (a=%lld, b=%lld, c=%lld)", (long long)g.stride_a,
           (long long)g.stride_b, (long long)g.stride_c);
  MT_CHECK(g.batch == 1 || (!g.bias && !g.a_sums), INVALID_ARGUMENT,
           "cuda matmul: bias and a_sums need batch 1, got batch %lld", (long long)g.batch);
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
    return false;
  }
  if (is_tiny(g) && g.batch <= 65535) {
    launch_tiny(c, g);
    return true;
  }

  if (launch_gemm_f32(g)) return true;  // bias and a_sums in the kernel

  const int64_t ld_b = g.trans_b ? g.k : g.n;
  const int64_t ld_a = g.trans_a ? g.m : g.k;
  const int64_t ld_c = g.n;

  const float alpha32 = (float)g.alpha, beta32 = (float)g.beta;
  if (c.lt_epilogues && g.batch == 1 && g.bias && !g.a_sums && g.dtype == DType::F32 &&
      launch_lt_bias(c, g, type, compute, &alpha32, &beta32))
    return true;
  const double alpha64 = g.alpha, beta64 = g.beta;
  const void *alpha = g.dtype == DType::F64 ? (const void *)&alpha64 : (const void *)&alpha32;
  const void *beta = g.dtype == DType::F64 ? (const void *)&beta64 : (const void *)&beta32;

  const Padding pad = padding(g);
  if (!pad.any() || !launch_padded(c, g, pad, type, compute, alpha, beta))
    cublas_gemm(c, g, type, compute, alpha, beta, g.a, ld_a, g.b, ld_b, g.c, ld_c);
  return false;
}

}  // namespace cuda
}  // namespace mt

// ---- the study hook ---------------------------------------------------------------------------
//
// mt_study_gemm_pad: an internal hook for scripts/bench and tests/gpu/test_gemm_pad.py, NOT part of
// the public API (no stability promise; exported only because they drive it through ctypes). It
// picks how every later float16/bfloat16 product with rows that are not whole 16-byte groups runs,
// until the next call:
//   variant 0  production: through padded copies where padding() finds it pays
//   variant 1  never padded (cuBLAS's own kernels for such rows)
//   variant 3  padded whatever the size (for tests on small shapes; the tiny-GEMM path's products,
//              k <= 64 and at most 16384 outputs, still take that path)
// and returns 0 (MT_OK); variant 2 changes nothing and returns how many products have run through
// padded copies in this process. MT_ERR_INVALID_ARGUMENT for another variant. It leaves
// mt_last_error() alone. MT_CUDA_NO_GEMM_PAD set in the environment starts the process on 1.
extern "C" MT_API int64_t mt_study_gemm_pad(int64_t variant) {
  if (variant == 2) return mt::cuda::g_pad_runs.load(std::memory_order_relaxed);
  if (variant < 0 || variant > 3) return (int64_t)mt::Code::INVALID_ARGUMENT;
  mt::cuda::g_pad_variant.store((int)variant, std::memory_order_relaxed);
  return 0;
}

// mt_study_matmul_run: c (m, n) = op(a) @ op(b) on device buffers of dtype (an mt_dtype value:
// float32, float64, float16 or bfloat16; row-major, op transposes where ta / tb), batch 1, through
// matmul's dispatch (so under the selections of mt_study_gemm_f32 and mt_study_gemm_pad), on the
// library's stream (mt_study_stream), for scripts/bench/gemm_study.py and gemm_pad_study.py to time
// the raw products a training step makes. Internal as the hooks above; 0 or an
// mt_status value, with mt_last_error() naming the hook and the values on failure.
extern "C" MT_API int mt_study_matmul_run(void *c, const void *a, const void *b, int64_t m, int64_t n, int64_t k,
                                          int ta, int tb, int dtype) {
  return mt::cuda::study_entry("mt_study_matmul_run", [&] {
    MT_CHECK(c && a && b, INVALID_ARGUMENT, "null buffer (c=%p, a=%p, b=%p)", c, a, b);
    MT_CHECK(m > 0 && n > 0 && k > 0, INVALID_ARGUMENT, "sizes must be positive (m=%lld, n=%lld, k=%lld)",
             (long long)m, (long long)n, (long long)k);
    MT_CHECK(dtype >= 0 && dtype <= (int)mt::DType::BF16, DTYPE, "dtype %d is not a float dtype (0..3)", dtype);
    mt::MatmulArgs g;
    g.c = c, g.a = a, g.b = b;
    g.m = m, g.n = n, g.k = k;
    g.trans_a = ta != 0, g.trans_b = tb != 0;
    g.stride_c = m * n;
    g.dtype = (mt::DType)dtype;
    mt::cuda::launch_matmul(g);
  });
}
