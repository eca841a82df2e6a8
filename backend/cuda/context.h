// context.h - the one CUDA context every launcher runs on, and the error macros.
//
// One device (0), one non-blocking stream, one cuBLAS handle bound to that stream
// with a workspace of its own, one stream-ordered memory pool (the device's default
// mempool, release threshold UINT64_MAX so freed blocks are kept and reused).
// Everything is created on first use of context() and lives until the process ends:
// the context is deliberately never destroyed, because tearing down CUDA objects from
// a static destructor races the runtime's own teardown at exit.
//
// Launchers follow one shape (see STYLE.md):
//   NvtxRange r("op");                 // named range for Nsight
//   Context &c = context();
//   ... check preconditions (MT_CHECK) ...
//   kernel<<<grid, block, 0, c.stream>>>(...);
//   MT_CUDA_CHECK_LAUNCH("op");
// and never synchronize the host or allocate outside the pool, so a training step can
// be captured into a CUDA graph.
//
// defines: Context, context, cuda_fail, MT_CUDA_CHECK, MT_CUDA_CHECK_LAUNCH,
//          MT_CUBLAS_CHECK, NvtxRange, PoolBuffer, grid_1d
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/pointer_map.h"

namespace mt {
namespace cuda {

// Throws Error(OUT_OF_MEMORY) for cudaErrorMemoryAllocation, Error(CUDA) otherwise,
// naming the call, the runtime's message and file:line. Clears the thread's
// last-error slot first so a later cudaGetLastError() does not report it twice.
[[noreturn]] void cuda_fail(cudaError_t err, const char *what, const char *file, int line);
// The same for the cudaGetLastError() after a kernel launch; `op` names the kernel's op.
[[noreturn]] void cuda_launch_fail(cudaError_t err, const char *op, const char *file, int line);
[[noreturn]] void cublas_fail(cublasStatus_t st, const char *what, const char *file, int line);

}  // namespace cuda
}  // namespace mt

