// optim.h - optimizers over lists of parameters (not recorded on the tape).
#pragma once

#include <vector>

#include "tensor.h"

struct mt_optimizer {
  enum class Kind { SGD } kind = Kind::SGD;
  std::vector<mt::Ref> params;
  std::vector<mt::Ref> velocity;  // per parameter, created at its first update (momentum != 0)
  double lr = 0, momentum = 0, weight_decay = 0;
  bool nesterov = false;
  int64_t steps = 0;
};

namespace mt {
using Optimizer = ::mt_optimizer;
Optimizer *optimizer_sgd(const std::vector<Ref> &params, double lr, double momentum, double weight_decay,
                         bool nesterov);
void optimizer_free(Optimizer *opt);
bool is_live_optimizer(const Optimizer *opt);
void optimizer_step(Optimizer &opt);
void optimizer_zero_grad(Optimizer &opt);
// Sets every element of t's gradient to zero (no-op without one).
void zero_grad(Tensor &t);
}  // namespace mt
