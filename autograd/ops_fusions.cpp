// ops_fusions.cpp - the fused ops of transformer and MLP blocks: bias + activation, residual
// add + LayerNorm, dropout + residual add (declared in nn_ops.h, "fusions"). Each does in one
// pass over memory what its composition does in two or three; the compositions stay as their
// test references and docs/derivatives.md has the backward rows.
#include "nn_ops.h"

namespace mt {

std::vector<Ref> &last_node_saved();  // tape.cpp

namespace {

// t must be a tensor of x's dtype and device; `what` names it in the message.
void check_like(const Ref &x, const Ref &t, const char *what) {
  MT_CHECK(t->device == x->device, DEVICE, "tensors on different devices: x is %s, %s is %s",
           device_name_short(x->device), what, device_name_short(t->device));
  MT_CHECK(t->dtype == x->dtype, DTYPE, "dtypes differ: x is %s, %s is %s", dtype_name(x->dtype), what,
           dtype_name(t->dtype));
}

void check_floating(const Ref &x) {
  MT_CHECK(dtype_is_float(x->dtype), DTYPE, "x must be a floating tensor, got %s", dtype_name(x->dtype));
}

void check_same_shape(const Ref &x, const Ref &residual) {
  check_like(x, residual, "residual");
  MT_CHECK(residual->shape == x->shape, SHAPE, "residual must have x's shape %s, got %s", shape_str(x->shape).c_str(),
           shape_str(residual->shape).c_str());
}

// x viewed as [rows, n], n its last dim (rows 0 when x has no elements).
void rows_cols(const Ref &x, int64_t &rows, int64_t &n) {
  n = x->shape.back();
  rows = n ? x->numel() / n : 0;
}

}  // namespace

namespace ops {

Ref bias_act(const Ref &x, const Ref &bias, Backend::Activation act) {
  using Act = Backend::Activation;
  MT_CHECK(act == Act::IDENTITY || act == Act::RELU || act == Act::GELU, INVALID_ARGUMENT,
           "act must be MT_ACT_IDENTITY (0), MT_ACT_RELU (1) or MT_ACT_GELU (2), got %d", (int)act);
  check_floating(x);
  MT_CHECK(x->ndim() >= 1, SHAPE, "x must have at least 1 dim, got %s", shape_str(x->shape).c_str());
  check_like(x, bias, "bias");
  int64_t rows, n;
  rows_cols(x, rows, n);
  MT_CHECK(bias->ndim() == 1 && bias->shape[0] == n, SHAPE, "bias must be [%lld] (the last dim of x %s), got %s",
           (long long)n, shape_str(x->shape).c_str(), shape_str(bias->shape).c_str());
  Ref y = empty(x->shape, x->dtype, x->device);
  if (rows && n) x->backend().bias_act(y->data(), x->data(), bias->data(), rows, n, act, x->dtype);
  return record(Op::BIAS_ACT, y, {x, bias}, 0, {(int64_t)act});
}

std::pair<Ref, Ref> add_layer_norm(const Ref &x, const Ref &residual, const Ref &gamma, const Ref &beta, double eps) {
  check_layer_norm_args(x, gamma, beta, eps);
  check_same_shape(x, residual);
  int64_t rows, d;
  rows_cols(x, rows, d);
  const DType sd = Backend::layer_norm_stats_dtype(x->dtype);
  Ref s = empty(x->shape, x->dtype, x->device), y = empty(x->shape, x->dtype, x->device);
  Ref mean = empty({rows}, sd, x->device), rstd = empty({rows}, sd, x->device);
  if (rows && d)
    x->backend().add_layer_norm(s->data(), y->data(), mean->data(), rstd->data(), x->data(), residual->data(),
                                gamma ? gamma->data() : nullptr, beta ? beta->data() : nullptr, rows, d, eps,
                                x->dtype);
  // Two nodes, in the order the composition add + layer_norm records them: the LAYER_NORM
  // rule gives s its dLN(dy), the tape adds the gradient s gets from its other uses, and the
  // ADD rule passes the total to x and residual.
  record(Op::ADD, s, {x, residual});
  record(Op::LAYER_NORM, y, {s, gamma, beta}, eps);
  if (y->requires_grad && grad_enabled()) last_node_saved() = {mean, rstd};
  return {s, y};
}

Ref dropout_add(const Ref &x, const Ref &residual, double p, uint64_t seed) {
  MT_CHECK(p >= 0 && p < 1, INVALID_ARGUMENT, "p must be in [0, 1), got %g", p);
  check_floating(x);
  check_same_shape(x, residual);
  if (p == 0) return add(residual, x);
  Ref out = empty(x->shape, x->dtype, x->device);
  if (x->numel()) x->backend().dropout_add(out->data(), x->data(), residual->data(), x->numel(), p, seed, x->dtype);
  return record(Op::DROPOUT_ADD, out, {x, residual}, p, {(int64_t)seed});
}

}  // namespace ops

void backward_fusions(const Node &node, const Ref &g, std::vector<Ref> &grads) {
  using namespace ops;
  const std::vector<Ref> &in = node.in;
  auto need = [&](size_t i) { return i < in.size() && in[i] && in[i]->requires_grad; };
  switch (node.op) {
    case Op::BIAS_ACT: {  // z = x + bias: dx = g act'(z), dbias = column sums of dx, one pass
      const Ref &x = in[0], &bias = in[1];
      const auto act = (Backend::Activation)node.ints[0];
      const bool identity = act == Backend::Activation::IDENTITY;
      int64_t rows, n;
      rows_cols(x, rows, n);
      Ref dx = need(0) && !identity ? empty(x->shape, x->dtype, x->device) : nullptr;
      Ref dbias = need(1) ? empty({n}, x->dtype, x->device) : nullptr;
      if (rows && n && (dx || dbias))
        x->backend().bias_act_backward(dx ? dx->data() : nullptr, dbias ? dbias->data() : nullptr, g->data(),
                                       x->data(), bias->data(), rows, n, act, x->dtype);
      else if (dbias && n)  // no rows: a sum of nothing
        dbias->backend().fill(dbias->data(), n, x->dtype, 0.0);
      grads[0] = need(0) && identity ? g : dx;
      grads[1] = dbias;
      break;
    }
    case Op::DROPOUT_ADD: {  // dx = g * keep (the mask drawn again from the seed), dresidual = g
      const Ref &x = in[0];
      if (need(0)) {
        Ref dx = empty(x->shape, x->dtype, x->device);
        if (x->numel())
          x->backend().dropout_add(dx->data(), g->data(), nullptr, x->numel(), node.scalar, (uint64_t)node.ints[0],
                                   x->dtype);
        grads[0] = dx;
      }
      if (need(1)) grads[1] = g;
      break;
    }
    default:
      fail(Code::INTERNAL, "internal error, please report: no backward rule for %s", op_name(node.op));
  }
}

}  // namespace mt
