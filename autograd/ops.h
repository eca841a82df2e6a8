// ops.h - the op list, the tape, and the differentiable ops.
//
// One list (MT_OPS) generates the op enum, the name table and the count that the
// backward switch is checked against, so adding an op touches this list, its
// forward in ops.cpp, its rule in backward.cpp, docs/derivatives.md and a test.
//
// defines: Op, op_name, Node, grad mode, tape functions, ops::*
#pragma once

#include <vector>

#include "tensor.h"

namespace mt {

#define MT_OPS(X)                                                                                  \
  X(ADD) X(SUB) X(MUL) X(DIV) X(MATMUL) X(LINEAR) X(ADD_SCALAR) X(MUL_SCALAR) X(POW_SCALAR)       \
  X(NEG) X(RELU) X(SIGMOID) X(TANH) X(EXP) X(LOG) X(SUM) X(MEAN) X(SUM_DIM) X(MEAN_DIM)            \
  X(MSE_LOSS) X(RESHAPE) X(PERMUTE) X(TO_DEVICE) X(CAST) X(CLONE) X(SOFTMAX) X(LOG_SOFTMAX)          \
  X(CROSS_ENTROPY) X(NLL_LOSS) X(MAX_DIM) X(INDEX_SELECT) X(SLICE) X(CAT)                                \
  /* comparisons and selection (ops_compare.cpp) */ X(WHERE) X(MAXIMUM) X(MINIMUM) X(SQRT) X(ABS)    \
  X(POW) X(CLAMP)                                                                                  \
  /* convolutional networks (ops_cnn.cpp) */ X(CONV2D) X(MAX_POOL2D) X(AVG_POOL2D) X(BATCH_NORM)   \
  /* fused transformer kernels (ops_fused.cpp) */ X(LAYER_NORM) X(GELU)                              \
  /* fused attention (ops_attention.cpp) */ X(FLASH_ATTENTION) X(SELF_ATTENTION)                      \
  /* fusions (ops_fusions.cpp) */ X(BIAS_ACT) X(DROPOUT_ADD)

enum class Op : int32_t {
#define MT_X(name) name,
  MT_OPS(MT_X)
#undef MT_X
      COUNT
};
const char *op_name(Op op);

// One recorded op: its output, its inputs (null for an absent optional input) and
// what the backward rule needs besides them.
struct Node {
  Op op;
  Ref out;
  std::vector<Ref> in;
  double scalar = 0;          // the scalar operand of *_SCALAR ops
  std::vector<int64_t> ints;  // dims, permutation, the source device or dtype
  std::vector<Ref> saved;     // what the forward kept for the backward (row statistics, indices)
};

// Whether float32 matmuls may use TF32 (process-wide, off by default).
bool set_allow_tf32(bool on);  // returns the previous setting

// Grad mode and the tape are per thread.
bool grad_enabled();
bool set_grad_enabled(bool on);  // returns the previous mode
struct NoGradGuard {
  bool prev;
  NoGradGuard() : prev(set_grad_enabled(false)) {}
  ~NoGradGuard() { set_grad_enabled(prev); }
};
int64_t tape_size();
void tape_clear();
// Runs backward from a one-element loss (see mt_backward).
void backward(const Ref &loss);

// Computes the gradients of node's inputs from g, the gradient of its output.
// grads[i] is left null for inputs that need none. Defined in backward.cpp.
// prior[i], when not null, is input i's gradient accumulated so far (with the input's shape,
// dtype and device), filled by the walk only for two kinds of ops (the others get nulls):
//   rule_adds_into_owned: only when the walk alone holds it (no other tensor or entry shares it
//     or its storage). The rule may add its contribution into it in place and return it as
//     grads[i], which the walk then keeps as is instead of adding again.
//   rule_adds_prior (per input): whenever there is one. The rule must return grads[i] =
//     prior[i] + its contribution as a new tensor (prior[i] unchanged), which the walk keeps in
//     place of prior[i]: the sum costs no pass of its own when the rule's kernel adds it.
void backward_rule(const Node &node, const Ref &g, std::vector<Ref> &grads, const std::vector<Ref> &prior);
bool rule_adds_into_owned(Op op);
bool rule_adds_prior(Op op, size_t input);
// Whether op's rule accepts a null g meaning a gradient of 1 (the fused losses: mse_loss,
// cross_entropy, nll_loss), so that the walk need not write the seed when op made the loss.
bool rule_takes_unit_seed(Op op);
// The rules of the op families that live in their own files, called by backward_rule.
void backward_cnn(const Node &node, const Ref &g, std::vector<Ref> &grads);        // ops_cnn.cpp
void backward_fused(const Node &node, const Ref &g, std::vector<Ref> &grads,
                    const std::vector<Ref> &prior);                                // ops_fused.cpp
void backward_attention(const Node &node, const Ref &g, std::vector<Ref> &grads);  // ops_attention.cpp
void backward_fusions(const Node &node, const Ref &g, std::vector<Ref> &grads);    // ops_fusions.cpp

namespace ops {

// Factories (never recorded).
Ref empty(const Shape &shape, DType dtype, Device device);
// value must fit an integer dtype (value_fits): Error(INVALID_ARGUMENT) otherwise.
Ref full(const Shape &shape, double value, DType dtype, Device device);
Ref rand(const Shape &shape, uint64_t seed, bool normal, DType dtype, Device device);
Ref from_host(const void *data, const Shape &shape, DType dtype, Device device);

Ref add(const Ref &a, const Ref &b);
Ref sub(const Ref &a, const Ref &b);
Ref mul(const Ref &a, const Ref &b);
Ref div(const Ref &a, const Ref &b);
Ref matmul(const Ref &a, const Ref &b);
// softmax(masked_fill(x, causal mask, -inf), -1) for x [..., T, S]: key j is masked for query
// i when j > i + offset (offset = S - T >= 0 aligns the queries at the end), without the mask;
// recorded as SOFTMAX (its backward is softmax's: the masked outputs are 0).
Ref causal_softmax(const Ref &x, int64_t offset);
// alpha * op(a) @ op(b) over matching batch dims (a, b [..., r, c], op a transpose of the last
// two dims when the flag is set), without materializing a transpose; recorded as MATMUL (its
// ints {trans_a, trans_b}, its scalar alpha). The composed attention's scores q k^T * scale.
Ref matmul_t(const Ref &a, bool trans_a, const Ref &b, bool trans_b, double alpha);
Ref linear(const Ref &x, const Ref &w, const Ref &bias /* may be null */);
Ref add_scalar(const Ref &x, double s);
Ref mul_scalar(const Ref &x, double s);
Ref pow_scalar(const Ref &x, double p);
Ref neg(const Ref &x);
Ref relu(const Ref &x);
Ref sigmoid(const Ref &x);
Ref tanh(const Ref &x);
Ref exp(const Ref &x);
Ref log(const Ref &x);
Ref sum(const Ref &x);
Ref mean(const Ref &x);
Ref sum_dim(const Ref &x, int64_t dim, bool keepdim);
Ref mean_dim(const Ref &x, int64_t dim, bool keepdim);
Ref mse_loss(const Ref &pred, const Ref &target);
Ref reshape(const Ref &x, const Shape &shape);  // a view; one -1 allowed
Ref transpose(const Ref &x, int64_t dim0, int64_t dim1);
Ref permute(const Ref &x, const std::vector<int64_t> &perm);
Ref to_device(const Ref &x, Device device);
Ref cast(const Ref &x, DType dtype);
Ref clone(const Ref &x);
Ref detach(const Ref &x);
// The classification family. Softmax-like ops work along any dim; the losses take
// [N, C] inputs and int64 targets [N] and average over N.
Ref softmax(const Ref &x, int64_t dim);
Ref log_softmax(const Ref &x, int64_t dim);
Ref cross_entropy(const Ref &logits, const Ref &targets);
Ref nll_loss(const Ref &log_probs, const Ref &targets);
// Max along dim: values (recorded; the gradient goes to the first maximum) and int64 indices.
std::pair<Ref, Ref> max_dim(const Ref &x, int64_t dim, bool keepdim);
Ref index_select(const Ref &x, const Ref &indices);  // rows of x along dim 0
Ref slice(const Ref &x, int64_t dim, int64_t start, int64_t end);
// The check that int64 indices lie in [0, bound), queued ahead of the kernels that read them
// and answered after: the device runs those kernels without waiting for the host (they keep an
// out-of-range index in bounds, see Backend::range_check_queue). finish() throws
// INVALID_ARGUMENT naming the first index outside; an op that fails before finish() leaves the
// answer to the destructor. A graph capture checks nothing (nothing can be read back): indices
// are checked when the step runs eagerly.
class IndexCheck {
 public:
  IndexCheck(const Ref &indices, int64_t bound, const char *what);
  ~IndexCheck();
  IndexCheck(const IndexCheck &) = delete;
  IndexCheck &operator=(const IndexCheck &) = delete;
  void finish();

