// ops.cpp - forward ops: check inputs, allocate the output, call the backend,
// record a Node on the tape when grad mode is on and an input requires grad.
//
// Contents: grad mode and tape storage | checks | factories | elementwise |
//           reductions | matmul, linear | shape ops | device and dtype
#include "ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "backend/cpu/parallel.h"
#include "backend/philox.h"

namespace mt {

// ---------------------------------------------------------------- tape state
namespace {
thread_local bool t_grad_enabled = true;
std::atomic<bool> g_allow_tf32{false};
}

bool set_allow_tf32(bool on) { return g_allow_tf32.exchange(on); }
// The tape lives in tape.cpp; recording goes through these hooks.
void tape_push(Node &&node);
std::vector<Ref> &last_node_saved();

bool grad_enabled() { return t_grad_enabled; }
bool set_grad_enabled(bool on) {
  bool prev = t_grad_enabled;
  t_grad_enabled = on;
  return prev;
}

const char *op_name(Op op) {
  static const char *names[] = {
#define MT_X(name) #name,
      MT_OPS(MT_X)
#undef MT_X
  };
  static_assert(sizeof(names) / sizeof(names[0]) == (size_t)Op::COUNT, "op name table out of sync");
  return (int)op >= 0 && op < Op::COUNT ? names[(int)op] : "UNKNOWN";
}

namespace ops {

namespace {
// Whether a call with these inputs is recorded: grad mode on and an input that requires grad.
template <class Inputs>
bool records(const Inputs &in) {
  if (!grad_enabled()) return false;
  for (const Ref &r : in)
    if (r && r->requires_grad) return true;
  return false;
}
}  // namespace

// Records out as produced by op from inputs when grad mode is on and any input
// requires grad. Returns out for chaining. (Declared in ops.h with its defaults.)
Ref record(Op op, Ref out, std::vector<Ref> in, double scalar, std::vector<int64_t> ints) {
  if (!records(in)) return out;
  out->requires_grad = true;
  out->is_leaf = false;
  Node n;
  n.op = op;
  n.out = out;
  n.in = std::move(in);
  n.scalar = scalar;
  n.ints = std::move(ints);
  tape_push(std::move(n));
  return out;
}

Ref record(Op op, Ref out, std::initializer_list<Ref> in, double scalar, std::initializer_list<int64_t> ints) {
  if (!records(in)) return out;
  return record(op, std::move(out), std::vector<Ref>(in), scalar, std::vector<int64_t>(ints));
}

namespace {

void check_float(const Ref &x, const char *what) {
  MT_CHECK(dtype_is_float(x->dtype), DTYPE, "%s must be a floating tensor, got %s", what, dtype_name(x->dtype));
}

void check_pair(const Ref &a, const Ref &b, const char *an, const char *bn) {
  MT_CHECK(a->device == b->device, DEVICE, "tensors on different devices: %s is %s, %s is %s", an,
           device_name_short(a->device), bn, device_name_short(b->device));
  MT_CHECK(a->dtype == b->dtype, DTYPE, "dtypes differ: %s is %s, %s is %s", an, dtype_name(a->dtype), bn,
           dtype_name(b->dtype));
  check_float(a, an);
}

}  // namespace

// ---------------------------------------------------------------- factories
Ref empty(const Shape &shape, DType dtype, Device device) {
  MT_CHECK((int)dtype >= 0 && (int)dtype < kNumDTypes, INVALID_ARGUMENT, "invalid dtype %d", (int)dtype);
  return make_tensor(shape, dtype, device);
}

Ref full(const Shape &shape, double value, DType dtype, Device device) {
  MT_CHECK(value_fits(value, dtype), INVALID_ARGUMENT, "value %.17g does not fit %s", value, dtype_name(dtype));
  Ref t = empty(shape, dtype, device);
  t->backend().fill(t->data(), t->numel(), dtype, value);
  return t;
}

Ref from_host(const void *data, const Shape &shape, DType dtype, Device device) {
  Ref t = empty(shape, dtype, device);
  if (t->nbytes()) t->backend().copy_from_host(t->data(), data, t->nbytes());
  return t;
}

Ref rand(const Shape &shape, uint64_t seed, bool normal, DType dtype, Device device) {
  MT_CHECK(dtype == DType::F32 || dtype == DType::F64 || dtype == DType::F16 || dtype == DType::BF16, DTYPE,
           "random tensors must be floating, got %s", dtype_name(dtype));
  // Uniform float32/float64 draws are made where the tensor lives (no copy, no sync, so
  // dropout can be recorded into a graph); the rest are drawn on the host and copied.
  // Both follow the counter-based stream, so every device gets the same values.
  if (!normal && (dtype == DType::F32 || dtype == DType::F64)) {
    Ref t = empty(shape, dtype, device);
    if (t->numel()) t->backend().fill_uniform(t->data(), t->numel(), dtype, seed);
    return t;
  }
  // Drawn on the host by up to 16 threads, each over its own range of the stream in chunks of
  // 4096 doubles cast to the tensor's dtype by the CPU backend: the values of a single-threaded
  // draw, bit for bit (every element is a pure function of seed and index), written straight
  // into a CPU tensor or into one staging buffer for the copy to the device.
  const int64_t n = shape_numel(shape);
  Ref t = empty(shape, dtype, device);
  if (!n) return t;
  const bool dp = dtype == DType::F64;
  const int64_t esize = dtype_size(dtype);
  std::vector<char> staging;
  char *dst = (char *)t->data();
  if (device != Device::CPU) {
    staging.resize((size_t)(n * esize));
    dst = staging.data();
  }
  auto draw_range = [&](int64_t i0, int64_t i1) {  // i0 a multiple of kPhiloxPerBlock
    constexpr int64_t kChunk = 4096;
    double vals[kChunk];
    for (int64_t c0 = i0; c0 < i1; c0 += kChunk) {
      const int64_t c1 = std::min(i1, c0 + kChunk);
      if (normal)
        for (int64_t i = c0; i < c1; i++) vals[i - c0] = philox_normal_at(seed, i, dp);
      else
        philox_uniforms(seed, c0, c1, dp, [&](int64_t i, double u) { vals[i - c0] = u; });
      if (dp) std::memcpy(dst + c0 * esize, vals, (size_t)((c1 - c0) * esize));
      else cpu_backend().cast(dst + c0 * esize, dtype, vals, DType::F64, c1 - c0);
    }
  };
  parallel_ranges(n, kPhiloxPerBlock, 1 << 16, draw_range);
  if (device != Device::CPU) t->backend().copy_from_host(t->data(), staging.data(), t->nbytes());
  return t;
}

// ---------------------------------------------------------------- elementwise
Ref unary(Unary op, const Ref &x, double s) {
  check_float(x, "x");
  Ref out = empty(x->shape, x->dtype, x->device);
  x->backend().unary(op, out->data(), x->data(), x->numel(), x->dtype, s);
  return out;
}

Ref binary(Binary op, const Ref &a, const Ref &b) {
  check_pair(a, b, "a", "b");
  Shape shape = broadcast_shapes(a->shape, b->shape);
  Ref out = empty(shape, a->dtype, a->device);
  BroadcastPlan plan = make_broadcast_plan(shape, a->shape, b->shape);
  a->backend().binary(op, out->data(), a->data(), b->data(), plan, a->dtype);
  return out;
}

Ref expand(const Ref &g, const Shape &shape) {
  if (g->shape == shape) return g;
  Shape bs = broadcast_shapes(shape, g->shape);
  MT_CHECK(bs == shape, SHAPE, "cannot expand %s to %s", shape_str(g->shape).c_str(), shape_str(shape).c_str());
  Ref out = empty(shape, g->dtype, g->device);
  BroadcastPlan plan = make_broadcast_plan(shape, shape, g->shape);
  g->backend().binary(Binary::COPY_B, out->data(), nullptr, g->data(), plan, g->dtype);
  return out;
}

Ref sum_to_shape(const Ref &g, const Shape &shape) {
  if (g->shape == shape) return g;
  const Shape &gs = g->shape;
  MT_ASSERT(gs.size() >= shape.size());
  // Mark each dim of g as reduced (absent or 1 in shape, >1 in g) or kept, then
  // merge runs of equal marks and reduce the runs from the innermost out.
  size_t lead = gs.size() - shape.size();
  Shape sizes;                     // at most kMaxDims runs: no allocation
  SmallVector<bool, kMaxDims> red;
  for (size_t k = 0; k < gs.size(); k++) {
    bool r = k < lead ? true : (shape[k - lead] == 1 && gs[k] != 1);
    if (gs[k] == 1) continue;  // size-1 dims change nothing
    if (!sizes.empty() && red.back() == r) {
      sizes.back() *= gs[k];
    } else {
      sizes.push_back(gs[k]);
      red.push_back(r);
    }
  }
  Ref cur = g;
  for (size_t k = sizes.size(); k-- > 0;) {
    if (!red[k]) continue;
    int64_t outer = 1, inner = 1;
    for (size_t j = 0; j < k; j++) outer *= sizes[j];
    for (size_t j = k + 1; j < sizes.size(); j++) inner *= sizes[j];
    Ref next = empty({outer * inner}, cur->dtype, cur->device);
    cur->backend().sum_reduce(next->data(), cur->data(), outer, sizes[k], inner, cur->dtype, 1.0, 0.0);
    sizes[k] = 1;
    cur = next;
  }
  // A view of the sums in the target shape (what reshape(detach(cur), shape) makes, without
  // the intermediate handle): same elements, never recorded.
  MT_CHECK(cur->numel() == shape_numel(shape), SHAPE, "cannot reshape %s (%lld elements) into %s",
           shape_str(cur->shape).c_str(), (long long)cur->numel(), shape_str(shape).c_str());
  return tensor_from_storage(cur->storage, cur->offset, shape, cur->dtype);
}

Ref add(const Ref &a, const Ref &b) { return record(Op::ADD, binary(Binary::ADD, a, b), {a, b}); }
Ref sub(const Ref &a, const Ref &b) { return record(Op::SUB, binary(Binary::SUB, a, b), {a, b}); }
Ref mul(const Ref &a, const Ref &b) { return record(Op::MUL, binary(Binary::MUL, a, b), {a, b}); }
Ref div(const Ref &a, const Ref &b) { return record(Op::DIV, binary(Binary::DIV, a, b), {a, b}); }
Ref add_scalar(const Ref &x, double s) { return record(Op::ADD_SCALAR, unary(Unary::ADD_SCALAR, x, s), {x}, s); }
Ref mul_scalar(const Ref &x, double s) { return record(Op::MUL_SCALAR, unary(Unary::MUL_SCALAR, x, s), {x}, s); }
Ref pow_scalar(const Ref &x, double p) { return record(Op::POW_SCALAR, unary(Unary::POW_SCALAR, x, p), {x}, p); }
Ref neg(const Ref &x) { return record(Op::NEG, unary(Unary::NEG, x), {x}); }
Ref relu(const Ref &x) { return record(Op::RELU, unary(Unary::RELU, x), {x}); }
Ref sigmoid(const Ref &x) { return record(Op::SIGMOID, unary(Unary::SIGMOID, x), {x}); }
Ref tanh(const Ref &x) { return record(Op::TANH, unary(Unary::TANH, x), {x}); }
Ref exp(const Ref &x) { return record(Op::EXP, unary(Unary::EXP, x), {x}); }
Ref log(const Ref &x) { return record(Op::LOG, unary(Unary::LOG, x), {x}); }

// ---------------------------------------------------------------- reductions
namespace {
Ref reduce_all(const Ref &x, double scale) {
  check_float(x, "x");
  Ref out = empty({}, x->dtype, x->device);
  x->backend().sum_reduce(out->data(), x->data(), 1, x->numel(), 1, x->dtype, scale, 0.0);
  return out;
}
Ref reduce_dim(const Ref &x, int64_t dim, bool keepdim, bool mean) {
  check_float(x, "x");
  int64_t d = wrap_dim(dim, x->ndim());
  Shape shape = x->shape;
  if (x->ndim() == 0) {  // a 0-d tensor reduced over "dim 0" is itself
    Ref out = empty({}, x->dtype, x->device);
    x->backend().copy(out->data(), x->data(), x->nbytes());
    return out;
  }
  int64_t outer = 1, inner = 1, red = shape[(size_t)d];
  for (int64_t k = 0; k < d; k++) outer *= shape[(size_t)k];
  for (int64_t k = d + 1; k < x->ndim(); k++) inner *= shape[(size_t)k];
  if (keepdim) shape[(size_t)d] = 1;
  else shape.erase(shape.begin() + d);
  Ref out = empty(shape, x->dtype, x->device);
  double scale = mean ? (red ? 1.0 / (double)red : NAN) : 1.0;
  x->backend().sum_reduce(out->data(), x->data(), outer, red, inner, x->dtype, scale, 0.0);
  return out;
}
}  // namespace

Ref sum(const Ref &x) { return record(Op::SUM, reduce_all(x, 1.0), {x}); }
Ref mean(const Ref &x) {
  double n = (double)x->numel();
  return record(Op::MEAN, reduce_all(x, n ? 1.0 / n : NAN), {x});
}
Ref sum_dim(const Ref &x, int64_t dim, bool keepdim) {
  Ref out = reduce_dim(x, dim, keepdim, false);
  return record(Op::SUM_DIM, out, {x}, 0, {wrap_dim(dim, x->ndim()), keepdim ? 1 : 0});
}
Ref mean_dim(const Ref &x, int64_t dim, bool keepdim) {
  Ref out = reduce_dim(x, dim, keepdim, true);
  return record(Op::MEAN_DIM, out, {x}, 0, {wrap_dim(dim, x->ndim()), keepdim ? 1 : 0});
}

Ref mse_loss(const Ref &pred, const Ref &target) {
  check_pair(pred, target, "pred", "target");
  MT_CHECK(pred->shape == target->shape, SHAPE, "shapes differ: pred is %s, target is %s",
           shape_str(pred->shape).c_str(), shape_str(target->shape).c_str());
  Ref out = empty({}, pred->dtype, pred->device);
  double n = (double)pred->numel();
  pred->backend().squared_diff_sum(out->data(), pred->data(), target->data(), pred->numel(), pred->dtype,
                                   n ? 1.0 / n : NAN);
  return record(Op::MSE_LOSS, out, {pred, target});
}

// ---------------------------------------------------------------- matmul
namespace {
// out[batch] = op(A[batch]) @ op(B[batch]); stride 0 broadcasts an operand.
void gemm(const Ref &out, const Ref &a, bool ta, const Ref &b, bool tb, int64_t batch, int64_t m, int64_t n,
          int64_t k, int64_t sa, int64_t sb, double beta = 0.0, double alpha = 1.0, const Ref &bias = Ref(),
          const Ref &a_sums = Ref()) {
  MatmulArgs g;
  g.c = out->data();
  g.a = a->data();
  g.b = b->data();
  g.batch = batch;
  g.m = m;
  g.n = n;
  g.k = k;
  g.trans_a = ta;
  g.trans_b = tb;
  g.alpha = alpha;
  g.beta = beta;
  g.stride_a = sa;
  g.stride_b = sb;
  g.stride_c = m * n;
  g.dtype = a->dtype;
  g.allow_tf32 = g_allow_tf32.load(std::memory_order_relaxed);
  g.bias = bias ? bias->data() : nullptr;
  g.a_sums = a_sums ? a_sums->data() : nullptr;
  if (k == 0 || batch * m * n == 0) {  // an empty product (zeros), then the extras on their own
    if (batch * m * n > 0) out->backend().fill(out->data(), batch * m * n, out->dtype, 0.0);
    matmul_extras(a->backend(), g);
    return;
  }
  a->backend().matmul(g);
}
}  // namespace

Ref matmul2d(const Ref &a, bool ta, const Ref &b, bool tb) { return matmul2d_extras(a, ta, b, tb, Ref(), Ref()); }

Ref matmul2d_extras(const Ref &a, bool ta, const Ref &b, bool tb, const Ref &bias, const Ref &a_sums) {
  check_pair(a, b, "a", "b");
  MT_ASSERT(a->ndim() >= 1 && b->ndim() >= 1);
  // Both operands are viewed as 2-D: leading dims flattened into rows.
  int64_t cols = a->shape.back(), rows = shape_numel(Shape(a->shape.begin(), a->shape.end() - 1));
  int64_t bcols = b->shape.back(), brows = shape_numel(Shape(b->shape.begin(), b->shape.end() - 1));
  int64_t m = ta ? cols : rows, k = ta ? rows : cols;
  int64_t kb = tb ? bcols : brows, n = tb ? brows : bcols;
  MT_ASSERT(k == kb);
  Shape shape;
  if (ta) shape = {m, n};
  else { shape.assign(a->shape.begin(), a->shape.end() - 1); shape.push_back(n); }
  MT_ASSERT(!bias || (bias->numel() == n && bias->dtype == a->dtype));
  MT_ASSERT(!a_sums || (a_sums->numel() == m && a_sums->dtype == a->dtype));
  Ref out = empty(shape, a->dtype, a->device);
  gemm(out, a, ta, b, tb, 1, m, n, k, 0, 0, 0.0, 1.0, bias, a_sums);
  return out;
}

Ref bmm(const Ref &a, bool ta, const Ref &b, bool tb, double alpha) {
  check_pair(a, b, "a", "b");
  MT_ASSERT(a->ndim() >= 2 && b->ndim() >= 2);
  const int64_t ra = a->shape[a->ndim() - 2], ca = a->shape.back();
  const int64_t rb = b->shape[b->ndim() - 2], cb = b->shape.back();
  const int64_t m = ta ? ca : ra, k = ta ? ra : ca, n = tb ? rb : cb;
  MT_ASSERT(k == (tb ? cb : rb));
  Shape ba(a->shape.begin(), a->shape.end() - 2), bb(b->shape.begin(), b->shape.end() - 2);
  MT_ASSERT(ba.empty() || bb.empty() || ba == bb);
  Shape shape = ba.empty() ? bb : ba;
  const int64_t batch = shape_numel(shape);
  shape.push_back(m);
  shape.push_back(n);
  Ref out = empty(shape, a->dtype, a->device);
  gemm(out, a, ta, b, tb, batch, m, n, k, ba.empty() ? 0 : ra * ca, bb.empty() ? 0 : rb * cb, 0.0, alpha);
  return out;
}

Ref matmul_t(const Ref &a, bool ta, const Ref &b, bool tb, double alpha) {
  check_pair(a, b, "a", "b");
  MT_CHECK(a->ndim() >= 3 && b->ndim() == a->ndim() &&
               Shape(a->shape.begin(), a->shape.end() - 2) == Shape(b->shape.begin(), b->shape.end() - 2),
           SHAPE, "expected a and b with the same batch dims: a is %s, b is %s", shape_str(a->shape).c_str(),
           shape_str(b->shape).c_str());
  const int64_t k = ta ? a->shape[a->ndim() - 2] : a->shape.back();
  const int64_t kb = tb ? b->shape.back() : b->shape[b->ndim() - 2];
  MT_CHECK(k == kb, SHAPE, "inner dimensions differ: a is %s%s, b is %s%s", shape_str(a->shape).c_str(),
           ta ? " (transposed)" : "", shape_str(b->shape).c_str(), tb ? " (transposed)" : "");
  return record(Op::MATMUL, bmm(a, ta, b, tb, alpha), {a, b}, alpha, {ta ? 1 : 0, tb ? 1 : 0});
}

Ref matmul(const Ref &a, const Ref &b) {
  check_pair(a, b, "a", "b");
  MT_CHECK(a->ndim() >= 2 && b->ndim() >= 2, SHAPE, "expected tensors of at least 2 dims: a is %s, b is %s",
           shape_str(a->shape).c_str(), shape_str(b->shape).c_str());
  int64_t m = a->shape[a->ndim() - 2], k = a->shape.back(), kb = b->shape[b->ndim() - 2], n = b->shape.back();
  MT_CHECK(k == kb, SHAPE, "inner dimensions differ: a is %s, b is %s", shape_str(a->shape).c_str(),
           shape_str(b->shape).c_str());
  Shape ba(a->shape.begin(), a->shape.end() - 2), bb(b->shape.begin(), b->shape.end() - 2);
  Ref out;
  if (bb.empty()) {  // [.., m, k] @ [k, n]: one GEMM over the flattened rows
    out = matmul2d(a, false, b, false);
  } else {
    MT_CHECK(ba.empty() || ba == bb, SHAPE, "batch dimensions differ: a is %s, b is %s", shape_str(a->shape).c_str(),
             shape_str(b->shape).c_str());
    Shape shape = bb;
    shape.push_back(m);
    shape.push_back(n);
    out = empty(shape, a->dtype, a->device);
    gemm(out, a, false, b, false, shape_numel(bb), m, n, k, ba.empty() ? 0 : m * k, k * n);
  }
  return record(Op::MATMUL, out, {a, b});
}

Ref linear(const Ref &x, const Ref &w, const Ref &bias) {
  check_pair(x, w, "x", "weight");
  MT_CHECK(w->ndim() == 2, SHAPE, "weight must be 2-D [out,in], got %s", shape_str(w->shape).c_str());
  MT_CHECK(x->ndim() >= 1 && x->shape.back() == w->shape[1], SHAPE,
           "input features differ: x is %s, weight is %s (expected x [..., %lld])", shape_str(x->shape).c_str(),
           shape_str(w->shape).c_str(), (long long)w->shape[1]);
  if (bias) {
    check_pair(x, bias, "x", "bias");
    MT_CHECK(bias->ndim() == 1 && bias->shape[0] == w->shape[0], SHAPE, "bias must be [%lld], got %s",
             (long long)w->shape[0], shape_str(bias->shape).c_str());
  }
  Ref out = matmul2d_extras(x, false, w, true, bias, Ref());
  return record(Op::LINEAR, out, {x, w, bias});
}

// ---------------------------------------------------------------- shape ops
Ref detach(const Ref &x) { return tensor_from_storage(x->storage, x->offset, x->shape, x->dtype); }

Ref reshape(const Ref &x, const Shape &shape_in) {
  Shape shape = shape_in;
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < shape.size(); i++) {
    if (shape[i] == -1) {
      MT_CHECK(infer < 0, SHAPE, "only one dim may be -1, got %s", shape_str(shape_in).c_str());
      infer = (int64_t)i;
    } else {
      MT_CHECK(shape[i] >= 0, INVALID_ARGUMENT, "negative size in shape %s", shape_str(shape_in).c_str());
    }
  }
  {
    Shape sizes = shape;  // -1 counts as 1: the inferred size is at most x's element count
    if (infer >= 0) sizes[(size_t)infer] = 1;
    MT_CHECK(shape_fits(sizes), SHAPE, "cannot reshape %s into %s: the product of its sizes exceeds 2^60",
             shape_str(x->shape).c_str(), shape_str(shape_in).c_str());
    for (size_t i = 0; i < shape.size(); i++)
      if ((int64_t)i != infer) known *= shape[i];
  }
  if (infer >= 0) {
    MT_CHECK(known != 0 && x->numel() % known == 0, SHAPE, "cannot reshape %s into %s", shape_str(x->shape).c_str(),
             shape_str(shape_in).c_str());
    shape[(size_t)infer] = x->numel() / known;
  }
  MT_CHECK(shape_numel(shape) == x->numel(), SHAPE, "cannot reshape %s (%lld elements) into %s",
           shape_str(x->shape).c_str(), (long long)x->numel(), shape_str(shape_in).c_str());
  MT_CHECK(shape.size() <= (size_t)kMaxDims, SHAPE, "at most %d dims are supported, got %zu", kMaxDims, shape.size());
  Ref out = tensor_from_storage(x->storage, x->offset, shape, x->dtype);
  return record(Op::RESHAPE, out, {x});
}

Ref permute(const Ref &x, const std::vector<int64_t> &perm_in) {
  int64_t nd = x->ndim();
  MT_CHECK((int64_t)perm_in.size() == nd, SHAPE, "permutation has %zu entries for a %lld-d tensor", perm_in.size(),
           (long long)nd);
  std::vector<int64_t> perm(perm_in.size());
  std::vector<bool> seen((size_t)nd, false);
  for (size_t i = 0; i < perm.size(); i++) {
    perm[i] = wrap_dim(perm_in[i], nd);
    MT_CHECK(!seen[(size_t)perm[i]], INVALID_ARGUMENT, "dim %lld repeats in the permutation", (long long)perm[i]);
    seen[(size_t)perm[i]] = true;
  }
  Shape shape((size_t)nd);
  for (int64_t i = 0; i < nd; i++) shape[(size_t)i] = x->shape[(size_t)perm[(size_t)i]];
  Ref out = empty(shape, x->dtype, x->device);
  if (x->numel()) x->backend().permute(out->data(), x->data(), x->shape.data(), perm.data(), (int)nd, x->dtype);
  return record(Op::PERMUTE, out, {x}, 0, perm);
}

Ref transpose(const Ref &x, int64_t dim0, int64_t dim1) {
  int64_t nd = x->ndim();
  int64_t d0 = wrap_dim(dim0, nd), d1 = wrap_dim(dim1, nd);
  if (nd == 0) return permute(x, {});  // a 0-d tensor transposes to itself (a copy)
  std::vector<int64_t> perm((size_t)nd);
  for (int64_t i = 0; i < nd; i++) perm[(size_t)i] = i;
  std::swap(perm[(size_t)d0], perm[(size_t)d1]);
  return permute(x, perm);
}

Ref clone(const Ref &x) {
  Ref out = empty(x->shape, x->dtype, x->device);
  x->backend().copy(out->data(), x->data(), x->nbytes());
  return record(Op::CLONE, out, {x});
}

// ---------------------------------------------------------------- device and dtype
Ref to_device(const Ref &x, Device device) {
  if (x->device == device) return x;
  Backend &dst = backend_for(device);
  Ref out = empty(x->shape, x->dtype, device);
  if (x->nbytes()) {
    if (x->device == Device::CPU) {
      dst.copy_from_host(out->data(), x->data(), x->nbytes());
    } else {
      MT_ASSERT(device == Device::CPU);
      x->backend().copy_to_host(out->data(), x->data(), x->nbytes());
    }
  }
  return record(Op::TO_DEVICE, out, {x}, 0, {(int64_t)x->device});
}

Ref cast(const Ref &x, DType dtype) {
  MT_CHECK((int)dtype >= 0 && (int)dtype < kNumDTypes, INVALID_ARGUMENT, "invalid dtype %d", (int)dtype);
  if (x->dtype == dtype) return x;
  Ref out = empty(x->shape, dtype, x->device);
  x->backend().cast(out->data(), dtype, x->data(), x->dtype, x->numel());
  // Only a float-to-float cast carries a gradient.
  if (!dtype_is_float(dtype) || !dtype_is_float(x->dtype)) return out;
  return record(Op::CAST, out, {x}, 0, {(int64_t)x->dtype});
}

}  // namespace ops
}  // namespace mt

