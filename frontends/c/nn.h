/*
 * nn.h - layers for C programs over minitorch.h, so that a program need not re-derive
 * them: a Linear layer with torch.nn.Linear's default initialisation, the activations,
 * and a small Sequential that runs a list of them and hands its parameters to mt_optim_*.
 * Header-only C99; needs nothing but minitorch.h, <math.h> and <stdio.h>.
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
 *  - nn_linear / nn_sequential: the struct (caller's memory, usually on the stack) owns
 *    the parameter tensors it holds, from a successful *_init until *_free; the
 *    handles read out of it (layer.weight, nn_sequential_parameters) are borrowed and
 *    stay valid until *_free. An optimizer made from them takes its own references.
 *  - const nn_spec *: borrowed for the call, copied.
 *
 * A worked example: the XOR network Linear(2,4) -> Sigmoid -> Linear(4,1).
 *
 *   const nn_spec spec[3] = {{NN_LINEAR, 2, 4}, {NN_SIGMOID, 0, 0}, {NN_LINEAR, 4, 1}};
 *   nn_sequential net;
 *   mt_tensor *params[NN_MAX_PARAMS], *pred;
 *   mt_optimizer *opt;
 *   int n;
 *   nn_sequential_init(&net, spec, 3, 1, dev);           // Linear seeds 1 and 3 (biases 2, 4)
 *   n = nn_sequential_parameters(&net, params, NN_MAX_PARAMS);   // borrowed: w1, b1, w2, b2
 *   mt_optim_sgd(&opt, params, n, 0.5, 0.0, 0.0, 0);
 *   nn_sequential_forward(&pred, &net, x);              // x borrowed; pred is the caller's
 *   ... mt_tensor_release(pred); mt_optim_free(opt); nn_sequential_free(&net);
 */
