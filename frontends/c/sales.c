/* sales.c - regression of a transaction's total price on data/sales.tsv with a
 * Linear(n,32) -> ReLU -> Linear(32,1) network and MSE, trained twice from the same
 * initial weights and the same batches: once with SGD, once with Adam.
 *
 *   sales [--data PATH] [--epochs N] [--batch B] [--sgd-lr LR] [--sgd-momentum M]
 *         [--adam-lr LR] [--limit N] [--seed S] [--csv PATH] [--no-graph]
 *
 * Features (mt_load_tsv "4:num,5:num,6:cat,2:date", target column 8): quantity, unit
 * price, the category one-hot, and the day of year. The first 80% of the rows in file
 * order train, the last 20% test. Features and target are standardized with the mean
 * and std of the training split, computed on the device with mt_mean_dim. Prints the
 * train loss (MSE of the standardized target) and the test MAE (in price units) per
 * epoch, the MAE of the mean predictor as the baseline, and the number of epochs each
 * optimizer needs to reach the SGD run's final training loss.
 *
 * Defaults: data/sales.tsv (scripts/fetch_data.sh sales), 20 epochs, batch 256,
 * SGD lr 0.01 momentum 0.9, Adam lr 1e-3; metrics in out/sales.csv
 * (epoch,sgd_train_loss,sgd_test_mae,adam_train_loss,adam_test_mae,baseline_mae).
 *
 * On CUDA the full-size training step (each batch copied into the same device tensors) is
 * recorded once into a graph and replayed (step_graph.h); the last, partial batch of an epoch
 * runs eagerly. --no-graph runs every step eagerly; the numbers are the same up to float32
 * rounding.
 */
#define _POSIX_C_SOURCE 200809L
#define DEMO_NAME "sales"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "nn.h"
#include "progress.h"
#include "step_graph.h"

#define HIDDEN 32
#define COLUMNS "4:num,5:num,6:cat,2:date"
#define TARGET 8

/* Column means and stds of x (rows, cols) as (1, cols) tensors, with library reductions. */
static void mean_std(mt_tensor *x, mt_tensor **mean, mt_tensor **std) {
  mt_tensor *centered, *sq, *var, *var_eps;
  CHECK(mt_mean_dim(mean, x, 0, 1));
  CHECK(mt_sub(&centered, x, *mean));
  CHECK(mt_mul(&sq, centered, centered));
  CHECK(mt_mean_dim(&var, sq, 0, 1));
  CHECK(mt_add_scalar(&var_eps, var, 1e-12)); /* a constant column (a category absent from train) maps to 0 */
  CHECK(mt_pow_scalar(std, var_eps, 0.5));
  RELEASE(centered, sq, var, var_eps);
}

/* host (rows, cols) <- (host - mean) / std, computed on the device. */
static void standardize(float *host, int64_t rows, int64_t cols, mt_tensor *mean, mt_tensor *std, mt_device dev) {
  int64_t shape[2] = {rows, cols};
  mt_tensor *x, *c, *z;
  CHECK(mt_tensor_from_data(&x, host, shape, 2, MT_F32, dev));
  CHECK(mt_sub(&c, x, mean));
  CHECK(mt_div(&z, c, std));
  CHECK(mt_tensor_copy_to_host(z, host, rows * cols * (int64_t)sizeof(float)));
  RELEASE(x, c, z);
}

/* (B, F) -> (B, 1) */
static mt_tensor *forward(const nn_sequential *net, mt_tensor *x) {
  mt_tensor *y;
  CHECK(nn_sequential_forward(&y, net, x));
  return y;
}

typedef struct split {
  const float *x;  /* (n, f) standardized features, host */
  const float *ys; /* (n) standardized target, host */
  const float *y;  /* (n) target in price units, host */
  int64_t n, f;
} split;

typedef struct setup {
  split train, test;
  mt_device dev;
  int epochs;
  int64_t batch, seed;
  double ymean, ystd;
  int use_graph; /* record the full-size step (CUDA) */
} setup;

/* One training step on fixed batch tensors (a step_graph_fn): outs[0] the loss. */
typedef struct train_ctx {
  const nn_sequential *net;
  mt_optimizer *opt;
  mt_tensor *x, *y; /* (n, f), (n, 1): the batch, borrowed */
} train_ctx;

static int train_step(void *ctx, mt_tensor **outs) {
  train_ctx *c = (train_ctx *)ctx;
  mt_tensor *out = forward(c->net, c->x);
  CHECK(mt_mse_loss(&outs[0], out, c->y));
  CHECK(mt_optim_zero_grad(c->opt));
  CHECK(mt_backward(outs[0]));
  CHECK(mt_optim_step(c->opt));
  CHECK(mt_tensor_release(out));
  return 1;
}

