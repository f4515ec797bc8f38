/* lexer.h — the GSL lexer (grammar/lexer.re), used by the parser and tests.
 *
 * The lexer turns a whole Source into tokens, one per lex_next call. Token
 * kinds are the parser's: TOK_* from parser.h for names, numbers, strings,
 * keywords, two-character operators, TOK_NEWLINE and TOK_UNCLOSED, and the
 * character itself for one-character punctuation ('(', '+', ...). TOK_END
 * (0) ends the input and is returned again on every later call.
 *
 * Newlines end statements, so the lexer decides which ones the parser sees:
 * one TOK_NEWLINE per run of blank lines and comments, none at the start of
 * the file, none before TOK_END, and none while the innermost open bracket
 * is '(' or '[' (inside '{' they count). A missing closing bracket would
 * swallow the rest of the file, so the lexer closes brackets itself where
 * one was obviously forgotten: when a line inside '(' or '[' starts with a
 * statement keyword, and when a line inside '{' starts with a keyword that
 * only begins top-level statements (except in a for loop's body, which may
 * hold any statement: sema says which cannot stand there and why), and at
 * the end of the input. For each
 * bracket closed that way it returns TOK_UNCLOSED (which the grammar takes
 * in place of the closer, reporting the error), then TOK_NEWLINE. The
 * span of TOK_UNCLOSED is empty, at the '\n' that ends the last line with
 * a token (or at the end of the input if that line has no '\n'). */
#ifndef GSL_LEXER_H
#define GSL_LEXER_H

#include "gslc.h"

typedef struct Token {
  int kind;         /* TOK_* from parser.h, or the character of a one-character token */
  Span span;        /* the token's bytes; TOK_NEWLINE: the '\n'; TOK_UNCLOSED: where the closer was due */
  int64_t ival;     /* TOK_INT: value */
  double fval;      /* TOK_FLOAT: value */
  const char *text; /* TOK_NAME: the identifier; TOK_STRING: contents, escapes resolved (arena) */
  Span open;        /* TOK_UNCLOSED: the opening bracket it stands in for */
  bool at_eof;      /* TOK_UNCLOSED: the input ended with the bracket open */
} Token;

typedef struct LexBracket {
  char open; /* '(', '[' or '{' */
  Span span; /* where it was opened */
  bool loop; /* a '{' that opens a for loop's body */
} LexBracket;

typedef struct Lexer {
  const Source *src;      /* the text scanned */
  Arena *arena;           /* names, strings and the bracket stack live here */
  Diag *diag;             /* where its errors (and the parser's) are reported */
  const char *cur;        /* next byte to scan */
  const char *lim;        /* src->text + src->len: the end of the input */
  const char *tok;        /* first byte of the token being scanned */
  const char *line_start; /* first byte of the current line */
  uint32_t line;          /* current line, 1-based */
  LexBracket *stack;      /* open brackets, innermost last */
  int depth;              /* brackets open */
  int cap;                /* entries allocated in stack */
  int last;               /* kind of the last token returned; -1 before the first */
  bool pushed;            /* the last token returned opened a bracket */
  bool for_open;          /* a 'for' was returned and its statement has opened no '{' yet */
  bool newline_seen;      /* a '\n' was skipped since the last token returned */
  Span newline_span;      /* the first such '\n' */
  bool has_pending;       /* pending was scanned but not yet returned */
  Token pending;          /* the next real token, held while NEWLINE/UNCLOSED go first */
  int nerrors;            /* lexical errors reported */
  int parse_errors;       /* syntax errors the parser reported, counted against max_errors */
  int max_errors;         /* give up once nerrors + parse_errors reach this; 0: never */
  bool stopped;           /* gave up: every later token is TOK_END */
} Lexer;

/* Starts scanning src; strings and names are allocated in a, errors
 * reported to d. */
void lex_init(Lexer *lx, const Source *src, Arena *a, Diag *d);
/* Scans the next token into *t and returns its kind. Lexical errors are
 * reported to lx->diag and counted in lx->nerrors; the offending
 * bytes are skipped. Once the errors reach lx->max_errors, the lexer says
 * so in a note, stops reporting, and returns only TOK_END. */
int lex_next(Lexer *lx, Token *t);
/* A readable name for a token kind: "name", "'('", "'let'", "newline". */
const char *lex_token_name(int kind);
/* The innermost still-open bracket whose opening character is in opens,
 * not counting one opened by the last token returned (the parser's
 * lookahead); false if there is none. */
bool lex_open_bracket(const Lexer *lx, const char *opens, LexBracket *out);

#endif
