/*
 * nn.h - layers for C programs over minitorch.h, so that a program need not re-derive
 * them: Linear and Conv2d layers with torch.nn's default initialisation, the activations,
 * max and average pooling, BatchNorm2d (train and eval modes), Flatten, and a small
 * Sequential that runs a list of them and hands its parameters to mt_optim_*.
 * Header-only C99; needs nothing but minitorch.h, <math.h> and <stdio.h>.
 *
 * Contents: parameters (nn_uniform_param), Linear, Conv2d, BatchNorm2d, activations and
 * the parameter-free layers, Sequential.
 *
 * Errors are reported as in minitorch.h: each fallible function returns mt_status (MT_OK
 * == 0); on failure a handle output is NULL, whatever the function had made so far is
 * released, and mt_last_error() says why. The few checks these helpers make themselves
 * (a layer size below 1, more than NN_MAX_LAYERS layers, an unknown kind) return
 * MT_ERR_INVALID_ARGUMENT after printing the reason on stderr, prefixed "nn: ", since
 * mt_last_error() only speaks for the library's own calls.
 *
 * Ownership, in one sentence per kind of pointer:
 *  - mt_tensor **out: the caller owns one new reference; release it with
 *    mt_tensor_release().
 *  - mt_tensor * inputs (x): borrowed for the duration of the call.
 *  - nn_linear / nn_conv2d / nn_batch_norm2d / nn_sequential: the struct (caller's memory,
 *    usually on the stack) owns the parameter and buffer tensors it holds, from a
 *    successful *_init until *_free; the handles read out of it (layer.weight,
 *    nn_sequential_parameters) are borrowed and stay valid until *_free. An optimizer made
 *    from them takes its own references.
 *  - const nn_spec *: borrowed for the call, copied.
 *
 * A worked example: the XOR network Linear(2,4) -> Sigmoid -> Linear(4,1).
 *
 *   const nn_spec spec[3] = {nn_linear_spec(2, 4), nn_plain_spec(NN_SIGMOID), nn_linear_spec(4, 1)};
 *   nn_sequential net;
 *   mt_tensor *params[NN_MAX_PARAMS], *pred;
 *   mt_optimizer *opt;
 *   int n;
 *   nn_sequential_init(&net, spec, 3, 1, dev);           // Linear seeds 1 and 3 (biases 2, 4)
 *   n = nn_sequential_parameters(&net, params, NN_MAX_PARAMS);   // borrowed: w1, b1, w2, b2
 *   mt_optim_sgd(&opt, params, n, 0.5, 0.0, 0.0, 0);
 *   nn_sequential_forward(&pred, &net, x);              // x borrowed; pred is the caller's
 *   ... mt_tensor_release(pred); mt_optim_free(opt); nn_sequential_free(&net);
 *
 * A convolutional network is the same list; conv, pool and batch-norm layers take NCHW
 * input (x [N, 1, 28, 28] here):
 *
 *   const nn_spec cnn[5] = {nn_conv2d_spec(1, 8, 3, 1, 1), nn_plain_spec(NN_RELU),
 *                           nn_pool2d_spec(NN_MAX_POOL2D, 2), nn_plain_spec(NN_FLATTEN),
 *                           nn_linear_spec(8 * 14 * 14, 10)};
 *   nn_sequential_train(&net, 0);    // eval mode: BatchNorm2d layers use running statistics
 */
#ifndef MINITORCH_DEMO_NN_H
#define MINITORCH_DEMO_NN_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "minitorch.h"

/* ---------------------------------------------------------------- parameters */

/* *t = a new float32 leaf of the given shape on device, drawn from U(-bound, bound) with
 * mt_init_uniform keyed by seed (the same seed gives the same values on every device), that
 * requires grad. shape is borrowed; the caller releases *t; on failure *t is NULL. */
static inline mt_status nn_uniform_param(mt_tensor **t, const int64_t *shape, int64_t ndim, double bound,
                                         int64_t seed, mt_device device) {
  mt_status st;
  *t = NULL;
  if ((st = mt_tensor_zeros(t, shape, ndim, MT_F32, device)) != MT_OK ||
      (st = mt_init_uniform(*t, -bound, bound, seed)) != MT_OK ||
      (st = mt_tensor_set_requires_grad(*t, 1)) != MT_OK) {
    mt_tensor_release(*t);
    *t = NULL;
  }
  return st;
}

