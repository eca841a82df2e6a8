// context.cu - device selection, stream, cuBLAS handle, the stream-ordered pool.
//
// Memory: cudaMallocAsync / cudaFreeAsync on the context stream from the device's
// default mempool with its release threshold at UINT64_MAX, so a freed block goes
// back to the pool (not the driver) and the next same-sized request in stream order
// reuses it: a steady-state training step does no driver allocations at all, and
// alloc/free are capturable into a CUDA graph. The pool hands out at least 1 byte,
// so alloc(0) still returns a unique pointer. A mutex-guarded map from pointer to
// size keeps live_bytes exact and lets free() reject pointers it never handed out.
//
// In front of the pool, a block cache on the host: outside a capture, blocks of up to 1 MiB
// are taken from the pool in power-of-two size classes (256 B up), and a freed one goes to its
// class's list instead of cudaFreeAsync; the next alloc of that class pops it without a CUDA
// call. Every launch is on the one stream, so the block's earlier users are ordered before its
// next ones, as with the pool's own stream-ordered reuse. On an H100/H200 an eager op's
// cudaMallocAsync + cudaFreeAsync pair costs about as much host time as a third of its launch.
// While capturing, the cache is left alone: allocations become the graph's (exact sizes,
// flagged kUncached, as every block not of a class size is) and are always given back with
// cudaFreeAsync, since a graph launched
// with auto-free-on-launch frees its blocks that are still out, and a cached block would be
// handed out twice. At most 64 MiB is cached; an allocation that fails gives the cache back to
// the pool and retries once. MT_CUDA_NO_BLOCK_CACHE in the environment turns the cache off.
//
// cuBLAS gets a 32 MiB workspace from the same pool (the size NVIDIA recommends
// for Hopper); without one it would cudaMalloc its own, which breaks graph capture.
#include "backend/cuda/context.h"

#include "minitorch.h"  // MT_API, for the study hook

#include <cstdint>
#include <cstdlib>

namespace mt {
namespace cuda {

void cuda_fail(cudaError_t err, const char *what, const char *file, int line) {
  (void)cudaGetLastError();  // reset the thread's non-sticky error slot
  if (err == cudaErrorMemoryAllocation)
    fail(Code::OUT_OF_MEMORY, "CUDA out of memory in %s: %s (%s:%d)", what, cudaGetErrorString(err),
         file, line);
  fail(Code::CUDA, "CUDA error in %s: %s (%s) at %s:%d", what, cudaGetErrorString(err),
       cudaGetErrorName(err), file, line);
}

void cuda_launch_fail(cudaError_t err, const char *op, const char *file, int line) {
  (void)cudaGetLastError();
  fail(Code::CUDA, "CUDA error at the launch of the %s kernel (or from earlier asynchronous work): %s (%s) at %s:%d", op, cudaGetErrorString(err),
       cudaGetErrorName(err), file, line);
}

void cublas_fail(cublasStatus_t st, const char *what, const char *file, int line) {
  (void)cudaGetLastError();
  if (st == CUBLAS_STATUS_ALLOC_FAILED)
    fail(Code::OUT_OF_MEMORY, "cuBLAS out of memory in %s (%s:%d)", what, file, line);
  fail(Code::CUDA, "cuBLAS error in %s: %s at %s:%d", what, cublasGetStatusString(st), file, line);
}

Context::Context() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    fail(Code::DEVICE, "cuda backend: no usable GPU: cudaGetDeviceCount failed: %s (%s)",
         cudaGetErrorString(err), cudaGetErrorName(err));
  }
  if (count <= 0) fail(Code::DEVICE, "cuda backend: no usable GPU: cudaGetDeviceCount reported 0 devices");

  device = 0;
  MT_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop;
  MT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  name = prop.name;
  sm_count = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
  cc_major = prop.major;
  pdl = cc_major >= 9 && !std::getenv("MT_CUDA_NO_PDL");
  lt_epilogues = !std::getenv("MT_CUDA_NO_LT_EPILOGUE");
  block_cache_ = !std::getenv("MT_CUDA_NO_BLOCK_CACHE");

