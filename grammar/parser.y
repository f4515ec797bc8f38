/* parser.y — the GSL grammar (SPEC sections 2-6), a pure Bison LALR(1)
 * parser that builds the AST of ast.def.
 *
 * Method: the lexer (lexer.re) hands over tokens with their Span as the
 * location; YYLLOC_DEFAULT joins the spans of a rule's first and last
 * symbols, so every node covers its source. Actions only build nodes; all
 * checking is sema's, except the one thing the grammar leaves to an
 * action: a positional argument after a keyword argument.
 *
 * Expressions have one nonterminal per precedence level, lowest first:
 * comparisons (non-associative), + - (left), * / @ (left), unary -,
 * postfix indexing, primaries (names, literals, calls on names, tuples,
 * lists, parentheses, the moe block).
 *
 * Errors: syntax errors are reported by yyreport_syntax_error (parse.error
 * custom, with LAC so the expected tokens are exact), in the C compilers'
 * form, with readable token names and the expected tokens grouped
 * ("expression", "operator"). Recovery happens at three levels: a bad
 * statement is skipped to the next newline or ';' (top level and in
 * bodies); a bad bracketed group, (...) or [...], is skipped to its
 * closer. A closer the lexer found missing arrives as TOK_UNCLOSED, which
 * every closing position accepts, reporting the missing bracket and where
 * it was opened, and the parse goes on as if it had been there. */

%define api.pure full
%define api.token.prefix {TOK_}
%define api.location.type {Span}
%define parse.error custom
%define parse.lac full
%locations
%expect 0
%param {Parser *ps}

%code requires {
#include "gslc.h"
typedef struct Parser Parser;

/* The value of TOK_UNCLOSED. */
typedef struct ParseUnclosed {
  Span open;   /* the bracket left open */
  bool at_eof; /* open at the end of the input, not just at a line's end */
} ParseUnclosed;
}

%code {
#include <stdio.h>
#include <string.h>

#include "lexer.h"

/* Errors in one file after which the parser gives up on it. */
#define PARSE_MAX_ERRORS 50

struct Parser {
  const Source *src; /* the text parsed */
  Arena *arena;      /* where the tree goes */
  Lexer lx;          /* the token source */
  Node *root;        /* the PROGRAM, once parsed */
  bool la_eof;       /* the last token read was a TOK_UNCLOSED at the end of the input */
};

#define YYLLOC_DEFAULT(cur, rhs, n)                                  \
  do {                                                               \
    if (n) {                                                         \
      (cur) = span_join(YYRHSLOC(rhs, 1), YYRHSLOC(rhs, n));         \
    } else {                                                         \
      (cur) = YYRHSLOC(rhs, 0);                                      \
      (cur).col += (cur).end - (cur).off;                            \
      (cur).off = (cur).end;                                         \
    }                                                                \
  } while (0)

static int yylex(YYSTYPE *val, Span *loc, Parser *ps);
static void yyerror(const Span *loc, Parser *ps, const char *msg);

/* Reports a syntax error (counted by the lexer, which gives up after too
 * many), unless the lexer has given up already. */
static void syntax_error(Parser *ps, Span sp, const char *msg) {
  if (ps->lx.stopped)
    return;
  diag_error(ps->lx.diag, sp, "%s", msg);
  ps->lx.parse_errors++;
}

static Node *mk(Parser *ps, AstKind k, Span sp) { return ast_new(ps->arena, k, sp); }

static Node *mk_name(Parser *ps, const char *name, Span sp) {
  Node *n = mk(ps, AST_NAME, sp);
  n->name = name;
  return n;
}

static Node *mk_binary(Parser *ps, int op, Node *a, Node *b, Span sp) {
  Node *n = mk(ps, AST_BINARY, sp);
  n->op = op;
  n->a = a;
  n->b = b;
  return n;
}

static NodeList list_of(Parser *ps, Node *n) {
  NodeList l = {0};
  ast_push(ps->arena, &l, n);
  return l;
}

/* Appends an argument to a call's list; a positional argument after a
 * keyword argument is reported (and kept, so the tree stays whole). */
static void push_arg(Parser *ps, NodeList *l, Node *arg) {
  if (arg->kind != AST_KWARG && l->len > 0 && l->items[l->len - 1]->kind == AST_KWARG)
    syntax_error(ps, arg->span, "positional argument follows keyword argument");
  ast_push(ps->arena, l, arg);
}

/* A closing bracket that the lexer found missing (TOK_UNCLOSED at loc, for
 * the bracket opened at open). */
static void missing_closer(Parser *ps, char closer, Span loc, ParseUnclosed u, bool recovering) {
  if (recovering || ps->lx.stopped)
    return;
  char msg[64];
  snprintf(msg, sizeof msg, "syntax error, missing '%c' at end of %s", closer, u.at_eof ? "file" : "line");
  syntax_error(ps, loc, msg);
  diag_note(ps->lx.diag, u.open, "to match this '%c'", ps->src->text[u.open.off]);
}
}