/* ---------------------------------------------------------------- Linear */

/* y = x weight^T + bias, as torch.nn.Linear(in, out). */
typedef struct nn_linear {
  mt_tensor *weight; /* [out, in] float32, requires grad; owned by the struct */
  mt_tensor *bias;   /* [out] float32, requires grad; owned by the struct */
  int64_t in, out;
} nn_linear;

/* Releases weight and bias (either may be NULL) and sets them to NULL; a second call is a
 * no-op. Returns the first failure of mt_tensor_release, else MT_OK. */
static inline mt_status nn_linear_free(nn_linear *l) {
  mt_status sw = mt_tensor_release(l->weight), sb = mt_tensor_release(l->bias);
  l->weight = l->bias = NULL;
  return sw != MT_OK ? sw : sb;
}

/* New float32 weight [out, in] and bias [out] on device with torch.nn.Linear's default
 * initialisation, U(-1/sqrt(in), 1/sqrt(in)) for both, drawn with mt_init_uniform from the
 * counter-based stream: the weight keyed by seed, the bias by seed + 1 (so the same seed
 * gives the same layer on every device). Both are leaves that require grad. The caller
 * releases them with nn_linear_free(l); on failure l holds NULL handles. */
static inline mt_status nn_linear_init(nn_linear *l, int64_t in, int64_t out, int64_t seed, mt_device device) {
  int64_t ws[2], bs[1];
  double bound;
  mt_status st;
  l->weight = l->bias = NULL;
  l->in = in;
  l->out = out;
  if (in < 1 || out < 1) {
    fprintf(stderr, "nn: nn_linear_init: in and out must be >= 1, got %lld and %lld\n", (long long)in, (long long)out);
    return MT_ERR_INVALID_ARGUMENT;
  }
  ws[0] = out;
  ws[1] = in;
  bs[0] = out;
  bound = 1.0 / sqrt((double)in);
  if ((st = nn_uniform_param(&l->weight, ws, 2, bound, seed, device)) != MT_OK ||
      (st = nn_uniform_param(&l->bias, bs, 1, bound, seed + 1, device)) != MT_OK) {
    nn_linear_free(l);
    return st;
  }
  return MT_OK;
}

/* *out = x weight^T + bias: x [..., in] -> [..., out], recorded on the tape when grad is
 * enabled. x and l are borrowed; the caller releases *out. */
static inline mt_status nn_linear_forward(mt_tensor **out, const nn_linear *l, mt_tensor *x) {
  return mt_linear(out, x, l->weight, l->bias);
}

/* ---------------------------------------------------------------- Conv2d */

/* out = x (*) weight + bias over NCHW input, as torch.nn.Conv2d(in, out, kernel, stride,
 * padding) with square kernels: x [N, in, H, W] -> [N, out, Ho, Wo]. */
typedef struct nn_conv2d {
  mt_tensor *weight; /* [out, in, kernel, kernel] float32, requires grad; owned by the struct */
  mt_tensor *bias;   /* [out] float32, requires grad; owned by the struct */
  int64_t in, out, kernel, stride, padding;
} nn_conv2d;

/* Releases weight and bias (either may be NULL) and sets them to NULL; a second call is a
 * no-op. Returns the first failure of mt_tensor_release, else MT_OK. */
static inline mt_status nn_conv2d_free(nn_conv2d *c) {
  mt_status sw = mt_tensor_release(c->weight), sb = mt_tensor_release(c->bias);
  c->weight = c->bias = NULL;
  return sw != MT_OK ? sw : sb;
}

/* New float32 weight [out, in, kernel, kernel] and bias [out] on device with
 * torch.nn.Conv2d's default initialisation: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both,
 * fan_in = in * kernel * kernel (kaiming_uniform with a = sqrt(5) gives that bound), the
 * weight keyed by seed and the bias by seed + 1, as nn_linear_init. stride >= 1 and
 * padding >= 0. The caller releases them with nn_conv2d_free(c); on failure c holds NULL
 * handles. */
