// test_compare.cpp - the comparisons and selection family (mt_eq ... mt_ge, mt_where,
// mt_maximum, mt_minimum, mt_sqrt, mt_abs, mt_pow, mt_clamp) against hand-computed values,
// their float64 gradchecks and subgradient choices, and the DLPack round trip.
#include <cmath>
#include <cstring>

#include "../../abi/dlpack.h"
#include "helpers.h"

using namespace t;

namespace {

std::vector<uint8_t> bytes(mt_tensor *x) {
  int64_t n = 0;
  mt_dtype dt;
  MT_OK_OR_FAIL(mt_tensor_numel(x, &n));
  MT_OK_OR_FAIL(mt_tensor_dtype(x, &dt));
  REQUIRE(dt == MT_U8);
  std::vector<uint8_t> v((size_t)n);
  MT_OK_OR_FAIL(mt_tensor_copy_to_host(x, v.data(), n));
  return v;
}

H make_i64(const std::vector<int64_t> &v, const Shape &shape) {
  H h;
  MT_OK_OR_FAIL(mt_tensor_from_data(h.out(), v.data(), shape.data(), (int64_t)shape.size(), MT_I64, dev()));
  return h;
}

H make_u8(const std::vector<uint8_t> &v, const Shape &shape) {
  H h;
  MT_OK_OR_FAIL(mt_tensor_from_data(h.out(), v.data(), shape.data(), (int64_t)shape.size(), MT_U8, dev()));
  return h;
}

using U8s = std::vector<uint8_t>;
const double kNaN = std::nan("");

}  // namespace

TEST_CASE("comparisons: broadcast uint8 masks, NaN, integers, not recorded") {
  LeakGuard lg;
  H a = make({1, 2, 3, 4, 5, kNaN}, {2, 3}, MT_F32);
  H b = make({2, 5, 3}, {3}, MT_F32);  // broadcast over the rows
  H r;
  MT_OK_OR_FAIL(mt_eq(r.out(), a, b));
  CHECK(shape_of(r) == Shape{2, 3});
  CHECK(bytes(r) == U8s{0, 0, 1, 0, 1, 0});
  MT_OK_OR_FAIL(mt_ne(r.out(), a, b));
  CHECK(bytes(r) == U8s{1, 1, 0, 1, 0, 1});  // NaN != x is true
  MT_OK_OR_FAIL(mt_lt(r.out(), a, b));
  CHECK(bytes(r) == U8s{1, 1, 0, 0, 0, 0});
  MT_OK_OR_FAIL(mt_le(r.out(), a, b));
  CHECK(bytes(r) == U8s{1, 1, 1, 0, 1, 0});
  MT_OK_OR_FAIL(mt_gt(r.out(), a, b));
  CHECK(bytes(r) == U8s{0, 0, 0, 1, 0, 0});
  MT_OK_OR_FAIL(mt_ge(r.out(), a, b));
  CHECK(bytes(r) == U8s{0, 0, 1, 1, 1, 0});

  // int64 (e.g. argmax == labels), exact beyond 2^53
  const int64_t big = (int64_t(1) << 53) + 1;
  H i = make_i64({big, 3, -4}, {3}), j = make_i64({big - 1}, {1}), k = make_i64({big, 3, 4}, {3});
  MT_OK_OR_FAIL(mt_eq(r.out(), i, k));
  CHECK(bytes(r) == U8s{1, 1, 0});
  MT_OK_OR_FAIL(mt_gt(r.out(), i, j));
  CHECK(bytes(r) == U8s{1, 0, 0});

  // 0-d against 0-d, and an empty broadcast
  H s = make({1}, {}, MT_F64), e = make({}, {0, 3}, MT_F64), z = make({1, 1, 1}, {3}, MT_F64);
  MT_OK_OR_FAIL(mt_le(r.out(), s, s));
  CHECK(shape_of(r) == Shape{});
  CHECK(bytes(r) == U8s{1});
  MT_OK_OR_FAIL(mt_lt(r.out(), e, z));
  CHECK(shape_of(r) == Shape{0, 3});

  // never recorded, even when an input requires grad
  H x = make({1, 2}, {2});
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(x, 1));
  int64_t before = mt_tape_size(), rg = 1;
  MT_OK_OR_FAIL(mt_gt(r.out(), x, x));
  CHECK(mt_tape_size() == before);
  MT_OK_OR_FAIL(mt_tensor_requires_grad(r, &rg));
  CHECK(rg == 0);

  // errors: mixed dtypes, shapes that do not broadcast, NULL
  CHECK(mt_eq(r.out(), a, x) == MT_ERR_DTYPE);
  CHECK(std::string(mt_last_error()).find("mt_eq: dtypes differ") == 0);
  H c = make({1, 2}, {2}, MT_F32);
  CHECK(mt_lt(r.out(), a, c) == MT_ERR_SHAPE);
  CHECK(mt_ge(r.out(), nullptr, c) == MT_ERR_INVALID_ARGUMENT);
  CHECK(r.get() == nullptr);
}

