// classify.h - the CUDA launchers of the classification family and of the gathers and
// blocks (backend/backend.h): softmax.cu, classify.cu, adam.cu.
//
// Each function has the arguments and the semantics of the Backend method of the same
// name, preceded by the context whose stream it queues on. None synchronizes the host
// except range_check_answer, which waits for the event recorded after its check's kernel (the
// kernel writes the answer into mapped pinned memory); temporaries come from the context's
// pool. Dtypes: float32, float64, float16 and bfloat16 wherever the Backend method takes a
// floating dtype (the CPU reference takes float32 and float64); slice_copy and index_select
// take every dtype.
//
// defines: softmax, softmax_backward, cross_entropy, cross_entropy_backward, nll_loss,
//          nll_loss_backward, range_check_queue, range_check_answer, max_reduce, max_backward,
//          adam_step, clip_grad_norm, slice_copy, slice_backward, index_select, index_add
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace mt {
namespace cuda {

class Context;

// softmax.cu
void softmax(Context &c, void *y, const void *x, int64_t rows, int64_t cols, DType dtype, bool log);
void softmax_backward(Context &c, void *dx, const void *y, const void *dy, int64_t rows, int64_t cols, DType dtype,
                      bool log);

// classify.cu
void cross_entropy(Context &c, void *loss, void *lse, const void *logits, const int64_t *targets, int64_t rows,
                   int64_t cols, DType dtype, double scale);
void cross_entropy_backward(Context &c, void *dlogits, const void *logits, const void *lse, const int64_t *targets,
                            const void *dloss, int64_t rows, int64_t cols, DType dtype, double scale);
void nll_loss(Context &c, void *loss, const void *log_probs, const int64_t *targets, int64_t rows, int64_t cols,
              DType dtype, double scale);
void nll_loss_backward(Context &c, void *dlp, const int64_t *targets, const void *dloss, int64_t rows, int64_t cols,
                       DType dtype, double scale);
int64_t range_check_queue(Context &c, const int64_t *idx, int64_t n, int64_t bound);
int64_t range_check_answer(Context &c, int64_t ticket);
void max_reduce(Context &c, void *values, int64_t *indices, const void *x, int64_t outer, int64_t reduce,
                int64_t inner, DType dtype);
void max_backward(Context &c, void *dx, const int64_t *indices, const void *dy, int64_t outer, int64_t reduce,
                  int64_t inner, DType dtype);
void slice_copy(Context &c, void *out, const void *x, int64_t outer, int64_t size, int64_t inner, int64_t start,
                int64_t len, DType dtype);
void slice_backward(Context &c, void *dx, const void *dy, int64_t outer, int64_t size, int64_t inner, int64_t start,
                    int64_t len, DType dtype);
void index_select(Context &c, void *out, const void *x, const int64_t *idx, int64_t n, int64_t rows_x, int64_t cols,
                  DType dtype);
void index_add(Context &c, void *dx, const int64_t *idx, const void *dy, int64_t n, int64_t rows_x, int64_t cols,
               DType dtype);

void causal_softmax(Context &c, void *y, const void *x, int64_t rows, int64_t cols, int64_t t, int64_t offset,
                    DType dtype);
void causal_softmax_backward(Context &c, void *dx, const void *y, const void *dy, int64_t rows, int64_t cols,
                             int64_t t, int64_t offset, DType dtype);

// adam.cu
void adam_step(Context &c, const AdamArgs &args);
void clip_grad_norm(Context &c, void *norm, void *const *grads, const int64_t *numel, int64_t count, DType dtype,
                    double max_norm, double eps);

}  // namespace cuda
}  // namespace mt
