/*
 * parse.c - declarations, statements, classes and functions of hcrun's parser.
 *
 * Contents: tokens and scopes | types and declarators | classes | initializers |
 * statements | functions and extern "c" | the program.
 *
 * One pass, as HolyC itself: a name must be declared before it is used. Locals get
 * frame offsets here; globals and static locals get their storage here too.
 */
#include "parse.h"

#include <stdio.h>
#include <string.h>

Parser *P;
Func **hc_funcs;
int64_t hc_nfuncs;
static int64_t capfuncs;

/* ------------------------------------------------------------- tokens and scopes */
Token *peek(int k) {
  Token *t = &P->t[P->i];
  while (k-- > 0 && t->kind != TK_EOF) t++;
  return t;
}

Token *next(void) {
  Token *t = &P->t[P->i];
  if (t->kind != TK_EOF) P->i++;
  return t;
}

bool is_punct(const Token *t, const char *s) { return t->kind == TK_PUNCT && !strcmp(t->s, s); }
bool is_ident(const Token *t, const char *s) { return t->kind == TK_IDENT && !strcmp(t->s, s); }

bool accept(const char *punct) {
  if (!is_punct(peek(0), punct)) return false;
  next();
  return true;
}

static const char *tok_desc(const Token *t, char *buf, size_t n) {
  switch (t->kind) {
    case TK_EOF: return "end of file";
    case TK_IDENT: snprintf(buf, n, "'%s'", t->s); return buf;
    case TK_PUNCT: snprintf(buf, n, "'%s'", t->s); return buf;
    case TK_STR: return "a string";
    case TK_CHAR: return "a character constant";
    default: return "a number";
  }
}

void expect(const char *punct) {
  if (accept(punct)) return;
  char buf[300];
  hc_error_at(peek(0)->pos, "expected '%s' before %s", punct, tok_desc(peek(0), buf, sizeof buf));
}

Pos here(void) { return peek(0)->pos; }

void enter(void) {
  if (++P->depth > HC_MAX_PARSE_DEPTH) hc_error_at(here(), "nesting too deep (more than %d levels)", HC_MAX_PARSE_DEPTH);
}
void leave(void) { P->depth--; }

static const char *expect_ident(const char *what) {
  Token *t = next();
  char buf[300];
  if (t->kind != TK_IDENT) hc_error_at(t->pos, "expected %s before %s", what, tok_desc(t, buf, sizeof buf));
  return t->s;
}

static void push_scope(void) {
  Scope *s = arena_alloc(sizeof(Scope));
  s->up = P->scope;
  P->scope = s;
}
static void pop_scope(void) { P->scope = P->scope->up; }

Sym *lookup(const char *name) {
  for (Scope *s = P->scope; s; s = s->up)
    for (Sym *y = s->syms; y; y = y->next)
      if (!strcmp(y->name, name)) return y;
  return NULL;
}

static Sym *lookup_here(const char *name) {
  for (Sym *y = P->scope->syms; y; y = y->next)
    if (!strcmp(y->name, name)) return y;
  return NULL;
}

static const char *keywords[] = {
  "if", "else", "for", "while", "do", "switch", "case", "default", "break", "continue", "goto",
  "return", "class", "union", "extern", "static", "sizeof", "try", "catch", "public", NULL
};

static bool is_keyword(const char *s) {
  for (int i = 0; keywords[i]; i++)
    if (!strcmp(s, keywords[i])) return true;
  return false;
}

static Sym *declare(const char *name, SymKind kind, void *p, Pos pos) {
  if (is_keyword(name)) hc_error_at(pos, "'%s' is a keyword", name);
  Sym *old = lookup_here(name);
  if (old) hc_error_at(pos, "'%s' is already declared in this scope", name);
  Sym *s = arena_alloc(sizeof(Sym));
  s->name = name;
  s->kind = kind;
  s->p = p;
  s->next = P->scope->syms;
  P->scope->syms = s;
  return s;
}

/* ------------------------------------------------------------- types and declarators */
static Type *prim_type(const char *s) {
  static const struct { const char *name; Type **ty; } prims[] = {
    {"U0", &ty_void}, {"I8", &ty_i8}, {"U8", &ty_u8}, {"I16", &ty_i16}, {"U16", &ty_u16},
    {"I32", &ty_i32}, {"U32", &ty_u32}, {"I64", &ty_i64}, {"U64", &ty_u64}, {"F64", &ty_f64},
    {"Bool", &ty_bool}, {NULL, NULL}
  };
  for (int i = 0; prims[i].name; i++)
    if (!strcmp(s, prims[i].name)) return *prims[i].ty;
  return NULL;
}

bool is_type_start(const Token *t) {
  if (t->kind != TK_IDENT) return false;
  if (prim_type(t->s)) return true;
  Sym *s = lookup(t->s);
  return s && s->kind == S_CLASS;
}