%union {
  Node *node;     /* a subtree */
  NodeList list;  /* a list of subtrees being gathered */
  const char *str; /* NAME, STRING */
  int64_t ival;   /* INT */
  double fval;    /* FLOAT */
  int op;         /* a BinOp */
  ParseUnclosed unclosed; /* UNCLOSED */
}

%token END 0 "end of file"
%token NEWLINE "newline"
%token <unclosed> UNCLOSED "unclosed bracket"
%token <str> NAME "name"
%token <ival> INT "integer"
%token <fval> FLOAT "float"
%token <str> STRING "string"
%token MESH "'mesh'" CONST "'const'" PARAM "'param'" INPUT "'input'" OUTPUT "'output'"
%token FN "'fn'" LET "'let'" RETURN "'return'" IMPORT "'import'" TRAIN "'train'"
%token WITH "'with'" FROZEN "'frozen'" MOE "'moe'" TRUE "'true'" FALSE "'false'"
%token FOR "'for'" IN "'in'" DOTDOT "'..'" REMAT "'remat'"
%token LE "'<='" GE "'>='" EQ "'=='" NE "'!='"

%type <node> stmt_opt stmt body_stmt_opt body_stmt loop_stmt_opt loop type annot init call fn_param block
%type <node> axis expr sum term unary postfix primary arg
%type <list> stmts body_stmts loop_stmts names exprs items axes axis_list fn_params fn_param_list args arg_list
%type <op> cmp_op
%type <ival> frozen

%%

program:
    stmts {
      ps->root = mk(ps, AST_PROGRAM, (Span){ps->src, 1, 1, 0, (uint32_t)ps->src->len});
      ps->root->list = $1;
    }
;

stmts:
    stmt_opt { $$ = (NodeList){0}; if ($1) ast_push(ps->arena, &$$, $1); }
  | stmts sep stmt_opt { $$ = $1; if ($3) ast_push(ps->arena, &$$, $3); }
;

sep: NEWLINE | ';' ;

stmt_opt:
    %empty { $$ = NULL; }
  | stmt
  | error { $$ = NULL; }
;

stmt:
    IMPORT STRING { $$ = mk(ps, AST_IMPORT, @$); $$->name = $2; }
  | MESH '[' axes rbrack { $$ = mk(ps, AST_MESH, @$); $$->list = $3; }
  | CONST NAME '=' expr { $$ = mk(ps, AST_CONST, @$); $$->name = $2; $$->a = $4; }
  | PARAM NAME ':' type annot init frozen {
      $$ = mk(ps, AST_PARAM, @$);
      $$->name = $2; $$->a = $4; $$->b = $5; $$->c = $6; $$->flag = $7;
    }
  | INPUT NAME ':' type annot init {
      $$ = mk(ps, AST_INPUT, @$);
      $$->name = $2; $$->a = $4; $$->b = $5; $$->c = $6;
    }
  | FN NAME '(' fn_params rparen block {
      $$ = $6;
      $$->span = @$;
      $$->name = $2;
      $$->list = $4;
    }
  | REMAT FN NAME '(' fn_params rparen block {
      $$ = $7;
      $$->span = @$;
      $$->name = $3;
      $$->list = $5;
      $$->flag = true;
    }
  | LET names '=' expr { $$ = mk(ps, AST_LET, @$); $$->list = $2; $$->a = $4; }
  | OUTPUT names { $$ = mk(ps, AST_OUTPUT, @$); $$->list = $2; }
  | TRAIN expr WITH call { $$ = mk(ps, AST_TRAIN, @$); $$->a = $2; $$->b = $4; }
  | loop
  | REMAT loop { $$ = $2; $$->flag = true; }
