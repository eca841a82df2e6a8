// backend.h - the device interface between autograd/ and the kernels.
//
// Everything here works on raw pointers to dense row-major buffers; the backends
// know nothing of tensors, the tape or the ABI. A backend reports failure by
// throwing mt::Error (backend/error.h) and never prints, exits or aborts.
//
// defines: DType, Device, dtype_size, Unary, Binary, BroadcastPlan, MatmulArgs,
//          SgdArgs, HeadStrides, AttentionGeometry, Backend, backend_for
#pragma once

#include <cstdint>

#include "error.h"

namespace mt {

// Values equal the C ABI's mt_dtype / mt_device.
enum class DType : int32_t { F32 = 0, F64 = 1, F16 = 2, BF16 = 3, I32 = 4, I64 = 5, U8 = 6 };
enum class Device : int32_t { CPU = 0, CUDA = 1 };

constexpr int kNumDTypes = 7;
int64_t dtype_size(DType d);          // bytes per element
const char *dtype_name(DType d);      // "float32", ...
bool dtype_is_float(DType d);         // F32 F64 F16 BF16
// Whether a fill of d with v is defined: any v for the floating types (out of range they round
// to +-inf); for the integer types v truncated toward zero within the type's range (NaN never).
bool value_fits(double v, DType d);
const char *device_name_short(Device d);  // "cpu" / "cuda"

// Process-wide (mt_set_deterministic): when on, a backend gives up kernels whose float sums
// run in an order that varies between runs (atomics, algorithms picked for speed alone), so
// the same inputs give the same bits every run. Off by default, as in torch.
bool deterministic();
bool set_deterministic(bool on);  // returns the previous setting

constexpr int kMaxDims = 8;

// Elementwise ops of one input. s is the scalar operand where the op has one.
//   NEG: -x   EXP   LOG   RELU: max(x,0)   SIGMOID   TANH
//   ADD_SCALAR: x+s   MUL_SCALAR: x*s   POW_SCALAR: x^s   SQRT   ABS
//   SIGN: -1/0/1   SQUARE: x*x   RECIPROCAL: 1/x
#define MT_UNARY_OPS(X) \
  X(NEG) X(EXP) X(LOG) X(RELU) X(SIGMOID) X(TANH) X(ADD_SCALAR) X(MUL_SCALAR) \
  X(POW_SCALAR) X(SQRT) X(ABS) X(SIGN) X(SQUARE) X(RECIPROCAL)
enum class Unary : int32_t {
#define MT_X(name) name,
  MT_UNARY_OPS(MT_X)
#undef MT_X
};

// Elementwise ops of two broadcast inputs a, b.
//   ADD SUB MUL DIV MAXIMUM MINIMUM
//   RELU_BWD:    a = dout, b = x (forward input)  -> dout * (x > 0)
//   SIGMOID_BWD: a = dout, b = y (forward output) -> dout * y * (1 - y)
//   TANH_BWD:    a = dout, b = y (forward output) -> dout * (1 - y*y)
//   COPY_B:      b broadcast into out's shape; a is not read (may be null)
#define MT_BINARY_OPS(X) \
  X(ADD) X(SUB) X(MUL) X(DIV) X(MAXIMUM) X(MINIMUM) X(RELU_BWD) X(SIGMOID_BWD) X(TANH_BWD) \
  X(COPY_B)
enum class Binary : int32_t {
#define MT_X(name) name,
  MT_BINARY_OPS(MT_X)
#undef MT_X
};

// How out[i] maps onto a and b under numpy broadcasting. Strides are in
// elements; a stride of 0 marks a broadcast dim. Dims of size 1 are folded
// away and adjacent compatible dims merged, so ndim is small in practice.
// When `same` is true all three buffers have numel elements in the same
// order and kernels may take the flat fast path.
struct BroadcastPlan {
  int ndim = 0;
  int64_t numel = 0;
  bool same = false;
  int64_t shape[kMaxDims] = {};
  int64_t a_stride[kMaxDims] = {};
  int64_t b_stride[kMaxDims] = {};
};

// C[batch] = alpha * op(A[batch]) @ op(B[batch]) + beta * C[batch], row-major.
// op(A) is [m,k] (A stored [m,k], or [k,m] when trans_a), op(B) is [k,n]
// (B stored [k,n], or [n,k] when trans_b). stride_* are elements between
// batches (0 broadcasts that operand). beta == 0 ignores C's old contents
// (C may hold NaN).
struct MatmulArgs {
  void *c = nullptr;
  const void *a = nullptr;
  const void *b = nullptr;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  double alpha = 1.0, beta = 0.0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  DType dtype = DType::F32;
  bool allow_tf32 = false;
  // Optional extras of a single product (batch 1), each ignored when null:
  //   bias [n]:   C[i, j] += bias[j] after alpha * op(A) @ op(B) + beta * C (a linear layer);
  //   a_sums [m]: written, a_sums[i] = sum over p of op(A)[i, p] (the bias gradient beside
  //               the weight gradient dW = dY^T X, where op(A) = dY^T).
  // A backend may fuse them into the product; matmul_extras below does them after it.
  const void *bias = nullptr;
  void *a_sums = nullptr;
};

// Where one operand of an attention problem [B, H, T, D] lies: element (b, h, t, i) at
// data + b * batch + h * head + t * row + i (in elements). [B, H, T, D] contiguous is
// {H T D, T D, D}; the q block of a packed projection [B, T, 3 H D] is {3 T H D, D, 3 H D}.
struct HeadStrides {
  int64_t batch = 0, head = 0, row = 0;
};
// An attention problem over strided heads: B, H, Tq, Tk, head dim d, and the strides of q, k,
// v and out (their gradients and dout share them).
struct AttentionGeometry {
  int64_t b = 0, h = 0, tq = 0, tk = 0, d = 0;
  HeadStrides q, k, v, o;
};

class Backend;
// The extras of args (bias, a_sums) as separate passes on b after the product was written:
// a broadcast ADD of the bias over C's rows, and a sum_reduce of A over p.
void matmul_extras(Backend &b, const MatmulArgs &args);

// One SGD update over many parameters, torch.optim.SGD semantics:
//   g = grad + weight_decay * p
//   if momentum != 0: v = first ? g : momentum * v + g;  g = nesterov ? g + momentum * v : v
//   p -= lr * g
// params[i], grads[i], velocity[i] (velocity may be null when momentum == 0)
// hold numel[i] elements of dtype. Pointer arrays are host arrays.
struct SgdArgs {
  int64_t count = 0;
  void *const *params = nullptr;
  const void *const *grads = nullptr;
  void *const *velocity = nullptr;
  const int64_t *numel = nullptr;
  DType dtype = DType::F32;
  double lr = 0, momentum = 0, weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;
  // When set (CUDA), the learning rate is read on the device from this double instead of
  // lr, so a recorded update follows later changes of the learning rate.
  const double *lr_device = nullptr;
};

// One Adam/AdamW update over many parameters (torch.optim.Adam / AdamW):
//   g = grad (+ weight_decay * p for Adam; AdamW instead decays p *= 1 - lr * weight_decay)
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   p -= lr * (m / (1 - beta1^step)) / (sqrt(v / (1 - beta2^step)) + eps)
struct AdamArgs {
  int64_t count = 0;
  void *const *params = nullptr;
  const void *const *grads = nullptr;
  void *const *m = nullptr;
  void *const *v = nullptr;
  const int64_t *numel = nullptr;
  DType dtype = DType::F32;
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;  // AdamW
  int64_t step = 1;        // 1 at the first update
  // When set (CUDA: one device pointer per tensor), tensor i's step is *step_counters[i] + 1,
  // read on the device, and the counters are incremented after the update, so the update
  // can be recorded into a graph and replayed; `step` is then ignored.
  int64_t *const *step_counters = nullptr;
  const double *lr_device = nullptr;  // as SgdArgs::lr_device
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual const char *name() const = 0;  // e.g. "NVIDIA H100 80GB HBM3"

