/* char_data.h - the data side of char_gpt.c: a text file as a character corpus (CRLF -> LF, the
 * byte vocabulary, the 90/10 split, the unigram entropy) and the stateless batch sampler, whose
 * windows depend on (seed, stream, step, row) only, so that a resumed run draws the batches of
 * the run it continues. frontends/python/minitorch/gpt.py has the same functions in Python
 * (load_corpus, batch_offset, get_batch, unigram_entropy) and draws the same windows.
 * Header-only C99; needs common.h (die, xmalloc). */
#ifndef MINITORCH_DEMO_CHAR_DATA_H
#define MINITORCH_DEMO_CHAR_DATA_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define STREAM_TRAIN 1
#define STREAM_VAL 2
#define STREAM_SAMPLE 3

/* ---------------------------------------------------------------- corpus */

typedef struct corpus {
  uint8_t *ids;     /* token ids of the whole text; owned */
  int64_t n, n_train; /* ids[0 .. n_train) trains, ids[n_train .. n) validates */
  int vocab;
  uint8_t chars[256]; /* id -> byte */
  int id_of[256];     /* byte -> id, -1 when absent */
} corpus;

/* Reads path, turns CRLF into LF, keeps the first max_chars characters (0: all), builds the
 * byte vocabulary and the 90/10 split. Dies with the reason on failure. */
static inline void corpus_load(corpus *c, const char *path, int64_t max_chars) {
  FILE *f = fopen(path, "rb");
  int64_t cap = 1 << 20, n = 0, i, j;
  int ch, b;
  uint8_t *text;
  int seen[256] = {0};
  if (!f) {
    fprintf(stderr, "char_gpt: cannot open %s: %s (scripts/fetch_data.sh shakespeare fetches the default corpus)\n",
            path, strerror(errno));
    exit(1);
  }
  text = (uint8_t *)xmalloc((size_t)cap);
  while ((ch = fgetc(f)) != EOF) {
    if (n == cap) {
      uint8_t *t = (uint8_t *)realloc(text, (size_t)(cap *= 2));
      if (!t) die("out of memory reading ", path);
      text = t;
    }
    text[n++] = (uint8_t)ch;
  }
  fclose(f);
  for (i = j = 0; i < n; i++)
    if (!(text[i] == '\r' && i + 1 < n && text[i + 1] == '\n')) text[j++] = text[i];
  n = j;
  if (max_chars > 0 && n > max_chars) n = max_chars;
  for (i = 0; i < n; i++) seen[text[i]] = 1;
  c->vocab = 0;
  for (b = 0; b < 256; b++) {
    c->id_of[b] = seen[b] ? c->vocab : -1;
    if (seen[b]) c->chars[c->vocab++] = (uint8_t)b;
  }
  for (i = 0; i < n; i++) text[i] = (uint8_t)c->id_of[text[i]];
  c->ids = text;
  c->n = n;
  c->n_train = n * 9 / 10;
}

/* The entropy (nats) of the character distribution of the training split: the loss of the
 * best model that ignores the context. */
static inline double unigram_entropy(const corpus *c) {
  int64_t count[256] = {0}, i;
  double h = 0;
  for (i = 0; i < c->n_train; i++) count[c->ids[i]]++;
  for (i = 0; i < 256; i++)
    if (count[i]) {
      double p = (double)count[i] / (double)c->n_train;
      h -= p * log(p);
    }
  return h;
}

/* ---------------------------------------------------------------- batches */

static inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* A number in [0, range) that depends on (seed, stream, step, row) only: the batch sampler keeps
 * no state, so a resumed run draws the batches of the run it continues. The Python twin
 * (minitorch.gpt.batch_offset) computes the same numbers. */
static inline int64_t batch_offset(int64_t seed, int64_t stream, int64_t step, int64_t row, int64_t range) {
  uint64_t h = splitmix64(splitmix64(splitmix64((uint64_t)seed) ^ (uint64_t)stream) ^ (uint64_t)step);
  return (int64_t)(splitmix64(h ^ (uint64_t)row) % (uint64_t)range);
}

/* Fills x [B, T] and y [B * T] (host, int64) with B windows of the split [lo, hi): y is x shifted
 * by one character. */
static inline void fill_batch(const corpus *c, int64_t lo, int64_t hi, int64_t seed, int64_t stream, int64_t step,
                       int64_t B, int64_t T, int64_t *x, int64_t *y) {
  int64_t b, t;
  for (b = 0; b < B; b++) {
    int64_t off = lo + batch_offset(seed, stream, step, b, hi - lo - T);
    for (t = 0; t < T; t++) {
      x[b * T + t] = c->ids[off + t];
      y[b * T + t] = c->ids[off + t + 1];
    }
  }
}

#endif
