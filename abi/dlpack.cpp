// dlpack.cpp - mt_tensor_to_dlpack / mt_tensor_from_dlpack: zero-copy exchange in the
// DLPack v0.8 layout (abi/dlpack.h).
//
// Export: a heap Export holds the DLManagedTensor, its shape and strides arrays and a
// view (a tensor handle) on the storage; the consumer's call of the deleter deletes it,
// which releases the view. Import: a Storage that does not own its memory and whose
// on_release calls the producer's deleter when the last tensor on it goes; or, for one of
// our own exports, the exported tensor's storage, the export ended at once (so that
// re-importing in a loop does not nest each export in the next, whose deleters would then
// run recursively, one stack frame per round trip, when the last tensor goes).
#include "minitorch.h"

#include <memory>
#include <vector>

#include "abi/dlpack.h"
#include "abi/entry.h"
#include "autograd/ops.h"

using namespace mt;
using namespace mt::abi;

namespace {

struct Export {
  DLManagedTensor managed{};
  Ref view;                      // keeps the storage alive until the deleter runs
  std::vector<int64_t> shape, strides;
};

void export_deleter(DLManagedTensor *self) {
  if (self) delete static_cast<Export *>(self->manager_ctx);
}

DLDataType to_dl_dtype(DType d) {
  switch (d) {
    case DType::F32: return {kDLFloat, 32, 1};
    case DType::F64: return {kDLFloat, 64, 1};
    case DType::F16: return {kDLFloat, 16, 1};
    case DType::BF16: return {kDLBfloat, 16, 1};
    case DType::I32: return {kDLInt, 32, 1};
    case DType::I64: return {kDLInt, 64, 1};
    case DType::U8: return {kDLUInt, 8, 1};
  }
  fail(Code::INTERNAL, "internal error, please report: dtype %d has no DLPack code", (int)d);
}

DType from_dl_dtype(DLDataType t) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return DType::F32;
    if (t.code == kDLFloat && t.bits == 64) return DType::F64;
    if (t.code == kDLFloat && t.bits == 16) return DType::F16;
    if (t.code == kDLBfloat && t.bits == 16) return DType::BF16;
    if (t.code == kDLInt && t.bits == 32) return DType::I32;
    if (t.code == kDLInt && t.bits == 64) return DType::I64;
    if ((t.code == kDLUInt || t.code == kDLBool) && t.bits == 8) return DType::U8;
  }
  fail(Code::UNSUPPORTED,
       "DLPack dtype (code %u, bits %u, lanes %u) is not supported (float 16/32/64, bfloat16, int 32/64, "
       "uint 8 and bool are, one lane)",
       (unsigned)t.code, (unsigned)t.bits, (unsigned)t.lanes);
}

}  // namespace

extern "C" {

MT_API mt_status mt_tensor_to_dlpack(void **out, mt_tensor *t) {
  if (out) *out = nullptr;
  return guard("mt_tensor_to_dlpack", [&] {
    check_out(out);
    Ref x = tensor_arg(t, "t");
    // The consumer may read on any stream: finish what is queued on ours first.
    if (x->device == Device::CUDA) x->backend().synchronize();
    auto ex = std::make_unique<Export>();
    ex->view = ops::detach(x);
    ex->shape = x->shape;
    ex->strides = contiguous_strides(x->shape);
    DLTensor &dl = ex->managed.dl_tensor;
    dl.data = x->data();
    dl.device = {x->device == Device::CUDA ? kDLCUDA : kDLCPU, 0};
    dl.ndim = (int32_t)x->ndim();
    dl.dtype = to_dl_dtype(x->dtype);
    dl.shape = ex->shape.data();
    dl.strides = ex->strides.data();
    dl.byte_offset = 0;
    ex->managed.manager_ctx = ex.get();
    ex->managed.deleter = export_deleter;
    *out = &ex.release()->managed;
  });
}

MT_API mt_status mt_tensor_from_dlpack(mt_tensor **out, void *managed) {
  return op_entry("mt_tensor_from_dlpack", out, [&] {
    MT_CHECK(managed, INVALID_ARGUMENT, "managed is NULL");
    DLManagedTensor *m = static_cast<DLManagedTensor *>(managed);
    const DLTensor &dl = m->dl_tensor;
    Device dev;
    if (dl.device.device_type == kDLCPU) {
      dev = Device::CPU;
    } else if (dl.device.device_type == kDLCUDA) {
      MT_CHECK(dl.device.device_id == 0, UNSUPPORTED, "CUDA device %d: only device 0 is supported",
               (int)dl.device.device_id);
      dev = Device::CUDA;
      backend_for(dev);  // fails cleanly without a GPU
    } else {
      fail(Code::UNSUPPORTED, "DLPack device type %d is not supported (kDLCPU=1 and kDLCUDA=2 are)",
           (int)dl.device.device_type);
    }
    DType dt = from_dl_dtype(dl.dtype);
    MT_CHECK(dl.ndim >= 0 && dl.ndim <= kMaxDims, SHAPE, "at most %d dims are supported, got ndim %d", kMaxDims,
             (int)dl.ndim);
    MT_CHECK(dl.shape || dl.ndim == 0, INVALID_ARGUMENT, "shape is NULL but ndim is %d", (int)dl.ndim);
    Shape shape(dl.shape, dl.shape + dl.ndim);
    for (int64_t s : shape) MT_CHECK(s >= 0, INVALID_ARGUMENT, "negative size in shape %s", shape_str(shape).c_str());
    MT_CHECK(shape_fits(shape), INVALID_ARGUMENT, "shape %s is too large: the product of its sizes exceeds 2^60",
             shape_str(shape).c_str());
    const int64_t n = shape_numel(shape);
    if (dl.strides && n > 0) {  // strides of size-1 dims do not matter (as torch)
      Shape expect = contiguous_strides(shape), got(dl.strides, dl.strides + dl.ndim);
      for (int d = 0; d < dl.ndim; d++)
        MT_CHECK(shape[(size_t)d] == 1 || got[(size_t)d] == expect[(size_t)d], UNSUPPORTED,
                 "only compact row-major tensors can be imported: shape %s has strides %s (row-major is %s); "
                 "make the tensor contiguous first",
                 shape_str(shape).c_str(), shape_str(got).c_str(), shape_str(expect).c_str());
    }
    MT_CHECK(dl.data || n == 0, INVALID_ARGUMENT, "data is NULL for shape %s", shape_str(shape).c_str());
    void *data = (char *)dl.data + dl.byte_offset;
    if (m->deleter == export_deleter && m->manager_ctx) {
      const Export *ex = static_cast<const Export *>(m->manager_ctx);
      const Ref &v = ex->view;
      if (data == v->data() && dt == v->dtype && shape == v->shape) {
        Ref r = tensor_from_storage(v->storage, v->offset, shape, dt);
        m->deleter(m);  // the import holds the storage itself now
        return r;
      }
    }
    // The producer's stream is not ordered with ours: wait for everything on the device.
    if (dev == Device::CUDA) backend_for(dev).synchronize_device();
    Ref r = tensor_from_storage(std::make_shared<Storage>(data, n * dtype_size(dt), dev, false), 0, shape, dt);
    // Only now, with nothing left to fail, does the library take over the producer's tensor.
    r->storage->on_release = [m] {
      if (m->deleter) m->deleter(m);
    };
    return r;
  });
}

}  // extern "C"
