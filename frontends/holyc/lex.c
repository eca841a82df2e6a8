/*
 * lex.c - lexer and preprocessor of hcrun.
 *
 * Each file is read whole and cut into raw tokens; the preprocessor walks them,
 * runs the directives (#include, #define, #undef, #ifdef, #ifndef, #if, #else,
 * #endif, #link) and expands object-like macros into one flat token array.
 */
#include "hc.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void push(TokenList *l, Token t) {
  if (l->n == l->cap) {
    int64_t cap = l->cap ? l->cap * 2 : 256;
    Token *v = arena_alloc(sizeof(Token) * (size_t)cap);
    if (l->n) memcpy(v, l->v, sizeof(Token) * (size_t)l->n);
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = t;
}

/* ------------------------------------------------------------- lexer */
static const char *puncts[] = {
  "<<=", ">>=", "...", "->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "^^",
  "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "::", NULL
};

static int escape(const char **pp, const char *end, Pos pos) {
  const char *p = *pp;
  if (p >= end) hc_error_at(pos, "unterminated escape sequence");
  int c = (unsigned char)*p++;
  switch (c) {
    case 'n': c = '\n'; break;
    case 't': c = '\t'; break;
    case 'r': c = '\r'; break;
    case 'a': c = '\a'; break;
    case 'b': c = '\b'; break;
    case 'f': c = '\f'; break;
    case 'v': c = '\v'; break;
    case 'e': c = 27; break;
    case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
      c -= '0';
      for (int k = 0; k < 2 && p < end && *p >= '0' && *p <= '7'; k++) c = c * 8 + (*p++ - '0');
      c &= 255;
      break;
    }
    case 'x': {
      int v = 0, k = 0;
      while (k < 2 && p < end && isxdigit((unsigned char)*p)) {
        int d = *p++;
        v = v * 16 + (isdigit(d) ? d - '0' : (tolower(d) - 'a' + 10));
        k++;
      }
      if (!k) hc_error_at(pos, "\\x used with no following hex digits");
      c = v;
      break;
    }
    default: break; /* \\ \' \" \? and any other char stand for themselves */
  }
  *pp = p;
  return c;
}

