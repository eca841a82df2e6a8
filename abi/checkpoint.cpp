// checkpoint.cpp - the extern "C" checkpoint entry points of minitorch.h: named tensors
// to and from safetensors files, and optimizer state.
#include <cstring>

#include "abi/entry.h"
#include "autograd/optim.h"
#include "autograd/safetensors.h"

using namespace mt;
using namespace mt::abi;

extern "C" {

MT_API mt_status mt_save_safetensors(const char *path, const char *const *names, mt_tensor *const *tensors, int64_t n) {
  return guard("mt_save_safetensors", [&] {
    const char *p = string_arg(path, "path");
    MT_CHECK(n >= 0, INVALID_ARGUMENT, "n must be >= 0, got %lld", (long long)n);
    MT_CHECK(n == 0 || (names && tensors), INVALID_ARGUMENT, "names or tensors is NULL but n is %lld", (long long)n);
    std::vector<std::pair<std::string, Ref>> ts;
    for (int64_t i = 0; i < n; i++) {
      std::string tn = "tensors[" + std::to_string(i) + "]";
      MT_CHECK(names[i], INVALID_ARGUMENT, "names[%lld] is NULL", (long long)i);
      ts.emplace_back(names[i], tensor_arg(tensors[i], tn.c_str()));
    }
    st::save(p, ts);
  });
}

MT_API mt_status mt_safetensors_count(const char *path, int64_t *out) {
  return guard("mt_safetensors_count", [&] {
    MT_CHECK(out, INVALID_ARGUMENT, "out is NULL");
    *out = (int64_t)st::read_header(string_arg(path, "path")).entries.size();
  });
}

MT_API mt_status mt_safetensors_name(const char *path, int64_t index, char *buf, int64_t cap) {
  return guard("mt_safetensors_name", [&] {
    MT_CHECK(buf && cap > 0, INVALID_ARGUMENT, "buf is NULL or cap (%lld) is not positive", (long long)cap);
    st::File f = st::read_header(string_arg(path, "path"));
    MT_CHECK(index >= 0 && index < (int64_t)f.entries.size(), INVALID_ARGUMENT, "index %lld out of range [0, %zu)",
             (long long)index, f.entries.size());
    const std::string &name = f.entries[(size_t)index].name;
    MT_CHECK((int64_t)name.size() < cap, INVALID_ARGUMENT, "name of entry %lld needs %zu bytes, cap is %lld",
             (long long)index, name.size() + 1, (long long)cap);
    std::memcpy(buf, name.c_str(), name.size() + 1);
  });
}

MT_API mt_status mt_load_safetensors(mt_tensor **out, const char *path, const char *name, mt_device device) {
  return op_entry("mt_load_safetensors", out, [&] {
    Device d = device_arg(device);
    return st::load(st::read_header(string_arg(path, "path")), string_arg(name, "name"), d);
  });
}

}  // extern "C"