/* Test MAE in price units: mean |pred * ystd + ymean - y|. */
static double test_mae(const setup *s, const nn_sequential *net, mt_tensor *xte, float *pred) {
  int64_t prev = mt_set_grad_enabled(0), i;
  mt_tensor *out = forward(net, xte);
  double mae = 0;
  mt_set_grad_enabled(prev);
  CHECK(mt_tensor_copy_to_host(out, pred, s->test.n * (int64_t)sizeof(float)));
  CHECK(mt_tensor_release(out));
  for (i = 0; i < s->test.n; i++) mae += fabs(pred[i] * s->ystd + s->ymean - s->test.y[i]);
  return mae / (double)s->test.n;
}

/* Trains a fresh network (the same initial weights and batches for every optimizer);
 * fills loss[e] and mae[e] for epochs e = 0..epochs-1. */
static void train(const setup *s, const char *name, int adam, double lr, double momentum, double *loss, double *mae) {
  const int64_t f = s->train.f, bs = s->batch;
  /* Linear(f,32) keyed by seed*10+1 (its bias by +2), Linear(32,1) by seed*10+3 (+4) */
  const nn_spec spec[3] = {nn_linear_spec(f, HIDDEN), nn_plain_spec(NN_RELU), nn_linear_spec(HIDDEN, 1)};
  int64_t xs[2] = {bs, f}, ys[2] = {bs, 1}, ts[2] = {s->test.n, f};
  int64_t tail = s->train.n % bs, steps = (s->train.n + bs - 1) / bs, *perm = xmalloc((size_t)s->train.n * 8);
  int64_t txs[2] = {tail, f}, tys[2] = {tail, 1};
  float *hx = xmalloc((size_t)(bs * f) * sizeof(float)), *hy = xmalloc((size_t)bs * sizeof(float));
  float *pred = xmalloc((size_t)s->test.n * sizeof(float));
  nn_sequential net;
  mt_tensor *p[NN_MAX_PARAMS], *bx, *by, *tx = NULL, *ty = NULL, *xte;
  mt_optimizer *opt;
  step_graph sg;
  train_ctx tc;
  int e, np;

  CHECK(nn_sequential_init(&net, spec, 3, s->seed * 10 + 1, s->dev));
  np = nn_sequential_parameters(&net, p, NN_MAX_PARAMS);
  if (adam)
    CHECK(mt_optim_adam(&opt, p, np, lr, 0.9, 0.999, 1e-8, 0.0));
  else
    CHECK(mt_optim_sgd(&opt, p, np, lr, momentum, 0.0, 0));
  CHECK(mt_tensor_zeros(&bx, xs, 2, MT_F32, s->dev));
  CHECK(mt_tensor_zeros(&by, ys, 2, MT_F32, s->dev));
  if (tail) {
    CHECK(mt_tensor_zeros(&tx, txs, 2, MT_F32, s->dev));
    CHECK(mt_tensor_zeros(&ty, tys, 2, MT_F32, s->dev));
  }
  CHECK(mt_tensor_from_data(&xte, s->test.x, ts, 2, MT_F32, s->dev));
  step_graph_init(&sg, s->use_graph);
  tc.net = &net;
  tc.opt = opt;

  for (e = 0; e < s->epochs; e++) {
    mt_tensor *perm_t;
    progress pb;
    loss_meter lm;
    char label[64], extra[64];
    int64_t st;
    CHECK(mt_randperm(&perm_t, s->train.n, s->seed * 1000003 + e, MT_CPU));
    CHECK(mt_tensor_copy_to_host(perm_t, perm, s->train.n * 8));
    CHECK(mt_tensor_release(perm_t));
    loss_meter_start(&lm, s->dev);
    snprintf(label, sizeof label, "%-4s epoch %d/%d", name, e + 1, s->epochs);
    progress_start(&pb, label, steps, "batch");
    for (st = 0; st < steps; st++) {
      int64_t n = st * bs + bs <= s->train.n ? bs : tail, r;
      mt_tensor *l;
      tc.x = n == bs ? bx : tx;
      tc.y = n == bs ? by : ty;
      for (r = 0; r < n; r++) {
        int64_t k = perm[st * bs + r];
        memcpy(hx + r * f, s->train.x + k * f, (size_t)f * sizeof(float));
        hy[r] = s->train.ys[k];
      }
      CHECK(mt_tensor_copy_from_host(tc.x, hx, n * f * (int64_t)sizeof(float)));
      CHECK(mt_tensor_copy_from_host(tc.y, hy, n * (int64_t)sizeof(float)));
      l = step_graph_run(&sg, n == bs, train_step, &tc)[0];
      loss_meter_add(&lm, l, n);
      loss_meter_show(&lm, &pb, st + 1, "loss %.5f");
    }
    loss[e] = loss_meter_end(&lm);
    mae[e] = test_mae(s, &net, xte, pred);
    snprintf(extra, sizeof extra, "loss %.5f", loss[e]);
    progress_finish(&pb, extra);
    printf("%-4s epoch %2d/%d  train loss %.5f  test MAE %.4f\n", name, e + 1, s->epochs, loss[e], mae[e]);
    fflush(stdout);
  }

  step_graph_free(&sg);
  CHECK(mt_optim_free(opt));
  CHECK(nn_sequential_free(&net));
  RELEASE(bx, by, tx, ty, xte);
  free(perm);
  free(hx);
  free(hy);
  free(pred);
}