static TokenList lex_buffer(const char *src, size_t n, int file) {
  TokenList out = {0};
  const char *p = src, *end = src + n, *line_start = src;
  int line = 1;
  bool bol = true, space = false;
  while (p < end) {
    Pos pos = {file, line, (int)(p - line_start) + 1};
    unsigned char c = (unsigned char)*p;
    if (c == '\n') {
      p++;
      line++;
      line_start = p;
      bol = true;
      space = true;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      p++;
      space = true;
      continue;
    }
    if (c == '/' && p + 1 < end && p[1] == '/') {
      while (p < end && *p != '\n') p++;
      space = true;
      continue;
    }
    if (c == '/' && p + 1 < end && p[1] == '*') {
      p += 2;
      for (;;) {
        if (p + 1 >= end) hc_error_at(pos, "unterminated comment");
        if (p[0] == '*' && p[1] == '/') break;
        if (*p == '\n') {
          line++;
          line_start = p + 1;
        }
        p++;
      }
      p += 2;
      space = true;
      continue;
    }
    Token t = {0};
    t.pos = pos;
    t.bol = bol;
    t.space = space;
    bol = false;
    space = false;
    if (isalpha(c) || c == '_') {
      const char *s = p;
      while (p < end && (isalnum((unsigned char)*p) || *p == '_')) p++;
      t.kind = TK_IDENT;
      t.s = arena_strndup(s, (size_t)(p - s));
    } else if (isdigit(c) || (c == '.' && p + 1 < end && isdigit((unsigned char)p[1]))) {
      const char *s = p;
      if (c == '0' && p + 1 < end && (p[1] == 'x' || p[1] == 'X')) {
        p += 2;
        uint64_t v = 0;
        int k = 0;
        while (p < end && isxdigit((unsigned char)*p)) {
          int d = *p++;
          v = v * 16 + (uint64_t)(isdigit(d) ? d - '0' : (tolower(d) - 'a' + 10));
          k++;
        }
        if (!k) hc_error_at(pos, "invalid hexadecimal number");
        t.kind = TK_INT;
        t.ival = (int64_t)v;
      } else if (c == '0' && p + 1 < end && (p[1] == 'b' || p[1] == 'B') && p + 2 < end &&
                 (p[2] == '0' || p[2] == '1')) {
        p += 2;
        uint64_t v = 0;
        while (p < end && (*p == '0' || *p == '1')) v = v * 2 + (uint64_t)(*p++ - '0');
        t.kind = TK_INT;
        t.ival = (int64_t)v;
      } else {
        bool flt = false;
        while (p < end && isdigit((unsigned char)*p)) p++;
        if (p < end && *p == '.' && !(p + 1 < end && p[1] == '.')) {
          flt = true;
          p++;
          while (p < end && isdigit((unsigned char)*p)) p++;
        }
        if (p < end && (*p == 'e' || *p == 'E')) {
          const char *q = p + 1;
          if (q < end && (*q == '+' || *q == '-')) q++;
          if (q < end && isdigit((unsigned char)*q)) {
            flt = true;
            p = q;
            while (p < end && isdigit((unsigned char)*p)) p++;
          }
        }
        char buf[400];
        size_t len = (size_t)(p - s);
        if (len >= sizeof buf) hc_error_at(pos, "number too long");
        memcpy(buf, s, len);
        buf[len] = 0;
        if (flt) {
          t.kind = TK_FLOAT;
          t.fval = strtod(buf, NULL);
        } else {
          t.kind = TK_INT;
          uint64_t v = 0;
          for (size_t i = 0; i < len; i++) v = v * 10 + (uint64_t)(buf[i] - '0');
          t.ival = (int64_t)v;
        }
      }
      if (p < end && (isalnum((unsigned char)*p) || *p == '_')) hc_error_at(pos, "invalid suffix on number");
    } else if (c == '"') {
      p++;
      size_t cap = 64, len = 0;
      char *buf = malloc(cap);
      if (!buf) hc_error_at(pos, "out of memory");
      for (;;) {
        if (p >= end || *p == '\n') {
          free(buf);
          hc_error_at(pos, "unterminated string");
        }
        if (*p == '"') break;
        int ch;
        if (*p == '\\') {
          p++;
          ch = escape(&p, end, pos);
        } else {
          ch = (unsigned char)*p++;
        }
        if (len + 1 >= cap) {
          cap *= 2;
          char *nb = realloc(buf, cap);
          if (!nb) {
            free(buf);
            hc_error_at(pos, "out of memory");
          }
          buf = nb;
        }
        buf[len++] = (char)ch;
      }
      p++;
      t.kind = TK_STR;
      t.s = arena_strndup(buf, len);
      t.len = (int64_t)len;
      free(buf);
    } else if (c == '\'') {
      p++;
      uint64_t v = 0;
      int k = 0;
      for (;;) {
        if (p >= end || *p == '\n') hc_error_at(pos, "unterminated character constant");
        if (*p == '\'') break;
        int ch = *p == '\\' ? (p++, escape(&p, end, pos)) : (unsigned char)*p++;
        if (k == 8) hc_error_at(pos, "character constant longer than 8 characters");
        v |= (uint64_t)(ch & 255) << (8 * k);
        k++;
      }
      p++;
      if (!k) hc_error_at(pos, "empty character constant");
      t.kind = TK_CHAR;
      t.ival = (int64_t)v;
    } else {
      int i;
      for (i = 0; puncts[i]; i++) {
        size_t l = strlen(puncts[i]);
        if ((size_t)(end - p) >= l && !memcmp(p, puncts[i], l)) break;
      }
      if (puncts[i]) {
        t.s = puncts[i];
        p += strlen(puncts[i]);
      } else if (strchr("+-*/%<>=!&|^~?:;,.()[]{}#", c) && c) {
        static char singles[256][2];
        singles[c][0] = (char)c;
        t.s = singles[c];
        p++;
      } else {
        if (c >= 32 && c < 127) hc_error_at(pos, "unexpected character '%c'", c);
        hc_error_at(pos, "unexpected byte 0x%02x", c);
      }
      t.kind = TK_PUNCT;
    }
    push(&out, t);
  }
  Token eof = {0};
  eof.kind = TK_EOF;
  eof.pos = (Pos){file, line, (int)(p - line_start) + 1};
  eof.bol = true;
  push(&out, eof);
  return out;
}

