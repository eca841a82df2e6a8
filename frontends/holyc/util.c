/* util.c - arena, error reporting, file names and the type constructors of hcrun. */
#include "hc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- arena */
typedef struct Chunk { struct Chunk *next; size_t used, cap; max_align_t data[]; } Chunk;
static Chunk *arena_head;

void *arena_alloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (!arena_head || arena_head->cap - arena_head->used < n) {
    size_t cap = n > (1u << 20) ? n : (1u << 20);
    Chunk *c = calloc(1, sizeof(Chunk) + cap);
    if (!c) {
      fprintf(stderr, "hcrun: out of memory\n");
      exit(70);
    }
    c->cap = cap;
    /* a big one-off block goes behind the current chunk so the current one stays usable */
    if (arena_head && n > (1u << 19)) {
      c->next = arena_head->next;
      arena_head->next = c;
      c->used = n;
      return c->data;
    }
    c->next = arena_head;
    arena_head = c;
  }
  void *p = (char *)arena_head->data + arena_head->used;
  arena_head->used += n;
  return p;
}

char *arena_strndup(const char *s, size_t n) {
  char *p = arena_alloc(n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

void arena_release_all(void) {
  while (arena_head) {
    Chunk *next = arena_head->next;
    free(arena_head);
    arena_head = next;
  }
}

/* ------------------------------------------------------------- files, errors */
static const char **files;
static int nfiles, capfiles;

int hc_add_file(const char *name) {
  if (nfiles == capfiles) {
    int cap = capfiles ? capfiles * 2 : 16;
    const char **v = arena_alloc(sizeof(char *) * (size_t)cap);
    if (nfiles) memcpy(v, files, sizeof(char *) * (size_t)nfiles);
    files = v;
    capfiles = cap;
  }
  files[nfiles] = arena_strndup(name, strlen(name));
  return nfiles++;
}

const char *hc_file_name(int file) { return file >= 0 && file < nfiles ? files[file] : "<hcrun>"; }

static void report(Pos p, const char *prefix, const char *fmt, va_list ap) {
  fflush(stdout);
  fprintf(stderr, "%s:%d:%d: %s", hc_file_name(p.file), p.line, p.col, prefix);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

void hc_error_at(Pos p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report(p, "", fmt, ap);
  va_end(ap);
  hc_exit(1);
}

void hc_runtime_error(Pos p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report(p, "runtime error: ", fmt, ap);
  va_end(ap);
  hc_exit(1);
}

/* ------------------------------------------------------------- types */
static Type prim[T_F64 + 1];
Type *ty_void, *ty_i8, *ty_u8, *ty_i16, *ty_u16, *ty_i32, *ty_u32, *ty_i64, *ty_u64, *ty_bool,
    *ty_f64;

static Type *mkprim(TypeKind k, int64_t size) {
  prim[k].kind = k;
  prim[k].size = size;
  prim[k].align = size ? size : 1;
  return &prim[k];
}

__attribute__((constructor)) static void init_types(void) {
  ty_void = mkprim(T_VOID, 0);
  ty_i8 = mkprim(T_I8, 1);
  ty_u8 = mkprim(T_U8, 1);
  ty_i16 = mkprim(T_I16, 2);
  ty_u16 = mkprim(T_U16, 2);
  ty_i32 = mkprim(T_I32, 4);
  ty_u32 = mkprim(T_U32, 4);
  ty_i64 = mkprim(T_I64, 8);
  ty_u64 = mkprim(T_U64, 8);
  ty_bool = mkprim(T_BOOL, 1);
  ty_f64 = mkprim(T_F64, 8);
}

Type *ty_ptr(Type *base) {
  Type *t = arena_alloc(sizeof(Type));
  t->kind = T_PTR;
  t->size = t->align = 8;
  t->base = base;
  return t;
}

Type *ty_array(Type *base, int64_t len) {
  Type *t = arena_alloc(sizeof(Type));
  t->kind = T_ARRAY;
  t->base = base;
  t->len = len;
  t->align = base->align;
  t->size = len < 0 ? 0 : base->size * len;
  return t;
}

Type *ty_func(FuncSig *sig) {
  Type *t = arena_alloc(sizeof(Type));
  t->kind = T_FUNC;
  t->size = 0;
  t->align = 1;
  t->sig = sig;
  return t;
}

bool ty_is_fnptr(const Type *t) { return t->kind == T_PTR && t->base->kind == T_FUNC; }

const char *ty_name(const Type *t, char *buf, size_t n) {
  static const char *names[] = {"U0", "I8", "U8", "I16", "U16", "I32", "U32", "I64", "U64", "Bool", "F64"};
  char inner[200];
  switch (t->kind) {
    case T_PTR:
      if (t->base->kind == T_FUNC) {
        snprintf(buf, n, "function pointer");
      } else {
        snprintf(buf, n, "%s *", ty_name(t->base, inner, sizeof inner));
      }
      break;
    case T_ARRAY: snprintf(buf, n, "%s[%lld]", ty_name(t->base, inner, sizeof inner), (long long)t->len); break;
    case T_CLASS: snprintf(buf, n, "%s", t->cls->name); break;
    case T_FUNC: snprintf(buf, n, "function"); break;
    default: snprintf(buf, n, "%s", names[t->kind]); break;
  }
  return buf;
}