TEST_CASE("where: three-way broadcast, any dtype, errors") {
  LeakGuard lg;
  H cond = make_u8({1, 0}, {2, 1});
  H a = make({1, 2, 3}, {3}, MT_F32);
  H b = make({-1}, {}, MT_F32);
  H r;
  MT_OK_OR_FAIL(mt_where(r.out(), cond, a, b));
  CHECK(shape_of(r) == Shape{2, 3});
  CHECK(values(r) == Vec{1, 2, 3, -1, -1, -1});
  // cond broadcast along the rows, nonzero (not only 1) is true
  H cond2 = make_u8({7, 0, 1}, {3});
  H a2 = make({1, 2, 3, 4, 5, 6}, {2, 3}, MT_F64), b2 = make({10, 20}, {2, 1}, MT_F64);
  MT_OK_OR_FAIL(mt_where(r.out(), cond2, a2, b2));
  CHECK(values(r) == Vec{1, 10, 3, 4, 20, 6});
  // same shapes everywhere: the flat path
  H cond3 = make_u8({0, 1, 1, 0, 0, 1}, {2, 3});
  MT_OK_OR_FAIL(mt_where(r.out(), cond3, a2, a2));
  CHECK(values(r) == Vec{1, 2, 3, 4, 5, 6});
  // int64 values
  H ia = make_i64({1, 2, 3}, {3}), ib = make_i64({-5}, {1});
  MT_OK_OR_FAIL(mt_where(r.out(), cond2, ia, ib));
  std::vector<int64_t> got(3);
  MT_OK_OR_FAIL(mt_tensor_copy_to_host(r, got.data(), 24));
  CHECK(got == std::vector<int64_t>{1, -5, 3});
  // errors
  CHECK(mt_where(r.out(), a, a, a) == MT_ERR_DTYPE);  // cond must be uint8
  CHECK(std::string(mt_last_error()).find("mt_where: cond must be uint8") == 0);
  CHECK(mt_where(r.out(), cond, a, a2) == MT_ERR_DTYPE);
  CHECK(mt_where(r.out(), cond3, a, make({1, 2}, {2}, MT_F32)) == MT_ERR_SHAPE);
}

