/*
 * builtins.c - the functions every script sees without a declaration, and the
 * formatter behind printing statements, Print, MStrPrint and StrPrint.
 */
#include "parse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
  B_PRINT, B_MSTRPRINT, B_STRPRINT, B_MALLOC, B_CALLOC, B_FREE, B_MEMCPY, B_MEMSET, B_STRLEN,
  B_STRCPY, B_STRCMP, B_STRNEW, B_STRCAT, B_EXIT, B_SQRT, B_EXP, B_LN, B_FLOOR, B_CEIL, B_ABS,
  B_ABSI64, B_SIN, B_COS, B_TAN, B_ATAN, B_POW, B_LOG10, B_LOG2, B_ROUND, B_TRUNC, B_TOF64,
  B_TOI64, B_TOBOOL, B_THROW, B_FILEREAD, B_FILEWRITE, B_PUTCHARS, B_RAND, B_SEED, B_TS,
  B_STR2I64, B_STR2F64, B_LSQRT, B_LEXP, B_LLOG, B_LPOW, B_LFABS, B_LFLOOR, B_LCEIL
};

typedef struct { const char *name; int id; const char *ret; const char *params; } BuiltinDef;

/* params: comma-separated "type name[=default]"; "..." for varargs. Types: I64 F64 Bool U0 U8* U0* I64* */
static const BuiltinDef defs[] = {
  {"Print", B_PRINT, "U0", "U8* fmt,..."},
  {"MStrPrint", B_MSTRPRINT, "U8*", "U8* fmt,..."},
  {"StrPrint", B_STRPRINT, "U8*", "U8* dst,U8* fmt,..."},
  {"MAlloc", B_MALLOC, "U0*", "I64 size"},
  {"CAlloc", B_CALLOC, "U0*", "I64 size"},
  {"Free", B_FREE, "U0", "U0* ptr"},
  {"MemCpy", B_MEMCPY, "U0*", "U0* dst,U0* src,I64 n"},
  {"MemSet", B_MEMSET, "U0*", "U0* dst,I64 val,I64 n"},
  {"StrLen", B_STRLEN, "I64", "U8* s"},
  {"StrCpy", B_STRCPY, "U8*", "U8* dst,U8* src"},
  {"StrCmp", B_STRCMP, "I64", "U8* a,U8* b"},
  {"StrNew", B_STRNEW, "U8*", "U8* s"},
  {"StrCat", B_STRCAT, "U8*", "U8* dst,U8* src"},
  {"Exit", B_EXIT, "U0", "I64 code=0"},
  {"Sqrt", B_SQRT, "F64", "F64 x"},
  {"Exp", B_EXP, "F64", "F64 x"},
  {"Ln", B_LN, "F64", "F64 x"},
  {"Floor", B_FLOOR, "F64", "F64 x"},
  {"Ceil", B_CEIL, "F64", "F64 x"},
  {"Abs", B_ABS, "F64", "F64 x"},
  {"AbsI64", B_ABSI64, "I64", "I64 x"},
  {"Sin", B_SIN, "F64", "F64 x"},
  {"Cos", B_COS, "F64", "F64 x"},
  {"Tan", B_TAN, "F64", "F64 x"},
  {"ATan", B_ATAN, "F64", "F64 x"},
  {"Pow", B_POW, "F64", "F64 x,F64 y"},
  {"Log10", B_LOG10, "F64", "F64 x"},
  {"Log2", B_LOG2, "F64", "F64 x"},
  {"Round", B_ROUND, "F64", "F64 x"},
  {"Trunc", B_TRUNC, "F64", "F64 x"},
  {"ToF64", B_TOF64, "F64", "F64 x"},
  {"ToI64", B_TOI64, "I64", "F64 x"},
  {"ToBool", B_TOBOOL, "Bool", "I64 x"},
  {"throw", B_THROW, "U0", "I64 ch=0"},
  {"FileRead", B_FILEREAD, "U8*", "U8* name,I64* size=0"},
  {"FileWrite", B_FILEWRITE, "Bool", "U8* name,U0* buf,I64 size"},
  {"PutChars", B_PUTCHARS, "U0", "I64 ch"},
  {"Rand", B_RAND, "F64", ""},
  {"Seed", B_SEED, "U0", "I64 seed"},
  {"tS", B_TS, "F64", ""},
  {"Str2I64", B_STR2I64, "I64", "U8* s,I64 radix=10,U8** end=0"},
  {"Str2F64", B_STR2F64, "F64", "U8* s,U8** end=0"},
  {"sqrt", B_LSQRT, "F64", "F64 x"},
  {"exp", B_LEXP, "F64", "F64 x"},
  {"log", B_LLOG, "F64", "F64 x"},
  {"pow", B_LPOW, "F64", "F64 x,F64 y"},
  {"fabs", B_LFABS, "F64", "F64 x"},
  {"floor", B_LFLOOR, "F64", "F64 x"},
  {"ceil", B_LCEIL, "F64", "F64 x"},
  {NULL, 0, NULL, NULL}
};

