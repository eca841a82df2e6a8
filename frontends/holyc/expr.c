/*
 * expr.c - expression parser and type checker of hcrun.
 *
 * C precedence: = op=  ||  ^^  &&  |  ^  &  == !=  < <= > >= (chained)  << >>  + -  * / %
 * unary (- ! ~ * & ++ -- sizeof, prefix cast), postfix ([] . -> () ++ -- and the postfix
 * cast `e(Type)`). Conversions between integers and F64 become N_CONV nodes here, so the
 * evaluator never has to guess.
 */
#include "parse.h"

#include <stdio.h>
#include <string.h>

Node *new_node(NodeKind k, Pos pos) {
  Node *n = arena_alloc(sizeof(Node));
  n->kind = k;
  n->pos = pos;
  return n;
}

Node *new_int(int64_t v, Pos pos) {
  Node *n = new_node(N_INT, pos);
  n->ty = ty_i64;
  n->ival = v;
  return n;
}

static const char *op_text(int op) {
  static const char *t[] = {"?", "+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^",
                            "<", "<=", ">", ">=", "==", "!="};
  return op > 0 && op <= OP_NE ? t[op] : "?";
}

static char tb1[256], tb2[256];
#define TN1(t) ty_name((t), tb1, sizeof tb1)
#define TN2(t) ty_name((t), tb2, sizeof tb2)

static bool is_lvalue(Node *e) { return e->kind == N_VAR || e->kind == N_DEREF || e->kind == N_MEMBER; }

/* Arrays decay to a pointer to their first element. */
static Node *decay(Node *e) {
  if (e->ty->kind != T_ARRAY) return e;
  Node *n = new_node(N_ADDR, e->pos);
  n->a = e;
  n->ty = ty_ptr(e->ty->base);
  return n;
}

Node *rvalue(Node *e) {
  if (e->ty->kind == T_VOID) hc_error_at(e->pos, "U0 value used in an expression");
  if (e->ty->kind == T_FUNC) hc_error_at(e->pos, "function used as a value (take its address with &)");
  return decay(e);
}

Node *cond_expr(Node *e) {
  e = rvalue(e);
  if (!ty_is_scalar(e->ty)) hc_error_at(e->pos, "%s used as a condition", TN1(e->ty));
  return e;
}

static Node *conv(Node *e, Type *to) {
  if (e->kind == N_INT && ty_is_float(to)) {
    Node *f = new_node(N_FLT, e->pos);
    f->ty = ty_f64;
    f->fval = e->ty->kind == T_U64 ? (double)(uint64_t)e->ival : (double)e->ival;
    return f;
  }
  Node *n = new_node(N_CONV, e->pos);
  n->a = e;
  n->ty = to;
  return n;
}

Node *coerce(Node *e, Type *to, Pos pos, const char *what) {
  if (to->kind == T_CLASS) {
    if (e->ty->kind != T_CLASS || e->ty->cls != to->cls)
      hc_error_at(pos, "cannot use %s as %s in %s", TN1(e->ty), TN2(to), what);
    return e;
  }
  if (to->kind == T_VOID) hc_error_at(pos, "cannot convert to U0 in %s", what);
  e = rvalue(e);
  Type *from = e->ty;
  if (from->kind == T_CLASS) hc_error_at(pos, "cannot use %s as %s in %s", TN1(from), TN2(to), what);
  if (to->kind == T_PTR) {
    if (ty_is_float(from)) hc_error_at(pos, "cannot use F64 as %s in %s", TN1(to), what);
    return e;
  }
  if (to->kind == T_BOOL) return from->kind == T_BOOL ? e : conv(e, to);
  if (ty_is_float(to)) {
    if (from->kind == T_PTR) hc_error_at(pos, "cannot use %s as F64 in %s", TN1(from), what);
    return ty_is_float(from) ? e : conv(e, to);
  }
  if (ty_is_int(to)) {
    if (ty_is_float(from)) return conv(e, to);
    return e;
  }
  hc_error_at(pos, "cannot use %s as %s in %s", TN1(from), TN2(to), what);
}

