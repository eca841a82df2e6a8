// parallel.h - contiguous ranges of an index space on up to 16 host threads.
//
//   parallel_ranges(n, align, min_per_thread, f)   calls f(i0, i1) over [0, n) split into at
//                                                  most one range a thread, every range but the
//                                                  last starting and ending on a multiple of
//                                                  align; one thread below 2 * min_per_thread
//
// f must be safe to run concurrently on disjoint ranges and must not throw. A thread that cannot
// be started leaves its range to the calling thread, so the work is done either way.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

namespace mt {

inline int host_threads() {
  // Asked once: hardware_concurrency() reads /sys on every call.
  static const int n = (int)std::min<unsigned>(std::max(1u, std::thread::hardware_concurrency()), 16u);
  return n;
}

template <class F>
void parallel_ranges(int64_t n, int64_t align, int64_t min_per_thread, F &&f) {
  const int64_t threads = std::min<int64_t>(host_threads(), std::max<int64_t>(1, n / std::max<int64_t>(1, min_per_thread)));
  if (threads <= 1) {
    if (n > 0) f(int64_t(0), n);
    return;
  }
  const int64_t per = (n / threads + align - 1) / align * align;
  auto range_of = [&](int64_t k) {
    const int64_t i0 = std::min(n, k * per);
    return std::make_pair(i0, k == threads - 1 ? n : std::min(n, i0 + per));
  };
  std::vector<std::thread> pool;
  pool.reserve((size_t)threads);
  int64_t k = 0;
  try {
    for (; k < threads; k++) {
      const auto r = range_of(k);
      if (r.first < r.second) pool.emplace_back([&f, r] { f(r.first, r.second); });
    }
  } catch (...) {  // no thread to be had: the ranges not started run on this one
  }
  for (; k < threads; k++) {
    const auto r = range_of(k);
    if (r.first < r.second) f(r.first, r.second);
  }
  for (auto &th : pool) th.join();
}

}  // namespace mt