  int pools = 0;
  MT_CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device));
  if (!pools)
    fail(Code::DEVICE, "cuda backend: device 0 (%s) does not support stream-ordered memory pools",
         name.c_str());
  cudaMemPool_t pool;
  MT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t threshold = UINT64_MAX;
  MT_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));

  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  MT_CUDA_CHECK(cudaMallocAsync(&cublas_workspace_, (size_t)kCublasWorkspaceBytes, stream));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  MT_CUBLAS_CHECK(cublasCreate(&cublas));
  // cublasSetStream resets the workspace to cuBLAS's own, so the stream goes first.
  MT_CUBLAS_CHECK(cublasSetStream(cublas, stream));
  MT_CUBLAS_CHECK(cublasSetWorkspace(cublas, cublas_workspace_, (size_t)kCublasWorkspaceBytes));
  MT_CUBLAS_CHECK(cublasLtCreate(&cublas_lt));
}

int Context::cache_class(int64_t nbytes) {
  if (nbytes > kCacheMaxBlock) return -1;
  int k = 0;
  for (int64_t size = kCacheMinBlock; size < nbytes; size <<= 1) k++;
  return k;
}

void *Context::cache_take_locked(int64_t nbytes) {
  const int k = cache_class(nbytes);
  if (!block_cache_ || capturing_ || k < 0 || cache_[k].empty()) return nullptr;
  void *p = cache_[k].back();
  cache_[k].pop_back();
  cached_bytes_ -= kCacheMinBlock << k;
  return p;
}

// Keeps p (sizes_ value v, already erased from sizes_) for the next alloc of its class; false
// when it must go back to the pool instead.
bool Context::cache_put_locked(void *p, int64_t v) {
  const int k = cache_class(v & ~kUncached);
  if (!block_cache_ || capturing_ || (v & kUncached) || k < 0) return false;
  if (cached_bytes_ + (kCacheMinBlock << k) > kCacheMaxBytes) return false;
  cache_[k].push_back(p);  // may throw: the caller frees p then
  cached_bytes_ += kCacheMinBlock << k;
  return true;
}

bool Context::cache_release() {
  std::vector<void *> blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (capturing_) return false;
    for (auto &c : cache_) {
      blocks.insert(blocks.end(), c.begin(), c.end());
      c.clear();
    }
    cached_bytes_ = 0;
  }
  for (void *p : blocks) (void)cudaFreeAsync(p, stream);
  return !blocks.empty();
}

void *Context::alloc(int64_t nbytes) {
  MT_CHECK(nbytes >= 0, INVALID_ARGUMENT, "cuda alloc: negative size %lld", (long long)nbytes);
  void *p = nullptr;
  bool capturing = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    p = cache_take_locked(nbytes);
    capturing = capturing_;
    if (p) {
      try {
        sizes_.insert(p, nbytes);
      } catch (...) {
        cache_put_locked(p, nbytes);  // back where it was (its list had the room)
        throw;
      }
      live_ += nbytes;
      return p;
    }
  }
  // A cacheable size outside a capture takes its whole class, so the block can serve the
  // class later; the rest (and everything while capturing) the size asked for.
  const int k = block_cache_ && !capturing ? cache_class(nbytes) : -1;
  const size_t bytes = k >= 0 ? (size_t)(kCacheMinBlock << k) : nbytes > 0 ? (size_t)nbytes : 1;
  cudaError_t err = cudaMallocAsync(&p, bytes, stream);
  if (err == cudaErrorMemoryAllocation && !capturing) {
    (void)cudaGetLastError();
    if (cache_release()) {  // the cached blocks back to the pool, the pool's unused memory to the driver
      cudaMemPool_t pool;
      if (cudaStreamSynchronize(stream) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess)
        (void)cudaMemPoolTrimTo(pool, 0);
      (void)cudaGetLastError();
      err = cudaMallocAsync(&p, bytes, stream);
    }
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (err == cudaErrorMemoryAllocation)
      fail(Code::OUT_OF_MEMORY, "cuda alloc: out of memory allocating %lld bytes on %s (%lld bytes live)",
           (long long)nbytes, name.c_str(), (long long)live_bytes());
    cuda_fail(err, "cudaMallocAsync", __FILE__, __LINE__);
  }
  std::lock_guard<std::mutex> lock(mu_);
  try {
    // Not class-sized (the size asked for, or recorded into a graph): never cached.
    sizes_.insert(p, k < 0 || capturing_ ? nbytes | kUncached : nbytes);
    try {
      if (capturing_) capture_allocs_[p] = true;
    } catch (...) {
      sizes_.erase(p);
      throw;
    }
  } catch (...) {  // no host memory to track the block: give it back
    (void)cudaFreeAsync(p, stream);
    throw;
  }
  live_ += nbytes;
  return p;
}

