// test_errors.cpp - every error class: a status plus a message naming the
// function and the values; the library stays usable afterwards.
#include <string>

#include "backend/shape.h"
#include "helpers.h"

using namespace t;

namespace {
bool has(const char *needle) { return std::string(mt_last_error()).find(needle) != std::string::npos; }
}  // namespace

TEST_CASE("null and released handles") {
  LeakGuard lg;
  mt_tensor *out = reinterpret_cast<mt_tensor *>(0x1);
  H a = make({1}, {1});
  CHECK(mt_add(&out, nullptr, a) == MT_ERR_INVALID_ARGUMENT);
  CHECK(out == nullptr);
  CHECK(has("mt_add: a is NULL"));
  CHECK(mt_add(nullptr, a, a) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("out is NULL"));
  mt_tensor *dead = nullptr;
  const int64_t s[1] = {2};
  MT_OK_OR_FAIL(mt_tensor_zeros(&dead, s, 1, MT_F32, dev()));
  MT_OK_OR_FAIL(mt_tensor_release(dead));
  CHECK(mt_relu(&out, dead) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("mt_relu: x"));
  CHECK(has("not a live tensor"));
  CHECK(mt_tape_size() == 0);
}

TEST_CASE("shape errors name the function and both shapes") {
  LeakGuard lg;
  mt_tensor *out = nullptr;
  H a = make(Vec(12, 1), {3, 4}), b = make(Vec(30, 1), {5, 6});
  CHECK(mt_matmul(&out, a, b) == MT_ERR_SHAPE);
  CHECK(std::string(mt_last_error()) == "mt_matmul: inner dimensions differ: a is [3,4], b is [5,6]");
  CHECK(mt_add(&out, a, b) == MT_ERR_SHAPE);
  CHECK(has("mt_add: shapes do not broadcast: a is [3,4], b is [5,6]"));
  CHECK(mt_mse_loss(&out, a, b) == MT_ERR_SHAPE);
  CHECK(has("pred is [3,4], target is [5,6]"));
  const int64_t bad[2] = {5, 5};
  CHECK(mt_reshape(&out, a, bad, 2) == MT_ERR_SHAPE);
  CHECK(has("mt_reshape: cannot reshape [3,4]"));
  CHECK(mt_sum_dim(&out, a, 2, 0) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("dim 2 out of range"));
  CHECK(out == nullptr);
  CHECK(mt_tape_size() == 0);
}

TEST_CASE("dtype and device mismatches") {
  LeakGuard lg;
  mt_tensor *out = nullptr;
  H a = make({1, 2}, {2}, MT_F32), b = make({1, 2}, {2}, MT_F64);
  CHECK(mt_add(&out, a, b) == MT_ERR_DTYPE);
  CHECK(has("mt_add: dtypes differ: a is float32, b is float64"));
  const int64_t s[1] = {2};
  H i;
  MT_OK_OR_FAIL(mt_tensor_zeros(i.out(), s, 1, MT_I64, dev()));
  CHECK(mt_exp(&out, i) == MT_ERR_DTYPE);
  CHECK(mt_tensor_set_requires_grad(i, 1) == MT_ERR_DTYPE);
  if (mt_cuda_device_count() == 0) {
    CHECK(mt_tensor_zeros(&out, s, 1, MT_F32, MT_CUDA) == MT_ERR_DEVICE);
    CHECK(has("mt_tensor_zeros"));
  } else {
    H c = make({1, 2}, {2}, MT_F32, MT_CUDA), h = make({1, 2}, {2}, MT_F32, MT_CPU);
    CHECK(mt_add(&out, c, h) == MT_ERR_DEVICE);
    CHECK(has("mt_add: tensors on different devices: a is cuda, b is cpu"));
  }
  CHECK(mt_tensor_zeros(&out, s, 1, (mt_dtype)42, dev()) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("invalid dtype 42"));
  CHECK(mt_tensor_zeros(&out, s, 1, MT_F32, (mt_device)7) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("invalid device 7"));
}

