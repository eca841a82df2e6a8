// tape.cpp - the per-thread tape and the backward walk.
//
// mt_backward walks the whole tape in reverse. Gradients of intermediate tensors
// live in a map keyed by tensor for the length of the walk; leaves that require
// grad receive theirs in .grad only after every rule has run, so a failure half
// way leaves .grad and the tape as they were.
#include <unordered_map>

#include "ops.h"

namespace mt {
namespace {
thread_local std::vector<Node> t_tape;
}

void tape_push(Node &&node) { t_tape.push_back(std::move(node)); }
std::vector<Ref> &last_node_saved() {
  MT_ASSERT(!t_tape.empty());
  return t_tape.back().saved;
}
int64_t tape_size() { return (int64_t)t_tape.size(); }
void tape_clear() {
  std::vector<Node> dead;
  dead.swap(t_tape);  // releases happen after the tape is consistent again
  dead.clear();
  // The emptied buffer becomes the tape again, so a steady training loop records into the
  // same storage step after step (unless a release above recorded something meanwhile).
  if (t_tape.capacity() == 0) t_tape.swap(dead);
}

namespace {

// acc += g, without writing into g (g may be shared with other gradients).
void accumulate(std::unordered_map<Tensor *, Ref> &grads, Tensor *key, Ref g) {
  auto it = grads.find(key);
  if (it == grads.end()) grads.emplace(key, std::move(g));
  else it->second = ops::binary(Binary::ADD, it->second, g);
}

// x's gradient accumulated so far, with x's shape, dtype and device; else null. When `owned`,
// only if this walk alone holds it (no other tensor or map entry holds it or its storage), so
// that a rule may add into it.
Ref prior_gradient(const Ref &x, const std::unordered_map<Tensor *, Ref> &grads, bool owned) {
  if (!x || !x->requires_grad) return Ref();
  auto it = grads.find(x.get());
  if (it == grads.end()) return Ref();
  const Ref &acc = it->second;
  if (acc->shape != x->shape || acc->dtype != x->dtype || acc->device != x->device) return Ref();
  if (owned && (acc->refs.load() != 1 || acc->storage.use_count() != 1)) return Ref();
  return acc;
}

}  // namespace

void backward(const Ref &loss) {
  MT_CHECK(loss->numel() == 1, SHAPE, "loss must have one element, got shape %s", shape_str(loss->shape).c_str());
  MT_CHECK(dtype_is_float(loss->dtype), DTYPE, "loss must be floating, got %s", dtype_name(loss->dtype));
  MT_CHECK(loss->requires_grad, STATE,
           "loss does not require grad: no recorded op led to it (set requires_grad on a parameter before the forward pass, and keep grad mode on)");
  if (loss->is_leaf) {  // d loss / d loss = 1 and nothing else to do
    NoGradGuard ng;
    Ref one = ops::full(loss->shape, 1.0, loss->dtype, loss->device);
    if (!loss->grad) {
      loss->grad = one.release();
    } else {
      Tensor *acc = loss->grad;
      acc->backend().binary(Binary::ADD, acc->data(), acc->data(), one->data(),
                            make_broadcast_plan(acc->shape, acc->shape, one->shape), acc->dtype);
    }
    tape_clear();
    return;
  }
  const Node *root = nullptr;
  for (const Node &n : t_tape)
    if (n.out.get() == loss.get()) root = &n;
  MT_CHECK(root, STATE, "the loss was not produced by an op on this thread's tape (was the tape cleared, or the loss made under no-grad?)");

  NoGradGuard ng;  // rules use forward ops; none of them may record
  std::unordered_map<Tensor *, Ref> grads;
  // The seed d loss / d loss = 1. The fused losses take a null gradient as 1, which saves
  // writing the seed: one launch fewer per step on a device.
  grads.emplace(loss.get(), rule_takes_unit_seed(root->op) ? Ref()
                                                           : ops::full(loss->shape, 1.0, loss->dtype, loss->device));
  std::vector<Ref> in_grads, prior;
  for (size_t i = t_tape.size(); i-- > 0;) {
    const Node &node = t_tape[i];
    auto it = grads.find(node.out.get());
    if (it == grads.end()) continue;  // does not lead to the loss
    Ref g = std::move(it->second);
    grads.erase(it);
    in_grads.assign(node.in.size(), Ref());
    prior.assign(node.in.size(), Ref());
    const bool in_place = rule_adds_into_owned(node.op);
    for (size_t k = 0; k < node.in.size(); k++)
      if (in_place || rule_adds_prior(node.op, k)) prior[k] = prior_gradient(node.in[k], grads, in_place);
    backward_rule(node, g, in_grads, prior);
    for (size_t k = 0; k < node.in.size(); k++) {
      const Ref &x = node.in[k];
      if (!x || !x->requires_grad || !in_grads[k]) continue;
      if (in_place && prior[k] && in_grads[k].get() == prior[k].get()) continue;  // added in place, already in grads
      MT_CHECK(in_grads[k]->shape == x->shape && in_grads[k]->dtype == x->dtype, INTERNAL,
               "internal error, please report: backward of %s gave input %zu a gradient of %s %s, expected %s %s",
               op_name(node.op), k, dtype_name(in_grads[k]->dtype), shape_str(in_grads[k]->shape).c_str(),
               dtype_name(x->dtype), shape_str(x->shape).c_str());
      if (!in_place && prior[k]) {  // rule_adds_prior: the rule's gradient already includes the prior one
        grads[x.get()] = std::move(in_grads[k]);
        continue;
      }
      accumulate(grads, x.get(), std::move(in_grads[k]));
    }
  }
  // Every rule ran: now hand gradients to the leaves.
  for (auto &kv : grads) {
    Tensor *leaf = kv.first;
    if (!leaf->is_leaf || !leaf->requires_grad) continue;
    Ref g = std::move(kv.second);
    if (!leaf->grad) {
      // Own the buffer outright: g may be shared with another leaf or view another tensor.
      bool exclusive = g->refs.load() == 1 && g->storage.use_count() == 1 && g->shape == leaf->shape;
      Ref own = exclusive ? g : ops::clone(g);
      leaf->grad = own.release();
    } else {
      Tensor *acc = leaf->grad;
      acc->backend().binary(Binary::ADD, acc->data(), acc->data(), g->data(),
                            make_broadcast_plan(acc->shape, acc->shape, g->shape), acc->dtype);
    }
  }
  grads.clear();
  tape_clear();
}

}  // namespace mt