TEST_CASE("maximum, minimum, sqrt, abs, pow, clamp: hand-computed values") {
  LeakGuard lg;
  H a = make({1, -2, 3, kNaN}, {4}, MT_F32);
  H b = make({0, 5, 3, 1}, {4}, MT_F32);
  H r;
  MT_OK_OR_FAIL(mt_maximum(r.out(), a, b));
  Vec v = values(r);
  CHECK(Vec(v.begin(), v.begin() + 3) == Vec{1, 5, 3});
  CHECK(std::isnan(v[3]));  // NaN propagates, as torch.maximum
  MT_OK_OR_FAIL(mt_minimum(r.out(), b, a));
  v = values(r);
  CHECK(Vec(v.begin(), v.begin() + 3) == Vec{0, -2, 3});
  CHECK(std::isnan(v[3]));
  H s = make({2}, {}, MT_F32);
  MT_OK_OR_FAIL(mt_maximum(r.out(), a, s));  // broadcast a 0-d
  v = values(r);
  CHECK(Vec(v.begin(), v.begin() + 3) == Vec{2, 2, 3});

  H q = make({0, 1, 4, 2.25}, {4}, MT_F64);
  MT_OK_OR_FAIL(mt_sqrt(r.out(), q));
  CHECK(values(r) == Vec{0, 1, 2, 1.5});
  H m = make({-1.5, 0, 2, -0.0}, {4}, MT_F64);
  MT_OK_OR_FAIL(mt_abs(r.out(), m));
  CHECK(values(r) == Vec{1.5, 0, 2, 0});

  H base = make({2, 3, -2, 0}, {4}, MT_F64), ex = make({3, 0.5, 2, 0}, {4}, MT_F64);
  MT_OK_OR_FAIL(mt_pow(r.out(), base, ex));
  v = values(r);
  CHECK(v[0] == 8);
  CHECK(std::fabs(v[1] - std::sqrt(3.0)) < 1e-15);
  CHECK(v[2] == 4);  // negative base, integral exponent
  CHECK(v[3] == 1);  // 0^0 = 1
  H col = make({1, 2}, {2, 1}, MT_F64), row = make({1, 2, 3}, {3}, MT_F64);
  MT_OK_OR_FAIL(mt_pow(r.out(), col, row));  // broadcast [2,1] ** [3]
  CHECK(shape_of(r) == Shape{2, 3});
  CHECK(values(r) == Vec{1, 1, 1, 2, 4, 8});

  H c = make({-2, -1, 0, 1, 2, kNaN}, {6}, MT_F32);
  MT_OK_OR_FAIL(mt_clamp(r.out(), c, -1, 1));
  v = values(r);
  CHECK(Vec(v.begin(), v.begin() + 5) == Vec{-1, -1, 0, 1, 1});
  CHECK(std::isnan(v[5]));
  MT_OK_OR_FAIL(mt_clamp(r.out(), c, 0, INFINITY));  // one-sided
  v = values(r);
  CHECK(Vec(v.begin(), v.begin() + 5) == Vec{0, 0, 0, 1, 2});
  MT_OK_OR_FAIL(mt_clamp(r.out(), c, 3, 1));  // lo > hi gives hi (torch)
  v = values(r);
  CHECK(Vec(v.begin(), v.begin() + 5) == Vec{1, 1, 1, 1, 1});
  CHECK(mt_clamp(r.out(), c, kNaN, 1) == MT_ERR_INVALID_ARGUMENT);

  // floating only
  H i = make_i64({1, 2}, {2});
  CHECK(mt_maximum(r.out(), i, i) == MT_ERR_DTYPE);
  CHECK(mt_pow(r.out(), i, i) == MT_ERR_DTYPE);
  CHECK(mt_sqrt(r.out(), i) == MT_ERR_DTYPE);
}

TEST_CASE("gradchecks (float64) of where, maximum, minimum, sqrt, abs, pow, clamp") {
  LeakGuard lg;
  std::mt19937_64 rng(11);
  H cond = make_u8({1, 0, 0, 1, 1, 0}, {2, 3});
  gradcheck("where", [&](const std::vector<mt_tensor *> &x) {
    H r;
    MT_OK_OR_FAIL(mt_where(r.out(), cond, x[0], x[1]));
    return r;
  }, {randvec(rng, 6), randvec(rng, 3)}, {{2, 3}, {3}});
  gradcheck("where with a broadcast a", [&](const std::vector<mt_tensor *> &x) {
    H r;
    MT_OK_OR_FAIL(mt_where(r.out(), cond, x[0], x[1]));
    return r;
  }, {randvec(rng, 2), randvec(rng, 1)}, {{2, 1}, {}});
  // Distinct values (no ties): the kink is away from every sample.
  Vec ma = {0.1, -0.7, 0.5, 0.9, -0.2, 0.33}, mb = {0.4, -0.9, 0.2};
  gradcheck("maximum", [](const std::vector<mt_tensor *> &x) {
    H r;
    MT_OK_OR_FAIL(mt_maximum(r.out(), x[0], x[1]));
    return r;
  }, {ma, mb}, {{2, 3}, {3}});
  gradcheck("minimum", [](const std::vector<mt_tensor *> &x) {
    H r;
    MT_OK_OR_FAIL(mt_minimum(r.out(), x[0], x[1]));
    return r;
  }, {ma, mb}, {{2, 3}, {3}});
  gradcheck("sqrt", [](const std::vector<mt_tensor *> &x) {
    H r;
    MT_OK_OR_FAIL(mt_sqrt(r.out(), x[0]));
    return r;
  }, {randvec(rng, 5, 0.5, 2)}, {{5}});
  gradcheck("abs", [](const std::vector<mt_tensor *> &x) {
    H r;
    MT_OK_OR_FAIL(mt_abs(r.out(), x[0]));
    return r;
  }, {{-0.5, 0.3, -1.2, 2.0}}, {{2, 2}});
  gradcheck("pow", [](const std::vector<mt_tensor *> &x) {
    H r;
    MT_OK_OR_FAIL(mt_pow(r.out(), x[0], x[1]));
    return r;
  }, {randvec(rng, 6, 0.5, 2), randvec(rng, 3, -1.5, 2.5)}, {{2, 3}, {3}});
  gradcheck("pow with a broadcast base", [](const std::vector<mt_tensor *> &x) {
    H r;
    MT_OK_OR_FAIL(mt_pow(r.out(), x[0], x[1]));
    return r;
  }, {randvec(rng, 1, 0.5, 2), randvec(rng, 4, -2, 2)}, {{}, {2, 2}});
  gradcheck("clamp", [](const std::vector<mt_tensor *> &x) {
    H r;
    MT_OK_OR_FAIL(mt_clamp(r.out(), x[0], -0.5, 0.5));
    return r;
  }, {{-0.9, -0.3, 0.1, 0.45, 0.7, -0.55}}, {{6}});
}

