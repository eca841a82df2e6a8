/* xor.c - the XOR network Linear(2,4) -> Sigmoid -> Linear(4,1), MSE, SGD lr 0.5,
 * 5000 full-batch epochs, on the default device (CUDA when usable, else CPU).
 * Prints the loss every 500 epochs and the four predictions. On CUDA the step is
 * recorded into a graph after the first (eager) one and replayed: the same kernels
 * without the per-call host work. */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

/* PyTorch's nn.Linear default: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias. */
static mt_tensor *init_uniform(const int64_t *shape, int64_t ndim, int64_t fan_in, int64_t seed, mt_device dev) {
  mt_tensor *u, *scaled, *shifted;
  double bound = 1.0 / sqrt((double)fan_in);
  CHECK(mt_tensor_rand(&u, shape, ndim, seed, MT_F32, dev));
  CHECK(mt_mul_scalar(&scaled, u, 2.0 * bound));
  CHECK(mt_add_scalar(&shifted, scaled, -bound));
  mt_tensor_release(u);
  mt_tensor_release(scaled);
  CHECK(mt_tensor_set_requires_grad(shifted, 1));
  return shifted;
}

/* One training step: forward, zero_grad, backward, SGD. *pred and *loss receive the new
 * outputs (the previous ones are released first). */
static void train_step(mt_tensor *x, mt_tensor *y, mt_tensor **params, mt_optimizer *opt, mt_tensor **pred,
                       mt_tensor **loss) {
  mt_tensor *h, *a;
  mt_tensor_release(*pred);
  mt_tensor_release(*loss);
  CHECK(mt_linear(&h, x, params[0], params[1]));
  CHECK(mt_sigmoid(&a, h));
  CHECK(mt_linear(pred, a, params[2], params[3]));
  CHECK(mt_mse_loss(loss, *pred, y));
  CHECK(mt_optim_zero_grad(opt));
  CHECK(mt_backward(*loss));
  CHECK(mt_optim_step(opt));
  mt_tensor_release(h);
  mt_tensor_release(a);
}

int main(int argc, char **argv) {
  /* usage: xor [epochs] [--eager]: on CUDA the step is recorded once into a graph and
   * replayed, unless --eager */
  int epochs = 5000, eager = 0;
  mt_graph *graph = NULL;
  mt_device dev = mt_default_device();
  const float xs[8] = {0, 0, 0, 1, 1, 0, 1, 1};
  const float ys[4] = {0, 1, 1, 0};
  const int64_t xshape[2] = {4, 2}, yshape[2] = {4, 1};
  const int64_t w1s[2] = {4, 2}, b1s[1] = {4}, w2s[2] = {1, 4}, b2s[1] = {1};
  mt_tensor *x, *y, *params[4], *loss = NULL, *pred = NULL;
  mt_optimizer *opt;
  float out[4];
  double l = 0;
  int e, i;
  struct timespec t0, t1;
  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--eager") == 0) eager = 1;
    else epochs = atoi(argv[i]);
  }
  if (dev != MT_CUDA) eager = 1;

  printf("device: %s\n", mt_device_name(dev));
  CHECK(mt_tensor_from_data(&x, xs, xshape, 2, MT_F32, dev));
  CHECK(mt_tensor_from_data(&y, ys, yshape, 2, MT_F32, dev));
  params[0] = init_uniform(w1s, 2, 2, 1, dev);
  params[1] = init_uniform(b1s, 1, 2, 2, dev);
  params[2] = init_uniform(w2s, 2, 4, 3, dev);
  params[3] = init_uniform(b2s, 1, 4, 4, dev);
  CHECK(mt_optim_sgd(&opt, params, 4, 0.5, 0.0, 0.0, 0));

  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (e = 1; e <= epochs; e++) {
    if (eager || e == 1) {
      train_step(x, y, params, opt, &pred, &loss);  /* the first step creates the gradients */
    } else {
      if (!graph) {  /* record one step; replays run it */
        CHECK(mt_graph_begin(dev));
        train_step(x, y, params, opt, &pred, &loss);
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
  for (i = 0; i < 4; i++) mt_tensor_release(params[i]);
  mt_tensor_release(x);
  mt_tensor_release(y);
  mt_tensor_release(pred);
  mt_tensor_release(loss);
  if (mt_live_tensors() != 0) {
    fprintf(stderr, "leak: %lld tensors alive at exit\n", (long long)mt_live_tensors());
    return 1;
  }
  return l < 0.01 ? 0 : 2;
}