static Type *type_of(const char *s, size_t n) {
  if (n == 3 && !memcmp(s, "I64", 3)) return ty_i64;
  if (n == 3 && !memcmp(s, "F64", 3)) return ty_f64;
  if (n == 4 && !memcmp(s, "Bool", 4)) return ty_bool;
  if (n == 2 && !memcmp(s, "U0", 2)) return ty_void;
  if (n == 3 && !memcmp(s, "U8*", 3)) return ty_ptr(ty_u8);
  if (n == 3 && !memcmp(s, "U0*", 3)) return ty_ptr(ty_void);
  if (n == 4 && !memcmp(s, "I64*", 4)) return ty_ptr(ty_i64);
  if (n == 4 && !memcmp(s, "U8**", 4)) return ty_ptr(ty_ptr(ty_u8));
  return ty_void;
}

void hc_builtins_declare(void (*declare)(const char *, Type *, int, int, Type **, const char **, Node **, bool)) {
  for (const BuiltinDef *d = defs; d->name; d++) {
    Type *pt[8];
    const char *pn[8];
    Node *pd[8];
    int n = 0;
    bool varargs = false;
    const char *p = d->params;
    while (*p) {
      const char *end = strchr(p, ',');
      if (!end) end = p + strlen(p);
      if (end - p == 3 && !memcmp(p, "...", 3)) {
        varargs = true;
      } else {
        const char *sp = memchr(p, ' ', (size_t)(end - p));
        const char *eq = memchr(p, '=', (size_t)(end - p));
        pt[n] = type_of(p, (size_t)(sp - p));
        pn[n] = arena_strndup(sp + 1, (size_t)((eq ? eq : end) - sp - 1));
        pd[n] = NULL;
        if (eq) {
          pd[n] = new_int(atoll(eq + 1), (Pos){-1, 0, 0});
          if (pt[n]->kind == T_PTR) pd[n]->ty = pt[n];
        }
        n++;
      }
      p = *end ? end + 1 : end;
    }
    declare(d->name, type_of(d->ret, strlen(d->ret)), d->id, n, pt, pn, pd, varargs);
  }
}

/* ------------------------------------------------------------- formatting */
typedef struct { char *s; int64_t n, cap; } Buf;

static void put(Buf *b, const char *s, int64_t n) {
  if (b->n + n + 1 > b->cap) {
    int64_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + n + 1) cap *= 2;
    char *ns = realloc(b->s, (size_t)cap);
    if (!ns) {
      free(b->s);
      fprintf(stderr, "hcrun: out of memory\n");
      hc_exit(1);
    }
    b->s = ns;
    b->cap = cap;
  }
  memcpy(b->s + b->n, s, (size_t)n);
  b->n += n;
  b->s[b->n] = 0;
}

static double as_f64(Value v, Type *t) { return hc_convert(v, t, ty_f64).f; }
static int64_t as_i64(Value v, Type *t) { return t->kind == T_F64 ? hc_convert(v, t, ty_i64).i : v.i; }

