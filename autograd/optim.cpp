// optim.cpp - SGD as torch.optim.SGD; one backend call (one fused kernel on CUDA)
// per group of parameters sharing device, dtype and first-step state.
#include "optim.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_set>

#include "ops.h"
#include "safetensors.h"

namespace mt {
namespace {
std::mutex g_opt_mu;
std::unordered_set<const Optimizer *> &live_optimizers() {
  static auto *s = new std::unordered_set<const Optimizer *>();
  return *s;
}
}  // namespace

namespace {
void check_params(const std::vector<Ref> &params) {
  for (size_t i = 0; i < params.size(); i++) {
    MT_CHECK(params[i]->dtype == DType::F32 || params[i]->dtype == DType::F64, DTYPE,
             "params[%zu] must be float32 or float64, got %s", i, dtype_name(params[i]->dtype));
    MT_CHECK(params[i]->requires_grad && params[i]->is_leaf, INVALID_ARGUMENT,
             "params[%zu] must be a leaf tensor that requires grad", i);
  }
}
Optimizer *register_optimizer(Optimizer *opt) {
  for (const Ref &p : opt->params)
    if (p->device == Device::CUDA && !opt->lr_device) opt->lr_device = ops::full({}, opt->lr, DType::F64, p->device);
  std::lock_guard<std::mutex> lock(g_opt_mu);
  live_optimizers().insert(opt);
  return opt;
}
}  // namespace

Optimizer *optimizer_adam(const std::vector<Ref> &params, double lr, double beta1, double beta2, double eps,
                          double weight_decay, bool decoupled) {
  MT_CHECK(lr >= 0, INVALID_ARGUMENT, "learning rate must be >= 0, got %g", lr);
  MT_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, INVALID_ARGUMENT,
           "betas must be in [0, 1), got %g and %g", beta1, beta2);
  MT_CHECK(eps >= 0, INVALID_ARGUMENT, "eps must be >= 0, got %g", eps);
  MT_CHECK(weight_decay >= 0, INVALID_ARGUMENT, "weight_decay must be >= 0, got %g", weight_decay);
  check_params(params);
  std::unique_ptr<Optimizer> opt(new Optimizer());
  opt->kind = decoupled ? Optimizer::Kind::ADAMW : Optimizer::Kind::ADAM;
  opt->params = params;
  for (const Ref &p : params) {
    opt->m.push_back(ops::full(p->shape, 0.0, p->dtype, p->device));
    opt->v.push_back(ops::full(p->shape, 0.0, p->dtype, p->device));
  }
  opt->param_steps.assign(params.size(), 0);
  for (const Ref &p : params)
    opt->step_counters.push_back(p->device == Device::CUDA ? ops::full({}, 0.0, DType::I64, p->device) : Ref());
  opt->lr = lr;
  opt->beta1 = beta1;
  opt->beta2 = beta2;
  opt->eps = eps;
  opt->weight_decay = weight_decay;
  return register_optimizer(opt.release());
}

Optimizer *optimizer_sgd(const std::vector<Ref> &params, double lr, double momentum, double weight_decay,
                         bool nesterov) {
  MT_CHECK(lr >= 0, INVALID_ARGUMENT, "learning rate must be >= 0, got %g", lr);
  MT_CHECK(momentum >= 0, INVALID_ARGUMENT, "momentum must be >= 0, got %g", momentum);
  MT_CHECK(weight_decay >= 0, INVALID_ARGUMENT, "weight_decay must be >= 0, got %g", weight_decay);
  MT_CHECK(!nesterov || momentum > 0, INVALID_ARGUMENT, "nesterov needs momentum > 0, got momentum %g", momentum);
  check_params(params);
  auto *opt = new Optimizer();
  opt->params = params;
  opt->velocity.resize(params.size());
  opt->lr = lr;
  opt->momentum = momentum;
  opt->weight_decay = weight_decay;
  opt->nesterov = nesterov;
  return register_optimizer(opt);
}

void optimizer_free(Optimizer *opt) {
  if (!opt) return;
  {
    std::lock_guard<std::mutex> lock(g_opt_mu);
    live_optimizers().erase(opt);
  }
  delete opt;
}