/* ------------------------------------------------------------- constant folding */
bool const_eval(Node *e, int64_t *out) {
  int64_t a, b;
  switch (e->kind) {
    case N_INT: *out = e->ival; return true;
    case N_NEG: if (!ty_is_int(e->ty) || !const_eval(e->a, &a)) return false; *out = (int64_t)(0 - (uint64_t)a); return true;
    case N_NOT: if (!const_eval(e->a, &a)) return false; *out = !a; return true;
    case N_BITNOT: if (!const_eval(e->a, &a)) return false; *out = ~a; return true;
    case N_CONV:
      if (!ty_is_int(e->ty) || !ty_is_int(e->a->ty) || !const_eval(e->a, &a)) return false;
      *out = hc_convert((Value){.i = a}, e->a->ty, e->ty).i;
      return true;
    case N_LOGAND: case N_LOGOR: case N_LOGXOR:
      if (!const_eval(e->a, &a) || !const_eval(e->b, &b)) return false;
      *out = e->kind == N_LOGAND ? (a && b) : e->kind == N_LOGOR ? (a || b) : (!!a ^ !!b);
      return true;
    case N_BIN: {
      if (e->dom != D_INT && e->dom != D_UINT) return false;
      if (!const_eval(e->a, &a) || !const_eval(e->b, &b)) return false;
      uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
      bool u = e->dom == D_UINT;
      switch (e->op) {
        case OP_ADD: *out = (int64_t)(ua + ub); break;
        case OP_SUB: *out = (int64_t)(ua - ub); break;
        case OP_MUL: *out = (int64_t)(ua * ub); break;
        case OP_DIV: case OP_MOD:
          if (!b) return false;
          if (u) *out = (int64_t)(e->op == OP_DIV ? ua / ub : ua % ub);
          else if (b == -1) *out = e->op == OP_DIV ? (int64_t)(0 - ua) : 0;
          else *out = e->op == OP_DIV ? a / b : a % b;
          break;
        case OP_SHL: *out = (int64_t)(ua << (ub & 63)); break;
        case OP_SHR: *out = u ? (int64_t)(ua >> (ub & 63)) : (a >> (ub & 63)); break;
        case OP_AND: *out = a & b; break;
        case OP_OR: *out = a | b; break;
        case OP_XOR: *out = a ^ b; break;
        case OP_LT: *out = u ? ua < ub : a < b; break;
        case OP_LE: *out = u ? ua <= ub : a <= b; break;
        case OP_GT: *out = u ? ua > ub : a > b; break;
        case OP_GE: *out = u ? ua >= ub : a >= b; break;
        case OP_EQ: *out = a == b; break;
        case OP_NE: *out = a != b; break;
        default: return false;
      }
      return true;
    }
    default: return false;
  }
}

/* ------------------------------------------------------------- operators */
static int64_t elem_size(Type *ptr, Pos pos) {
  Type *b = ptr->base;
  if (b->kind == T_VOID) return 1;
  if (b->kind == T_FUNC) hc_error_at(pos, "arithmetic on a function pointer");
  if (b->kind == T_CLASS && !b->cls->complete) hc_error_at(pos, "arithmetic on a pointer to incomplete class %s", b->cls->name);
  return b->size ? b->size : 1;
}

static bool is_cmp(int op) { return op >= OP_LT && op <= OP_NE; }

/* The domain in which `a op b` is computed, or -1 when the operands do not fit. */
static int domain(int op, Type *a, Type *b) {
  bool pa = a->kind == T_PTR, pb = b->kind == T_PTR;
  if (pa || pb) {
    if (is_cmp(op) && (pa || ty_is_int(a)) && (pb || ty_is_int(b))) return D_UINT;
    return -1;
  }
  if (!ty_is_arith(a) || !ty_is_arith(b)) return -1;
  if (ty_is_float(a) || ty_is_float(b)) {
    if (op == OP_SHL || op == OP_SHR || op == OP_AND || op == OP_OR || op == OP_XOR) return -1;
    return D_FLT;
  }
  return (a->kind == T_U64 || b->kind == T_U64) ? D_UINT : D_INT;
}

