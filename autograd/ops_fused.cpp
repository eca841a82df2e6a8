// ops_fused.cpp - the fused transformer ops: layer_norm and gelu as single recorded ops with
// backward rules of their own (one kernel each way instead of a chain of primitives), and
// the causal mask of attention built on the device. Their compositions (nn_ops.cpp,
// *_composed) stay as test references; the table rows are in docs/derivatives.md.
#include "nn_ops.h"

namespace mt {

std::vector<Ref> &last_node_saved();  // tape.cpp

namespace ops {

Ref layer_norm(const Ref &x, const Ref &gamma, const Ref &beta, double eps) {
  check_layer_norm_args(x, gamma, beta, eps);
  const int64_t d = x->shape.back(), rows = d ? x->numel() / d : 0;
  const DType sd = Backend::layer_norm_stats_dtype(x->dtype);
  Ref y = empty(x->shape, x->dtype, x->device);
  Ref mean = empty({rows}, sd, x->device), rstd = empty({rows}, sd, x->device);
  if (rows && d)
    x->backend().layer_norm(y->data(), mean->data(), rstd->data(), x->data(), gamma ? gamma->data() : nullptr,
                            beta ? beta->data() : nullptr, rows, d, eps, x->dtype);
  record(Op::LAYER_NORM, y, {x, gamma, beta}, eps);
  if (y->requires_grad && grad_enabled()) last_node_saved() = {mean, rstd};
  return y;
}

Ref gelu(const Ref &x) {
  MT_CHECK(dtype_is_float(x->dtype), DTYPE, "x must be a floating tensor, got %s", dtype_name(x->dtype));
  Ref y = empty(x->shape, x->dtype, x->device);
  if (x->numel()) x->backend().gelu(y->data(), x->data(), x->numel(), x->dtype);
  return record(Op::GELU, y, {x});
}

Ref causal_mask(int64_t T, int64_t S, Device device) {
  MT_CHECK(T >= 0 && S >= 0, SHAPE, "causal mask sizes must be >= 0, got T %lld, S %lld", (long long)T, (long long)S);
  Ref m = empty({T, S}, DType::U8, device);
  if (T && S) m->backend().causal_mask((uint8_t *)m->data(), T, S);
  return m;
}

}  // namespace ops

void backward_fused(const Node &node, const Ref &g, std::vector<Ref> &grads, const std::vector<Ref> &prior) {
  using namespace ops;
  const std::vector<Ref> &in = node.in;
  auto need = [&](size_t i) { return i < in.size() && in[i] && in[i]->requires_grad; };
  switch (node.op) {
    case Op::LAYER_NORM: {  // dx (plus x's prior gradient), dgamma, dbeta in one backward call (backend.h)
      const Ref &x = in[0], &gamma = in[1], &dx_add = prior[0];
      MT_ASSERT(node.saved.size() == 2);
      const int64_t d = x->shape.back(), rows = d ? x->numel() / d : 0;
      Ref dx = need(0) ? empty(x->shape, x->dtype, x->device) : nullptr;
      Ref dgamma = need(1) ? empty({d}, x->dtype, x->device) : nullptr;
      Ref dbeta = need(2) ? empty({d}, x->dtype, x->device) : nullptr;
      if (rows && d) {
        x->backend().layer_norm_backward(dx ? dx->data() : nullptr, dx && dx_add ? dx_add->data() : nullptr,
                                         dgamma ? dgamma->data() : nullptr,
                                         dbeta ? dbeta->data() : nullptr, g->data(), x->data(),
                                         node.saved[0]->data(), node.saved[1]->data(),
                                         gamma ? gamma->data() : nullptr, rows, d, x->dtype);
      } else {  // no rows: the parameter gradients are sums of nothing (and dx is empty)
        for (const Ref *p : {&dgamma, &dbeta})
          if (*p && d) (*p)->backend().fill((*p)->data(), d, x->dtype, 0.0);
      }
      grads[0] = dx;
      grads[1] = dgamma;
      grads[2] = dbeta;
      break;
    }
    case Op::GELU:
      if (need(0)) {
        const Ref &x = in[0];
        Ref dx = empty(x->shape, x->dtype, x->device);
        if (x->numel()) x->backend().gelu_backward(dx->data(), g->data(), x->data(), x->numel(), x->dtype);
        grads[0] = dx;
      }
      break;
    default:
      fail(Code::INTERNAL, "internal error, please report: no backward rule for %s", op_name(node.op));
  }
}

}  // namespace mt
