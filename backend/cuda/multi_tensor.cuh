// multi_tensor.cuh - packing many tensors into one launch (the fused optimizers).
//
// A Table (a __grid_constant__ kernel parameter, so no host buffer, no copy, and it is
// captured by value into a CUDA graph) holds up to kMaxTensors tensors: per slot the
// buffers the update needs, the element count n[t] and block_start[t], the first block
// of tensor t. Each block owns one chunk of `chunk` elements of one tensor and finds its
// tensor by binary search over block_start.
//
// defines: kMultiThreads, kMultiMaxTensors, kMultiChunk, table_tensor_of_block, chunk_bounds, for_chunk,
//          for_each_table
#pragma once

#include <cstdint>

#include "backend/cuda/context.h"

namespace mt {
namespace cuda {

constexpr int kMultiThreads = 256;
constexpr int kMultiMaxTensors = 64;     // tensors per launch (the table stays under 4 KB)
constexpr int64_t kMultiChunk = 8192;    // elements per block: 32 per thread, a multiple of every pack size

// The tensor that this block updates: the last t with block_start[t] <= blockIdx.x.
template <class Table>
__device__ __forceinline__ int table_tensor_of_block(const Table &tab) {
  int lo = 0, hi = tab.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (tab.block_start[mid] <= (int64_t)blockIdx.x) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// This block's elements [begin, end) of tensor t (its chunk of `chunk` elements; the last is shorter).
template <class Table>
__device__ __forceinline__ void chunk_bounds(const Table &tab, int t, int64_t chunk, int64_t &begin, int64_t &end) {
  begin = ((int64_t)blockIdx.x - tab.block_start[t]) * chunk;
  end = min(begin + chunk, tab.n[t]);
}

// Walks elements [begin, end) of one chunk with the block's threads: while `aligned` (every
// buffer 16-byte aligned; begin is then a multiple of N), vec(i) for the N elements from i, a
// 16-byte access per buffer; then one(i) for each element left.
template <int N, class Vec, class One>
__device__ __forceinline__ void for_chunk(int64_t begin, int64_t end, bool aligned, Vec &&vec, One &&one) {
  int64_t rest = begin;
  if (aligned) {
    const int64_t vend = begin + (end - begin) / N * N;
    for (int64_t i = begin + (int64_t)threadIdx.x * N; i < vend; i += (int64_t)blockDim.x * N) vec(i);
    rest = vend;
  }
  for (int64_t i = rest + threadIdx.x; i < end; i += blockDim.x) one(i);
}

// Walks tensors 0..count-1 (skipping empty ones), letting fill(tab, slot, i) put tensor i's
// buffers into slot `slot`, and calls launch(tab, blocks) whenever a table is full and once
// at the end. Table needs n[], block_start[] and count, and kMaxTensors slots.
template <class Table, int kMaxTensors, class Fill, class Launch>
void for_each_table(const char *op, int64_t count, const int64_t *numel, int64_t chunk, Fill fill, Launch launch) {
  Table tab{};
  int64_t blocks = 0;
  auto flush = [&]() {
    if (tab.count == 0) return;
    MT_CHECK(blocks < (int64_t(1) << 31), INVALID_ARGUMENT, "cuda %s: %lld blocks in one launch", op,
             (long long)blocks);
    launch(tab, (unsigned)blocks);
    MT_CUDA_CHECK_LAUNCH(op);
    tab = Table{};
    blocks = 0;
  };
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n = numel[i];
    if (n == 0) continue;
    const int t = tab.count++;
    fill(tab, t, i);
    tab.n[t] = n;
    tab.block_start[t] = blocks;
    blocks += (n + chunk - 1) / chunk;
    if (tab.count == kMaxTensors) flush();
  }
  flush();
}

}  // namespace cuda
}  // namespace mt
