/*
 * minitorch.h - the C ABI of libminitorch.so, a tape-based autograd engine
 * with a CUDA backend and a CPU reference backend.
 *
 * C99. Every symbol is prefixed mt_. Scalars cross as double or int64_t, enums
 * are int32-sized, handles and buffers are pointers; no structs by value, no
 * varargs, no callbacks. Fallible functions return mt_status (MT_OK == 0) and
 * write results through out-parameters, which come first. On failure a handle
 * output (mt_tensor **, mt_optimizer **, void ** of mt_malloc) is NULL, other
 * outputs are left as they were, nothing is recorded on the tape, and
 * mt_last_error() says why.
 *
 * Ownership, in one sentence per kind of pointer:
 *  - mt_tensor **out: the caller owns one new reference; release it with
 *    mt_tensor_release().
 *  - mt_tensor * inputs: borrowed for the duration of the call; what must outlive
 *    the call takes its own reference (the tape, an optimizer) or shares the
 *    storage (a view: reshape, detach, slice along the outermost dim).
 *  - const void *data / const int64_t *shape: borrowed for the call, copied.
 *  - const char * results: owned by the library; valid until the next call on
 *    the same thread (mt_last_error) or forever (mt_status_string, mt_version).
 *
 * A worked example: fit y = 2x with one weight.
 *
 *   int64_t shape[2] = {4, 1};
 *   float xs[4] = {1, 2, 3, 4}, ys[4] = {2, 4, 6, 8}, w0 = 0.5f;
 *   mt_tensor *x, *y, *w, *pred, *loss, *g;
 *   mt_tensor_from_data(&x, xs, shape, 2, MT_F32, MT_CPU);
 *   mt_tensor_from_data(&y, ys, shape, 2, MT_F32, MT_CPU);
 *   mt_tensor_from_data(&w, &w0, NULL, 0, MT_F32, MT_CPU);   // 0-d scalar
 *   mt_tensor_set_requires_grad(w, 1);
 *   mt_mul(&pred, x, w);                  // broadcasts [4,1] * []
 *   mt_mse_loss(&loss, pred, y);
 *   mt_backward(loss);                    // w.grad = mean(2*(pred-y)*x) = -22.5
 *   mt_tensor_grad(&g, w);
 *   ... mt_tensor_release() each of x, y, w, pred, loss, g.
 *
 * Threads: the tape and the grad mode are per thread; the last error is per
 * thread. A tensor may be read from several threads, not written concurrently.
 */
#ifndef MINITORCH_MINITORCH_H_INCLUDED
#define MINITORCH_MINITORCH_H_INCLUDED

#include <stdint.h>

#if defined(_WIN32)
#  define MT_API __declspec(dllexport)
#elif defined(__GNUC__)
#  define MT_API __attribute__((visibility("default")))
#else
#  define MT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define MT_VERSION_MAJOR 0
#define MT_VERSION_MINOR 1
#define MT_VERSION_PATCH 0
#define MT_ABI_VERSION 1

/* ---------------------------------------------------------------- basics */
/* The enums below are int32-sized. Compiled as C++ (the library itself) they are given int32_t
 * as their underlying type, so any int32 value a caller passes, valid or not, is a value of the
 * type, and the library's range checks are well defined. */
#ifdef __cplusplus
#define MT_ENUM(name) enum name : int32_t
#else
#define MT_ENUM(name) enum name
#endif


typedef MT_ENUM(mt_status) {
  MT_OK = 0,
  MT_ERR_INVALID_ARGUMENT = 1,  /* null pointer, released handle, bad value */
  MT_ERR_SHAPE = 2,             /* shapes do not fit the op */
  MT_ERR_DTYPE = 3,             /* dtype not supported or mixed */
  MT_ERR_DEVICE = 4,            /* device unavailable or tensors on different devices */
  MT_ERR_OUT_OF_MEMORY = 5,
  MT_ERR_CUDA = 6,              /* a CUDA runtime or library call failed */
  MT_ERR_IO = 7,
  MT_ERR_STATE = 8,             /* the call is not valid now (e.g. backward with nothing recorded) */
  MT_ERR_UNSUPPORTED = 9,       /* valid request that this build cannot do */
  MT_ERR_INTERNAL = 10          /* a broken invariant: please report */
} mt_status;

typedef MT_ENUM(mt_dtype) {
  MT_F32 = 0, MT_F64 = 1, MT_F16 = 2, MT_BF16 = 3, MT_I32 = 4, MT_I64 = 5, MT_U8 = 6
} mt_dtype;

typedef MT_ENUM(mt_device) { MT_CPU = 0, MT_CUDA = 1 } mt_device;

MT_API int64_t mt_abi_version(void);
/* "MAJOR.MINOR.PATCH"; owned by the library, static. */
MT_API const char *mt_version(void);
/* Thread-local message of the last failure on this thread, never NULL ("" when none);
 * owned by the library, valid until the next failing call on this thread. */
