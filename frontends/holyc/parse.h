/* parse.h - parser state shared by parse.c (declarations, statements) and expr.c (expressions). */
#ifndef HCRUN_PARSE_H_INCLUDED
#define HCRUN_PARSE_H_INCLUDED

#include "hc.h"

typedef enum { S_VAR, S_FUNC, S_CLASS } SymKind;

typedef struct Sym { const char *name; SymKind kind; void *p; struct Sym *next; } Sym;
typedef struct Scope { struct Scope *up; Sym *syms; } Scope;

typedef struct Label { const char *name; Node *block; int index; Pos pos; struct Label *next; } Label;
typedef struct Goto { Node *node; Node **chain; int nchain; struct Goto *next; } Goto;

typedef struct Parser {
  Token *t;            /* token array, ends with TK_EOF */
  int64_t i;           /* current token */
  Scope *scope;
  Func *fn;            /* function being parsed; NULL at top level */
  int64_t frame;       /* bytes of locals so far in fn */
  int depth;           /* nesting guard */
  int loops, breaks;   /* enclosing loops / loops+switches */
  Node **blocks;       /* enclosing blocks (for goto checks) */
  int nblocks, capblocks;
  Label *labels;
  Goto *gotos;
} Parser;

extern Parser *P;

/* tokens */
Token *peek(int k);
Token *next(void);
bool is_punct(const Token *t, const char *s);
bool is_ident(const Token *t, const char *s);
bool accept(const char *punct);
void expect(const char *punct);
Pos here(void);
void enter(void);   /* depth guard */
void leave(void);

/* symbols, types */
Sym *lookup(const char *name);
bool is_type_start(const Token *t);
Type *parse_type_name(void);   /* base type + abstract declarator, for casts and sizeof */

/* nodes */
Node *new_node(NodeKind k, Pos pos);
Node *new_int(int64_t v, Pos pos);
Node *parse_expr(void);        /* assignment expression (no comma) */
Node *parse_comma_expr(void);
Node *coerce(Node *e, Type *to, Pos pos, const char *what);
Node *rvalue(Node *e);         /* checks that e has a value */
Node *cond_expr(Node *e);      /* checks e is usable as a condition */
bool const_eval(Node *e, int64_t *out);
Node *make_call(Func *f, Node *callee, Node **args, int nargs, Pos pos);
Node **parse_call_args(int *nargs);

#endif /* HCRUN_PARSE_H_INCLUDED */