TEST_CASE("subgradients: ties split in halves, clamp bounds pass, pow at 0") {
  LeakGuard lg;
  auto grad_of = [](mt_tensor *x) {
    H g;
    MT_OK_OR_FAIL(mt_tensor_grad(g.out(), x));
    REQUIRE(g.get() != nullptr);
    return values(g);
  };
  {  // maximum([1,2,3], [1,5,0]): a gets [.5, 0, 1], b gets [.5, 1, 0] (torch)
    H a = make({1, 2, 3}, {3}), b = make({1, 5, 0}, {3}), r, l;
    MT_OK_OR_FAIL(mt_tensor_set_requires_grad(a, 1));
    MT_OK_OR_FAIL(mt_tensor_set_requires_grad(b, 1));
    MT_OK_OR_FAIL(mt_maximum(r.out(), a, b));
    MT_OK_OR_FAIL(mt_sum(l.out(), r));
    MT_OK_OR_FAIL(mt_backward(l));
    CHECK(grad_of(a) == Vec{0.5, 0, 1});
    CHECK(grad_of(b) == Vec{0.5, 1, 0});
  }
  {  // minimum with a broadcast 0-d b: b collects the ties and the wins
    H a = make({1, 2, 3}, {3}), b = make({2}, {}), r, l;
    MT_OK_OR_FAIL(mt_tensor_set_requires_grad(a, 1));
    MT_OK_OR_FAIL(mt_tensor_set_requires_grad(b, 1));
    MT_OK_OR_FAIL(mt_minimum(r.out(), a, b));
    MT_OK_OR_FAIL(mt_sum(l.out(), r));
    MT_OK_OR_FAIL(mt_backward(l));
    CHECK(grad_of(a) == Vec{1, 0.5, 0});
    CHECK(grad_of(b) == Vec{1.5});
  }
  {  // clamp(x, -1, 1): gradient 1 on [-1, 1] including the bounds, 0 outside
    H x = make({-2, -1, 0, 1, 2}, {5}), r, l;
    MT_OK_OR_FAIL(mt_tensor_set_requires_grad(x, 1));
    MT_OK_OR_FAIL(mt_clamp(r.out(), x, -1, 1));
    MT_OK_OR_FAIL(mt_sum(l.out(), r));
    MT_OK_OR_FAIL(mt_backward(l));
    CHECK(grad_of(x) == Vec{0, 1, 1, 1, 0});
  }
  {  // abs at 0 has gradient 0; pow: d/da 0 where b == 0, d/db 0 where a == 0 and b >= 0
    H x = make({0, -3}, {2}), r, l;
    MT_OK_OR_FAIL(mt_tensor_set_requires_grad(x, 1));
    MT_OK_OR_FAIL(mt_abs(r.out(), x));
    MT_OK_OR_FAIL(mt_sum(l.out(), r));
    MT_OK_OR_FAIL(mt_backward(l));
    CHECK(grad_of(x) == Vec{0, -1});
    H a = make({0, 0, 2}, {3}), b = make({0, 2, 0}, {3}), p, pl;
    MT_OK_OR_FAIL(mt_tensor_set_requires_grad(a, 1));
    MT_OK_OR_FAIL(mt_tensor_set_requires_grad(b, 1));
    MT_OK_OR_FAIL(mt_pow(p.out(), a, b));
    MT_OK_OR_FAIL(mt_sum(pl.out(), p));
    MT_OK_OR_FAIL(mt_backward(pl));
    CHECK(grad_of(a) == Vec{0, 0, 0});             // b==0 -> 0; 2*0^1 = 0
    CHECK(grad_of(b) == Vec{0, 0, std::log(2.0)}); // a==0, b>=0 -> 0; 2^0 log 2
  }
  {  // where: the unchosen side gets 0, a broadcast side sums
    H cond = make_u8({1, 0, 1}, {3});
    H a = make({1, 2, 3}, {3}), b = make({9}, {}), r, l;
    MT_OK_OR_FAIL(mt_tensor_set_requires_grad(a, 1));
    MT_OK_OR_FAIL(mt_tensor_set_requires_grad(b, 1));
    MT_OK_OR_FAIL(mt_where(r.out(), cond, a, b));
    MT_OK_OR_FAIL(mt_sum(l.out(), r));
    MT_OK_OR_FAIL(mt_backward(l));
    CHECK(grad_of(a) == Vec{1, 0, 1});
    CHECK(grad_of(b) == Vec{1});
  }
}

