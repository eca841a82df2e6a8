// nn.cpp - the extern "C" transformer blocks of minitorch.h (see autograd/nn_ops.h).
#include <string>

#include "abi/entry.h"
#include "autograd/nn_ops.h"
#include "autograd/ops_attention.h"

using namespace mt;
using namespace mt::abi;

extern "C" {

MT_API mt_status mt_layer_norm(mt_tensor **out, mt_tensor *x, mt_tensor *gamma, mt_tensor *beta, double eps) {
  return op_entry("mt_layer_norm", out, [&] {
    return ops::layer_norm(tensor_arg(x, "x"), optional_tensor_arg(gamma, "gamma"), optional_tensor_arg(beta, "beta"),
                           eps);
  });
}

MT_API mt_status mt_gelu(mt_tensor **out, mt_tensor *x) {
  return op_entry("mt_gelu", out, [&] { return ops::gelu(tensor_arg(x, "x")); });
}

MT_API mt_status mt_embedding(mt_tensor **out, mt_tensor *weight, mt_tensor *indices) {
  return op_entry("mt_embedding", out,
                  [&] { return ops::embedding(tensor_arg(weight, "weight"), tensor_arg(indices, "indices")); });
}

MT_API mt_status mt_scaled_dot_product_attention(mt_tensor **out, mt_tensor *q, mt_tensor *k, mt_tensor *v,
                                                 int64_t causal) {
  return op_entry("mt_scaled_dot_product_attention", out, [&] {
    return ops::scaled_dot_product_attention(tensor_arg(q, "q"), tensor_arg(k, "k"), tensor_arg(v, "v"), causal != 0,
                                             0.0);
  });
}

MT_API mt_status mt_scaled_dot_product_attention_scaled(mt_tensor **out, mt_tensor *q, mt_tensor *k, mt_tensor *v,
                                                        int64_t causal, double scale) {
  return op_entry("mt_scaled_dot_product_attention_scaled", out, [&] {
    return ops::scaled_dot_product_attention(tensor_arg(q, "q"), tensor_arg(k, "k"), tensor_arg(v, "v"), causal != 0,
                                             scale);
  });
}

MT_API mt_status mt_self_attention(mt_tensor **out, mt_tensor *qkv, int64_t heads, int64_t causal) {
  return op_entry("mt_self_attention", out,
                  [&] { return ops::self_attention(tensor_arg(qkv, "qkv"), heads, causal != 0, 0.0); });
}

MT_API mt_status mt_dropout(mt_tensor **out, mt_tensor *x, double p, int64_t seed) {
  return op_entry("mt_dropout", out, [&] { return ops::dropout(tensor_arg(x, "x"), p, (uint64_t)seed); });
}

MT_API mt_status mt_masked_fill(mt_tensor **out, mt_tensor *x, mt_tensor *mask, double value) {
  return op_entry("mt_masked_fill", out,
                  [&] { return ops::masked_fill(tensor_arg(x, "x"), tensor_arg(mask, "mask"), value); });
}

MT_API mt_status mt_cat(mt_tensor **out, mt_tensor *const *tensors, int64_t n, int64_t dim) {
  return op_entry("mt_cat", out, [&] {
    MT_CHECK(n > 0, INVALID_ARGUMENT, "n must be > 0, got %lld", (long long)n);
    MT_CHECK(tensors, INVALID_ARGUMENT, "tensors is NULL");
    std::vector<Ref> xs;
    for (int64_t i = 0; i < n; i++) {
      std::string name = "tensors[" + std::to_string(i) + "]";
      xs.push_back(tensor_arg(tensors[i], name.c_str()));
    }
    return ops::cat(xs, dim);
  });
}

}  // extern "C"
