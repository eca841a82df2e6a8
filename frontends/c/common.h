/* common.h - what every demo uses: CHECK (print the status and mt_last_error(), exit 1),
 * RELEASE (mt_tensor_release of several handles, each CHECKed), and die() / xmalloc() for
 * the demos' own errors. die() prefixes its message with DEMO_NAME: #define DEMO_NAME
 * "mnist_mlp" before the first #include ("demo" if not). */
#ifndef MINITORCH_DEMO_COMMON_H
#define MINITORCH_DEMO_COMMON_H

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
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, mt_status_string(s_), mt_last_error());   \
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

#endif
