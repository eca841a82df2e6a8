/*
 * gpt.h - a GPT (decoder-only transformer) for C programs over minitorch.h, in nn.h's
 * conventions: pre-LN blocks x + attn(ln_1(x)), x + mlp(ln_2(x)) with a 4x GELU MLP, token and
 * learned position embeddings, a final LayerNorm and a vocabulary head (a Linear without bias,
 * optionally tied to the token embedding). Attention is multi-head and causal: one fused qkv
 * Linear whose heads mt_self_attention reads in place (float32), or, with cfg.bf16_attention,
 * reshaped to [B, H, T, Dh] for mt_scaled_dot_product_attention in bfloat16 (gpt_attention).
 * Each residual add runs fused with the LayerNorm that reads its sum (mt_add_layer_norm), and
 * the MLP's first bias with its GELU (mt_bias_act).
 * Header-only C99; needs nn.h (and so minitorch.h, <math.h>, <stdio.h>) and <string.h>.
 *
 * Contents: gpt_config and the structs; gpt_free / gpt_init (GPT-2's initialisation);
 * gpt_forward (logits) and gpt_loss (cross-entropy); the parameter list with names and the
 * weight-decay split; gpt_save / gpt_load (safetensors).
 *
 * Errors as in nn.h: each fallible function returns mt_status; on failure a handle output is
 * NULL, whatever the function made is released, and mt_last_error() says why (the checks made
 * here print the reason on stderr, prefixed "gpt: ", and return MT_ERR_INVALID_ARGUMENT).
 *
 * Ownership, in one sentence per kind of pointer:
 *  - mt_tensor **out: the caller owns one new reference; release it with mt_tensor_release().
 *  - mt_tensor * inputs (idx, targets): borrowed for the duration of the call.
 *  - gpt: the struct (caller's memory) owns its parameter tensors from a successful gpt_init
 *    until gpt_free; g->params[] and g->names[] are borrowed from it and stay valid until then.
 *
 * Parameter names are those of the Python twin (frontends/python/minitorch/gpt.py), which are
 * nanoGPT's: wte.weight, wpe.weight, h.<i>.ln_1.weight, h.<i>.attn.c_attn.weight, ...,
 * ln_f.weight, ln_f.bias, lm_head.weight (absent when tied). Shapes as torch.nn.Linear's
 * ([out, in]), so a PyTorch state_dict saved as safetensors loads here as is.
 *
 *   gpt_config cfg = {65, 128, 2, 4, 64, 0, 0};         // vocab, context, layers, heads, d, tie, bf16 attention
 *   gpt g;
 *   gpt_init(&g, &cfg, 1, dev);
 *   gpt_loss(&loss, &logits, &g, idx, targets);         // idx [B,T] int64, targets [B*T] int64
 *   mt_backward(loss);
 *   ... mt_tensor_release(loss); mt_tensor_release(logits); gpt_free(&g);
 */
#ifndef MINITORCH_DEMO_GPT_H
#define MINITORCH_DEMO_GPT_H

#include <string.h>

#include "nn.h"

#define GPT_MAX_LAYERS 16
#define GPT_PARAMS_PER_BLOCK 12
/* wte, wpe, the blocks, ln_f.weight, ln_f.bias, lm_head.weight */
#define GPT_MAX_PARAMS (5 + GPT_PARAMS_PER_BLOCK * GPT_MAX_LAYERS)
#define GPT_NAME_CAP 40
#define GPT_LN_EPS 1e-5

typedef struct gpt_config {
  int64_t vocab;   /* V: tokens */
  int64_t context; /* the longest sequence (rows of wpe) */
  int64_t n_layer, n_head, d_model;
  int64_t tie;     /* 1: lm_head.weight is wte.weight */
  int64_t bf16_attention; /* 1: attention runs in bfloat16 (gpt_attention); how it runs, not part of the model */
} gpt_config;

