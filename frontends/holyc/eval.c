/*
 * eval.c - the tree-walking evaluator of hcrun.
 *
 * Locals live in frames on an interpreter stack (one malloc'd block), globals and
 * static locals in arena storage; all of it is real memory with C layout. Statements
 * return a completion code (normal, break, continue, return, goto) instead of unwinding.
 */
#include "hc.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t hc_max_steps;
Pos hc_cur_pos;
int hc_argc;
char **hc_argv;

static uint8_t *stack;   /* frames */
static int64_t sp;       /* bytes in use */
static uint8_t *fp;      /* current frame */
static int depth;        /* calls in flight */
static int64_t steps;
static Value ret_val;
static Node *goto_block;
static int goto_index;

enum { EX_NORMAL, EX_BREAK, EX_CONTINUE, EX_RETURN, EX_GOTO };

/* try/catch: each handler remembers the interpreter state to restore. */
typedef struct Handler { jmp_buf jb; int64_t sp; uint8_t *fp; int depth; } Handler;
static Handler handlers[HC_MAX_TRY_DEPTH];
static int nhandlers;

#define FNPTR_TAG 0x4846000000000000ULL /* "HF": function pointers are tagged indices */

/* ------------------------------------------------------------- memory */
Value hc_load(Type *t, const void *a) {
  Value v;
  switch (t->kind) {
    case T_I8: v.i = *(const int8_t *)a; break;
    case T_U8: v.i = *(const uint8_t *)a; break;
    case T_I16: { int16_t x; memcpy(&x, a, 2); v.i = x; break; }
    case T_U16: { uint16_t x; memcpy(&x, a, 2); v.i = x; break; }
    case T_I32: { int32_t x; memcpy(&x, a, 4); v.i = x; break; }
    case T_U32: { uint32_t x; memcpy(&x, a, 4); v.i = x; break; }
    case T_BOOL: v.i = *(const uint8_t *)a != 0; break;
    case T_I64: case T_U64: case T_PTR: memcpy(&v.i, a, 8); break;
    case T_F64: memcpy(&v.f, a, 8); break;
    default: v.p = (void *)a; break; /* arrays and classes: their address */
  }
  return v;
}

void hc_store(Type *t, void *a, Value v) {
  switch (t->kind) {
    case T_I8: case T_U8: *(uint8_t *)a = (uint8_t)v.u; break;
    case T_BOOL: *(uint8_t *)a = v.u != 0; break;
    case T_I16: case T_U16: { uint16_t x = (uint16_t)v.u; memcpy(a, &x, 2); break; }
    case T_I32: case T_U32: { uint32_t x = (uint32_t)v.u; memcpy(a, &x, 4); break; }
    case T_I64: case T_U64: case T_PTR: case T_F64: memcpy(a, &v.i, 8); break;
    case T_CLASS: if (a != v.p) memmove(a, v.p, (size_t)t->size); break;
    default: break;
  }
}

static int64_t f2i(double f) {
  if (f != f) return INT64_MIN;
  if (f >= 9223372036854775807.0) return INT64_MAX;
  if (f <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)f;
}

Value hc_convert(Value v, Type *from, Type *to) {
  if (to->kind == T_F64) {
    if (from->kind == T_F64) return v;
    v.f = from->kind == T_U64 ? (double)v.u : (double)v.i;
    return v;
  }
  if (to->kind == T_BOOL) {
    v.i = from->kind == T_F64 ? v.f != 0.0 : v.i != 0;
    return v;
  }
  if (from->kind == T_F64) v.i = f2i(v.f);
  switch (to->kind) {
    case T_I8: v.i = (int8_t)v.u; break;
    case T_U8: v.i = (uint8_t)v.u; break;
    case T_I16: v.i = (int16_t)v.u; break;
    case T_U16: v.i = (uint16_t)v.u; break;
    case T_I32: v.i = (int32_t)v.u; break;
    case T_U32: v.i = (uint32_t)v.u; break;
    default: break;
  }
  return v;
}

