/* op_overhead.c - the host path of small ops, measured: microseconds per call of a few ops
 * on tiny tensors, where the kernels do next to nothing and what is timed is the call itself
 * (argument checks, the output's allocation, the tape, the launch), with and without autograd
 * recording, and of a tiny MLP's forward pass and training step.
 *
 *   op_overhead [--device cpu|cuda] [--calls N] [--runs R] [--only OP]
 *
 *   --device   default: the library's default device (CUDA when usable, else CPU)
 *   --calls N  calls per timed run of a single op (default 20000); the MLP rows run N / 10
 *   --runs R   timed runs per row (default 7); the row reports the median run
 *   --only OP  the rows of one op (add, mul, relu, matmul, sum, mlp_forward, mlp_train_step),
 *              e.g. to profile it
 *
 * Rows (inputs [4] float32 unless said; "grad yes": the inputs require grad, so every call is
 * recorded on the tape, which is cleared every 64 calls inside the timed loop, since releasing
 * what the tape holds is part of what recording costs):
 *   add, mul, relu, sum of [4]; matmul of two [4,4]
 *   mlp forward      Linear(4,8) -> ReLU -> Linear(8,1) and the MSE loss on a [4,4] batch,
 *                    grad mode off (4 op calls per step)
 *   mlp train step   the same forward, mt_optim_zero_grad, mt_backward, mt_optim_step (SGD)
 * Each run is timed by the wall clock from one mt_synchronize() to the next, so on CUDA the
 * time covers the kernels the calls queued (they are tiny; the host side is what dominates).
 * Before timing, each row's op is run once and its output compared with the value computed
 * here in double precision ("checked" in the table), so the loop times work that is right.
 *
 * The "host" column is the median, over the same runs, of the time until the last call returned
 * (before the closing mt_synchronize): what the calls cost the host alone. Where it is close to
 * the total, the host is the bound, not the device; with a run shorter than the device's launch
 * queue (--calls 256, say) the host never waits for the device to drain it, so the two columns
 * apart tell which of the two an op's time is.
 *
 * Output: a header line, one line per row:
 *   <op>  <shape>  grad no|yes  <median us per call>  <min us>  <max us>  <host us>  checked
 * and "live tensors: 0". Exit status 0, or 1 on a failed call, a wrong result or a leak. */
#define _POSIX_C_SOURCE 199309L
#define DEMO_NAME "op_overhead"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "nn.h"

#define MAX_RUNS 64
#define TAPE_CLEAR_EVERY 64

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* ---------------------------------------------------------------- the ops timed */

/* Inputs shared by the single-op rows: a, b [4]; ma, mb [4, 4] (float32, fixed values). */
typedef struct inputs {
  mt_tensor *a, *b, *ma, *mb;
  float av[4], bv[4], mav[16], mbv[16];
} inputs;

typedef enum op_kind { OP_ADD, OP_MUL, OP_RELU, OP_MATMUL, OP_SUM } op_kind;

static mt_status run_op(op_kind k, mt_tensor **out, const inputs *in) {
  switch (k) {
    case OP_ADD: return mt_add(out, in->a, in->b);
    case OP_MUL: return mt_mul(out, in->a, in->b);
    case OP_RELU: return mt_relu(out, in->a);
    case OP_MATMUL: return mt_matmul(out, in->ma, in->mb);
    case OP_SUM: return mt_sum(out, in->a);
  }
  return MT_ERR_INVALID_ARGUMENT;
}

/* The expected output of op k in double precision; returns its element count. */
static int expected(op_kind k, const inputs *in, double *want) {
  int i, j, l;
  switch (k) {
    case OP_ADD: for (i = 0; i < 4; i++) want[i] = (double)in->av[i] + in->bv[i]; return 4;
    case OP_MUL: for (i = 0; i < 4; i++) want[i] = (double)in->av[i] * in->bv[i]; return 4;
    case OP_RELU: for (i = 0; i < 4; i++) want[i] = in->av[i] > 0 ? in->av[i] : 0.0; return 4;
    case OP_SUM: want[0] = 0; for (i = 0; i < 4; i++) want[0] += in->av[i]; return 1;
    case OP_MATMUL:
      for (i = 0; i < 4; i++)
        for (j = 0; j < 4; j++) {
          want[4 * i + j] = 0;
          for (l = 0; l < 4; l++) want[4 * i + j] += (double)in->mav[4 * i + l] * in->mbv[4 * l + j];
        }
      return 16;
  }
  return 0;
}