static Type *parse_base_type(void) {
  Token *t = next();
  Type *ty = prim_type(t->s);
  if (ty) return ty;
  Sym *s = lookup(t->s);
  return ((ClassInfo *)s->p)->ty;
}

static Type *parse_params(FuncSig *sig);

static int64_t const_int(const char *what) {
  Node *e = parse_expr();
  int64_t v;
  if (!ty_is_int(e->ty) || !const_eval(e, &v)) hc_error_at(e->pos, "%s must be an integer constant", what);
  return v;
}

static Type *array_dims(Type *base, bool allow_open) {
  int64_t dims[16];
  int n = 0;
  Pos pos = here();
  while (accept("[")) {
    if (n == 16) hc_error_at(pos, "too many array dimensions");
    if (is_punct(peek(0), "]")) {
      if (n || !allow_open) hc_error_at(here(), "array size missing");
      dims[n++] = -1;
    } else {
      int64_t v = const_int("array size");
      if (v <= 0) hc_error_at(pos, "array size must be positive, got %lld", (long long)v);
      dims[n++] = v;
    }
    expect("]");
  }
  if (base->kind == T_VOID && n) hc_error_at(pos, "array of U0");
  if (base->kind == T_CLASS && !base->cls->complete && n) hc_error_at(pos, "array of incomplete class %s", base->cls->name);
  for (int i = n - 1; i >= 0; i--) {
    if (dims[i] > 0 && base->size > 0 && dims[i] > HC_MAX_OBJECT / base->size) hc_error_at(pos, "array too large");
    base = ty_array(base, dims[i]);
  }
  return base;
}

/* A declarator after the base type: stars, then a name, `(*name)(params)`, or nothing
 * (abstract, when name is NULL), then array dimensions. *fsig receives the signature when
 * the declarator is `name(params)`, a function. */
static Type *parse_declarator(Type *base, const char **name, Pos *npos, FuncSig **fsig, bool allow_open) {
  enter();
  while (accept("*")) base = ty_ptr(base);
  if (name) *name = NULL;
  if (fsig) *fsig = NULL;
  *npos = here();
  if (is_punct(peek(0), "(") && is_punct(peek(1), "*")) {
    next();
    next();
    int stars = 0;
    while (accept("*")) stars++;
    if (peek(0)->kind == TK_IDENT && name) {
      *npos = here();
      *name = next()->s;
    }
    expect(")");
    FuncSig *sig = arena_alloc(sizeof(FuncSig));
    sig->ret = base;
    parse_params(sig);
    Type *t = ty_ptr(ty_func(sig));
    while (stars-- > 0) t = ty_ptr(t);
    leave();
    return array_dims(t, allow_open);
  }
  if (name && peek(0)->kind == TK_IDENT && !is_type_start(peek(0))) {
    *name = next()->s;
    if (fsig && is_punct(peek(0), "(")) {
      FuncSig *sig = arena_alloc(sizeof(FuncSig));
      sig->ret = base;
      parse_params(sig);
      *fsig = sig;
      leave();
      return base;
    }
  }
  leave();
  return array_dims(base, allow_open);
}

Type *parse_type_name(void) {
  Type *base = parse_base_type();
  Pos pos;
  return parse_declarator(base, NULL, &pos, NULL, false);
}

/* (params): `()`, `(U0)`, `(T a, T b = default, ...)`. Defaults are parsed without the
 * parameters in scope, so they can only name globals and constants. */
static Type *parse_params(FuncSig *sig) {
  Param buf[HC_MAX_ARGS];
  int n = 0;
  expect("(");
  if (is_ident(peek(0), "U0") && is_punct(peek(1), ")")) next();
  while (!accept(")")) {
    if (n) expect(",");
    if (accept("...")) {
      sig->varargs = true;
      expect(")");
      break;
    }
    if (n == HC_MAX_ARGS) hc_error_at(here(), "too many parameters (at most %d)", HC_MAX_ARGS);
    if (!is_type_start(peek(0))) {
      char b[300];
      hc_error_at(here(), "expected a parameter type before %s", tok_desc(peek(0), b, sizeof b));
    }
    Param *p = &buf[n++];
    memset(p, 0, sizeof *p);
    Type *base = parse_base_type();
    p->ty = parse_declarator(base, &p->name, &p->pos, NULL, true);
    if (p->ty->kind == T_ARRAY) p->ty = ty_ptr(p->ty->base);
    if (p->ty->kind == T_VOID) hc_error_at(p->pos, "parameter of type U0");
    if (p->ty->kind == T_CLASS) hc_error_at(p->pos, "class parameters are passed by pointer (%s *)", p->ty->cls->name);
    if (accept("=")) {
      Scope *saved = P->scope;
      Func *savedfn = P->fn;
      while (P->scope->up) P->scope = P->scope->up;
      P->fn = NULL;
      Node *d = parse_expr();
      P->scope = saved;
      P->fn = savedfn;
      p->def = coerce(d, p->ty, d->pos, "default argument");
    }
  }
  sig->nparams = n;
  sig->params = arena_alloc(sizeof(Param) * (size_t)(n ? n : 1));
  memcpy(sig->params, buf, sizeof(Param) * (size_t)n);
  return NULL;
}