/* ------------------------------------------------------------- arithmetic */
static Value arith(int op, int dom, Value a, Value b, Pos pos) {
  Value r;
  if (dom == D_FLT) {
    switch (op) {
      case OP_ADD: r.f = a.f + b.f; break;
      case OP_SUB: r.f = a.f - b.f; break;
      case OP_MUL: r.f = a.f * b.f; break;
      case OP_DIV: r.f = a.f / b.f; break;
      case OP_MOD: r.f = fmod(a.f, b.f); break;
      case OP_LT: r.i = a.f < b.f; break;
      case OP_LE: r.i = a.f <= b.f; break;
      case OP_GT: r.i = a.f > b.f; break;
      case OP_GE: r.i = a.f >= b.f; break;
      case OP_EQ: r.i = a.f == b.f; break;
      case OP_NE: r.i = a.f != b.f; break;
      default: r.i = 0; break;
    }
    return r;
  }
  bool u = dom == D_UINT;
  switch (op) {
    case OP_ADD: r.u = a.u + b.u; break;
    case OP_SUB: r.u = a.u - b.u; break;
    case OP_MUL: r.u = a.u * b.u; break;
    case OP_DIV:
    case OP_MOD:
      if (!b.u) hc_runtime_error(pos, "division by zero");
      if (u) r.u = op == OP_DIV ? a.u / b.u : a.u % b.u;
      else if (b.i == -1) r.u = op == OP_DIV ? 0 - a.u : 0;
      else r.i = op == OP_DIV ? a.i / b.i : a.i % b.i;
      break;
    case OP_SHL: r.u = a.u << (b.u & 63); break;
    case OP_SHR: if (u) r.u = a.u >> (b.u & 63); else r.i = a.i >> (b.u & 63); break;
    case OP_AND: r.u = a.u & b.u; break;
    case OP_OR: r.u = a.u | b.u; break;
    case OP_XOR: r.u = a.u ^ b.u; break;
    case OP_LT: r.i = u ? a.u < b.u : a.i < b.i; break;
    case OP_LE: r.i = u ? a.u <= b.u : a.i <= b.i; break;
    case OP_GT: r.i = u ? a.u > b.u : a.i > b.i; break;
    case OP_GE: r.i = u ? a.u >= b.u : a.i >= b.i; break;
    case OP_EQ: r.i = a.u == b.u; break;
    case OP_NE: r.i = a.u != b.u; break;
    default: r.i = 0; break;
  }
  return r;
}

static bool truthy(Value v, Type *t) { return t->kind == T_F64 ? v.f != 0.0 : v.u != 0; }

/* ------------------------------------------------------------- expressions */
static Value eval(Node *n);

static void *lvaddr(Node *n) {
  switch (n->kind) {
    case N_VAR: return n->var->is_local ? fp + n->var->off : n->var->addr;
    case N_DEREF: {
      void *p = eval(n->a).p;
      if (!p) hc_runtime_error(n->pos, "dereference of a NULL pointer");
      return p;
    }
    case N_MEMBER: return (uint8_t *)lvaddr(n->a) + n->ival;
    default: hc_runtime_error(n->pos, "internal error: not an lvalue");
  }
}

static Func *fnptr_func(Value v, Pos pos) {
  if ((v.u & 0xFFFF000000000000ULL) != FNPTR_TAG || (int64_t)(v.u & 0xFFFFFFFFULL) >= hc_nfuncs) {
    if (!v.u) hc_runtime_error(pos, "call through a NULL function pointer");
    hc_runtime_error(pos, "call through an invalid function pointer");
  }
  return hc_funcs[v.u & 0xFFFFFFFFULL];
}

static Value call_node(Node *n) {
  Value args[HC_MAX_ARGS];
  Type *tys[HC_MAX_ARGS];
  Func *f = n->fn;
  if (!f) f = fnptr_func(eval(n->a), n->pos);
  for (int i = 0; i < n->n; i++) {
    args[i] = eval(n->list[i]);
    tys[i] = n->list[i]->ty;
  }
  if (!n->fn) {
    /* through a pointer: the pointed-to function must take what the pointer's type says */
    FuncSig *want = n->a->ty->base->sig, *got = f->sig;
    if (got->nparams != want->nparams || got->varargs != want->varargs)
      hc_runtime_error(n->pos, "function pointer to '%s' called with a different signature", f->name);
    Value r = hc_call(f, args, tys, n->n, n->pos);
    return hc_convert(r, got->ret, want->ret);
  }
  return hc_call(f, args, tys, n->n, n->pos);
}