/* Fails the program when t (float32) differs from want by more than float32 rounding. */
static void check_close(const char *what, mt_tensor *t, const double *want, int n) {
  float got[16];
  int i;
  CHECK(mt_tensor_copy_to_host(t, got, (int64_t)n * (int64_t)sizeof(float)));
  for (i = 0; i < n; i++)
    if (!(fabs(got[i] - want[i]) <= 1e-5 * (1 + fabs(want[i])))) {
      fprintf(stderr, "op_overhead: %s: element %d is %.9g, expected %.9g\n", what, i, got[i], want[i]);
      exit(1);
    }
}

static void inputs_init(inputs *in, mt_device dev) {
  const int64_t v[1] = {4}, m[2] = {4, 4};
  int i;
  for (i = 0; i < 4; i++) {
    in->av[i] = (float)(i - 1.5);   /* -1.5 -0.5 0.5 1.5: relu has both sides */
    in->bv[i] = (float)(0.25 * i + 1);
  }
  for (i = 0; i < 16; i++) {
    in->mav[i] = (float)((i % 5) - 2) * 0.5f;
    in->mbv[i] = (float)((i * 7) % 11) * 0.125f;
  }
  CHECK(mt_tensor_from_data(&in->a, in->av, v, 1, MT_F32, dev));
  CHECK(mt_tensor_from_data(&in->b, in->bv, v, 1, MT_F32, dev));
  CHECK(mt_tensor_from_data(&in->ma, in->mav, m, 2, MT_F32, dev));
  CHECK(mt_tensor_from_data(&in->mb, in->mbv, m, 2, MT_F32, dev));
}

static void inputs_requires_grad(const inputs *in, int on) {
  CHECK(mt_tensor_set_requires_grad(in->a, on));
  CHECK(mt_tensor_set_requires_grad(in->b, on));
  CHECK(mt_tensor_set_requires_grad(in->ma, on));
  CHECK(mt_tensor_set_requires_grad(in->mb, on));
}

/* ---------------------------------------------------------------- the tiny MLP */

typedef struct mlp {
  nn_sequential net;
  mt_optimizer *opt;
  mt_tensor *x, *y;  /* [4, 4] batch, [4, 1] targets */
  float xv[16], yv[4];
} mlp;

static void mlp_init(mlp *m, mt_device dev) {
  const nn_spec spec[3] = {nn_linear_spec(4, 8), nn_plain_spec(NN_RELU), nn_linear_spec(8, 1)};
  const int64_t xs[2] = {4, 4}, ys[2] = {4, 1};
  mt_tensor *params[NN_MAX_PARAMS];
  int i, n;
  for (i = 0; i < 16; i++) m->xv[i] = (float)((i * 5) % 7) / 7.0f - 0.4f;
  for (i = 0; i < 4; i++) m->yv[i] = (float)(i % 2);
  CHECK(mt_tensor_from_data(&m->x, m->xv, xs, 2, MT_F32, dev));
  CHECK(mt_tensor_from_data(&m->y, m->yv, ys, 2, MT_F32, dev));
  CHECK(nn_sequential_init(&m->net, spec, 3, 1, dev));
  n = nn_sequential_parameters(&m->net, params, NN_MAX_PARAMS);
  CHECK(mt_optim_sgd(&m->opt, params, n, 0.01, 0.0, 0.0, 0));
}

static void mlp_free(mlp *m) {
  CHECK(mt_optim_free(m->opt));
  CHECK(nn_sequential_free(&m->net));
  RELEASE(m->x, m->y);
}

/* *loss = mse(net(x), y); the prediction is released. */
static void mlp_forward(const mlp *m, mt_tensor **loss) {
  mt_tensor *pred;
  CHECK(nn_sequential_forward(&pred, &m->net, m->x));
  CHECK(mt_mse_loss(loss, pred, m->y));
  CHECK(mt_tensor_release(pred));
}

