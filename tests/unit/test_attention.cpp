// test_attention.cpp - the FlashAttention op (autograd/ops_attention.cpp) on a machine without
// a GPU: scaled_dot_product_attention keeps CPU and float32 problems on the composed path (a
// recorded chain of primitives, not the one FLASH_ATTENTION node), flash_attention_applies says
// no for them, and calling the flash op where no backend takes it fails with a clear message.
// The kernels themselves are tested against PyTorch in tests/gpu/test_flash_attention.py.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "autograd/nn_ops.h"
#include "autograd/ops_attention.h"
#include "helpers.h"

using namespace t;

namespace {

mt::Ref cpu_tensor(std::mt19937_64 &rng, const Shape &shape) {
  H h = make(randvec(rng, numel(shape)), shape, MT_F32, MT_CPU);
  return mt::Ref::share(h.get());
}

std::string error_of(const std::function<void()> &f, mt::Code *code) {
  try {
    f();
  } catch (const mt::Error &e) {
    *code = e.code();
    return e.what();
  }
  *code = mt::Code::OK;
  return "";
}

}  // namespace

TEST_CASE("attention on the CPU and in float32 stays on the composed path") {
  LeakGuard lg;
  std::mt19937_64 rng(11);
  mt::Ref q = cpu_tensor(rng, {1, 2, 5, 64}), k = cpu_tensor(rng, {1, 2, 5, 64}), v = cpu_tensor(rng, {1, 2, 5, 64});
  for (const mt::Ref *x : {&q, &k, &v}) (*x)->requires_grad = true;
  CHECK_FALSE(mt::ops::flash_attention_applies(q, k, v, true));
  CHECK_FALSE(mt::ops::flash_attention_applies(q, k, v, false));
  mt::Ref out = mt::ops::scaled_dot_product_attention(q, k, v, true, 0);
  CHECK(out->shape == mt::Shape{1, 2, 5, 64});
  CHECK(mt_tape_size() > 1);  // scaled scores, causal softmax, matmul: never one FLASH_ATTENTION node
  // the first query sees only the first key: its output row is v's first row
  std::vector<float> o(2 * 5 * 64), vv(2 * 5 * 64);
  out->backend().copy_to_host(o.data(), out->data(), (int64_t)o.size() * 4);
  v->backend().copy_to_host(vv.data(), v->data(), (int64_t)vv.size() * 4);
  for (int d = 0; d < 64; d++) CHECK(o[(size_t)d] == doctest::Approx(vv[(size_t)d]).epsilon(1e-6));
  mt_tape_clear();
}

TEST_CASE("flash_attention reports what it cannot take") {
  LeakGuard lg;
  std::mt19937_64 rng(12);
  mt::Code code;
  mt::Ref q = cpu_tensor(rng, {1, 2, 5, 64}), k = cpu_tensor(rng, {1, 2, 5, 64}), v = cpu_tensor(rng, {1, 2, 5, 64});
  std::string msg = error_of([&] { mt::ops::flash_attention(q, k, v, false, 0); }, &code);
  CHECK(code == mt::Code::UNSUPPORTED);
  CHECK(msg.find("flash attention does not take float32 with head dim 64 on the cpu backend") != std::string::npos);

  mt::Ref q3 = cpu_tensor(rng, {2, 5, 64});
  msg = error_of([&] { mt::ops::flash_attention(q3, k, v, false, 0); }, &code);
  CHECK(code == mt::Code::SHAPE);
  CHECK(msg.find("q, k, v must be [B, H, T, D]: q is [2,5,64]") != std::string::npos);
  CHECK_FALSE(mt::ops::flash_attention_applies(q3, k, v, false));

  mt::Ref k2 = cpu_tensor(rng, {1, 3, 5, 64});
  msg = error_of([&] { mt::ops::flash_attention(q, k2, k2, false, 0); }, &code);
  CHECK(code == mt::Code::SHAPE);
  CHECK(msg.find("expected k and v [1, 2, S, 64]") != std::string::npos);
}

TEST_CASE("causal attention (one causal softmax) equals its explicit mask, softmax and matmuls") {
  // The composed path runs the mask and the softmax as one op (backend causal_softmax) when
  // S >= T; the reference here is the chain it replaces: scores, masked_fill with the causal
  // mask, softmax, matmul. Values and the gradients of q, k, v; float64 to 1e-12 and float32 to
  // 1e-5 (the same math, rounded in another order on CUDA). The backward skips the masked
  // columns on CUDA where rows are whole 16-byte packs (S = 16, 40, 48, 64 here).
  LeakGuard lg;
  std::mt19937_64 rng(13);
  const std::pair<int64_t, int64_t> sizes[] = {{5, 5}, {4, 7}, {1, 33}, {16, 16}, {3, 40}, {48, 48}, {20, 64}};
  for (const auto &ts : sizes) {
    const int64_t T = ts.first, S = ts.second, D = 8;
    for (mt_dtype dt : {MT_F64, MT_F32}) {
      CAPTURE(T);
      CAPTURE(S);
      CAPTURE((int)dt);
      const Vec vq = randvec(rng, 6 * T * D, -2, 2), vk = randvec(rng, 6 * S * D, -2, 2),
                vv = randvec(rng, 6 * S * D), vr = randvec(rng, 6 * T * D);
      auto run = [&](bool fused) {
        H q = make(vq, {2, 3, T, D}, dt), k = make(vk, {2, 3, S, D}, dt), v = make(vv, {2, 3, S, D}, dt);
        H r = make(vr, {2, 3, T, D}, dt);
        for (mt_tensor *x : {q.get(), k.get(), v.get()}) MT_OK_OR_FAIL(mt_tensor_set_requires_grad(x, 1));
        H out, prod, loss;
        if (fused) {
          MT_OK_OR_FAIL(mt_scaled_dot_product_attention(out.out(), q, k, v, 1));
        } else {
          mt::Ref rq = mt::Ref::share(q.get()), rk = mt::Ref::share(k.get()), rv = mt::Ref::share(v.get());
          mt::Ref scores = mt::ops::mul_scalar(mt::ops::matmul(rq, mt::ops::transpose(rk, -1, -2)), 1.0 / std::sqrt(8.0));
          scores = mt::ops::masked_fill(scores, mt::ops::causal_mask(T, S, rq->device), -INFINITY);
          *out.out() = mt::ops::matmul(mt::ops::softmax(scores, -1), rv).release();
        }
        MT_OK_OR_FAIL(mt_mul(prod.out(), out, r));
        MT_OK_OR_FAIL(mt_sum(loss.out(), prod));
        MT_OK_OR_FAIL(mt_backward(loss));
        std::vector<Vec> res{values(out)};
        for (mt_tensor *x : {q.get(), k.get(), v.get()}) {
          H g;
          MT_OK_OR_FAIL(mt_tensor_grad(g.out(), x));
          res.push_back(values(g));
        }
        return res;
      };
      const std::vector<Vec> got = run(true), ref = run(false);
      const double tol = dt == MT_F64 ? 1e-12 : 1e-5;
      for (size_t i = 0; i < got.size(); i++) {
        CAPTURE(i);  // 0 the output, then the gradients of q, k, v
        CHECK(rel_err(got[i], ref[i]) < tol);
      }
    }
  }
}