/* The first epoch (1-based) whose loss is at most target, or 0. */
static int epochs_to_reach(const double *loss, int epochs, double target) {
  int e;
  for (e = 0; e < epochs; e++)
    if (loss[e] <= target) return e + 1;
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: sales [--data PATH] [--epochs N] [--batch B] [--sgd-lr LR] [--sgd-momentum M] [--adam-lr LR]\n"
          "             [--limit N] [--seed S] [--csv PATH] [--no-graph]\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *path = "data/sales.tsv", *csv = "out/sales.csv";
  double sgd_lr = 0.01, sgd_momentum = 0.9, adam_lr = 1e-3, base_mae = 0, base_mse = 0;
  int64_t limit = 0, rows, f, ntr, nte, shape[2], i;
  setup s;
  mt_tensor *feat, *targ, *xtr, *ytr, *mu, *sd, *ymu, *ysd;
  float *hx, *hy, *hys;
  double *sgd_loss, *sgd_mae, *adam_loss, *adam_mae, t0;
  int e, sgd_epochs, adam_epochs, no_graph = 0;
  metrics_csv metrics;

  s.dev = mt_default_device();
  s.epochs = 20;
  s.batch = 256;
  s.seed = 1;
  for (i = 1; i < argc; i++) { /* every flag but --no-graph takes a value */
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--no-graph")) {
      no_graph = 1;
      continue;
    }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage();
    if (!v) {
      flag_unknown(a, v);
      usage();
    }
    if (!strcmp(a, "--data")) path = v;
    else if (!strcmp(a, "--epochs")) s.epochs = (int)flag_range(a, v, 1, 1000000);
    else if (!strcmp(a, "--batch")) s.batch = flag_range(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--sgd-lr")) sgd_lr = flag_nonneg_f64(a, v);
    else if (!strcmp(a, "--sgd-momentum")) sgd_momentum = flag_nonneg_f64(a, v);
    else if (!strcmp(a, "--adam-lr")) adam_lr = flag_nonneg_f64(a, v);
    else if (!strcmp(a, "--limit")) limit = flag_range(a, v, 0, LLONG_MAX);
    else if (!strcmp(a, "--seed")) s.seed = flag_i64(a, v);
    else if (!strcmp(a, "--csv")) csv = v;
    else {
      flag_unknown(a, v);
      usage();
    }
    i++;
  }
  if (s.epochs < 1 || s.batch < 1) die("--epochs and --batch must be >= 1", NULL);
  s.use_graph = s.dev == MT_CUDA && !no_graph;
  /* the metrics file first: a bad --csv fails before the training, not after it */
  if (metrics_open(&metrics, csv, "epoch,sgd_train_loss,sgd_test_mae,adam_train_loss,adam_test_mae,baseline_mae") != 0)
    return 1;

  printf("device: %s\n", mt_device_name(s.dev));
  t0 = progress_clock();
  CHECK(mt_load_tsv(&feat, &targ, path, COLUMNS, TARGET, MT_CPU));
  CHECK(mt_tensor_shape(feat, shape));
  rows = limit > 0 && limit < shape[0] ? limit : shape[0];
  f = shape[1];
  hx = xmalloc((size_t)(shape[0] * f) * sizeof(float));
  hy = xmalloc((size_t)shape[0] * sizeof(float));
  hys = xmalloc((size_t)shape[0] * sizeof(float));
  CHECK(mt_tensor_copy_to_host(feat, hx, shape[0] * f * (int64_t)sizeof(float)));
  CHECK(mt_tensor_copy_to_host(targ, hy, shape[0] * (int64_t)sizeof(float)));
  CHECK(mt_tensor_release(feat));
  CHECK(mt_tensor_release(targ));
  ntr = rows * 8 / 10;
  nte = rows - ntr;
  if (ntr < 1 || nte < 1) die("too few rows for an 80/20 split in ", path);
  printf("data: %s: %lld rows (columns \"%s\", target %d) -> %lld features; %lld train, %lld test (file order); "
         "loaded in %.1f s\n",
         path, (long long)rows, COLUMNS, TARGET, (long long)f, (long long)ntr, (long long)nte, progress_clock() - t0);

  /* Standardization statistics from the training split, on the device. */
  {
    int64_t xs[2] = {ntr, f}, ys[2] = {ntr, 1};
    float m, sdev;
    CHECK(mt_tensor_from_data(&xtr, hx, xs, 2, MT_F32, s.dev));
    CHECK(mt_tensor_from_data(&ytr, hy, ys, 2, MT_F32, s.dev));
    mean_std(xtr, &mu, &sd);
    mean_std(ytr, &ymu, &ysd);
    CHECK(mt_tensor_copy_to_host(ymu, &m, sizeof m));
    CHECK(mt_tensor_copy_to_host(ysd, &sdev, sizeof sdev));
    s.ymean = m;
    s.ystd = sdev;
    memcpy(hys, hy, (size_t)rows * sizeof(float));
    standardize(hx, rows, f, mu, sd, s.dev);
    standardize(hys, rows, 1, ymu, ysd, s.dev);
    RELEASE(xtr, ytr, mu, sd, ymu, ysd);
  }
  s.train.x = hx;
  s.train.ys = hys;
  s.train.y = hy;
  s.train.n = ntr;
  s.train.f = f;
  s.test.x = hx + ntr * f;
  s.test.ys = hys + ntr;
  s.test.y = hy + ntr;
  s.test.n = nte;
  s.test.f = f;
  if (s.batch > ntr) s.batch = ntr;

  /* The mean predictor: always the training mean. */
  for (i = 0; i < nte; i++) {
    base_mae += fabs(s.ymean - s.test.y[i]);
    base_mse += (double)s.test.ys[i] * s.test.ys[i];
  }
  base_mae /= (double)nte;
  base_mse /= (double)nte;
  printf("target: train mean %.4f, std %.4f; mean predictor on test: MAE %.4f, standardized MSE %.4f\n", s.ymean,
         s.ystd, base_mae, base_mse);
  printf("model: Linear(%lld,%d) -> ReLU -> Linear(%d,1), MSE; batch %lld; %d epochs; SGD lr %g momentum %g; "
         "Adam lr %g\n",
         (long long)f, HIDDEN, HIDDEN, (long long)s.batch, s.epochs, sgd_lr, sgd_momentum, adam_lr);
  printf("training step: %s\n", s.use_graph ? "recorded once, replayed (CUDA graph)" : "eager");
  fflush(stdout);

  sgd_loss = xmalloc((size_t)s.epochs * sizeof(double));
  sgd_mae = xmalloc((size_t)s.epochs * sizeof(double));
  adam_loss = xmalloc((size_t)s.epochs * sizeof(double));
  adam_mae = xmalloc((size_t)s.epochs * sizeof(double));
  train(&s, "sgd", 0, sgd_lr, sgd_momentum, sgd_loss, sgd_mae);
  train(&s, "adam", 1, adam_lr, 0, adam_loss, adam_mae);

  for (e = 0; e < s.epochs; e++) {
    double row[6];
    row[0] = e + 1;
    row[1] = sgd_loss[e];
    row[2] = sgd_mae[e];
    row[3] = adam_loss[e];
    row[4] = adam_mae[e];
    row[5] = base_mae;
    metrics_row(&metrics, row, 6);
  }
  metrics_close(&metrics);

  sgd_epochs = epochs_to_reach(sgd_loss, s.epochs, sgd_loss[s.epochs - 1]);
  adam_epochs = epochs_to_reach(adam_loss, s.epochs, sgd_loss[s.epochs - 1]);
  printf("baseline (mean predictor): test MAE %.4f\n", base_mae);
  printf("sgd : final train loss %.5f, test MAE %.4f (%.1f%% of the baseline)\n", sgd_loss[s.epochs - 1],
         sgd_mae[s.epochs - 1], 100 * sgd_mae[s.epochs - 1] / base_mae);
  printf("adam: final train loss %.5f, test MAE %.4f (%.1f%% of the baseline)\n", adam_loss[s.epochs - 1],
         adam_mae[s.epochs - 1], 100 * adam_mae[s.epochs - 1] / base_mae);
  if (adam_epochs)
    printf("epochs to reach SGD's final train loss %.5f: sgd %d, adam %d\n", sgd_loss[s.epochs - 1], sgd_epochs,
           adam_epochs);
  else
    printf("epochs to reach SGD's final train loss %.5f: sgd %d, adam not within %d\n", sgd_loss[s.epochs - 1],
           sgd_epochs, s.epochs);
  if (*csv) printf("metrics: %s\n", csv);

  free(hx);
  free(hy);
  free(hys);
  free(sgd_loss);
  free(sgd_mae);
  free(adam_loss);
  free(adam_mae);
  printf("live tensors: %lld\n", (long long)mt_live_tensors());
  return mt_live_tensors() == 0 ? 0 : 1;
}