bool is_live_optimizer(const Optimizer *opt) {
  std::lock_guard<std::mutex> lock(g_opt_mu);
  return live_optimizers().count(opt) != 0;
}

namespace {
// The learning rate the fused updates on device read, or null where they take it by value (CPU).
const double *lr_on(const Optimizer &opt, Device device) {
  return device == Device::CUDA && opt.lr_device ? (const double *)opt.lr_device->data() : nullptr;
}

void adam_step(Optimizer &opt) {
  struct Group {
    std::vector<void *> p, m, v;
    std::vector<const void *> g;
    std::vector<int64_t> n;
    std::vector<int64_t *> counters;
  };
  // As torch, each parameter counts its own updates: group by (device, dtype, step). Device
  // counters carry the step themselves, so there the step is no part of the key.
  std::map<std::tuple<int, int, int64_t>, Group> groups;
  for (size_t i = 0; i < opt.params.size(); i++) {
    Tensor &p = *opt.params[i];
    if (!p.grad) continue;
    const Ref &counter = opt.step_counters[i];
    Group &grp = groups[std::make_tuple((int)p.device, (int)p.dtype, counter ? 0 : opt.param_steps[i] + 1)];
    if (counter) grp.counters.push_back((int64_t *)counter->data());
    grp.p.push_back(p.data());
    grp.g.push_back(p.grad->data());
    grp.m.push_back(opt.m[i]->data());
    grp.v.push_back(opt.v[i]->data());
    grp.n.push_back(p.numel());
  }
  for (auto &kv : groups) {
    Group &grp = kv.second;
    AdamArgs a;
    a.count = (int64_t)grp.p.size();
    a.params = grp.p.data();
    a.grads = grp.g.data();
    a.m = grp.m.data();
    a.v = grp.v.data();
    a.numel = grp.n.data();
    a.dtype = (DType)std::get<1>(kv.first);
    a.lr = opt.lr;
    a.beta1 = opt.beta1;
    a.beta2 = opt.beta2;
    a.eps = opt.eps;
    a.weight_decay = opt.weight_decay;
    a.decoupled = opt.kind == Optimizer::Kind::ADAMW;
    a.step = std::get<2>(kv.first);
    if (!grp.counters.empty()) {
      a.step = 1;
      a.step_counters = grp.counters.data();
    }
    a.lr_device = lr_on(opt, (Device)std::get<0>(kv.first));
    backend_for((Device)std::get<0>(kv.first)).adam_step(a);
  }
  // Counted after every group ran, so a failed update does not advance the counters.
  for (size_t i = 0; i < opt.params.size(); i++)
    if (opt.params[i]->grad) opt.param_steps[i]++;
  opt.steps++;
}
}  // namespace

Ref clip_grad_norm(const std::vector<Ref> &params, double max_norm) {
  MT_CHECK(max_norm > 0, INVALID_ARGUMENT, "max_norm must be > 0, got %g", max_norm);
  // One fused backend call over every gradient (sum of squares, norm and factor, scale on the
  // device, no synchronization): clip_grad_norm in backend/backend.h.
  SmallVector<void *, 64> grads;
  SmallVector<int64_t, 64> numel;
  const Tensor *first = nullptr;
  for (size_t i = 0; i < params.size(); i++) {
    Tensor *g = params[i]->grad;
    if (!g) continue;
    MT_CHECK(!first || (g->device == first->device && g->dtype == first->dtype), DEVICE,
             "params[%zu]: gradients must share one device and dtype", i);
    if (!first) first = g;
    grads.push_back(g->data());
    numel.push_back(g->numel());
  }
  if (!first) return Ref();
  Ref norm = ops::empty({}, first->dtype, first->device);
  first->backend().clip_grad_norm(norm->data(), grads.data(), numel.data(), (int64_t)grads.size(), first->dtype,
                                  max_norm, 1e-6);
  return norm;
}