static void mlp_train_step(const mlp *m) {
  mt_tensor *loss;
  mlp_forward(m, &loss);
  CHECK(mt_optim_zero_grad(m->opt));
  CHECK(mt_backward(loss));
  CHECK(mt_optim_step(m->opt));
  CHECK(mt_tensor_release(loss));
}

/* The loss of the current weights computed here, in double precision. */
static double mlp_reference_loss(const mlp *m) {
  float w1[32], b1[8], w2[8], b2[1];
  double loss = 0;
  int r, o, i;
  CHECK(mt_tensor_copy_to_host(m->net.layer[0].linear.weight, w1, sizeof w1));
  CHECK(mt_tensor_copy_to_host(m->net.layer[0].linear.bias, b1, sizeof b1));
  CHECK(mt_tensor_copy_to_host(m->net.layer[2].linear.weight, w2, sizeof w2));
  CHECK(mt_tensor_copy_to_host(m->net.layer[2].linear.bias, b2, sizeof b2));
  for (r = 0; r < 4; r++) {
    double p = b2[0];
    for (o = 0; o < 8; o++) {
      double h = b1[o];
      for (i = 0; i < 4; i++) h += (double)w1[4 * o + i] * m->xv[4 * r + i];
      p += (h > 0 ? h : 0) * w2[o];
    }
    loss += (p - m->yv[r]) * (p - m->yv[r]);
  }
  return loss / 4;
}

/* ---------------------------------------------------------------- timing */

typedef enum row_kind { ROW_OP, ROW_MLP_FORWARD, ROW_MLP_STEP } row_kind;

typedef struct row {
  const char *name, *shape;
  row_kind kind;
  op_kind op;
  int grad;
} row;

/* One timed run of n calls of the row's work; returns microseconds per call, and in *host the
 * microseconds per call until the last call (and the tape's clearing) returned. */
static double timed_run(const row *r, const inputs *in, const mlp *m, long n, double *host) {
  double t0;
  long i;
  CHECK(mt_synchronize());
  t0 = now_us();
  for (i = 0; i < n; i++) {
    mt_tensor *out;
    switch (r->kind) {
      case ROW_OP:
        CHECK(run_op(r->op, &out, in));
        CHECK(mt_tensor_release(out));
        if (r->grad && (i + 1) % TAPE_CLEAR_EVERY == 0) CHECK(mt_tape_clear());
        break;
      case ROW_MLP_FORWARD:
        mlp_forward(m, &out);
        CHECK(mt_tensor_release(out));
        break;
      case ROW_MLP_STEP:
        mlp_train_step(m);
        break;
    }
  }
  CHECK(mt_tape_clear());
  *host = (now_us() - t0) / (double)n;
  CHECK(mt_synchronize());
  return (now_us() - t0) / (double)n;
}

/* Runs the row once and checks its result against the reference computed here. */
static void check_row(const row *r, const inputs *in, const mlp *m) {
  double want[16];
  mt_tensor *out;
  if (r->kind == ROW_OP) {
    int n = expected(r->op, in, want);
    CHECK(run_op(r->op, &out, in));
    check_close(r->name, out, want, n);
    CHECK(mt_tensor_release(out));
    if (r->grad && mt_tape_size() != 1) {
      fprintf(stderr, "op_overhead: %s with inputs that require grad left %lld tape entries, expected 1\n", r->name,
              (long long)mt_tape_size());
      exit(1);
    }
    CHECK(mt_tape_clear());
    return;
  }
  want[0] = mlp_reference_loss(m);
  mlp_forward(m, &out);
  check_close(r->name, out, want, 1);
  CHECK(mt_tensor_release(out));
  if (r->kind == ROW_MLP_STEP) {
    /* a step lowers the loss of this batch (lr 0.01: a small step down the gradient) */
    double before = want[0], after;
    mlp_train_step(m);
    after = mlp_reference_loss(m);
    if (!(after < before)) {
      fprintf(stderr, "op_overhead: %s: the loss went from %.9g to %.9g\n", r->name, before, after);
      exit(1);
    }
  }
}