/* ------------------------------------------------------------- variables */
static Var *new_var(const char *name, Type *ty, Pos pos, bool is_static) {
  Var *v = arena_alloc(sizeof(Var));
  v->name = name;
  v->ty = ty;
  v->pos = pos;
  if (ty->size > HC_MAX_OBJECT) hc_error_at(pos, "object too large");
  if (P->fn && !is_static) {
    int64_t a = ty->align < 1 ? 1 : ty->align;
    P->frame = (P->frame + a - 1) / a * a;
    v->is_local = true;
    v->off = P->frame;
    P->frame += ty->size;
    if (P->frame > HC_STACK_BYTES / 2) hc_error_at(pos, "locals of this function are too large");
  } else {
    v->addr = arena_alloc((size_t)(ty->size ? ty->size : 1));
  }
  return v;
}

/* ------------------------------------------------------------- classes */
static ClassInfo *parse_class(bool is_union) {
  Pos pos = here();
  const char *name = expect_ident("a class name");
  Sym *s = lookup_here(name);
  ClassInfo *c;
  if (s && s->kind == S_CLASS) {
    c = s->p;
  } else {
    if (s) hc_error_at(pos, "'%s' is already declared as something else", name);
    if (prim_type(name)) hc_error_at(pos, "'%s' is a built-in type", name);
    c = arena_alloc(sizeof(ClassInfo));
    c->name = name;
    c->is_union = is_union;
    c->ty = arena_alloc(sizeof(Type));
    c->ty->kind = T_CLASS;
    c->ty->cls = c;
    c->ty->align = 1;
    declare(name, S_CLASS, c, pos);
  }
  if (c->is_union != is_union) hc_error_at(pos, "'%s' was declared as a %s", name, c->is_union ? "union" : "class");
  if (!is_punct(peek(0), "{") && !is_punct(peek(0), ":")) return c; /* forward declaration */
  if (c->complete) hc_error_at(pos, "redefinition of %s", name);
  Member *head = NULL, **tail = &head;
  int64_t off = 0, align = 1;
  if (accept(":")) {
    Pos bpos = here();
    const char *bname = expect_ident("a base class name");
    Sym *b = lookup(bname);
    if (!b || b->kind != S_CLASS) hc_error_at(bpos, "unknown class '%s'", bname);
    ClassInfo *bc = b->p;
    if (!bc->complete) hc_error_at(bpos, "base class %s is incomplete", bname);
    for (Member *m = bc->members; m; m = m->next) {
      Member *copy = arena_alloc(sizeof(Member));
      *copy = *m;
      copy->next = NULL;
      *tail = copy;
      tail = &copy->next;
    }
    c->base = bc;
    off = bc->size;
    align = bc->align;
  }
  expect("{");
  int64_t size = off;
  while (!accept("}")) {
    if (peek(0)->kind == TK_EOF) hc_error_at(pos, "unterminated class %s", name);
    if (!is_type_start(peek(0))) {
      char b[300];
      hc_error_at(here(), "expected a member declaration before %s", tok_desc(peek(0), b, sizeof b));
    }
    Type *base = parse_base_type();
    do {
      const char *mname;
      Pos mpos;
      Type *t = parse_declarator(base, &mname, &mpos, NULL, false);
      if (!mname) hc_error_at(mpos, "expected a member name");
      if (t->kind == T_VOID) hc_error_at(mpos, "member of type U0");
      if (t->kind == T_CLASS && !t->cls->complete) hc_error_at(mpos, "member of incomplete class %s", t->cls->name);
      for (Member *m = head; m; m = m->next)
        if (!strcmp(m->name, mname)) hc_error_at(mpos, "duplicate member '%s'", mname);
      Member *m = arena_alloc(sizeof(Member));
      m->name = mname;
      m->ty = t;
      int64_t a = t->align < 1 ? 1 : t->align;
      if (a > align) align = a;
      if (is_union) {
        m->off = 0;
        if (t->size > size) size = t->size;
      } else {
        off = (off + a - 1) / a * a;
        m->off = off;
        off += t->size;
        if (off > HC_MAX_OBJECT) hc_error_at(mpos, "class too large");
        size = off;
      }
      *tail = m;
      tail = &m->next;
    } while (accept(","));
    expect(";");
  }
  c->members = head;
  c->align = align;
  c->size = (size + align - 1) / align * align;
  c->complete = true;
  c->ty->size = c->size;
  c->ty->align = align;
  return c;
}

/* ------------------------------------------------------------- initializers */
typedef struct { Init *v; int n, cap; } Inits;