void Context::free(void *p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t v = 0;
    MT_CHECK(sizes_.erase(p, &v), INVALID_ARGUMENT,
             "cuda free: pointer %p was not returned by the cuda allocator (or was already freed)", p);
    live_ -= v & ~kUncached;
    if (capturing_ && !capture_allocs_.erase(p)) {
      deferred_frees_.emplace_back(p, v);  // made before the capture: free it once, after
      return;
    }
    try {
      if (cache_put_locked(p, v)) return;
    } catch (...) {  // no host memory for the list: the pool takes it
    }
  }
  MT_CUDA_CHECK(cudaFreeAsync(p, stream));
}

void Context::capture_begin() {
  MT_CHECK(!capturing_, STATE, "a graph is already being recorded");
  MT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  std::lock_guard<std::mutex> lock(mu_);
  capturing_ = true;
  capture_allocs_.clear();
}

cudaGraphExec_t Context::capture_end() {
  MT_CHECK(capturing_, STATE, "no graph is being recorded");
  cudaGraph_t graph = nullptr;
  cudaError_t err = cudaStreamEndCapture(stream, &graph);
  std::vector<std::pair<void *, int64_t>> frees;
  {
    std::lock_guard<std::mutex> lock(mu_);
    capturing_ = false;
    capture_allocs_.clear();
    size_t n = 0;  // the blocks the cache does not keep, moved to the front in place
    for (auto &f : deferred_frees_) {
      bool kept = false;
      try {
        kept = cache_put_locked(f.first, f.second);
      } catch (...) {
      }
      if (!kept) deferred_frees_[n++] = f;
    }
    deferred_frees_.resize(n);
    frees.swap(deferred_frees_);
  }
  for (auto &f : frees) MT_CUDA_CHECK(cudaFreeAsync(f.first, stream));
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    fail(Code::STATE, "recording the graph failed: %s (was something synchronized or read back while recording?)",
         cudaGetErrorString(err));
  }
  count_graph_nodes(graph);
  cudaGraphExec_t exec = nullptr;
  err = cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
  (void)cudaGraphDestroy(graph);
  if (err != cudaSuccess) cuda_fail(err, "cudaGraphInstantiateWithFlags", __FILE__, __LINE__);
  return exec;
}

// Fills graph_nodes from the recorded graph; on a failure to read it, the counts stay unset
// (graph_recorded false) and the recording itself goes on.
void Context::count_graph_nodes(cudaGraph_t graph) noexcept {
  int64_t counts[kNodeKinds] = {};
  bool ok = read_graph_nodes(graph, counts);
  std::lock_guard<std::mutex> lock(graph_nodes_mu);
  for (int k = 0; k < kNodeKinds; k++) graph_nodes[k] = counts[k];
  graph_recorded = ok;
}

