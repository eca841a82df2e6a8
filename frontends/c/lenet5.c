/* lenet5.c - LeNet-5 on MNIST (or Fashion-MNIST) with cross-entropy, mini-batches of 64 and
 * Adam (lr 1e-3), on the default device (CUDA when usable, else CPU; MT_DEVICE=cpu|cuda or
 * --device override). The 28x28 images are padded by 2 in the first convolution, which
 * stands in for LeCun's 32x32 input:
 *
 *   Conv2d(1,6,k5,p2) -> ReLU -> MaxPool2d(2) -> Conv2d(6,16,k5) -> ReLU -> MaxPool2d(2)
 *   -> Flatten -> Linear(400,120) -> ReLU -> Linear(120,84) -> ReLU -> Linear(84,10)
 *
 * --tanh and --avgpool give the 1998 paper's activations and subsampling instead (tanh,
 * average pooling); the ReLU + max-pool default trains faster.
 *
 *   lenet5 [--tanh] [--avgpool] [--data DIR] [--fashion] [--device cpu|cuda] [--optim adam|sgd]
 *          [--lr LR] [--momentum M] [--epochs N] [--batch B] [--limit N] [--test-limit N]
 *          [--seed S] [--standardize] [--csv PATH] [--no-graph] [--lr-decay-epoch E]
 *
 *   --epochs N     default 15 on CUDA, 1 on the CPU
 *   --limit N      as mnist_cnn: the first 10000 training images on the CPU by default
 *   --csv PATH     default out/lenet5.csv (out/fashion_lenet5.csv with --fashion); "" for none
 *
 * Everything but the model is mnist_train.h's, as in mnist_cnn.c.
 * The learning rate (Adam's 1e-3 by default, or --lr with either optimizer) drops to a tenth of
 * itself after epoch 10 (--lr-decay-epoch E moves it, 0 keeps it constant).
 * Target: test accuracy >= 99% on MNIST after 15 epochs.
 */
#define _POSIX_C_SOURCE 200809L
#define DEMO_NAME "lenet5"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnist_train.h"

static void usage(void) {
  fprintf(stderr, "usage: lenet5 [--tanh] [--avgpool] " MNIST_TRAIN_USAGE "\n");
  exit(2);
}

typedef struct lenet_flags {
  nn_kind act, pool;
} lenet_flags;

/* --tanh, --avgpool */
static int lenet_flag(void *ctx, const char *flag, const char *value) {
  lenet_flags *f = (lenet_flags *)ctx;
  (void)value;
  if (!strcmp(flag, "--tanh")) f->act = NN_TANH;
  else if (!strcmp(flag, "--avgpool")) f->pool = NN_AVG_POOL2D;
  else return 0;
  return 1;
}

int main(int argc, char **argv) {
  lenet_flags f = {NN_RELU, NN_MAX_POOL2D};
  mnist_train_options t = mnist_train_defaults("out/lenet5.csv", "out/fashion_lenet5.csv");
  t.gpu_epochs = 15;
  t.lr_decay_epoch = 10;
  mnist_train_parse(&t, argc, argv, lenet_flag, &f, usage);
  {
    /* 28x28 -(conv p2)-> 28x28 -(pool)-> 14x14 -(conv)-> 10x10 -(pool)-> 5x5: 16*5*5 = 400 */
    const nn_spec spec[12] = {nn_conv2d_spec(1, 6, 5, 1, 2), nn_plain_spec(f.act), nn_pool2d_spec(f.pool, 2),
                              nn_conv2d_spec(6, 16, 5, 1, 0), nn_plain_spec(f.act), nn_pool2d_spec(f.pool, 2),
                              nn_plain_spec(NN_FLATTEN),       nn_linear_spec(400, 120), nn_plain_spec(f.act),
                              nn_linear_spec(120, 84),         nn_plain_spec(f.act),     nn_linear_spec(84, MNIST_CLASSES)};
    return mnist_train_run(&t, "LeNet-5", spec, 12);
  }
}