static void usage(void) {
  fprintf(stderr, "usage: op_overhead [--device cpu|cuda] [--calls N] [--runs R] [--only OP]\n");
  exit(2);
}

int main(int argc, char **argv) {
  static const row rows[] = {
      {"add", "[4]", ROW_OP, OP_ADD, 0},        {"add", "[4]", ROW_OP, OP_ADD, 1},
      {"mul", "[4]", ROW_OP, OP_MUL, 0},        {"mul", "[4]", ROW_OP, OP_MUL, 1},
      {"relu", "[4]", ROW_OP, OP_RELU, 0},      {"relu", "[4]", ROW_OP, OP_RELU, 1},
      {"matmul", "[4,4]", ROW_OP, OP_MATMUL, 0}, {"matmul", "[4,4]", ROW_OP, OP_MATMUL, 1},
      {"sum", "[4]", ROW_OP, OP_SUM, 0},        {"sum", "[4]", ROW_OP, OP_SUM, 1},
      {"mlp_forward", "4-8-1", ROW_MLP_FORWARD, OP_ADD, 0},
      {"mlp_train_step", "4-8-1", ROW_MLP_STEP, OP_ADD, 1},
  };
  mt_device dev = mt_default_device();
  const char *only = NULL;
  long calls = 20000;
  int runs = 7, i, k, shown = 0;
  inputs in;
  mlp m;

  for (i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      flag_unknown(a, v);
      usage();
    }
    if (!strcmp(a, "--device")) {
      if (!strcmp(v, "cpu")) dev = MT_CPU;
      else if (!strcmp(v, "cuda")) dev = MT_CUDA;
      else die("--device must be cpu or cuda, got ", v);
    } else if (!strcmp(a, "--calls")) {
      calls = flag_i64(a, v);
      if (calls < 10) die("--calls must be >= 10, got ", v);
    } else if (!strcmp(a, "--only")) {
      only = v;
    } else if (!strcmp(a, "--runs")) {
      runs = (int)flag_range(a, v, 1, MAX_RUNS);
    } else {
      flag_unknown(a, v);
      usage();
    }
    i++;
  }

  inputs_init(&in, dev);
  mlp_init(&m, dev);
  printf("op_overhead: device %s, %ld calls per run (%ld for the mlp rows), median of %d runs\n",
         mt_device_name(dev), calls, calls / 10, runs);
  printf("%-15s %-6s %-5s %10s %10s %10s %10s\n", "op", "shape", "grad", "us/call", "min", "max", "host");
  for (k = 0; k < (int)(sizeof rows / sizeof rows[0]); k++) {
    const row *r = &rows[k];
    long n = r->kind == ROW_OP ? calls : calls / 10;
    double t[MAX_RUNS], h[MAX_RUNS];
    if (only && strcmp(only, r->name)) continue;
    shown++;
    if (r->kind == ROW_OP) inputs_requires_grad(&in, r->grad);
    mt_set_grad_enabled(r->kind != ROW_MLP_FORWARD);
    check_row(r, &in, &m);
    timed_run(r, &in, &m, n / 10 + 1, &h[0]); /* warm-up: caches, the device pool, lazy set-up */
    for (i = 0; i < runs; i++) t[i] = timed_run(r, &in, &m, n, &h[i]);
    qsort(t, (size_t)runs, sizeof t[0], cmp_double);
    qsort(h, (size_t)runs, sizeof h[0], cmp_double);
    printf("%-15s %-6s %-5s %10.3f %10.3f %10.3f %10.3f  checked\n", r->name, r->shape, r->grad ? "yes" : "no",
           t[runs / 2], t[0], t[runs - 1], h[runs / 2]);
    fflush(stdout);
  }
  mt_set_grad_enabled(1);
  if (only && !shown) die("--only names no row: ", only);

  mlp_free(&m);
  RELEASE(in.a, in.b, in.ma, in.mb);
  printf("live tensors: %lld\n", (long long)mt_live_tensors());
  return mt_live_tensors() == 0 ? 0 : 1;
}