typedef struct gpt_block {
  mt_tensor *ln1_w, *ln1_b, *ln2_w, *ln2_b; /* [D] each; owned */
  nn_linear qkv;     /* c_attn: D -> 3D, rows q, then k, then v (head h at rows h*Dh..) */
  nn_linear proj;    /* attn.c_proj: D -> D */
  nn_linear fc;      /* mlp.c_fc: D -> 4D */
  nn_linear fc_proj; /* mlp.c_proj: 4D -> D */
} gpt_block;

typedef struct gpt {
  gpt_config cfg;
  mt_tensor *wte;          /* [V, D]; owned */
  mt_tensor *wpe;          /* [context, D]; owned */
  mt_tensor *lnf_w, *lnf_b; /* [D]; owned */
  mt_tensor *head;         /* [V, D]; owned (a second reference to wte when tied) */
  mt_tensor *positions;    /* [context] int64 0..context-1, no grad; owned */
  gpt_block block[GPT_MAX_LAYERS];
  int n_params;                              /* entries of params / names */
  mt_tensor *params[GPT_MAX_PARAMS];         /* borrowed views of the handles above */
  char names[GPT_MAX_PARAMS][GPT_NAME_CAP];
} gpt;

/* ---------------------------------------------------------------- free / init */

/* Releases every tensor of g (NULL ones are skipped) and leaves it empty; a second call is a
 * no-op. Returns the first failure of mt_tensor_release, else MT_OK. */
static inline mt_status gpt_free(gpt *g) {
  mt_status first = MT_OK, st;
  mt_tensor *own[] = {g->wte, g->wpe, g->lnf_w, g->lnf_b, g->head, g->positions};
  size_t i;
  int l;
  for (i = 0; i < sizeof own / sizeof own[0]; i++) {
    st = mt_tensor_release(own[i]);
    if (first == MT_OK) first = st;
  }
  for (l = 0; l < GPT_MAX_LAYERS; l++) {
    gpt_block *b = &g->block[l];
    mt_tensor *ln[] = {b->ln1_w, b->ln1_b, b->ln2_w, b->ln2_b};
    nn_linear *lin[] = {&b->qkv, &b->proj, &b->fc, &b->fc_proj};
    for (i = 0; i < 4; i++) {
      st = mt_tensor_release(ln[i]);
      if (first == MT_OK) first = st;
      st = nn_linear_free(lin[i]);
      if (first == MT_OK) first = st;
    }
  }
  memset(g, 0, sizeof *g);
  return first;
}

/* A new leaf of shape [n0] or [n0, n1] (ndim 1 or 2) filled with N(0, std) keyed by seed
 * (std 0: the constant fill instead), requiring grad. */
static inline mt_status gpt_param(mt_tensor **out, int64_t n0, int64_t n1, int ndim, double std, double fill,
                                  int64_t seed, mt_device dev) {
  int64_t shape[2];
  mt_status st;
  shape[0] = n0;
  shape[1] = n1;
  *out = NULL;
  if ((st = mt_tensor_full(out, shape, ndim, fill, MT_F32, dev)) != MT_OK) return st;
  if ((std > 0 && (st = mt_init_normal(*out, 0.0, std, seed)) != MT_OK) ||
      (st = mt_tensor_set_requires_grad(*out, 1)) != MT_OK) {
    mt_tensor_release(*out);
    *out = NULL;
  }
  return st;
}

/* A Linear in -> out with GPT-2's initialisation: weight N(0, std), bias 0. */
static inline mt_status gpt_linear(nn_linear *l, int64_t in, int64_t out, double std, int64_t seed, mt_device dev,
                                   int bias) {
  mt_status st;
  l->in = in;
  l->out = out;
  l->bias = NULL;
  if ((st = gpt_param(&l->weight, out, in, 2, std, 0.0, seed, dev)) != MT_OK) return st;
  if (bias && (st = gpt_param(&l->bias, out, 0, 1, 0.0, 0.0, 0, dev)) != MT_OK) nn_linear_free(l);
  return st;
}