static inline mt_status nn_conv2d_init(nn_conv2d *c, int64_t in, int64_t out, int64_t kernel, int64_t stride,
                                       int64_t padding, int64_t seed, mt_device device) {
  int64_t ws[4], bs[1];
  double bound;
  mt_status st;
  c->weight = c->bias = NULL;
  c->in = in;
  c->out = out;
  c->kernel = kernel;
  c->stride = stride;
  c->padding = padding;
  if (in < 1 || out < 1 || kernel < 1 || stride < 1 || padding < 0) {
    fprintf(stderr,
            "nn: nn_conv2d_init: expected in, out, kernel, stride >= 1 and padding >= 0, got in %lld, out %lld, "
            "kernel %lld, stride %lld, padding %lld\n",
            (long long)in, (long long)out, (long long)kernel, (long long)stride, (long long)padding);
    return MT_ERR_INVALID_ARGUMENT;
  }
  ws[0] = out;
  ws[1] = in;
  ws[2] = ws[3] = kernel;
  bs[0] = out;
  bound = 1.0 / sqrt((double)(in * kernel * kernel));
  if ((st = nn_uniform_param(&c->weight, ws, 4, bound, seed, device)) != MT_OK ||
      (st = nn_uniform_param(&c->bias, bs, 1, bound, seed + 1, device)) != MT_OK) {
    nn_conv2d_free(c);
    return st;
  }
  return MT_OK;
}

/* *out = conv2d(x, weight, bias, stride, padding): x [N, in, H, W] -> [N, out, Ho, Wo],
 * recorded on the tape when grad is enabled. x and c are borrowed; the caller releases *out. */
static inline mt_status nn_conv2d_forward(mt_tensor **out, const nn_conv2d *c, mt_tensor *x) {
  return mt_conv2d(out, x, c->weight, c->bias, c->stride, c->padding);
}

/* ---------------------------------------------------------------- BatchNorm2d */

/* torch.nn.BatchNorm2d(channels) (affine, tracking running statistics, momentum 0.1,
 * eps 1e-5) over x [N, C, H, W] (or [N, C]). */
typedef struct nn_batch_norm2d {
  mt_tensor *gamma, *beta;                /* [C] float32 ones and zeros, require grad; owned */
  mt_tensor *running_mean, *running_var; /* [C] float32 zeros and ones, no grad; owned */
  int64_t channels;
  double momentum, eps;
} nn_batch_norm2d;

/* Releases the four tensors (any may be NULL) and sets them to NULL; a second call is a
 * no-op. Returns the first failure of mt_tensor_release, else MT_OK. */
static inline mt_status nn_batch_norm2d_free(nn_batch_norm2d *b) {
  mt_tensor *const t[4] = {b->gamma, b->beta, b->running_mean, b->running_var};
  mt_status first = MT_OK, st;
  int i;
  for (i = 0; i < 4; i++) {
    st = mt_tensor_release(t[i]);
    if (first == MT_OK) first = st;
  }
  b->gamma = b->beta = b->running_mean = b->running_var = NULL;
  return first;
}

/* New gamma (ones) and beta (zeros), leaves that require grad, and running statistics
 * (mean zeros, variance ones) of channels entries on device, momentum 0.1, eps 1e-5, as
 * torch.nn.BatchNorm2d(channels). The caller releases them with nn_batch_norm2d_free(b); on
 * failure b holds NULL handles. */
static inline mt_status nn_batch_norm2d_init(nn_batch_norm2d *b, int64_t channels, mt_device device) {
  int64_t cs[1];
  mt_status st;
  b->gamma = b->beta = b->running_mean = b->running_var = NULL;
  b->channels = channels;
  b->momentum = 0.1;
  b->eps = 1e-5;
  if (channels < 1) {
    fprintf(stderr, "nn: nn_batch_norm2d_init: channels must be >= 1, got %lld\n", (long long)channels);
    return MT_ERR_INVALID_ARGUMENT;
  }
  cs[0] = channels;
  if ((st = mt_tensor_ones(&b->gamma, cs, 1, MT_F32, device)) != MT_OK ||
      (st = mt_tensor_set_requires_grad(b->gamma, 1)) != MT_OK ||
      (st = mt_tensor_zeros(&b->beta, cs, 1, MT_F32, device)) != MT_OK ||
      (st = mt_tensor_set_requires_grad(b->beta, 1)) != MT_OK ||
      (st = mt_tensor_zeros(&b->running_mean, cs, 1, MT_F32, device)) != MT_OK ||
      (st = mt_tensor_ones(&b->running_var, cs, 1, MT_F32, device)) != MT_OK) {
    nn_batch_norm2d_free(b);
    return st;
  }
  return MT_OK;
}

