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
// cuBLAS gets a 32 MiB workspace from the same pool (the size NVIDIA recommends
// for Hopper); without one it would cudaMalloc its own, which breaks graph capture.
#include "backend/cuda/context.h"

#include <cstdint>

namespace mt {
namespace cuda {

namespace {
constexpr int64_t kCublasWorkspaceBytes = 32ll << 20;
}

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
}

void *Context::alloc(int64_t nbytes) {
  MT_CHECK(nbytes >= 0, INVALID_ARGUMENT, "cuda alloc: negative size %lld", (long long)nbytes);
  void *p = nullptr;
  cudaError_t err = cudaMallocAsync(&p, nbytes > 0 ? (size_t)nbytes : 1, stream);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (err == cudaErrorMemoryAllocation)
      fail(Code::OUT_OF_MEMORY, "cuda alloc: out of memory allocating %lld bytes on %s (%lld bytes live)",
           (long long)nbytes, name.c_str(), (long long)live_bytes());
    cuda_fail(err, "cudaMallocAsync", __FILE__, __LINE__);
  }
  std::lock_guard<std::mutex> lock(mu_);
  sizes_[p] = nbytes;
  live_ += nbytes;
  if (capturing_) capture_allocs_[p] = true;
  return p;
}

void Context::free(void *p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(p);
    MT_CHECK(it != sizes_.end(), INVALID_ARGUMENT,
             "cuda free: pointer %p was not returned by the cuda allocator (or was already freed)", p);
    live_ -= it->second;
    sizes_.erase(it);
    if (capturing_ && !capture_allocs_.erase(p)) {
      deferred_frees_.push_back(p);  // made before the capture: free it once, after
      return;
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
  std::vector<void *> frees;
  {
    std::lock_guard<std::mutex> lock(mu_);
    capturing_ = false;
    capture_allocs_.clear();
    frees.swap(deferred_frees_);
  }
  for (void *p : frees) MT_CUDA_CHECK(cudaFreeAsync(p, stream));
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    fail(Code::STATE, "recording the graph failed: %s (was something synchronized or read back while recording?)",
         cudaGetErrorString(err));
  }
  cudaGraphExec_t exec = nullptr;
  err = cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
  (void)cudaGraphDestroy(graph);
  if (err != cudaSuccess) cuda_fail(err, "cudaGraphInstantiateWithFlags", __FILE__, __LINE__);
  return exec;
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
