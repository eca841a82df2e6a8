// small_vector.h - a vector of trivially copyable values that keeps up to N of them inline,
// so that the shapes every op builds (N = kMaxDims covers every tensor) cost no heap
// allocation. Longer contents spill to the heap, as std::vector would hold them, so nothing
// is refused for its length. The interface is the part of std::vector the library uses, and
// it converts to and from std::vector<T> where an interface still takes one.
//
// defines: SmallVector
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace mt {

template <class T, size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable<T>::value, "SmallVector holds trivially copyable values");

 public:
  using value_type = T;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T &;
  using const_reference = const T &;
  using pointer = T *;
  using const_pointer = const T *;
  using iterator = T *;
  using const_iterator = const T *;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  SmallVector() noexcept {}
  explicit SmallVector(size_t n, const T &v = T()) { assign(n, v); }
  SmallVector(std::initializer_list<T> il) { assign(il.begin(), il.end()); }
  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  SmallVector(It first, It last) { assign(first, last); }
  SmallVector(const std::vector<T> &v) { assign(v.begin(), v.end()); }  // NOLINT: implicit on purpose
  SmallVector(const SmallVector &o) { assign(o.begin(), o.end()); }
  SmallVector(SmallVector &&o) noexcept { take(o); }
  ~SmallVector() { release(); }

  SmallVector &operator=(const SmallVector &o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  SmallVector &operator=(SmallVector &&o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  SmallVector &operator=(std::initializer_list<T> il) {
    assign(il.begin(), il.end());
    return *this;
  }
  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }  // NOLINT: implicit on purpose

  void assign(size_t n, const T &v) {
    T copy = v;  // v may live in our own buffer
    size_ = 0;
    reserve(n);
    std::fill(data_, data_ + n, copy);
    size_ = n;
  }
  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  void assign(It first, It last) {
    size_t n = (size_t)std::distance(first, last);
    if (n > cap_) {  // the source may live in our own buffer: copy before letting it go
      SmallVector tmp;
      tmp.reserve(n);
      std::copy(first, last, tmp.data_);
      tmp.size_ = n;
      *this = std::move(tmp);
      return;
    }
    std::copy(first, last, data_);
    size_ = n;
  }
  void assign(std::initializer_list<T> il) { assign(il.begin(), il.end()); }

  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_t capacity() const noexcept { return cap_; }
  T *data() noexcept { return data_; }
  const T *data() const noexcept { return data_; }
  iterator begin() noexcept { return data_; }
  iterator end() noexcept { return data_ + size_; }
  const_iterator begin() const noexcept { return data_; }
  const_iterator end() const noexcept { return data_ + size_; }
  const_iterator cbegin() const noexcept { return data_; }
  const_iterator cend() const noexcept { return data_ + size_; }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }
  T &operator[](size_t i) noexcept { return data_[i]; }
  const T &operator[](size_t i) const noexcept { return data_[i]; }
  T &at(size_t i) {
    if (i >= size_) throw std::out_of_range("SmallVector::at");
    return data_[i];
  }
  const T &at(size_t i) const {
    if (i >= size_) throw std::out_of_range("SmallVector::at");
    return data_[i];
  }
  T &front() noexcept { return data_[0]; }
  const T &front() const noexcept { return data_[0]; }
  T &back() noexcept { return data_[size_ - 1]; }
  const T &back() const noexcept { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n <= cap_) return;
    size_t cap = std::max(n, 2 * cap_);
    T *p = static_cast<T *>(std::malloc(cap * sizeof(T)));
    if (!p) throw std::bad_alloc();
    if (size_) std::memcpy(p, data_, size_ * sizeof(T));
    if (data_ != inline_) std::free(data_);
    data_ = p;
    cap_ = cap;
  }
  void resize(size_t n, const T &v = T()) {
    T copy = v;
    reserve(n);
    if (n > size_) std::fill(data_ + size_, data_ + n, copy);
    size_ = n;
  }
  void clear() noexcept { size_ = 0; }
  void push_back(const T &v) {
    if (size_ == cap_) {
      T copy = v;  // v may live in our own buffer
      reserve(size_ + 1);
      data_[size_++] = copy;
      return;
    }
    data_[size_++] = v;
  }
  template <class... A>
  T &emplace_back(A &&...a) {
    push_back(T(std::forward<A>(a)...));
    return back();
  }
  void pop_back() noexcept { --size_; }

  iterator insert(const_iterator pos, const T &v) {
    size_t i = (size_t)(pos - data_);
    T copy = v;
    reserve(size_ + 1);
    std::memmove(data_ + i + 1, data_ + i, (size_ - i) * sizeof(T));
    data_[i] = copy;
    ++size_;
    return data_ + i;
  }
  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  iterator insert(const_iterator pos, It first, It last) {
    size_t i = (size_t)(pos - data_);
    SmallVector src(first, last);  // the source may live in our own buffer
    size_t n = src.size();
    reserve(size_ + n);
    std::memmove(data_ + i + n, data_ + i, (size_ - i) * sizeof(T));
    if (n) std::memcpy(data_ + i, src.data(), n * sizeof(T));
    size_ += n;
    return data_ + i;
  }
  iterator insert(const_iterator pos, std::initializer_list<T> il) { return insert(pos, il.begin(), il.end()); }
  iterator insert(const_iterator pos, size_t n, const T &v) {
    SmallVector src(n, v);  // v may live in our own buffer
    return insert(pos, src.begin(), src.end());
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    size_t i = (size_t)(first - data_), n = (size_t)(last - first);
    std::memmove(data_ + i, data_ + i + n, (size_ - i - n) * sizeof(T));
    size_ -= n;
    return data_ + i;
  }
  void swap(SmallVector &o) noexcept {
    SmallVector tmp(std::move(o));
    o = std::move(*this);
    *this = std::move(tmp);
  }

  friend bool operator==(const SmallVector &a, const SmallVector &b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const SmallVector &a, const SmallVector &b) { return !(a == b); }
  friend bool operator<(const SmallVector &a, const SmallVector &b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  void release() noexcept {
    if (data_ != inline_) std::free(data_);
    data_ = inline_;
    cap_ = N;
    size_ = 0;
  }
  // Takes o's contents and leaves o empty (inline).
  void take(SmallVector &o) noexcept {
    if (o.data_ == o.inline_) {
      std::memcpy(inline_, o.inline_, o.size_ * sizeof(T));
      data_ = inline_;
      cap_ = N;
    } else {
      data_ = o.data_;
      cap_ = o.cap_;
    }
    size_ = o.size_;
    o.data_ = o.inline_;
    o.cap_ = N;
    o.size_ = 0;
  }

  T *data_ = inline_;
  size_t size_ = 0;
  size_t cap_ = N;
  T inline_[N];
};

}  // namespace mt