;

/* for NAME in A..B { ... }: the node's span is the header, from 'for' to B,
 * where the notes of errors in the body point. The body takes any
 * statement (and return), so that sema can say why one cannot stand
 * there. */
loop:
    FOR NAME IN expr DOTDOT expr '{' loop_stmts rbrace {
      $$ = mk(ps, AST_FOR, span_join(@1, @6));
      $$->c = mk_name(ps, $2, @2);
      $$->a = $4;
      $$->b = $6;
      $$->list = $8;
    }
;

loop_stmts:
    loop_stmt_opt { $$ = (NodeList){0}; if ($1) ast_push(ps->arena, &$$, $1); }
  | loop_stmts sep loop_stmt_opt { $$ = $1; if ($3) ast_push(ps->arena, &$$, $3); }
;

loop_stmt_opt:
    %empty { $$ = NULL; }
  | stmt
  | RETURN exprs { $$ = mk(ps, AST_RETURN, @$); $$->list = $2; }
  | error { $$ = NULL; }
;

axes:
    %empty { $$ = (NodeList){0}; }
  | axis_list
  | axis_list ','
;

axis_list:
    axis { $$ = list_of(ps, $1); }
  | axis_list ',' axis { $$ = $1; ast_push(ps->arena, &$$, $3); }
;

axis: NAME '=' expr { $$ = mk(ps, AST_AXIS, @$); $$->name = $1; $$->a = $3; } ;

type:
    NAME { $$ = mk(ps, AST_TYPE, @$); $$->name = $1; }
  | NAME '[' items rbrack { $$ = mk(ps, AST_TYPE, @$); $$->name = $1; $$->list = $3; }
;

annot: %empty { $$ = NULL; } | call ;
init: %empty { $$ = NULL; } | '=' call { $$ = $2; } ;
frozen: %empty { $$ = 0; } | FROZEN { $$ = 1; } ;

names:
    NAME { $$ = list_of(ps, mk_name(ps, $1, @1)); }
  | names ',' NAME { $$ = $1; ast_push(ps->arena, &$$, mk_name(ps, $3, @3)); }
;

fn_params:
    %empty { $$ = (NodeList){0}; }
  | fn_param_list
  | fn_param_list ','
;

fn_param_list:
    fn_param { $$ = list_of(ps, $1); }
  | fn_param_list ',' fn_param { $$ = $1; ast_push(ps->arena, &$$, $3); }
;

fn_param:
    NAME { $$ = mk(ps, AST_ARG, @$); $$->name = $1; }
  | NAME ':' type { $$ = mk(ps, AST_ARG, @$); $$->name = $1; $$->a = $3; }
;

/* A function or moe body: an FN node with only list2 filled in. */
block:
    '{' body_stmts rbrace { $$ = mk(ps, AST_FN, @$); $$->list2 = $2; }
;

body_stmts:
    body_stmt_opt { $$ = (NodeList){0}; if ($1) ast_push(ps->arena, &$$, $1); }
  | body_stmts sep body_stmt_opt { $$ = $1; if ($3) ast_push(ps->arena, &$$, $3); }
;

body_stmt_opt:
    %empty { $$ = NULL; }
  | body_stmt
  | error { $$ = NULL; }
;

body_stmt:
    LET names '=' expr { $$ = mk(ps, AST_LET, @$); $$->list = $2; $$->a = $4; }
  | RETURN exprs { $$ = mk(ps, AST_RETURN, @$); $$->list = $2; }
  | loop
  | REMAT loop { $$ = $2; $$->flag = true; }
