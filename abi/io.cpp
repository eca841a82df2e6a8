// io.cpp - the extern "C" data entry points of minitorch.h (mt_load_idx,
// mt_load_tsv, mt_randperm): check the arguments, call autograd/io, and turn
// every exception into a status plus a message prefixed with the function's name.
#include "minitorch.h"

#include <new>
#include <string>

#include "autograd/io.h"

namespace mt {
// Sets this thread's mt_last_error() message. The storage lives beside mt_last_error in
// abi.cpp; the declaration is weak so that this file links (with messages left unset)
// in a tree whose abi.cpp does not define it yet.
__attribute__((weak, visibility("hidden"))) void set_last_error(const std::string &msg);
}  // namespace mt

using namespace mt;

namespace {

void report(const char *fn, const char *what, const char *detail) noexcept {
  try {
    if (set_last_error) set_last_error(std::string(fn) + ": " + what + detail);
  } catch (...) {
  }
}

// The guard of abi.cpp, for this file's entry points.
template <class F>
mt_status guard(const char *fn, F &&f) noexcept {
  try {
    f();
    return MT_OK;
  } catch (const Error &e) {
    report(fn, "", e.what());
    return (mt_status)e.code();
  } catch (const std::bad_alloc &) {
    report(fn, "out of host memory", "");
    return MT_ERR_OUT_OF_MEMORY;
  } catch (const std::exception &e) {
    report(fn, "internal error, please report: ", e.what());
    return MT_ERR_INTERNAL;
  } catch (...) {
    report(fn, "internal error, please report: unknown exception", "");
    return MT_ERR_INTERNAL;
  }
}

Device device_arg(mt_device d) {
  MT_CHECK(d == MT_CPU || d == MT_CUDA, INVALID_ARGUMENT, "invalid device %d (expected MT_CPU=0 or MT_CUDA=1)", (int)d);
  return (Device)d;
}

const char *string_arg(const char *s, const char *name) {
  MT_CHECK(s, INVALID_ARGUMENT, "%s is NULL", name);
  return s;
}

}  // namespace

extern "C" {

MT_API mt_status mt_load_idx(mt_tensor **out, const char *path, mt_device device) {
  if (out) *out = nullptr;
  return guard("mt_load_idx", [&] {
    MT_CHECK(out, INVALID_ARGUMENT, "out is NULL");
    Device dev = device_arg(device);
    *out = io::load_idx(string_arg(path, "path"), dev).release();
  });
}

MT_API mt_status mt_load_tsv(mt_tensor **out_features, mt_tensor **out_targets, const char *path, const char *columns,
                             int64_t target_column, mt_device device) {
  if (out_features) *out_features = nullptr;
  if (out_targets) *out_targets = nullptr;
  return guard("mt_load_tsv", [&] {
    MT_CHECK(out_features && out_targets, INVALID_ARGUMENT, "%s is NULL", out_features ? "out_targets" : "out_features");
    Device dev = device_arg(device);
    const char *p = string_arg(path, "path");
    std::vector<io::TsvColumn> cols = io::parse_tsv_columns(string_arg(columns, "columns"));
    std::pair<Ref, Ref> r = io::load_tsv(p, cols, target_column, dev);
    *out_features = r.first.release();
    *out_targets = r.second.release();
  });
}

MT_API mt_status mt_randperm(mt_tensor **out, int64_t n, int64_t seed, mt_device device) {
  if (out) *out = nullptr;
  return guard("mt_randperm", [&] {
    MT_CHECK(out, INVALID_ARGUMENT, "out is NULL");
    *out = io::randperm(n, (uint64_t)seed, device_arg(device)).release();
  });
}

}  // extern "C"