/* *out = the normalized x, recorded on the tape when grad is enabled. training != 0 (torch's
 * model.train()): the batch statistics normalize x and the running statistics are updated in
 * place; training == 0 (model.eval()): the running statistics normalize x. x and b are
 * borrowed; the caller releases *out. */
static inline mt_status nn_batch_norm2d_forward(mt_tensor **out, const nn_batch_norm2d *b, mt_tensor *x,
                                                int training) {
  return mt_batch_norm(out, x, b->gamma, b->beta, b->running_mean, b->running_var, training ? 1 : 0, b->momentum,
                       b->eps);
}

/* ---------------------------------------------------------------- activations and parameter-free layers */

/* What a layer of a Sequential is. */
typedef enum nn_kind {
  NN_LINEAR = 0,
  NN_RELU = 1,
  NN_SIGMOID = 2,
  NN_TANH = 3,
  NN_CONV2D = 4,
  NN_MAX_POOL2D = 5,
  NN_AVG_POOL2D = 6,
  NN_BATCH_NORM2D = 7,
  NN_FLATTEN = 8
} nn_kind;

/* "Linear", "ReLU", "Sigmoid", "Tanh", "Conv2d", "MaxPool2d", "AvgPool2d", "BatchNorm2d",
 * "Flatten" (static), or "?" for another value. */
static inline const char *nn_kind_name(nn_kind kind) {
  switch (kind) {
    case NN_LINEAR: return "Linear";
    case NN_RELU: return "ReLU";
    case NN_SIGMOID: return "Sigmoid";
    case NN_TANH: return "Tanh";
    case NN_CONV2D: return "Conv2d";
    case NN_MAX_POOL2D: return "MaxPool2d";
    case NN_AVG_POOL2D: return "AvgPool2d";
    case NN_BATCH_NORM2D: return "BatchNorm2d";
    case NN_FLATTEN: return "Flatten";
  }
  return "?";
}

/* *out = relu(x), sigmoid(x) or tanh(x), elementwise (kind NN_RELU, NN_SIGMOID, NN_TANH;
 * another kind is MT_ERR_INVALID_ARGUMENT). x is borrowed; the caller releases *out. */
static inline mt_status nn_activation(mt_tensor **out, nn_kind kind, mt_tensor *x) {
  switch (kind) {
    case NN_RELU: return mt_relu(out, x);
    case NN_SIGMOID: return mt_sigmoid(out, x);
    case NN_TANH: return mt_tanh(out, x);
    default: break;
  }
  *out = NULL;
  fprintf(stderr, "nn: nn_activation: %s (kind %d) is not an activation\n", nn_kind_name(kind), (int)kind);
  return MT_ERR_INVALID_ARGUMENT;
}

/* *out = x [N, ...] as [N, rest], a view (torch.nn.Flatten()). x is borrowed; the caller
 * releases *out. */
static inline mt_status nn_flatten(mt_tensor **out, mt_tensor *x) {
  int64_t ndim, shape[16], flat[2];
  mt_status st;
  *out = NULL;
  if ((st = mt_tensor_ndim(x, &ndim)) != MT_OK) return st;
  if (ndim < 1 || ndim > 16) {
    fprintf(stderr, "nn: nn_flatten: expected a tensor of 1 to 16 dims, got %lld\n", (long long)ndim);
    return MT_ERR_INVALID_ARGUMENT;
  }
  if ((st = mt_tensor_shape(x, shape)) != MT_OK) return st;
  flat[0] = shape[0];
  flat[1] = -1;
  return mt_reshape(out, x, flat, 2);
}

/* ---------------------------------------------------------------- Sequential */

#define NN_MAX_LAYERS 16
#define NN_MAX_PARAMS (2 * NN_MAX_LAYERS)

/* One layer as the caller describes it; each kind reads its own fields:
 *   NN_LINEAR        in, out
 *   NN_CONV2D        in, out (channels), kernel, stride, padding
 *   NN_MAX_POOL2D,
 *   NN_AVG_POOL2D    kernel, stride (0: the kernel, as torch's default)
 *   NN_BATCH_NORM2D  in (channels)
 *   the activations, NN_FLATTEN: nothing.
 * The nn_*_spec() functions below fill every field. */