;

rparen: ')' | UNCLOSED { missing_closer(ps, ')', @1, $1, YYRECOVERING()); } ;
rbrack: ']' | UNCLOSED { missing_closer(ps, ']', @1, $1, YYRECOVERING()); } ;
rbrace: '}' | UNCLOSED { missing_closer(ps, '}', @1, $1, YYRECOVERING()); } ;

/* ---- expressions ---- */

expr:
    sum
  | sum cmp_op sum { $$ = mk_binary(ps, $2, $1, $3, @$); }
;

cmp_op:
    '<' { $$ = BIN_LT; } | LE { $$ = BIN_LE; } | '>' { $$ = BIN_GT; }
  | GE { $$ = BIN_GE; } | EQ { $$ = BIN_EQ; } | NE { $$ = BIN_NE; }
;

sum:
    term
  | sum '+' term { $$ = mk_binary(ps, BIN_ADD, $1, $3, @$); }
  | sum '-' term { $$ = mk_binary(ps, BIN_SUB, $1, $3, @$); }
;

term:
    unary
  | term '*' unary { $$ = mk_binary(ps, BIN_MUL, $1, $3, @$); }
  | term '/' unary { $$ = mk_binary(ps, BIN_DIV, $1, $3, @$); }
  | term '@' unary { $$ = mk_binary(ps, BIN_MATMUL, $1, $3, @$); }
;

unary:
    postfix
  | '-' unary { $$ = mk(ps, AST_UNARY, @$); $$->op = UN_NEG; $$->a = $2; }
;

postfix:
    primary
  | postfix '[' exprs opt_comma rbrack { $$ = mk(ps, AST_INDEX, @$); $$->a = $1; $$->list = $3; }
  | postfix '[' error rbrack { $$ = mk(ps, AST_INDEX, @$); $$->a = $1; $$->list = list_of(ps, mk(ps, AST_ERROR, @3)); }
;

primary:
    NAME { $$ = mk_name(ps, $1, @$); }
  | INT { $$ = mk(ps, AST_INT, @$); $$->ival = $1; }
  | FLOAT { $$ = mk(ps, AST_FLOAT, @$); $$->fval = $1; }
  | STRING { $$ = mk(ps, AST_STRING, @$); $$->name = $1; }
  | TRUE { $$ = mk(ps, AST_BOOL, @$); $$->flag = true; }
  | FALSE { $$ = mk(ps, AST_BOOL, @$); $$->flag = false; }
  | '(' expr rparen { $$ = $2; }
  | '(' expr ',' exprs opt_comma rparen {
      $$ = mk(ps, AST_TUPLE, @$);
      ast_push(ps->arena, &$$->list, $2);
      for (int i = 0; i < $4.len; i++)
        ast_push(ps->arena, &$$->list, $4.items[i]);
    }
  | '(' error rparen { $$ = mk(ps, AST_ERROR, @$); }
  | '[' items rbrack { $$ = mk(ps, AST_LIST, @$); $$->list = $2; }
  | '[' error rbrack { $$ = mk(ps, AST_ERROR, @$); }
  | call
  | MOE '(' args rparen '(' fn_params rparen block {
      $$ = mk(ps, AST_MOE, @$);
      $$->list = $3;
      $$->a = $8;
      $8->list = $6;
    }
;

call:
    NAME '(' args rparen { $$ = mk(ps, AST_CALL, @$); $$->name = $1; $$->list = $3; }
  | NAME '(' error rparen {
      $$ = mk(ps, AST_CALL, @$);
      $$->name = $1;
      $$->list = list_of(ps, mk(ps, AST_ERROR, @3));
    }
;

args:
    %empty { $$ = (NodeList){0}; }
  | arg_list
  | arg_list ','
;

arg_list:
    arg { $$ = (NodeList){0}; push_arg(ps, &$$, $1); }
  | arg_list ',' arg { $$ = $1; push_arg(ps, &$$, $3); }
;