namespace {
int g_producer_deletes = 0;
void producer_deleter(DLManagedTensor *) { g_producer_deletes++; }
}  // namespace

TEST_CASE("DLPack: export shares storage until the deleter; import wraps and calls the producer's deleter") {
  LeakGuard lg;
  {  // export: layout, sharing, one reference held until the deleter
    H x = make({1, 2, 3, 4, 5, 6}, {2, 3}, MT_F32);
    int64_t live = mt_live_tensors();
    void *p = nullptr;
    MT_OK_OR_FAIL(mt_tensor_to_dlpack(&p, x));
    REQUIRE(p != nullptr);
    CHECK(mt_live_tensors() == live + 1);
    auto *m = static_cast<DLManagedTensor *>(p);
    CHECK(m->dl_tensor.ndim == 2);
    CHECK(m->dl_tensor.shape[0] == 2);
    CHECK(m->dl_tensor.shape[1] == 3);
    CHECK(m->dl_tensor.strides[0] == 3);
    CHECK(m->dl_tensor.strides[1] == 1);
    CHECK(m->dl_tensor.dtype.code == kDLFloat);
    CHECK(m->dl_tensor.dtype.bits == 32);
    CHECK(m->dl_tensor.dtype.lanes == 1);
    CHECK(m->dl_tensor.byte_offset == 0);
    CHECK(m->dl_tensor.device.device_type == (dev() == MT_CUDA ? kDLCUDA : kDLCPU));
    void *data = nullptr;
    MT_OK_OR_FAIL(mt_tensor_data_ptr(x, &data));
    CHECK(m->dl_tensor.data == data);
    // the round trip: import our own export; the import's storage calls our deleter
    H y;
    MT_OK_OR_FAIL(mt_tensor_from_dlpack(y.out(), p));
    CHECK(shape_of(y) == Shape{2, 3});
    CHECK(values(y) == Vec{1, 2, 3, 4, 5, 6});
    void *ydata = nullptr;
    MT_OK_OR_FAIL(mt_tensor_data_ptr(y, &ydata));
    CHECK(ydata == data);  // no copy
    H two = make({2}, {}, MT_F32), z;
    MT_OK_OR_FAIL(mt_mul(z.out(), y, two));
    CHECK(values(z) == Vec{2, 4, 6, 8, 10, 12});
    CHECK(mt_live_tensors() == live + 3);  // y, two, z: importing our own export ended it (its view)
    y = H();
    CHECK(mt_live_tensors() == live + 2);
    CHECK(values(x) == Vec{1, 2, 3, 4, 5, 6});  // the storage lives on in x
  }
  {  // round trips in a loop: each import ends its export, so nothing nests (200000 nested
     // exports overflowed the stack when the last tensor went)
    H x = make({1, 2, 3}, {3}, MT_F32);
    int64_t live = mt_live_tensors();
    H cur;
    MT_OK_OR_FAIL(mt_tensor_detach(cur.out(), x));
    for (int i = 0; i < 200000; i++) {
      void *p = nullptr;
      MT_OK_OR_FAIL(mt_tensor_to_dlpack(&p, cur));
      H next;
      MT_OK_OR_FAIL(mt_tensor_from_dlpack(next.out(), p));
      cur = std::move(next);
    }
    CHECK(mt_live_tensors() == live + 1);
    CHECK(values(cur) == Vec{1, 2, 3});
    void *a = nullptr, *b = nullptr;
    MT_OK_OR_FAIL(mt_tensor_data_ptr(x, &a));
    MT_OK_OR_FAIL(mt_tensor_data_ptr(cur, &b));
    CHECK(a == b);
  }
  if (dev() == MT_CPU) {  // import of producer memory (host arrays stand in for a foreign producer)
    double buf[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3}, strides[2] = {3, 1}, bad[2] = {1, 2};
    DLManagedTensor m{};
    m.dl_tensor.data = buf;
    m.dl_tensor.device = {kDLCPU, 0};
    m.dl_tensor.ndim = 2;
    m.dl_tensor.dtype = {kDLFloat, 64, 1};
    m.dl_tensor.shape = shape;
    m.dl_tensor.strides = strides;
    m.deleter = producer_deleter;
    g_producer_deletes = 0;
    {
      H y;
      MT_OK_OR_FAIL(mt_tensor_from_dlpack(y.out(), &m));
      CHECK(values(y) == Vec{1, 2, 3, 4, 5, 6});
      buf[0] = 10;  // shares memory
      CHECK(values(y)[0] == 10);
      H v;
      MT_OK_OR_FAIL(mt_tensor_detach(v.out(), y));  // a second tensor on the storage
      y = H();
      CHECK(g_producer_deletes == 0);
    }
    CHECK(g_producer_deletes == 1);  // once, when the last tensor went
    // a transposed view, an unknown dtype, a foreign device: refused, the caller keeps ownership
    m.dl_tensor.strides = bad;
    H r;
    CHECK(mt_tensor_from_dlpack(r.out(), &m) == MT_ERR_UNSUPPORTED);
    CHECK(std::string(mt_last_error()).find("only compact row-major") != std::string::npos);
    m.dl_tensor.strides = nullptr;  // NULL = row-major
    int64_t huge[2] = {4611686018427387907, 4};  // (2^62 + 3) x 4: wraps to 12 elements
    m.dl_tensor.shape = huge;
    CHECK(mt_tensor_from_dlpack(r.out(), &m) == MT_ERR_INVALID_ARGUMENT);
    CHECK(std::string(mt_last_error()).find("exceeds 2^60") != std::string::npos);
    m.dl_tensor.shape = shape;
    m.dl_tensor.dtype = {kDLComplex, 64, 1};
    CHECK(mt_tensor_from_dlpack(r.out(), &m) == MT_ERR_UNSUPPORTED);
    m.dl_tensor.dtype = {kDLFloat, 64, 1};
    m.dl_tensor.device = {kDLROCM, 0};
    CHECK(mt_tensor_from_dlpack(r.out(), &m) == MT_ERR_UNSUPPORTED);
    CHECK(r.get() == nullptr);
    CHECK(g_producer_deletes == 1);
    m.dl_tensor.device = {kDLCPU, 0};
    {
      H y;
      MT_OK_OR_FAIL(mt_tensor_from_dlpack(y.out(), &m));  // strides NULL
      CHECK(values(y)[0] == 10);
    }
    CHECK(g_producer_deletes == 2);
  }
  H r;
  CHECK(mt_tensor_from_dlpack(r.out(), nullptr) == MT_ERR_INVALID_ARGUMENT);
  CHECK(mt_tensor_to_dlpack(nullptr, nullptr) == MT_ERR_INVALID_ARGUMENT);
}