MT_API const char *mt_last_error(void);
/* Static name of a status, e.g. "MT_ERR_SHAPE"; "MT_ERR_UNKNOWN" for other values. */
MT_API const char *mt_status_string(mt_status s);
/* Static name of a dtype ("float32", ...) or NULL for an invalid value. */
MT_API const char *mt_dtype_name(mt_dtype d);
/* Bytes per element of a dtype; 0 for an invalid value. */
MT_API int64_t mt_dtype_size(mt_dtype d);

/* 0 when no usable GPU or a CPU-only build. */
MT_API int64_t mt_cuda_device_count(void);
/* CUDA if usable, else CPU; the environment variable MT_DEVICE=cpu|cuda overrides
 * (MT_DEVICE=cuda without a usable GPU falls back to CPU). */
MT_API mt_device mt_default_device(void);
/* Name of the device, e.g. "NVIDIA H100 80GB HBM3" or "cpu"; owned by the library, static. */
MT_API const char *mt_device_name(mt_device device);

/* ------------------------------------------------------------ raw memory */

/* *out is owned by the caller, freed with mt_free on the same device. nbytes >= 0;
 * 0 gives a valid pointer that must still be freed. */
MT_API mt_status mt_malloc(void **out, int64_t nbytes, mt_device device);
MT_API mt_status mt_free(void *ptr, mt_device device);            /* NULL: no-op */
/* Copies are complete when the call returns (d2h and h2d synchronize the stream). */
MT_API mt_status mt_memcpy_h2d(void *dst, const void *src, int64_t nbytes);
MT_API mt_status mt_memcpy_d2h(void *dst, const void *src, int64_t nbytes);
MT_API mt_status mt_memcpy_d2d(void *dst, const void *src, int64_t nbytes); /* stream-ordered */
/* Waits until all queued GPU work is finished; reports asynchronous CUDA errors. */
MT_API mt_status mt_synchronize(void);
/* Bytes the library holds now on a device (tensors and mt_malloc), for leak tests. */
MT_API int64_t mt_live_bytes(mt_device device);

/* --------------------------------------------------------------- tensors */

/* Opaque, reference-counted; every tensor is dense and row-major. */
typedef struct mt_tensor mt_tensor;

/* Copies ndim-dimensional data (ndim 0 = scalar; shape may be NULL when ndim is 0). */
MT_API mt_status mt_tensor_from_data(mt_tensor **out, const void *data, const int64_t *shape, int64_t ndim,
                                     mt_dtype dtype, mt_device device);
/* Wraps memory the caller owns (no copy): data must stay valid and be freed by the caller
 * after the last reference to *out is released. */
MT_API mt_status mt_tensor_from_blob(mt_tensor **out, void *data, const int64_t *shape, int64_t ndim,
                                     mt_dtype dtype, mt_device device);
MT_API mt_status mt_tensor_zeros(mt_tensor **out, const int64_t *shape, int64_t ndim, mt_dtype dtype, mt_device device);
MT_API mt_status mt_tensor_ones(mt_tensor **out, const int64_t *shape, int64_t ndim, mt_dtype dtype, mt_device device);
/* Every element value. An integer dtype takes value truncated toward zero; a value outside its
 * range, or NaN, is MT_ERR_INVALID_ARGUMENT (a double holds every int64 only up to 2^53: larger
 * ones come exactly through mt_tensor_from_data). */
MT_API mt_status mt_tensor_full(mt_tensor **out, const int64_t *shape, int64_t ndim, double value,
                                mt_dtype dtype, mt_device device);
/* Uniform [0,1) and standard normal from a counter-based Philox-4x32-10 stream keyed by seed:
 * the same seed gives the same values on every device. Floating dtypes only (float16 and
 * bfloat16 round the draws, so a uniform draw may round up to 1.0). */
MT_API mt_status mt_tensor_rand(mt_tensor **out, const int64_t *shape, int64_t ndim, int64_t seed,
                                mt_dtype dtype, mt_device device);
MT_API mt_status mt_tensor_randn(mt_tensor **out, const int64_t *shape, int64_t ndim, int64_t seed,
                                 mt_dtype dtype, mt_device device);
/* 1-D [start, start+step, ...) with ceil((end-start)/step) elements. */
MT_API mt_status mt_tensor_arange(mt_tensor **out, double start, double end, double step,
                                  mt_dtype dtype, mt_device device);

/* Copies the whole tensor into dst (host memory); nbytes must equal numel * dtype size.
 * Synchronizes with queued GPU work. */