static Node *binop(int op, Node *a, Node *b, Pos pos) {
  a = rvalue(a);
  b = rvalue(b);
  Type *ta = a->ty, *tb = b->ty;
  if (op == OP_ADD || op == OP_SUB) {
    Node *p = NULL, *i = NULL;
    if (ta->kind == T_PTR && ty_is_int(tb)) p = a, i = b;
    else if (op == OP_ADD && ty_is_int(ta) && tb->kind == T_PTR) p = b, i = a;
    if (p) {
      Node *n = new_node(N_PTRADD, pos);
      n->op = op;
      n->a = p;
      n->b = i;
      n->scale = elem_size(p->ty, pos);
      n->ty = p->ty;
      return n;
    }
    if (op == OP_SUB && ta->kind == T_PTR && tb->kind == T_PTR) {
      Node *n = new_node(N_PTRDIFF, pos);
      n->a = a;
      n->b = b;
      n->scale = elem_size(ta, pos);
      n->ty = ty_i64;
      return n;
    }
  }
  int dom = domain(op, ta, tb);
  if (dom < 0) hc_error_at(pos, "invalid operands to '%s' (%s and %s)", op_text(op), TN1(ta), TN2(tb));
  if (dom == D_FLT) {
    if (!ty_is_float(ta)) a = conv(a, ty_f64);
    if (!ty_is_float(tb)) b = conv(b, ty_f64);
  }
  Node *n = new_node(N_BIN, pos);
  n->op = op;
  n->dom = dom;
  n->a = a;
  n->b = b;
  n->ty = is_cmp(op) ? ty_i64 : dom == D_FLT ? ty_f64 : dom == D_UINT ? ty_u64 : ty_i64;
  int64_t v;
  if (n->ty != ty_f64 && const_eval(n, &v)) {
    Node *c = new_int(v, pos);
    c->ty = n->ty;
    return c;
  }
  return n;
}

static Node *check_lvalue(Node *e, const char *what) {
  if (!is_lvalue(e)) hc_error_at(e->pos, "%s needs an lvalue", what);
  if (e->ty->kind == T_ARRAY) hc_error_at(e->pos, "%s of an array", what);
  if (e->ty->kind == T_FUNC) hc_error_at(e->pos, "%s of a function", what);
  return e;
}

static Node *assign(int op, Node *lhs, Node *rhs, Pos pos) {
  check_lvalue(lhs, "assignment");
  if (!op) {
    Node *n = new_node(N_ASSIGN, pos);
    n->a = lhs;
    n->b = coerce(rhs, lhs->ty, pos, "assignment");
    n->ty = lhs->ty;
    return n;
  }
  rhs = rvalue(rhs);
  Type *t = lhs->ty;
  Node *n = new_node(N_OPASSIGN, pos);
  n->op = op;
  n->a = lhs;
  n->b = rhs;
  n->ty = t;
  if (t->kind == T_PTR && (op == OP_ADD || op == OP_SUB) && ty_is_int(rhs->ty)) {
    n->dom = D_PTR;
    n->scale = elem_size(t, pos);
    return n;
  }
  int dom = domain(op, t, rhs->ty);
  if (dom < 0 || is_cmp(op) || t->kind == T_PTR)
    hc_error_at(pos, "invalid operands to '%s=' (%s and %s)", op_text(op), TN1(t), TN2(rhs->ty));
  n->dom = dom;
  return n;
}

static Node *incdec(Node *e, int delta, bool post, Pos pos) {
  check_lvalue(e, delta > 0 ? "'++'" : "'--'");
  if (!ty_is_scalar(e->ty)) hc_error_at(pos, "cannot increment %s", TN1(e->ty));
  Node *n = new_node(post ? N_POSTINC : N_PREINC, pos);
  n->a = e;
  n->ty = e->ty;
  n->ival = delta;
  n->dom = ty_is_float(e->ty) ? D_FLT : e->ty->kind == T_PTR ? D_PTR : D_INT;
  n->scale = e->ty->kind == T_PTR ? elem_size(e->ty, pos) : 1;
  return n;
}

static Node *cast(Node *e, Type *to, Pos pos) {
  if (to->kind == T_CLASS || to->kind == T_ARRAY || to->kind == T_FUNC) hc_error_at(pos, "cannot cast to %s", TN1(to));
  if (to->kind == T_VOID) {
    Node *n = new_node(N_CONV, pos);
    n->a = e->ty->kind == T_VOID ? e : rvalue(e);
    n->ty = ty_void;
    return n;
  }
  e = rvalue(e);
  Type *from = e->ty;
  if (from->kind == T_CLASS) hc_error_at(pos, "cannot cast %s to %s", TN1(from), TN2(to));
  if ((to->kind == T_PTR && ty_is_float(from)) || (ty_is_float(to) && from->kind == T_PTR))
    hc_error_at(pos, "cannot cast %s to %s", TN1(from), TN2(to));
  if (to->kind == T_PTR && from->kind == T_PTR) {
    Node *n = new_node(N_CONV, pos);
    n->a = e;
    n->ty = to;
    return n;
  }
  return conv(e, to);
}

