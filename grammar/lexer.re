/* lexer.re — the GSL lexer, generated into lexer.c by re2c.
 *
 * The source is read whole and NUL-terminated, so re2c needs no refill: the
 * NUL at text[len] is the sentinel (re2c:yyfill:enable = 0), and no rule
 * matches a NUL except the one rule that checks whether it is the end of
 * the input or a stray NUL inside the file (an invalid character).
 *
 * Two layers: scan() is the re2c automaton and turns bytes into raw tokens,
 * skipping blanks and comments and noting newlines; lex_next() sits on top
 * and decides which newlines become TOK_NEWLINE, keeps the stack of open
 * brackets, and closes forgotten brackets with TOK_UNCLOSED (see lexer.h).
 * All state lives in struct Lexer. Errors (an invalid character, an
 * unterminated string, an unknown escape, a number out of range) are
 * reported where they are and scanning goes on after them. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gslc.h"
#include "lexer.h"
#include "parser.h"

void lex_init(Lexer *lx, const Source *src, Arena *a, Diag *d) {
  memset(lx, 0, sizeof *lx);
  lx->src = src;
  lx->arena = a;
  lx->diag = d;
  lx->cur = src->text;
  lx->lim = src->text + src->len;
  lx->line_start = src->text;
  lx->line = 1;
  lx->last = -1;
}

/* The span from lx->tok to lx->cur, on the current line. */
static Span tok_span(const Lexer *lx) {
  Span sp;
  sp.src = lx->src;
  sp.line = lx->line;
  sp.col = (uint32_t)(lx->tok - lx->line_start) + 1;
  sp.off = (uint32_t)(lx->tok - lx->src->text);
  sp.end = (uint32_t)(lx->cur - lx->src->text);
  return sp;
}

static bool over_limit(const Lexer *lx) {
  return lx->max_errors > 0 && lx->nerrors + lx->parse_errors >= lx->max_errors;
}

/* Gives up at sp: the rest of the input is skipped. */
static void stop(Lexer *lx, Span sp) {
  diag_note(lx->diag, sp, "too many errors, giving up on this file");
  lx->stopped = true;
  lx->cur = lx->lim;
  lx->depth = 0;
  lx->newline_seen = false;
}

static void lex_error(Lexer *lx, Span sp, const char *fmt, ...) {
  if (lx->stopped)
    return;
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(lx->diag, sp, "%s", msg);
  lx->nerrors++;
  if (over_limit(lx))
    stop(lx, sp);
}

/* Reports the bytes from p to lx->cur (on the current line, from the token
 * lx->tok) as an invalid character: as themselves if printable ASCII or one
 * UTF-8 sequence, else in hex. */
static void bad_char(Lexer *lx, const char *p, bool utf8) {
  unsigned char c = (unsigned char)*p;
  char buf[16];
  if (utf8 || (c >= 0x20 && c < 0x7f)) {
    size_t n = (size_t)(lx->cur - p);
    memcpy(buf, p, n);
    buf[n] = '\0';
  } else {
    snprintf(buf, sizeof buf, "\\x%02x", c);
  }
  Span sp = tok_span(lx);
  sp.col += (uint32_t)(p - lx->tok);
  sp.off += (uint32_t)(p - lx->tok);
  lex_error(lx, sp, "unexpected character '%s'", buf);
}

static void scan_int(Lexer *lx, Token *t) {
  int64_t v = 0;
  for (const char *p = lx->tok; p < lx->cur; p++) {
    int d = *p - '0';
    if (v > (INT64_MAX - d) / 10) {
      lex_error(lx, t->span, "integer literal %s is too large", arena_strndup(lx->arena, lx->tok, (size_t)(lx->cur - lx->tok)));
      v = 0;
      break;
    }
    v = v * 10 + d;
  }
  t->kind = TOK_INT;
  t->ival = v;
}