static Value eval(Node *n) {
  Value v, a, b;
  switch (n->kind) {
    case N_INT: v.i = n->ival; return v;
    case N_FLT: v.f = n->fval; return v;
    case N_STR: v.p = (void *)n->sval; return v;
    case N_VAR: return hc_load(n->ty, n->var->is_local ? fp + n->var->off : n->var->addr);
    case N_FUNCADDR: v.u = FNPTR_TAG | (uint64_t)n->fn->index; return v;
    case N_MEMBER: case N_DEREF: return hc_load(n->ty, lvaddr(n));
    case N_ADDR: v.p = lvaddr(n->a); return v;
    case N_NEG:
      a = eval(n->a);
      if (n->ty->kind == T_F64) v.f = -a.f;
      else v.u = 0 - a.u;
      return v;
    case N_NOT: a = eval(n->a); v.i = !truthy(a, n->a->ty); return v;
    case N_BITNOT: a = eval(n->a); v.u = ~a.u; return v;
    case N_BIN:
      a = eval(n->a);
      b = eval(n->b);
      return arith(n->op, n->dom, a, b, n->pos);
    case N_PTRADD:
      a = eval(n->a);
      b = eval(n->b);
      if (n->op == OP_SUB) b.u = 0 - b.u;
      v.u = a.u + b.u * (uint64_t)n->scale;
      return v;
    case N_PTRDIFF:
      a = eval(n->a);
      b = eval(n->b);
      v.i = (int64_t)(a.u - b.u) / n->scale;
      return v;
    case N_LOGAND:
      v.i = truthy(eval(n->a), n->a->ty) && truthy(eval(n->b), n->b->ty);
      return v;
    case N_LOGOR:
      v.i = truthy(eval(n->a), n->a->ty) || truthy(eval(n->b), n->b->ty);
      return v;
    case N_LOGXOR: {
      bool x = truthy(eval(n->a), n->a->ty);
      bool y = truthy(eval(n->b), n->b->ty);
      v.i = x != y;
      return v;
    }
    case N_ASSIGN: {
      void *addr = lvaddr(n->a);
      v = eval(n->b);
      hc_store(n->ty, addr, v);
      return n->ty->kind == T_CLASS ? (Value){.p = addr} : hc_load(n->ty, addr);
    }
    case N_OPASSIGN: {
      void *addr = lvaddr(n->a);
      Value cur = hc_load(n->ty, addr);
      b = eval(n->b);
      if (n->dom == D_PTR) {
        if (n->op == OP_SUB) b.u = 0 - b.u;
        cur.u += b.u * (uint64_t)n->scale;
      } else if (n->dom == D_FLT) {
        cur = hc_convert(cur, n->ty, ty_f64);
        b = hc_convert(b, n->b->ty, ty_f64);
        cur = hc_convert(arith(n->op, D_FLT, cur, b, n->pos), ty_f64, n->ty);
      } else {
        cur = hc_convert(arith(n->op, n->dom, cur, b, n->pos), n->dom == D_UINT ? ty_u64 : ty_i64, n->ty);
      }
      hc_store(n->ty, addr, cur);
      return hc_load(n->ty, addr);
    }
    case N_PREINC: case N_POSTINC: {
      void *addr = lvaddr(n->a);
      Value old = hc_load(n->ty, addr), nv;
      if (n->dom == D_FLT) nv.f = old.f + (double)n->ival;
      else nv.u = old.u + (uint64_t)(n->ival * n->scale);
      hc_store(n->ty, addr, nv);
      return n->kind == N_POSTINC ? old : hc_load(n->ty, addr);
    }
    case N_CALL: return call_node(n);
    case N_CONV:
      a = eval(n->a);
      if (n->ty->kind == T_VOID || n->ty->kind == T_PTR) return a;
      return hc_convert(a, n->a->ty, n->ty);
    case N_CHAIN: {
      Value prev = eval(n->list[0]);
      for (int i = 0; i < n->n - 1; i++) {
        Value cur = eval(n->list[i + 1]);
        int op = n->ops[i] & 255, dom = n->ops[i] >> 8;
        Value x = prev, y = cur;
        if (dom == D_FLT) {
          x = hc_convert(x, n->list[i]->ty, ty_f64);
          y = hc_convert(y, n->list[i + 1]->ty, ty_f64);
        }
        if (!arith(op, dom, x, y, n->pos).i) {
          v.i = 0;
          return v;
        }
        prev = cur;
      }
      v.i = 1;
      return v;
    }
    case N_COMMA: eval(n->a); return eval(n->b);
    default: hc_runtime_error(n->pos, "internal error: bad expression node %d", n->kind);
  }
}

