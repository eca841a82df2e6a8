/*
 * ffi.c - #link and extern "c": dlopen the libraries a script names, find its C
 * functions with dlsym at their first call, and call them through libffi.
 *
 * `#link "path"`: a library file; a relative path is tried next to the script first.
 * `#link <name>`: in this order
 *   1. the environment variable NAME_LIB (name upper-cased, other characters '_'),
 *      e.g. MINITORCH_LIB for <minitorch>;
 *   2. lib<name>.so in each directory of HCRUN_LIB_PATH (colon-separated);
 *   3. lib<name>.so next to the hcrun executable (the build directory);
 *   4. the system loader: lib<name>.so, then lib<name>.so.N for a few N.
 *   <c>, <m>, <dl> and <pthread> name the C library hcrun itself is linked with.
 */
#include "hc.h"

#include <ctype.h>
#include <dlfcn.h>
#include <ffi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct Lib { void *handle; const char *name; struct Lib *next; } Lib;
static Lib *libs;

typedef struct Ffi {
  void *sym;
  ffi_cif cif;
  ffi_type **atypes;
  ffi_type *rtype;
} Ffi;

static void *try_open(const char *path, char *err, size_t nerr) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    if (e && !err[0]) snprintf(err, nerr, "%s", e);
  }
  return h;
}

static void add_lib(void *h, const char *name) {
  for (Lib *l = libs; l; l = l->next)
    if (l->handle == h) return;
  Lib *l = arena_alloc(sizeof(Lib));
  l->handle = h;
  l->name = arena_strndup(name, strlen(name));
  Lib **tail = &libs;
  while (*tail) tail = &(*tail)->next;
  *tail = l;
}

void hc_link(Pos pos, const char *spec, bool angle, const char *from_file) {
  char path[4096], err[1024] = "";
  void *h = NULL;
  if (angle) {
    if (!strcmp(spec, "c") || !strcmp(spec, "m") || !strcmp(spec, "dl") || !strcmp(spec, "pthread")) {
      h = dlopen(NULL, RTLD_NOW);
      add_lib(h, spec);
      return;
    }
    char env[300];
    size_t k = 0;
    for (const char *s = spec; *s && k < 250; s++) env[k++] = isalnum((unsigned char)*s) ? (char)toupper((unsigned char)*s) : '_';
    strcpy(env + k, "_LIB");
    const char *e = getenv(env);
    if (e && *e) {
      h = try_open(e, err, sizeof err);
      if (!h) hc_error_at(pos, "cannot load library <%s> from %s=%s: %s", spec, env, e, err);
      add_lib(h, e);
      return;
    }
    const char *lp = getenv("HCRUN_LIB_PATH");
    while (!h && lp && *lp) {
      const char *colon = strchr(lp, ':');
      size_t n = colon ? (size_t)(colon - lp) : strlen(lp);
      if (n && n < 3000) {
        snprintf(path, sizeof path, "%.*s/lib%s.so", (int)n, lp, spec);
        if (access(path, F_OK) == 0) h = try_open(path, err, sizeof err);
      }
      lp = colon ? colon + 1 : NULL;
    }
    if (!h) {
      char exe[3000];
      ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
      if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
          *slash = 0;
          snprintf(path, sizeof path, "%s/lib%s.so", exe, spec);
          if (access(path, F_OK) == 0) h = try_open(path, err, sizeof err);
        }
      }
    }
    if (!h) {
      snprintf(path, sizeof path, "lib%s.so", spec);
      h = try_open(path, err, sizeof err);
    }
    for (int v = 0; !h && v < 10; v++) {
      snprintf(path, sizeof path, "lib%s.so.%d", spec, v);
      h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!h) hc_error_at(pos, "cannot load library <%s>: %s (set %s or HCRUN_LIB_PATH)", spec, err, env);
    add_lib(h, spec);
    return;
  }
  if (spec[0] != '/') {
    const char *slash = strrchr(from_file, '/');
    if (slash && (size_t)(slash - from_file) < 3000) {
      snprintf(path, sizeof path, "%.*s/%s", (int)(slash - from_file), from_file, spec);
      if (access(path, F_OK) == 0) h = try_open(path, err, sizeof err);
    }
  }
  if (!h) {
    if (strchr(spec, '/') && spec[0] != '/') snprintf(path, sizeof path, "./%s", spec);
    else snprintf(path, sizeof path, "%s", spec);
    h = try_open(path, err, sizeof err);
  }
  if (!h) hc_error_at(pos, "cannot load library \"%s\": %s", spec, err);
  add_lib(h, spec);
}