MT_API mt_status mt_tensor_copy_to_host(const mt_tensor *t, void *dst, int64_t nbytes);
/* Overwrites the tensor's elements from host memory; nbytes must match. Not recorded. */
MT_API mt_status mt_tensor_copy_from_host(mt_tensor *t, const void *src, int64_t nbytes);
/* The value of a one-element tensor as a double (synchronizes). */
MT_API mt_status mt_tensor_item(const mt_tensor *t, double *out);
MT_API mt_status mt_tensor_ndim(const mt_tensor *t, int64_t *out);
MT_API mt_status mt_tensor_shape(const mt_tensor *t, int64_t *out);      /* writes ndim entries */
MT_API mt_status mt_tensor_numel(const mt_tensor *t, int64_t *out);
MT_API mt_status mt_tensor_dtype(const mt_tensor *t, mt_dtype *out);
MT_API mt_status mt_tensor_device(const mt_tensor *t, mt_device *out);
/* Borrowed pointer to the first element, valid while the tensor lives. */
MT_API mt_status mt_tensor_data_ptr(const mt_tensor *t, void **out);
MT_API mt_status mt_tensor_retain(mt_tensor *t);
MT_API mt_status mt_tensor_release(mt_tensor *t);                        /* NULL: no-op */
/* Tensors alive now (held by the caller, the tape, .grad fields, views or optimizer state),
 * for leak tests. */
MT_API int64_t   mt_live_tensors(void);

/* ---------------------------------------------------------------- autograd */

MT_API mt_status mt_tensor_set_requires_grad(mt_tensor *t, int64_t requires_grad);
MT_API mt_status mt_tensor_requires_grad(const mt_tensor *t, int64_t *out);
/* New reference to the accumulated gradient; *out = NULL if none yet. */
MT_API mt_status mt_tensor_grad(mt_tensor **out, const mt_tensor *t);
/* Sets every element of the tensor's gradient to zero (no-op when it has none). */
MT_API mt_status mt_tensor_zero_grad(mt_tensor *t);
/* Drops the tensor's gradient: mt_tensor_grad gives NULL until the next backward writes a
 * fresh one (no kernel runs, and none is needed to accumulate into it later). */
MT_API mt_status mt_tensor_clear_grad(mt_tensor *t);
/* A new handle on the same storage that does not require grad. */
MT_API mt_status mt_tensor_detach(mt_tensor **out, mt_tensor *t);
/* Turns recording on (1) or off (0) for this thread; returns the previous mode. */
MT_API int64_t   mt_set_grad_enabled(int64_t enabled);
MT_API int64_t   mt_is_grad_enabled(void);
/* Walks the tape in reverse from loss (one element), accumulates into .grad of the leaves
 * that require grad, then clears the whole tape. On failure the tape is untouched. */
MT_API mt_status mt_backward(mt_tensor *loss);
/* Drops every recorded entry without running backward. */
MT_API mt_status mt_tape_clear(void);
/* Entries on this thread's tape now. */
MT_API int64_t   mt_tape_size(void);

/* -------------------------------------------------------------------- ops */
/* *out receives a new reference; recorded on the tape when grad is on and an input
 * requires grad. Floating ops keep the dtype of their inputs (mixing float dtypes is
 * MT_ERR_DTYPE); inputs must share a device (else MT_ERR_DEVICE); shapes broadcast as
 * in numpy; dims may be negative, counted from the end. */

MT_API mt_status mt_add(mt_tensor **out, mt_tensor *a, mt_tensor *b);
MT_API mt_status mt_sub(mt_tensor **out, mt_tensor *a, mt_tensor *b);
MT_API mt_status mt_mul(mt_tensor **out, mt_tensor *a, mt_tensor *b);
MT_API mt_status mt_div(mt_tensor **out, mt_tensor *a, mt_tensor *b);
/* Lets float32 matmuls on CUDA use TF32 tensor cores (1) or not (0, the default, full
 * float32 as torch.backends.cuda.matmul.allow_tf32 = False); process-wide; returns the
 * previous setting. The CPU always computes in full precision. */
MT_API int64_t mt_set_allow_tf32(int64_t allow);
/* Makes CUDA give the same bits for the same inputs on every run (1) or lets it take faster
 * kernels whose float sums arrive in a varying order (0, the default, as torch's
 * use_deterministic_algorithms(False)): the bf16/f16 attention backward at head dim 64 and
 * 2048 keys or more, and at head dim 128 above 8192 keys, adds dQ by atomics, and
 * convolutions take the path and cuDNN algorithm that timed fastest in this process (cuDNN's
 * may be non-deterministic). With 1 nothing is
 * timed: a fixed path rule and cuDNN's heuristic choice among its deterministic algorithms.
 * Process-wide; read when an op runs (and when a graph is recorded); returns the previous
 * setting. Every other op, and the CPU, gives the same bits either way. */
