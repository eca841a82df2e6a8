// backward.cpp - one backward rule per op (docs/derivatives.md is the same table
// in prose). g is the gradient of the node's output; grads[i] receives the
// gradient of input i, written in terms of forward ops, only where the input
// requires grad. Broadcast inputs get their gradient summed back to their shape.
#include <cstring>

#include "ops.h"

namespace mt {

bool rule_takes_unit_seed(Op op) { return op == Op::MSE_LOSS || op == Op::CROSS_ENTROPY || op == Op::NLL_LOSS; }
bool rule_adds_into_owned(Op op) { return op == Op::SLICE; }
// LAYER_NORM's x: where a residual stream meets its LayerNorm (each fused add + LayerNorm), the
// sum goes through the LayerNorm backward's kernel instead of a separate add.
bool rule_adds_prior(Op op, size_t input) { return op == Op::LAYER_NORM && input == 0; }

void backward_rule(const Node &node, const Ref &g, std::vector<Ref> &grads, const std::vector<Ref> &prior) {
  using namespace ops;
  const std::vector<Ref> &in = node.in;
  auto need = [&](size_t i) { return i < in.size() && in[i] && in[i]->requires_grad; };
  const Ref &y = node.out;

  switch (node.op) {
    case Op::ADD:
      if (need(0)) grads[0] = sum_to_shape(g, in[0]->shape);
      if (need(1)) grads[1] = sum_to_shape(g, in[1]->shape);
      break;
    case Op::SUB:
      if (need(0)) grads[0] = sum_to_shape(g, in[0]->shape);
      if (need(1)) grads[1] = sum_to_shape(unary(Unary::NEG, g), in[1]->shape);
      break;
    case Op::MUL:
      if (need(0)) grads[0] = sum_to_shape(binary(Binary::MUL, g, in[1]), in[0]->shape);
      if (need(1)) grads[1] = sum_to_shape(binary(Binary::MUL, g, in[0]), in[1]->shape);
      break;
    case Op::DIV:  // y = a / b: da = g / b, db = -g * y / b
      if (need(0)) grads[0] = sum_to_shape(binary(Binary::DIV, g, in[1]), in[0]->shape);
      if (need(1))
        grads[1] = sum_to_shape(unary(Unary::NEG, binary(Binary::DIV, binary(Binary::MUL, g, y), in[1])), in[1]->shape);
      break;
    case Op::MATMUL: {
      const Ref &a = in[0], &b = in[1];
      if (node.ints.size() == 2) {  // matmul_t: C = s op(A) op(B), batch dims equal
        const bool ta = node.ints[0] != 0, tb = node.ints[1] != 0;
        const double s = node.scalar;
        // dop(A) = s g op(B)^T, dop(B) = s op(A)^T g, each transposed back where the operand was
        if (need(0)) grads[0] = ta ? bmm(b, tb, g, true, s) : bmm(g, false, b, !tb, s);
        if (need(1)) grads[1] = tb ? bmm(g, true, a, ta, s) : bmm(a, !ta, g, false, s);
      } else if (b->ndim() == 2) {  // rows of a flattened: dA = g B^T, dB = A^T g
        if (need(0)) grads[0] = matmul2d(g, false, b, true);
        if (need(1)) grads[1] = matmul2d(a, true, g, false);
      } else {  // batched; a 2-D a broadcasts over the batch and its gradient sums over it
        if (need(0)) grads[0] = sum_to_shape(bmm(g, false, b, true), a->shape);
        if (need(1)) grads[1] = bmm(a, true, g, false);
      }
      break;
    }
    case Op::LINEAR:  // y = x W^T + b
      if (need(0)) grads[0] = matmul2d(g, false, in[1], false);
      if (need(1) && need(2)) {  // db = the row sums of g^T, beside dW = g^T x (one launch for tiny layers)
        grads[2] = empty(in[2]->shape, g->dtype, g->device);
        grads[1] = matmul2d_extras(g, true, in[0], false, Ref(), grads[2]);
      } else {
        if (need(1)) grads[1] = matmul2d(g, true, in[0], false);
        if (need(2)) grads[2] = sum_to_shape(g, in[2]->shape);
      }
      break;
    case Op::ADD_SCALAR:
      if (need(0)) grads[0] = g;
      break;
    case Op::MUL_SCALAR:
      if (need(0)) grads[0] = unary(Unary::MUL_SCALAR, g, node.scalar);
      break;
    case Op::POW_SCALAR:  // p x^(p-1)
      if (need(0))
        grads[0] = binary(Binary::MUL, g, unary(Unary::MUL_SCALAR, unary(Unary::POW_SCALAR, in[0], node.scalar - 1), node.scalar));
      break;
    case Op::NEG:
      if (need(0)) grads[0] = unary(Unary::NEG, g);
      break;
    case Op::RELU:  // subgradient 0 at x == 0, as PyTorch
      if (need(0)) grads[0] = binary(Binary::RELU_BWD, g, in[0]);
      break;
    case Op::SIGMOID:
      if (need(0)) grads[0] = binary(Binary::SIGMOID_BWD, g, y);
      break;
    case Op::TANH:
      if (need(0)) grads[0] = binary(Binary::TANH_BWD, g, y);
      break;
    case Op::EXP:
      if (need(0)) grads[0] = binary(Binary::MUL, g, y);
      break;
    case Op::LOG:
      if (need(0)) grads[0] = binary(Binary::DIV, g, in[0]);
      break;
    case Op::SUM:
      if (need(0)) grads[0] = expand(g, in[0]->shape);
      break;
    case Op::MEAN:
      if (need(0)) grads[0] = unary(Unary::MUL_SCALAR, expand(g, in[0]->shape), 1.0 / (double)in[0]->numel());
      break;
    case Op::SUM_DIM:
    case Op::MEAN_DIM: {
      if (!need(0)) break;
      const Ref &x = in[0];
      Shape kept = x->shape;
      if (x->ndim() > 0) kept[(size_t)node.ints[0]] = 1;
      Ref e = expand(reshape(g, kept), x->shape);
      if (node.op == Op::MEAN_DIM && x->ndim() > 0) e = unary(Unary::MUL_SCALAR, e, 1.0 / (double)x->shape[(size_t)node.ints[0]]);
      grads[0] = e;
      break;
    }
    case Op::MSE_LOSS: {  // mean((p - t)^2): dp = 2 (p - t) g / n, dt = -dp, in one fused kernel
      const Ref &p = in[0], &t = in[1];
      if (need(0)) grads[0] = empty(p->shape, p->dtype, p->device);
      if (need(1)) grads[1] = empty(t->shape, t->dtype, t->device);
      p->backend().mse_backward(grads[0] ? grads[0]->data() : nullptr, grads[1] ? grads[1]->data() : nullptr, p->data(),
                                t->data(), g ? g->data() : nullptr, p->numel(), p->dtype, 2.0 / (double)p->numel());
      break;
    }
    case Op::RESHAPE:
      if (need(0)) grads[0] = reshape(g, in[0]->shape);
      break;
    case Op::PERMUTE: {
      if (!need(0)) break;
      std::vector<int64_t> inv(node.ints.size());
      for (size_t i = 0; i < inv.size(); i++) inv[(size_t)node.ints[i]] = (int64_t)i;
      grads[0] = permute(g, inv);
      break;
    }
    case Op::TO_DEVICE:
      if (need(0)) grads[0] = to_device(g, (Device)node.ints[0]);
      break;
    case Op::CAST:
      if (need(0)) grads[0] = cast(g, (DType)node.ints[0]);
      break;
    case Op::CLONE:
      if (need(0)) grads[0] = g;
      break;
    case Op::SOFTMAX:
    case Op::LOG_SOFTMAX: {  // along the recorded dim, from the output y
      if (!need(0)) break;
      bool log = node.op == Op::LOG_SOFTMAX;
      int64_t d = node.ints[0];
      Ref yl = y, gl = g;
      bool moved = y->ndim() > 0 && d != y->ndim() - 1;
      if (moved) { yl = transpose(y, d, -1); gl = transpose(g, d, -1); }
      int64_t cols = yl->ndim() ? yl->shape.back() : 1, rows = cols ? yl->numel() / cols : 0;
      Ref dx = empty(yl->shape, yl->dtype, yl->device);
      if (!yl->numel()) {
      } else if (node.ints.size() == 3) {  // causal_softmax's: ints {last dim, t, offset}
        yl->backend().causal_softmax_backward(dx->data(), yl->data(), gl->data(), rows, cols, node.ints[1],
                                              node.ints[2], yl->dtype);
      } else {
        yl->backend().softmax_backward(dx->data(), yl->data(), gl->data(), rows, cols, yl->dtype, log);
      }
      grads[0] = moved ? transpose(dx, d, -1) : dx;
      break;
    }
    case Op::CROSS_ENTROPY: {  // (softmax(x) - onehot(t)) * g / N, one fused kernel
      if (!need(0)) break;
      const Ref &x = in[0], &t = in[1], &lse = node.saved[0];
      Ref dx = empty(x->shape, x->dtype, x->device);
      x->backend().cross_entropy_backward(dx->data(), x->data(), lse->data(), (const int64_t *)t->data(), g ? g->data() : nullptr,
                                          x->shape[0], x->shape[1], x->dtype, 1.0 / (double)x->shape[0]);
      grads[0] = dx;
      break;
    }
    case Op::NLL_LOSS: {  // -g / N at [r, t_r]
      if (!need(0)) break;
      const Ref &x = in[0], &t = in[1];
      Ref dx = empty(x->shape, x->dtype, x->device);
      x->backend().nll_loss_backward(dx->data(), (const int64_t *)t->data(), g ? g->data() : nullptr, x->shape[0], x->shape[1],
                                     x->dtype, 1.0 / (double)x->shape[0]);
      grads[0] = dx;
      break;
    }
    case Op::MAX_DIM: {  // the gradient goes to the first maximum of each slice
      if (!need(0)) break;
      const Ref &x = in[0], &idx = node.saved[0];
      int64_t d = node.ints[0], outer = 1, inner = 1, red = x->ndim() ? x->shape[(size_t)d] : 1;
      for (int64_t k = 0; k < d; k++) outer *= x->shape[(size_t)k];
      for (int64_t k = d + 1; k < x->ndim(); k++) inner *= x->shape[(size_t)k];
      Ref dx = empty(x->shape, x->dtype, x->device);
      x->backend().max_backward(dx->data(), (const int64_t *)idx->data(), g->data(), outer, red, inner, x->dtype);
      grads[0] = dx;
      break;
    }
    case Op::INDEX_SELECT: {  // scatter-add g's rows back to the selected rows
      if (!need(0)) break;
      const Ref &x = in[0], &idx = in[1];
      Ref dx = full(x->shape, 0.0, x->dtype, x->device);
      int64_t cols = x->numel() / (x->shape[0] ? x->shape[0] : 1);
      if (g->numel())
        x->backend().index_add(dx->data(), (const int64_t *)idx->data(), g->data(), idx->numel(), x->shape[0], cols,
                               x->dtype);
      grads[0] = dx;
      break;
    }
    case Op::SLICE: {  // g placed back into a zero tensor of x's shape
      if (!need(0)) break;
      const Ref &x = in[0];
      int64_t d = node.ints[0], start = node.ints[1], len = node.ints[2], outer = 1, inner = 1;
      for (int64_t k = 0; k < d; k++) outer *= x->shape[(size_t)k];
      for (int64_t k = d + 1; k < x->ndim(); k++) inner *= x->shape[(size_t)k];
      if (prior[0] && outer == 1) {
        // x's gradient so far is the walk's alone and the slice's region of it is contiguous
        // (no dim before the sliced one is larger than 1): one add over the region instead of
        // a zero tensor of x's shape, a copy into it and an add over all of x. The same sums in
        // the same order (0 + g is g), so the same bits.
        const Ref &acc = prior[0];
        if (g->numel()) {
          char *region = (char *)acc->data() + start * inner * dtype_size(x->dtype);
          const Shape flat{len * inner};
          acc->backend().binary(Binary::ADD, region, region, g->data(), make_broadcast_plan(flat, flat, flat), x->dtype);
        }
        grads[0] = acc;
        break;
      }
      Ref dx = full(x->shape, 0.0, x->dtype, x->device);
      if (g->numel())
        x->backend().slice_backward(dx->data(), g->data(), outer, x->shape[(size_t)d], inner, start, len, x->dtype);
      grads[0] = dx;
      break;
    }
    // ---- comparisons and selection (ops_compare.cpp)
    case Op::WHERE: {  // in = {cond, a, b}: da = where(cond, g, 0), db = where(cond, 0, g)
      Ref zero = full({}, 0.0, g->dtype, g->device);
      if (need(1)) grads[1] = sum_to_shape(where(in[0], g, zero), in[1]->shape);
      if (need(2)) grads[2] = sum_to_shape(where(in[0], zero, g), in[2]->shape);
      break;
    }
    case Op::MAXIMUM:
    case Op::MINIMUM: {  // as torch: a tie gives each input g/2, the losing input 0
      using C = Backend::Compare;
      const bool mx = node.op == Op::MAXIMUM;
      Ref zero = full({}, 0.0, g->dtype, g->device);
      Ref shared = where(compare(C::EQ, in[0], in[1]), unary(Unary::MUL_SCALAR, g, 0.5), g);
      if (need(0)) grads[0] = sum_to_shape(where(compare(mx ? C::LT : C::GT, in[0], in[1]), zero, shared), in[0]->shape);
      if (need(1)) grads[1] = sum_to_shape(where(compare(mx ? C::GT : C::LT, in[0], in[1]), zero, shared), in[1]->shape);
      break;
    }
    case Op::SQRT:  // g / (2 y)
      if (need(0)) grads[0] = unary(Unary::MUL_SCALAR, binary(Binary::DIV, g, y), 0.5);
      break;
    case Op::ABS:  // g sign(x), 0 at 0
      if (need(0)) grads[0] = binary(Binary::MUL, g, unary(Unary::SIGN, in[0]));
      break;
    case Op::POW: {  // y = a^b: da = g b a^(b-1) (0 where b == 0), db = g y log(a) (0 where a == 0 and b >= 0)
      using C = Backend::Compare;
      const Ref &a = in[0], &b = in[1];
      Ref zero = full({}, 0.0, g->dtype, g->device);
      if (need(0)) {
        Ref d = binary(Binary::MUL, g, binary(Binary::MUL, b, pow(a, unary(Unary::ADD_SCALAR, b, -1.0))));
        grads[0] = sum_to_shape(where(compare(C::EQ, b, zero), zero, d), a->shape);
      }
      if (need(1)) {
        Ref d = binary(Binary::MUL, g, binary(Binary::MUL, y, unary(Unary::LOG, a)));
        Ref masked = where(compare(C::EQ, a, zero), where(compare(C::GE, b, zero), zero, d), d);
        grads[1] = sum_to_shape(masked, b->shape);
      }
      break;
    }
    case Op::CLAMP: {  // g where lo <= x <= hi (bounds included, as torch), else 0
      if (!need(0)) break;
      using C = Backend::Compare;
      const Ref &x = in[0];
      double hi;
      std::memcpy(&hi, &node.ints[0], sizeof hi);
      Ref zero = full({}, 0.0, g->dtype, g->device);
      Ref lo_t = full({}, node.scalar, x->dtype, x->device), hi_t = full({}, hi, x->dtype, x->device);
      grads[0] = where(compare(C::GE, x, lo_t), where(compare(C::LE, x, hi_t), g, zero), zero);
      break;
    }
    // ---- end comparisons and selection
    case Op::CAT: {  // each input's gradient is its block of g along the cat dim
      const Shape &gs = g->shape;
      int64_t d = node.ints[0], outer = 1, inner = 1, at = 0;
      for (int64_t k = 0; k < d; k++) outer *= gs[(size_t)k];
      for (int64_t k = d + 1; k < (int64_t)gs.size(); k++) inner *= gs[(size_t)k];
      for (size_t i = 0; i < in.size(); i++) {
        int64_t len = node.ints[i + 1];
        if (need(i)) {
          Ref gi = empty(in[i]->shape, g->dtype, g->device);
          if (gi->numel()) g->backend().slice_copy(gi->data(), g->data(), outer, gs[(size_t)d], inner, at, len, g->dtype);
          grads[i] = gi;
        }
        at += len;
      }
      break;
    }
    case Op::CONV2D:
    case Op::MAX_POOL2D:
    case Op::AVG_POOL2D:
    case Op::BATCH_NORM:
      backward_cnn(node, g, grads);
      break;
    case Op::LAYER_NORM:
    case Op::GELU:
      backward_fused(node, g, grads, prior);
      break;
    case Op::FLASH_ATTENTION:
    case Op::SELF_ATTENTION:
      backward_attention(node, g, grads);
      break;
    case Op::BIAS_ACT:
    case Op::DROPOUT_ADD:
      backward_fusions(node, g, grads);
      break;
    case Op::COUNT:
      fail(Code::INTERNAL, "internal error, please report: backward of a COUNT node");
  }
}

}  // namespace mt