/* ------------------------------------------------------------- preprocessor */
typedef struct Macro { const char *name; Token *body; int n; bool active; struct Macro *next; } Macro;
static Macro *macros;

static Macro *find_macro(const char *name) {
  for (Macro *m = macros; m; m = m->next)
    if (!strcmp(m->name, name)) return m;
  return NULL;
}

static void define(const char *name, Token *body, int n) {
  Macro *m = find_macro(name);
  if (!m) {
    m = arena_alloc(sizeof(Macro));
    m->name = name;
    m->next = macros;
    macros = m;
  }
  m->body = body;
  m->n = n;
}

static void undef(const char *name) {
  for (Macro **pm = &macros; *pm; pm = &(*pm)->next) {
    if (!strcmp((*pm)->name, name)) {
      *pm = (*pm)->next;
      return;
    }
  }
}

static int macro_depth;

static void emit(TokenList *out, Token t, Pos use) {
  if (t.kind == TK_IDENT) {
    Macro *m = find_macro(t.s);
    if (m && !m->active) {
      if (macro_depth >= HC_MAX_MACRO_DEPTH) hc_error_at(use, "macro expansion too deep");
      m->active = true;
      macro_depth++;
      for (int i = 0; i < m->n; i++) {
        Token b = m->body[i];
        b.pos = use;
        b.bol = false;
        emit(out, b, use);
      }
      macro_depth--;
      m->active = false;
      return;
    }
  }
  t.pos = use;
  push(out, t);
}

static char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  while (buf) {
    if (len == cap) {
      if (cap > ((size_t)1 << 30)) {
        free(buf);
        buf = NULL;
        break;
      }
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    if (!got) break;
    len += got;
  }
  fclose(f);
  *n = len;
  return buf;
}

static int include_depth;

static bool is_directive(const Token *t, const char *name) {
  return t->kind == TK_IDENT && !strcmp(t->s, name);
}

/* The tokens of the directive's line after the directive name: [i, j). */
static int64_t line_end(TokenList *l, int64_t i) {
  while (l->v[i].kind != TK_EOF && !l->v[i].bol) i++;
  return i;
}

static void preprocess_file(TokenList *out, const char *path, Pos from);

static char *dir_join(const char *file, const char *name) {
  const char *slash = strrchr(file, '/');
  size_t dl = slash ? (size_t)(slash - file + 1) : 0;
  if (name[0] == '/') dl = 0;
  char *p = arena_alloc(dl + strlen(name) + 1);
  memcpy(p, file, dl);
  strcpy(p + dl, name);
  return p;
}

