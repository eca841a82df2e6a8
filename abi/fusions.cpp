// fusions.cpp - the extern "C" entry points of the fusions section of minitorch.h:
// mt_bias_act, mt_add_layer_norm, mt_dropout_add. Each checks its handles and calls
// autograd/ops_fusions.cpp.
#include "minitorch.h"

#include "abi/entry.h"
#include "autograd/nn_ops.h"

using namespace mt;
using namespace mt::abi;

extern "C" {

MT_API mt_status mt_bias_act(mt_tensor **out, mt_tensor *x, mt_tensor *bias, mt_activation act) {
  return op_entry("mt_bias_act", out, [&] {
    return ops::bias_act(tensor_arg(x, "x"), tensor_arg(bias, "bias"), (Backend::Activation)act);
  });
}

MT_API mt_status mt_add_layer_norm(mt_tensor **sum_out, mt_tensor **norm_out, mt_tensor *x, mt_tensor *residual,
                                   mt_tensor *gamma, mt_tensor *beta, double eps) {
  if (sum_out) *sum_out = nullptr;
  if (norm_out) *norm_out = nullptr;
  return guard("mt_add_layer_norm", [&] {
    MT_CHECK(sum_out && norm_out, INVALID_ARGUMENT, "sum_out and norm_out must not be NULL (sum_out=%p, norm_out=%p)",
             (void *)sum_out, (void *)norm_out);
    std::pair<Ref, Ref> r = ops::add_layer_norm(tensor_arg(x, "x"), tensor_arg(residual, "residual"),
                                                optional_tensor_arg(gamma, "gamma"), optional_tensor_arg(beta, "beta"),
                                                eps);
    *sum_out = r.first.release();
    *norm_out = r.second.release();
  });
}

MT_API mt_status mt_dropout_add(mt_tensor **out, mt_tensor *x, mt_tensor *residual, double p, int64_t seed) {
  return op_entry("mt_dropout_add", out, [&] {
    return ops::dropout_add(tensor_arg(x, "x"), tensor_arg(residual, "residual"), p, (uint64_t)seed);
  });
}

}  // extern "C"