  // Memory. alloc(0) returns a valid, unique pointer. free(nullptr) is a no-op.
  // live_bytes counts what alloc handed out and free has not taken back.
  virtual void *alloc(int64_t nbytes) = 0;
  virtual void free(void *p) = 0;
  virtual int64_t live_bytes() const = 0;
  // Copies between this device and the host, and within this device.
  // to_host / from_host are complete on return (they synchronize).
  virtual void copy_to_host(void *host_dst, const void *src, int64_t nbytes) = 0;
  virtual void copy_from_host(void *dst, const void *host_src, int64_t nbytes) = 0;
  virtual void copy(void *dst, const void *src, int64_t nbytes) = 0;  // stream-ordered
  virtual void synchronize() = 0;

  // out[i] = value for n elements of dtype (any dtype; value converted as a C cast).
  virtual void fill(void *out, int64_t n, DType dtype, double value) = 0;
  // out[i] = start + i * step, computed in double and converted as fill converts (any dtype).
  // Queued like a kernel: no copy from the host, so it may be recorded into a graph.
  virtual void arange(void *out, int64_t n, DType dtype, double start, double step);
  // out[i] = f(x[i]) for n elements (F32/F64; F16/BF16 where the backend has them).
  virtual void unary(Unary op, void *out, const void *x, int64_t n, DType dtype, double s) = 0;
  // out[i] = f(a[..], b[..]) under plan (F32/F64).
  virtual void binary(Binary op, void *out, const void *a, const void *b, const BroadcastPlan &plan,
                      DType dtype) = 0;
  // x viewed as [outer, reduce, inner]: out[o, i] = scale * sum_r x[o, r, i].
  // beta 0 overwrites out; beta 1 accumulates (out += ...).
  virtual void sum_reduce(void *out, const void *x, int64_t outer, int64_t reduce, int64_t inner,
                          DType dtype, double scale, double beta) = 0;
  // out = sum over all n elements of (a[i] - b[i])^2, times scale; out is one element.
  virtual void squared_diff_sum(void *out, const void *a, const void *b, int64_t n, DType dtype,
                                double scale) = 0;
  virtual void matmul(const MatmulArgs &args) = 0;
  // out = x with dims permuted: out.shape[i] = shape[perm[i]], ndim <= kMaxDims.
  virtual void permute(void *out, const void *x, const int64_t *shape, const int64_t *perm, int ndim,
                       DType dtype) = 0;
  // Converts n elements between any two dtypes (floats to ints truncate toward zero).
  virtual void cast(void *out, DType out_dtype, const void *x, DType x_dtype, int64_t n) = 0;
  virtual void sgd_step(const SgdArgs &args) = 0;
  // out[i] = philox_uniform_at(seed, i, dtype == F64) (backend/philox.h) for n elements of
  // F32 or F64: the same bits on every device.
  virtual void fill_uniform(void *out, int64_t n, DType dtype, uint64_t seed) = 0;