#ifndef MINITORCH_DEMO_NN_H
#define MINITORCH_DEMO_NN_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "minitorch.h"

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
  if ((st = mt_tensor_zeros(&l->weight, ws, 2, MT_F32, device)) != MT_OK ||
      (st = mt_init_uniform(l->weight, -bound, bound, seed)) != MT_OK ||
      (st = mt_tensor_set_requires_grad(l->weight, 1)) != MT_OK ||
      (st = mt_tensor_zeros(&l->bias, bs, 1, MT_F32, device)) != MT_OK ||
      (st = mt_init_uniform(l->bias, -bound, bound, seed + 1)) != MT_OK ||
      (st = mt_tensor_set_requires_grad(l->bias, 1)) != MT_OK) {
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

/* ---------------------------------------------------------------- activations */

/* What a layer of a Sequential is. */
typedef enum nn_kind { NN_LINEAR = 0, NN_RELU = 1, NN_SIGMOID = 2, NN_TANH = 3 } nn_kind;

/* "Linear", "ReLU", "Sigmoid", "Tanh" (static), or "?" for another value. */
static inline const char *nn_kind_name(nn_kind kind) {
  switch (kind) {
    case NN_LINEAR: return "Linear";
    case NN_RELU: return "ReLU";
    case NN_SIGMOID: return "Sigmoid";
    case NN_TANH: return "Tanh";
  }
  return "?";
}

/* *out = relu(x), sigmoid(x) or tanh(x), elementwise (kind NN_RELU, NN_SIGMOID, NN_TANH;
 * NN_LINEAR or another value is MT_ERR_INVALID_ARGUMENT). x is borrowed; the caller
 * releases *out. */
static inline mt_status nn_activation(mt_tensor **out, nn_kind kind, mt_tensor *x) {
  switch (kind) {
    case NN_RELU: return mt_relu(out, x);
    case NN_SIGMOID: return mt_sigmoid(out, x);
    case NN_TANH: return mt_tanh(out, x);
    case NN_LINEAR: break;
  }
  *out = NULL;
  fprintf(stderr, "nn: nn_activation: %s (kind %d) is not an activation\n", nn_kind_name(kind), (int)kind);
  return MT_ERR_INVALID_ARGUMENT;
}

/* ---------------------------------------------------------------- Sequential */

#define NN_MAX_LAYERS 16
#define NN_MAX_PARAMS (2 * NN_MAX_LAYERS)

/* One layer as the caller describes it: in and out are read for NN_LINEAR only. */
typedef struct nn_spec {
  nn_kind kind;
  int64_t in, out;
} nn_spec;

/* One layer of a Sequential: linear is set (and owned) when kind is NN_LINEAR. */
typedef struct nn_layer {
  nn_kind kind;
  nn_linear linear;
} nn_layer;

/* Layers run in order, as torch.nn.Sequential; owns the parameters of its Linear layers. */
typedef struct nn_sequential {
  int n;
  nn_layer layer[NN_MAX_LAYERS];
} nn_sequential;

/* Releases the parameters of every Linear layer and leaves s empty (n = 0); a second call
 * is a no-op. Returns the first failure of mt_tensor_release, else MT_OK. */
static inline mt_status nn_sequential_free(nn_sequential *s) {
  mt_status first = MT_OK, st;
  int i;
  for (i = 0; i < s->n; i++) {
    if (s->layer[i].kind != NN_LINEAR) continue;
    st = nn_linear_free(&s->layer[i].linear);
    if (first == MT_OK) first = st;
  }
  s->n = 0;
  return first;
}

/* Builds the n layers of spec (n from 0 to NN_MAX_LAYERS) on device. The k-th Linear layer
 * (k = 0, 1, ... counting Linear layers only) is nn_linear_init(in, out, seed + 2k): its
 * weight is keyed by seed + 2k and its bias by seed + 2k + 1. spec is borrowed. The caller
 * releases the parameters with nn_sequential_free(s); on failure s is left empty (n = 0)
 * with nothing to release. */
static inline mt_status nn_sequential_init(nn_sequential *s, const nn_spec *spec, int n, int64_t seed,
                                           mt_device device) {
  int i;
  int64_t k = 0;
  mt_status st;
  s->n = 0;
  if (n < 0 || n > NN_MAX_LAYERS) {
    fprintf(stderr, "nn: nn_sequential_init: %d layers, expected 0 to %d (NN_MAX_LAYERS)\n", n, NN_MAX_LAYERS);
    return MT_ERR_INVALID_ARGUMENT;
  }
  for (i = 0; i < n; i++) {
    nn_layer *l = &s->layer[i];
    l->kind = spec[i].kind;
    l->linear.weight = l->linear.bias = NULL;
    l->linear.in = l->linear.out = 0;
    switch (spec[i].kind) {
      case NN_LINEAR:
        st = nn_linear_init(&l->linear, spec[i].in, spec[i].out, seed + 2 * k++, device);
        break;
      case NN_RELU:
      case NN_SIGMOID:
      case NN_TANH:
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
    const nn_layer *l = &s->layer[i];
    st = l->kind == NN_LINEAR ? nn_linear_forward(&next, &l->linear, cur) : nn_activation(&next, l->kind, cur);
    if (cur != x) mt_tensor_release(cur);
    if (st != MT_OK) return st;
    cur = next;
  }
  *out = cur;
  return MT_OK;
}

/* Writes the parameters, in layer order (weight, then bias of each Linear layer), to
 * params[0 .. min(count, cap) - 1] and returns count, the number s holds (at most
 * NN_MAX_PARAMS): pass params and count to mt_optim_*. The handles are borrowed from s
 * (do not release them; they stay valid until nn_sequential_free). */
static inline int nn_sequential_parameters(const nn_sequential *s, mt_tensor **params, int cap) {
  int i, count = 0;
  for (i = 0; i < s->n; i++) {
    if (s->layer[i].kind != NN_LINEAR) continue;
    if (count < cap) params[count] = s->layer[i].linear.weight;
    count++;
    if (count < cap) params[count] = s->layer[i].linear.bias;
    count++;
  }
  return count;
}

/* The number of scalar parameters: in * out + out summed over the Linear layers. */
static inline int64_t nn_sequential_numel(const nn_sequential *s) {
  int64_t total = 0;
  int i;
  for (i = 0; i < s->n; i++)
    if (s->layer[i].kind == NN_LINEAR) total += s->layer[i].linear.in * s->layer[i].linear.out + s->layer[i].linear.out;
  return total;
}

#endif
