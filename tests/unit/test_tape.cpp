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

TEST_CASE("slices of one tensor add their gradients into its accumulated gradient, never into a shared one") {
  // Three overlapping row slices of x [6, 4] (the later ones add into the gradient the first
  // one made), and one of y, whose accumulated gradient is the same buffer as z's (add passes its
  // gradient to both operands), so it must not be added into in place. Expected values by hand.
  LeakGuard lg;
  std::mt19937_64 rng(21);
  const Vec vx = randvec(rng, 24), vy = randvec(rng, 8), vz = randvec(rng, 8);
  const Vec w1 = randvec(rng, 16), w2 = randvec(rng, 12), w3 = randvec(rng, 4), wy = randvec(rng, 4),
            wh = randvec(rng, 8);
  H x = make(vx, {6, 4}), y = make(vy, {2, 4}), z = make(vz, {2, 4});
  for (mt_tensor *p : {x.get(), y.get(), z.get()}) MT_OK_OR_FAIL(mt_tensor_set_requires_grad(p, 1));
  H a, b, c, sy, h;
  MT_OK_OR_FAIL(mt_slice(a.out(), x, 0, 0, 4));   // rows 0-3
  MT_OK_OR_FAIL(mt_slice(b.out(), x, 0, 3, 6));   // rows 3-5
  MT_OK_OR_FAIL(mt_slice(c.out(), x, 0, 1, 2));   // row 1
  MT_OK_OR_FAIL(mt_slice(sy.out(), y, 0, 1, 2));  // row 1 of y, recorded before the add
  MT_OK_OR_FAIL(mt_add(h.out(), y, z));
  H wa = make(w1, {4, 4}), wb = make(w2, {3, 4}), wc = make(w3, {1, 4}), wsy = make(wy, {1, 4}), whh = make(wh, {2, 4});
  H terms[5], prods[5];
  mt_tensor *outs[5] = {a, b, c, sy, h}, *ws[5] = {wa, wb, wc, wsy, whh};
  H loss;
  for (int i = 0; i < 5; i++) {
    MT_OK_OR_FAIL(mt_mul(prods[i].out(), outs[i], ws[i]));
    MT_OK_OR_FAIL(mt_sum(terms[i].out(), prods[i]));
  }
  H s1, s2, s3;
  MT_OK_OR_FAIL(mt_add(s1.out(), terms[0], terms[1]));
  MT_OK_OR_FAIL(mt_add(s2.out(), s1, terms[2]));
  MT_OK_OR_FAIL(mt_add(s3.out(), s2, terms[3]));
  MT_OK_OR_FAIL(mt_add(loss.out(), s3, terms[4]));
  MT_OK_OR_FAIL(mt_backward(loss));
  Vec ex(24, 0.0), ey(wh.begin(), wh.end()), ez(wh.begin(), wh.end());
  for (int i = 0; i < 16; i++) ex[(size_t)i] += w1[(size_t)i];
  for (int i = 0; i < 12; i++) ex[(size_t)(12 + i)] += w2[(size_t)i];
  for (int i = 0; i < 4; i++) ex[(size_t)(4 + i)] += w3[(size_t)i];
  for (int i = 0; i < 4; i++) ey[(size_t)(4 + i)] += wy[(size_t)i];
  H gx, gy, gz;
  MT_OK_OR_FAIL(mt_tensor_grad(gx.out(), x));
  MT_OK_OR_FAIL(mt_tensor_grad(gy.out(), y));
  MT_OK_OR_FAIL(mt_tensor_grad(gz.out(), z));
  CHECK(rel_err(values(gx), ex) < 1e-15);
  CHECK(rel_err(values(gy), ey) < 1e-15);
  CHECK(rel_err(values(gz), ez) < 1e-15);  // untouched by y's slice
}
