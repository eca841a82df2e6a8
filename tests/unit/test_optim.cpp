// test_optim.cpp - SGD against torch.optim.SGD's update written out here, over
// several steps, with momentum, Nesterov and weight decay.
#include "helpers.h"

using namespace t;

namespace {
// Reference update for one parameter over `steps` steps with a fixed gradient function.
void reference_sgd(Vec &p, const std::function<Vec(const Vec &)> &grad, int steps, double lr, double mom, double wd,
                   bool nesterov) {
  Vec v(p.size(), 0);
  for (int s = 0; s < steps; s++) {
    Vec g = grad(p);
    for (size_t i = 0; i < p.size(); i++) {
      double d = g[i] + wd * p[i];
      if (mom != 0) {
        v[i] = s == 0 ? d : mom * v[i] + d;
        d = nesterov ? d + mom * v[i] : v[i];
      }
      p[i] -= lr * d;
    }
  }
}
}  // namespace

TEST_CASE("sgd matches the reference update") {
  struct Cfg { double lr, mom, wd; int nesterov; };
  const Cfg cfgs[] = {{0.1, 0, 0, 0}, {0.05, 0.9, 0, 0}, {0.05, 0.9, 0.01, 1}, {0.2, 0, 0.1, 0}};
  std::mt19937_64 rng(5);
  for (const Cfg &c : cfgs) {
    LeakGuard lg;
    Vec p0 = randvec(rng, 6), target = randvec(rng, 6);
    H p = make(p0, {2, 3}), tg = make(target, {2, 3});
    MT_OK_OR_FAIL(mt_tensor_set_requires_grad(p, 1));
    mt_tensor *params[1] = {p};
    mt_optimizer *opt = nullptr;
    MT_OK_OR_FAIL(mt_optim_sgd(&opt, params, 1, c.lr, c.mom, c.wd, c.nesterov));
    for (int s = 0; s < 4; s++) {
      H l;
      MT_OK_OR_FAIL(mt_optim_zero_grad(opt));
      MT_OK_OR_FAIL(mt_mse_loss(l.out(), p, tg));
      MT_OK_OR_FAIL(mt_backward(l));
      MT_OK_OR_FAIL(mt_optim_step(opt));
    }
    Vec ref = p0;
    reference_sgd(ref, [&](const Vec &x) {
      Vec g(x.size());
      for (size_t i = 0; i < x.size(); i++) g[i] = 2 * (x[i] - target[i]) / 6.0;
      return g;
    }, 4, c.lr, c.mom, c.wd, c.nesterov);
    CHECK(rel_err(values(p), ref) < 1e-14);
    double lr = 0;
    MT_OK_OR_FAIL(mt_optim_get_lr(opt, &lr));
    CHECK(lr == c.lr);
    MT_OK_OR_FAIL(mt_optim_free(opt));
  }
}

TEST_CASE("sgd rejects bad settings and parameters") {
  LeakGuard lg;
  H p = make({1}, {1});
  mt_tensor *params[1] = {p};
  mt_optimizer *opt = nullptr;
  CHECK(mt_optim_sgd(&opt, params, 1, 0.1, 0, 0, 0) == MT_ERR_INVALID_ARGUMENT);  // no requires_grad
  MT_OK_OR_FAIL(mt_tensor_set_requires_grad(p, 1));
  CHECK(mt_optim_sgd(&opt, params, 1, -0.1, 0, 0, 0) == MT_ERR_INVALID_ARGUMENT);
  CHECK(mt_optim_sgd(&opt, params, 1, 0.1, 0, 0, 1) == MT_ERR_INVALID_ARGUMENT);  // nesterov without momentum
  CHECK(opt == nullptr);
  CHECK(mt_optim_step(nullptr) == MT_ERR_INVALID_ARGUMENT);
  MT_OK_OR_FAIL(mt_optim_sgd(&opt, params, 1, 0.1, 0, 0, 0));
  MT_OK_OR_FAIL(mt_optim_step(opt));  // no gradient yet: nothing moves
  CHECK(values(p) == Vec{1});
  MT_OK_OR_FAIL(mt_optim_free(opt));
  CHECK(mt_optim_free(opt) == MT_ERR_INVALID_ARGUMENT);
  CHECK(mt_optim_free(nullptr) == MT_OK);
}