static void add_init(Inits *l, Init it) {
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 8;
    Init *v = arena_alloc(sizeof(Init) * (size_t)cap);
    if (l->n) memcpy(v, l->v, sizeof(Init) * (size_t)l->n);
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = it;
}

static void parse_init(Inits *l, Type *t, int64_t off) {
  enter();
  Pos pos = here();
  if (t->kind == T_ARRAY && t->base->size == 1 && ty_is_int(t->base) && peek(0)->kind == TK_STR) {
    Node *s = parse_expr();
    if (s->kind != N_STR) hc_error_at(pos, "expected a string literal");
    if (t->len < 0) t->len = s->slen + 1, t->size = t->len;
    int64_t n = s->slen + 1 < t->len ? s->slen + 1 : t->len;
    add_init(l, (Init){off, t, NULL, s->sval, n});
  } else if (t->kind == T_ARRAY) {
    expect("{");
    int64_t i = 0;
    while (!accept("}")) {
      if (i && !accept(",")) expect("}");
      if (i && accept("}")) break;
      if (t->len >= 0 && i >= t->len) hc_error_at(here(), "too many initializers for %lld elements", (long long)t->len);
      parse_init(l, t->base, off + i * t->base->size);
      i++;
      if (i > HC_MAX_OBJECT) hc_error_at(pos, "initializer too long");
    }
    if (t->len < 0) {
      if (!i) hc_error_at(pos, "empty initializer for an array of unknown size");
      t->len = i;
      t->size = i * t->base->size;
    }
  } else if (t->kind == T_CLASS && is_punct(peek(0), "{")) {
    next();
    Member *m = t->cls->members;
    int i = 0;
    while (!accept("}")) {
      if (i && !accept(",")) expect("}");
      if (i && accept("}")) break;
      if (!m) hc_error_at(here(), "too many initializers for class %s", t->cls->name);
      parse_init(l, m->ty, off + m->off);
      m = t->cls->is_union ? NULL : m->next;
      i++;
    }
  } else {
    Node *e = parse_expr();
    add_init(l, (Init){off, t, coerce(e, t, e->pos, "initialization"), NULL, 0});
  }
  leave();
}

/* ------------------------------------------------------------- statements */
static Node *parse_stmt(void);
static Node *parse_block_body(Node *b, bool is_switch, Node *sw);
static void parse_function(Type *ret, const char *name, Pos pos, FuncSig *sig, bool is_extern_c);

static void push_block(Node *b) {
  if (P->nblocks == P->capblocks) {
    int cap = P->capblocks ? P->capblocks * 2 : 32;
    Node **v = arena_alloc(sizeof(Node *) * (size_t)cap);
    if (P->nblocks) memcpy(v, P->blocks, sizeof(Node *) * (size_t)P->nblocks);
    P->blocks = v;
    P->capblocks = cap;
  }
  P->blocks[P->nblocks++] = b;
}

/* A declaration: [static] type declarator [= init] {, declarator [= init]} ;
 * Returns the N_DECL nodes (several wrapped in an N_BLOCK), or NULL when nothing runs. */
static Node *parse_declaration(bool top) {
  Pos pos = here();
  bool is_static = false;
  while (is_ident(peek(0), "static") || is_ident(peek(0), "public")) {
    if (is_ident(next(), "static")) is_static = true;
  }
  if (is_ident(peek(0), "class") || is_ident(peek(0), "union")) {
    bool u = is_ident(next(), "union");
    ClassInfo *c = parse_class(u);
    if (accept(";")) return NULL;
    /* `class C {...} var;` falls through with the class as the base type */
    P->i--;
    P->t[P->i].kind = TK_IDENT;
    P->t[P->i].s = c->name;
  }
  if (!is_type_start(peek(0))) {
    char b[300];
    hc_error_at(here(), "expected a type before %s", tok_desc(peek(0), b, sizeof b));
  }
  Type *base = parse_base_type();
  Node *decls[64];
  int nd = 0;
  Node *blk = NULL;
  do {
    const char *name;
    Pos npos;
    FuncSig *sig;
    Type *t = parse_declarator(base, &name, &npos, &sig, true);
    if (!name) hc_error_at(npos, "expected a name in the declaration");
    if (sig) {
      if (!top || P->fn) hc_error_at(npos, "functions can only be declared at top level");
      if (nd) hc_error_at(npos, "a function cannot share a declaration with variables");
      parse_function(t, name, npos, sig, false);
      return NULL;
    }
    if (t->kind == T_VOID) hc_error_at(npos, "variable '%s' of type U0", name);
    if (t->kind == T_CLASS && !t->cls->complete) hc_error_at(npos, "variable '%s' of incomplete class %s", name, t->cls->name);
    Inits inits = {0};
    if (accept("=")) parse_init(&inits, t, 0);
    if (t->kind == T_ARRAY && t->len < 0) hc_error_at(npos, "array '%s' needs a size or an initializer", name);
    Var *v = new_var(name, t, npos, is_static);
    declare(name, S_VAR, v, npos);
    Node *d = new_node(N_DECL, npos);
    d->var = v;
    d->inits = inits.v;
    d->ninits = inits.n;
    d->is_static = is_static && P->fn;
    if (nd == 64) hc_error_at(npos, "too many declarators in one declaration");
    decls[nd++] = d;
  } while (accept(","));
  expect(";");
  if (nd == 1) return decls[0];
  blk = new_node(N_BLOCK, pos);
  blk->n = nd;
  blk->list = arena_alloc(sizeof(Node *) * (size_t)nd);
  memcpy(blk->list, decls, sizeof(Node *) * (size_t)nd);
  return blk;
}