void optimizer_step(Optimizer &opt) {
  if (opt.kind != Optimizer::Kind::SGD) {
    adam_step(opt);
    return;
  }
  // Group by (device, dtype, first step) so each group is one fused update. Parameters are
  // float32 or float64 on the CPU or CUDA, so there are 8 possible groups: kept in place, in the
  // order of their key (device, dtype, first), with inline arrays (no allocation per step).
  struct Group {
    SmallVector<void *, 16> p;
    SmallVector<const void *, 16> g;
    SmallVector<void *, 16> v;
    SmallVector<int64_t, 16> n;
  };
  Group groups[8];
  for (size_t i = 0; i < opt.params.size(); i++) {
    Tensor &p = *opt.params[i];
    if (!p.grad) continue;
    MT_CHECK(p.grad->shape == p.shape && p.grad->device == p.device, STATE,
             "params[%zu]: gradient does not match the parameter", i);
    MT_ASSERT((p.dtype == DType::F32 || p.dtype == DType::F64) && (p.device == Device::CPU || p.device == Device::CUDA));
    bool first = false;
    if (opt.momentum != 0 && !opt.velocity[i]) {
      opt.velocity[i] = ops::empty(p.shape, p.dtype, p.device);  // written before read at the first step
      first = true;
    }
    Group &grp = groups[((int)p.device * 2 + (p.dtype == DType::F64 ? 1 : 0)) * 2 + (first ? 1 : 0)];
    grp.p.push_back(p.data());
    grp.g.push_back(p.grad->data());
    grp.v.push_back(opt.momentum != 0 ? opt.velocity[i]->data() : nullptr);
    grp.n.push_back(p.numel());
  }
  for (int k = 0; k < 8; k++) {
    Group &grp = groups[k];
    if (grp.p.empty()) continue;
    const Device device = (Device)(k / 4);
    SgdArgs a;
    a.count = (int64_t)grp.p.size();
    a.params = grp.p.data();
    a.grads = grp.g.data();
    a.velocity = opt.momentum != 0 ? grp.v.data() : nullptr;
    a.numel = grp.n.data();
    a.dtype = (k / 2) % 2 ? DType::F64 : DType::F32;
    a.lr = opt.lr;
    a.momentum = opt.momentum;
    a.weight_decay = opt.weight_decay;
    a.nesterov = opt.nesterov;
    a.first_step = k % 2 == 1;
    a.lr_device = lr_on(opt, device);
    backend_for(device).sgd_step(a);
  }
  opt.steps++;
}

void optimizer_set_lr(Optimizer &opt, double lr) {
  MT_CHECK(lr >= 0, INVALID_ARGUMENT, "learning rate must be >= 0, got %g", lr);
  if (opt.lr_device) {
    Backend &be = opt.lr_device->backend();
    // A recorded fill would reset the rate at every replay: set it between replays instead.
    MT_CHECK(!be.capturing(), STATE, "the learning rate cannot be set while a graph is being recorded");
    be.fill(opt.lr_device->data(), 1, DType::F64, lr);  // stream-ordered: no host synchronization per step
  }
  opt.lr = lr;
}

void zero_grad(Tensor &t) {
  if (t.grad) t.grad->backend().fill(t.grad->data(), t.grad->numel(), t.grad->dtype, 0.0);
}

void clear_grad(Tensor &t) {
  Tensor *g = t.grad;
  t.grad = nullptr;
  tensor_release(g);
}

void optimizer_zero_grad(Optimizer &opt) {
  for (Ref &p : opt.params) clear_grad(*p);
}

}  // namespace mt

