/* mnist_cnn.c - the roadmap CNN trained on MNIST or Fashion-MNIST with cross-entropy,
 * mini-batches of 64, Adam (lr 1e-3, betas 0.9/0.999, as torch.optim.Adam's defaults) or
 * SGD (lr 0.05, momentum 0.9), on the default device (CUDA when usable, else CPU;
 * MT_DEVICE=cpu|cuda or --device override).
 *
 *   Conv2d(1,8,k3,p1) -> ReLU -> MaxPool2d(2) -> Conv2d(8,16,k3,p1) -> ReLU -> MaxPool2d(2)
 *   -> Flatten -> Linear(784,64) -> ReLU -> Linear(64,10)          [B,1,28,28] -> [B,10]
 *
 * With --bn each convolution is followed by BatchNorm2d (Conv -> BatchNorm -> ReLU -> Pool),
 * in training mode during the epochs and in eval mode (running statistics) for the test set.
 *
 *   mnist_cnn [--bn] [--data DIR] [--fashion] [--device cpu|cuda] [--optim adam|sgd] [--lr LR]
 *             [--momentum M] [--epochs N] [--batch B] [--limit N] [--test-limit N] [--seed S]
 *             [--standardize] [--csv PATH] [--no-graph] [--lr-decay-epoch E]
 *
 *   --lr-decay-epoch E  the learning rate x 0.1 after epoch E (default 0: constant)
 *   --epochs N     default 10 on CUDA, 1 on the CPU
 *   --limit N      train on the first N images only; on the CPU the default is the first 10000
 *                  (--limit 0: all 60000); --test-limit the same for the test set
 *   --csv PATH     metrics per epoch (epoch,train_loss,train_acc,test_loss,test_acc,seconds),
 *                  default out/mnist_cnn.csv (out/fashion_cnn.csv with --fashion); "" for none;
 *                  scripts/plot_metrics.py draws it
 *
 *   --no-graph     run every step eagerly (on CUDA the full-size step is otherwise recorded
 *                  once into a graph and replayed: step_graph.h)
 *
 * The data, batches, epoch loop,
 * evaluation and the final report (test accuracy, time, peak device memory) are
 * mnist_train.h's; weights start as torch.nn.Conv2d's and nn.Linear's defaults (nn.h).
 * Targets: test accuracy >= 98.5% on MNIST and >= 89% on Fashion-MNIST after 10 epochs.
 */
#define _POSIX_C_SOURCE 200809L
#define DEMO_NAME "mnist_cnn"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnist_train.h"

static void usage(void) {
  fprintf(stderr, "usage: mnist_cnn [--bn] " MNIST_TRAIN_USAGE "\n");
  exit(2);
}

/* --bn */
static int cnn_flag(void *ctx, const char *flag, const char *value) {
  (void)value;
  if (strcmp(flag, "--bn")) return 0;
  *(int *)ctx = 1;
  return 1;
}

int main(int argc, char **argv) {
  int bn = 0, n = 0;
  nn_spec spec[14];
  mnist_train_options t = mnist_train_defaults("out/mnist_cnn.csv", "out/fashion_cnn.csv");
  mnist_train_parse(&t, argc, argv, cnn_flag, &bn, usage);

  /* two blocks of Conv(k3, p1) [-> BatchNorm] -> ReLU -> MaxPool(2): 28x28 -> 14x14 -> 7x7 */
  spec[n++] = nn_conv2d_spec(1, 8, 3, 1, 1);
  if (bn) spec[n++] = nn_batch_norm2d_spec(8);
  spec[n++] = nn_plain_spec(NN_RELU);
  spec[n++] = nn_pool2d_spec(NN_MAX_POOL2D, 2);
  spec[n++] = nn_conv2d_spec(8, 16, 3, 1, 1);
  if (bn) spec[n++] = nn_batch_norm2d_spec(16);
  spec[n++] = nn_plain_spec(NN_RELU);
  spec[n++] = nn_pool2d_spec(NN_MAX_POOL2D, 2);
  spec[n++] = nn_plain_spec(NN_FLATTEN);
  spec[n++] = nn_linear_spec(16 * 7 * 7, 64);
  spec[n++] = nn_plain_spec(NN_RELU);
  spec[n++] = nn_linear_spec(64, MNIST_CLASSES);
  return mnist_train_run(&t, bn ? "roadmap CNN with BatchNorm" : "roadmap CNN", spec, n);
}
