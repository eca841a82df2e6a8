// test_tape.cpp - tape semantics: accumulation across backward calls, a tensor
// used twice, no-grad mode, clearing, failures that leave the tape untouched,
// and handles: retain/release counts, views outliving their source.
#include "helpers.h"

using namespace t;

TEST_CASE("a tensor used twice gets the sum of both paths") {
  LeakGuard lg;
  H x = make({3}, {});
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(x, 1));
  H y, z, g;
  MT_OK_OR_FAIL(mt_mul(y.out(), x, x));  // x^2
  MT_OK_OR_FAIL(mt_add(z.out(), y, x));  // x^2 + x: dz/dx = 2x + 1 = 7
  MT_OK_OR_FAIL(mt_backward(z));
  MT_OK_OR_FAIL(mt_tensor_grad(g.out(), x));
  CHECK(values(g) == Vec{7});
}

TEST_CASE("gradients accumulate across backward calls until zeroed") {
  LeakGuard lg;
  H x = make({1, 2}, {2});
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(x, 1));
  for (int i = 0; i < 3; i++) {
    H y, l;
    MT_OK_OR_FAIL(mt_mul_scalar(y.out(), x, 2));
    MT_OK_OR_FAIL(mt_sum(l.out(), y));
    MT_OK_OR_FAIL(mt_backward(l));
  }
  H g;
  MT_OK_OR_FAIL(mt_tensor_grad(g.out(), x));
  CHECK(values(g) == Vec{6, 6});
  MT_OK_OR_FAIL(mt_tensor_zero_grad(x));
  CHECK(values(g) == Vec{0, 0});  // zeroed in place
}

TEST_CASE("both operands of one add get their own gradient buffer") {
  LeakGuard lg;
  H a = make({1, 2}, {2}), b = make({3, 4}, {2});
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(a, 1));
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(b, 1));
  H s, l, ga, gb;
  MT_OK_OR_FAIL(mt_add(s.out(), a, b));
  MT_OK_OR_FAIL(mt_sum(l.out(), s));
  MT_OK_OR_FAIL(mt_backward(l));
  MT_OK_OR_FAIL(mt_tensor_grad(ga.out(), a));
  MT_OK_OR_FAIL(mt_tensor_grad(gb.out(), b));
  CHECK(ga.get() != gb.get());
  MT_OK_OR_FAIL(mt_tensor_zero_grad(a));
  CHECK(values(gb) == Vec{1, 1});  // zeroing a's gradient leaves b's alone
}

TEST_CASE("no-grad mode records nothing") {
  LeakGuard lg;
  H x = make({1, 2}, {2});
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(x, 1));
  CHECK(mt_set_grad_enabled(0) == 1);
  CHECK(mt_is_grad_enabled() == 0);
  H y;
  MT_OK_OR_FAIL(mt_mul(y.out(), x, x));
  CHECK(mt_tape_size() == 0);
  int64_t rg = -1;
  MT_OK_OR_FAIL(mt_tensor_requires_grad(y, &rg));
  CHECK(rg == 0);
  CHECK(mt_set_grad_enabled(1) == 0);
  H l;
  MT_OK_OR_FAIL(mt_sum(l.out(), y));
  CHECK(mt_backward(l) == MT_ERR_STATE);  // nothing recorded leads to it
}

TEST_CASE("backward clears the whole tape, including unrelated entries") {
  LeakGuard lg;
  H x = make({1, 2}, {2});
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(x, 1));
  H unrelated, y, l;
  MT_OK_OR_FAIL(mt_exp(unrelated.out(), x));
  MT_OK_OR_FAIL(mt_mul(y.out(), x, x));
  MT_OK_OR_FAIL(mt_sum(l.out(), y));
  CHECK(mt_tape_size() == 3);
  MT_OK_OR_FAIL(mt_backward(l));
  CHECK(mt_tape_size() == 0);
}

TEST_CASE("a failed backward leaves the tape untouched") {
  LeakGuard lg;
  H x = make({1, 2}, {2});
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(x, 1));
  H y;
  MT_OK_OR_FAIL(mt_mul(y.out(), x, x));
  CHECK(mt_tape_size() == 1);
  CHECK(mt_backward(y) == MT_ERR_SHAPE);  // two elements
  CHECK(std::string(mt_last_error()).find("mt_backward") == 0);
  CHECK(mt_tape_size() == 1);
  H g;
  MT_OK_OR_FAIL(mt_tensor_grad(g.out(), x));
  CHECK(g.get() == nullptr);
  MT_OK_OR_FAIL(mt_tape_clear());
  CHECK(mt_tape_size() == 0);
}

TEST_CASE("the tape keeps intermediates alive after the caller releases them") {
  LeakGuard lg;
  H x = make({0.5, -1}, {2});
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(x, 1));
  mt_tensor *y = nullptr, *l = nullptr;
  MT_OK_OR_FAIL(mt_sigmoid(&y, x));
  MT_OK_OR_FAIL(mt_sum(&l, y));
  MT_OK_OR_FAIL(mt_tensor_release(y));  // the tape still holds it
  MT_OK_OR_FAIL(mt_backward(l));
  MT_OK_OR_FAIL(mt_tensor_release(l));
  H g;
  MT_OK_OR_FAIL(mt_tensor_grad(g.out(), x));
  Vec gv = values(g);
  for (int i = 0; i < 2; i++) {
    double xv = i ? -1 : 0.5, s = 1 / (1 + std::exp(-xv));
    CHECK(gv[(size_t)i] == doctest::Approx(s * (1 - s)).epsilon(1e-14));
  }
}

TEST_CASE("retain and release count handles") {
  LeakGuard lg;
  int64_t base = mt_live_tensors();
  mt_tensor *x = nullptr;
  const int64_t s[1] = {3};
  MT_OK_OR_FAIL(mt_tensor_zeros(&x, s, 1, MT_F32, dev()));
  CHECK(mt_live_tensors() == base + 1);
  MT_OK_OR_FAIL(mt_tensor_retain(x));
  MT_OK_OR_FAIL(mt_tensor_release(x));
  CHECK(mt_live_tensors() == base + 1);
  MT_OK_OR_FAIL(mt_tensor_release(x));
  CHECK(mt_live_tensors() == base);
  CHECK(mt_tensor_release(x) == MT_ERR_INVALID_ARGUMENT);  // released handle
  CHECK(mt_tensor_release(nullptr) == MT_OK);
}

TEST_CASE("a view outlives the tensor it was made from") {
  LeakGuard lg;
  H v;
  {
    H a = make({1, 2, 3, 4}, {4});
    const int64_t s[2] = {2, 2};
    MT_OK_OR_FAIL(mt_reshape(v.out(), a, s, 2));
  }
  CHECK(values(v) == Vec{1, 2, 3, 4});
}

TEST_CASE("backward on a leaf scalar gives it a gradient of one") {
  LeakGuard lg;
  H x = make({2}, {});
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(x, 1));
  MT_OK_OR_FAIL(mt_backward(x));
  H g;
  MT_OK_OR_FAIL(mt_tensor_grad(g.out(), x));
  CHECK(values(g) == Vec{1});
}
