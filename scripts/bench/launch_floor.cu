// launch_floor.cu - what the CUDA runtime costs an eager op on the host, by part: an empty
// kernel's launch (<<<>>>, with cudaGetLastError after it, cudaLaunchKernelEx plain and with
// programmatic dependent launch), a cudaMallocAsync + cudaFreeAsync pair from a pool that keeps
// its memory, that pair around a launch, an NVTX push/pop, cudaGetDevice, and a 16-byte read back.
// Each line is the median of 7 runs of 20000 calls (2000 reads back; 500 rounds of 64 allocations
// then 64 frees) between two
// cudaDeviceSynchronize, in microseconds per call: back-to-back launches are bounded by the GPU's
// own rate of tiny kernels as well as by the host.
//
// Then the launches again in bursts of 16, 256 and 8192 calls, each line the medians of 21 runs
// of the host's part (until the last call returned) and of the whole (until the synchronize
// returned). A burst shorter than the launch queue never waits for the device: where the host's
// part is the whole there, the host is what bounds back-to-back launches.
//
//   make build/launch_floor && build/launch_floor     (part of `make compile-cuda`)
//
// Measured results and what they motivated: docs/benchmarks.md, sections "A block cache in
// front of the CUDA pool" and "Where an eager op's time goes on CUDA".
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
__global__ void empty_k(float *p) { if (p && threadIdx.x == 1000) p[0] = 1; }
__global__ void pdl_k(float *p) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  if (p && threadIdx.x == 1000) p[0] = 1;
}
template <class F> double per_call(F f, int n = 20000) {
  std::vector<double> r;
  for (int rep = 0; rep < 7; rep++) {
    cudaDeviceSynchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; i++) f(i);
    cudaDeviceSynchronize();
    r.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n);
  }
  std::sort(r.begin(), r.end());
  return r[3];
}
// The burst lines for f (see the header).
template <class F> void bursts(const char *name, F f) {
  for (int n : {16, 256, 8192}) {
    std::vector<double> host, whole;
    for (int rep = 0; rep < 21; rep++) {
      cudaDeviceSynchronize();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < n; i++) f();
      auto t1 = std::chrono::steady_clock::now();
      cudaDeviceSynchronize();
      auto t2 = std::chrono::steady_clock::now();
      host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
      whole.push_back(std::chrono::duration<double, std::micro>(t2 - t0).count() / n);
    }
    std::sort(host.begin(), host.end());
    std::sort(whole.begin(), whole.end());
    printf("%-22s burst %5d: host %.3f us, whole %.3f us per call\n", name, n, host[10], whole[10]);
  }
}

int main() {
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    fprintf(stderr, "launch_floor: no usable GPU: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  cudaMemPool_t pool; cudaDeviceGetDefaultMemPool(&pool, 0);
  uint64_t th = UINT64_MAX; cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &th);
  float *buf; cudaMalloc(&buf, 1 << 20);
  printf("empty <<<>>>          %.3f us\n", per_call([&](int) { empty_k<<<1, 32, 0, s>>>(buf); }));
  printf("empty <<<>>> +getlast %.3f us\n", per_call([&](int) { empty_k<<<1, 32, 0, s>>>(buf); (void)cudaGetLastError(); }));
  cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {}; cfg.gridDim = 1; cfg.blockDim = 32; cfg.stream = s; cfg.attrs = at; cfg.numAttrs = 1;
  printf("LaunchKernelEx pdl    %.3f us\n", per_call([&](int) { cudaLaunchKernelEx(&cfg, pdl_k, buf); }));
  cfg.numAttrs = 0;
  printf("LaunchKernelEx plain  %.3f us\n", per_call([&](int) { cudaLaunchKernelEx(&cfg, empty_k, buf); }));
  printf("mallocAsync+free 16B  %.3f us\n", per_call([&](int) { void *p; cudaMallocAsync(&p, 16, s); cudaFreeAsync(p, s); }));
  std::vector<void*> ps(64);
  printf("64 mallocAsync then 64 free (per pair) %.3f us\n", per_call([&](int) { for (auto &p : ps) cudaMallocAsync(&p, 16, s); for (auto p : ps) cudaFreeAsync(p, s); }, 500) / 64);
  printf("malloc+launch+free    %.3f us\n", per_call([&](int) { void *p; cudaMallocAsync(&p, 16, s); empty_k<<<1, 32, 0, s>>>((float*)p); cudaFreeAsync(p, s); }));
  printf("nvtx push/pop         %.3f us\n", per_call([&](int) { nvtxRangePushA("x"); nvtxRangePop(); }));
  printf("getdevice             %.3f us\n", per_call([&](int) { int d; cudaGetDevice(&d); }));
  printf("memcpyasync d2h 16B + sync %.3f us\n", per_call([&](int) { float h[4]; cudaMemcpyAsync(h, buf, 16, cudaMemcpyDeviceToHost, s); cudaStreamSynchronize(s); }, 2000));
  bursts("empty <<<>>>", [&] { empty_k<<<1, 32, 0, s>>>(buf); });
  cfg.numAttrs = 0;
  bursts("LaunchKernelEx plain", [&] { cudaLaunchKernelEx(&cfg, empty_k, buf); });
  cfg.numAttrs = 1;
  bursts("LaunchKernelEx pdl", [&] { cudaLaunchKernelEx(&cfg, pdl_k, buf); });
  bursts("malloc+launch+free", [&] { void *p; cudaMallocAsync(&p, 16, s); empty_k<<<1, 32, 0, s>>>((float *)p); cudaFreeAsync(p, s); });
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    fprintf(stderr, "launch_floor: %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}