static Node *deref(Node *e, Pos pos) {
  e = rvalue(e);
  if (e->ty->kind != T_PTR) hc_error_at(pos, "cannot dereference %s", TN1(e->ty));
  if (e->ty->base->kind == T_FUNC) return e; /* (*fp)(x) calls fp */
  if (e->ty->base->kind == T_VOID) hc_error_at(pos, "cannot dereference a U0 pointer");
  Node *n = new_node(N_DEREF, pos);
  n->a = e;
  n->ty = e->ty->base;
  return n;
}

static Member *find_member(ClassInfo *c, const char *name) {
  for (Member *m = c->members; m; m = m->next)
    if (!strcmp(m->name, name)) return m;
  return NULL;
}

static Node *member(Node *e, const char *name, Pos pos) {
  if (e->ty->kind != T_CLASS) hc_error_at(pos, "member '%s' of %s, which is not a class", name, TN1(e->ty));
  ClassInfo *c = e->ty->cls;
  if (!c->complete) hc_error_at(pos, "class %s is incomplete", c->name);
  Member *m = find_member(c, name);
  if (!m) hc_error_at(pos, "class %s has no member '%s'", c->name, name);
  Node *n = new_node(N_MEMBER, pos);
  n->a = e;
  n->ival = m->off;
  n->ty = m->ty;
  return n;
}

/* ------------------------------------------------------------- calls */
Node **parse_call_args(int *nargs) {
  Node *buf[HC_MAX_ARGS];
  int n = 0;
  expect("(");
  if (accept(")")) {
    *nargs = 0;
    return NULL;
  }
  for (;;) {
    if (n == HC_MAX_ARGS) hc_error_at(here(), "too many arguments (at most %d)", HC_MAX_ARGS);
    if (is_punct(peek(0), ",") || is_punct(peek(0), ")")) buf[n++] = NULL;
    else buf[n++] = parse_expr();
    if (accept(")")) break;
    expect(",");
  }
  Node **v = arena_alloc(sizeof(Node *) * (size_t)n);
  memcpy(v, buf, sizeof(Node *) * (size_t)n);
  *nargs = n;
  return v;
}

Node *make_call(Func *f, Node *callee, Node **args, int nargs, Pos pos) {
  if (f && f->kind == F_BUILTIN && !strcmp(f->name, "Abs") && nargs == 1 && args[0] && ty_is_int(args[0]->ty)) {
    Sym *s = lookup("AbsI64");
    if (s && s->kind == S_FUNC) f = s->p;
  }
  FuncSig *sig = f ? f->sig : callee->ty->base->sig;
  const char *name = f ? f->name : "function pointer";
  if (nargs > sig->nparams && !sig->varargs)
    hc_error_at(pos, "too many arguments to '%s' (takes %d, got %d)", name, sig->nparams, nargs);
  int n = nargs > sig->nparams ? nargs : sig->nparams;
  Node **v = arena_alloc(sizeof(Node *) * (size_t)(n ? n : 1));
  char what[300];
  for (int i = 0; i < n; i++) {
    Node *a = i < nargs ? args[i] : NULL;
    if (i < sig->nparams) {
      Param *p = &sig->params[i];
      if (!a) {
        if (!p->def) hc_error_at(pos, "missing argument %d ('%s') of '%s'", i + 1, p->name ? p->name : "?", name);
        a = p->def;
      }
      snprintf(what, sizeof what, "argument %d of '%s'", i + 1, name);
      v[i] = coerce(a, p->ty, a == p->def ? pos : a->pos, what);
    } else {
      if (!a) hc_error_at(pos, "empty variadic argument %d of '%s'", i + 1, name);
      a = rvalue(a);
      if (!ty_is_scalar(a->ty)) hc_error_at(a->pos, "cannot pass %s as a variadic argument", TN1(a->ty));
      v[i] = a;
    }
  }
  Node *c = new_node(N_CALL, pos);
  c->fn = f;
  c->a = f ? NULL : callee;
  c->list = v;
  c->n = n;
  c->ty = sig->ret;
  return c;
}