arg:
    expr
  | NAME '=' expr { $$ = mk(ps, AST_KWARG, @$); $$->name = $1; $$->a = $3; }
;

/* one or more expressions, for return, indices, dims and tuples */
exprs:
    expr { $$ = list_of(ps, $1); }
  | exprs ',' expr { $$ = $1; ast_push(ps->arena, &$$, $3); }
;

/* zero or more, with an optional trailing comma, for lists and dims */
items:
    %empty { $$ = (NodeList){0}; }
  | exprs opt_comma
;

opt_comma: %empty | ',' ;

%%

static int yylex(YYSTYPE *val, Span *loc, Parser *ps) {
  Token t;
  int k = lex_next(&ps->lx, &t);
  *loc = t.span;
  ps->la_eof = k == TOK_UNCLOSED && t.at_eof;
  switch (k) {
  case TOK_NAME:
  case TOK_STRING: val->str = t.text; break;
  case TOK_INT: val->ival = t.ival; break;
  case TOK_FLOAT: val->fval = t.fval; break;
  case TOK_UNCLOSED:
    val->unclosed.open = t.open;
    val->unclosed.at_eof = t.at_eof;
    break;
  default: break;
  }
  return k;
}

/* Called by Bison only when its stacks are exhausted: input nested deeper
 * than YYMAXDEPTH. */
static void yyerror(const Span *loc, Parser *ps, const char *msg) {
  char text[128];
  snprintf(text, sizeof text, "%s: the program is nested too deeply", msg);
  syntax_error(ps, *loc, text);
}

/* What the user sees for a token kind: the lookahead's own name, except
 * that integers and floats are both numbers and UNCLOSED is the end of a
 * line or of the file. */
static const char *shown_name(const Parser *ps, yysymbol_kind_t k) {
  switch (k) {
  case YYSYMBOL_INT:
  case YYSYMBOL_FLOAT: return "number";
  case YYSYMBOL_UNCLOSED: return ps->la_eof ? "end of file" : "end of line";
  default: return yysymbol_name(k);
  }
}

/* The message: "syntax error, unexpected X[, expecting A, B or C]". The
 * expected tokens are grouped: every keyword that can begin a top-level
 * statement is "statement" (which then also stands for the end of an empty
 * one, and for 'return' in a loop's body; 'let' and 'return' in a function
 * body stand for it), every token that can begin an expression is "expression", every
 * arithmetic operator "operator" (which then also
 * stands for comparisons and the postfix '(' and '['); "number" and "end of
 * file" after "newline" are dropped as redundant. More than five
 * alternatives are not listed. */