/* #if: an integer, `defined NAME` / `defined(NAME)`, `!` of those; enough for feature tests. */
static bool eval_if(TokenList *l, int64_t i, int64_t j, Pos pos) {
  bool neg = false;
  while (i < j && l->v[i].kind == TK_PUNCT && !strcmp(l->v[i].s, "!")) {
    neg = !neg;
    i++;
  }
  bool v;
  if (i < j && is_directive(&l->v[i], "defined")) {
    i++;
    bool paren = i < j && l->v[i].kind == TK_PUNCT && !strcmp(l->v[i].s, "(");
    if (paren) i++;
    if (i >= j || l->v[i].kind != TK_IDENT) hc_error_at(pos, "#if defined needs a name");
    v = find_macro(l->v[i].s) != NULL;
    i++;
    if (paren) {
      if (i >= j || l->v[i].kind != TK_PUNCT || strcmp(l->v[i].s, ")")) hc_error_at(pos, "expected ')'");
      i++;
    }
  } else if (i < j && l->v[i].kind == TK_INT) {
    v = l->v[i].ival != 0;
    i++;
  } else if (i < j && l->v[i].kind == TK_IDENT) {
    Macro *m = find_macro(l->v[i].s);
    v = m && m->n == 1 && m->body[0].kind == TK_INT && m->body[0].ival != 0;
    i++;
  } else {
    hc_error_at(pos, "#if supports an integer, a macro name or defined(NAME)");
  }
  if (i != j) hc_error_at(l->v[i].pos, "unexpected tokens after #if condition");
  return neg ? !v : v;
}

static void preprocess_tokens(TokenList *out, TokenList *in, const char *path) {
  struct Cond { bool taking, seen_else, parent_taking; Pos pos; } conds[HC_MAX_IF_DEPTH];
  int nconds = 0;
  bool taking = true;
  int64_t i = 0;
  while (in->v[i].kind != TK_EOF) {
    Token *t = &in->v[i];
    if (t->bol && t->kind == TK_PUNCT && !strcmp(t->s, "#")) {
      Pos pos = t->pos;
      int64_t j = line_end(in, i + 1);
      Token *d = &in->v[i + 1];
      if (i + 1 >= j || d->kind != TK_IDENT) {
        if (!taking) {
          i = j;
          continue;
        }
        hc_error_at(pos, "expected a directive name after '#'");
      }
      const char *name = d->s;
      int64_t a = i + 2; /* first argument token */
      if (!strcmp(name, "ifdef") || !strcmp(name, "ifndef") || !strcmp(name, "if")) {
        if (nconds == HC_MAX_IF_DEPTH) hc_error_at(pos, "#if nesting too deep");
        bool cond = false;
        if (taking) {
          if (name[2] == 0) {
            cond = eval_if(in, a, j, pos);
          } else {
            if (a >= j || in->v[a].kind != TK_IDENT) hc_error_at(pos, "#%s needs a name", name);
            if (a + 1 != j) hc_error_at(in->v[a + 1].pos, "unexpected tokens after #%s name", name);
            cond = find_macro(in->v[a].s) != NULL;
            if (!strcmp(name, "ifndef")) cond = !cond;
          }
        }
        conds[nconds++] = (struct Cond){taking && cond, false, taking, pos};
        taking = taking && cond;
      } else if (!strcmp(name, "else")) {
        if (!nconds) hc_error_at(pos, "#else without #if");
        struct Cond *c = &conds[nconds - 1];
        if (c->seen_else) hc_error_at(pos, "#else after #else");
        c->seen_else = true;
        taking = c->parent_taking && !c->taking;
        c->taking = taking;
      } else if (!strcmp(name, "endif")) {
        if (!nconds) hc_error_at(pos, "#endif without #if");
        nconds--;
        taking = conds[nconds].parent_taking;
      } else if (!taking) {
        /* skipped */
      } else if (!strcmp(name, "define")) {
        if (a >= j || in->v[a].kind != TK_IDENT) hc_error_at(pos, "#define needs a name");
        Token *nm = &in->v[a];
        if (a + 1 < j && in->v[a + 1].kind == TK_PUNCT && !strcmp(in->v[a + 1].s, "(") && !in->v[a + 1].space)
          hc_error_at(nm->pos, "function-like macros are not supported");
        int n = (int)(j - a - 1);
        Token *body = arena_alloc(sizeof(Token) * (size_t)(n + 1));
        memcpy(body, &in->v[a + 1], sizeof(Token) * (size_t)n);
        define(nm->s, body, n);
      } else if (!strcmp(name, "undef")) {
        if (a >= j || in->v[a].kind != TK_IDENT) hc_error_at(pos, "#undef needs a name");
        undef(in->v[a].s);
      } else if (!strcmp(name, "include")) {
        if (a >= j || in->v[a].kind != TK_STR) hc_error_at(pos, "#include expects \"file\"");
        if (a + 1 != j) hc_error_at(in->v[a + 1].pos, "unexpected tokens after #include");
        if (strlen(in->v[a].s) != (size_t)in->v[a].len || !in->v[a].len)
          hc_error_at(in->v[a].pos, "bad file name");
        preprocess_file(out, dir_join(path, in->v[a].s), in->v[a].pos);
      } else if (!strcmp(name, "link")) {
        if (a < j && in->v[a].kind == TK_STR && a + 1 == j) {
          if (strlen(in->v[a].s) != (size_t)in->v[a].len || !in->v[a].len)
            hc_error_at(in->v[a].pos, "bad library name");
          hc_link(in->v[a].pos, in->v[a].s, false, path);
        } else if (a < j && in->v[a].kind == TK_PUNCT && !strcmp(in->v[a].s, "<")) {
          /* <name>: identifiers, dots, dashes and pluses up to '>' */
          char buf[256];
          size_t len = 0;
          int64_t k = a + 1;
          for (; k < j && !(in->v[k].kind == TK_PUNCT && !strcmp(in->v[k].s, ">")); k++) {
            char num[32];
            const char *s = in->v[k].s;
            if (in->v[k].kind == TK_INT) {
              snprintf(num, sizeof num, "%lld", (long long)in->v[k].ival);
              s = num;
            } else if (in->v[k].kind != TK_IDENT && in->v[k].kind != TK_PUNCT) {
              hc_error_at(in->v[k].pos, "bad library name");
            }
            size_t l = strlen(s);
            if (len + l >= sizeof buf) hc_error_at(pos, "library name too long");
            memcpy(buf + len, s, l);
            len += l;
          }
          if (k >= j || k + 1 != j || !len) hc_error_at(pos, "#link expects \"path\" or <name>");
          buf[len] = 0;
          hc_link(in->v[a].pos, buf, true, path);
        } else {
          hc_error_at(pos, "#link expects \"path\" or <name>");
        }
      } else {
        hc_error_at(d->pos, "unknown directive #%s", name);
      }
      i = j;
      continue;
    }
    if (taking) emit(out, *t, t->pos);
    i++;
  }
  if (nconds) hc_error_at(conds[nconds - 1].pos, "unterminated #if");
}

