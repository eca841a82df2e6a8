// tensor.cpp - tensor lifetime: the registry of live handles, retain/release, storage.
#include "tensor.h"

#include <mutex>

#include "backend/pointer_map.h"

namespace mt {
namespace {

// Every live tensor is registered, so that the ABI can tell a valid handle from a
// released or foreign pointer without touching freed memory. A flat open-addressing
// table: registering and dropping a tensor allocate nothing.
struct Registry {
  std::mutex mu;
  PointerMap live;  // tensor -> 0
};
Registry &registry() {
  static Registry *r = new Registry();  // never destroyed: handles may outlive statics
  return *r;
}

}  // namespace

Storage::~Storage() {
  if (owned && data) {
    try {
      backend_for(device).free(data);
    } catch (...) {
      // A destructor cannot report; the memory is lost only if the device is gone.
    }
  } else if (!owned && on_release) {
    try {
      on_release();
    } catch (...) {
    }
  }
}

bool is_live_tensor(const Tensor *t) {
  if (!t) return false;
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.live.find(t);
}

int64_t live_tensor_count() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return (int64_t)r.live.size();
}

void tensor_retain(Tensor *t) { t->refs.fetch_add(1, std::memory_order_relaxed); }

void tensor_release(Tensor *t) {
  if (!t) return;
  if (t->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  {
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.live.erase(t);
  }
  Tensor *g = t->grad;
  delete t;
  tensor_release(g);
}

static void register_tensor(const Tensor *t) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.live.insert(t, 0);
}

Ref make_tensor(const Shape &shape, DType dtype, Device device) {
  for (int64_t d : shape) MT_CHECK(d >= 0, INVALID_ARGUMENT, "negative size in shape %s", shape_str(shape).c_str());
  MT_CHECK(shape.size() <= (size_t)kMaxDims, SHAPE, "at most %d dims are supported, got %zu", kMaxDims, shape.size());
  // an op's result from sizes that multiply past 2^60 (a convolution's padding, say) cannot be
  // allocated, and its byte count would wrap
  MT_CHECK(shape_fits(shape), OUT_OF_MEMORY, "a tensor of shape %s would hold more than 2^60 elements",
           shape_str(shape).c_str());
  int64_t nbytes = shape_numel(shape) * dtype_size(dtype);
  Backend &be = backend_for(device);
  void *p = be.alloc(nbytes);
  std::shared_ptr<Storage> st;
  try {
    st = std::make_shared<Storage>(p, nbytes, device, true);
  } catch (...) {
    be.free(p);
    throw;
  }
  return tensor_from_storage(std::move(st), 0, shape, dtype);
}

Ref tensor_from_storage(std::shared_ptr<Storage> storage, int64_t offset, const Shape &shape, DType dtype) {
  std::unique_ptr<Tensor> t(new Tensor());  // deleted if anything below throws
  t->device = storage->device;
  t->storage = std::move(storage);
  t->offset = offset;
  t->shape = shape;
  t->dtype = dtype;
  register_tensor(t.get());
  return Ref::adopt(t.release());
}

}  // namespace mt
