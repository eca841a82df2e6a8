/*
 * hc.h - shared declarations of hcrun, minitorch's HolyC interpreter.
 *
 * Pipeline: lex.c (lexer + preprocessor: source files -> one token array)
 *        -> parse.c / parse_expr.c (parser + type checker -> typed tree)
 *        -> eval.c (tree-walking evaluator over real C-layout memory)
 *        with builtins.c (Print, MAlloc, math ...) and ffi.c (#link, extern "c").
 *
 * Script values live in real memory with C layout (class members naturally
 * aligned, 8-byte pointers), so a pointer taken in a script can be handed to a
 * C library as is. Every structure the interpreter itself allocates comes from
 * one arena that is released at exit.
 */
#ifndef HCRUN_HC_H_INCLUDED
#define HCRUN_HC_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------- limits */
#define HC_MAX_INCLUDE_DEPTH 32
#define HC_MAX_MACRO_DEPTH 64
#define HC_MAX_IF_DEPTH 64
#define HC_MAX_PARSE_DEPTH 200     /* nesting of expressions and statements */
#define HC_MAX_CALL_DEPTH 5000     /* interpreted calls in flight */
#define HC_MAX_ARGS 64             /* arguments of one call */
#define HC_MAX_OBJECT (1LL << 32)  /* bytes of one declared object */
#define HC_STACK_BYTES (64 << 20)  /* interpreter frame stack */
#define HC_MAX_TRY_DEPTH 256

/* ------------------------------------------------------------- arena, errors */
void *arena_alloc(size_t n);                 /* zeroed; never NULL (exits on OOM) */
char *arena_strndup(const char *s, size_t n);
void arena_release_all(void);

typedef struct Pos { int file, line, col; } Pos;