static void scan_float(Lexer *lx, Token *t) {
  char *text = arena_strndup(lx->arena, lx->tok, (size_t)(lx->cur - lx->tok));
  double v = strtod(text, NULL);
  if (isinf(v)) {
    lex_error(lx, t->span, "float literal %s is out of range", text);
    v = 0;
  }
  t->kind = TOK_FLOAT;
  t->fval = v;
}

/* Decodes the string whose quotes span lx->tok .. lx->cur (the closing
 * quote may be missing); the escapes were checked while scanning. */
static void decode_string(Lexer *lx, Token *t, bool closed) {
  const char *p = lx->tok + 1, *end = lx->cur - (closed ? 1 : 0);
  char *s = arena_alloc(lx->arena, (size_t)(end - p) + 1), *q = s;
  while (p < end) {
    if (*p == '\\' && p + 1 < end) {
      p++;
      *q++ = *p == 'n' ? '\n' : *p;
      p++;
    } else if (*p == '\\') {
      p++;
    } else {
      *q++ = *p++;
    }
  }
  *q = '\0';
  t->kind = TOK_STRING;
  t->text = s;
}

/*!re2c
  re2c:define:YYCTYPE = "unsigned char";
  re2c:define:YYCURSOR = "lx->cur";
  re2c:define:YYMARKER = "marker";
  re2c:yyfill:enable = 0;
  re2c:sentinel = 0;

  digits = [0-9]+;
  exponent = [eE] [+-]? digits;
  float = digits "." [0-9]* exponent? | "." digits exponent? | digits exponent;
  name = [A-Za-z_] [A-Za-z0-9_]*;
  utf8 = [\xc2-\xdf] [\x80-\xbf] | [\xe0-\xef] [\x80-\xbf]{2} | [\xf0-\xf4] [\x80-\xbf]{3};
*/

/* Scans the rest of a string after its opening quote. */
static void scan_string(Lexer *lx, Token *t) {
  for (;;) {
    const char *esc = lx->cur;
    /*!re2c
      ["] { t->span = tok_span(lx); decode_string(lx, t, true); return; }
      "\\" ["\\n] { continue; }
      "\\" [^\n\x00] {
        Span sp = tok_span(lx);
        sp.col += (uint32_t)(esc - lx->tok);
        sp.off += (uint32_t)(esc - lx->tok);
        lex_error(lx, sp, "unknown escape sequence '%s' in string", arena_strndup(lx->arena, esc, 2));
        continue;
      }
      [^"\\\n\x00]+ { continue; }
      [\x00] {
        if (esc < lx->lim) {
          bad_char(lx, esc, false);
          continue;
        }
        lx->cur = esc;
        t->span = tok_span(lx);
        lex_error(lx, t->span, "unterminated string");
        decode_string(lx, t, false);
        return;
      }
      * {
        lx->cur = *esc == '\\' ? esc + 1 : esc;
        t->span = tok_span(lx);
        lex_error(lx, t->span, "unterminated string");
        decode_string(lx, t, false);
        return;
      }
    */
  }
}

