// tensor.h - the tensor behind an mt_tensor handle, its storage, and Ref, the
// intrusive smart pointer the library uses internally.
//
// A tensor is dense and row-major: storage + byte offset + shape. Views (reshape,
// detach) share the storage. The reference count is the handle's: the C caller,
// the tape, .grad fields and Refs all hold references on the same counter, and
// mt_live_tensors() counts tensors alive.
//
// defines: Storage, mt_tensor, Ref, make_tensor, tensor_from_storage, is_live_tensor
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "backend/backend.h"
#include "backend/shape.h"

namespace mt {

struct Storage {
  void *data = nullptr;
  int64_t nbytes = 0;
  Device device = Device::CPU;
  bool owned = true;  // false: wraps caller memory (mt_tensor_from_blob, DLPack imports)
  // Runs once when the storage dies, for memory it does not own (owned == false): a
  // DLPack import calls its producer's deleter here. Must not throw.
  std::function<void()> on_release;
  Storage(void *d, int64_t n, Device dev, bool own) : data(d), nbytes(n), device(dev), owned(own) {}
  ~Storage();
  Storage(const Storage &) = delete;
  Storage &operator=(const Storage &) = delete;
};

class Ref;

}  // namespace mt

struct mt_tensor {
  std::atomic<int64_t> refs{1};
  std::shared_ptr<mt::Storage> storage;
  int64_t offset = 0;  // bytes from storage->data
  mt::Shape shape;
  mt::DType dtype = mt::DType::F32;
  mt::Device device = mt::Device::CPU;
  bool requires_grad = false;
  bool is_leaf = true;      // false once produced by a recorded op
  mt_tensor *grad = nullptr;  // owned reference to the accumulated gradient

  int64_t numel() const { return mt::shape_numel(shape); }
  int64_t ndim() const { return (int64_t)shape.size(); }
  int64_t nbytes() const { return numel() * mt::dtype_size(dtype); }
  void *data() const { return (char *)storage->data + offset; }
  mt::Backend &backend() const { return mt::backend_for(device); }
};

namespace mt {

using Tensor = ::mt_tensor;

void tensor_retain(Tensor *t);
void tensor_release(Tensor *t);  // deletes at zero; NULL is a no-op
// True when t is a tensor that is alive now (registered and not yet deleted).
bool is_live_tensor(const Tensor *t);
int64_t live_tensor_count();

// An owning pointer: copying retains, destruction releases.
class Ref {
 public:
  Ref() = default;
  Ref(std::nullptr_t) {}
  // Adopts a reference the caller already owns.
  static Ref adopt(Tensor *t) { Ref r; r.p_ = t; return r; }
  // Takes a new reference.
  static Ref share(Tensor *t) { if (t) tensor_retain(t); return adopt(t); }
  Ref(const Ref &o) : p_(o.p_) { if (p_) tensor_retain(p_); }
  Ref(Ref &&o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  Ref &operator=(Ref o) noexcept { std::swap(p_, o.p_); return *this; }
  ~Ref() { if (p_) tensor_release(p_); }
  Tensor *get() const { return p_; }
  Tensor *operator->() const { return p_; }
  Tensor &operator*() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }
  // Gives up ownership: the caller now owns the reference.
  Tensor *release() { Tensor *t = p_; p_ = nullptr; return t; }
 private:
  Tensor *p_ = nullptr;
};

// A new tensor with fresh (uninitialized) storage on `device`.
Ref make_tensor(const Shape &shape, DType dtype, Device device);
// A new tensor viewing `storage` at `offset` bytes.
Ref tensor_from_storage(std::shared_ptr<Storage> storage, int64_t offset, const Shape &shape, DType dtype);

}  // namespace mt