TEST_CASE("negative sizes, bad ndim, mismatched byte counts") {
  LeakGuard lg;
  mt_tensor *out = nullptr;
  const int64_t neg[2] = {2, -3};
  CHECK(mt_tensor_zeros(&out, neg, 2, MT_F32, dev()) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("negative size -3 at dim 1"));
  CHECK(mt_tensor_zeros(&out, neg, -1, MT_F32, dev()) == MT_ERR_INVALID_ARGUMENT);
  CHECK(mt_tensor_zeros(&out, nullptr, 2, MT_F32, dev()) == MT_ERR_INVALID_ARGUMENT);
  // sizes whose product passes 2^60 (or wraps around 2^64): refused before any allocation,
  // also with a 0 elsewhere (the strides would still overflow)
  const int64_t huge[2] = {(int64_t(1) << 60) + 1, 16}, wraps[2] = {4611686018427387907, 4},
                empty[3] = {0, int64_t(1) << 62, 4}, edge[2] = {int64_t(1) << 31, int64_t(1) << 30};
  for (const int64_t *s : {huge, wraps}) {
    CHECK(mt_tensor_zeros(&out, s, 2, MT_F32, dev()) == MT_ERR_INVALID_ARGUMENT);
    CHECK(has("mt_tensor_zeros: shape ["));
    CHECK(has("exceeds 2^60"));
    CHECK(mt_tensor_rand(&out, s, 2, 1, MT_F32, dev()) == MT_ERR_INVALID_ARGUMENT);
    CHECK(mt_tensor_from_data(&out, neg, s, 2, MT_F32, dev()) == MT_ERR_INVALID_ARGUMENT);
  }
  CHECK(mt_tensor_zeros(&out, empty, 3, MT_F32, dev()) == MT_ERR_INVALID_ARGUMENT);
  CHECK(mt_tensor_zeros(&out, edge, 2, MT_F32, dev()) == MT_ERR_INVALID_ARGUMENT);  // 2^61
  CHECK(out == nullptr);
  CHECK(mt::shape_fits(mt::Shape{int64_t(1) << 30, int64_t(1) << 30}));  // 2^60: the limit itself
  CHECK_FALSE(mt::shape_fits(mt::Shape{int64_t(1) << 30, (int64_t(1) << 30) + 1}));
  CHECK(mt::shape_fits(mt::Shape{0, int64_t(1) << 60, 1}));
  CHECK_FALSE(mt::shape_fits(mt::Shape{0, int64_t(1) << 60, 2}));
  {  // a view over 12 elements whose shape wraps to 12: refused
    H x = make({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {12}, MT_F32);
    H v;
    CHECK(mt_reshape(v.out(), x, wraps, 2) == MT_ERR_SHAPE);
    CHECK(has("mt_reshape: cannot reshape [12] into [4611686018427387907,4]"));
    const int64_t infer[3] = {-1, int64_t(1) << 40, int64_t(1) << 40};
    CHECK(mt_reshape(v.out(), x, infer, 3) == MT_ERR_SHAPE);
    CHECK(v.get() == nullptr);
  }
  H a = make({1, 2, 3}, {3}, MT_F32);
  float buf[4];
  CHECK(mt_tensor_copy_to_host(a, buf, 16) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("nbytes 16 does not match the tensor's 12 bytes"));
  CHECK(mt_tensor_copy_from_host(a, buf, 8) == MT_ERR_INVALID_ARGUMENT);
  double v;
  CHECK(mt_tensor_item(a, &v) == MT_ERR_SHAPE);
  CHECK(mt_malloc(nullptr, 8, MT_CPU) == MT_ERR_INVALID_ARGUMENT);
  void *p = nullptr;
  CHECK(mt_malloc(&p, -1, MT_CPU) == MT_ERR_INVALID_ARGUMENT);
  CHECK(mt_free(buf, MT_CPU) == MT_ERR_INVALID_ARGUMENT);  // not ours
}

TEST_CASE("backward errors") {
  LeakGuard lg;
  H x = make({1, 2}, {2});
  CHECK(mt_backward(x) == MT_ERR_SHAPE);
  CHECK(has("mt_backward: loss must have one element, got shape [2]"));
  H s = make({1}, {});
  CHECK(mt_backward(s) == MT_ERR_STATE);
  CHECK(has("does not require grad"));
  CHECK(mt_backward(nullptr) == MT_ERR_INVALID_ARGUMENT);
}

TEST_CASE("the library stays usable after errors") {
  LeakGuard lg;
  mt_tensor *out = nullptr;
  for (int i = 0; i < 100; i++) CHECK(mt_add(&out, nullptr, nullptr) != MT_OK);
  H a = make({1, 2}, {2}), r;
  MT_OK_OR_FAIL(mt_add(r.out(), a, a));
  CHECK(values(r) == Vec{2, 4});
}

TEST_CASE("raw memory round trip") {
  LeakGuard lg;
  void *p = nullptr;
  MT_OK_OR_FAIL(mt_malloc(&p, 64, MT_CPU));
  CHECK(mt_live_bytes(MT_CPU) >= 64);
  MT_OK_OR_FAIL(mt_free(p, MT_CPU));
  CHECK(mt_free(nullptr, MT_CPU) == MT_OK);
  if (mt_cuda_device_count() > 0) {
    double src[4] = {1, 2, 3, 4}, dst[4] = {0, 0, 0, 0};
    void *d1 = nullptr, *d2 = nullptr;
    MT_OK_OR_FAIL(mt_malloc(&d1, sizeof src, MT_CUDA));
    MT_OK_OR_FAIL(mt_malloc(&d2, sizeof src, MT_CUDA));
    MT_OK_OR_FAIL(mt_memcpy_h2d(d1, src, sizeof src));
    MT_OK_OR_FAIL(mt_memcpy_d2d(d2, d1, sizeof src));
    MT_OK_OR_FAIL(mt_memcpy_d2h(dst, d2, sizeof src));
    MT_OK_OR_FAIL(mt_synchronize());
    for (int i = 0; i < 4; i++) CHECK(dst[i] == src[i]);
    MT_OK_OR_FAIL(mt_free(d1, MT_CUDA));
    MT_OK_OR_FAIL(mt_free(d2, MT_CUDA));
  } else {
    double src[1] = {1};
    CHECK(mt_memcpy_h2d(&p, src, 8) == MT_ERR_DEVICE);
    CHECK(has("mt_memcpy_h2d"));
  }
}