static bool starts_declaration(void) {
  Token *t = peek(0);
  if (is_ident(t, "static") || is_ident(t, "class") || is_ident(t, "union") || is_ident(t, "public")) return true;
  return is_type_start(t);
}

static Node *parse_block(void) {
  Node *b = new_node(N_BLOCK, here());
  expect("{");
  push_scope();
  parse_block_body(b, false, NULL);
  pop_scope();
  return b;
}

/* Statements up to the closing '}'. In a switch body, case labels become N_CASE markers
 * whose indices are recorded in sw. */
static Node *parse_block_body(Node *b, bool is_switch, Node *sw) {
  Node **v = NULL;
  int n = 0, cap = 0;
  int64_t next_case = 0;
  int ncases = 0, capcases = 0;
  push_block(b);
  for (;;) {
    Token *t = peek(0);
    if (t->kind == TK_EOF) hc_error_at(b->pos, "unterminated block");
    if (is_punct(t, "}")) {
      next();
      break;
    }
    Node *s;
    if (is_switch && (is_ident(t, "case") || is_ident(t, "default"))) {
      next();
      s = new_node(N_CASE, t->pos);
      if (is_ident(t, "default")) {
        if (sw->default_index >= 0) hc_error_at(t->pos, "more than one default");
        sw->default_index = n;
      } else {
        int64_t lo = next_case, hi;
        if (!is_punct(peek(0), ":")) lo = const_int("case value");
        hi = lo;
        if (accept("...")) hi = const_int("case range end");
        if (hi < lo) hc_error_at(t->pos, "empty case range %lld ... %lld", (long long)lo, (long long)hi);
        next_case = hi + 1;
        if (ncases == capcases) {
          capcases = capcases ? capcases * 2 : 16;
          CaseRange *nc = arena_alloc(sizeof(CaseRange) * (size_t)capcases);
          if (ncases) memcpy(nc, sw->cases, sizeof(CaseRange) * (size_t)ncases);
          sw->cases = nc;
        }
        sw->cases[ncases++] = (CaseRange){lo, hi, n};
        sw->ncases = ncases;
      }
      expect(":");
    } else if (t->kind == TK_IDENT && is_punct(peek(1), ":") && !is_keyword(t->s) && !lookup(t->s)) {
      next();
      next();
      for (Label *l = P->labels; l; l = l->next)
        if (!strcmp(l->name, t->s)) hc_error_at(t->pos, "duplicate label '%s'", t->s);
      Label *l = arena_alloc(sizeof(Label));
      *l = (Label){t->s, b, n, t->pos, P->labels};
      P->labels = l;
      s = new_node(N_LABEL, t->pos);
      s->sval = t->s;
    } else {
      s = parse_stmt();
      if (!s) continue;
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 8;
      Node **nv = arena_alloc(sizeof(Node *) * (size_t)cap);
      if (n) memcpy(nv, v, sizeof(Node *) * (size_t)n);
      v = nv;
    }
    v[n++] = s;
  }
  P->nblocks--;
  b->list = v;
  b->n = n;
  return b;
}

static Node *loop_body(void) {
  P->loops++;
  P->breaks++;
  Node *s = parse_stmt();
  P->loops--;
  P->breaks--;
  return s ? s : new_node(N_NOP, here());
}

static Node *sub_stmt(void) {
  Node *s = parse_stmt();
  return s ? s : new_node(N_NOP, here());
}