typedef struct nn_spec {
  nn_kind kind;
  int64_t in, out;
  int64_t kernel, stride, padding;
} nn_spec;

static inline nn_spec nn_spec_make(nn_kind kind, int64_t in, int64_t out, int64_t kernel, int64_t stride,
                                   int64_t padding) {
  nn_spec s;
  s.kind = kind;
  s.in = in;
  s.out = out;
  s.kernel = kernel;
  s.stride = stride;
  s.padding = padding;
  return s;
}
/* Linear(in, out) */
static inline nn_spec nn_linear_spec(int64_t in, int64_t out) { return nn_spec_make(NN_LINEAR, in, out, 0, 0, 0); }
/* Conv2d(in, out, kernel, stride, padding) */
static inline nn_spec nn_conv2d_spec(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
  return nn_spec_make(NN_CONV2D, in, out, kernel, stride, padding);
}
/* MaxPool2d(kernel) or AvgPool2d(kernel) (kind NN_MAX_POOL2D or NN_AVG_POOL2D), stride = kernel */
static inline nn_spec nn_pool2d_spec(nn_kind kind, int64_t kernel) { return nn_spec_make(kind, 0, 0, kernel, kernel, 0); }
/* BatchNorm2d(channels) */
static inline nn_spec nn_batch_norm2d_spec(int64_t channels) {
  return nn_spec_make(NN_BATCH_NORM2D, channels, 0, 0, 0, 0);
}
/* An activation or Flatten: a kind without sizes. */
static inline nn_spec nn_plain_spec(nn_kind kind) { return nn_spec_make(kind, 0, 0, 0, 0, 0); }

/* One layer of a Sequential: linear, conv or bn is set (and owned) when kind is NN_LINEAR,
 * NN_CONV2D or NN_BATCH_NORM2D; spec is the caller's description (pool sizes with the
 * stride filled in). */
typedef struct nn_layer {
  nn_kind kind;
  nn_spec spec;
  nn_linear linear;
  nn_conv2d conv;
  nn_batch_norm2d bn;
} nn_layer;

/* Layers run in order, as torch.nn.Sequential; owns the parameters (and BatchNorm running
 * statistics) of its layers. training (1 after init) is torch's module.training: set it
 * with nn_sequential_train. */
typedef struct nn_sequential {
  int n;
  int training;
  nn_layer layer[NN_MAX_LAYERS];
} nn_sequential;

/* Releases the tensors of every layer and leaves s empty (n = 0); a second call is a no-op.
 * Returns the first failure of mt_tensor_release, else MT_OK. */
static inline mt_status nn_sequential_free(nn_sequential *s) {
  mt_status first = MT_OK, st;
  int i;
  for (i = 0; i < s->n; i++) {
    nn_layer *l = &s->layer[i];
    if (l->kind == NN_LINEAR) st = nn_linear_free(&l->linear);
    else if (l->kind == NN_CONV2D) st = nn_conv2d_free(&l->conv);
    else if (l->kind == NN_BATCH_NORM2D) st = nn_batch_norm2d_free(&l->bn);
    else continue;
    if (first == MT_OK) first = st;
  }
  s->n = 0;
  return first;
}

/* Builds the n layers of spec (n from 0 to NN_MAX_LAYERS) on device. The k-th layer with
 * weights (k = 0, 1, ... counting Linear and Conv2d layers only) is initialised with seed
 * + 2k: its weight is keyed by seed + 2k and its bias by seed + 2k + 1. BatchNorm2d layers
 * start as torch's (gamma 1, beta 0, running mean 0, variance 1). s starts in training
 * mode. spec is borrowed. The caller releases the tensors with nn_sequential_free(s); on
 * failure s is left empty (n = 0) with nothing to release. */
