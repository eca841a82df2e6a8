// optim.h - optimizers over lists of parameters (not recorded on the tape).
#pragma once

#include <string>
#include <vector>

#include "tensor.h"

struct mt_optimizer {
  enum class Kind { SGD, ADAM, ADAMW } kind = Kind::SGD;
  std::vector<mt::Ref> params;
  std::vector<mt::Ref> velocity;  // SGD: per parameter, created at its first update (momentum != 0)
  std::vector<mt::Ref> m, v;      // Adam: moments per parameter, zeros at creation
  std::vector<int64_t> param_steps;  // Adam: updates each parameter received (bias correction)
  // Adam on CUDA: the same counts as int64 scalars on the device, which the update reads and
  // advances (so a recorded step replays correctly); they, not param_steps, are authoritative there.
  std::vector<mt::Ref> step_counters;
  // The learning rate as a float64 scalar on the GPU when a parameter lives there: the fused
  // updates read it, so a recorded step follows set_lr (mirrors lr).
  mt::Ref lr_device;
  double lr = 0, momentum = 0, weight_decay = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool nesterov = false;
  int64_t steps = 0;
};

namespace mt {
using Optimizer = ::mt_optimizer;
Optimizer *optimizer_sgd(const std::vector<Ref> &params, double lr, double momentum, double weight_decay,
                         bool nesterov);
Optimizer *optimizer_adam(const std::vector<Ref> &params, double lr, double beta1, double beta2, double eps,
                          double weight_decay, bool decoupled);
void optimizer_free(Optimizer *opt);
// Scales the gradients of params to a global L2 norm of at most max_norm; returns the
// norm before clipping (0-d, on the parameters' device). Nothing leaves the device.
Ref clip_grad_norm(const std::vector<Ref> &params, double max_norm);
bool is_live_optimizer(const Optimizer *opt);
void optimizer_step(Optimizer &opt);
// Sets the learning rate (and its device copy). Fails with STATE while a graph is recorded.
void optimizer_set_lr(Optimizer &opt, double lr);
void optimizer_zero_grad(Optimizer &opt);
// Sets every element of t's gradient to zero (no-op without one).
void zero_grad(Tensor &t);
// Drops t's gradient.
void clear_grad(Tensor &t);
// Optimizer state to and from a safetensors file (kind and sizes are checked on load).
void optimizer_save(const Optimizer &opt, const std::string &path);
void optimizer_load(Optimizer &opt, const std::string &path);
}  // namespace mt