char *hc_format(Pos pos, const char *fmt, Value *args, Type **argty, int nargs, int64_t *outlen) {
  Buf b = {0};
  put(&b, "", 0);
  int ai = 0;
  for (const char *p = fmt; *p;) {
    if (*p != '%') {
      const char *q = p;
      while (*q && *q != '%') q++;
      put(&b, p, q - p);
      p = q;
      continue;
    }
    p++;
    if (*p == '%') {
      put(&b, "%", 1);
      p++;
      continue;
    }
    char spec[64];
    int sn = 0;
    spec[sn++] = '%';
    while (*p && strchr("-+ 0#", *p)) {
      if (sn < 8) spec[sn++] = *p;
      p++;
    }
    int64_t width = -1, prec = -1;
    if (*p == '*') {
      if (ai >= nargs) { free(b.s); hc_runtime_error(pos, "too few arguments for format string"); }
      width = as_i64(args[ai], argty[ai]);
      ai++;
      p++;
    } else {
      while (*p >= '0' && *p <= '9') {
        width = (width < 0 ? 0 : width) * 10 + (*p++ - '0');
        if (width > 100000) { free(b.s); hc_runtime_error(pos, "format width too large"); }
      }
    }
    if (*p == '.') {
      p++;
      prec = 0;
      if (*p == '*') {
        if (ai >= nargs) { free(b.s); hc_runtime_error(pos, "too few arguments for format string"); }
        prec = as_i64(args[ai], argty[ai]);
        ai++;
        p++;
      } else {
        while (*p >= '0' && *p <= '9') {
          prec = prec * 10 + (*p++ - '0');
          if (prec > 100000) { free(b.s); hc_runtime_error(pos, "format precision too large"); }
        }
      }
    }
    if (width > 100000 || prec > 100000) { free(b.s); hc_runtime_error(pos, "format width too large"); }
    while (*p && strchr("lhzjtqL", *p)) p++;
    char conv = *p;
    if (!conv) { free(b.s); hc_runtime_error(pos, "format string ends inside a conversion"); }
    p++;
    if (!strchr("diuxXocsfFeEgGp", conv)) { free(b.s); hc_runtime_error(pos, "unknown format conversion '%%%c'", conv); }
    if (ai >= nargs) { free(b.s); hc_runtime_error(pos, "too few arguments for format string"); }
    Value v = args[ai];
    Type *t = argty[ai];
    ai++;
    if (width >= 0) sn += snprintf(spec + sn, sizeof spec - (size_t)sn, "%lld", (long long)width);
    if (prec >= 0) sn += snprintf(spec + sn, sizeof spec - (size_t)sn, ".%lld", (long long)prec);
    char small[512];
    char *out = small;
    int len = 0;
    size_t cap = (size_t)(width > prec ? width : prec) + 400;
    if (cap > sizeof small) out = malloc(cap);
    if (!out) { free(b.s); hc_runtime_error(pos, "out of memory"); }
    switch (conv) {
      case 'd': case 'i':
        spec[sn++] = 'l';
        spec[sn++] = 'l';
        spec[sn++] = 'd';
        spec[sn] = 0;
        len = snprintf(out, cap, spec, (long long)as_i64(v, t));
        break;
      case 'u': case 'x': case 'X': case 'o':
        spec[sn++] = 'l';
        spec[sn++] = 'l';
        spec[sn++] = conv;
        spec[sn] = 0;
        len = snprintf(out, cap, spec, (unsigned long long)as_i64(v, t));
        break;
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G':
        spec[sn++] = conv;
        spec[sn] = 0;
        len = snprintf(out, cap, spec, as_f64(v, t));
        break;
      case 'p':
        spec[sn++] = 'p';
        spec[sn] = 0;
        len = snprintf(out, cap, spec, v.p);
        break;
      case 'c': {
        char cs[9];
        int k = 0;
        uint64_t c = (uint64_t)as_i64(v, t);
        do {
          cs[k++] = (char)(c & 255);
          c >>= 8;
        } while (c && k < 8);
        cs[k] = 0;
        spec[sn++] = 's';
        spec[sn] = 0;
        len = snprintf(out, cap, spec, cs);
        break;
      }
      case 's': {
        if (t->kind != T_PTR && !(ty_is_int(t) && v.i == 0)) {
          if (out != small) free(out);
          free(b.s);
          hc_runtime_error(pos, "%%s needs a string argument");
        }
        const char *s = v.p ? (const char *)v.p : "(null)";
        size_t sl = prec >= 0 ? strnlen(s, (size_t)prec) : strlen(s);
        int64_t pad = width > (int64_t)sl ? width - (int64_t)sl : 0;
        bool left = memchr(spec, '-', (size_t)sn) != NULL;
        if (out != small) free(out);
        out = small;
        for (int64_t k = 0; !left && k < pad; k++) put(&b, " ", 1);
        put(&b, s, (int64_t)sl);
        for (int64_t k = 0; left && k < pad; k++) put(&b, " ", 1);
        len = 0;
        break;
      }
    }
    if (len > 0) put(&b, out, len < (int)cap ? len : (int)cap - 1);
    if (out != small) free(out);
  }
  *outlen = b.n;
  return b.s;
}