static inline mt_status nn_sequential_init(nn_sequential *s, const nn_spec *spec, int n, int64_t seed,
                                           mt_device device) {
  int i;
  int64_t k = 0;
  mt_status st;
  s->n = 0;
  s->training = 1;
  if (n < 0 || n > NN_MAX_LAYERS) {
    fprintf(stderr, "nn: nn_sequential_init: %d layers, expected 0 to %d (NN_MAX_LAYERS)\n", n, NN_MAX_LAYERS);
    return MT_ERR_INVALID_ARGUMENT;
  }
  for (i = 0; i < n; i++) {
    nn_layer *l = &s->layer[i];
    l->kind = spec[i].kind;
    l->spec = spec[i];
    l->linear.weight = l->linear.bias = NULL;
    l->linear.in = l->linear.out = 0;
    l->conv.weight = l->conv.bias = NULL;
    l->bn.gamma = l->bn.beta = l->bn.running_mean = l->bn.running_var = NULL;
    switch (spec[i].kind) {
      case NN_LINEAR:
        st = nn_linear_init(&l->linear, spec[i].in, spec[i].out, seed + 2 * k++, device);
        break;
      case NN_CONV2D:
        st = nn_conv2d_init(&l->conv, spec[i].in, spec[i].out, spec[i].kernel, spec[i].stride, spec[i].padding,
                            seed + 2 * k++, device);
        break;
      case NN_BATCH_NORM2D:
        st = nn_batch_norm2d_init(&l->bn, spec[i].in, device);
        break;
      case NN_MAX_POOL2D:
      case NN_AVG_POOL2D:
        if (l->spec.stride == 0) l->spec.stride = l->spec.kernel;
        st = MT_OK;
        if (l->spec.kernel < 1 || l->spec.stride < 1) {
          fprintf(stderr, "nn: nn_sequential_init: layer %d (%s) needs kernel >= 1 and stride >= 0 (0: the kernel), got %lld and %lld\n",
                  i, nn_kind_name(spec[i].kind), (long long)spec[i].kernel, (long long)spec[i].stride);
          st = MT_ERR_INVALID_ARGUMENT;
        }
        break;
      case NN_RELU:
      case NN_SIGMOID:
      case NN_TANH:
      case NN_FLATTEN:
        st = MT_OK;
        break;
      default:
        fprintf(stderr, "nn: nn_sequential_init: layer %d has the unknown kind %d\n", i, (int)spec[i].kind);
        st = MT_ERR_INVALID_ARGUMENT;
        break;
    }
    if (st != MT_OK) {
      nn_sequential_free(s); /* the layers before i; layer i holds nothing */
      return st;
    }
    s->n = i + 1;
  }
  return MT_OK;
}

/* Sets training mode (training != 0, torch's model.train()) or evaluation mode (0,
 * model.eval()); only BatchNorm2d layers behave differently. */
static inline void nn_sequential_train(nn_sequential *s, int training) { s->training = training ? 1 : 0; }

/* *out = layer l's output for x, recorded on the tape when grad is enabled. x and l are
 * borrowed; the caller releases *out. */
static inline mt_status nn_layer_forward(mt_tensor **out, const nn_layer *l, mt_tensor *x, int training) {
  switch (l->kind) {
    case NN_LINEAR: return nn_linear_forward(out, &l->linear, x);
    case NN_CONV2D: return nn_conv2d_forward(out, &l->conv, x);
    case NN_BATCH_NORM2D: return nn_batch_norm2d_forward(out, &l->bn, x, training);
    case NN_MAX_POOL2D: return mt_max_pool2d(out, x, l->spec.kernel, l->spec.stride);
    case NN_AVG_POOL2D: return mt_avg_pool2d(out, x, l->spec.kernel, l->spec.stride);
    case NN_FLATTEN: return nn_flatten(out, x);
    default: return nn_activation(out, l->kind, x);
  }
}

/* *out = the last layer's output for input x, recorded on the tape when grad is enabled.
 * The intermediate outputs are released as soon as the next layer has read them (the
 * tape keeps what backward needs); with no layers *out is x with a new reference. x and s
 * are borrowed; the caller releases *out. */
static inline mt_status nn_sequential_forward(mt_tensor **out, const nn_sequential *s, mt_tensor *x) {
  mt_tensor *cur = x, *next;
  mt_status st;
  int i;
  *out = NULL;
  if (s->n == 0) {
    st = mt_tensor_retain(x);
    if (st == MT_OK) *out = x;
    return st;
  }
  for (i = 0; i < s->n; i++) {
    st = nn_layer_forward(&next, &s->layer[i], cur, s->training);
    if (cur != x) mt_tensor_release(cur);
    if (st != MT_OK) return st;
    cur = next;
  }
  *out = cur;
  return MT_OK;
}