/* Scans one raw token into *t: never TOK_NEWLINE or TOK_UNCLOSED. */
static void scan(Lexer *lx, Token *t) {
  for (;;) {
    const char *marker;
    memset(t, 0, sizeof *t);
    lx->tok = lx->cur;
#define TOK(k) do { t->kind = (k); t->span = tok_span(lx); return; } while (0)
    /*!re2c
      [\x00] {
        if (lx->tok >= lx->lim) {
          lx->cur = lx->lim;
          TOK(TOK_END);
        }
        bad_char(lx, lx->tok, false);
        continue;
      }
      [ \t\r\v\f]+ { continue; }
      "#" [^\n\x00]* { continue; }
      "\n" {
        if (!lx->newline_seen) {
          lx->newline_seen = true;
          lx->newline_span = tok_span(lx);
        }
        lx->line++;
        lx->line_start = lx->cur;
        continue;
      }

      "mesh"   { TOK(TOK_MESH); }
      "const"  { TOK(TOK_CONST); }
      "param"  { TOK(TOK_PARAM); }
      "input"  { TOK(TOK_INPUT); }
      "output" { TOK(TOK_OUTPUT); }
      "fn"     { TOK(TOK_FN); }
      "let"    { TOK(TOK_LET); }
      "return" { TOK(TOK_RETURN); }
      "import" { TOK(TOK_IMPORT); }
      "train"  { TOK(TOK_TRAIN); }
      "with"   { TOK(TOK_WITH); }
      "frozen" { TOK(TOK_FROZEN); }
      "moe"    { TOK(TOK_MOE); }
      "true"   { TOK(TOK_TRUE); }
      "false"  { TOK(TOK_FALSE); }
      "for"    { TOK(TOK_FOR); }
      "remat"  { TOK(TOK_REMAT); }
      "in"     { TOK(TOK_IN); }

      name {
        t->text = arena_strndup(lx->arena, lx->tok, (size_t)(lx->cur - lx->tok));
        TOK(TOK_NAME);
      }
      digits { t->span = tok_span(lx); scan_int(lx, t); return; }
      digits / ".." { t->span = tok_span(lx); scan_int(lx, t); return; }
      float  { t->span = tok_span(lx); scan_float(lx, t); return; }
      ["]    { scan_string(lx, t); return; }

      "<=" { TOK(TOK_LE); }
      ">=" { TOK(TOK_GE); }
      "==" { TOK(TOK_EQ); }
      "!=" { TOK(TOK_NE); }
      ".." { TOK(TOK_DOTDOT); }
      [()[\]{},:;=+\-*/@<>] { TOK(*lx->tok); }

      utf8 { bad_char(lx, lx->tok, true); continue; }
      * { bad_char(lx, lx->tok, false); continue; }
    */
#undef TOK
  }
}

/* Keywords that can only begin a statement, and those of them that can
 * only begin a top-level statement. */
static bool stmt_keyword(int k) { return k == TOK_LET || k == TOK_RETURN || k == TOK_FOR || k == TOK_REMAT; }
static bool toplevel_keyword(int k) {
  return k == TOK_MESH || k == TOK_CONST || k == TOK_PARAM || k == TOK_INPUT || k == TOK_OUTPUT ||
         k == TOK_FN || k == TOK_IMPORT || k == TOK_TRAIN;
}

/* Whether the bracket on top of the stack must be closed before k. */
static bool must_close(const Lexer *lx, int k) {
  if (lx->depth == 0)
    return false;
  if (k == TOK_END)
    return true;
  if (!lx->newline_seen)
    return false;
  const LexBracket *top = &lx->stack[lx->depth - 1];
  if (top->open == '{')
    return !top->loop && toplevel_keyword(k);
  return stmt_keyword(k) || toplevel_keyword(k);
}

static void push_bracket(Lexer *lx, char open, Span sp, bool loop) {
  if (lx->depth == lx->cap) {
    int cap = lx->cap ? 2 * lx->cap : 16;
    LexBracket *s = arena_alloc(lx->arena, (size_t)cap * sizeof *s);
    if (lx->depth)
      memcpy(s, lx->stack, (size_t)lx->depth * sizeof *s);
    lx->stack = s;
    lx->cap = cap;
  }
  lx->stack[lx->depth].open = open;
  lx->stack[lx->depth].span = sp;
  lx->stack[lx->depth].loop = loop;
  lx->depth++;
}

/* A closer pops its opener, and any brackets left open inside it; a closer
 * with no opener on the stack changes nothing (the parser reports it). */
static void pop_bracket(Lexer *lx, char open) {
  for (int i = lx->depth - 1; i >= 0; i--) {
    if (lx->stack[i].open == open) {
      lx->depth = i;
      return;
    }
  }
}