static Node *parse_stmt(void) {
  enter();
  Token *t = peek(0);
  Pos pos = t->pos;
  Node *n = NULL;
  if (is_punct(t, "{")) {
    n = parse_block();
  } else if (accept(";")) {
    n = new_node(N_NOP, pos);
  } else if (t->kind == TK_IDENT && is_ident(t, "if")) {
    next();
    n = new_node(N_IF, pos);
    expect("(");
    n->a = cond_expr(parse_comma_expr());
    expect(")");
    n->b = sub_stmt();
    if (is_ident(peek(0), "else")) {
      next();
      n->c = sub_stmt();
    }
  } else if (is_ident(t, "while")) {
    next();
    n = new_node(N_WHILE, pos);
    expect("(");
    n->a = cond_expr(parse_comma_expr());
    expect(")");
    n->b = loop_body();
  } else if (is_ident(t, "do")) {
    next();
    n = new_node(N_DO, pos);
    n->b = loop_body();
    if (!is_ident(peek(0), "while")) hc_error_at(here(), "expected 'while' after do body");
    next();
    expect("(");
    n->a = cond_expr(parse_comma_expr());
    expect(")");
    expect(";");
  } else if (is_ident(t, "for")) {
    next();
    n = new_node(N_FOR, pos);
    push_scope();
    expect("(");
    if (!accept(";")) {
      if (starts_declaration()) {
        n->a = parse_declaration(false);
      } else {
        n->a = new_node(N_EXPR, here());
        n->a->a = parse_comma_expr();
        expect(";");
      }
    }
    if (!accept(";")) {
      n->b = cond_expr(parse_comma_expr());
      expect(";");
    }
    if (!accept(")")) {
      n->c = parse_comma_expr();
      expect(")");
    }
    n->d = loop_body();
    pop_scope();
  } else if (is_ident(t, "switch")) {
    next();
    n = new_node(N_SWITCH, pos);
    n->default_index = -1;
    bool square = false;
    if (accept("[")) square = true;
    else expect("(");
    n->a = rvalue(parse_comma_expr());
    if (!ty_is_int(n->a->ty)) hc_error_at(n->a->pos, "switch on %s, not an integer", n->a->ty->kind == T_F64 ? "F64" : "a non-integer");
    expect(square ? "]" : ")");
    Node *body = new_node(N_BLOCK, here());
    expect("{");
    push_scope();
    P->breaks++;
    parse_block_body(body, true, n);
    P->breaks--;
    pop_scope();
    n->b = body;
  } else if (is_ident(t, "case") || is_ident(t, "default")) {
    hc_error_at(pos, "'%s' outside of a switch body", t->s);
  } else if (is_ident(t, "break")) {
    next();
    if (!P->breaks) hc_error_at(pos, "'break' outside of a loop or switch");
    expect(";");
    n = new_node(N_BREAK, pos);
  } else if (is_ident(t, "continue")) {
    next();
    if (!P->loops) hc_error_at(pos, "'continue' outside of a loop");
    expect(";");
    n = new_node(N_CONTINUE, pos);
  } else if (is_ident(t, "goto")) {
    next();
    n = new_node(N_GOTO, pos);
    n->sval = expect_ident("a label name");
    expect(";");
    Goto *g = arena_alloc(sizeof(Goto));
    g->node = n;
    g->nchain = P->nblocks;
    g->chain = arena_alloc(sizeof(Node *) * (size_t)(P->nblocks ? P->nblocks : 1));
    memcpy(g->chain, P->blocks, sizeof(Node *) * (size_t)P->nblocks);
    g->next = P->gotos;
    P->gotos = g;
  } else if (is_ident(t, "return")) {
    next();
    n = new_node(N_RETURN, pos);
    Type *ret = P->fn ? P->fn->sig->ret : ty_void;
    if (!P->fn) hc_error_at(pos, "'return' outside of a function");
    if (!accept(";")) {
      Node *e = parse_comma_expr();
      if (ret->kind == T_VOID) hc_error_at(e->pos, "U0 function '%s' returns a value", P->fn->name);
      n->a = coerce(e, ret, e->pos, "return");
      expect(";");
    }
  } else if (is_ident(t, "try")) {
    next();
    n = new_node(N_TRY, pos);
    if (!is_punct(peek(0), "{")) hc_error_at(here(), "expected '{' after try");
    n->a = parse_block();
    if (!is_ident(peek(0), "catch")) hc_error_at(here(), "expected 'catch' after try block");
    next();
    if (!is_punct(peek(0), "{")) hc_error_at(here(), "expected '{' after catch");
    n->b = parse_block();
  } else if (is_ident(t, "else")) {
    hc_error_at(pos, "'else' without 'if'");
  } else if (is_ident(t, "extern")) {
    hc_error_at(pos, "extern declarations are only allowed at top level");
  } else if (starts_declaration()) {
    n = parse_declaration(false);
  } else if (t->kind == TK_STR) {
    /* printing statement: "fmt", args; */
    n = new_node(N_PRINT, pos);
    n->a = parse_expr();
    if (n->a->kind != N_STR) hc_error_at(pos, "a statement starting with a string must be a printing statement");
    Node *buf[HC_MAX_ARGS];
    int k = 0;
    while (accept(",")) {
      if (k == HC_MAX_ARGS) hc_error_at(here(), "too many arguments (at most %d)", HC_MAX_ARGS);
      Node *e = rvalue(parse_expr());
      if (!ty_is_scalar(e->ty)) hc_error_at(e->pos, "cannot print %s", e->ty->kind == T_CLASS ? e->ty->cls->name : "this value");
      buf[k++] = e;
    }
    expect(";");
    n->n = k;
    n->list = arena_alloc(sizeof(Node *) * (size_t)(k ? k : 1));
    memcpy(n->list, buf, sizeof(Node *) * (size_t)k);
  } else if (t->kind == TK_CHAR && is_punct(peek(1), ";")) {
    next();
    next();
    n = new_node(N_PUTCH, pos);
    n->a = new_int(t->ival, pos);
  } else {
    n = new_node(N_EXPR, pos);
    n->a = parse_comma_expr();
    expect(";");
  }
  leave();
  return n;
}