/* Appends a borrowed handle and its name to g's list. */
static inline void gpt_list(gpt *g, mt_tensor *t, const char *fmt, int layer) {
  if (!t) return;
  g->params[g->n_params] = t;
  snprintf(g->names[g->n_params], GPT_NAME_CAP, fmt, layer);
  g->n_params++;
}

/* Fills g->params / g->names in the canonical order (the Python twin's named_parameters). */
static inline void gpt_list_params(gpt *g) {
  int l;
  g->n_params = 0;
  gpt_list(g, g->wte, "wte.weight", 0);
  gpt_list(g, g->wpe, "wpe.weight", 0);
  for (l = 0; l < g->cfg.n_layer; l++) {
    gpt_block *b = &g->block[l];
    gpt_list(g, b->ln1_w, "h.%d.ln_1.weight", l);
    gpt_list(g, b->ln1_b, "h.%d.ln_1.bias", l);
    gpt_list(g, b->qkv.weight, "h.%d.attn.c_attn.weight", l);
    gpt_list(g, b->qkv.bias, "h.%d.attn.c_attn.bias", l);
    gpt_list(g, b->proj.weight, "h.%d.attn.c_proj.weight", l);
    gpt_list(g, b->proj.bias, "h.%d.attn.c_proj.bias", l);
    gpt_list(g, b->ln2_w, "h.%d.ln_2.weight", l);
    gpt_list(g, b->ln2_b, "h.%d.ln_2.bias", l);
    gpt_list(g, b->fc.weight, "h.%d.mlp.c_fc.weight", l);
    gpt_list(g, b->fc.bias, "h.%d.mlp.c_fc.bias", l);
    gpt_list(g, b->fc_proj.weight, "h.%d.mlp.c_proj.weight", l);
    gpt_list(g, b->fc_proj.bias, "h.%d.mlp.c_proj.bias", l);
  }
  gpt_list(g, g->lnf_w, "ln_f.weight", 0);
  gpt_list(g, g->lnf_b, "ln_f.bias", 0);
  if (!g->cfg.tie) gpt_list(g, g->head, "lm_head.weight", 0);
}

/* Checks a configuration; prints the reason and returns MT_ERR_INVALID_ARGUMENT when bad. */
static inline mt_status gpt_config_check(const gpt_config *c) {
  if (c->vocab < 1 || c->context < 1 || c->n_head < 1 || c->d_model < 1 || c->n_layer < 0 ||
      c->n_layer > GPT_MAX_LAYERS || c->d_model % c->n_head != 0 || (c->tie != 0 && c->tie != 1) ||
      (c->bf16_attention != 0 && c->bf16_attention != 1)) {
    fprintf(stderr,
            "gpt: bad configuration: vocab %lld, context %lld, %lld layers (0 to %d), %lld heads, d_model %lld "
            "(a multiple of the heads), tie %lld, bf16_attention %lld\n",
            (long long)c->vocab, (long long)c->context, (long long)c->n_layer, GPT_MAX_LAYERS,
            (long long)c->n_head, (long long)c->d_model, (long long)c->tie, (long long)c->bf16_attention);
    return MT_ERR_INVALID_ARGUMENT;
  }
  return MT_OK;
}

/* Builds a GPT of configuration c on dev with GPT-2's initialisation: embeddings and Linear
 * weights N(0, 0.02), the two residual projections of each block (attn.c_proj, mlp.c_proj)
 * N(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm weights 1 and biases 0. The k-th parameter of the
 * canonical order (g->names) is keyed by seed * 1000 + k, so the same seed gives the same
 * model on every device. On failure g is left empty. */