/* The two parameters of layer l (weight and bias, or gamma and beta) in p[0], p[1]; returns
 * 2, or 0 for a layer without parameters. Borrowed from the layer. */
static inline int nn_layer_parameters(const nn_layer *l, mt_tensor **p) {
  switch (l->kind) {
    case NN_LINEAR: p[0] = l->linear.weight; p[1] = l->linear.bias; return 2;
    case NN_CONV2D: p[0] = l->conv.weight; p[1] = l->conv.bias; return 2;
    case NN_BATCH_NORM2D: p[0] = l->bn.gamma; p[1] = l->bn.beta; return 2;
    default: return 0;
  }
}

/* Writes the parameters, in layer order (weight then bias of each Linear and Conv2d layer,
 * gamma then beta of each BatchNorm2d layer), to params[0 .. min(count, cap) - 1] and
 * returns count, the number s holds (at most NN_MAX_PARAMS): pass params and count to
 * mt_optim_*. The handles are borrowed from s (do not release them; they stay valid until
 * nn_sequential_free). BatchNorm running statistics are buffers, not parameters. */
static inline int nn_sequential_parameters(const nn_sequential *s, mt_tensor **params, int cap) {
  int i, j, n, count = 0;
  mt_tensor *p[2];
  for (i = 0; i < s->n; i++) {
    n = nn_layer_parameters(&s->layer[i], p);
    for (j = 0; j < n; j++, count++)
      if (count < cap) params[count] = p[j];
  }
  return count;
}

/* The number of scalar parameters: the elements of every tensor nn_sequential_parameters
 * lists. */
static inline int64_t nn_sequential_numel(const nn_sequential *s) {
  int64_t total = 0;
  int i;
  for (i = 0; i < s->n; i++) {
    const nn_layer *l = &s->layer[i];
    if (l->kind == NN_LINEAR) total += l->linear.in * l->linear.out + l->linear.out;
    else if (l->kind == NN_CONV2D) total += (l->conv.in * l->conv.kernel * l->conv.kernel + 1) * l->conv.out;
    else if (l->kind == NN_BATCH_NORM2D) total += 2 * l->bn.channels;
  }
  return total;
}

/* Writes the layers as text, e.g. "Conv2d(1,8,k3,p1) -> ReLU -> MaxPool2d(2) -> Flatten ->
 * Linear(784,64)", into buf (cap bytes, NUL included; truncated to fit). Returns buf. */
static inline char *nn_sequential_describe(const nn_sequential *s, char *buf, size_t cap) {
  size_t used = 0;
  int i, w;
  if (cap == 0) return buf;
  buf[0] = '\0';
  for (i = 0; i < s->n && used < cap; i++) {
    const nn_spec *p = &s->layer[i].spec;
    const char *sep = i ? " -> " : "", *name = nn_kind_name(p->kind);
    char *at = buf + used;
    size_t room = cap - used;
    switch (p->kind) {
      case NN_LINEAR: w = snprintf(at, room, "%s%s(%lld,%lld)", sep, name, (long long)p->in, (long long)p->out); break;
      case NN_CONV2D:
        w = p->stride == 1
                ? snprintf(at, room, "%s%s(%lld,%lld,k%lld,p%lld)", sep, name, (long long)p->in, (long long)p->out,
                           (long long)p->kernel, (long long)p->padding)
                : snprintf(at, room, "%s%s(%lld,%lld,k%lld,s%lld,p%lld)", sep, name, (long long)p->in,
                           (long long)p->out, (long long)p->kernel, (long long)p->stride, (long long)p->padding);
        break;
      case NN_MAX_POOL2D:
      case NN_AVG_POOL2D:
        w = p->stride == p->kernel ? snprintf(at, room, "%s%s(%lld)", sep, name, (long long)p->kernel)
                                   : snprintf(at, room, "%s%s(%lld,s%lld)", sep, name, (long long)p->kernel,
                                              (long long)p->stride);
        break;
      case NN_BATCH_NORM2D: w = snprintf(at, room, "%s%s(%lld)", sep, name, (long long)p->in); break;
      default: w = snprintf(at, room, "%s%s", sep, name); break;
    }
    if (w < 0) break;
    used += (size_t)w < room ? (size_t)w : room - 1;
  }
  return buf;
}

#endif