static void preprocess_file(TokenList *out, const char *path, Pos from) {
  if (include_depth >= HC_MAX_INCLUDE_DEPTH) hc_error_at(from, "#include nested too deeply");
  size_t n;
  char *src = read_file(path, &n);
  if (!src) {
    if (from.line) hc_error_at(from, "cannot read '%s': %s", path, strerror(errno));
    fprintf(stderr, "hcrun: cannot read '%s': %s\n", path, strerror(errno));
    hc_exit(1);
  }
  int file = hc_add_file(path);
  /* lex_buffer reports errors by exiting; keep the buffer reachable in an arena copy */
  char *copy = arena_alloc(n + 1);
  memcpy(copy, src, n);
  free(src);
  TokenList raw = lex_buffer(copy, n, file);
  include_depth++;
  preprocess_tokens(out, &raw, hc_file_name(file));
  include_depth--;
}

TokenList hc_preprocess(const char *path) {
  TokenList out = {0};
  static Token one = {.kind = TK_INT, .ival = 1}, zero = {.kind = TK_INT, .ival = 0};
  define("__MT_HOLYC__", &one, 1);
  define("TRUE", &one, 1);
  define("FALSE", &zero, 1);
  define("NULL", &zero, 1);
  preprocess_file(&out, path, (Pos){-1, 0, 0});
  Token eof = {0};
  eof.kind = TK_EOF;
  eof.pos = out.n ? out.v[out.n - 1].pos : (Pos){0, 1, 1};
  push(&out, eof);
  return out;
}