static inline mt_status gpt_init(gpt *g, const gpt_config *c, int64_t seed, mt_device dev) {
  const int64_t D = c->d_model;
  const double std = 0.02, std_res = 0.02 / sqrt(2.0 * (double)(c->n_layer > 0 ? c->n_layer : 1));
  int64_t key = seed * 1000;
  mt_status st;
  int l;
  memset(g, 0, sizeof *g);
  if ((st = gpt_config_check(c)) != MT_OK) return st;
  g->cfg = *c;
  {
    int64_t *pos = (int64_t *)malloc((size_t)c->context * sizeof *pos), i;
    if (!pos) return MT_ERR_OUT_OF_MEMORY;
    for (i = 0; i < c->context; i++) pos[i] = i;
    st = mt_tensor_from_data(&g->positions, pos, &c->context, 1, MT_I64, dev);
    free(pos);
    if (st != MT_OK) return st;
  }
  /* keys follow the canonical order: wte, wpe, per block 12, ln_f (2), lm_head */
  if ((st = gpt_param(&g->wte, c->vocab, D, 2, std, 0.0, key++, dev)) != MT_OK) goto fail;
  if ((st = gpt_param(&g->wpe, c->context, D, 2, std, 0.0, key++, dev)) != MT_OK) goto fail;
  for (l = 0; l < c->n_layer; l++) {
    gpt_block *b = &g->block[l];
    if ((st = gpt_param(&b->ln1_w, D, 0, 1, 0.0, 1.0, 0, dev)) != MT_OK ||
        (st = gpt_param(&b->ln1_b, D, 0, 1, 0.0, 0.0, 0, dev)) != MT_OK ||
        (st = gpt_linear(&b->qkv, D, 3 * D, std, key + 2, dev, 1)) != MT_OK ||
        (st = gpt_linear(&b->proj, D, D, std_res, key + 4, dev, 1)) != MT_OK ||
        (st = gpt_param(&b->ln2_w, D, 0, 1, 0.0, 1.0, 0, dev)) != MT_OK ||
        (st = gpt_param(&b->ln2_b, D, 0, 1, 0.0, 0.0, 0, dev)) != MT_OK ||
        (st = gpt_linear(&b->fc, D, 4 * D, std, key + 8, dev, 1)) != MT_OK ||
        (st = gpt_linear(&b->fc_proj, 4 * D, D, std_res, key + 10, dev, 1)) != MT_OK)
      goto fail;
    key += GPT_PARAMS_PER_BLOCK;
  }
  if ((st = gpt_param(&g->lnf_w, D, 0, 1, 0.0, 1.0, 0, dev)) != MT_OK) goto fail;
  if ((st = gpt_param(&g->lnf_b, D, 0, 1, 0.0, 0.0, 0, dev)) != MT_OK) goto fail;
  key += 2;
  if (c->tie) {
    if ((st = mt_tensor_retain(g->wte)) != MT_OK) goto fail;
    g->head = g->wte;
  } else if ((st = gpt_param(&g->head, c->vocab, D, 2, std, 0.0, key, dev)) != MT_OK) {
    goto fail;
  }
  gpt_list_params(g);
  return MT_OK;
fail:
  gpt_free(g);
  return st;
}

/* The number of scalar parameters (the tied head counted once). */
static inline int64_t gpt_numel(const gpt *g) {
  int64_t total = 0, n;
  int i;
  for (i = 0; i < g->n_params; i++)
    if (mt_tensor_numel(g->params[i], &n) == MT_OK) total += n;
  return total;
}

/* Splits the parameters for AdamW: matrices (embeddings, Linear weights, the head) go to
 * decay[], vectors (biases, LayerNorm) to no_decay[]; both borrowed, each of GPT_MAX_PARAMS
 * entries. Writes the two counts. */