MT_API int64_t mt_set_deterministic(int64_t on);
/* [m,k]@[k,n], batched [b,m,k]@[b,k,n], and [b,m,k]@[k,n] (b broadcast). */
MT_API mt_status mt_matmul(mt_tensor **out, mt_tensor *a, mt_tensor *b);
/* x [..., in] @ weight[out,in]^T + bias[out] (bias may be NULL), as torch.nn.functional.linear. */
MT_API mt_status mt_linear(mt_tensor **out, mt_tensor *x, mt_tensor *weight, mt_tensor *bias);
MT_API mt_status mt_add_scalar(mt_tensor **out, mt_tensor *x, double s);
MT_API mt_status mt_mul_scalar(mt_tensor **out, mt_tensor *x, double s);
MT_API mt_status mt_pow_scalar(mt_tensor **out, mt_tensor *x, double p);
MT_API mt_status mt_neg(mt_tensor **out, mt_tensor *x);
MT_API mt_status mt_relu(mt_tensor **out, mt_tensor *x);
MT_API mt_status mt_sigmoid(mt_tensor **out, mt_tensor *x);
MT_API mt_status mt_tanh(mt_tensor **out, mt_tensor *x);
MT_API mt_status mt_exp(mt_tensor **out, mt_tensor *x);
MT_API mt_status mt_log(mt_tensor **out, mt_tensor *x);
MT_API mt_status mt_sum(mt_tensor **out, mt_tensor *x);                   /* all elements -> 0-d */
MT_API mt_status mt_mean(mt_tensor **out, mt_tensor *x);                  /* all elements -> 0-d */
MT_API mt_status mt_sum_dim(mt_tensor **out, mt_tensor *x, int64_t dim, int64_t keepdim);
MT_API mt_status mt_mean_dim(mt_tensor **out, mt_tensor *x, int64_t dim, int64_t keepdim);
MT_API mt_status mt_mse_loss(mt_tensor **out, mt_tensor *pred, mt_tensor *target); /* mean; same shapes */
/* A view sharing storage; one dim may be -1 (inferred). */
MT_API mt_status mt_reshape(mt_tensor **out, mt_tensor *x, const int64_t *shape, int64_t ndim);
/* Swaps two dims (copies into a new dense tensor). */
MT_API mt_status mt_transpose(mt_tensor **out, mt_tensor *x, int64_t dim0, int64_t dim1);
/* Reorders dims: out.shape[i] = x.shape[perm[i]] (copies). */
MT_API mt_status mt_permute(mt_tensor **out, mt_tensor *x, const int64_t *perm, int64_t ndim);
/* Copies to a device (differentiable); same device gives a new reference to x itself. */
MT_API mt_status mt_tensor_to(mt_tensor **out, mt_tensor *x, mt_device device);
/* Converts the dtype (differentiable between floating dtypes); same dtype gives x itself. */
MT_API mt_status mt_tensor_cast(mt_tensor **out, mt_tensor *x, mt_dtype dtype);
/* A dense copy with its own storage (differentiable). */
MT_API mt_status mt_tensor_clone(mt_tensor **out, mt_tensor *x);

/* Softmax and log-softmax along dim (numerically stable: the row max is subtracted). */
MT_API mt_status mt_softmax(mt_tensor **out, mt_tensor *x, int64_t dim);
MT_API mt_status mt_log_softmax(mt_tensor **out, mt_tensor *x, int64_t dim);
/* Mean over N of -log softmax(logits)[n, targets[n]]; logits [N,C] floating, targets [N] MT_I64
 * on the same device. A target outside [0, C) is MT_ERR_INVALID_ARGUMENT naming the first
 * bad index (the call waits for this check, which the device runs just ahead of the loss). */
MT_API mt_status mt_cross_entropy(mt_tensor **out, mt_tensor *logits, mt_tensor *targets);
/* Mean over N of -log_probs[n, targets[n]]; the same rules as mt_cross_entropy. */
MT_API mt_status mt_nll_loss(mt_tensor **out, mt_tensor *log_probs, mt_tensor *targets);
/* Max along dim: *out_values (differentiable; the gradient goes to the first maximum) and
 * *out_indices (MT_I64, the first maximum); either out may be NULL when not wanted. */
MT_API mt_status mt_max_dim(mt_tensor **out_values, mt_tensor **out_indices, mt_tensor *x, int64_t dim,
                            int64_t keepdim);
/* Index of the first maximum along dim (MT_I64, not differentiable). */
MT_API mt_status mt_argmax(mt_tensor **out, mt_tensor *x, int64_t dim, int64_t keepdim);

/* Rows of x (along dim 0) at 1-D MT_I64 indices, as torch.index_select(x, 0, indices);
 * differentiable in x (repeated indices accumulate). Out-of-range indices are
 * MT_ERR_INVALID_ARGUMENT naming the first bad position. */
MT_API mt_status mt_index_select(mt_tensor **out, mt_tensor *x, mt_tensor *indices);
/* x[..., start:end, ...] along dim (start/end clamped to [0, size], negative counted from
 * the end, as Python slicing with step 1); differentiable. */
MT_API mt_status mt_slice(mt_tensor **out, mt_tensor *x, int64_t dim, int64_t start, int64_t end);

/* ---- comparisons and selection */
/* a OP b elementwise with broadcasting: *out is MT_U8 holding 0 or 1 (a mask, as torch's
 * bool tensors). a and b must share a dtype (any dtype; the CPU backend does not compare
 * float16/bfloat16) and a device. NaN is unequal to everything: mt_ne gives 1, the others 0.
 * Not differentiable: never recorded on the tape. */
