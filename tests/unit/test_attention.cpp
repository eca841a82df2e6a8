// test_attention.cpp - the FlashAttention op (autograd/ops_attention.cpp) on a machine without
// a GPU: scaled_dot_product_attention keeps CPU and float32 problems on the composed path (a
// recorded chain of primitives, not the one FLASH_ATTENTION node), flash_attention_applies says
// no for them, and calling the flash op where no backend takes it fails with a clear message.
// The kernels themselves are tested against PyTorch in tests/gpu/test_flash_attention.py.
// self_attention (packed q|k|v heads) is checked against its explicit composition on the device
// under test: on CUDA in float32 with head dim 16 or 32 that is the one fused node.
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
  // D 32 also takes the fused float32 kernels on CUDA (T, S past one 32-query and 64-key tile).
  const int64_t sizes[][3] = {{5, 5, 8},   {4, 7, 8},   {1, 33, 8},   {16, 16, 8},  {3, 40, 8},
                              {48, 48, 8}, {20, 64, 8}, {37, 37, 32}, {70, 133, 32}, {9, 20, 16}};
  for (const auto &ts : sizes) {
    const int64_t T = ts[0], S = ts[1], D = ts[2];
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
          mt::Ref scores =
              mt::ops::mul_scalar(mt::ops::matmul(rq, mt::ops::transpose(rk, -1, -2)), 1.0 / std::sqrt((double)D));
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

TEST_CASE("self_attention over a packed projection equals its composition") {
  // Reference: the explicit chain (reshape, permute, slice, scores, mask, softmax, matmul,
  // permute, reshape), never the fused kernels. Values and qkv's gradient under a random
  // upstream gradient; float64 to 1e-12, float32 to 1e-5 (fused on CUDA: the same math in another
  // order of rounding). Sizes reach past one query tile (32) and one key tile (64).
  LeakGuard lg;
  std::mt19937_64 rng(14);
  struct Case {
    int64_t B, T, H, Dh;
    bool causal;
  };
  const Case cases[] = {{2, 5, 3, 16, true},  {1, 33, 2, 32, true},   {2, 64, 4, 32, true}, {1, 70, 1, 16, false},
                        {3, 40, 2, 32, false}, {1, 130, 2, 32, true}, {2, 9, 2, 8, true}};
  for (const Case &cs : cases) {
    const int64_t B = cs.B, T = cs.T, NH = cs.H, Dh = cs.Dh, D = NH * Dh;
    for (mt_dtype dt : {MT_F64, MT_F32}) {
      CAPTURE(T);
      CAPTURE(NH);
      CAPTURE(Dh);
      CAPTURE(cs.causal);
      CAPTURE((int)dt);
      const Vec vx = randvec(rng, B * T * 3 * D, -2, 2), vr = randvec(rng, B * T * D);
      auto run = [&](bool fused) {
        H qkv = make(vx, {B, T, 3 * D}, dt), r = make(vr, {B, T, D}, dt);
        MT_OK_OR_FAIL(mt_tensor_set_requires_grad(qkv, 1));
        H out, prod, loss;
        if (fused) {
          const int64_t before = mt_tape_size();
          MT_OK_OR_FAIL(mt_self_attention(out.out(), qkv, NH, cs.causal ? 1 : 0));
          const bool one_node = dev() == MT_CUDA && dt == MT_F32 && (Dh == 16 || Dh == 32);
          CHECK((mt_tape_size() - before == 1) == one_node);
        } else {
          using namespace mt::ops;
          mt::Ref x = mt::Ref::share(qkv.get());
          mt::Ref p = permute(reshape(x, {B, T, 3, NH, Dh}), {2, 0, 3, 1, 4});
          mt::Ref q = reshape(slice(p, 0, 0, 1), {B, NH, T, Dh}), k = reshape(slice(p, 0, 1, 2), {B, NH, T, Dh}),
                  v = reshape(slice(p, 0, 2, 3), {B, NH, T, Dh});
          mt::Ref scores = mul_scalar(matmul(q, transpose(k, -1, -2)), 1.0 / std::sqrt((double)Dh));
          if (cs.causal) scores = masked_fill(scores, causal_mask(T, T, x->device), -INFINITY);
          mt::Ref y = matmul(softmax(scores, -1), v);
          *out.out() = reshape(permute(y, {0, 2, 1, 3}), {B, T, D}).release();
        }
        MT_OK_OR_FAIL(mt_mul(prod.out(), out, r));
        MT_OK_OR_FAIL(mt_sum(loss.out(), prod));
        MT_OK_OR_FAIL(mt_backward(loss));
        H g;
        MT_OK_OR_FAIL(mt_tensor_grad(g.out(), qkv));
        return std::vector<Vec>{values(out), values(g)};
      };
      const std::vector<Vec> got = run(true), ref = run(false);
      const double tol = dt == MT_F64 ? 1e-12 : 1e-5;
      CHECK(rel_err(got[0], ref[0]) < tol);
      CHECK(rel_err(got[1], ref[1]) < tol);
    }
  }
}

TEST_CASE("self_attention reports bad arguments") {
  LeakGuard lg;
  H qkv = make(Vec(2 * 3 * 12, 0.5), {2, 3, 12}, MT_F32), flat = make(Vec(12, 0.5), {12}, MT_F32);
  H out;
  CHECK(mt_self_attention(out.out(), flat, 2, 1) == MT_ERR_SHAPE);
  CHECK(std::string(mt_last_error()).find("mt_self_attention: qkv must be [B, T, 3 D], got [12]") != std::string::npos);
  CHECK(mt_self_attention(out.out(), qkv, 0, 1) == MT_ERR_INVALID_ARGUMENT);
  CHECK(std::string(mt_last_error()).find("heads must be >= 1, got 0") != std::string::npos);
  CHECK(mt_self_attention(out.out(), qkv, 3, 1) == MT_ERR_SHAPE);
  CHECK(std::string(mt_last_error()).find("3 * heads * head dim with heads 3") != std::string::npos);
  CHECK(mt_self_attention(out.out(), nullptr, 2, 1) != MT_OK);
  CHECK(out.get() == nullptr);
}
