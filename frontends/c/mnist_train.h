/*
 * mnist_train.h - the program the convolutional MNIST demos share (mnist_cnn.c, lenet5.c):
 * their flags on top of mnist.h's, the device and run-length defaults, the optimizer, the
 * epoch loop over an nn.h Sequential that also keeps the training accuracy, evaluation in
 * eval mode, and the final report with the training time and peak device memory.
 * Header-only C99 + POSIX: define _POSIX_C_SOURCE 200809L and DEMO_NAME before the first
 * #include.
 *
 *   mnist_train_options t = mnist_train_defaults("out/mnist_cnn.csv", "out/fashion_cnn.csv");
 *   mnist_train_parse(&t, argc, argv, demo_flag, &my_flags, usage);
 *   return mnist_train_run(&t, "roadmap CNN", spec, n_layers);
 *
 * The model sees each batch as images x [B, 1, side, side] (side * side = the pixels per
 * image) and returns logits [B, 10]; the spec's first layer must take one channel.
 *
 * On CUDA the full-size training step is recorded once into a graph and replayed
 * (step_graph.h); --no-graph runs every step eagerly.
 *
 * Peak device memory is the high-water mark of mt_live_bytes(device) (the bytes of the
 * library's live tensors: parameters, gradients, optimizer state, the batch, activations
 * held by the tape, and while a graph is recorded the buffers it owns), sampled after each
 * eager step's forward, backward and optimizer update and after each replay; the allocator's
 * cached blocks are not counted, as torch.cuda.max_memory_allocated does not count them.
 *
 * Ownership: the options point into argv (borrowed); spec is borrowed for the call.
 * Errors: a failing library call exits through CHECK (common.h); bad flags call usage().
 */
#ifndef MINITORCH_DEMO_MNIST_TRAIN_H
#define MINITORCH_DEMO_MNIST_TRAIN_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "mnist.h"
#include "nn.h"
#include "progress.h"
#include "step_graph.h"

/* On the CPU, without --limit, train on this many images (one epoch by default) so that
 * `make run` stays short on a machine without a GPU. */
#define MNIST_TRAIN_CPU_LIMIT 10000

typedef struct mnist_train_options {
  mnist_options data;        /* mnist.h's flags; data.limit -1 until --limit is given */
  const char *optim;         /* --optim adam|sgd (default adam) */
  double momentum;           /* --momentum M for SGD (default 0.9) */
  const char *device;        /* --device cpu|cuda; NULL: mt_default_device() */
  int gpu_epochs;            /* epochs without --epochs on CUDA (1 on the CPU) */
  const char *csv_mnist, *csv_fashion; /* the default --csv paths */
  int no_graph;              /* --no-graph: every step eager on CUDA too */
  int lr_decay_epoch;        /* --lr-decay-epoch E: lr x 0.1 after epoch E (0: constant lr) */
} mnist_train_options;

/* mnist_defaults() with no --limit yet, Adam, momentum 0.9, the default device, 10 epochs on
 * CUDA, and the default metrics paths csv_mnist / csv_fashion (static strings). */
static inline mnist_train_options mnist_train_defaults(const char *csv_mnist, const char *csv_fashion) {
  mnist_train_options t;
  t.data = mnist_defaults();
  t.data.limit = -1;
  t.optim = "adam";
  t.momentum = 0.9;
  t.device = NULL;
  t.gpu_epochs = 10;
  t.csv_mnist = csv_mnist;
  t.csv_fashion = csv_fashion;
  t.no_graph = 0;
  t.lr_decay_epoch = 0;
  return t;
}

/* A demo's own flags: returns how many arguments it used (1 for a switch, 2 with the value,
 * 0 when flag is not one of its own). value is NULL after the last argument. */
typedef int (*mnist_train_flag_fn)(void *ctx, const char *flag, const char *value);

/* Parses argv[1..]: mnist_option's flags, --optim, --momentum, --device, then demo_flag's
 * (may be NULL). Calls usage() (which must not return) on -h, --help, an unknown flag or a
 * missing value, and dies on a bad --optim or --device. */
static inline void mnist_train_parse(mnist_train_options *t, int argc, char **argv, mnist_train_flag_fn demo_flag,
                                     void *ctx, void (*usage)(void)) {
  int i;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int used = mnist_option(&t->data, a, v);
    if (!used && demo_flag) used = demo_flag(ctx, a, v);
    if (used) {
      i += used - 1;
      continue;
    }
    if (!strcmp(a, "--no-graph")) {
      t->no_graph = 1;
      continue;
    }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage();
    if (!v) {
      flag_unknown(a, v);
      usage();
    }
    if (!strcmp(a, "--optim")) t->optim = v;
    else if (!strcmp(a, "--momentum")) t->momentum = flag_nonneg_f64(a, v);
    else if (!strcmp(a, "--device")) t->device = v;
    else if (!strcmp(a, "--lr-decay-epoch")) t->lr_decay_epoch = (int)flag_range(a, v, 0, 1000000);
    else {
      flag_unknown(a, v);
      usage();
    }
    i++;
  }
  if (strcmp(t->optim, "sgd") && strcmp(t->optim, "adam")) die("--optim must be sgd or adam, got ", t->optim);
  if (t->device && strcmp(t->device, "cpu") && strcmp(t->device, "cuda"))
    die("--device must be cpu or cuda, got ", t->device);
  if (t->data.batch < 1) die("--batch must be >= 1", NULL);
}