// ---------------------------------------------------------------- classification
namespace mt {
namespace ops {
namespace {

// Runs f on x with `dim` moved last ([rows, cols] rows-major), moving the result back.
Ref along_last(const Ref &x, int64_t dim, const std::function<Ref(const Ref &)> &f) {
  int64_t d = wrap_dim(dim, x->ndim());
  if (x->ndim() == 0 || d == x->ndim() - 1) return f(x);
  NoGradGuard ng;
  Ref moved = transpose(x, d, -1);
  return transpose(f(moved), d, -1);
}

Ref softmax_impl(const Ref &x, int64_t dim, bool log) {
  check_float(x, "x");
  Ref out = along_last(x, dim, [&](const Ref &xl) {
    int64_t cols = xl->ndim() ? xl->shape.back() : 1, rows = cols ? xl->numel() / cols : 0;
    Ref y = empty(xl->shape, xl->dtype, xl->device);
    if (xl->numel()) xl->backend().softmax(y->data(), xl->data(), rows, cols, xl->dtype, log);
    return y;
  });
  return record(log ? Op::LOG_SOFTMAX : Op::SOFTMAX, out, {x}, 0, {wrap_dim(dim, x->ndim())});
}

// Checks [N, C] against int64 targets [N], and queues the check of every target in [0, C).
IndexCheck check_targets(const Ref &x, const Ref &targets, const char *xname) {
  check_float(x, xname);
  MT_CHECK(x->ndim() == 2, SHAPE, "%s must be [N, C], got %s", xname, shape_str(x->shape).c_str());
  MT_CHECK(targets->dtype == DType::I64, DTYPE, "targets must be int64, got %s", dtype_name(targets->dtype));
  MT_CHECK(targets->device == x->device, DEVICE, "tensors on different devices: %s is %s, targets is %s", xname,
           device_name_short(x->device), device_name_short(targets->device));
  MT_CHECK(targets->ndim() == 1 && targets->shape[0] == x->shape[0], SHAPE, "targets must be [%lld], got %s",
           (long long)x->shape[0], shape_str(targets->shape).c_str());
  return IndexCheck(targets, x->shape[1], "target");
}

}  // namespace

Ref softmax(const Ref &x, int64_t dim) { return softmax_impl(x, dim, false); }

Ref causal_softmax(const Ref &x, int64_t offset) {
  check_float(x, "x");
  MT_CHECK(x->ndim() >= 2 && offset >= 0, SHAPE, "expected x [..., T, S] and offset >= 0: x is %s, offset %lld",
           shape_str(x->shape).c_str(), (long long)offset);
  const int64_t t = x->shape[x->ndim() - 2], cols = x->shape.back(), rows = cols ? x->numel() / cols : 0;
  Ref y = empty(x->shape, x->dtype, x->device);
  if (x->numel()) x->backend().causal_softmax(y->data(), x->data(), rows, cols, t, offset, x->dtype);
  // The backward of softmax along the last dim; t and offset let it skip the masked columns.
  return record(Op::SOFTMAX, y, {x}, 0, {x->ndim() - 1, t, offset});
}
Ref log_softmax(const Ref &x, int64_t dim) { return softmax_impl(x, dim, true); }

Ref cross_entropy(const Ref &logits, const Ref &targets) {
  IndexCheck check = check_targets(logits, targets, "logits");
  int64_t n = logits->shape[0], c = logits->shape[1];
  MT_CHECK(n > 0, SHAPE, "cross_entropy of an empty batch (logits %s)", shape_str(logits->shape).c_str());
  Ref loss = empty({}, logits->dtype, logits->device);
  Ref lse = empty({n}, logits->dtype, logits->device);
  logits->backend().cross_entropy(loss->data(), lse->data(), logits->data(), (const int64_t *)targets->data(), n, c,
                                   logits->dtype, 1.0 / (double)n);
  check.finish();
  Ref out = record(Op::CROSS_ENTROPY, loss, {logits, targets});
  if (out->requires_grad && grad_enabled()) last_node_saved().push_back(lse);
  return out;
}

Ref nll_loss(const Ref &log_probs, const Ref &targets) {
  IndexCheck check = check_targets(log_probs, targets, "log_probs");
  int64_t n = log_probs->shape[0], c = log_probs->shape[1];
  MT_CHECK(n > 0, SHAPE, "nll_loss of an empty batch (log_probs %s)", shape_str(log_probs->shape).c_str());
  Ref loss = empty({}, log_probs->dtype, log_probs->device);
  log_probs->backend().nll_loss(loss->data(), log_probs->data(), (const int64_t *)targets->data(), n, c,
                                log_probs->dtype, 1.0 / (double)n);
  check.finish();
  return record(Op::NLL_LOSS, loss, {log_probs, targets});
}

std::pair<Ref, Ref> max_dim(const Ref &x, int64_t dim, bool keepdim) {
  check_float(x, "x");
  int64_t d = wrap_dim(dim, x->ndim());
  Shape shape = x->shape;
  int64_t outer = 1, inner = 1, red = x->ndim() ? shape[(size_t)d] : 1;
  MT_CHECK(red > 0, SHAPE, "max over an empty dim %lld of %s", (long long)d, shape_str(x->shape).c_str());
  for (int64_t k = 0; k < d; k++) outer *= shape[(size_t)k];
  for (int64_t k = d + 1; k < x->ndim(); k++) inner *= shape[(size_t)k];
  if (x->ndim()) {
    if (keepdim) shape[(size_t)d] = 1;
    else shape.erase(shape.begin() + d);
  }
  Ref values = empty(shape, x->dtype, x->device);
  Ref indices = empty(shape, DType::I64, x->device);
  x->backend().max_reduce(values->data(), (int64_t *)indices->data(), x->data(), outer, red, inner, x->dtype);
  values = record(Op::MAX_DIM, values, {x}, 0, {d, keepdim ? 1 : 0});
  if (values->requires_grad && grad_enabled()) last_node_saved().push_back(indices);
  return {values, indices};
}

}  // namespace ops
}  // namespace mt