/* ------------------------------------------------------------- statements */
static int exec(Node *n);

static int exec_block(Node *b, int start) {
  for (int i = start; i < b->n; i++) {
    int r = exec(b->list[i]);
    if (r == EX_NORMAL) continue;
    if (r == EX_GOTO && goto_block == b) {
      i = goto_index - 1;
      continue;
    }
    return r;
  }
  return EX_NORMAL;
}

static void print_node(Node *n) {
  Value args[HC_MAX_ARGS];
  Type *tys[HC_MAX_ARGS];
  for (int i = 0; i < n->n; i++) {
    args[i] = eval(n->list[i]);
    tys[i] = n->list[i]->ty;
  }
  int64_t len;
  char *s = hc_format(n->pos, n->a->sval, args, tys, n->n, &len);
  fwrite(s, 1, (size_t)len, stdout);
  free(s);
}

static void decl(Node *n) {
  Var *v = n->var;
  if (n->is_static) {
    if (n->done) return;
    n->done = true;
  }
  uint8_t *addr = v->is_local ? fp + v->off : v->addr;
  memset(addr, 0, (size_t)v->ty->size);
  for (int i = 0; i < n->ninits; i++) {
    Init *it = &n->inits[i];
    if (it->bytes) memcpy(addr + it->off, it->bytes, (size_t)it->nbytes);
    else hc_store(it->ty, addr + it->off, eval(it->expr));
  }
}

static void step(Node *n) {
  hc_cur_pos = n->pos;
  if (hc_max_steps && ++steps > hc_max_steps) hc_runtime_error(n->pos, "step limit of %lld exceeded", (long long)hc_max_steps);
}

static int loop_result(int r, bool *stop) {
  *stop = false;
  if (r == EX_BREAK) { *stop = true; return EX_NORMAL; }
  if (r == EX_CONTINUE || r == EX_NORMAL) return EX_NORMAL;
  *stop = true;
  return r;
}

static int exec(Node *n) {
  step(n);
  switch (n->kind) {
    case N_BLOCK: return exec_block(n, 0);
    case N_EXPR: eval(n->a); return EX_NORMAL;
    case N_DECL: decl(n); return EX_NORMAL;
    case N_NOP: case N_LABEL: case N_CASE: return EX_NORMAL;
    case N_PRINT: print_node(n); return EX_NORMAL;
    case N_PUTCH: {
      uint64_t c = (uint64_t)n->a->ival;
      while (c) {
        putchar((int)(c & 255));
        c >>= 8;
      }
      return EX_NORMAL;
    }
    case N_IF:
      if (truthy(eval(n->a), n->a->ty)) return exec(n->b);
      return n->c ? exec(n->c) : EX_NORMAL;
    case N_WHILE:
      while (truthy(eval(n->a), n->a->ty)) {
        bool stop;
        int r = loop_result(exec(n->b), &stop);
        if (stop) return r;
        step(n);
      }
      return EX_NORMAL;
    case N_DO:
      do {
        bool stop;
        int r = loop_result(exec(n->b), &stop);
        if (stop) return r;
        step(n);
      } while (truthy(eval(n->a), n->a->ty));
      return EX_NORMAL;
    case N_FOR: {
      if (n->a) {
        int r = exec(n->a);
        if (r != EX_NORMAL) return r;
      }
      while (!n->b || truthy(eval(n->b), n->b->ty)) {
        bool stop;
        int r = loop_result(exec(n->d), &stop);
        if (stop) return r;
        if (n->c) eval(n->c);
        step(n);
      }
      return EX_NORMAL;
    }
    case N_SWITCH: {
      int64_t x = eval(n->a).i;
      int start = n->default_index;
      for (int i = 0; i < n->ncases; i++) {
        if (n->cases[i].lo <= x && x <= n->cases[i].hi) {
          start = n->cases[i].index;
          break;
        }
      }
      if (start < 0) return EX_NORMAL;
      int r = exec_block(n->b, start);
      return r == EX_BREAK ? EX_NORMAL : r;
    }
    case N_BREAK: return EX_BREAK;
    case N_CONTINUE: return EX_CONTINUE;
    case N_GOTO:
      goto_block = n->target;
      goto_index = n->target_index;
      return EX_GOTO;
    case N_RETURN:
      ret_val = n->a ? eval(n->a) : (Value){.i = 0};
      return EX_RETURN;
    case N_TRY: {
      if (nhandlers == HC_MAX_TRY_DEPTH) hc_runtime_error(n->pos, "try blocks nested too deeply");
      Handler *h = &handlers[nhandlers++];
      h->sp = sp;
      h->fp = fp;
      h->depth = depth;
      if (!setjmp(h->jb)) {
        int r = exec(n->a);
        nhandlers--;
        return r;
      }
      h = &handlers[nhandlers - 1];
      sp = h->sp;
      fp = h->fp;
      depth = h->depth;
      nhandlers--;
      return exec(n->b);
    }
    default: eval(n); return EX_NORMAL;
  }
}