/* ------------------------------------------------------------- parsing */
static Node *parse_unary(void);

static Node *parse_primary(void) {
  Token *t = next();
  Pos pos = t->pos;
  switch (t->kind) {
    case TK_INT: case TK_CHAR: return new_int(t->ival, pos);
    case TK_FLOAT: {
      Node *n = new_node(N_FLT, pos);
      n->ty = ty_f64;
      n->fval = t->fval;
      return n;
    }
    case TK_STR: {
      /* adjacent literals join */
      int64_t len = t->len;
      int64_t k = 0;
      while (peek(k)->kind == TK_STR) len += peek(k++)->len;
      char *s = arena_alloc((size_t)len + 1);
      memcpy(s, t->s, (size_t)t->len);
      int64_t off = t->len;
      while (k-- > 0) {
        Token *u = next();
        memcpy(s + off, u->s, (size_t)u->len);
        off += u->len;
      }
      Node *n = new_node(N_STR, pos);
      n->sval = s;
      n->slen = len;
      n->ty = ty_ptr(ty_u8);
      return n;
    }
    case TK_IDENT: {
      Sym *s = lookup(t->s);
      if (!s) {
        if (is_type_start(t)) hc_error_at(pos, "unexpected type name '%s'", t->s);
        hc_error_at(pos, "unknown name '%s'", t->s);
      }
      if (s->kind == S_VAR) {
        Node *n = new_node(N_VAR, pos);
        n->var = s->p;
        n->ty = n->var->ty;
        return n;
      }
      if (s->kind == S_FUNC) {
        int nargs = 0;
        Node **args = NULL;
        if (is_punct(peek(0), "(")) args = parse_call_args(&nargs);
        return make_call(s->p, NULL, args, nargs, pos);
      }
      hc_error_at(pos, "unexpected type name '%s'", t->s);
    }
    case TK_PUNCT:
      if (!strcmp(t->s, "(")) {
        Node *e = parse_comma_expr();
        expect(")");
        return e;
      }
      if (!strcmp(t->s, "?")) hc_error_at(pos, "'?:' is not supported in HolyC");
      hc_error_at(pos, "expected an expression before '%s'", t->s);
    case TK_EOF: hc_error_at(pos, "unexpected end of file in an expression");
  }
  hc_error_at(pos, "expected an expression");
}

static Node *parse_postfix(void) {
  Node *e = parse_primary();
  for (;;) {
    Token *t = peek(0);
    Pos pos = t->pos;
    if (accept("[")) {
      Node *i = parse_comma_expr();
      expect("]");
      e = rvalue(e);
      i = rvalue(i);
      if (e->ty->kind != T_PTR || !ty_is_int(i->ty))
        hc_error_at(pos, "cannot index %s with %s", TN1(e->ty), TN2(i->ty));
      e = deref(binop(OP_ADD, e, i, pos), pos);
    } else if (accept(".")) {
      Token *m = next();
      if (m->kind != TK_IDENT) hc_error_at(m->pos, "expected a member name after '.'");
      if (e->ty->kind == T_PTR && e->ty->base->kind == T_CLASS)
        hc_error_at(pos, "member '%s' of a pointer: use '->'", m->s);
      e = member(e, m->s, m->pos);
    } else if (accept("->")) {
      Token *m = next();
      if (m->kind != TK_IDENT) hc_error_at(m->pos, "expected a member name after '->'");
      e = rvalue(e);
      if (e->ty->kind != T_PTR || e->ty->base->kind != T_CLASS)
        hc_error_at(pos, "'->' on %s, which is not a pointer to a class", TN1(e->ty));
      e = member(deref(e, pos), m->s, m->pos);
    } else if (is_punct(t, "(") && is_type_start(peek(1))) {
      next();
      Type *to = parse_type_name();
      expect(")");
      e = cast(e, to, pos);
    } else if (is_punct(t, "(")) {
      Node *callee = rvalue(e);
      if (!ty_is_fnptr(callee->ty)) hc_error_at(pos, "called object of type %s is not a function", TN1(callee->ty));
      int nargs;
      Node **args = parse_call_args(&nargs);
      e = make_call(NULL, callee, args, nargs, pos);
    } else if (accept("++")) {
      e = incdec(e, 1, true, pos);
    } else if (accept("--")) {
      e = incdec(e, -1, true, pos);
    } else {
      return e;
    }
  }
}

