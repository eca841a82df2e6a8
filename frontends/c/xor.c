/* xor.c - the XOR network Linear(2,4) -> Sigmoid -> Linear(4,1), MSE, SGD lr 0.5,
 * 5000 full-batch epochs, on the default device (CUDA when usable, else CPU).
 * Prints the loss every 500 epochs and the four predictions. On CUDA the step is
 * recorded into a graph after the first (eager) one and replayed: the same kernels
 * without the per-call host work. Exit status: 0 when the final loss is below 0.01, 1 when
 * not (or on a leak or a library error), 2 for a bad argument. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "nn.h"

/* One training step: forward, zero_grad, backward, SGD. *pred and *loss receive the new
 * outputs (the previous ones are released first). */
static void train_step(mt_tensor *x, mt_tensor *y, const nn_sequential *net, mt_optimizer *opt, mt_tensor **pred,
                       mt_tensor **loss) {
  mt_tensor_release(*pred);
  mt_tensor_release(*loss);
  CHECK(nn_sequential_forward(pred, net, x));
  CHECK(mt_mse_loss(loss, *pred, y));
  CHECK(mt_optim_zero_grad(opt));
  CHECK(mt_backward(*loss));
  CHECK(mt_optim_step(opt));
}

int main(int argc, char **argv) {
  /* usage: xor [epochs] [--eager | --no-graph]: on CUDA the step is recorded once into a
   * graph and replayed, unless --eager (or --no-graph, as the other demos spell it) */
  int epochs = 5000, eager = 0, counted = 0;
  mt_graph *graph = NULL;
  mt_device dev = mt_default_device();
  const float xs[8] = {0, 0, 0, 1, 1, 0, 1, 1};
  const float ys[4] = {0, 1, 1, 0};
  const int64_t xshape[2] = {4, 2}, yshape[2] = {4, 1};
  /* PyTorch's nn.Linear default init; Linear(2,4) keyed by seed 1 (its bias by 2), Linear(4,1) by 3 (4) */
  const nn_spec spec[3] = {nn_linear_spec(2, 4), nn_plain_spec(NN_SIGMOID), nn_linear_spec(4, 1)};
  nn_sequential net;
  mt_tensor *x, *y, *params[NN_MAX_PARAMS], *loss = NULL, *pred = NULL;
  mt_optimizer *opt;
  float out[4];
  double l = 0;
  int e, i, n_params;
  struct timespec t0, t1;
  for (i = 1; i < argc; i++) {
    char *end = NULL;
    long v;
    if (strcmp(argv[i], "--eager") == 0 || strcmp(argv[i], "--no-graph") == 0) {
      eager = 1;
      continue;
    }
    v = strtol(argv[i], &end, 10);
    if (argv[i][0] == '\0' || *end != '\0' || v < 1 || v > 100000000 || counted++) {
      fprintf(stderr, "xor: '%s' is neither an epoch count (one, 1 to 100000000) nor --eager / --no-graph\n"
                      "usage: xor [epochs] [--eager | --no-graph]\n", argv[i]);
      return 2;
    }
    epochs = (int)v;
  }
  if (dev != MT_CUDA) eager = 1;

  printf("device: %s\n", mt_device_name(dev));
  CHECK(mt_tensor_from_data(&x, xs, xshape, 2, MT_F32, dev));
  CHECK(mt_tensor_from_data(&y, ys, yshape, 2, MT_F32, dev));
  CHECK(nn_sequential_init(&net, spec, 3, 1, dev));
  n_params = nn_sequential_parameters(&net, params, NN_MAX_PARAMS);
  CHECK(mt_optim_sgd(&opt, params, n_params, 0.5, 0.0, 0.0, 0));

  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (e = 1; e <= epochs; e++) {
    if (eager || e == 1) {
      train_step(x, y, &net, opt, &pred, &loss);  /* the first step creates the gradients */
    } else {
      if (!graph) {  /* record one step; replays run it */
        CHECK(mt_graph_begin(dev));
        train_step(x, y, &net, opt, &pred, &loss);
        CHECK(mt_graph_end(&graph));
      }
      CHECK(mt_graph_replay(graph));
    }
    if (e % 500 == 0) {
      CHECK(mt_tensor_item(loss, &l));
      printf("epoch %4d  loss %.6f\n", e, l);
    }
  }
  CHECK(mt_synchronize());
  clock_gettime(CLOCK_MONOTONIC, &t1);
  CHECK(mt_tensor_copy_to_host(pred, out, sizeof out));
  for (i = 0; i < 4; i++) printf("xor(%g, %g) = %.4f (target %g)\n", xs[2 * i], xs[2 * i + 1], out[i], ys[i]);
  CHECK(mt_tensor_item(loss, &l));
  printf("final loss %.6f\n", l);
  printf("time %.1f ms for %d epochs (%s)\n", (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6, epochs,
         eager ? "eager" : "graph replay");

  mt_graph_free(graph);
  mt_optim_free(opt);
  nn_sequential_free(&net);
  mt_tensor_release(x);
  mt_tensor_release(y);
  mt_tensor_release(pred);
  mt_tensor_release(loss);
  if (mt_live_tensors() != 0) {
    fprintf(stderr, "leak: %lld tensors alive at exit\n", (long long)mt_live_tensors());
    return 1;
  }
  return l < 0.01 ? 0 : 1; /* 2 is a usage error */
}
