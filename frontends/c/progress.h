/* progress.h - what the training demos share besides CHECK: a progress bar on stderr
 * (rate and ETA), a metrics CSV writer and a running mean of the training loss kept on the
 * device. Header-only, C99 + POSIX clocks: define _POSIX_C_SOURCE 200809L before the first
 * #include of the program.
 *
 *   progress pb;
 *   progress_start(&pb, "epoch 1/10", steps, "batch");
 *   for (i = 0; i < steps; i++) {
 *     ... one step ...
 *     if (progress_due(&pb, i + 1)) { read the loss; progress_show(&pb, i + 1, "loss 0.31"); }
 *   }
 *   progress_finish(&pb, "loss 0.29");
 *
 * On a terminal the bar redraws in place at most 10 times a second; when stderr is a
 * file or a pipe (tests, CI logs) only the final line is printed.
 *
 *   metrics_csv m;
 *   metrics_open(&m, "out/mnist_mlp.csv", "epoch,train_loss,test_loss,test_acc");
 *   metrics_row(&m, (double[]){1, 0.29, 0.14, 0.958}, 4);
 *   metrics_close(&m);
 *
 * A loss_meter keeps an epoch's mean training loss on the device (read back only when the
 * bar is drawn and at the end of the epoch):
 *
 *   loss_meter lm;
 *   loss_meter_start(&lm, dev);
 *   for (i = 0; i < steps; i++) {
 *     ... loss = the step's mean loss over a batch of n ...
 *     loss_meter_add(&lm, loss, n);
 *     loss_meter_show(&lm, &pb, i + 1, "loss %.4f");
 *   }
 *   mean = loss_meter_end(&lm);
 */
#ifndef MINITORCH_DEMO_PROGRESS_H
#define MINITORCH_DEMO_PROGRESS_H

#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#error "define _POSIX_C_SOURCE 200809L before the first #include (progress.h needs clock_gettime, isatty, mkdir)"
#endif

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

/* Seconds on a monotonic clock. */
static inline double progress_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct progress {
  const char *label; /* borrowed, e.g. "epoch 3/10" */
  const char *unit;  /* borrowed, e.g. "batch" */
  int64_t total;
  double start, last_draw;
  int tty;
} progress;

static inline void progress_start(progress *p, const char *label, int64_t total, const char *unit) {
  p->label = label;
  p->unit = unit;
  p->total = total > 0 ? total : 1;
  p->start = progress_clock();
  p->last_draw = 0;
  p->tty = isatty(fileno(stderr));
}