  // ---- classification family. Defaults report MT_ERR_UNSUPPORTED so that a
  // backend can grow them one by one.
  // x viewed as [rows, cols]: y = softmax(x) along cols, or log_softmax when log.
  virtual void softmax(void *y, const void *x, int64_t rows, int64_t cols, DType dtype, bool log);
  // The causal attention's mask and softmax in one pass: x viewed as [rows, cols], row r the
  // query i = r % t (rows a multiple of t), offset >= 0: y[r, j] = softmax over the columns
  // j <= i + offset of x[r, j] (the CPU's double row statistics), 0 for j > i + offset, which
  // is softmax(masked_fill(x, mask, -inf)) without the mask.
  virtual void causal_softmax(void *y, const void *x, int64_t rows, int64_t cols, int64_t t, int64_t offset,
                              DType dtype);
  // Its backward: softmax_backward of y, which a backend may skip reading past each row's
  // visible columns (y is 0 there, and so is dx). The default is softmax_backward.
  virtual void causal_softmax_backward(void *dx, const void *y, const void *dy, int64_t rows, int64_t cols, int64_t t,
                                       int64_t offset, DType dtype);
  // dx (written) from the forward output y and dy: softmax: y * (dy - sum(dy * y));
  // log_softmax: dy - exp(y) * sum(dy).
  virtual void softmax_backward(void *dx, const void *y, const void *dy, int64_t rows, int64_t cols, DType dtype,
                                bool log);
  // loss (one element) = scale * sum_r (lse_r - x[r, t_r]); lse [rows] of dtype is saved
  // for the backward. targets are int64 in [0, cols) (the caller validates them).
  virtual void cross_entropy(void *loss, void *lse, const void *logits, const int64_t *targets, int64_t rows,
                             int64_t cols, DType dtype, double scale);
  // dlogits (written) = scale * dloss * (softmax(x) - onehot(t)), dloss one element on the device.
  // In the loss backwards (cross_entropy, nll_loss, mse) a null dloss stands for 1: the loss was
  // the root of the backward walk, whose seed gradient is then never written.
  virtual void cross_entropy_backward(void *dlogits, const void *logits, const void *lse, const int64_t *targets,
                                      const void *dloss, int64_t rows, int64_t cols, DType dtype, double scale);
  // loss (one element) = -scale * sum_r lp[r, t_r].
  virtual void nll_loss(void *loss, const void *log_probs, const int64_t *targets, int64_t rows, int64_t cols,
                        DType dtype, double scale);
  // dlp (written) = -scale * dloss at [r, t_r], 0 elsewhere.
  virtual void nll_loss_backward(void *dlp, const int64_t *targets, const void *dloss, int64_t rows, int64_t cols,
                                 DType dtype, double scale);
  // The first i with idx[i] outside [0, bound), or -1, asked in two halves so that the device
  // need not idle while the host waits: range_check_queue queues the check and returns a
  // ticket; the caller may then queue the work that reads idx (every kernel that reads by
  // index keeps an out-of-range one in bounds: it reads NaN or zeros); range_check_answer
  // waits for the check alone and answers. Each ticket is answered exactly once. The CPU
  // answers at once (its ticket is the answer).
  virtual int64_t range_check_queue(const int64_t *idx, int64_t n, int64_t bound);
  virtual int64_t range_check_answer(int64_t ticket);
  // x viewed as [outer, reduce, inner]: values[o, i] = max_r x[o, r, i], indices[o, i] the
  // first r that attains it (NaN counts as the maximum, as PyTorch). values may be null.
  virtual void max_reduce(void *values, int64_t *indices, const void *x, int64_t outer, int64_t reduce,
                          int64_t inner, DType dtype);
  // dx (written, [outer, reduce, inner]) = dy[o, i] at r = indices[o, i], 0 elsewhere.
  virtual void max_backward(void *dx, const int64_t *indices, const void *dy, int64_t outer, int64_t reduce,
                            int64_t inner, DType dtype);
  virtual void adam_step(const AdamArgs &args);
  // torch.nn.utils.clip_grad_norm_ over count tensors of one floating dtype, on the device and
  // without synchronizing: total = sqrt(sum over every grads[i] of sum g^2) (accumulated in
  // double); norm (one element of dtype, written; may be null) = total; then every element
  // g *= min(1, max_norm / (total + eps)) (left as is when that factor is 1).
  virtual void clip_grad_norm(void *norm, void *const *grads, const int64_t *numel, int64_t count, DType dtype,
                              double max_norm, double eps);