 private:
  Ref indices_;
  int64_t bound_;
  const char *what_;
  int64_t ticket_ = 0;
  bool pending_ = false;
};

// Helpers for backward rules (not recorded themselves).
Ref unary(Unary op, const Ref &x, double s = 0);
Ref binary(Binary op, const Ref &a, const Ref &b);
Ref sum_to_shape(const Ref &g, const Shape &shape);  // sums broadcast dims away
Ref expand(const Ref &g, const Shape &shape);        // broadcasts g to shape
// C = op(A) @ op(B) over 2-D matrices (or flattened leading dims), no recording.
Ref matmul2d(const Ref &a, bool trans_a, const Ref &b, bool trans_b);
// matmul2d with MatmulArgs' extras (backend.h), non-recording: bias (or null) [n] added to every
// row of the product; a_sums (or null, a tensor of op(a)'s row count) written with the sums of
// op(a)'s rows. The backend may fuse them into the product (CUDA does for tiny products).
Ref matmul2d_extras(const Ref &a, bool trans_a, const Ref &b, bool trans_b, const Ref &bias, const Ref &a_sums);
// C[...] = alpha * op(A[...]) @ op(B[...]) over the batch dims of a and b (one of them may be
// 2-D: it is then shared by every batch), no recording and no transpose materialized.
Ref bmm(const Ref &a, bool trans_a, const Ref &b, bool trans_b, double alpha = 1.0);

// Records out as produced by op from inputs when grad mode is on and an input requires
// grad (ops.cpp). Returns out.
Ref record(Op op, Ref out, std::vector<Ref> in, double scalar = 0, std::vector<int64_t> ints = {});
// ---- host path (ops.cpp)
// The same for the usual call record(op, out, {inputs...}[, scalar[, {ints...}]]): the lists
// become a Node's vectors only when the call is recorded, so an op run without grad builds none.
Ref record(Op op, Ref out, std::initializer_list<Ref> in, double scalar = 0, std::initializer_list<int64_t> ints = {});
// ---- end host path

// ---- comparisons and selection (ops_compare.cpp)
// a OP b broadcast, as uint8 0/1; a and b of one dtype (any) and device; never recorded.
Ref compare(Backend::Compare op, const Ref &a, const Ref &b);
// cond (uint8) ? a : b, the three broadcast together; differentiable in a and b.
Ref where(const Ref &cond, const Ref &a, const Ref &b);
// Elementwise max / min of two floating tensors; NaN propagates; a tie splits the
// gradient in halves between a and b (as torch.maximum / torch.minimum).
Ref maximum(const Ref &a, const Ref &b);
Ref minimum(const Ref &a, const Ref &b);
Ref sqrt(const Ref &x);
Ref abs(const Ref &x);                    // gradient sign(x): 0 at 0
Ref pow(const Ref &a, const Ref &b);      // a ** b broadcast
// min(max(x, lo), hi); the gradient passes where lo <= x <= hi, else 0.
Ref clamp(const Ref &x, double lo, double hi);
// ---- end comparisons and selection

}  // namespace ops
}  // namespace mt
