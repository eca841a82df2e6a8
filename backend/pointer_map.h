// pointer_map.h - a hash map from non-null pointers to int64_t with open addressing (linear
// probing, backward-shift deletion) in one flat array: inserting and erasing allocate nothing
// except when the table doubles, so the registries an op touches on its path (live tensor
// handles, the allocators' pointer-to-size maps) cost no heap traffic in steady state. Not
// thread-safe: the owner locks around it.
//
// defines: PointerMap
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mt {

class PointerMap {
 public:
  // Sets the value of p (non-null), inserting it when absent.
  void insert(const void *p, int64_t value) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    size_t i = home(p);
    while (slots_[i].key && slots_[i].key != p) i = (i + 1) & mask_;
    if (!slots_[i].key) size_++;
    slots_[i] = Slot{p, value};
  }
  // True when p is present (and *value, when given, receives its value).
  bool find(const void *p, int64_t *value = nullptr) const {
    if (!p || slots_.empty()) return false;
    for (size_t i = home(p);; i = (i + 1) & mask_) {
      if (slots_[i].key == p) {
        if (value) *value = slots_[i].value;
        return true;
      }
      if (!slots_[i].key) return false;
    }
  }
  // Removes p; false when it was absent. *value, when given, receives its value.
  bool erase(const void *p, int64_t *value = nullptr) {
    if (!p || slots_.empty()) return false;
    size_t i = home(p);
    while (slots_[i].key != p) {
      if (!slots_[i].key) return false;
      i = (i + 1) & mask_;
    }
    if (value) *value = slots_[i].value;
    // Backward shift: pull later entries of the probe run into the hole, so that no lookup
    // stops early at it and no tombstones pile up.
    for (size_t j = i;;) {
      j = (j + 1) & mask_;
      if (!slots_[j].key) break;
      size_t k = home(slots_[j].key);
      bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);  // k cyclically in (i, j]
      if (stays) continue;
      slots_[i] = slots_[j];
      i = j;
    }
    slots_[i] = Slot{};
    size_--;
    return true;
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    const void *key = nullptr;
    int64_t value = 0;
  };
  size_t home(const void *p) const {
    // Fibonacci hashing of the address: the top bits of the product spread aligned pointers.
    return (size_t)(((uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void grow() {
    const size_t cap = slots_.empty() ? 64 : 2 * slots_.size();
    std::vector<Slot> old(cap);  // may throw bad_alloc: the table is unchanged then
    old.swap(slots_);
    mask_ = cap - 1;
    shift_ = 64;
    for (size_t c = cap; c > 1; c >>= 1) shift_--;
    size_ = 0;
    for (const Slot &s : old)
      if (s.key) insert(s.key, s.value);
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
  size_t mask_ = 0;
  int shift_ = 64;
};

}  // namespace mt