static Node *parse_unary(void) {
  Token *t = peek(0);
  Pos pos = t->pos;
  Node *r;
  enter();
  if (t->kind == TK_PUNCT) {
    if (accept("-")) {
      Node *e = rvalue(parse_unary());
      if (!ty_is_arith(e->ty)) hc_error_at(pos, "invalid operand to unary '-' (%s)", TN1(e->ty));
      if (e->kind == N_INT) {
        r = new_int((int64_t)(0 - (uint64_t)e->ival), pos);
      } else if (e->kind == N_FLT) {
        r = new_node(N_FLT, pos);
        r->ty = ty_f64;
        r->fval = -e->fval;
      } else {
        r = new_node(N_NEG, pos);
        r->a = e;
        r->ty = ty_is_float(e->ty) ? ty_f64 : e->ty->kind == T_U64 ? ty_u64 : ty_i64;
      }
    } else if (accept("+")) {
      r = rvalue(parse_unary());
      if (!ty_is_arith(r->ty)) hc_error_at(pos, "invalid operand to unary '+' (%s)", TN1(r->ty));
    } else if (accept("!")) {
      r = new_node(N_NOT, pos);
      r->a = cond_expr(parse_unary());
      r->ty = ty_i64;
    } else if (accept("~")) {
      r = new_node(N_BITNOT, pos);
      r->a = rvalue(parse_unary());
      if (!ty_is_int(r->a->ty)) hc_error_at(pos, "invalid operand to '~' (%s)", TN1(r->a->ty));
      r->ty = r->a->ty->kind == T_U64 ? ty_u64 : ty_i64;
    } else if (accept("*")) {
      r = deref(parse_unary(), pos);
    } else if (accept("&")) {
      Token *n = peek(0);
      Sym *s = n->kind == TK_IDENT ? lookup(n->s) : NULL;
      if (s && s->kind == S_FUNC) {
        next();
        r = new_node(N_FUNCADDR, pos);
        r->fn = s->p;
        r->ty = ty_ptr(r->fn->ty);
      } else {
        Node *e = parse_unary();
        if (!is_lvalue(e)) hc_error_at(pos, "cannot take the address of this expression");
        r = new_node(N_ADDR, pos);
        r->a = e;
        r->ty = ty_ptr(e->ty);
      }
    } else if (accept("++")) {
      r = incdec(parse_unary(), 1, false, pos);
    } else if (accept("--")) {
      r = incdec(parse_unary(), -1, false, pos);
    } else if (is_punct(t, "(") && is_type_start(peek(1))) {
      next();
      Type *to = parse_type_name();
      expect(")");
      r = cast(parse_unary(), to, pos);
    } else {
      r = parse_postfix();
    }
  } else if (is_ident(t, "sizeof")) {
    next();
    Type *ty;
    if (is_punct(peek(0), "(") && is_type_start(peek(1))) {
      next();
      ty = parse_type_name();
      expect(")");
    } else {
      ty = parse_unary()->ty;
    }
    if (ty->kind == T_FUNC || ty->kind == T_VOID) hc_error_at(pos, "sizeof of %s", TN1(ty));
    if (ty->kind == T_CLASS && !ty->cls->complete) hc_error_at(pos, "sizeof of incomplete class %s", ty->cls->name);
    r = new_int(ty->size, pos);
  } else {
    r = parse_postfix();
  }
  leave();
  return r;
}

typedef struct { const char *tok; int op, prec; } BinOp;
static const BinOp binops[] = {
  {"||", -1, 1}, {"^^", -2, 2}, {"&&", -3, 3}, {"|", OP_OR, 4}, {"^", OP_XOR, 5}, {"&", OP_AND, 6},
  {"==", OP_EQ, 7}, {"!=", OP_NE, 7}, {"<", OP_LT, 8}, {"<=", OP_LE, 8}, {">", OP_GT, 8}, {">=", OP_GE, 8},
  {"<<", OP_SHL, 9}, {">>", OP_SHR, 9}, {"+", OP_ADD, 10}, {"-", OP_SUB, 10},
  {"*", OP_MUL, 11}, {"/", OP_DIV, 11}, {"%", OP_MOD, 11}, {NULL, 0, 0}
};

