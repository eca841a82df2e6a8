// entry.h - what every extern "C" entry point shares: the guard that turns
// exceptions into a status plus this thread's mt_last_error() message, and the
// argument checks (handles, devices, dtypes, shapes, strings).
//
// defines: set_last_error, guard, op_entry, tensor_arg, optional_tensor_arg,
//          device_arg, dtype_arg, shape_arg, string_arg, check_out
#pragma once

#include <new>
#include <string>

#include "autograd/tensor.h"
#include "minitorch.h"

namespace mt {

// Sets this thread's mt_last_error() message (abi.cpp owns the storage).
void set_last_error(const std::string &msg) noexcept;

namespace abi {

// Runs f; maps mt::Error to its status, bad_alloc to MT_ERR_OUT_OF_MEMORY and anything
// else to MT_ERR_INTERNAL, with the message prefixed by the function's name.
template <class F>
mt_status guard(const char *fn, F &&f) noexcept {
  try {
    f();
    return MT_OK;
  } catch (const Error &e) {
    try { set_last_error(std::string(fn) + ": " + e.what()); } catch (...) {}
    return (mt_status)e.code();
  } catch (const std::bad_alloc &) {
    try { set_last_error(std::string(fn) + ": out of host memory"); } catch (...) {}
    return MT_ERR_OUT_OF_MEMORY;
  } catch (const std::exception &e) {
    try { set_last_error(std::string(fn) + ": internal error, please report: " + e.what()); } catch (...) {}
    return MT_ERR_INTERNAL;
  } catch (...) {
    try { set_last_error(std::string(fn) + ": internal error, please report: unknown exception"); } catch (...) {}
    return MT_ERR_INTERNAL;
  }
}

template <class T>
void check_out(T **out) {
  MT_CHECK(out, INVALID_ARGUMENT, "out is NULL");
  *out = nullptr;
}

// The common shape of an op's entry point: *out = NULL first, a new reference on success.
template <class F>
mt_status op_entry(const char *fn, mt_tensor **out, F &&f) noexcept {
  if (out) *out = nullptr;
  return guard(fn, [&] {
    check_out(out);
    Ref r = f();
    *out = r.release();
  });
}

// A borrowed handle argument as a Ref (a new reference held for the call).
inline Ref tensor_arg(const mt_tensor *t, const char *name) {
  MT_CHECK(t, INVALID_ARGUMENT, "%s is NULL", name);
  MT_CHECK(is_live_tensor(t), INVALID_ARGUMENT, "%s (%p) is not a live tensor (released, or not a tensor handle)", name,
           (const void *)t);
  return Ref::share(const_cast<mt_tensor *>(t));
}

inline Ref optional_tensor_arg(const mt_tensor *t, const char *name) { return t ? tensor_arg(t, name) : Ref(); }

inline Device device_arg(mt_device d) {
  MT_CHECK(d == MT_CPU || d == MT_CUDA, INVALID_ARGUMENT, "invalid device %d (expected MT_CPU=0 or MT_CUDA=1)", (int)d);
  return (Device)d;
}

inline DType dtype_arg(mt_dtype d) {
  MT_CHECK((int)d >= 0 && (int)d < kNumDTypes, INVALID_ARGUMENT, "invalid dtype %d (expected 0..%d)", (int)d,
           kNumDTypes - 1);
  return (DType)d;
}

inline Shape shape_arg(const int64_t *shape, int64_t ndim) {
  MT_CHECK(ndim >= 0, INVALID_ARGUMENT, "ndim must be >= 0, got %lld", (long long)ndim);
  MT_CHECK(ndim <= kMaxDims, SHAPE, "at most %d dims are supported, got ndim %lld", kMaxDims, (long long)ndim);
  MT_CHECK(shape || ndim == 0, INVALID_ARGUMENT, "shape is NULL but ndim is %lld", (long long)ndim);
  Shape s(shape, shape + ndim);
  for (int64_t i = 0; i < ndim; i++)
    MT_CHECK(s[(size_t)i] >= 0, INVALID_ARGUMENT, "negative size %lld at dim %lld of shape %s", (long long)s[(size_t)i],
             (long long)i, shape_str(s).c_str());
  MT_CHECK(shape_fits(s), INVALID_ARGUMENT, "shape %s is too large: the product of its sizes exceeds 2^60",
           shape_str(s).c_str());
  return s;
}

inline const char *string_arg(const char *s, const char *name) {
  MT_CHECK(s, INVALID_ARGUMENT, "%s is NULL", name);
  return s;
}

}  // namespace abi
}  // namespace mt