  // ---- fused MSE backward (backend/cpu/mse.cpp, backend/cuda/mse.cu); default in common.cpp
  // d = ((pred[i] - target[i]) * dloss) * scale, rounded to dtype after each step (the bits of
  // the SUB, MUL and MUL_SCALAR it fuses): dpred[i] = d, dtarget[i] = -d (each written; either
  // may be null). dloss is one element on the device (null: 1); n elements of a floating dtype.
  virtual void mse_backward(void *dpred, void *dtarget, const void *pred, const void *target, const void *dloss,
                            int64_t n, DType dtype, double scale);
  // ---- end fused MSE backward

  // ---- gathers and blocks (any dtype forward; floating backward)
  // x viewed as [outer, size, inner]: out[o, j, i] = x[o, start + j, i] for j < len.
  virtual void slice_copy(void *out, const void *x, int64_t outer, int64_t size, int64_t inner, int64_t start,
                          int64_t len, DType dtype);
  // The reverse: dx[o, start + j, i] = dy[o, j, i]; dx elsewhere is left as it is.
  virtual void slice_backward(void *dx, const void *dy, int64_t outer, int64_t size, int64_t inner, int64_t start,
                              int64_t len, DType dtype);
  // out[r, :] = x[idx[r], :] for n rows of cols elements out of x's rows_x; a row whose index
  // is outside [0, rows_x) is written as zeros (the caller reports it, see range_check_queue).
  virtual void index_select(void *out, const void *x, const int64_t *idx, int64_t n, int64_t rows_x, int64_t cols,
                            DType dtype);
  // dx[idx[r], :] += dy[r, :] for r < n, deterministic (the same sums in the same order on
  // every run); dx has rows_x rows and is not cleared first.
  virtual void index_add(void *dx, const int64_t *idx, const void *dy, int64_t n, int64_t rows_x, int64_t cols,
                         DType dtype);

