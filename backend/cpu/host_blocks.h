// host_blocks.h - the CPU backend's memory: 64-byte aligned blocks, a pointer-to-size table
// (so live_bytes is exact and free rejects pointers it never handed out), and a cache of freed
// small blocks by size class, so the small tensors an op makes and drops on its path reuse
// memory instead of going through aligned_alloc and free each time. The cache is bounded
// (blocks up to kMaxCachedBytes, kPerClass of each size): at most ~8 MiB held back.
// Reused blocks are not cleared, as fresh ones are not.
//
// defines: cpu::HostBlocks
#pragma once

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include "backend/backend.h"
#include "backend/pointer_map.h"

namespace mt {
namespace cpu {

class HostBlocks {
 public:
  // A block of at least nbytes (one line for 0, so that every block is unique).
  void *alloc(int64_t nbytes) {
    MT_CHECK(nbytes >= 0, INVALID_ARGUMENT, "negative allocation size %lld", (long long)nbytes);
    const size_t sz = rounded(nbytes);
    void *p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<void *> *cls = size_class(sz);
      if (cls && !cls->empty()) {
        p = cls->back();
        cls->pop_back();
        try {
          keep(p, nbytes);
        } catch (...) {
          cls->push_back(p);  // back where it was: the capacity is still there
          throw;
        }
        return p;
      }
    }
    p = std::aligned_alloc(kLine, sz);
    if (!p) fail(Code::OUT_OF_MEMORY, "out of host memory allocating %lld bytes", (long long)nbytes);
    try {
      std::lock_guard<std::mutex> lock(mu_);
      keep(p, nbytes);
    } catch (...) {
      std::free(p);
      throw;
    }
    return p;
  }

  void free(void *p) {
    if (!p) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      int64_t nbytes = 0;
      MT_CHECK(sizes_.erase(p, &nbytes), INVALID_ARGUMENT,
               "pointer %p was not allocated by the cpu backend (or was freed already)", p);
      live_ -= nbytes;
      std::vector<void *> *cls = size_class(rounded(nbytes));
      if (cls && cls->size() < kPerClass) {
        try {
          cls->push_back(p);
          return;
        } catch (...) {  // no room to remember it: give it back instead
        }
      }
    }
    std::free(p);
  }

  int64_t live_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return live_;
  }

 private:
  static constexpr size_t kLine = 64;
  static constexpr size_t kMaxCachedBytes = 4096;
  static constexpr size_t kPerClass = 64;
  static constexpr size_t kClasses = kMaxCachedBytes / kLine;

  static size_t rounded(int64_t nbytes) {
    size_t sz = (size_t)((nbytes + (int64_t)kLine - 1) / (int64_t)kLine * (int64_t)kLine);
    return sz == 0 ? kLine : sz;
  }
  // The cache of blocks of sz bytes (a multiple of kLine), or null when sz is not cached.
  std::vector<void *> *size_class(size_t sz) { return sz <= kMaxCachedBytes ? &cached_[sz / kLine - 1] : nullptr; }
  void keep(void *p, int64_t nbytes) {  // with mu_ held
    sizes_.insert(p, nbytes);
    live_ += nbytes;
  }

  mutable std::mutex mu_;
  PointerMap sizes_;  // block -> the size asked for
  int64_t live_ = 0;
  std::vector<void *> cached_[kClasses];  // class i: free blocks of (i + 1) * kLine bytes
};

}  // namespace cpu
}  // namespace mt