/* The shared part of the usage text: "[--data DIR] ... [--csv PATH]". */
#define MNIST_TRAIN_USAGE                                                                                      \
  "[--data DIR] [--fashion] [--device cpu|cuda] [--optim adam|sgd] [--lr LR]\n"                              \
  "       [--momentum M] [--epochs N] [--batch B] [--limit N] [--test-limit N] [--seed S] [--standardize]\n" \
  "       [--csv PATH] [--no-graph] [--lr-decay-epoch E]"

/* The model and what it needs to see a flat batch as images. */
typedef struct mnist_train_model {
  nn_sequential net;
  int64_t side; /* images are side x side */
} mnist_train_model;

/* logits (B, 10) of pixels x (B, side * side): x viewed as [B, 1, side, side] through the
 * Sequential. ctx is the mnist_train_model. */
static inline mt_tensor *mnist_train_logits(void *ctx, mt_tensor *x) {
  const mnist_train_model *m = (const mnist_train_model *)ctx;
  int64_t shape[4];
  mt_tensor *img, *logits;
  shape[0] = -1;
  shape[1] = 1;
  shape[2] = shape[3] = m->side;
  CHECK(mt_reshape(&img, x, shape, 4));
  CHECK(nn_sequential_forward(&logits, &m->net, img));
  CHECK(mt_tensor_release(img));
  return logits;
}

/* *peak = max(*peak, mt_live_bytes(dev)). */
static inline void mnist_train_sample_memory(int64_t *peak, mt_device dev) {
  int64_t now = mt_live_bytes(dev);
  if (now > *peak) *peak = now;
}

/* One training step on the loader's fixed batch tensors (a step_graph_fn): outs[0] the loss,
 * outs[1] the batch accuracy. With peak set, samples the memory between the phases. */
typedef struct mnist_train_step_ctx {
  mnist_train_model *model;
  mt_optimizer *opt;
  mnist_batch *batch;
  int64_t *peak; /* NULL while recording: nothing to sample then */
  mt_device dev;
} mnist_train_step_ctx;

static inline void mnist_train_sample(const mnist_train_step_ctx *c) {
  if (c->peak) mnist_train_sample_memory(c->peak, c->dev);
}

static inline int mnist_train_step(void *ctx, mt_tensor **outs) {
  mnist_train_step_ctx *c = (mnist_train_step_ctx *)ctx;
  mt_tensor *logits = mnist_train_logits(c->model, c->batch->x);
  CHECK(mt_cross_entropy(&outs[0], logits, c->batch->y));
  mnist_batch_accuracy(&outs[1], logits, c->batch->y);
  mnist_train_sample(c);
  CHECK(mt_optim_zero_grad(c->opt));
  CHECK(mt_backward(outs[0]));
  mnist_train_sample(c);
  CHECK(mt_optim_step(c->opt));
  mnist_train_sample(c);
  RELEASE(logits);
  return 2;
}

/* Trains the n-layer model of spec (nn_sequential_init seeded with seed * 10 + 1) on the
 * data t names, describes it as name in the "model:" line, and returns the program's exit
 * status: 0 when every tensor was released at the end, 1 otherwise. */