bool Context::read_graph_nodes(cudaGraph_t graph, int64_t (&counts)[kNodeKinds]) noexcept {
  size_t count = 0;
  if (cudaGraphGetNodes(graph, nullptr, &count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  std::vector<cudaGraphNode_t> nodes;
  try {
    nodes.resize(count);
  } catch (...) {
    return false;
  }
  if (count && cudaGraphGetNodes(graph, nodes.data(), &count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  for (size_t i = 0; i < count; i++) {
    cudaGraphNodeType type;
    if (cudaGraphNodeGetType(nodes[i], &type) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    switch (type) {
      case cudaGraphNodeTypeKernel: counts[kKernelNodes]++; break;
      case cudaGraphNodeTypeMemcpy: counts[kMemcpyNodes]++; break;
      case cudaGraphNodeTypeMemset: counts[kMemsetNodes]++; break;
      case cudaGraphNodeTypeMemAlloc: counts[kAllocNodes]++; break;
      case cudaGraphNodeTypeMemFree: counts[kFreeNodes]++; break;
      default: counts[kOtherNodes]++; break;
    }
  }
  return true;
}

void Context::check_not_capturing(const char *what) const {
  MT_CHECK(!capturing_, STATE, "%s while a graph is being recorded: nothing can be read back or synchronized then",
           what);
}

int64_t Context::live_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}

void *Context::scratch_alloc(int64_t nbytes) {
  MT_ASSERT(nbytes >= 0);
  void *p = nullptr;
  cudaError_t err = cudaMallocAsync(&p, nbytes > 0 ? (size_t)nbytes : 1, stream);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (err == cudaErrorMemoryAllocation)
      fail(Code::OUT_OF_MEMORY, "cuda: out of memory allocating a %lld-byte kernel temporary",
           (long long)nbytes);
    cuda_fail(err, "cudaMallocAsync (scratch)", __FILE__, __LINE__);
  }
  return p;
}

void Context::scratch_free(void *p) noexcept {
  // Runs from destructors, possibly while an exception unwinds: report nothing and
  // leave a failure for the next checked call to see.
  if (p) (void)cudaFreeAsync(p, stream);
}

Context &context() {
  static Context *ctx = new Context();
  return *ctx;
}

}  // namespace cuda
}  // namespace mt

// ---- the study hook ---------------------------------------------------------------------------
//
// mt_study_graph_nodes: an internal hook for scripts/bench/workloads.py and tests/gpu, NOT part of
// the public API (no stability promise; exported for ctypes, with the mt_ prefix so the library
// exports nothing else). It counts the launches of a stretch of work exactly, cuBLAS's and CUB's
// kernels included, without a counter on the launch path: record the work with mt_graph_begin /
// mt_graph_end, then read what the graph holds.
//   counts  borrowed; receives up to n entries: [0] kernel launches, [1] memcpy, [2] memset,
//           [3] memory allocations, [4] memory frees, [5] other nodes, of the graph recorded last
//           (by any thread)
// Returns 0 (MT_OK), MT_ERR_INVALID_ARGUMENT (counts NULL or n < 1), MT_ERR_STATE (no graph
// recorded yet, or its nodes could not be read), MT_ERR_DEVICE (no GPU). It leaves
// mt_last_error() alone.
extern "C" MT_API int mt_study_graph_nodes(int64_t *counts, int64_t n) {
  using namespace mt;
  try {
    MT_CHECK(counts && n >= 1, INVALID_ARGUMENT, "mt_study_graph_nodes: counts %p, n %lld", (void *)counts,
             (long long)n);
    cuda::Context &c = cuda::context();
    std::lock_guard<std::mutex> lock(c.graph_nodes_mu);
    if (!c.graph_recorded) return (int)Code::STATE;
    for (int64_t i = 0; i < n && i < cuda::Context::kNodeKinds; i++) counts[i] = c.graph_nodes[i];
    return 0;
  } catch (const Error &e) {
    return (int)e.code();
  } catch (...) {
    return (int)Code::INTERNAL;
  }
}