void hc_throw(Pos pos, int64_t value) {
  if (!nhandlers) {
    char text[9] = {0};
    bool printable = value != 0;
    for (int i = 0; i < 8 && ((uint64_t)value >> (8 * i)); i++) {
      char c = (char)(((uint64_t)value >> (8 * i)) & 255);
      if (c < 32 || c > 126) printable = false;
      text[i] = c;
    }
    if (printable) hc_runtime_error(pos, "uncaught exception '%s'", text);
    hc_runtime_error(pos, "uncaught exception %lld", (long long)value);
  }
  longjmp(handlers[nhandlers - 1].jb, 1);
}

/* ------------------------------------------------------------- calls */
Value hc_call(Func *f, Value *args, Type **argty, int nargs, Pos pos) {
  if (f->kind == F_BUILTIN) return hc_builtin_call(f, args, argty, nargs, pos);
  if (f->kind == F_EXTERN) return hc_ffi_call(f, args, argty, nargs, pos);
  if (!f->body) hc_runtime_error(pos, "'%s' is declared but never defined", f->name);
  if (depth >= HC_MAX_CALL_DEPTH) hc_runtime_error(pos, "call depth exceeds %d (runaway recursion?)", HC_MAX_CALL_DEPTH);
  FuncSig *sig = f->sig;
  int nextra = nargs > sig->nparams ? nargs - sig->nparams : 0;
  int64_t need = f->frame_size + 8 * (int64_t)nextra;
  need = (need + 15) / 16 * 16;
  if (sp + need > HC_STACK_BYTES) hc_runtime_error(pos, "stack overflow in call of '%s'", f->name);
  uint8_t *frame = stack + sp;
  memset(frame, 0, (size_t)need);
  for (int i = 0; i < sig->nparams && i < nargs; i++)
    hc_store(f->params[i]->ty, frame + f->params[i]->off, hc_convert(args[i], argty[i], f->params[i]->ty));
  if (sig->varargs) {
    int64_t *extra = (int64_t *)(frame + f->frame_size);
    for (int i = 0; i < nextra; i++) extra[i] = args[sig->nparams + i].i;
    *(int64_t *)(frame + f->argc_var->off) = nextra;
    *(int64_t **)(frame + f->argv_var->off) = extra;
  }
  uint8_t *saved_fp = fp;
  Pos saved_pos = hc_cur_pos;
  fp = frame;
  sp += need;
  depth++;
  ret_val.i = 0;
  int r = exec(f->body);
  Value ret = r == EX_RETURN ? ret_val : (Value){.i = 0};
  depth--;
  sp -= need;
  fp = saved_fp;
  hc_cur_pos = saved_pos;
  return ret;
}

void hc_run(Program *prog) {
  stack = malloc(HC_STACK_BYTES);
  if (!stack) {
    fprintf(stderr, "hcrun: out of memory\n");
    hc_exit(1);
  }
  fp = stack;
  for (int i = 0; i < prog->ntop; i++) {
    int r = exec(prog->top[i]);
    if (r == EX_GOTO) hc_runtime_error(prog->top[i]->pos, "internal error: unresolved goto");
  }
  free(stack);
  stack = NULL;
}

void hc_eval_release(void) {
  free(stack);
  stack = NULL;
}