/* "1:05", "12:03:07" */
static inline void progress_fmt_time(char *buf, size_t n, double s) {
  long t = s < 0 ? 0 : (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

/* True when a redraw is worth its cost: on a terminal every 0.1 s and at the end. */
static inline int progress_due(const progress *p, int64_t done) {
  if (!p->tty) return 0;
  return done >= p->total || progress_clock() - p->last_draw >= 0.1;
}

static inline void progress_draw(progress *p, int64_t done, const char *extra, int final) {
  enum { WIDTH = 24 };
  char bar[WIDTH + 1], eta[32], took[32];
  double now = progress_clock(), elapsed = now - p->start;
  double rate = elapsed > 0 ? (double)done / elapsed : 0;
  int filled = (int)((double)WIDTH * (double)done / (double)p->total), i;
  if (filled > WIDTH) filled = WIDTH;
  for (i = 0; i < WIDTH; i++) bar[i] = i < filled ? '#' : '-';
  bar[WIDTH] = '\0';
  progress_fmt_time(eta, sizeof eta, rate > 0 ? (double)(p->total - done) / rate : 0);
  progress_fmt_time(took, sizeof took, elapsed);
  if (final) {
    fprintf(stderr, "%s%s [%s] %lld/%lld %.1f %s/s in %s%s%s\n", p->tty ? "\r" : "", p->label, bar, (long long)done,
            (long long)p->total, rate, p->unit, took, extra && *extra ? "  " : "", extra ? extra : "");
  } else {
    fprintf(stderr, "\r%s [%s] %3d%% %lld/%lld %.1f %s/s ETA %s%s%s\033[K", p->label, bar,
            (int)(100.0 * (double)done / (double)p->total), (long long)done, (long long)p->total, rate, p->unit, eta,
            extra && *extra ? "  " : "", extra ? extra : "");
  }
  if (final && p->tty) fprintf(stderr, "\033[K");
  fflush(stderr);
  p->last_draw = now;
}

/* Redraws the bar (a no-op when stderr is not a terminal). extra may be NULL. */
static inline void progress_show(progress *p, int64_t done, const char *extra) {
  if (p->tty) progress_draw(p, done, extra, 0);
}

/* The final line, with the total time, always printed. */
static inline void progress_finish(progress *p, const char *extra) { progress_draw(p, p->total, extra, 1); }

/* ---------------------------------------------------------------- metrics CSV */

typedef struct metrics_csv {
  FILE *f; /* NULL: disabled */
  int ncols;
} metrics_csv;

/* mkdir -p: creates dir and its missing parents. Returns 0, or -1 with errno set. */
static inline int make_dirs(const char *dir) {
  char buf[4096];
  size_t i, n = strlen(dir);
  if (n == 0) return 0;
  if (n >= sizeof buf) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(buf, dir, n + 1);
  for (i = 1; i <= n; i++)
    if (buf[i] == '/' || buf[i] == '\0') {
      const char keep = buf[i];
      buf[i] = '\0';
      if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
      buf[i] = keep;
    }
  return 0;
}

/* Creates the file's directory and its parents if needed and writes the header.
 * path NULL or "" disables the writer. Returns 0, or -1 after printing why. */
static inline int metrics_open(metrics_csv *m, const char *path, const char *header) {
  const char *c;
  m->f = NULL;
  m->ncols = 1;
  for (c = header; *c; c++) m->ncols += *c == ',';
  if (!path || !*path) return 0;
  {
    const char *slash = strrchr(path, '/');
    if (slash && slash != path) {
      char dir[4096];
      size_t n = (size_t)(slash - path);
      if (n < sizeof dir) {
        memcpy(dir, path, n);
        dir[n] = '\0';
        if (make_dirs(dir) != 0) {
          fprintf(stderr, "metrics: cannot create %s: %s\n", dir, strerror(errno));
          return -1;
        }
      }
    }
  }
  m->f = fopen(path, "w");
  if (!m->f) {
    fprintf(stderr, "metrics: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  fprintf(m->f, "%s\n", header);
  fflush(m->f);
  return 0;
}

/* One row of n values (n must equal the header's column count); flushed at once so a
 * run cut short keeps what it measured. */
static inline void metrics_row(metrics_csv *m, const double *vals, int n) {
  int i;
  if (!m->f) return;
  if (n != m->ncols) fprintf(stderr, "metrics: row of %d values for %d columns\n", n, m->ncols);
  for (i = 0; i < n; i++) fprintf(m->f, "%s%.8g", i ? "," : "", vals[i]);
  fputc('\n', m->f);
  fflush(m->f);
}

static inline void metrics_close(metrics_csv *m) {
  if (m->f) fclose(m->f);
  m->f = NULL;
}

/* ---------------------------------------------------------------- running loss */

typedef struct loss_meter {
  mt_tensor *sum; /* 0-d float32 on the device: the sum of loss * n so far; owned */
  int64_t seen;   /* the n so far */
} loss_meter;

/* A zero sum on dev; loss_meter_end releases it. */
static inline void loss_meter_start(loss_meter *m, mt_device dev) {
  CHECK(mt_tensor_zeros(&m->sum, NULL, 0, MT_F32, dev));
  m->seen = 0;
}

/* sum += loss * n, not recorded (grad mode is restored after). loss, the mean over a batch
 * of n, is borrowed: the caller still releases it. */
static inline void loss_meter_add(loss_meter *m, mt_tensor *loss, int64_t n) {
  mt_tensor *scaled, *sum;
  int64_t prev = mt_set_grad_enabled(0);
  CHECK(mt_mul_scalar(&scaled, loss, (double)n));
  CHECK(mt_add(&sum, m->sum, scaled));
  mt_set_grad_enabled(prev);
  CHECK(mt_tensor_release(m->sum));
  m->sum = sum;
  m->seen += n;
  CHECK(mt_tensor_release(scaled));
}

/* The mean so far (reads the device). */
static inline double loss_meter_mean(const loss_meter *m) {
  double v;
  CHECK(mt_tensor_item(m->sum, &v));
  return v / (double)m->seen;
}

/* When the bar is due (progress_due), reads the mean and redraws the bar with it, written
 * by fmt (a printf format with one double, e.g. "loss %.4f"). */
static inline void loss_meter_show(const loss_meter *m, progress *p, int64_t done, const char *fmt) {
  char extra[64];
  if (!progress_due(p, done)) return;
  snprintf(extra, sizeof extra, fmt, loss_meter_mean(m));
  progress_show(p, done, extra);
}

/* The epoch's mean loss; releases the sum. */
static inline double loss_meter_end(loss_meter *m) {
  double mean = loss_meter_mean(m);
  CHECK(mt_tensor_release(m->sum));
  m->sum = NULL;
  return mean;
}

#endif