#define MT_CUDA_CHECK(call)                                                        \
  do {                                                                             \
    cudaError_t mt_err_ = (call);                                                  \
    if (mt_err_ != cudaSuccess) ::mt::cuda::cuda_fail(mt_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After every <<<...>>>: launch-configuration errors and earlier asynchronous faults.
#define MT_CUDA_CHECK_LAUNCH(opname)                                                   \
  do {                                                                                 \
    cudaError_t mt_err_ = cudaGetLastError();                                          \
    if (mt_err_ != cudaSuccess) ::mt::cuda::cuda_launch_fail(mt_err_, opname, __FILE__, __LINE__); \
  } while (0)

#define MT_CUBLAS_CHECK(call)                                                          \
  do {                                                                                 \
    cublasStatus_t mt_st_ = (call);                                                    \
    if (mt_st_ != CUBLAS_STATUS_SUCCESS)                                               \
      ::mt::cuda::cublas_fail(mt_st_, #call, __FILE__, __LINE__);                      \
  } while (0)

namespace mt {
namespace cuda {

class Context {
 public:
  Context();  // throws Error(DEVICE) when no usable GPU
  Context(const Context &) = delete;
  Context &operator=(const Context &) = delete;

  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublas_lt = nullptr;  // products with a fused bias epilogue (matmul.cu)
  int sm_count = 1;
  int cc_major = 0;  // compute capability major (9: Hopper; thread-block clusters from 9 on)
  // Whether launch_pdl (kernel_utils.cuh) may use programmatic dependent launch: compute
  // capability 9 and later, unless MT_CUDA_NO_PDL is set in the environment (for comparisons).
  bool pdl = false;
  // Whether launch_matmul may fuse MatmulArgs' bias into a cuBLASLt epilogue: unless
  // MT_CUDA_NO_LT_EPILOGUE is set in the environment (for comparisons).
  bool lt_epilogues = true;
  std::string name;

  // User-visible allocations: tracked so live_bytes() is exact and free() can
  // reject foreign pointers. Blocks of up to 1 MiB freed outside a capture are cached on the
  // host by size class and handed to the next alloc of their class (see context.cu).
  void *alloc(int64_t nbytes);
  void free(void *p);
  int64_t live_bytes() const;

  // Launcher temporaries (reduction partials): pool memory, stream-ordered,
  // not counted in live_bytes.
  void *scratch_alloc(int64_t nbytes);
  void scratch_free(void *p) noexcept;

  // Graph capture of the stream. While capturing, allocations become the graph's
  // (replays reuse their addresses), and frees of memory allocated before the capture
  // are deferred to its end: a free recorded into the graph would run at every replay.
  void capture_begin();
  cudaGraphExec_t capture_end();  // instantiated with auto-free-on-launch
  bool capturing() const { return capturing_; }
  // The workspace that cuBLAS and cuBLASLt share (their calls are ordered on `stream`).
  void *cublas_workspace() const { return cublas_workspace_; }
  static constexpr int64_t kCublasWorkspaceBytes = 32ll << 20;
  // What the graph recorded last holds, by node kind (kernels are the launches of the recorded
  // work, cuBLAS's and CUB's included): filled by capture_end, read by mt_study_graph_nodes.
  enum GraphNodeKind { kKernelNodes, kMemcpyNodes, kMemsetNodes, kAllocNodes, kFreeNodes, kOtherNodes, kNodeKinds };
  std::mutex graph_nodes_mu;  // guards the two below
  int64_t graph_nodes[kNodeKinds] = {};
  bool graph_recorded = false;
  // Throws Error(STATE) naming `what` while capturing (host reads cannot be recorded).
  void check_not_capturing(const char *what) const;

 private:
  void count_graph_nodes(cudaGraph_t graph) noexcept;
  static bool read_graph_nodes(cudaGraph_t graph, int64_t (&counts)[kNodeKinds]) noexcept;

  // The block cache (context.cu): freed blocks of at most kCacheMaxBlock bytes, kept by
  // power-of-two size class for the next alloc of that class, without a CUDA call.
  static constexpr int kCacheClasses = 13;                // 256 B .. 1 MiB
  static constexpr int64_t kCacheMinBlock = 256;
  static constexpr int64_t kCacheMaxBlock = 1ll << 20;
  static constexpr int64_t kCacheMaxBytes = 64ll << 20;   // cached bytes at most, all classes
  static constexpr int64_t kUncached = 1ll << 62;        // sizes_ flag: not a class-sized block
  static int cache_class(int64_t nbytes);                 // -1: not cached
  void *cache_take_locked(int64_t nbytes);
  bool cache_put_locked(void *p, int64_t nbytes);
  bool cache_release();                                   // every cached block back to the pool
  bool block_cache_ = true;  // off with MT_CUDA_NO_BLOCK_CACHE in the environment
  std::vector<void *> cache_[kCacheClasses];
  int64_t cached_bytes_ = 0;

  bool capturing_ = false;
  std::unordered_map<void *, bool> capture_allocs_;  // allocated during the current capture
  std::vector<std::pair<void *, int64_t>> deferred_frees_;  // block, sizes_ value
  void *cublas_workspace_ = nullptr;
  mutable std::mutex mu_;
  PointerMap sizes_;  // block -> the size asked for | kUncached (no allocation per entry)
  int64_t live_ = 0;
};

// The process-wide context, created on first call (thread-safe); a failed creation
// throws and is retried by the next call.
Context &context();

// Number of blocks for a grid-stride kernel over `work` items of `per_block` items
// each: enough to fill the GPU a few times over, never more than needed, at least 1.
inline unsigned grid_1d(int64_t work, int64_t per_block, int blocks_per_sm = 8) {
  int64_t need = (work + per_block - 1) / per_block;
  int64_t cap = (int64_t)context().sm_count * blocks_per_sm;
  if (need > cap) need = cap;
  return need < 1 ? 1u : (unsigned)need;
}

// A named NVTX range for the lifetime of a launcher (costs a few ns with no tool attached).
struct NvtxRange {
  explicit NvtxRange(const char *name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange &) = delete;
  NvtxRange &operator=(const NvtxRange &) = delete;
};

// A launcher temporary from the pool; freed stream-ordered on scope exit, so the
// kernels queued before the free still see valid memory.
class PoolBuffer {
 public:
  explicit PoolBuffer(int64_t nbytes) : p_(context().scratch_alloc(nbytes)) {}
  ~PoolBuffer() { context().scratch_free(p_); }
  PoolBuffer(const PoolBuffer &) = delete;
  PoolBuffer &operator=(const PoolBuffer &) = delete;
  template <class T>
  T *as() const { return static_cast<T *>(p_); }

 private:
  void *p_;
};

}  // namespace cuda
}  // namespace mt