MT_API mt_status mt_eq(mt_tensor **out, mt_tensor *a, mt_tensor *b);
MT_API mt_status mt_ne(mt_tensor **out, mt_tensor *a, mt_tensor *b);
MT_API mt_status mt_lt(mt_tensor **out, mt_tensor *a, mt_tensor *b);
MT_API mt_status mt_le(mt_tensor **out, mt_tensor *a, mt_tensor *b);
MT_API mt_status mt_gt(mt_tensor **out, mt_tensor *a, mt_tensor *b);
MT_API mt_status mt_ge(mt_tensor **out, mt_tensor *a, mt_tensor *b);
/* cond ? a : b elementwise, the three broadcast together; cond is MT_U8 (nonzero = true),
 * a and b share a dtype (any dtype). Differentiable in a and b: each gets the gradient where
 * it was chosen, 0 elsewhere. */
MT_API mt_status mt_where(mt_tensor **out, mt_tensor *cond, mt_tensor *a, mt_tensor *b);
/* Elementwise max / min of two floating tensors (broadcast); NaN propagates. Gradient: the
 * larger (smaller) input gets it all, and a tie splits it in halves (as torch.maximum). */
MT_API mt_status mt_maximum(mt_tensor **out, mt_tensor *a, mt_tensor *b);
MT_API mt_status mt_minimum(mt_tensor **out, mt_tensor *a, mt_tensor *b);
/* sqrt(x); gradient g / (2 sqrt(x)). */
MT_API mt_status mt_sqrt(mt_tensor **out, mt_tensor *x);
/* |x|; gradient g * sign(x), 0 at x == 0. */
MT_API mt_status mt_abs(mt_tensor **out, mt_tensor *x);
/* a ** b elementwise (broadcast, floating); differentiable in both, as torch.pow: da is 0 where
 * b == 0, db = g * a^b * log(a) and 0 where a == 0 and b >= 0. */
MT_API mt_status mt_pow(mt_tensor **out, mt_tensor *a, mt_tensor *b);
/* min(max(x, lo), hi) (lo > hi gives hi everywhere; NaN stays NaN); pass -INFINITY / INFINITY
 * for a missing bound; NaN bounds are MT_ERR_INVALID_ARGUMENT. The gradient passes where
 * lo <= x <= hi and is 0 outside. */
MT_API mt_status mt_clamp(mt_tensor **out, mt_tensor *x, double lo, double hi);

/* ---- DLPack */
/* Exchange with torch, CuPy, NumPy, JAX... without a copy, in the DLPack v0.8 layout: the
 * void * below is a DLManagedTensor * (see dlpack.h of the DLPack project).
 * mt_tensor_to_dlpack: *out is a new DLManagedTensor that shares t's storage and holds a
 * reference to it (counted by mt_live_tensors) until the consumer calls its deleter, exactly
 * once. Device kDLCPU or kDLCUDA (id 0), compact row-major strides, byte_offset 0. A CUDA
 * tensor's queued work is waited for first, so the memory is ready for any stream. */
MT_API mt_status mt_tensor_to_dlpack(void **out, mt_tensor *t);
/* Wraps the producer's memory (no copy). On success the library owns managed and calls its
 * deleter when the last reference to the storage goes; on failure the caller still owns it.
 * Accepted: kDLCPU, kDLCUDA device 0; float 16/32/64, bfloat16, int 32/64, uint 8 (and bool
 * as uint8), one lane; strides NULL or compact row-major (anything else is
 * MT_ERR_UNSUPPORTED). A CUDA import waits for all work queued on the device first, since
 * the producer's stream is not ordered with the library's. */
MT_API mt_status mt_tensor_from_dlpack(mt_tensor **out, void *managed);

/* ---- transformer blocks (compositions of the recorded ops above) */
/* Over the last dim: (x - mean) / sqrt(var + eps) * gamma + beta, the variance biased as
 * PyTorch's; gamma and beta ([D]) may be NULL. */
MT_API mt_status mt_layer_norm(mt_tensor **out, mt_tensor *x, mt_tensor *gamma, mt_tensor *beta, double eps);
/* The tanh approximation, as torch.nn.functional.gelu(x, approximate='tanh'). */
MT_API mt_status mt_gelu(mt_tensor **out, mt_tensor *x);
/* Rows of weight [V,D] at MT_I64 indices of any shape: out [..., D]; repeated indices
 * accumulate in the backward (deterministic on CUDA). Out-of-range indices are
 * MT_ERR_INVALID_ARGUMENT naming the first bad position. */
MT_API mt_status mt_embedding(mt_tensor **out, mt_tensor *weight, mt_tensor *indices);
/* softmax(q k^T / sqrt(D) (+ causal mask)) v for q [..., T, D], k [..., S, D], v [..., S, Dv]
 * ([B, H, T, D] in a transformer). causal masks key j for query i when j > i + S - T. */
MT_API mt_status mt_scaled_dot_product_attention(mt_tensor **out, mt_tensor *q, mt_tensor *k, mt_tensor *v,
                                                 int64_t causal);
/* The same with the softmax scale given (scale <= 0: 1/sqrt(D)). */
MT_API mt_status mt_scaled_dot_product_attention_scaled(mt_tensor **out, mt_tensor *q, mt_tensor *k, mt_tensor *v,
                                                        int64_t causal, double scale);