static inline void gpt_decay_groups(const gpt *g, mt_tensor **decay, int *n_decay, mt_tensor **no_decay,
                                    int *n_no_decay) {
  int i;
  int64_t nd;
  *n_decay = *n_no_decay = 0;
  for (i = 0; i < g->n_params; i++) {
    if (mt_tensor_ndim(g->params[i], &nd) == MT_OK && nd >= 2)
      decay[(*n_decay)++] = g->params[i];
    else
      no_decay[(*n_no_decay)++] = g->params[i];
  }
}

/* ---------------------------------------------------------------- forward */

/* Releases tmp[0 .. n-1] (NULL ones are skipped) and sets them to NULL. */
static inline void gpt_release_all(mt_tensor **tmp, int n) {
  int i;
  for (i = 0; i < n; i++) {
    mt_tensor_release(tmp[i]);
    tmp[i] = NULL;
  }
}

/* *out = causal attention of q, k, v [B, H, T, Dh] (float32) in bfloat16: q, k, v cast to it
 * (mt_tensor_cast, which the tape differentiates, so the gradients come back as float32),
 * mt_scaled_dot_product_attention, and the output cast back. */
static inline mt_status gpt_attention_bf16(mt_tensor **out, mt_tensor *q, mt_tensor *k, mt_tensor *v) {
  enum { QH, KH, VH, YH, N_TMP };
  mt_tensor *t[N_TMP] = {NULL};
  mt_status st;
  *out = NULL;
  if ((st = mt_tensor_cast(&t[QH], q, MT_BF16)) != MT_OK || (st = mt_tensor_cast(&t[KH], k, MT_BF16)) != MT_OK ||
      (st = mt_tensor_cast(&t[VH], v, MT_BF16)) != MT_OK ||
      (st = mt_scaled_dot_product_attention(&t[YH], t[QH], t[KH], t[VH], 1)) != MT_OK ||
      (st = mt_tensor_cast(out, t[YH], MT_F32)) != MT_OK)
    *out = NULL;
  gpt_release_all(t, N_TMP);
  return st;
}

/* *out [B, T, D] = causal multi-head attention of the packed projection qkv [B, T, 3D]. In
 * float32: mt_self_attention, which reads the heads in place. With c->bf16_attention: the heads
 * split (reshape to [B, T, 3, H, Dh], permute to [3, B, H, T, Dh], slice), gpt_attention_bf16,
 * and merged back (permute to [B, T, H, Dh], reshape). */
static inline mt_status gpt_attention(mt_tensor **out, const gpt_config *c, mt_tensor *qkv, int64_t B, int64_t T) {
  enum { QKV5, QKVP, Q, K, V, Q4, K4, V4, Y, YT, N_TMP };
  mt_tensor *t[N_TMP] = {NULL};
  const int64_t D = c->d_model, NH = c->n_head, DH = D / NH;
  const int64_t s5[5] = {B, T, 3, NH, DH}, s4[4] = {B, NH, T, DH}, s3[3] = {B, T, D};
  const int64_t perm5[5] = {2, 0, 3, 1, 4}, perm4[4] = {0, 2, 1, 3};
  mt_status st;
  *out = NULL;
  if (!c->bf16_attention) return mt_self_attention(out, qkv, NH, 1);
  if ((st = mt_reshape(&t[QKV5], qkv, s5, 5)) != MT_OK ||                           /* [B, T, 3, H, Dh] */
      (st = mt_permute(&t[QKVP], t[QKV5], perm5, 5)) != MT_OK ||                   /* [3, B, H, T, Dh] */
      (st = mt_slice(&t[Q], t[QKVP], 0, 0, 1)) != MT_OK || (st = mt_slice(&t[K], t[QKVP], 0, 1, 2)) != MT_OK ||
      (st = mt_slice(&t[V], t[QKVP], 0, 2, 3)) != MT_OK || (st = mt_reshape(&t[Q4], t[Q], s4, 4)) != MT_OK ||
      (st = mt_reshape(&t[K4], t[K], s4, 4)) != MT_OK || (st = mt_reshape(&t[V4], t[V], s4, 4)) != MT_OK ||
      (st = gpt_attention_bf16(&t[Y], t[Q4], t[K4], t[V4])) != MT_OK ||             /* [B, H, T, Dh] */
      (st = mt_permute(&t[YT], t[Y], perm4, 4)) != MT_OK ||                        /* [B, T, H, Dh] */
      (st = mt_reshape(out, t[YT], s3, 3)) != MT_OK)
    *out = NULL;
  gpt_release_all(t, N_TMP);
  return st;
}