  // ---- graphs: record the launches of a stretch of work once, replay them with one call.
  // While capturing nothing runs, nothing may synchronize (reads back fail with
  // Error(STATE)), and frees of memory allocated before the capture are deferred to
  // its end. graph_end returns an instantiated graph owned by the caller.
  virtual void graph_begin();
  virtual void *graph_end();
  virtual void graph_replay(void *graph);
  virtual void graph_free(void *graph) noexcept;
  virtual bool capturing() const { return false; }

  // ---- comparisons and selection (backend/cpu/compare.cpp, backend/cuda/compare.cu).
  // Defaults report MT_ERR_UNSUPPORTED (backend/common.cpp).
  enum class Compare : int32_t { EQ, NE, LT, LE, GT, GE };
  // How out[i] maps onto cond, a and b of where(): strides in elements, 0 on broadcast
  // dims; `same` when all four have numel elements in the same order (the flat path).
  struct WherePlan {
    int ndim = 0;
    int64_t numel = 0;
    bool same = false;
    int64_t shape[kMaxDims] = {};
    int64_t cond_stride[kMaxDims] = {}, a_stride[kMaxDims] = {}, b_stride[kMaxDims] = {};
  };
  // out[i] (uint8, 0 or 1) = a[..] OP b[..] under plan; a and b of dtype. NaN is unequal
  // to everything: NE gives 1, the other ops 0 (IEEE, as PyTorch).
  virtual void compare(Compare op, uint8_t *out, const void *a, const void *b, const BroadcastPlan &plan,
                       DType dtype);
  // out[i] = cond[..] != 0 ? a[..] : b[..] under plan; out, a, b of dtype (any dtype).
  virtual void where(void *out, const uint8_t *cond, const void *a, const void *b, const WherePlan &plan,
                     DType dtype);
  // out[i] = pow(a[..], b[..]) under plan (floating dtypes).
  virtual void pow(void *out, const void *a, const void *b, const BroadcastPlan &plan, DType dtype);
  // Waits for every piece of work queued on the device, by this library or any other, on
  // any stream (memory imported through DLPack). The default is synchronize().
  virtual void synchronize_device() { synchronize(); }

  // ---- convolutional networks (backend/cpu/cnn.cpp, backend/cuda/cnn.cu); defaults in common.cpp
  // Geometry of one 2-D convolution, NCHW: x (n, c, h, w), w (k, c, r, s), y (n, k, ho, wo),
  // ho = (h + 2 pad_h - dil_h (r - 1) - 1) / stride_h + 1 (likewise wo); sizes validated by
  // the caller. algo picks the CUDA path (0 the faster for the shape, 1 im2col + GEMM,
  // 2 cuDNN); the CPU ignores it. Float32 convolutions never use TF32.
  struct Conv2dArgs {
    int64_t n = 0, c = 0, h = 0, w = 0, k = 0, r = 0, s = 0, ho = 0, wo = 0;
    int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
    DType dtype = DType::F32;
    int algo = 0;
  };
  // y (written) = conv(x, w) + bias[k] (bias may be null).
  virtual void conv2d(void *y, const void *x, const void *w, const void *bias, const Conv2dArgs &a);
  // dx (written, (n, c, h, w)) from dy (n, k, ho, wo) and w.
  virtual void conv2d_backward_data(void *dx, const void *dy, const void *w, const Conv2dArgs &a);
  // dw (written, (k, c, r, s)) from dy and x.
  virtual void conv2d_backward_filter(void *dw, const void *dy, const void *x, const Conv2dArgs &a);
  // kernel x kernel windows every stride pixels, no padding: x (n, c, h, w) -> y (n, c, ho, wo),
  // ho = (h - kernel) / stride + 1; `planes` = n * c.
  struct Pool2dArgs {
    int64_t planes = 0, h = 0, w = 0, ho = 0, wo = 0, kernel = 1, stride = 1;
    DType dtype = DType::F32;
  };
  // y (written) = window max; indices[p, oh, ow] (written) = ih * w + iw of the first maximum
  // in row-major window order (NaN counts as the maximum).
  virtual void max_pool2d(void *y, int64_t *indices, const void *x, const Pool2dArgs &a);
  // dx (written) = sum of dy over the windows whose maximum each input pixel is.
  virtual void max_pool2d_backward(void *dx, const int64_t *indices, const void *dy, const Pool2dArgs &a);
  // y (written) = window mean; dx (written) = sum over the windows holding the pixel of dy / kernel^2.
  virtual void avg_pool2d(void *y, const void *x, const Pool2dArgs &a);
  virtual void avg_pool2d_backward(void *dx, const void *dy, const Pool2dArgs &a);
  // BatchNorm over channels: x viewed as (n, c, hw), statistics over n * hw values per channel.
  struct BatchNormArgs {
    int64_t n = 0, c = 0, hw = 1;
    bool training = true;
    double momentum = 0.1, eps = 1e-5;
    DType dtype = DType::F32;
  };
  // training: mean, invstd (written, [c]) = batch mean, 1 / sqrt(biased var + eps); running_mean
  // and running_var (may be null) updated in place: r = (1 - momentum) r + momentum * stat, the
  // variance unbiased. Eval: mean = running_mean, invstd = 1 / sqrt(running_var + eps).
  // y (written) = (x - mean) * invstd * gamma + beta (gamma, beta may be null: 1 and 0).
  virtual void batch_norm(void *y, void *mean, void *invstd, const void *x, const void *gamma, const void *beta,
                          void *running_mean, void *running_var, const BatchNormArgs &a);
  // From dy and the saved mean / invstd, with xhat = (x - mean) * invstd:
  //   dbeta = sum dy, dgamma = sum dy * xhat (written, [c], both always),
  //   dx (written; may be null) = gamma invstd (dy - (dbeta + xhat dgamma) / (n hw)) when training,
  //                               gamma invstd dy in eval.
  virtual void batch_norm_backward(void *dx, void *dgamma, void *dbeta, const void *dy, const void *x,
                                   const void *mean, const void *invstd, const void *gamma, const BatchNormArgs &a);
  // ---- end convolutional networks