/* ------------------------------------------------------------- functions */
static Func *new_func(const char *name, FuncSig *sig, FuncKind kind, Pos pos) {
  Func *f = arena_alloc(sizeof(Func));
  f->name = name;
  f->sig = sig;
  f->ty = ty_func(sig);
  f->kind = kind;
  f->pos = pos;
  if (hc_nfuncs == capfuncs) {
    int64_t cap = capfuncs ? capfuncs * 2 : 256;
    Func **v = arena_alloc(sizeof(Func *) * (size_t)cap);
    if (hc_nfuncs) memcpy(v, hc_funcs, sizeof(Func *) * (size_t)hc_nfuncs);
    hc_funcs = v;
    capfuncs = cap;
  }
  f->index = hc_nfuncs;
  hc_funcs[hc_nfuncs++] = f;
  return f;
}

static bool same_type(Type *a, Type *b) {
  if (a->kind != b->kind) return false;
  switch (a->kind) {
    case T_PTR: return same_type(a->base, b->base);
    case T_ARRAY: return a->len == b->len && same_type(a->base, b->base);
    case T_CLASS: return a->cls == b->cls;
    case T_FUNC: {
      if (a->sig->nparams != b->sig->nparams || a->sig->varargs != b->sig->varargs) return false;
      if (!same_type(a->sig->ret, b->sig->ret)) return false;
      for (int i = 0; i < a->sig->nparams; i++)
        if (!same_type(a->sig->params[i].ty, b->sig->params[i].ty)) return false;
      return true;
    }
    default: return true;
  }
}

static void resolve_gotos(void) {
  for (Goto *g = P->gotos; g; g = g->next) {
    Label *l = P->labels;
    while (l && strcmp(l->name, g->node->sval)) l = l->next;
    if (!l) hc_error_at(g->node->pos, "label '%s' is not defined", g->node->sval);
    bool ok = false;
    for (int i = 0; i < g->nchain; i++)
      if (g->chain[i] == l->block) ok = true;
    if (!ok) hc_error_at(g->node->pos, "goto '%s' jumps into a nested block, which is not supported", l->name);
    g->node->target = l->block;
    g->node->target_index = l->index;
  }
  P->gotos = NULL;
  P->labels = NULL;
}

static void parse_function(Type *ret, const char *name, Pos pos, FuncSig *sig, bool is_extern_c) {
  if (ret->kind == T_CLASS) hc_error_at(pos, "functions return classes by pointer (%s *)", ret->cls->name);
  if (ret->kind == T_ARRAY) hc_error_at(pos, "functions cannot return arrays");
  Sym *s = lookup_here(name);
  Func *f;
  if (s) {
    if (s->kind != S_FUNC) hc_error_at(pos, "'%s' is already declared as something else", name);
    f = s->p;
    if (f->kind != F_USER || is_extern_c) hc_error_at(pos, "redeclaration of '%s'", name);
    if (!same_type(f->ty, ty_func(sig))) hc_error_at(pos, "conflicting types for '%s'", name);
    /* defaults may be given in the prototype or the definition */
    for (int i = 0; i < sig->nparams; i++)
      if (!sig->params[i].def) sig->params[i].def = f->sig->params[i].def;
    f->sig = sig;
    f->ty = ty_func(sig);
  } else {
    f = new_func(name, sig, is_extern_c ? F_EXTERN : F_USER, pos);
    declare(name, S_FUNC, f, pos);
  }
  if (is_extern_c) {
    for (int i = 0; i < sig->nparams; i++)
      if (sig->params[i].ty->kind == T_CLASS) hc_error_at(sig->params[i].pos, "extern \"c\" functions take pointers");
    expect(";");
    return;
  }
  if (accept(";")) return;
  if (!is_punct(peek(0), "{")) {
    char b[300];
    hc_error_at(here(), "expected '{' or ';' after the parameters of '%s', got %s", name, tok_desc(peek(0), b, sizeof b));
  }
  if (f->body) hc_error_at(pos, "redefinition of '%s'", name);
  P->fn = f;
  P->frame = 0;
  push_scope();
  f->params = arena_alloc(sizeof(Var *) * (size_t)(sig->nparams ? sig->nparams : 1));
  for (int i = 0; i < sig->nparams; i++) {
    Param *p = &sig->params[i];
    Var *v = new_var(p->name ? p->name : "", p->ty, p->pos, false);
    f->params[i] = v;
    if (p->name) declare(p->name, S_VAR, v, p->pos);
  }
  if (sig->varargs) {
    f->argc_var = new_var("argc", ty_i64, pos, false);
    declare("argc", S_VAR, f->argc_var, pos);
    f->argv_var = new_var("argv", ty_ptr(ty_i64), pos, false);
    declare("argv", S_VAR, f->argv_var, pos);
  }
  Node *body = new_node(N_BLOCK, here());
  f->body = body; /* recursion sees a defined function */
  expect("{");
  push_scope();
  parse_block_body(body, false, NULL);
  pop_scope();
  pop_scope();
  resolve_gotos();
  f->frame_size = (P->frame + 15) / 16 * 16;
  P->fn = NULL;
  P->frame = 0;
}