/* Which kernels gpt_attention runs for configuration c on dev, in words. float32: the library's
 * fused float32 kernels on CUDA for head dim 16 or 32, the composed path otherwise (the heads
 * copied apart, the scores as one batched GEMM, one causal softmax, the GEMM with v, the heads
 * copied back). bfloat16: FlashAttention-2 on CUDA for head dim 64 or 128, else composed. */
static inline const char *gpt_attention_path(const gpt_config *c, mt_device dev) {
  const int64_t dh = c->d_model / (c->n_head > 0 ? c->n_head : 1);
  if (!c->bf16_attention)
    return dev == MT_CUDA && (dh == 16 || dh == 32) ? "float32, fused (heads read in place)" : "float32, composed";
  if (dev != MT_CUDA) return "bfloat16, composed (FlashAttention runs on CUDA only)";
  if (dh != 64 && dh != 128) return "bfloat16, composed (FlashAttention takes head dim 64 or 128)";
  return "bfloat16, FlashAttention-2";
}

/* *out = GELU of the Linear fc of x: the GEMM without its bias, then the bias and the GELU in one
 * pass (mt_bias_act); the same as mt_gelu(nn_linear_forward(fc, x)) up to float rounding. */
static inline mt_status gpt_linear_gelu(mt_tensor **out, const nn_linear *fc, mt_tensor *x) {
  mt_tensor *y = NULL;
  mt_status st;
  *out = NULL;
  if ((st = mt_linear(&y, x, fc->weight, NULL)) == MT_OK) st = mt_bias_act(out, y, fc->bias, MT_ACT_GELU);
  mt_tensor_release(y);
  return st;
}

/* One block, x [B, T, D] -> [B, T, D], given h = ln_1(x): *x_out = x1 + mlp(ln_2(x1)) with
 * x1 = x + attn(h), and *h_out = the LayerNorm (next_w, next_b) of *x_out, which is the next
 * block's ln_1 or, after the last block, ln_f. Each residual add is fused with the LayerNorm
 * that reads its sum (mt_add_layer_norm), so the sums are never read back just to normalize. */
static inline mt_status gpt_block_forward(mt_tensor **x_out, mt_tensor **h_out, const gpt_block *b,
                                          const gpt_config *c, mt_tensor *x, mt_tensor *h, mt_tensor *next_w,
                                          mt_tensor *next_b, int64_t B, int64_t T) {
  enum { QKV, YM, ATT, X1, H2, ACT, MLP, N_TMP };
  mt_tensor *t[N_TMP] = {NULL};
  mt_status st;
  *x_out = NULL;
  *h_out = NULL;
  if ((st = nn_linear_forward(&t[QKV], &b->qkv, h)) != MT_OK ||                    /* [B, T, 3D] */
      (st = gpt_attention(&t[YM], c, t[QKV], B, T)) != MT_OK ||                    /* [B, T, D] */
      (st = nn_linear_forward(&t[ATT], &b->proj, t[YM])) != MT_OK ||
      (st = mt_add_layer_norm(&t[X1], &t[H2], x, t[ATT], b->ln2_w, b->ln2_b, GPT_LN_EPS)) != MT_OK ||
      (st = gpt_linear_gelu(&t[ACT], &b->fc, t[H2])) != MT_OK ||
      (st = nn_linear_forward(&t[MLP], &b->fc_proj, t[ACT])) != MT_OK ||
      (st = mt_add_layer_norm(x_out, h_out, t[X1], t[MLP], next_w, next_b, GPT_LN_EPS)) != MT_OK) {
    *x_out = NULL;
    *h_out = NULL;
  }
  gpt_release_all(t, N_TMP);
  return st;
}

