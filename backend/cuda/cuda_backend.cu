// cuda_backend.cu - mt::Backend for CUDA: wires the Backend methods to the context
// (memory, copies) and to the launchers of ops.h (kernels, cuBLAS).
//
// Copies to and from the host are cudaMemcpyAsync on the context stream followed by a
// stream synchronize, so they are complete on return and ordered after every queued
// kernel; device-to-device copies stay stream-ordered and asynchronous.
#include "backend/cuda/context.h"
#include "backend/cuda/attention/attention_f32.h"
#include "backend/cuda/attention/flash_attention.h"
#include "backend/cuda/classify.h"
#include "backend/cuda/compare.h"
#include "backend/cuda/cnn.h"
#include "backend/cuda/fused.h"
#include "backend/cuda/fusions.h"
#include "backend/cuda/mse.h"  // fused MSE backward
#include "backend/cuda/ops.h"

namespace mt {

namespace {

// [bh, tq, d] q and out, [bh, tk, d] k and v, contiguous: one head per "batch" of the geometry.
AttentionGeometry contiguous_geometry(int64_t bh, int64_t tq, int64_t tk, int64_t d) {
  AttentionGeometry g;
  g.b = bh;
  g.h = 1;
  g.tq = tq;
  g.tk = tk;
  g.d = d;
  g.q = g.o = HeadStrides{tq * d, 0, d};
  g.k = g.v = HeadStrides{tk * d, 0, d};
  return g;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend() : ctx_(cuda::context()) {}

  Device device() const override { return Device::CUDA; }
  const char *name() const override { return ctx_.name.c_str(); }

  void *alloc(int64_t nbytes) override { return ctx_.alloc(nbytes); }
  void free(void *p) override { ctx_.free(p); }
  int64_t live_bytes() const override { return ctx_.live_bytes(); }

  void copy_to_host(void *host_dst, const void *src, int64_t nbytes) override {
    cuda::NvtxRange range("copy_to_host");
    check_copy("copy_to_host", host_dst, src, nbytes);
    ctx_.check_not_capturing("reading a tensor back to the host");
    if (nbytes == 0) return;
    MT_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, (size_t)nbytes, cudaMemcpyDeviceToHost, ctx_.stream));
    MT_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  }
  void copy_from_host(void *dst, const void *host_src, int64_t nbytes) override {
    cuda::NvtxRange range("copy_from_host");
    check_copy("copy_from_host", dst, host_src, nbytes);
    ctx_.check_not_capturing("copying from the host");
    if (nbytes == 0) return;
    MT_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, (size_t)nbytes, cudaMemcpyHostToDevice, ctx_.stream));
    MT_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  }
  void copy(void *dst, const void *src, int64_t nbytes) override {
    cuda::NvtxRange range("copy");
    check_copy("copy", dst, src, nbytes);
    if (nbytes == 0 || dst == src) return;
    MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)nbytes, cudaMemcpyDeviceToDevice, ctx_.stream));
  }
  void synchronize() override {
    ctx_.check_not_capturing("synchronizing");
    MT_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  }

  void graph_begin() override { ctx_.capture_begin(); }
  void *graph_end() override { return (void *)ctx_.capture_end(); }
  void graph_replay(void *g) override {
    ctx_.check_not_capturing("replaying a graph");
    cuda::NvtxRange range("graph_replay");
    MT_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)g, ctx_.stream));
  }
  void graph_free(void *g) noexcept override {
    if (g) (void)cudaGraphExecDestroy((cudaGraphExec_t)g);
  }
  bool capturing() const override { return ctx_.capturing(); }

  void fill(void *out, int64_t n, DType dtype, double value) override {
    cuda::launch_fill(out, n, dtype, value);
  }
  void arange(void *out, int64_t n, DType dtype, double start, double step) override {
    cuda::launch_arange(out, n, dtype, start, step);
  }
  void unary(Unary op, void *out, const void *x, int64_t n, DType dtype, double s) override {
    cuda::launch_unary(op, out, x, n, dtype, s);
  }
  void binary(Binary op, void *out, const void *a, const void *b, const BroadcastPlan &plan,
              DType dtype) override {
    cuda::launch_binary(op, out, a, b, plan, dtype);
  }
  void sum_reduce(void *out, const void *x, int64_t outer, int64_t reduce, int64_t inner, DType dtype,
                  double scale, double beta) override {
    cuda::launch_sum_reduce(out, x, outer, reduce, inner, dtype, scale, beta);
  }
  void squared_diff_sum(void *out, const void *a, const void *b, int64_t n, DType dtype,
                        double scale) override {
    cuda::launch_squared_diff_sum(out, a, b, n, dtype, scale);
  }
  void matmul(const MatmulArgs &args) override {
    if (!cuda::launch_matmul(args)) matmul_extras(*this, args);
  }
  void permute(void *out, const void *x, const int64_t *shape, const int64_t *perm, int ndim,
               DType dtype) override {
    cuda::launch_permute(out, x, shape, perm, ndim, dtype);
  }
  void cast(void *out, DType out_dtype, const void *x, DType x_dtype, int64_t n) override {
    cuda::launch_cast(out, out_dtype, x, x_dtype, n);
  }
  void sgd_step(const SgdArgs &args) override { cuda::launch_sgd_step(args); }
  void fill_uniform(void *out, int64_t n, DType dtype, uint64_t seed) override {
    cuda::launch_fill_uniform(out, n, dtype, seed);
  }

  // ---- classification family, gathers and blocks (classify.cu, softmax.cu, adam.cu)
  void softmax(void *y, const void *x, int64_t rows, int64_t cols, DType d, bool log) override {
    cuda::softmax(ctx_, y, x, rows, cols, d, log);
  }
  void softmax_backward(void *dx, const void *y, const void *dy, int64_t rows, int64_t cols, DType d,
                        bool log) override {
    cuda::softmax_backward(ctx_, dx, y, dy, rows, cols, d, log);
  }
  void cross_entropy(void *loss, void *lse, const void *x, const int64_t *t, int64_t rows, int64_t cols, DType d,
                     double scale) override {
    cuda::cross_entropy(ctx_, loss, lse, x, t, rows, cols, d, scale);
  }
  void cross_entropy_backward(void *dx, const void *x, const void *lse, const int64_t *t, const void *dloss,
                              int64_t rows, int64_t cols, DType d, double scale) override {
    cuda::cross_entropy_backward(ctx_, dx, x, lse, t, dloss, rows, cols, d, scale);
  }
  void nll_loss(void *loss, const void *lp, const int64_t *t, int64_t rows, int64_t cols, DType d,
                double scale) override {
    cuda::nll_loss(ctx_, loss, lp, t, rows, cols, d, scale);
  }
  void nll_loss_backward(void *dlp, const int64_t *t, const void *dloss, int64_t rows, int64_t cols, DType d,
                         double scale) override {
    cuda::nll_loss_backward(ctx_, dlp, t, dloss, rows, cols, d, scale);
  }
  int64_t range_check_queue(const int64_t *idx, int64_t n, int64_t bound) override {
    return cuda::range_check_queue(ctx_, idx, n, bound);
  }
  int64_t range_check_answer(int64_t ticket) override { return cuda::range_check_answer(ctx_, ticket); }
  void max_reduce(void *values, int64_t *indices, const void *x, int64_t outer, int64_t reduce, int64_t inner,
                  DType d) override {
    cuda::max_reduce(ctx_, values, indices, x, outer, reduce, inner, d);
  }
  void max_backward(void *dx, const int64_t *indices, const void *dy, int64_t outer, int64_t reduce, int64_t inner,
                    DType d) override {
    cuda::max_backward(ctx_, dx, indices, dy, outer, reduce, inner, d);
  }
  void adam_step(const AdamArgs &a) override { cuda::adam_step(ctx_, a); }
  void causal_softmax(void *y, const void *x, int64_t rows, int64_t cols, int64_t t, int64_t offset,
                      DType dtype) override {
    cuda::causal_softmax(ctx_, y, x, rows, cols, t, offset, dtype);
  }
  void causal_softmax_backward(void *dx, const void *y, const void *dy, int64_t rows, int64_t cols, int64_t t,
                               int64_t offset, DType dtype) override {
    cuda::causal_softmax_backward(ctx_, dx, y, dy, rows, cols, t, offset, dtype);
  }
  void clip_grad_norm(void *norm, void *const *grads, const int64_t *numel, int64_t count, DType dtype,
                      double max_norm, double eps) override {
    cuda::clip_grad_norm(ctx_, norm, grads, numel, count, dtype, max_norm, eps);
  }
  // ---- fused MSE backward (mse.cu)
  void mse_backward(void *dp, void *dt, const void *p, const void *t, const void *g, int64_t n, DType d,
                    double scale) override {
    cuda::mse_backward(ctx_, dp, dt, p, t, g, n, d, scale);
  }
  // ---- end fused MSE backward
  void slice_copy(void *out, const void *x, int64_t outer, int64_t size, int64_t inner, int64_t start, int64_t len,
                  DType d) override {
    cuda::slice_copy(ctx_, out, x, outer, size, inner, start, len, d);
  }
  void slice_backward(void *dx, const void *dy, int64_t outer, int64_t size, int64_t inner, int64_t start,
                      int64_t len, DType d) override {
    cuda::slice_backward(ctx_, dx, dy, outer, size, inner, start, len, d);
  }
  void index_select(void *out, const void *x, const int64_t *idx, int64_t n, int64_t rows_x, int64_t cols,
                    DType d) override {
    cuda::index_select(ctx_, out, x, idx, n, rows_x, cols, d);
  }
  void index_add(void *dx, const int64_t *idx, const void *dy, int64_t n, int64_t rows_x, int64_t cols,
                 DType d) override {
    cuda::index_add(ctx_, dx, idx, dy, n, rows_x, cols, d);
  }

  // ---- comparisons and selection (compare.cu)
  void compare(Compare op, uint8_t *out, const void *a, const void *b, const BroadcastPlan &p, DType d) override {
    cuda::compare(ctx_, op, out, a, b, p, d);
  }
  void where(void *out, const uint8_t *cond, const void *a, const void *b, const WherePlan &p, DType d) override {
    cuda::where(ctx_, out, cond, a, b, p, d);
  }
  void pow(void *out, const void *a, const void *b, const BroadcastPlan &p, DType d) override {
    cuda::pow(ctx_, out, a, b, p, d);
  }
  void synchronize_device() override {  // DLPack imports: other libraries' streams too
    ctx_.check_not_capturing("synchronizing the device");
    MT_CUDA_CHECK(cudaDeviceSynchronize());
  }
  // ---- end comparisons and selection

  // ---- convolutional networks (cnn.cu, cudnn.cu)
  void conv2d(void *y, const void *x, const void *w, const void *bias, const Conv2dArgs &a) override {
    cuda::conv2d(ctx_, y, x, w, bias, a);
  }
  void conv2d_backward_data(void *dx, const void *dy, const void *w, const Conv2dArgs &a) override {
    cuda::conv2d_backward_data(ctx_, dx, dy, w, a);
  }
  void conv2d_backward_filter(void *dw, const void *dy, const void *x, const Conv2dArgs &a) override {
    cuda::conv2d_backward_filter(ctx_, dw, dy, x, a);
  }
  void max_pool2d(void *y, int64_t *indices, const void *x, const Pool2dArgs &a) override {
    cuda::max_pool2d(ctx_, y, indices, x, a);
  }
  void max_pool2d_backward(void *dx, const int64_t *indices, const void *dy, const Pool2dArgs &a) override {
    cuda::max_pool2d_backward(ctx_, dx, indices, dy, a);
  }
  void avg_pool2d(void *y, const void *x, const Pool2dArgs &a) override { cuda::avg_pool2d(ctx_, y, x, a); }
  void avg_pool2d_backward(void *dx, const void *dy, const Pool2dArgs &a) override {
    cuda::avg_pool2d_backward(ctx_, dx, dy, a);
  }
  void batch_norm(void *y, void *mean, void *invstd, const void *x, const void *gamma, const void *beta,
                  void *running_mean, void *running_var, const BatchNormArgs &a) override {
    cuda::batch_norm(ctx_, y, mean, invstd, x, gamma, beta, running_mean, running_var, a);
  }
  void batch_norm_backward(void *dx, void *dgamma, void *dbeta, const void *dy, const void *x, const void *mean,
                           const void *invstd, const void *gamma, const BatchNormArgs &a) override {
    cuda::batch_norm_backward(ctx_, dx, dgamma, dbeta, dy, x, mean, invstd, gamma, a);
  }
  // ---- end convolutional networks

  // ---- fused transformer kernels (fused.cu)
  void layer_norm(void *y, void *mean, void *rstd, const void *x, const void *gamma, const void *beta, int64_t rows,
                  int64_t d, double eps, DType dt) override {
    cuda::layer_norm(ctx_, y, mean, rstd, x, gamma, beta, rows, d, eps, dt);
  }
  void layer_norm_backward(void *dx, const void *dx_add, void *dgamma, void *dbeta, const void *dy, const void *x,
                           const void *mean, const void *rstd, const void *gamma, int64_t rows, int64_t d,
                           DType dt) override {
    cuda::layer_norm_backward(ctx_, dx, dx_add, dgamma, dbeta, dy, x, mean, rstd, gamma, rows, d, dt);
  }
  void gelu(void *y, const void *x, int64_t n, DType dt) override { cuda::gelu(ctx_, y, x, n, dt); }
  void gelu_backward(void *dx, const void *dy, const void *x, int64_t n, DType dt) override {
    cuda::gelu_backward(ctx_, dx, dy, x, n, dt);
  }
  void causal_mask(uint8_t *out, int64_t t, int64_t s) override { cuda::causal_mask(ctx_, out, t, s); }
  // ---- end fused transformer kernels

  // ---- FlashAttention (attention/): 16-bit dtypes in flash_*.cu, float32 in attention_f32.cu
  bool flash_attention_supported(DType dtype, int64_t d) const override {
    return cuda::flash_attention_supported(dtype, d) || (dtype == DType::F32 && cuda::attention_f32_supported(d));
  }
  void flash_attention(void *out, float *lse, const void *q, const void *k, const void *v, int64_t bh, int64_t tq,
                       int64_t tk, int64_t d, DType dtype, double scale, bool causal) override {
    if (dtype == DType::F32)
      cuda::attention_f32_forward(ctx_, contiguous_geometry(bh, tq, tk, d), (float *)out, lse, (const float *)q,
                                  (const float *)k, (const float *)v, scale, causal);
    else
      cuda::flash_attention_forward(ctx_, out, lse, q, k, v, bh, tq, tk, d, dtype, scale, causal);
  }
  void flash_attention_backward(void *dq, void *dk, void *dv, const void *q, const void *k, const void *v,
                                const void *out, const float *lse, const void *dout, int64_t bh, int64_t tq, int64_t tk,
                                int64_t d, DType dtype, double scale, bool causal) override {
    if (dtype == DType::F32)
      cuda::attention_f32_backward(ctx_, contiguous_geometry(bh, tq, tk, d), (float *)dq, (float *)dk, (float *)dv,
                                   (const float *)q, (const float *)k, (const float *)v, (const float *)out, lse,
                                   (const float *)dout, scale, causal);
    else
      cuda::flash_attention_backward(ctx_, dq, dk, dv, q, k, v, out, lse, dout, bh, tq, tk, d, dtype, scale, causal);
  }
  bool strided_attention_supported(DType dtype, int64_t d) const override {
    return dtype == DType::F32 && cuda::attention_f32_supported(d);
  }
  void strided_attention(const AttentionGeometry &g, void *out, float *lse, const void *q, const void *k,
                         const void *v, DType dtype, double scale, bool causal) override {
    MT_CHECK(dtype == DType::F32, UNSUPPORTED, "cuda strided_attention: %s (float32 only)", dtype_name(dtype));
    cuda::attention_f32_forward(ctx_, g, (float *)out, lse, (const float *)q, (const float *)k, (const float *)v,
                                scale, causal);
  }
  void strided_attention_backward(const AttentionGeometry &g, void *dq, void *dk, void *dv, const void *q,
                                  const void *k, const void *v, const void *out, const float *lse, const void *dout,
                                  DType dtype, double scale, bool causal) override {
    MT_CHECK(dtype == DType::F32, UNSUPPORTED, "cuda strided_attention backward: %s (float32 only)",
             dtype_name(dtype));
    cuda::attention_f32_backward(ctx_, g, (float *)dq, (float *)dk, (float *)dv, (const float *)q, (const float *)k,
                                 (const float *)v, (const float *)out, lse, (const float *)dout, scale, causal);
  }
  // ---- end FlashAttention

  // ---- fusions (fusions.cu)
  void bias_act(void *y, const void *x, const void *bias, int64_t rows, int64_t n, Activation act,
                DType dt) override {
    cuda::bias_act(ctx_, y, x, bias, rows, n, act, dt);
  }
  void bias_act_backward(void *dx, void *dbias, const void *dy, const void *x, const void *bias, int64_t rows,
                         int64_t n, Activation act, DType dt) override {
    cuda::bias_act_backward(ctx_, dx, dbias, dy, x, bias, rows, n, act, dt);
  }
  void add_layer_norm(void *s, void *y, void *mean, void *rstd, const void *x, const void *residual, const void *gamma,
                      const void *beta, int64_t rows, int64_t d, double eps, DType dt) override {
    cuda::add_layer_norm(ctx_, s, y, mean, rstd, x, residual, gamma, beta, rows, d, eps, dt);
  }
  void dropout_add(void *out, const void *x, const void *residual, int64_t n, double p, uint64_t seed,
                   DType dt) override {
    cuda::dropout_add(ctx_, out, x, residual, n, p, seed, dt);
  }
  // ---- end fusions

 private:
  static void check_copy(const char *what, const void *dst, const void *src, int64_t nbytes) {
    MT_CHECK(nbytes >= 0, INVALID_ARGUMENT, "cuda %s: negative byte count %lld", what, (long long)nbytes);
    MT_CHECK(nbytes == 0 || (dst && src), INVALID_ARGUMENT, "cuda %s: null pointer (dst=%p, src=%p) for %lld bytes",
             what, dst, src, (long long)nbytes);
  }

  cuda::Context &ctx_;
};

}  // namespace

Backend &cuda_backend() {
  // Never destroyed, like the context it wraps; a failed creation throws and is retried.
  static CudaBackend *b = new CudaBackend();
  return *b;
}

int64_t cuda_backend_device_count() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count > 0 ? count : 0;
}

}  // namespace mt
