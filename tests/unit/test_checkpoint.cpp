// test_checkpoint.cpp - safetensors files (round trips, the byte layout, every error)
// and optimizer state saved and restored mid-training.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "helpers.h"

using namespace t;

namespace {
std::string tmp_path(const char *name) { return std::string("/tmp/mt_ckpt_") + std::to_string((long)getpid()) + "_" + name; }
bool has(const char *needle) { return std::string(mt_last_error()).find(needle) != std::string::npos; }
void write_file(const std::string &path, const std::string &bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), (std::streamsize)bytes.size());
}
std::string with_header(const std::string &json, const std::string &data) {
  std::string s(8, '\0');
  uint64_t n = json.size();
  for (int k = 0; k < 8; k++) s[(size_t)k] = (char)(n >> (8 * k));
  return s + json + data;
}
}  // namespace

TEST_CASE("safetensors round trip of several dtypes and shapes") {
  LeakGuard lg;
  std::mt19937_64 rng(12);
  std::string path = tmp_path("rt.safetensors");
  H a = make(randvec(rng, 6), {2, 3}, MT_F32), b = make(randvec(rng, 5), {5}, MT_F64), c = make({7.5}, {});
  H d;
  const int64_t s[1] = {3};
  const int64_t iv[3] = {-1, 0, 1LL << 40};
  MT_OK_OR_FAIL(mt_tensor_from_data(d.out(), iv, s, 1, MT_I64, dev()));
  const char *names[4] = {"layer.weight", "b", "scalar", "ids"};
  mt_tensor *ts[4] = {a, b, c, d};
  MT_OK_OR_FAIL(mt_save_safetensors(path.c_str(), names, ts, 4));
  int64_t n = 0;
  MT_OK_OR_FAIL(mt_safetensors_count(path.c_str(), &n));
  CHECK(n == 4);
  char buf[32];
  MT_OK_OR_FAIL(mt_safetensors_name(path.c_str(), 0, buf, sizeof buf));
  CHECK(std::string(buf) == "layer.weight");
  CHECK(mt_safetensors_name(path.c_str(), 0, buf, 5) == MT_ERR_INVALID_ARGUMENT);
  for (int i = 0; i < 4; i++) {
    H r;
    MT_OK_OR_FAIL(mt_load_safetensors(r.out(), path.c_str(), names[i], dev()));
    CHECK(shape_of(r) == shape_of(ts[i]));
    if (i < 3) CHECK(values(r) == values(ts[i]));
  }
  H r;
  MT_OK_OR_FAIL(mt_load_safetensors(r.out(), path.c_str(), "ids", MT_CPU));
  int64_t back[3];
  MT_OK_OR_FAIL(mt_tensor_copy_to_host(r, back, sizeof back));
  CHECK(std::memcmp(back, iv, sizeof iv) == 0);
  // the layout: 8-byte length, JSON, data 8-byte aligned, float32 little-endian
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  uint64_t hl = 0;
  for (int k = 7; k >= 0; k--) hl = (hl << 8) | (unsigned char)bytes[(size_t)k];
  CHECK((8 + hl) % 8 == 0);
  std::string header = bytes.substr(8, (size_t)hl);
  CHECK(header.find("\"layer.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}") != std::string::npos);
  float first;
  std::memcpy(&first, bytes.data() + 8 + hl, 4);
  CHECK(first == (float)values(a)[0]);
  std::remove(path.c_str());
}