/* *out = the logits [B, T, V] for token ids idx [B, T] (int64, T <= context), recorded on
 * the tape when grad is enabled. */
static inline mt_status gpt_forward(mt_tensor **out, const gpt *g, mt_tensor *idx) {
  enum { POS, TOK, PE, X0, XA, HA, XB, HB, N_TMP };
  mt_tensor *t[N_TMP] = {NULL};
  int64_t shape[2] = {0, 0}, nd = 0;
  mt_status st;
  int l;
  *out = NULL;
  if ((st = mt_tensor_ndim(idx, &nd)) != MT_OK) return st;
  if (nd != 2 || (st = mt_tensor_shape(idx, shape)) != MT_OK || shape[1] < 1 || shape[1] > g->cfg.context) {
    fprintf(stderr, "gpt: gpt_forward: idx must be [B, T] with 1 <= T <= %lld, got %lld dims [%lld, %lld]\n",
            (long long)g->cfg.context, (long long)nd, (long long)shape[0], (long long)shape[1]);
    return st != MT_OK ? st : MT_ERR_INVALID_ARGUMENT;
  }
  if ((st = mt_slice(&t[POS], g->positions, 0, 0, shape[1])) != MT_OK ||  /* a view: no copy, capturable */
      (st = mt_embedding(&t[TOK], g->wte, idx)) != MT_OK ||                 /* [B, T, D] */
      (st = mt_embedding(&t[PE], g->wpe, t[POS])) != MT_OK ||              /* [T, D] */
      (st = mt_add(&t[X0], t[TOK], t[PE])) != MT_OK)
    goto done;
  t[XA] = t[X0];
  t[X0] = NULL;
  /* t[HA]: the LayerNorm of t[XA] that comes next (the first block's ln_1, or ln_f) */
  if ((st = mt_layer_norm(&t[HA], t[XA], g->cfg.n_layer ? g->block[0].ln1_w : g->lnf_w,
                          g->cfg.n_layer ? g->block[0].ln1_b : g->lnf_b, GPT_LN_EPS)) != MT_OK)
    goto done;
  for (l = 0; l < g->cfg.n_layer; l++) {
    const int last = l + 1 == g->cfg.n_layer;
    if ((st = gpt_block_forward(&t[XB], &t[HB], &g->block[l], &g->cfg, t[XA], t[HA],
                                last ? g->lnf_w : g->block[l + 1].ln1_w, last ? g->lnf_b : g->block[l + 1].ln1_b,
                                shape[0], shape[1])) != MT_OK)
      goto done;
    gpt_release_all(&t[XA], 2);  /* XA, HA */
    t[XA] = t[XB];
    t[HA] = t[HB];
    t[XB] = t[HB] = NULL;
  }
  st = mt_linear(out, t[HA], g->head, NULL);
done:
  if (st != MT_OK) *out = NULL;
  gpt_release_all(t, N_TMP);
  return st;
}

/* *loss = mean cross-entropy of the logits of idx [B, T] against targets [B * T] (int64, the
 * next tokens, row-major); *logits (may be NULL when not wanted) receives the [B, T, V] logits. */
static inline mt_status gpt_loss(mt_tensor **loss, mt_tensor **logits, const gpt *g, mt_tensor *idx,
                                 mt_tensor *targets) {
  mt_tensor *lg = NULL, *flat = NULL;
  const int64_t shape[2] = {-1, g->cfg.vocab};
  mt_status st;
  *loss = NULL;
  if (logits) *logits = NULL;
  if ((st = gpt_forward(&lg, g, idx)) == MT_OK && (st = mt_reshape(&flat, lg, shape, 2)) == MT_OK)
    st = mt_cross_entropy(loss, flat, targets);
  mt_tensor_release(flat);
  if (st == MT_OK && logits)
    *logits = lg;
  else
    mt_tensor_release(lg);
  return st;
}