/* Multi-head self-attention of one packed projection qkv [B, T, 3D] (columns q, then k, then v;
 * head h at columns h*Dh .. (h+1)*Dh of each, Dh = D / heads): out [B, T, D], head h's
 * softmax(q k^T / sqrt(Dh) (+ causal mask)) v at its columns. The same values as reshaping qkv to
 * [B, T, 3, H, Dh], permuting to [3, B, H, T, Dh], mt_scaled_dot_product_attention of the three
 * slices, permuting back to [B, T, H, Dh] and reshaping; on CUDA in float32 with Dh 16 or 32 it
 * is one fused op that reads and writes the heads in place (no head copied, no T x T matrix). */
MT_API mt_status mt_self_attention(mt_tensor **out, mt_tensor *qkv, int64_t heads, int64_t causal);
/* Zeroes each element with probability p (scaling the rest by 1/(1-p)); the mask is drawn
 * from the seeded counter-based stream: the same seed gives the same mask on every device. */
MT_API mt_status mt_dropout(mt_tensor **out, mt_tensor *x, double p, int64_t seed);
/* value where mask (MT_U8, broadcast to x) is nonzero, x elsewhere; differentiable in x. For an
 * integer x, value as mt_tensor_full takes it (truncated; out of range is an error). */
MT_API mt_status mt_masked_fill(mt_tensor **out, mt_tensor *x, mt_tensor *mask, double value);
/* Concatenates n tensors (borrowed) along dim; every other dim must agree. */
MT_API mt_status mt_cat(mt_tensor **out, mt_tensor *const *tensors, int64_t n, int64_t dim);

/* ---- fusions: one pass over memory where the composition (named in each entry) makes two or
 * three; each is one recorded op with a backward of its own, equal to its composition up to
 * float rounding (bit for bit on the CPU, and for mt_dropout_add on every device). */
typedef MT_ENUM(mt_activation) { MT_ACT_IDENTITY = 0, MT_ACT_RELU = 1, MT_ACT_GELU = 2 } mt_activation;
/* act(x + bias) with bias [n] broadcast over the last dim of x [..., n]: a Linear's bias and its
 * activation in one pass. MT_ACT_GELU is mt_gelu's tanh form, MT_ACT_RELU mt_relu's (gradient
 * 0 at 0). mt_linear(x, weight, NULL) followed by mt_bias_act(bias) replaces mt_linear(x,
 * weight, bias) followed by the activation: the GEMM without its bias pass, then one pass that
 * adds the bias and applies act; the backward writes dx and the column sums dbias in one pass. */
MT_API mt_status mt_bias_act(mt_tensor **out, mt_tensor *x, mt_tensor *bias, mt_activation act);
/* *sum_out = x + residual (same shapes) and *norm_out = mt_layer_norm(*sum_out, gamma, beta,
 * eps) (gamma, beta [D] may be NULL), from one pass that reads x and residual once. Both are
 * differentiable (recorded as an add and a layer_norm of the sum): x and residual get
 * dsum + dLN(dnorm). The caller owns a new reference to each output. */
MT_API mt_status mt_add_layer_norm(mt_tensor **sum_out, mt_tensor **norm_out, mt_tensor *x, mt_tensor *residual,
                                   mt_tensor *gamma, mt_tensor *beta, double eps);
/* residual + mt_dropout(x, p, seed) (x and residual of one shape), bit for bit the result of
 * mt_add(residual, mt_dropout(x, p, seed)) on the same device; p == 0 is mt_add(residual, x)
 * (skip the call in eval mode). The backward draws the mask again from the seed (nothing is
 * kept): dresidual = dout, dx = dout * mask / (1 - p). */
MT_API mt_status mt_dropout_add(mt_tensor **out, mt_tensor *x, mt_tensor *residual, double p, int64_t seed);

/* ------------------------------------------------------ convolutional networks
 * Inputs are NCHW. Output sizes round down as PyTorch's:
 *   (H + 2*padding - dilation*(kernel-1) - 1) / stride + 1.
 * A shape mismatch (input not 4-D, channels of x and w differ, bias not [K]) is
 * MT_ERR_SHAPE; a zero or negative stride, kernel or dilation (or a negative padding)
 * is MT_ERR_INVALID_ARGUMENT. */
/* out [N,K,Ho,Wo] = x [N,C,H,W] (*) w [K,C,R,S] + bias [K] (bias may be NULL). */
MT_API mt_status mt_conv2d(mt_tensor **out, mt_tensor *x, mt_tensor *w, mt_tensor *bias, int64_t stride,
                           int64_t padding);
/* The same with per-axis stride, padding and dilation. */
MT_API mt_status mt_conv2d_ex(mt_tensor **out, mt_tensor *x, mt_tensor *w, mt_tensor *bias, int64_t stride_h,
                              int64_t stride_w, int64_t pad_h, int64_t pad_w, int64_t dilation_h,
                              int64_t dilation_w);
