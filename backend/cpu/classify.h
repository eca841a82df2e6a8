// classify.h - CPU reference loops of the classification family (softmax,
// cross-entropy, nll, max, Adam); the CpuBackend methods forward here.
#pragma once

#include "backend/backend.h"

namespace mt {
namespace cpu {
void softmax(void *y, const void *x, int64_t rows, int64_t cols, DType d, bool log);
void softmax_backward(void *dx, const void *y, const void *dy, int64_t rows, int64_t cols, DType d, bool log);
void cross_entropy(void *loss, void *lse, const void *logits, const int64_t *t, int64_t rows, int64_t cols, DType d,
                   double scale);
void cross_entropy_backward(void *dlogits, const void *logits, const void *lse, const int64_t *t, const void *dloss,
                            int64_t rows, int64_t cols, DType d, double scale);
void nll_loss(void *loss, const void *lp, const int64_t *t, int64_t rows, int64_t cols, DType d, double scale);
void nll_loss_backward(void *dlp, const int64_t *t, const void *dloss, int64_t rows, int64_t cols, DType d,
                       double scale);
int64_t first_out_of_range(const int64_t *idx, int64_t n, int64_t bound);
void max_reduce(void *values, int64_t *indices, const void *x, int64_t outer, int64_t reduce, int64_t inner, DType d);
void max_backward(void *dx, const int64_t *indices, const void *dy, int64_t outer, int64_t reduce, int64_t inner,
                  DType d);
void adam_step(const AdamArgs &a);
void causal_softmax(void *y, const void *x, int64_t rows, int64_t cols, int64_t t, int64_t offset, DType d);
void clip_grad_norm(void *norm, void *const *grads, const int64_t *numel, int64_t count, DType dtype, double max_norm,
                    double eps);
}  // namespace cpu
}  // namespace mt