/* ------------------------------------------------------------- calls */
static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static void need_ptr(void *p, int64_t n, Pos pos, const char *fn) {
  if (n < 0) hc_runtime_error(pos, "%s: negative size %lld", fn, (long long)n);
  if (!p && n > 0) hc_runtime_error(pos, "%s: NULL pointer", fn);
}

static const char *need_str(void *p, Pos pos, const char *fn) {
  if (!p) hc_runtime_error(pos, "%s: NULL string", fn);
  return p;
}

Value hc_builtin_call(Func *f, Value *a, Type **ty, int n, Pos pos) {
  Value r = {.i = 0};
  switch (f->builtin) {
    case B_PRINT: case B_MSTRPRINT: case B_STRPRINT: {
      int first = f->builtin == B_STRPRINT ? 1 : 0;
      const char *fmt = need_str(a[first].p, pos, f->name);
      int64_t len;
      char *s = hc_format(pos, fmt, a + first + 1, ty + first + 1, n - first - 1, &len);
      if (f->builtin == B_PRINT) {
        fwrite(s, 1, (size_t)len, stdout);
        free(s);
      } else if (f->builtin == B_MSTRPRINT) {
        r.p = s;
      } else {
        char *dst = (char *)need_str(a[0].p, pos, f->name);
        memcpy(dst, s, (size_t)len + 1);
        free(s);
        r.p = dst;
      }
      return r;
    }
    case B_MALLOC: case B_CALLOC:
      if (a[0].i < 0) hc_runtime_error(pos, "%s: negative size %lld", f->name, (long long)a[0].i);
      r.p = f->builtin == B_MALLOC ? malloc((size_t)(a[0].i ? a[0].i : 1)) : calloc(1, (size_t)(a[0].i ? a[0].i : 1));
      return r;
    case B_FREE: free(a[0].p); return r;
    case B_MEMCPY:
      need_ptr(a[0].p, a[2].i, pos, "MemCpy");
      need_ptr(a[1].p, a[2].i, pos, "MemCpy");
      if (a[2].i) memmove(a[0].p, a[1].p, (size_t)a[2].i);
      return a[0];
    case B_MEMSET:
      need_ptr(a[0].p, a[2].i, pos, "MemSet");
      if (a[2].i) memset(a[0].p, (int)(a[1].i & 255), (size_t)a[2].i);
      return a[0];
    case B_STRLEN: r.i = (int64_t)strlen(need_str(a[0].p, pos, "StrLen")); return r;
    case B_STRCPY: need_str(a[0].p, pos, "StrCpy"); strcpy(a[0].p, need_str(a[1].p, pos, "StrCpy")); return a[0];
    case B_STRCAT: need_str(a[0].p, pos, "StrCat"); strcat(a[0].p, need_str(a[1].p, pos, "StrCat")); return a[0];
    case B_STRCMP: {
      int c = strcmp(need_str(a[0].p, pos, "StrCmp"), need_str(a[1].p, pos, "StrCmp"));
      r.i = c < 0 ? -1 : c > 0;
      return r;
    }
    case B_STRNEW: {
      const char *s = a[0].p ? a[0].p : "";
      size_t l = strlen(s);
      char *d = malloc(l + 1);
      if (d) memcpy(d, s, l + 1);
      r.p = d;
      return r;
    }
    case B_EXIT: hc_exit((int)a[0].i);
    case B_SQRT: case B_LSQRT: r.f = sqrt(a[0].f); return r;
    case B_EXP: case B_LEXP: r.f = exp(a[0].f); return r;
    case B_LN: case B_LLOG: r.f = log(a[0].f); return r;
    case B_FLOOR: case B_LFLOOR: r.f = floor(a[0].f); return r;
    case B_CEIL: case B_LCEIL: r.f = ceil(a[0].f); return r;
    case B_ABS: case B_LFABS: r.f = fabs(a[0].f); return r;
    case B_ABSI64: r.u = a[0].i < 0 ? 0 - a[0].u : a[0].u; return r;
    case B_SIN: r.f = sin(a[0].f); return r;
    case B_COS: r.f = cos(a[0].f); return r;
    case B_TAN: r.f = tan(a[0].f); return r;
    case B_ATAN: r.f = atan(a[0].f); return r;
    case B_POW: case B_LPOW: r.f = pow(a[0].f, a[1].f); return r;
    case B_LOG10: r.f = log10(a[0].f); return r;
    case B_LOG2: r.f = log2(a[0].f); return r;
    case B_ROUND: r.f = round(a[0].f); return r;
    case B_TRUNC: r.f = trunc(a[0].f); return r;
    case B_TOF64: return a[0];
    case B_TOI64: return hc_convert(a[0], ty_f64, ty_i64);
    case B_TOBOOL: r.i = a[0].i != 0; return r;
    case B_THROW: hc_throw(pos, a[0].i);
    case B_FILEREAD: {
      FILE *fh = fopen(need_str(a[0].p, pos, "FileRead"), "rb");
      if (!fh) return r;
      size_t cap = 1 << 16, len = 0;
      char *buf = malloc(cap + 1);
      while (buf) {
        size_t got = fread(buf + len, 1, cap - len, fh);
        len += got;
        if (len < cap) break;
        char *nb = cap < ((size_t)1 << 34) ? realloc(buf, cap * 2 + 1) : NULL;
        if (!nb) {
          free(buf);
          buf = NULL;
          break;
        }
        buf = nb;
        cap *= 2;
      }
      fclose(fh);
      if (buf) buf[len] = 0;
      if (buf && a[1].p) *(int64_t *)a[1].p = (int64_t)len;
      r.p = buf;
      return r;
    }
    case B_FILEWRITE: {
      need_ptr(a[1].p, a[2].i, pos, "FileWrite");
      FILE *fh = fopen(need_str(a[0].p, pos, "FileWrite"), "wb");
      if (!fh) return r;
      r.i = fwrite(a[1].p, 1, (size_t)a[2].i, fh) == (size_t)a[2].i;
      if (fclose(fh)) r.i = 0;
      return r;
    }
    case B_PUTCHARS: {
      uint64_t c = a[0].u;
      while (c) {
        putchar((int)(c & 255));
        c >>= 8;
      }
      return r;
    }
    case B_RAND:
      rng_state ^= rng_state >> 12;
      rng_state ^= rng_state << 25;
      rng_state ^= rng_state >> 27;
      r.f = (double)((rng_state * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
      return r;
    case B_STR2I64: {
      char *end = NULL;
      int64_t radix = a[1].i;
      if (radix != 0 && (radix < 2 || radix > 36)) hc_runtime_error(pos, "Str2I64: bad radix %lld", (long long)radix);
      r.i = strtoll(need_str(a[0].p, pos, "Str2I64"), &end, (int)radix);
      if (a[2].p) *(char **)a[2].p = end;
      return r;
    }
    case B_STR2F64: {
      char *end = NULL;
      r.f = strtod(need_str(a[0].p, pos, "Str2F64"), &end);
      if (a[1].p) *(char **)a[1].p = end;
      return r;
    }
    case B_SEED: rng_state = a[0].u ? a[0].u : 0x9E3779B97F4A7C15ULL; return r;
    case B_TS: {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      r.f = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
      return r;
    }
  }
  (void)n;
  hc_runtime_error(pos, "internal error: unknown builtin %s", f->name);
}