/* Which convolution path CUDA uses: 0 the fastest for the shape (default), 1 im2col + GEMM,
 * 2 cuDNN (MT_ERR_UNSUPPORTED in a build without cuDNN), 3 direct kernels (one launch per
 * direction, two for the weight gradient; for small convolutions: at most 25 taps a window,
 * C*R*S and K*R*S at most 1536 in float32 or 768 in float64, tensors under 2^29 elements).
 * Process-wide; returns the status and writes the previous choice to *previous when it is
 * not NULL. cuDNN takes float32: float64 convolutions forced to 2 use im2col, as do shapes
 * forced to 3 that the direct kernels do not take. 0 times the paths that can take the
 * shape once per new shape and direction (direct only for filters of at most 4096 weights;
 * this synchronizes; a shape first seen while a graph is being recorded takes im2col;
 * MT_CONV_LOG set in the environment prints the timings and the choice to stderr). Float32
 * convolutions never use TF32. */
MT_API mt_status mt_set_conv_algo(int64_t algo, int64_t *previous);
/* Max over kernel x kernel windows (no padding); windows may overlap. The backward routes
 * the gradient through the saved argmax indices. */
MT_API mt_status mt_max_pool2d(mt_tensor **out, mt_tensor *x, int64_t kernel, int64_t stride);
/* Mean over kernel x kernel windows (no padding). */
MT_API mt_status mt_avg_pool2d(mt_tensor **out, mt_tensor *x, int64_t kernel, int64_t stride);
/* BatchNorm over the channels of x [N,C,H,W] (or [N,C]): gamma, beta [C] (may be NULL).
 * training != 0: normalizes with the batch statistics (biased variance) and, when
 * running_mean / running_var [C] are given, updates them in place as PyTorch does
 * (momentum weights the new value; the running variance is unbiased). training == 0:
 * normalizes with running_mean / running_var, which are then required. */
MT_API mt_status mt_batch_norm(mt_tensor **out, mt_tensor *x, mt_tensor *gamma, mt_tensor *beta,
                               mt_tensor *running_mean, mt_tensor *running_var, int64_t training,
                               double momentum, double eps);
/* ---------------------------------------------------------- end convolutional networks */

/* ------------------------------------------------------------ initialization */
/* In place, not recorded; the same seed gives bit-identical values on every device.
 * fan_in / fan_out are those of torch.nn.init for a weight of shape [out, in, ...]. */
MT_API mt_status mt_init_uniform(mt_tensor *t, double low, double high, int64_t seed);
MT_API mt_status mt_init_normal(mt_tensor *t, double mean, double std, int64_t seed);
/* Glorot: bound = gain * sqrt(6 / (fan_in + fan_out)); std = gain * sqrt(2 / (fan_in + fan_out)). */
MT_API mt_status mt_init_xavier_uniform(mt_tensor *t, double gain, int64_t seed);
MT_API mt_status mt_init_xavier_normal(mt_tensor *t, double gain, int64_t seed);
/* He, fan_in mode, for a ReLU-family gain: bound = gain * sqrt(3 / fan_in); std = gain / sqrt(fan_in).
 * gain sqrt(2) is torch's kaiming_*_(nonlinearity='relu'). */
MT_API mt_status mt_init_kaiming_uniform(mt_tensor *t, double gain, int64_t seed);
MT_API mt_status mt_init_kaiming_normal(mt_tensor *t, double gain, int64_t seed);

/* ------------------------------------------------------------ data */
/* Reads an IDX file (the MNIST format), raw or gzip-compressed (detected from the content),
 * into a tensor of the file's dims and element type (0x08 -> MT_U8, 0x09 -> MT_U8 holding
 * the signed bytes, 0x0B -> MT_I32 from int16, 0x0C -> MT_I32, 0x0D -> MT_F32, 0x0E -> MT_F64).
 * MT_ERR_IO names the path and the problem (missing, bad magic, truncated, size mismatch). */
MT_API mt_status mt_load_idx(mt_tensor **out, const char *path, mt_device device);
/* Reads a tab-separated file without header. columns is a comma-separated list of
 * "<index>:<kind>" (0-based column index; kind num = a float, cat = one-hot over the values in
 * order of first appearance, date = day of year 1..366 of a YYYY-MM-DD prefix); target_column
 * is the index of a numeric column. *out_features is MT_F32 [rows, features] and *out_targets
 * MT_F32 [rows, 1]. A malformed line is MT_ERR_IO naming the path, the line and the column. */
MT_API mt_status mt_load_tsv(mt_tensor **out_features, mt_tensor **out_targets, const char *path,
                             const char *columns, int64_t target_column, mt_device device);
/* A random permutation of 0..n-1 (MT_I64) from the counter-based stream keyed by seed. */
MT_API mt_status mt_randperm(mt_tensor **out, int64_t n, int64_t seed, mt_device device);

/* ------------------------------------------------------------ checkpoints */
/* Writes n named tensors to a safetensors file at path (replaced if it exists), copying
 * each to the host. names and tensors are borrowed (n entries); names must be unique,
 * non-empty UTF-8. */
MT_API mt_status mt_save_safetensors(const char *path, const char *const *names, mt_tensor *const *tensors,
                                     int64_t n);