  // ---- fused transformer kernels (backend/cpu/fused.cpp, backend/cuda/fused.cu); defaults in common.cpp
  // The row statistics of layer_norm are in the stats dtype: float64 for F64, float32 otherwise.
  static DType layer_norm_stats_dtype(DType d) { return d == DType::F64 ? DType::F64 : DType::F32; }
  // x, y viewed as [rows, d]: y (written) = (x - mean) * rstd * gamma + beta along each row,
  // rstd = 1 / sqrt(biased var + eps); gamma, beta [d] may be null (1 and 0). mean, rstd
  // [rows] (written, stats dtype) are kept for the backward. rows, d >= 1.
  virtual void layer_norm(void *y, void *mean, void *rstd, const void *x, const void *gamma, const void *beta,
                          int64_t rows, int64_t d, double eps, DType dtype);
  // From dy, x and the saved mean / rstd, with xhat = (x - mean) rstd and g = dy * gamma:
  //   dx (written; may be null) = rstd (g - mean_row(g) - xhat mean_row(g xhat)), plus
  //     dx_add [rows, d] when it is not null (the gradient x already has from its other uses,
  //     added before rounding: the tape's accumulation without a pass of its own),
  //   dgamma = sum_rows dy xhat, dbeta = sum_rows dy (written, [d]; either may be null).
  // Deterministic: the same bits on every run of one shape on one device (no float atomics).
  virtual void layer_norm_backward(void *dx, const void *dx_add, void *dgamma, void *dbeta, const void *dy,
                                   const void *x, const void *mean, const void *rstd, const void *gamma, int64_t rows,
                                   int64_t d, DType dtype);
  // y[i] (written) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), torch's approximate='tanh';
  // dx[i] (written) = dy[i] * gelu'(x[i]).
  virtual void gelu(void *y, const void *x, int64_t n, DType dtype);
  virtual void gelu_backward(void *dx, const void *dy, const void *x, int64_t n, DType dtype);
  // out [t, s] (uint8, written) = 1 where key j is in the future of query i (j > i + s - t:
  // aligned at the end when s != t), else 0. Queued like a kernel (no copy from the host).
  virtual void causal_mask(uint8_t *out, int64_t t, int64_t s);
  // ---- end fused transformer kernels