/* ---------------------------------------------------------------- checkpoints */

/* Writes the parameters under their names plus n_extra more named tensors (borrowed; names
 * unique and not parameter names) to a safetensors file at path. */
static inline mt_status gpt_save(const gpt *g, const char *path, const char *const *extra_names,
                                 mt_tensor *const *extra, int n_extra) {
  const char *names[GPT_MAX_PARAMS + 16];
  mt_tensor *ts[GPT_MAX_PARAMS + 16];
  int i, n = 0;
  if (n_extra < 0 || n_extra > 16) {
    fprintf(stderr, "gpt: gpt_save: %d extra tensors, at most 16\n", n_extra);
    return MT_ERR_INVALID_ARGUMENT;
  }
  for (i = 0; i < g->n_params; i++, n++) {
    names[n] = g->names[i];
    ts[n] = g->params[i];
  }
  for (i = 0; i < n_extra; i++, n++) {
    names[n] = extra_names[i];
    ts[n] = extra[i];
  }
  return mt_save_safetensors(path, names, ts, n);
}

/* Overwrites t's elements with the tensor called name in the safetensors file at path, which
 * must have t's shape and dtype (copied through the host, so any device works). */
static inline mt_status gpt_load_into(mt_tensor *t, const char *path, const char *name) {
  mt_tensor *src = NULL;
  int64_t n = 0, m = 0, nd = 0, md = 0, s1[8] = {0}, s2[8] = {0};
  mt_dtype d1, d2;
  mt_status st;
  void *buf = NULL;
  if ((st = mt_load_safetensors(&src, path, name, MT_CPU)) != MT_OK) return st;
  if ((st = mt_tensor_numel(t, &n)) != MT_OK || (st = mt_tensor_numel(src, &m)) != MT_OK ||
      (st = mt_tensor_ndim(t, &nd)) != MT_OK || (st = mt_tensor_ndim(src, &md)) != MT_OK ||
      (st = mt_tensor_dtype(t, &d1)) != MT_OK || (st = mt_tensor_dtype(src, &d2)) != MT_OK)
    goto done;
  if (nd <= 8 && md <= 8) {
    mt_tensor_shape(t, s1);
    mt_tensor_shape(src, s2);
  }
  if (n != m || nd != md || d1 != d2 || nd > 8 || memcmp(s1, s2, sizeof s1) != 0) {
    fprintf(stderr, "gpt: %s: %s is %lld-d %s with %lld elements, expected %lld-d %s with %lld\n", path, name,
            (long long)md, mt_dtype_name(d2), (long long)m, (long long)nd, mt_dtype_name(d1), (long long)n);
    st = MT_ERR_INVALID_ARGUMENT;
    goto done;
  }
  buf = malloc((size_t)(n * mt_dtype_size(d1)) + 1);
  if (!buf) {
    st = MT_ERR_OUT_OF_MEMORY;
    goto done;
  }
  if ((st = mt_tensor_copy_to_host(src, buf, n * mt_dtype_size(d1))) == MT_OK)
    st = mt_tensor_copy_from_host(t, buf, n * mt_dtype_size(d1));
done:
  free(buf);
  mt_tensor_release(src);
  return st;
}

/* Loads every parameter of g from the safetensors file at path (written by gpt_save or by
 * PyTorch under the same names), in place: an optimizer made over g keeps working. */
static inline mt_status gpt_load(gpt *g, const char *path) {
  mt_status st;
  int i;
  for (i = 0; i < g->n_params; i++)
    if ((st = gpt_load_into(g->params[i], path, g->names[i])) != MT_OK) return st;
  return MT_OK;
}

#endif
