// study.cuh - the frame the kernel-study hooks share (mt_study_relu, mt_study_sum,
// mt_study_softmax, mt_study_log_softmax, mt_study_layer_norm, mt_study_cast, ...): internal
// extern "C" entry points that scripts/bench/bw_study.py, scripts/bench/softmax_study.py,
// scripts/bench/cast_study.py and the GPU tests drive through ctypes. They are not in
// abi/minitorch.h and promise no stability; they keep the mt_ prefix so the library exports
// nothing else.
//
// Every hook checks its variant id and sizes before it touches the device (so a bad id is
// rejected on a machine without a GPU), returns 0 or an mt_status value, and sets
// mt_last_error() to "<hook>: <why>" on failure, as the public entry points do:
//   MT_ERR_INVALID_ARGUMENT  a variant id out of range, bad sizes, null pointers
//   MT_ERR_UNSUPPORTED       a valid variant that cannot take this shape, dtype or alignment
//                            (the study prints n/a)
//   MT_ERR_DTYPE, MT_ERR_DEVICE, MT_ERR_CUDA as for the ops
//
// defines: study_entry, check_variant
#pragma once

#include <string>

#include "backend/backend.h"

namespace mt {

// This thread's mt_last_error() message (abi/abi.cpp owns the storage).
void set_last_error(const std::string &msg) noexcept;

namespace cuda {

// Runs f; an exception becomes its status and a message prefixed by the hook's name.
template <class F>
int study_entry(const char *fn, F &&f) noexcept {
  try {
    f();
    return 0;
  } catch (const Error &e) {
    try { set_last_error(std::string(fn) + ": " + e.what()); } catch (...) {}
    return (int)e.code();
  } catch (const std::exception &e) {
    try { set_last_error(std::string(fn) + ": internal error, please report: " + e.what()); } catch (...) {}
    return (int)Code::INTERNAL;
  } catch (...) {
    try { set_last_error(std::string(fn) + ": internal error, please report: unknown exception"); } catch (...) {}
    return (int)Code::INTERNAL;
  }
}

inline void check_variant(int variant, int last) {
  MT_CHECK(variant >= 0 && variant <= last, INVALID_ARGUMENT, "variant %d is not 0..%d", variant, last);
}

}  // namespace cuda
}  // namespace mt