static void parse_extern(void) {
  Pos pos = here();
  next(); /* extern */
  Token *t = peek(0);
  if (t->kind != TK_STR || strcmp(t->s, "c")) hc_error_at(pos, "only extern \"c\" declarations are supported");
  next();
  if (!is_type_start(peek(0))) {
    char b[300];
    hc_error_at(here(), "expected a return type before %s", tok_desc(peek(0), b, sizeof b));
  }
  Type *base = parse_base_type();
  const char *name;
  Pos npos;
  FuncSig *sig;
  Type *t2 = parse_declarator(base, &name, &npos, &sig, false);
  if (!name || !sig) hc_error_at(npos, "extern \"c\" declares functions only");
  parse_function(t2, name, npos, sig, true);
}

/* ------------------------------------------------------------- the program */
static void declare_builtin(const char *name, Type *ret, int id, int nparams, Type **ptypes, const char **pnames,
                            Node **defs, bool varargs) {
  FuncSig *sig = arena_alloc(sizeof(FuncSig));
  sig->ret = ret;
  sig->nparams = nparams;
  sig->varargs = varargs;
  sig->params = arena_alloc(sizeof(Param) * (size_t)(nparams ? nparams : 1));
  for (int i = 0; i < nparams; i++) {
    sig->params[i].ty = ptypes[i];
    sig->params[i].name = pnames[i];
    sig->params[i].def = defs ? defs[i] : NULL;
  }
  Func *f = new_func(name, sig, F_BUILTIN, (Pos){-1, 0, 0});
  f->builtin = id;
  declare(name, S_FUNC, f, f->pos);
}

static Var *argc_var, *argv_var;

Program hc_parse(TokenList toks) {
  static Parser parser;
  P = &parser;
  P->t = toks.v;
  push_scope();
  hc_builtins_declare(declare_builtin);
  argc_var = new_var("ArgC", ty_i64, (Pos){0}, true);
  declare("ArgC", S_VAR, argc_var, (Pos){0});
  argv_var = new_var("ArgV", ty_ptr(ty_ptr(ty_u8)), (Pos){0}, true);
  declare("ArgV", S_VAR, argv_var, (Pos){0});
  *(int64_t *)argc_var->addr = hc_argc;
  *(char ***)argv_var->addr = hc_argv;

  Node *top = new_node(N_BLOCK, here());
  Node **v = NULL;
  int n = 0, cap = 0;
  push_block(top);
  while (peek(0)->kind != TK_EOF) {
    Token *t = peek(0);
    Node *s = NULL;
    if (is_ident(t, "extern")) {
      parse_extern();
    } else if (starts_declaration()) {
      s = parse_declaration(true);
    } else if (t->kind == TK_IDENT && is_punct(peek(1), ":") && !is_keyword(t->s) && !lookup(t->s)) {
      next();
      next();
      for (Label *l = P->labels; l; l = l->next)
        if (!strcmp(l->name, t->s)) hc_error_at(t->pos, "duplicate label '%s'", t->s);
      Label *l = arena_alloc(sizeof(Label));
      *l = (Label){t->s, top, n, t->pos, P->labels};
      P->labels = l;
      s = new_node(N_LABEL, t->pos);
      s->sval = t->s;
    } else if (is_punct(t, "}")) {
      hc_error_at(t->pos, "unexpected '}'");
    } else {
      s = parse_stmt();
    }
    if (!s) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      Node **nv = arena_alloc(sizeof(Node *) * (size_t)cap);
      if (n) memcpy(nv, v, sizeof(Node *) * (size_t)n);
      v = nv;
    }
    v[n++] = s;
  }
  P->nblocks--;
  resolve_gotos();
  top->list = v;
  top->n = n;
  Program prog = {0};
  prog.top = arena_alloc(sizeof(Node *));
  prog.top[0] = top;
  prog.ntop = 1;
  return prog;
}
