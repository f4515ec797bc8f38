/* ast.c — the syntax tree: node construction and the S-expression dump.
 *
 * Nodes and their child arrays live in the parser's arena. ast_dump writes a
 * tree as one line, `(head fields children...)`, for tests and debugging:
 *
 *   (program S...)                     statements in order
 *   (import "nn")
 *   (mesh (axis d E) ...)
 *   (const NAME E)
 *   (param NAME TYPE ANNOT INIT [frozen])  ANNOT, INIT: a call or nil
 *   (input NAME TYPE ANNOT INIT)
 *   (fn NAME (args A...) (body S...))  NAME is nil for a moe body
 *   (arg NAME [TYPE])
 *   (let (a b) E)                      the names bound, then the value
 *   (return E...)
 *   (output a b)
 *   (train LOSS OPT)
 *   (for NAME A B (body S...))         A..B: the range
 *   (type f32 D...)                    D: the dimension expressions
 *   (name x) (int 4) (float 0.02) (string "a\"b") (bool true)
 *   (+ A B) (@ A B) (<= A B) ...       BINARY: the operator's text
 *   (neg A)                            UNARY minus
 *   (call f ARG...) (kwarg gate E)
 *   (index E I...) (list E...) (tuple E...)
 *   (moe ARG... (fn nil (args (arg t) (arg e)) (body S...)))
 *   (error)                            left by error recovery
 *
 * A missing child prints as nil; a float prints with the fewest digits that
 * read back as the same double, always with a '.' or an exponent (1.0,
 * 2e-05); a string re-escapes \" \\ and \n. */
#include <stdlib.h>
#include <string.h>

#include "gslc.h"

const char *ast_kind_name(AstKind k) {
  static const char *const names[] = {
#define X(k, s) s,
#include "ast.def"
#undef X
  };
  if ((unsigned)k >= AST__COUNT)
    die("bad AST kind %d", (int)k);
  return names[k];
}

const char *ast_op_text(int op) {
  static const char *const text[] = {
    [BIN_ADD] = "+", [BIN_SUB] = "-", [BIN_MUL] = "*", [BIN_DIV] = "/", [BIN_MATMUL] = "@",
    [BIN_LT] = "<",  [BIN_LE] = "<=", [BIN_GT] = ">",  [BIN_GE] = ">=", [BIN_EQ] = "==",
    [BIN_NE] = "!=", [UN_NEG] = "-",
  };
  if (op < 0 || op > UN_NEG)
    die("bad operator %d", op);
  return text[op];
}

Node *ast_new(Arena *a, AstKind k, Span sp) {
  Node *n = arena_alloc(a, sizeof *n);
  n->kind = k;
  n->span = sp;
  return n;
}

void ast_push(Arena *a, NodeList *l, Node *n) {
  if (l->len == l->cap) {
    int cap = l->cap ? 2 * l->cap : 4;
    Node **items = arena_alloc(a, (size_t)cap * sizeof *items);
    if (l->len)
      memcpy(items, l->items, (size_t)l->len * sizeof *items);
    l->items = items;
    l->cap = cap;
  }
  l->items[l->len++] = n;
}

static void dump_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if (*s == '\n')
      fputs("\\n", f);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

static void dump_float(FILE *f, double v) {
  char buf[64];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v)
      break;
  }
  if (!strpbrk(buf, ".einfa"))
    strcat(buf, ".0");
  fputs(buf, f);
}

static void dump_list(FILE *f, const NodeList *l) {
  for (int i = 0; i < l->len; i++) {
    fputc(' ', f);
    ast_dump(f, l->items[i]);
  }
}

/* " child", or " nil" for a missing one */
static void dump_child(FILE *f, const Node *n) {
  fputc(' ', f);
  ast_dump(f, n);
}

void ast_dump(FILE *f, const Node *n) {
  if (!n) {
    fputs("nil", f);
    return;
  }
  switch (n->kind) {
  case AST_BINARY:
    fprintf(f, "(%s", ast_op_text(n->op));
    dump_child(f, n->a);
    dump_child(f, n->b);
    fputc(')', f);
    return;
  case AST_UNARY:
    fputs("(neg", f);
    dump_child(f, n->a);
    fputc(')', f);
    return;
  default:
    break;
  }
  fprintf(f, "(%s", ast_kind_name(n->kind));
  switch (n->kind) {
  case AST_PROGRAM:
  case AST_MESH:
  case AST_RETURN:
  case AST_LIST:
  case AST_TUPLE:
    dump_list(f, &n->list);
    break;
  case AST_IMPORT:
  case AST_STRING:
    fputc(' ', f);
    dump_string(f, n->name ? n->name : "");
    break;
  case AST_AXIS:
  case AST_CONST:
  case AST_KWARG:
    fprintf(f, " %s", n->name);
    dump_child(f, n->a);
    break;
  case AST_PARAM:
  case AST_INPUT:
    fprintf(f, " %s", n->name);
    dump_child(f, n->a);
    dump_child(f, n->b);
    dump_child(f, n->c);
    if (n->flag)
      fputs(" frozen", f);
    break;
  case AST_FN:
    fprintf(f, "%s %s (args", n->flag ? " remat" : "", n->name ? n->name : "nil");
    dump_list(f, &n->list);
    fputs(") (body", f);
    dump_list(f, &n->list2);
    fputc(')', f);
    break;
  case AST_ARG:
    fprintf(f, " %s", n->name);
    if (n->a)
      dump_child(f, n->a);
    break;
  case AST_LET:
  case AST_OUTPUT:
    fputs(n->kind == AST_LET ? " (" : "", f);
    for (int i = 0; i < n->list.len; i++) {
      const Node *v = n->list.items[i];
      fprintf(f, i == 0 && n->kind == AST_LET ? "%s" : " %s", v->kind == AST_NAME ? v->name : "?");
    }
    if (n->kind == AST_LET) {
      fputc(')', f);
      dump_child(f, n->a);
    }
    break;
  case AST_TRAIN:
    dump_child(f, n->a);
    dump_child(f, n->b);
    break;
  case AST_FOR:
    fprintf(f, "%s %s", n->flag ? " remat" : "", n->c->name);
    dump_child(f, n->a);
    dump_child(f, n->b);
    fputs(" (body", f);
    dump_list(f, &n->list);
    fputc(')', f);
    break;
  case AST_TYPE:
  case AST_CALL:
    fprintf(f, " %s", n->name);
    dump_list(f, &n->list);
    break;
  case AST_NAME:
    fprintf(f, " %s", n->name);
    break;
  case AST_INT:
    fprintf(f, " %lld", (long long)n->ival);
    break;
  case AST_FLOAT:
    fputc(' ', f);
    dump_float(f, n->fval);
    break;
  case AST_BOOL:
    fputs(n->flag ? " true" : " false", f);
    break;
  case AST_INDEX:
    dump_child(f, n->a);
    dump_list(f, &n->list);
    break;
  case AST_MOE:
    dump_list(f, &n->list);
    dump_child(f, n->a);
    break;
  case AST_ERROR:
  default:
    break;
  }
  fputc(')', f);
}