// ---------------------------------------------------------------- state files
namespace mt {
namespace {
const char *kind_name(Optimizer::Kind k) {
  return k == Optimizer::Kind::SGD ? "sgd" : k == Optimizer::Kind::ADAM ? "adam" : "adamw";
}
Ref scalar_i64(int64_t v) { return ops::from_host(&v, {}, DType::I64, Device::CPU); }
Ref scalar_f64(double v) { return ops::from_host(&v, {}, DType::F64, Device::CPU); }
}  // namespace

// Names follow torch's optimizer state_dict: state.<i>.momentum_buffer, state.<i>.exp_avg,
// state.<i>.exp_avg_sq, state.<i>.step, and lr.
void optimizer_save(const Optimizer &opt, const std::string &path) {
  std::vector<std::pair<std::string, Ref>> ts;
  ts.emplace_back("lr", scalar_f64(opt.lr));
  for (size_t i = 0; i < opt.params.size(); i++) {
    std::string pre = "state." + std::to_string(i) + ".";
    if (opt.kind == Optimizer::Kind::SGD) {
      if (opt.velocity[i]) ts.emplace_back(pre + "momentum_buffer", opt.velocity[i]);
    } else {
      ts.emplace_back(pre + "exp_avg", opt.m[i]);
      ts.emplace_back(pre + "exp_avg_sq", opt.v[i]);
      const Ref &counter = opt.step_counters[i];
      int64_t step = opt.param_steps[i];
      if (counter) counter->backend().copy_to_host(&step, counter->data(), sizeof step);
      ts.emplace_back(pre + "step", scalar_i64(step));
    }
  }
  st::save(path, ts, {{"optimizer", kind_name(opt.kind)}, {"params", std::to_string(opt.params.size())}});
}

void optimizer_load(Optimizer &opt, const std::string &path) {
  st::File f = st::read_header(path);
  auto meta = [&](const char *k) { auto it = f.metadata.find(k); return it == f.metadata.end() ? std::string() : it->second; };
  // Files written by mt_optim_save say what they hold; files written elsewhere (torch's
  // state_dict names through mt_save_safetensors) are taken by their entries alone.
  MT_CHECK(meta("optimizer").empty() || meta("optimizer") == kind_name(opt.kind), STATE,
           "%s holds %s state, this optimizer is %s", path.c_str(), meta("optimizer").c_str(), kind_name(opt.kind));
  MT_CHECK(meta("params").empty() || meta("params") == std::to_string(opt.params.size()), STATE,
           "%s holds state for %s parameters, this optimizer has %zu", path.c_str(), meta("params").c_str(),
           opt.params.size());
  auto has = [&](const std::string &n) {
    for (auto &e : f.entries) if (e.name == n) return true;
    return false;
  };
  // Load everything first, then assign: a failure leaves the optimizer as it was.
  auto fetch = [&](const std::string &name, const Ref &like) {
    Ref t = st::load(f, name, like->device);
    MT_CHECK(t->shape == like->shape && t->dtype == like->dtype, STATE, "%s: %s is %s %s, expected %s %s", path.c_str(),
             name.c_str(), dtype_name(t->dtype), shape_str(t->shape).c_str(), dtype_name(like->dtype),
             shape_str(like->shape).c_str());
    return t;
  };
  Ref lr = st::load(f, "lr", Device::CPU);
  MT_CHECK(lr->dtype == DType::F64 && lr->numel() == 1, STATE, "%s: lr is not a float64 scalar", path.c_str());
  std::vector<Ref> vel(opt.params.size()), m(opt.params.size()), v(opt.params.size());
  std::vector<int64_t> steps(opt.params.size(), 0);
  for (size_t i = 0; i < opt.params.size(); i++) {
    std::string pre = "state." + std::to_string(i) + ".";
    if (opt.kind == Optimizer::Kind::SGD) {
      if (has(pre + "momentum_buffer")) vel[i] = fetch(pre + "momentum_buffer", opt.params[i]);
    } else {
      m[i] = fetch(pre + "exp_avg", opt.params[i]);
      v[i] = fetch(pre + "exp_avg_sq", opt.params[i]);
      Ref s = st::load(f, pre + "step", Device::CPU);
      MT_CHECK(s->dtype == DType::I64 && s->numel() == 1, STATE, "%s: %sstep is not an int64 scalar", path.c_str(), pre.c_str());
      steps[i] = *(const int64_t *)s->data();
    }
  }
  optimizer_set_lr(opt, *(const double *)lr->data());
  if (opt.kind == Optimizer::Kind::SGD) {
    opt.velocity = vel;
  } else {
    opt.m = m;
    opt.v = v;
    opt.param_steps = steps;
    for (size_t i = 0; i < opt.params.size(); i++)
      if (opt.step_counters[i]) opt.step_counters[i]->backend().copy_from_host(opt.step_counters[i]->data(), &steps[i], sizeof steps[i]);
  }
}
}  // namespace mt
