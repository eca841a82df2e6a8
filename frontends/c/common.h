/* common.h - what every demo uses: CHECK (print the status and mt_last_error(), exit 1),
 * RELEASE (mt_tensor_release of several handles, each CHECKed), die() / xmalloc() for the
 * demos' own errors, and flag_i64() / flag_range() / flag_f64() / flag_nonneg_f64() for
 * numeric flags. die() and the flag parsers prefix their messages with DEMO_NAME:
 * #define DEMO_NAME "mnist_mlp" before the first #include ("demo" if not). */
#ifndef MINITORCH_DEMO_COMMON_H
#define MINITORCH_DEMO_COMMON_H

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "minitorch.h"

#ifndef DEMO_NAME
#define DEMO_NAME "demo"
#endif

#define CHECK(call)                                                                                      \
  do {                                                                                                   \
    mt_status s_ = (call);                                                                               \
    if (s_ != MT_OK) {                                                                                   \
      const char *m_ = mt_last_error(); /* empty when the status came from the demo's own code */      \
      fprintf(stderr, "%s:%d: %s%s%s\n", __FILE__, __LINE__, mt_status_string(s_), *m_ ? ": " : "", m_); \
      exit(1);                                                                                           \
    }                                                                                                    \
  } while (0)

/* RELEASE(a, b, c): mt_tensor_release of each listed handle in order (NULL ones are
 * no-ops), each CHECKed at the caller's line. */
#define RELEASE(...)                                                                                     \
  do {                                                                                                   \
    mt_tensor *const rel_[] = {__VA_ARGS__};                                                             \
    size_t reli_;                                                                                        \
    for (reli_ = 0; reli_ < sizeof rel_ / sizeof rel_[0]; reli_++) CHECK(mt_tensor_release(rel_[reli_])); \
  } while (0)

/* Prints "DEMO_NAME: msg arg" (arg may be NULL) on stderr and exits 1. */
static inline void die(const char *msg, const char *arg) {
  fprintf(stderr, "%s: %s%s\n", DEMO_NAME, msg, arg ? arg : "");
  exit(1);
}

/* malloc that dies with "out of memory" instead of returning NULL (n 0 allocates 1 byte). */
static inline void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) die("out of memory", NULL);
  return p;
}

/* Names an argument the demo does not take before its usage line: "--bogus" is unknown;
 * v NULL (the last argument) may also be a flag missing its value. */
static inline void flag_unknown(const char *a, const char *v) {
  if (v) fprintf(stderr, "%s: unknown option %s\n", DEMO_NAME, a);
  else fprintf(stderr, "%s: %s is unknown or needs a value\n", DEMO_NAME, a);
}

/* The value v of the numeric flag `flag`: the whole string must be a number, else the demo
 * exits 1 naming both ("--steps wants an integer, got '12x'"), where atoi/atof would read 12
 * or 0 and go on. flag_range and flag_nonneg_f64 also check a range. */
static inline void flag_die(const char *flag, const char *want, const char *v) {
  fprintf(stderr, "%s: %s wants %s, got '%s'\n", DEMO_NAME, flag, want, v);
  exit(1);
}
static inline long long flag_i64(const char *flag, const char *v) {
  char *end = NULL;
  long long x;
  errno = 0;
  x = strtoll(v, &end, 10);
  if (v[0] == '\0' || *end != '\0' || errno == ERANGE) flag_die(flag, "an integer", v);
  return x;
}
/* flag_i64 within [lo, hi]: "--heads must be 1..65536, got 0". */
static inline long long flag_range(const char *flag, const char *v, long long lo, long long hi) {
  const long long x = flag_i64(flag, v);
  if (x < lo || x > hi) {
    fprintf(stderr, "%s: %s must be %lld..%lld, got %s\n", DEMO_NAME, flag, lo, hi, v);
    exit(1);
  }
  return x;
}
static inline double flag_f64(const char *flag, const char *v) {
  char *end = NULL;
  double x;
  errno = 0;
  x = strtod(v, &end);
  if (v[0] == '\0' || *end != '\0' || errno == ERANGE || !isfinite(x)) flag_die(flag, "a finite number", v);
  return x;
}

/* flag_f64 at least 0 (rates, momentum, weight decay): "--lr must be >= 0, got -0.5". */
static inline double flag_nonneg_f64(const char *flag, const char *v) {
  const double x = flag_f64(flag, v);
  if (x < 0) {
    fprintf(stderr, "%s: %s must be >= 0, got %s\n", DEMO_NAME, flag, v);
    exit(1);
  }
  return x;
}

#endif