TEST_CASE("safetensors errors name the path and the problem") {
  LeakGuard lg;
  H out;
  std::string missing = tmp_path("missing.safetensors");
  CHECK(mt_load_safetensors(out.out(), missing.c_str(), "x", dev()) == MT_ERR_IO);
  CHECK(has("cannot open"));
  std::string p = tmp_path("bad.safetensors");
  write_file(p, "abc");
  CHECK(mt_safetensors_count(p.c_str(), nullptr) == MT_ERR_INVALID_ARGUMENT);
  int64_t n;
  CHECK(mt_safetensors_count(p.c_str(), &n) == MT_ERR_IO);
  CHECK(has("truncated"));
  write_file(p, with_header("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "1234"));
  CHECK(mt_safetensors_count(p.c_str(), &n) == MT_ERR_IO);
  CHECK(has("do not hold"));
  write_file(p, with_header("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]", "12345678"));
  CHECK(mt_safetensors_count(p.c_str(), &n) == MT_ERR_IO);
  CHECK(has("malformed"));
  // (2^62 + 3) x 4 F32 elements: 48 bytes once the count wraps around 2^64, which the data holds
  write_file(p, with_header("{\"x\":{\"dtype\":\"F32\",\"shape\":[4611686018427387907,4],\"data_offsets\":[0,48]}}",
                            std::string(48, '\0')));
  CHECK(mt_safetensors_count(p.c_str(), &n) == MT_ERR_IO);
  CHECK(has("exceeds 2^60"));
  CHECK(mt_load_safetensors(out.out(), p.c_str(), "x", dev()) == MT_ERR_IO);
  CHECK(out.get() == nullptr);
  write_file(p, with_header("{\"x\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]}}", "12345678"));
  CHECK(mt_safetensors_count(p.c_str(), &n) == MT_ERR_IO);
  CHECK(has("C64"));
  write_file(p, with_header("{\"__metadata__\":{\"a\":\"b\"},\"x\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", "\x01\x02"));
  MT_OK_OR_FAIL(mt_safetensors_count(p.c_str(), &n));
  CHECK(n == 1);
  CHECK(mt_load_safetensors(out.out(), p.c_str(), "y", dev()) == MT_ERR_IO);
  CHECK(has("no tensor named y"));
  H a = make({1}, {1});
  const char *dup[2] = {"w", "w"};
  mt_tensor *ts[2] = {a, a};
  CHECK(mt_save_safetensors(p.c_str(), dup, ts, 2) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("appears twice"));
  std::remove(p.c_str());
}

TEST_CASE("optimizer state survives a save and a load mid-training") {
  std::mt19937_64 rng(21);
  for (int kind = 0; kind < 3; kind++) {  // sgd with momentum, adam, adamw
    LeakGuard lg;
    Vec p0 = randvec(rng, 4), target = randvec(rng, 4);
    H pa = make(p0, {4}), pb = make(p0, {4}), tg = make(target, {4});
    MT_OK_OR_FAIL(mt_tensor_set_requires_grad(pa, 1));
    MT_OK_OR_FAIL(mt_tensor_set_requires_grad(pb, 1));
    mt_tensor *la[1] = {pa}, *lb[1] = {pb};
    mt_optimizer *oa = nullptr, *ob = nullptr;
    auto make_opt = [&](mt_optimizer **o, mt_tensor **ps) {
      if (kind == 0) MT_OK_OR_FAIL(mt_optim_sgd(o, ps, 1, 0.1, 0.9, 0.0, 0));
      else if (kind == 1) MT_OK_OR_FAIL(mt_optim_adam(o, ps, 1, 0.01, 0.9, 0.99, 1e-8, 0.0));
      else MT_OK_OR_FAIL(mt_optim_adamw(o, ps, 1, 0.01, 0.9, 0.99, 1e-8, 0.1));
    };
    auto step = [&](mt_optimizer *o, mt_tensor *p) {
      H l;
      MT_OK_OR_FAIL(mt_optim_zero_grad(o));
      MT_OK_OR_FAIL(mt_mse_loss(l.out(), p, tg));
      MT_OK_OR_FAIL(mt_backward(l));
      MT_OK_OR_FAIL(mt_optim_step(o));
    };
    make_opt(&oa, la);
    for (int s = 0; s < 3; s++) step(oa, pa);
    std::string path = tmp_path("opt.safetensors");
    MT_OK_OR_FAIL(mt_optim_save(oa, path.c_str()));
    // b: the same parameter values, a fresh optimizer, the state loaded
    MT_OK_OR_FAIL(mt_tensor_copy_from_host(pb, values(pa).data(), 4 * 8));
    make_opt(&ob, lb);
    MT_OK_OR_FAIL(mt_optim_load(ob, path.c_str()));
    for (int s = 0; s < 2; s++) {
      step(oa, pa);
      step(ob, pb);
    }
    CHECK(values(pa) == values(pb));  // bit-identical continuation
    mt_optimizer *other = nullptr;
    if (kind == 0) MT_OK_OR_FAIL(mt_optim_adam(&other, lb, 1, 0.01, 0.9, 0.99, 1e-8, 0.0));
    else MT_OK_OR_FAIL(mt_optim_sgd(&other, lb, 1, 0.1, 0.9, 0.0, 0));
    CHECK(mt_optim_load(other, path.c_str()) == MT_ERR_STATE);
    CHECK(has("state, this optimizer is"));
    MT_OK_OR_FAIL(mt_optim_free(other));
    MT_OK_OR_FAIL(mt_optim_free(oa));
    MT_OK_OR_FAIL(mt_optim_free(ob));
    std::remove(path.c_str());
  }
}