static int yyreport_syntax_error(const yypcontext_t *ctx, Parser *ps) {
  static const int expr_start[] = {
    TOK_NAME, TOK_INT, TOK_FLOAT, TOK_STRING, TOK_TRUE, TOK_FALSE, TOK_MOE, '(', '[', '-',
  };
  static const int arith[] = {'+', '-', '*', '/', '@'};
  static const int stmt_start[] = {
    TOK_IMPORT, TOK_MESH, TOK_CONST, TOK_PARAM, TOK_INPUT, TOK_FN, TOK_LET, TOK_OUTPUT, TOK_TRAIN, TOK_FOR,
    TOK_REMAT,
  };
  static const int after_operand[] = {'<', TOK_LE, '>', TOK_GE, TOK_EQ, TOK_NE, '(', '['};
  yysymbol_kind_t expected[YYNTOKENS];
  int n = yypcontext_expected_tokens(ctx, expected, YYNTOKENS);
  if (n < 0)
    return n;
  bool set[YYNTOKENS] = {false};
  for (int i = 0; i < n; i++)
    if (expected[i] >= 0)
      set[expected[i]] = true;
  set[YYSYMBOL_UNCLOSED] = false;
  bool closer[3] = {set[YYTRANSLATE(')')], set[YYTRANSLATE(']')], set[YYTRANSLATE('}')]};

  const char *shown[YYNTOKENS + 2];
  int nshown = 0;
  bool all_expr = true, all_arith = true, all_stmt = true;
  for (size_t i = 0; i < sizeof stmt_start / sizeof stmt_start[0]; i++)
    all_stmt = all_stmt && set[YYTRANSLATE(stmt_start[i])];
  if (all_stmt) {
    shown[nshown++] = "statement";
    for (size_t i = 0; i < sizeof stmt_start / sizeof stmt_start[0]; i++)
      set[YYTRANSLATE(stmt_start[i])] = false;
    set[YYTRANSLATE(';')] = set[YYSYMBOL_NEWLINE] = set[YYSYMBOL_YYEOF] = set[YYSYMBOL_RETURN] = false;
  } else if (set[YYSYMBOL_LET] && set[YYSYMBOL_RETURN]) {
    set[YYTRANSLATE(';')] = set[YYSYMBOL_NEWLINE] = false;
  }
  for (size_t i = 0; i < sizeof expr_start / sizeof expr_start[0]; i++)
    all_expr = all_expr && set[YYTRANSLATE(expr_start[i])];
  for (size_t i = 0; i < sizeof arith / sizeof arith[0]; i++)
    all_arith = all_arith && set[YYTRANSLATE(arith[i])];
  if (all_expr) {
    shown[nshown++] = "expression";
    for (size_t i = 0; i < sizeof expr_start / sizeof expr_start[0]; i++)
      set[YYTRANSLATE(expr_start[i])] = false;
  }
  if (all_arith) {
    shown[nshown++] = "operator";
    for (size_t i = 0; i < sizeof arith / sizeof arith[0]; i++)
      set[YYTRANSLATE(arith[i])] = false;
    for (size_t i = 0; i < sizeof after_operand / sizeof after_operand[0]; i++)
      set[YYTRANSLATE(after_operand[i])] = false;
  }
  if (set[YYSYMBOL_NEWLINE])
    set[YYSYMBOL_YYEOF] = false;
  bool number_shown = false;
  for (int k = 0; k < YYNTOKENS; k++) {
    if (!set[k])
      continue;
    if (k == YYSYMBOL_INT || k == YYSYMBOL_FLOAT) {
      if (number_shown)
        continue;
      number_shown = true;
    }
    shown[nshown++] = shown_name(ps, (yysymbol_kind_t)k);
  }

  const Span *loc = yypcontext_location(ctx);
  yysymbol_kind_t la = yypcontext_token(ctx);
  char msg[512];
  int len = snprintf(msg, sizeof msg, "syntax error");
  if (la != YYSYMBOL_YYEMPTY)
    len += snprintf(msg + len, sizeof msg - (size_t)len, ", unexpected %s", shown_name(ps, la));
  if (nshown > 0 && nshown <= 5) {
    len += snprintf(msg + len, sizeof msg - (size_t)len, ", expecting %s", shown[0]);
    for (int i = 1; i < nshown; i++)
      len += snprintf(msg + len, sizeof msg - (size_t)len, "%s%s", i == nshown - 1 ? " or " : ", ", shown[i]);
  }
  if (ps->lx.stopped)
    return 0;
  syntax_error(ps, *loc, msg);

  /* Say which bracket a closer would close when it was opened on another
   * line (on the same line the caret shows it). */
  static const char opens[] = "([{";
  for (int i = 0; i < 3; i++) {
    LexBracket b;
    char one[2] = {opens[i], '\0'};
    if (closer[i] && lex_open_bracket(&ps->lx, one, &b) && b.span.line != loc->line) {
      diag_note(ps->lx.diag, b.span, "to match this '%c'", b.open);
      break;
    }
  }
  return 0;
}

Node *parse_source(const Source *src, Arena *a, Diag *d) {
  Parser ps;
  memset(&ps, 0, sizeof ps);
  ps.src = src;
  ps.arena = a;
  lex_init(&ps.lx, src, a, d);
  ps.lx.max_errors = PARSE_MAX_ERRORS;
  int rc = yyparse(&ps);
  if (rc != 0 || ps.lx.parse_errors > 0 || ps.lx.nerrors > 0)
    return NULL;
  return ps.root;
}