// ---------------------------------------------------------------- gathers and slices
namespace mt {
namespace ops {

IndexCheck::IndexCheck(const Ref &indices, int64_t bound, const char *what)
    : indices_(indices), bound_(bound), what_(what) {
  MT_CHECK(indices->dtype == DType::I64, DTYPE, "%s must be int64, got %s", what, dtype_name(indices->dtype));
  if (indices->backend().capturing()) return;
  ticket_ = indices->backend().range_check_queue((const int64_t *)indices->data(), indices->numel(), bound);
  pending_ = true;
}

IndexCheck::~IndexCheck() {
  if (!pending_) return;
  try {
    indices_->backend().range_check_answer(ticket_);
  } catch (...) {  // the op is already failing with its own error
  }
}

void IndexCheck::finish() {
  if (!pending_) return;
  pending_ = false;
  int64_t bad = indices_->backend().range_check_answer(ticket_);
  if (bad >= 0) {
    int64_t v = 0;
    indices_->backend().copy_to_host(&v, (const int64_t *)indices_->data() + bad, 8);
    fail(Code::INVALID_ARGUMENT, "%s %lld at position %lld is out of range [0, %lld)", what_, (long long)v,
         (long long)bad, (long long)bound_);
  }
}

Ref index_select(const Ref &x, const Ref &indices) {
  MT_CHECK(x->ndim() >= 1, SHAPE, "x must have at least 1 dim, got %s", shape_str(x->shape).c_str());
  MT_CHECK(indices->ndim() == 1, SHAPE, "indices must be 1-D, got %s", shape_str(indices->shape).c_str());
  MT_CHECK(indices->device == x->device, DEVICE, "tensors on different devices: x is %s, indices is %s",
           device_name_short(x->device), device_name_short(indices->device));
  IndexCheck check(indices, x->shape[0], "index");
  Shape shape = x->shape;
  shape[0] = indices->numel();
  int64_t cols = shape_numel(Shape(x->shape.begin() + 1, x->shape.end()));
  Ref out = empty(shape, x->dtype, x->device);
  if (out->numel())
    x->backend().index_select(out->data(), x->data(), (const int64_t *)indices->data(), indices->numel(),
                              x->shape[0], cols, x->dtype);
  check.finish();
  return record(Op::INDEX_SELECT, out, {x, indices});
}

Ref slice(const Ref &x, int64_t dim, int64_t start, int64_t end) {
  MT_CHECK(x->ndim() >= 1, SHAPE, "cannot slice a 0-d tensor");
  int64_t d = wrap_dim(dim, x->ndim()), size = x->shape[(size_t)d];
  auto clamp = [size](int64_t v) { v = v < 0 ? v + size : v; return v < 0 ? 0 : (v > size ? size : v); };
  start = clamp(start);
  end = clamp(end);
  int64_t len = end > start ? end - start : 0;
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; k++) outer *= x->shape[(size_t)k];
  for (int64_t k = d + 1; k < x->ndim(); k++) inner *= x->shape[(size_t)k];
  Shape shape = x->shape;
  shape[(size_t)d] = len;
  Ref out;
  if (outer == 1) {  // one contiguous block: a view, no copy
    out = tensor_from_storage(x->storage, x->offset + start * inner * dtype_size(x->dtype), shape, x->dtype);
  } else {
    out = empty(shape, x->dtype, x->device);
    if (out->numel()) x->backend().slice_copy(out->data(), x->data(), outer, size, inner, start, len, x->dtype);
  }
  return record(Op::SLICE, out, {x}, 0, {d, start, len});
}

}  // namespace ops
}  // namespace mt