int lex_next(Lexer *lx, Token *t) {
  if (!lx->stopped && over_limit(lx))
    stop(lx, lx->has_pending ? lx->pending.span : tok_span(lx));
  if (lx->stopped) {
    memset(t, 0, sizeof *t);
    lx->tok = lx->cur = lx->lim;
    t->span = tok_span(lx);
    lx->has_pending = false;
    return lx->last = TOK_END;
  }
  if (!lx->has_pending) {
    scan(lx, &lx->pending);
    lx->has_pending = true;
  }
  Token *p = &lx->pending;
  lx->pushed = false;
  if (must_close(lx, p->kind)) {
    memset(t, 0, sizeof *t);
    t->kind = TOK_UNCLOSED;
    t->span = lx->newline_seen ? lx->newline_span : p->span;
    t->at_eof = p->kind == TOK_END;
    t->span.end = t->span.off;
    t->open = lx->stack[--lx->depth].span;
    return lx->last = t->kind;
  }
  if (lx->newline_seen) {
    lx->newline_seen = false;
    bool nested = lx->depth > 0 && lx->stack[lx->depth - 1].open != '{';
    if (!nested && p->kind != TOK_END && lx->last != -1 && lx->last != TOK_NEWLINE) {
      memset(t, 0, sizeof *t);
      t->kind = TOK_NEWLINE;
      t->span = lx->newline_span;
      lx->for_open = false;
      return lx->last = t->kind;
    }
  }
  *t = *p;
  if (t->kind != TOK_END)
    lx->has_pending = false;
  switch (t->kind) {
  case '(': case '[': case '{':
    push_bracket(lx, (char)t->kind, t->span, t->kind == '{' && lx->for_open);
    lx->for_open = lx->for_open && t->kind != '{';
    lx->pushed = true;
    break;
  case TOK_FOR: lx->for_open = true; break;
  case ';': lx->for_open = false; break;
  case ')': pop_bracket(lx, '('); break;
  case ']': pop_bracket(lx, '['); break;
  case '}': pop_bracket(lx, '{'); break;
  default: break;
  }
  return lx->last = t->kind;
}

bool lex_open_bracket(const Lexer *lx, const char *opens, LexBracket *out) {
  for (int i = lx->depth - 1 - (lx->pushed ? 1 : 0); i >= 0; i--) {
    if (strchr(opens, lx->stack[i].open)) {
      *out = lx->stack[i];
      return true;
    }
  }
  return false;
}

const char *lex_token_name(int kind) {
  switch (kind) {
  case TOK_END: return "end of file";
  case TOK_NEWLINE: return "newline";
  case TOK_UNCLOSED: return "unclosed bracket";
  case TOK_NAME: return "name";
  case TOK_INT: return "integer";
  case TOK_FLOAT: return "float";
  case TOK_STRING: return "string";
  case TOK_MESH: return "'mesh'";
  case TOK_CONST: return "'const'";
  case TOK_PARAM: return "'param'";
  case TOK_INPUT: return "'input'";
  case TOK_OUTPUT: return "'output'";
  case TOK_FN: return "'fn'";
  case TOK_LET: return "'let'";
  case TOK_RETURN: return "'return'";
  case TOK_IMPORT: return "'import'";
  case TOK_TRAIN: return "'train'";
  case TOK_WITH: return "'with'";
  case TOK_FROZEN: return "'frozen'";
  case TOK_MOE: return "'moe'";
  case TOK_TRUE: return "'true'";
  case TOK_FALSE: return "'false'";
  case TOK_FOR: return "'for'";
  case TOK_REMAT: return "'remat'";
  case TOK_IN: return "'in'";
  case TOK_DOTDOT: return "'..'";
  case TOK_LE: return "'<='";
  case TOK_GE: return "'>='";
  case TOK_EQ: return "'=='";
  case TOK_NE: return "'!='";
  case '(': return "'('";
  case ')': return "')'";
  case '[': return "'['";
  case ']': return "']'";
  case '{': return "'{'";
  case '}': return "'}'";
  case ',': return "','";
  case ':': return "':'";
  case ';': return "';'";
  case '=': return "'='";
  case '+': return "'+'";
  case '-': return "'-'";
  case '*': return "'*'";
  case '/': return "'/'";
  case '@': return "'@'";
  case '<': return "'<'";
  case '>': return "'>'";
  default: return "unknown token";
  }
}