static const BinOp *peek_binop(void) {
  Token *t = peek(0);
  if (t->kind != TK_PUNCT) return NULL;
  for (const BinOp *b = binops; b->tok; b++)
    if (!strcmp(t->s, b->tok)) return b;
  return NULL;
}

static Node *logical(NodeKind k, Node *a, Node *b, Pos pos) {
  Node *n = new_node(k, pos);
  n->a = cond_expr(a);
  n->b = cond_expr(b);
  n->ty = ty_i64;
  int64_t v;
  if (const_eval(n, &v)) return new_int(v, pos);
  return n;
}

static Node *parse_binary(int min_prec) {
  enter();
  Node *lhs = parse_unary();
  for (int count = 0;; count++) {
    const BinOp *b = peek_binop();
    if (!b || b->prec < min_prec) break;
    if (count > 10000) hc_error_at(here(), "expression too long");
    Pos pos = next()->pos;
    if (b->prec == 8) {
      /* chained comparison: a < b <= c means a < b && b <= c, each operand evaluated once */
      Node *ops[HC_MAX_ARGS];
      int opv[HC_MAX_ARGS];
      int n = 0;
      ops[n] = rvalue(lhs);
      opv[n] = b->op;
      ops[++n] = rvalue(parse_binary(9));
      const BinOp *c;
      while ((c = peek_binop()) && c->prec == 8) {
        if (n + 1 >= HC_MAX_ARGS) hc_error_at(pos, "comparison chain too long");
        next();
        opv[n] = c->op;
        ops[++n] = rvalue(parse_binary(9));
      }
      if (n == 1) {
        lhs = binop(opv[0], ops[0], ops[1], pos);
        continue;
      }
      Node *ch = new_node(N_CHAIN, pos);
      ch->n = n + 1;
      ch->list = arena_alloc(sizeof(Node *) * (size_t)(n + 1));
      ch->ops = arena_alloc(sizeof(int) * (size_t)n);
      for (int i = 0; i <= n; i++) ch->list[i] = ops[i];
      for (int i = 0; i < n; i++) {
        int dom = domain(opv[i], ops[i]->ty, ops[i + 1]->ty);
        if (dom < 0)
          hc_error_at(pos, "invalid operands to '%s' (%s and %s)", op_text(opv[i]), TN1(ops[i]->ty), TN2(ops[i + 1]->ty));
        ch->ops[i] = opv[i] | (dom << 8);
      }
      ch->ty = ty_i64;
      lhs = ch;
      continue;
    }
    Node *rhs = parse_binary(b->prec + 1);
    if (b->op == -1) lhs = logical(N_LOGOR, lhs, rhs, pos);
    else if (b->op == -2) lhs = logical(N_LOGXOR, lhs, rhs, pos);
    else if (b->op == -3) lhs = logical(N_LOGAND, lhs, rhs, pos);
    else lhs = binop(b->op, lhs, rhs, pos);
  }
  leave();
  return lhs;
}

static const struct { const char *tok; int op; } assigns[] = {
  {"=", 0}, {"+=", OP_ADD}, {"-=", OP_SUB}, {"*=", OP_MUL}, {"/=", OP_DIV}, {"%=", OP_MOD},
  {"<<=", OP_SHL}, {">>=", OP_SHR}, {"&=", OP_AND}, {"|=", OP_OR}, {"^=", OP_XOR}, {NULL, 0}
};

Node *parse_expr(void) {
  enter();
  Node *lhs = parse_binary(1);
  Token *t = peek(0);
  if (t->kind == TK_PUNCT) {
    for (int i = 0; assigns[i].tok; i++) {
      if (!strcmp(t->s, assigns[i].tok)) {
        next();
        Node *rhs = parse_expr();
        lhs = assign(assigns[i].op, lhs, rhs, t->pos);
        break;
      }
    }
    if (!strcmp(t->s, "?")) hc_error_at(t->pos, "'?:' is not supported in HolyC");
  }
  leave();
  return lhs;
}

Node *parse_comma_expr(void) {
  Node *e = parse_expr();
  while (is_punct(peek(0), ",")) {
    Pos pos = next()->pos;
    Node *n = new_node(N_COMMA, pos);
    n->a = e;
    n->b = parse_expr();
    n->ty = n->b->ty;
    e = n;
  }
  return e;
}