/* Number of tensors in a safetensors file. */
MT_API mt_status mt_safetensors_count(const char *path, int64_t *out);
/* The name of entry index (0-based, in file order) into buf of cap bytes, NUL included;
 * MT_ERR_INVALID_ARGUMENT when it does not fit. */
MT_API mt_status mt_safetensors_name(const char *path, int64_t index, char *buf, int64_t cap);
/* Loads the tensor called name onto device. MT_ERR_IO names the path and the problem. */
MT_API mt_status mt_load_safetensors(mt_tensor **out, const char *path, const char *name, mt_device device);

/* ------------------------------------------------------------ graphs */
/* A recorded stretch of GPU work (a training step, say), replayed with one call: far
 * less launch overhead for small models. Between mt_graph_begin and mt_graph_end on this
 * thread, calls queue their GPU work into the graph instead of running it, and:
 *  - nothing may read back to the host (mt_tensor_item, copy_to_host, mt_synchronize:
 *    MT_ERR_STATE) and index checks are skipped (run the step once eagerly first);
 *  - host-side state is what the recording leaves: tensors made inside keep their
 *    addresses, and each replay rewrites them (read the loss kept from the recording
 *    after each replay); the tape is walked while recording, not at replay;
 *  - parameters, gradients and optimizer state must exist before (run one eager step:
 *    the first step creates them), because replays update them in place.
 * CUDA only (MT_ERR_UNSUPPORTED on the CPU). */
typedef struct mt_graph mt_graph;
MT_API mt_status mt_graph_begin(mt_device device);
/* *out is owned by the caller (mt_graph_free). */
MT_API mt_status mt_graph_end(mt_graph **out);
MT_API mt_status mt_graph_replay(mt_graph *g);
MT_API mt_status mt_graph_free(mt_graph *g);                             /* NULL: no-op */
/* The same four calls under their capture names; mt_graph_capture_begin records on CUDA. */
MT_API mt_status mt_graph_capture_begin(void);
MT_API mt_status mt_graph_capture_end(mt_graph **out);
MT_API mt_status mt_graph_release(mt_graph *g);                          /* NULL: no-op */

/* ------------------------------------------------------------ optimizers */

/* An optimizer holds its own references to the parameters and its state tensors. */
typedef struct mt_optimizer mt_optimizer;

/* SGD as torch.optim.SGD: with weight decay wd, g = grad + wd*p; with momentum m,
 * v = m*v + g (v = g at the first step) and g = nesterov ? g + m*v : v; then p -= lr*g.
 * One fused kernel over all parameters on CUDA. params is borrowed (n entries). */
MT_API mt_status mt_optim_sgd(mt_optimizer **out, mt_tensor *const *params, int64_t n,
                              double lr, double momentum, double weight_decay, int64_t nesterov);
/* Adam and AdamW as torch.optim.Adam / AdamW (AdamW decays the weights directly:
 * p *= 1 - lr * weight_decay; Adam adds weight_decay * p to the gradient). One fused
 * kernel over all parameters on CUDA. params is borrowed (n entries). */
MT_API mt_status mt_optim_adam(mt_optimizer **out, mt_tensor *const *params, int64_t n, double lr, double beta1,
                               double beta2, double eps, double weight_decay);
MT_API mt_status mt_optim_adamw(mt_optimizer **out, mt_tensor *const *params, int64_t n, double lr, double beta1,
                                double beta2, double eps, double weight_decay);
/* Applies one update to every parameter that has a gradient; not recorded on the tape. */
MT_API mt_status mt_optim_step(mt_optimizer *opt);
/* Drops the gradients of every parameter, as torch's zero_grad(set_to_none=True): the next
 * backward writes fresh gradients instead of adding into zeroed ones, and a parameter that
 * gets none is skipped by mt_optim_step. */
MT_API mt_status mt_optim_zero_grad(mt_optimizer *opt);
MT_API mt_status mt_optim_set_lr(mt_optimizer *opt, double lr);
MT_API mt_status mt_optim_get_lr(const mt_optimizer *opt, double *out);
MT_API mt_status mt_optim_free(mt_optimizer *opt);                       /* NULL: no-op */
/* Saves the optimizer's state (SGD momentum buffers; Adam moments and per-parameter step
 * counts; the learning rate) to a safetensors file; mt_optim_load restores it into an
 * optimizer of the same kind over parameters of the same shapes. */
MT_API mt_status mt_optim_save(const mt_optimizer *opt, const char *path);
MT_API mt_status mt_optim_load(mt_optimizer *opt, const char *path);
/* Scales the gradients of params (n entries, borrowed) so that their global L2 norm is at
 * most max_norm (as torch.nn.utils.clip_grad_norm_, eps 1e-6); *out_norm (may be NULL)
 * receives the norm before clipping as a 0-d tensor on the device. Does not synchronize. */
MT_API mt_status mt_clip_grad_norm(mt_tensor **out_norm, mt_tensor *const *params, int64_t n, double max_norm);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* MINITORCH_MINITORCH_H_INCLUDED */
