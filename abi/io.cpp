// io.cpp - the extern "C" data entry points of minitorch.h (mt_load_idx,
// mt_load_tsv, mt_randperm): check the arguments, call autograd/io, and turn
// every exception into a status plus a message prefixed with the function's name.
#include "minitorch.h"

#include "abi/entry.h"
#include "autograd/io.h"

using namespace mt;
using namespace mt::abi;

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