static ffi_type *ffi_of(Type *t) {
  switch (t->kind) {
    case T_VOID: return &ffi_type_void;
    case T_I8: return &ffi_type_sint8;
    case T_U8: case T_BOOL: return &ffi_type_uint8;
    case T_I16: return &ffi_type_sint16;
    case T_U16: return &ffi_type_uint16;
    case T_I32: return &ffi_type_sint32;
    case T_U32: return &ffi_type_uint32;
    case T_I64: return &ffi_type_sint64;
    case T_U64: return &ffi_type_uint64;
    case T_F64: return &ffi_type_double;
    default: return &ffi_type_pointer;
  }
}

typedef union Slot { int8_t i8; uint8_t u8; int16_t i16; uint16_t u16; int32_t i32; uint32_t u32;
                     int64_t i64; uint64_t u64; double f; void *p; } Slot;

static void fill(Slot *s, Type *t, Value v) {
  switch (t->kind) {
    case T_I8: s->i8 = (int8_t)v.i; break;
    case T_U8: s->u8 = (uint8_t)v.u; break;
    case T_BOOL: s->u8 = v.u != 0; break;
    case T_I16: s->i16 = (int16_t)v.i; break;
    case T_U16: s->u16 = (uint16_t)v.u; break;
    case T_I32: s->i32 = (int32_t)v.i; break;
    case T_U32: s->u32 = (uint32_t)v.u; break;
    case T_F64: s->f = v.f; break;
    default: s->i64 = v.i; break;
  }
}

Value hc_ffi_call(Func *f, Value *args, Type **argty, int nargs, Pos pos) {
  Ffi *x = f->ffi;
  FuncSig *sig = f->sig;
  if (!x) {
    void *sym = NULL;
    for (Lib *l = libs; l && !sym; l = l->next) sym = dlsym(l->handle, f->name);
    if (!sym) {
      if (!libs) hc_runtime_error(pos, "C function '%s' called, but no library is #link'ed", f->name);
      hc_runtime_error(pos, "C function '%s' not found in the #link'ed libraries", f->name);
    }
    x = arena_alloc(sizeof(Ffi));
    x->sym = sym;
    x->rtype = ffi_of(sig->ret);
    x->atypes = arena_alloc(sizeof(ffi_type *) * (size_t)(sig->nparams + 1));
    for (int i = 0; i < sig->nparams; i++) x->atypes[i] = ffi_of(sig->params[i].ty);
    if (!sig->varargs && ffi_prep_cif(&x->cif, FFI_DEFAULT_ABI, (unsigned)sig->nparams, x->rtype, x->atypes) != FFI_OK)
      hc_runtime_error(pos, "libffi cannot prepare a call of '%s'", f->name);
    f->ffi = x;
  }
  Slot slots[HC_MAX_ARGS];
  void *ptrs[HC_MAX_ARGS];
  ffi_type *vtypes[HC_MAX_ARGS];
  for (int i = 0; i < nargs; i++) {
    Type *t = i < sig->nparams ? sig->params[i].ty : argty[i];
    Value v = i < sig->nparams ? hc_convert(args[i], argty[i], t) : args[i];
    if (i >= sig->nparams && ty_is_int(t) && t->kind != T_U64) t = ty_i64;
    fill(&slots[i], t, v);
    ptrs[i] = &slots[i];
    vtypes[i] = ffi_of(t);
  }
  ffi_cif cif_var, *cif = &x->cif;
  if (sig->varargs) {
    if (ffi_prep_cif_var(&cif_var, FFI_DEFAULT_ABI, (unsigned)sig->nparams, (unsigned)nargs, x->rtype, vtypes) != FFI_OK)
      hc_runtime_error(pos, "libffi cannot prepare a call of '%s'", f->name);
    cif = &cif_var;
  }
  union { ffi_arg a; ffi_sarg s; double f; void *p; int64_t i64; uint64_t u64; } rc;
  memset(&rc, 0, sizeof rc);
  ffi_call(cif, FFI_FN(x->sym), &rc, ptrs);
  Value r = {.i = 0};
  switch (sig->ret->kind) {
    case T_VOID: break;
    case T_I8: r.i = (int8_t)rc.s; break;
    case T_U8: r.i = (uint8_t)rc.a; break;
    case T_BOOL: r.i = (uint8_t)rc.a != 0; break;
    case T_I16: r.i = (int16_t)rc.s; break;
    case T_U16: r.i = (uint16_t)rc.a; break;
    case T_I32: r.i = (int32_t)rc.s; break;
    case T_U32: r.i = (uint32_t)rc.a; break;
    case T_F64: r.f = rc.f; break;
    default: r.i = rc.i64; break;
  }
  return r;
}

void hc_ffi_release(void) { libs = NULL; /* handles stay open: libraries may run code at exit */ }