static inline int mnist_train_run(mnist_train_options *t, const char *name, const nn_spec *spec, int n) {
  mnist_options *o = &t->data;
  mt_device dev = mt_default_device();
  int sgd = !strcmp(t->optim, "sgd"), i, n_params;
  mnist_data data;
  mnist_train_model model;
  mt_tensor *params[NN_MAX_PARAMS];
  mt_optimizer *opt;
  mnist_loader ld;
  metrics_csv metrics;
  double test_loss = 0, test_acc = 0, t_start, t_train = 0;
  int64_t peak = 0;
  char layers[512];
  step_graph sg;
  mnist_train_step_ctx sc;

  if (t->device) {
    if (!strcmp(t->device, "cuda") && mt_cuda_device_count() < 1) die("--device cuda: no usable GPU", NULL);
    dev = !strcmp(t->device, "cuda") ? MT_CUDA : MT_CPU;
  }
  if (o->lr < 0) o->lr = sgd ? 0.05 : 1e-3;
  if (!o->csv) o->csv = o->fashion ? t->csv_fashion : t->csv_mnist;
  if (o->epochs <= 0) o->epochs = dev == MT_CUDA ? t->gpu_epochs : 1;
  if (o->limit < 0) {
    o->limit = dev == MT_CUDA ? 0 : MNIST_TRAIN_CPU_LIMIT;
    if (dev != MT_CUDA)
      printf("note: on the CPU by default the first %d training images only; --limit 0 --epochs %d for the full run\n",
             MNIST_TRAIN_CPU_LIMIT, t->gpu_epochs);
  }

  printf("device: %s\n", mt_device_name(dev));
  mnist_load(&data, o);
  model.side = (int64_t)(sqrt((double)data.train.d) + 0.5);
  if (model.side * model.side != data.train.d) die("the images are not square in ", data.dir);

  CHECK(nn_sequential_init(&model.net, spec, n, o->seed * 10 + 1, dev));
  n_params = nn_sequential_parameters(&model.net, params, NN_MAX_PARAMS);
  if (sgd)
    CHECK(mt_optim_sgd(&opt, params, n_params, o->lr, t->momentum, 0.0, 0));
  else
    CHECK(mt_optim_adam(&opt, params, n_params, o->lr, 0.9, 0.999, 1e-8, 0.0));
  printf("model: %s: %s; %lld parameters\n", name, nn_sequential_describe(&model.net, layers, sizeof layers),
         (long long)nn_sequential_numel(&model.net));
  printf("training: %s lr %g", sgd ? "SGD" : "Adam", o->lr);
  if (sgd) printf(" momentum %g", t->momentum);
  if (t->lr_decay_epoch > 0) printf(", x0.1 after epoch %d", t->lr_decay_epoch);
  printf("; batch %lld; %d epoch%s\n", (long long)o->batch, o->epochs, o->epochs == 1 ? "" : "s");
  fflush(stdout);

  mnist_loader_init(&ld, &data.train, o->batch, 0, dev);
  if (metrics_open(&metrics, o->csv, MNIST_CSV_COLUMNS_ACC) != 0) return 1;

  step_graph_init(&sg, dev == MT_CUDA && !t->no_graph);
  sc.model = &model;
  sc.opt = opt;
  sc.dev = dev;
  printf("training step: %s\n", sg.enabled ? "recorded once, replayed (CUDA graph)" : "eager");
  t_start = progress_clock();
  for (i = 1; i <= o->epochs; i++) {
    mnist_epoch ep;
    int64_t s;
    double train_loss;
    /* the recorded update reads the learning rate on the device: replays follow the change */
    if (t->lr_decay_epoch > 0 && i == t->lr_decay_epoch + 1) CHECK(mt_optim_set_lr(opt, o->lr * 0.1));
    mnist_epoch_begin(&ep, &ld, o->seed, i, o->epochs, dev);
    mnist_epoch_track_accuracy(&ep, dev);
    nn_sequential_train(&model.net, 1);
    for (s = 0; s < ld.steps; s++) {
      mt_tensor **outs;
      int full;
      sc.batch = mnist_loader_batch(&ld, s);
      full = sc.batch == &ld.full;
      /* eager steps sample the memory between their phases; a recording runs nothing */
      sc.peak = sg.enabled && full && sg.warmed ? NULL : &peak;
      outs = step_graph_run(&sg, full, mnist_train_step, &sc);
      mnist_train_sample_memory(&peak, dev);
      /* the epoch's loss and accuracy stay on the device; they are read only to draw the bar */
      mnist_epoch_step_acc(&ep, outs[0], outs[1], sc.batch->size, s);
    }
    train_loss = mnist_epoch_end(&ep);
    CHECK(mt_synchronize());
    t_train += progress_clock() - ep.t0;
    nn_sequential_train(&model.net, 0);
    mnist_evaluate(&data.test, mnist_train_logits, &model, dev, &test_loss, &test_acc);
    mnist_epoch_report(&ep, &metrics, train_loss, test_loss, test_acc, t_start);
  }
  mnist_report_final(&data, &metrics, o->csv, o->epochs, test_acc, t_start);
  printf("training time %.3f s (the epochs without evaluation)\n", t_train);
  printf("peak device memory %.2f MiB (%s; high-water mark of mt_live_bytes over the training steps)\n",
         (double)peak / (1024.0 * 1024.0), mt_device_name(dev));

  step_graph_free(&sg);
  CHECK(mt_optim_free(opt));
  CHECK(nn_sequential_free(&model.net));
  mnist_loader_free(&ld);
  mnist_free(&data);
  printf("live tensors: %lld\n", (long long)mt_live_tensors());
  return mt_live_tensors() == 0 ? 0 : 1;
}

#endif