int hc_add_file(const char *name);           /* returns file index */
const char *hc_file_name(int file);
void hc_error_at(Pos p, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
void hc_runtime_error(Pos p, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
void hc_exit(int code) __attribute__((noreturn));   /* flushes, frees, exits */

/* ------------------------------------------------------------- tokens */
typedef enum { TK_EOF, TK_IDENT, TK_INT, TK_FLOAT, TK_STR, TK_CHAR, TK_PUNCT } TokKind;

typedef struct Token {
  TokKind kind;
  Pos pos;
  bool bol;        /* first token of its line */
  bool space;      /* whitespace before it */
  const char *s;   /* identifier / punctuator text, string contents */
  int64_t len;     /* string length (strings may hold \0) */
  int64_t ival;
  double fval;
} Token;

typedef struct TokenList { Token *v; int64_t n, cap; } TokenList;

/* Reads path (and what it includes), returns the preprocessed tokens, ending with TK_EOF. */
TokenList hc_preprocess(const char *path);

/* ------------------------------------------------------------- types */
typedef enum {
  T_VOID, T_I8, T_U8, T_I16, T_U16, T_I32, T_U32, T_I64, T_U64, T_BOOL, T_F64,
  T_PTR, T_ARRAY, T_CLASS, T_FUNC
} TypeKind;

typedef struct Type Type;
typedef struct ClassInfo ClassInfo;
typedef struct FuncSig FuncSig;
typedef struct Node Node;
typedef struct Var Var;
typedef struct Func Func;

struct Type {
  TypeKind kind;
  int64_t size, align;
  Type *base;        /* T_PTR, T_ARRAY: element; */
  int64_t len;       /* T_ARRAY: element count (-1 while unknown) */
  ClassInfo *cls;    /* T_CLASS */
  FuncSig *sig;      /* T_FUNC */
};

typedef struct Member { const char *name; Type *ty; int64_t off; struct Member *next; } Member;

struct ClassInfo {
  const char *name;
  ClassInfo *base;
  Member *members;
  int64_t size, align;
  bool is_union, complete;
  Type *ty;
};

typedef struct Param { const char *name; Type *ty; Node *def; Pos pos; } Param;

struct FuncSig {
  Type *ret;
  Param *params;
  int nparams;
  bool varargs;
};

extern Type *ty_void, *ty_i8, *ty_u8, *ty_i16, *ty_u16, *ty_i32, *ty_u32, *ty_i64, *ty_u64,
    *ty_bool, *ty_f64;
Type *ty_ptr(Type *base);
Type *ty_array(Type *base, int64_t len);
Type *ty_func(FuncSig *sig);
static inline bool ty_is_int(const Type *t) { return t->kind >= T_I8 && t->kind <= T_BOOL; }
static inline bool ty_is_float(const Type *t) { return t->kind == T_F64; }
static inline bool ty_is_arith(const Type *t) { return t->kind >= T_I8 && t->kind <= T_F64; }
static inline bool ty_is_ptr(const Type *t) { return t->kind == T_PTR || t->kind == T_ARRAY; }
static inline bool ty_is_scalar(const Type *t) { return t->kind >= T_I8 && t->kind <= T_PTR; }
bool ty_is_fnptr(const Type *t);
const char *ty_name(const Type *t, char *buf, size_t n);

/* ------------------------------------------------------------- program */
struct Var {
  const char *name;
  Type *ty;
  bool is_local;     /* frame-relative (offset) or static (addr) */
  int64_t off;
  void *addr;
  Pos pos;
};

typedef enum { F_USER, F_EXTERN, F_BUILTIN } FuncKind;

struct Func {
  const char *name;
  FuncSig *sig;
  Type *ty;          /* T_FUNC */
  FuncKind kind;
  int builtin;       /* F_BUILTIN: id (builtins.c) */
  Node *body;        /* F_USER: NULL until defined */
  Var **params;      /* F_USER: storage of each parameter */
  Var *argc_var, *argv_var;
  int64_t frame_size;
  int64_t index;     /* in the function table; function pointers carry it */
  void *ffi;         /* F_EXTERN: ffi.c's state */
  Pos pos;
};

typedef enum {
  /* expressions */
  N_INT, N_FLT, N_STR, N_VAR, N_FUNCADDR, N_MEMBER, N_DEREF, N_ADDR,
  N_NEG, N_NOT, N_BITNOT, N_BIN, N_PTRADD, N_PTRSUB, N_PTRDIFF, N_LOGAND, N_LOGOR, N_LOGXOR,
  N_ASSIGN, N_OPASSIGN, N_PREINC, N_POSTINC, N_CALL, N_CONV, N_CHAIN, N_COMMA,
  /* statements */
  N_BLOCK, N_IF, N_WHILE, N_DO, N_FOR, N_RETURN, N_BREAK, N_CONTINUE, N_GOTO, N_LABEL,
  N_SWITCH, N_CASE, N_EXPR, N_PRINT, N_PUTCH, N_DECL, N_TRY, N_NOP
} NodeKind;

/* One element written by an initializer: `off` bytes into the object. */
typedef struct Init { int64_t off; Type *ty; Node *expr; const char *bytes; int64_t nbytes; } Init;

typedef struct CaseRange { int64_t lo, hi; int index; } CaseRange;

struct Node {
  NodeKind kind;
  Type *ty;          /* expressions: the type of the value */
  Pos pos;
  int op;            /* N_BIN, N_OPASSIGN, N_CHAIN: operator token id (see OP_*) */
  int dom;           /* N_BIN, N_OPASSIGN, N_PREINC...: arithmetic domain (D_*) */
  int64_t scale;     /* pointer arithmetic: element size */
  Node *a, *b, *c, *d;
  Node **list;       /* N_BLOCK statements, N_CALL / N_PRINT arguments, N_CHAIN operands */
  int n;
  int *ops;          /* N_CHAIN: operators */
  int64_t ival;      /* N_INT, N_PTRADD scale, N_PREINC delta */
  double fval;
  const char *sval;  /* N_STR bytes, N_GOTO / N_LABEL name */
  int64_t slen;
  Var *var;          /* N_VAR, N_DECL */
  Func *fn;          /* N_CALL direct callee, N_FUNCADDR */
  Init *inits;       /* N_DECL */
  int ninits;
  bool is_static;    /* N_DECL: static local, initialized once */
  bool done;         /* N_DECL static: initialized */
  CaseRange *cases;  /* N_SWITCH */
  int ncases;
  int default_index; /* N_SWITCH: -1 when none */
  Node *target;      /* N_GOTO: the label's enclosing block */
  int target_index;  /* N_GOTO: statement index of the label in that block */
};

enum {
  OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_MOD, OP_SHL, OP_SHR, OP_AND, OP_OR, OP_XOR,
  OP_LT, OP_LE, OP_GT, OP_GE, OP_EQ, OP_NE
};

enum { D_INT, D_UINT, D_FLT, D_PTR };

typedef struct Program {
  Node **top;        /* top-level statements in order */
  int ntop;
} Program;

Program hc_parse(TokenList toks);
extern Func **hc_funcs;    /* function table, indexed by Func.index */
extern int64_t hc_nfuncs;

/* ------------------------------------------------------------- runtime */
typedef union Value { int64_t i; uint64_t u; double f; void *p; } Value;

extern int64_t hc_max_steps;  /* 0: unlimited */
extern Pos hc_cur_pos;        /* position of the statement being run (for signal reports) */
extern int hc_argc;           /* script arguments (ArgC / ArgV) */
extern char **hc_argv;

void hc_run(Program *prog);
void hc_eval_release(void);
Value hc_call(Func *f, Value *args, Type **argty, int nargs, Pos pos);
Value hc_load(Type *t, const void *addr);
void hc_store(Type *t, void *addr, Value v);
Value hc_convert(Value v, Type *from, Type *to);

/* builtins.c */
void hc_builtins_declare(void (*declare)(const char *name, Type *ret, int builtin, int nparams,
                                         Type **ptypes, const char **pnames, Node **defs, bool varargs));
Value hc_builtin_call(Func *f, Value *args, Type **argty, int nargs, Pos pos);
/* Formats like Print; returns a malloc'd string (caller frees). */
char *hc_format(Pos pos, const char *fmt, Value *args, Type **argty, int nargs, int64_t *outlen);
void hc_throw(Pos pos, int64_t value) __attribute__((noreturn));

/* ffi.c */
void hc_link(Pos pos, const char *spec, bool angle, const char *from_file);
Value hc_ffi_call(Func *f, Value *args, Type **argty, int nargs, Pos pos);
void hc_ffi_release(void);

#endif /* HCRUN_HC_H_INCLUDED */