  // ---- FlashAttention (backend/cuda/attention/); defaults in common.cpp
  // Whether flash_attention takes dtype and head dim d here (the default: nothing).
  virtual bool flash_attention_supported(DType dtype, int64_t d) const { return false; }
  // out (bh, tq, d) = softmax(scale q k^T, causal: key j hidden from query i when
  // j > i + tk - tq) v, and lse (bh, tq) f32 = each row's natural-log log-sum-exp of the
  // scaled scores (+inf for a row with no visible key; its out row is 0); q (bh, tq, d),
  // k, v (bh, tk, d), all of dtype, 16-byte aligned.
  virtual void flash_attention(void *out, float *lse, const void *q, const void *k, const void *v, int64_t bh,
                               int64_t tq, int64_t tk, int64_t d, DType dtype, double scale, bool causal);
  // dq (bh, tq, d), dk, dv (bh, tk, d) written, from the forward's inputs, out and lse, and
  // dout (bh, tq, d).
  virtual void flash_attention_backward(void *dq, void *dk, void *dv, const void *q, const void *k, const void *v,
                                        const void *out, const float *lse, const void *dout, int64_t bh, int64_t tq,
                                        int64_t tk, int64_t d, DType dtype, double scale, bool causal);
  // The same at strides: q, k, v, out (and dq, dk, dv, dout) at the strides of g, so heads can be
  // read from and written into packed projections in place; lse (B * H, tq) f32, as above.
  // Whether strided_attention takes dtype and head dim d here (the default: nothing).
  virtual bool strided_attention_supported(DType dtype, int64_t d) const { return false; }
  virtual void strided_attention(const AttentionGeometry &g, void *out, float *lse, const void *q, const void *k,
                                 const void *v, DType dtype, double scale, bool causal);
  virtual void strided_attention_backward(const AttentionGeometry &g, void *dq, void *dk, void *dv, const void *q,
                                          const void *k, const void *v, const void *out, const float *lse,
                                          const void *dout, DType dtype, double scale, bool causal);
  // ---- end FlashAttention

  // ---- fusions (backend/cpu/fusions.cpp, backend/cuda/fusions.cu); defaults in common.cpp
  // Values equal the C ABI's mt_activation. GELU is the tanh form, computed as gelu() is.
  enum class Activation : int32_t { IDENTITY = 0, RELU = 1, GELU = 2 };
  // x, y viewed as [rows, n]: y (written) = act(x + bias[col]); bias [n]. rows, n >= 1.
  virtual void bias_act(void *y, const void *x, const void *bias, int64_t rows, int64_t n, Activation act,
                        DType dtype);
  // From dy and the forward's x and bias, with z = x + bias: dx (written; may be null) =
  // dy * act'(z) (RELU: 1 where z > 0, else 0), dbias (written, [n]; may be null) = the column
  // sums of dy * act'(z). Deterministic: the same bits on every run of one shape on one device.
  virtual void bias_act_backward(void *dx, void *dbias, const void *dy, const void *x, const void *bias,
                                 int64_t rows, int64_t n, Activation act, DType dtype);
  // s (written) = x + residual, and y (written) = layer_norm(s) as layer_norm() computes it
  // from s (mean, rstd written in the stats dtype), in one pass over x and residual.
  virtual void add_layer_norm(void *s, void *y, void *mean, void *rstd, const void *x, const void *residual,
                              const void *gamma, const void *beta, int64_t rows, int64_t d, double eps, DType dtype);
  // out[i] (written) = residual[i] + x[i] * keep(i), keep(i) = (u_i >= p ? 1/(1-p) : 0) in
  // dtype, u_i element i of the seeded uniform stream (philox.h): the bits of
  // add(residual, dropout(x, p, seed)). residual may be null: out = x * keep (the backward
  // dx = dy * keep). 0 <= p < 1 (the caller checks).
  virtual void dropout_add(void *out, const void *x, const void *residual, int64_t n, double p, uint64_t seed,
                           DType dtype);
  // ---- end fusions
};

// The backend of a device. Throws Error(DEVICE) for CUDA in a CPU-only build or
// when no GPU is usable.
Backend &backend_for(Device d);
// Number of usable CUDA devices, 0 in a CPU-only build; never throws.
int64_t cuda_device_count();

// Provided by backend/cpu and backend/cuda respectively.
Backend &cpu_backend();
#ifdef MT_HAVE_CUDA
Backend &cuda_backend();  // throws Error(DEVICE) when no GPU is usable
int64_t cuda_backend_device_count();
#endif

}  // namespace mt
