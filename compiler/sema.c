/* sema.c — semantic analysis: from the AST to the global tensor IR.
 *
 * Method: the program is elaborated, statement by statement, as an abstract
 * interpreter over shapes. Names resolve through a chain of scopes, each a
 * hash table (a call's scope sits on the scope its function was defined in,
 * never on the caller's). `const`s are folded to numbers, with -D
 * overriding them, and an integer fold that overflows is an error. Chains
 * of operators, indexing and unary minus are walked in a loop, not by
 * recursion, so a long expression needs no deep stack. Calls of user
 * functions are inlined (inline.c), for loops are unrolled (loop.c),
 * builtins are one handler per row of builtins.def (builtins.c), einsum
 * and '@' share contract.c. Every result shape is checked against
 * GSL_MAX_ELEMS before it is built. Each error is reported at the
 * construct that caused it, with a note at every call it was inlined
 * through and every loop iteration it was unrolled in (the stack of
 * frames); an expression that failed yields R_NONE, which the enclosing
 * expressions pass along silently, so one mistake gives one message.
 *
 * The same elaborator serves the compiler itself: sema_new/sema_run keep
 * the context alive after the program is elaborated, and sema_call inlines
 * a function of a (stdlib) module on IR values the compiler made. Later
 * passes get what they need of the stdlib as data instead: sema_function
 * compiles a function, specialized to its argument types, to an IR
 * function that ir_inline puts in place; a program that trains gets its
 * optimizer's update so, one per param shape, and its lr schedule
 * (make_updates), for autodiff, which never calls back into sema. */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sema.h"

/* ---- diagnostics ------------------------------------------------------------- */

void sema_error(Sema *s, Span sp, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(s->diag, sp, "%s", msg);
  s->errors++;
  for (int i = s->depth - 1; i >= 0; i--) {
    const Frame *f = &s->stack[i];
    if (f->kind == FRAME_CALL)
      diag_note(s->diag, f->at, "in the call to '%s' here", f->name);
    else
      diag_note(s->diag, f->at, "in iteration %s = %" PRId64 " of the loop here", f->name, f->iter);
  }
}

/* The source text of a span, shortened, for messages that name an expression. */
const char *sema_span_text(Sema *s, Span sp) {
  if (!sp.src || sp.end <= sp.off || sp.end > sp.src->len)
    return "expression";
  size_t n = sp.end - sp.off;
  if (n > 40)
    return arena_printf(s->b.p->arena, "%.37s...", sp.src->text + sp.off);
  return arena_strndup(s->b.p->arena, sp.src->text + sp.off, n);
}

static const char *type_str(Sema *s, DType dt, const Shape *sh) {
  return arena_printf(s->b.p->arena, "%s%s", dtype_name(dt), sh->rank ? shape_str(s->b.p->arena, sh) : "");
}

const char *sema_vtype(Sema *s, const Value *v) { return type_str(s, v->dtype, &v->shape); }

bool sema_shape_fits(const Shape *sh) {
  int64_t n = 1;
  for (int i = 0; i < sh->rank; i++) {
    if (sh->d[i] > GSL_MAX_ELEMS / n)
      return false;
    n *= sh->d[i];
  }
  return true;
}

bool sema_check_shape(Sema *s, const Shape *sh, DType dt, const char *what, Span sp) {
  if (sema_shape_fits(sh))
    return true;
  sema_error(s, sp, "%s: the result %s has more than 2^40 elements", what, type_str(s, dt, sh));
  return false;
}

/* ---- scopes ------------------------------------------------------------------ */

static uint32_t hash_name(const char *name) { /* FNV-1a */
  uint32_t h = 2166136261u;
  for (const unsigned char *c = (const unsigned char *)name; *c; c++)
    h = (h ^ *c) * 16777619u;
  return h;
}

Binding *sema_lookup_local(Scope *sc, const char *name) {
  if (!sc->table)
    return NULL;
  for (Binding *b = sc->table[hash_name(name) & sc->mask]; b; b = b->hnext)
    if (strcmp(b->name, name) == 0)
      return b;
  return NULL;
}

Binding *sema_lookup(Scope *sc, const char *name) {
  for (; sc; sc = sc->parent) {
    Binding *b = sema_lookup_local(sc, name);
    if (b)
      return b;
  }
  return NULL;
}

/* doubles the buckets (the first time: makes 8), rehashing every binding */
static void grow(Sema *s, Scope *sc) {
  uint32_t n = sc->table ? (sc->mask + 1) * 2 : 8;
  Binding **t = arena_alloc(s->b.p->arena, sizeof *t * n);
  for (Binding *b = sc->head; b; b = b->next) {
    uint32_t h = hash_name(b->name) & (n - 1);
    b->hnext = t[h];
    t[h] = b;
  }
  sc->table = t;
  sc->mask = n - 1;
}

Binding *sema_bind(Sema *s, Scope *sc, const char *name, BindKind k, Span sp) {
  Binding *old = sema_lookup_local(sc, name);
  if (old) {
    sema_error(s, sp, "redefinition of '%s'", name);
    if (old->span.src)
      diag_note(s->diag, old->span, "'%s' was defined here", name);
    return NULL;
  }
  if (k == BK_FN && sema_builtin_lookup(name) >= 0) {
    sema_error(s, sp, "'%s' is a builtin function and cannot be redefined", name);
    return NULL;
  }
  if (sc->count == SEMA_MAX_NAMES) {
    sema_error(s, sp, "more than %d names in one scope", SEMA_MAX_NAMES);
    return NULL;
  }
  if (!sc->table || sc->count > sc->mask)
    grow(s, sc);
  Binding *b = arena_alloc(s->b.p->arena, sizeof *b);
  b->name = name;
  b->kind = k;
  b->span = sp;
  b->next = sc->head;
  sc->head = b;
  uint32_t h = hash_name(name) & sc->mask;
  b->hnext = sc->table[h];
  sc->table[h] = b;
  sc->count++;
  return b;
}

/* ---- suggestions for misspelt names ------------------------------------------ */

static int edit_distance(const char *a, const char *b) {
  size_t n = strlen(a), m = strlen(b);
  if (n > 31 || m > 31)
    return 99;
  int d[32][32];
  for (size_t i = 0; i <= n; i++)
    d[i][0] = (int)i;
  for (size_t j = 0; j <= m; j++)
    d[0][j] = (int)j;
  for (size_t i = 1; i <= n; i++)
    for (size_t j = 1; j <= m; j++) {
      int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < best)
        best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best)
        best = d[i][j - 1] + 1;
      d[i][j] = best;
    }
  return d[n][m];
}

/* The closest name in scope (functions if want_fn, else values), or NULL. */
static const char *suggest(Scope *sc, const char *name, bool want_fn) {
  const char *best = NULL;
  if (strlen(name) < 3) /* a one- or two-letter name is close to everything */
    return NULL;
  int bestd = (int)strlen(name) / 3 + 1;
  if (bestd > 2)
    bestd = 2;
  for (; sc; sc = sc->parent)
    for (Binding *b = sc->head; b; b = b->next) {
      if ((b->kind == BK_FN) != want_fn || b->kind == BK_POISON)
        continue;
      int d = edit_distance(name, b->name);
      if (d <= bestd && (!best || d < bestd)) {
        best = b->name;
        bestd = d;
      }
    }
  if (want_fn)
    for (int i = 0; i < BI__COUNT; i++) {
      int d = edit_distance(name, sema_builtins[i].name);
      if (d <= bestd && (!best || d < bestd)) {
        best = sema_builtins[i].name;
        bestd = d;
      }
    }
  return best;
}

/* ---- evaluation ------------------------------------------------------------------ */

Value *sema_value_of(Sema *s, R r, Span sp) {
  switch (r.k) {
  case R_VALUE:
    return r.v;
  case R_INT:
  case R_FLOAT:
    return ir_const(&s->b, DT_F32, num(r), sp);
  case R_TUPLE:
    sema_error(s, sp, "expected one value, but this gives %d", r.n);
    return NULL;
  default:
    return NULL;
  }
}

/* Evaluates n and insists on a tensor (a number becomes an f32 scalar). */
Value *sema_eval_value(Sema *s, Scope *sc, const Node *n) { return sema_value_of(s, sema_eval(s, sc, n), n->span); }

/* Evaluates n and insists on a compile-time integer. ok is cleared on error. */
/* A boolean literal where a number is expected is an error (true is not
 * 1 there); true after reporting it. */
static bool bool_for_number(Sema *s, const Node *n, const char *what, bool *ok) {
  if (n->kind != AST_BOOL)
    return false;
  sema_error(s, n->span, "%s must be a number, not the boolean %s", what, n->flag ? "true" : "false");
  *ok = false;
  return true;
}

int64_t sema_eval_int(Sema *s, Scope *sc, const Node *n, const char *what, bool *ok) {
  if (bool_for_number(s, n, what, ok))
    return 0;
  R r = sema_eval(s, sc, n);
  if (r.k == R_INT)
    return r.i;
  if (r.k == R_FLOAT && r.f == floor(r.f) && fabs(r.f) < 9e15)
    return (int64_t)r.f;
  if (r.k != R_NONE)
    sema_error(s, n->span, "%s must be a compile-time integer", what);
  *ok = false;
  return 0;
}

double sema_eval_number(Sema *s, Scope *sc, const Node *n, const char *what, bool *ok) {
  if (bool_for_number(s, n, what, ok))
    return 0;
  R r = sema_eval(s, sc, n);
  if (is_num(r))
    return num(r);
  if (r.k != R_NONE)
    sema_error(s, n->span, "%s must be a compile-time number", what);
  *ok = false;
  return 0;
}

/* ---- binary operators --------------------------------------------------------------- */

static int binop_fn(int op) {
  switch (op) {
  case BIN_ADD: return BF_ADD;
  case BIN_SUB: return BF_SUB;
  case BIN_MUL: return BF_MUL;
  case BIN_DIV: return BF_DIV;
  case BIN_LT: return BF_LT;
  case BIN_LE: return BF_LE;
  case BIN_GT: return BF_GT;
  case BIN_GE: return BF_GE;
  case BIN_EQ: return BF_EQ;
  case BIN_NE: return BF_NE;
  default: return -1;
  }
}


static R overflow(Sema *s, Span sp, const char *text) {
  sema_error(s, sp, "integer overflow in a constant expression: %s is outside the 64-bit integer range", text);
  return none;
}

static R fold(Sema *s, int op, R a, R b, Span sp) {
  bool ints = a.k == R_INT && b.k == R_INT;
  double x = num(a), y = num(b);
  int64_t r;
  switch (op) {
  case BIN_ADD:
  case BIN_SUB:
  case BIN_MUL:
    if (!ints)
      return rfloat(ir_fold_binary(binop_fn(op), x, y));
    if (!ir_fold_binary_int(binop_fn(op), a.i, b.i, &r))
      return overflow(s, sp, arena_printf(s->b.p->arena, "%" PRId64 " %s %" PRId64, a.i, ast_op_text(op), b.i));
    return rint_(r);
  case BIN_DIV:
    if (y == 0) {
      sema_error(s, sp, "division by zero in a constant expression");
      return none;
    }
    if (ints && b.i == -1 && a.i == INT64_MIN)
      return overflow(s, sp, arena_printf(s->b.p->arena, "%" PRId64 " / -1", a.i));
    if (ints && (b.i == -1 || a.i % b.i == 0))
      return rint_(a.i / b.i);
    return rfloat(x / y);
  case BIN_LT: return rfloat(x < y);
  case BIN_LE: return rfloat(x <= y);
  case BIN_GT: return rfloat(x > y);
  case BIN_GE: return rfloat(x >= y);
  case BIN_EQ: return rfloat(x == y);
  case BIN_NE: return rfloat(x != y);
  case BIN_MATMUL:
    sema_error(s, sp, "'@' needs two tensors of rank 2 or more, not numbers");
    return none;
  default:
    die("unknown operator %d", op);
  }
}

/* JAX's promotion: a number takes the other operand's dtype (a float
 * literal beside an i32 tensor makes the operation f32, beside a bf16 one
 * bf16); two tensors meet at sema_promote_types. */
void sema_promote(Sema *s, R *a, R *b, Span sp, Value **va, Value **vb) {
  if (a->k == R_VALUE && b->k == R_VALUE) {
    *va = a->v;
    *vb = b->v;
  } else if (a->k == R_VALUE) {
    DType dt = a->v->dtype == DT_I32 ? (b->k == R_INT ? DT_I32 : DT_F32) : a->v->dtype;
    *va = ir_cast(&s->b, a->v, dt, sp);
    *vb = ir_const(&s->b, dt, num(*b), sp);
  } else {
    DType dt = b->v->dtype == DT_I32 ? (a->k == R_INT ? DT_I32 : DT_F32) : b->v->dtype;
    *va = ir_const(&s->b, dt, num(*a), sp);
    *vb = ir_cast(&s->b, b->v, dt, sp);
  }
  DType dt = sema_promote_types((*va)->dtype, (*vb)->dtype);
  *va = ir_cast(&s->b, *va, dt, sp);
  *vb = ir_cast(&s->b, *vb, dt, sp);
}

Value *sema_elementwise2(Sema *s, int fn, Value *a, Value *b, Span sp) {
  Shape out;
  int bad = 0;
  if (!shape_broadcast(&a->shape, &b->shape, &out, &bad)) {
    sema_error(s, sp, "shapes %s and %s do not broadcast", sema_vtype(s, a), sema_vtype(s, b));
    return NULL;
  }
  if (!sema_shape_fits(&out)) {
    sema_error(s, sp, "broadcasting %s and %s: the result %s has more than 2^40 elements", sema_vtype(s, a),
               sema_vtype(s, b), type_str(s, a->dtype, &out));
    return NULL;
  }
  Value *v = ir_binary(&s->b, fn, a, b, sp);
  if (binary_is_compare(fn) && v->dtype != DT_F32) /* 1.0 or 0.0, f32 whatever the operands */
    v = ir_cast(&s->b, v, DT_F32, sp);
  return v;
}

static R binary(Sema *s, int op, R a, R b, Span sp) {
  if (a.k == R_NONE || b.k == R_NONE)
    return none;
  if (a.k == R_TUPLE || b.k == R_TUPLE) {
    sema_error(s, sp, "operator '%s' applied to several values (a function returning more than one?)",
         ast_op_text(op));
    return none;
  }
  if (is_num(a) && is_num(b))
    return fold(s, op, a, b, sp);
  /* x + 0, 0 + x and x - 0 with a compile-time 0 are x (in the dtype the
   * sum would have), as XLA's simplifier has them: a sum that a loop
   * starts at 0 is the sum of its terms written out */
  bool zero_a = is_num(a) && num(a) == 0, zero_b = is_num(b) && num(b) == 0;
  if ((op == BIN_ADD && (zero_a || zero_b)) || (op == BIN_SUB && zero_b)) {
    R x = zero_a ? b : a, zero = zero_a ? a : b;
    DType dt = x.v->dtype == DT_I32 && zero.k != R_INT ? DT_F32 : x.v->dtype;
    return rval(ir_cast(&s->b, x.v, dt, sp));
  }
  Value *va, *vb;
  if (op == BIN_MATMUL) {
    if (!(a.k == R_VALUE && b.k == R_VALUE)) {
      sema_error(s, sp, "'@' needs two tensors of rank 2 or more");
      return none;
    }
    return rval(sema_matmul(s, a.v, b.v, sp));
  }
  sema_promote(s, &a, &b, sp, &va, &vb);
  return rval(sema_elementwise2(s, binop_fn(op), va, vb, sp));
}

/* ---- expressions -------------------------------------------------------------------- */

/* x[i, j, ...]: each index drops x's first dimension */
static R apply_index(Sema *s, Scope *sc, const Node *n, Value *x) {
  if (!x)
    return none;
  for (int k = 0; k < n->list.len; k++) {
    const Node *ix = n->list.items[k];
    if (x->shape.rank == 0) {
      sema_error(s, ix->span, "cannot index a scalar");
      return none;
    }
    R r = sema_eval(s, sc, ix);
    if (r.k == R_NONE)
      return none;
    Shape rest = {0};
    for (int i = 1; i < x->shape.rank; i++)
      rest.d[rest.rank++] = x->shape.d[i];
    if (r.k == R_INT || (r.k == R_FLOAT && r.f == floor(r.f))) {
      int64_t i = r.k == R_INT ? r.i : (int64_t)r.f;
      int64_t n0 = x->shape.d[0];
      if (i < -n0 || i >= n0) {
        sema_error(s, ix->span, "index %" PRId64 " is out of range for dimension 0 of %s", i, sema_vtype(s, x));
        return none;
      }
      if (i < 0)
        i += n0;
      x = ir_reshape(&s->b, ir_slice(&s->b, x, 0, i, 1, n->span), rest, n->span);
    } else if (r.k == R_VALUE && r.v->dtype == DT_I32 && r.v->shape.rank == 0) {
      if (r.v == s->moe_member && x->shape.d[0] != s->moe_experts) {
        sema_error(s, ix->span, "in a moe body, [e] selects an expert's slice of a tensor whose dimension 0 is the "
                   "experts (E = %" PRId64 "); %s has %" PRId64, s->moe_experts, sema_vtype(s, x), x->shape.d[0]);
        return none;
      }
      x = ir_gather(&s->b, x, r.v, n->span);
    } else {
      sema_error(s, ix->span, "an index must be an integer or an i32 scalar");
      return none;
    }
  }
  return rval(x);
}

static R negate(Sema *s, const Node *n, R a) {
  if (a.k == R_INT) {
    if (a.i == INT64_MIN)
      return overflow(s, n->span, arena_printf(s->b.p->arena, "-(%" PRId64 ")", a.i));
    return rint_(-a.i);
  }
  if (a.k == R_FLOAT)
    return rfloat(-a.f);
  if (a.k == R_VALUE)
    return rval(ir_unary(&s->b, UF_NEG, a.v, n->span));
  if (a.k == R_TUPLE)
    sema_error(s, n->span, "unary '-' applied to several values");
  return none;
}

/* n applied to the value r of its first operand (n->a) */
static R apply(Sema *s, Scope *sc, const Node *n, R r) {
  switch (n->kind) {
  case AST_BINARY: {
    R b = sema_eval(s, sc, n->b);
    return binary(s, n->op, r, b, n->span);
  }
  case AST_UNARY:
    return negate(s, n, r);
  case AST_INDEX:
    return apply_index(s, sc, n, sema_value_of(s, r, n->a->span));
  default:
    die("apply: %s is not an operator", ast_kind_name(n->kind));
  }
}

/* a node that applies an operator to its first operand n->a */
static bool is_chain(const Node *n) { return n->kind == AST_BINARY || n->kind == AST_UNARY || n->kind == AST_INDEX; }

/* A name, a literal, a call: everything but the operators. */
static R eval_leaf(Sema *s, Scope *sc, const Node *n) {
  switch (n->kind) {
  case AST_INT:
    return rint_(n->ival);
  case AST_FLOAT:
    return rfloat(n->fval);
  case AST_BOOL:
    return rint_(n->flag);
  case AST_STRING:
    sema_error(s, n->span, "a string may only stand as einsum's spec");
    return none;
  case AST_NAME: {
    Binding *b = sema_lookup(sc, n->name);
    if (!b) {
      if (strcmp(n->name, "_") == 0)
        sema_error(s, n->span, "'_' may only stand in a shard() list");
      else if (sema_explain_ended(s, sc, n->name, n->span))
        ;
      else if (sema_builtin_lookup(n->name) >= 0)
        sema_error(s, n->span, "'%s' is a builtin function: call it", n->name);
      else if (suggest(sc, n->name, false))
        sema_error(s, n->span, "unknown name '%s'; did you mean '%s'?", n->name, suggest(sc, n->name, false));
      else
        sema_error(s, n->span, "unknown name '%s'", n->name);
      return none;
    }
    switch (b->kind) {
    case BK_INT:
    case BK_SHAPEVAR:
      return rint_(b->i);
    case BK_FLOAT:
      return rfloat(b->f);
    case BK_VALUE:
      return rval(b->v);
    case BK_FN:
      sema_error(s, n->span, "'%s' is a function: call it", n->name);
      return none;
    case BK_POISON:
      return none;
    }
    return none;
  }
  case AST_CALL: {
    Binding *b = sema_lookup(sc, n->name);
    if (b && b->kind == BK_FN)
      return sema_call_fn(s, sc, b, n);
    int id = sema_builtin_lookup(n->name);
    if (id >= 0)
      return sema_call_builtin(s, sc, id, n);
    if (b)
      sema_error(s, n->span, "'%s' is not a function", n->name);
    else if (suggest(sc, n->name, true))
      sema_error(s, n->span, "unknown function '%s'; did you mean '%s'?", n->name, suggest(sc, n->name, true));
    else
      sema_error(s, n->span, "unknown function '%s'", n->name);
    return none;
  }
  case AST_LIST:
  case AST_TUPLE:
    sema_error(s, n->span, "a %s may only stand as an argument of reshape, transpose, concat or shard",
         n->kind == AST_LIST ? "list" : "tuple");
    return none;
  case AST_MOE:
    return sema_moe(s, sc, n);
  case AST_KWARG:
    sema_error(s, n->span, "keyword argument outside a call");
    return none;
  case AST_ERROR:
    return none;
  default:
    sema_error(s, n->span, "a %s is not an expression", ast_kind_name(n->kind));
    return none;
  }
}


/* An operator chain (a + b - c, -x[0][1], ...) is walked down its first
 * operands into a list and applied from the innermost out, in a loop: a
 * chain of thousands of terms needs no deeper stack than one of two. */
R sema_eval(Sema *s, Scope *sc, const Node *n) {
  s->evals++;
  if (!is_chain(n))
    return eval_leaf(s, sc, n);
  const Node *small[8], **chain = small;
  int len = 0, cap = 8;
  for (const Node *m = n; is_chain(m); m = m->a) {
    if (len == cap) {
      cap *= 2;
      chain = chain == small ? memcpy(xmalloc(sizeof *chain * (size_t)cap), small, sizeof small)
                             : xrealloc(chain, sizeof *chain * (size_t)cap);
    }
    chain[len++] = m;
  }
  s->evals += len;
  R r = eval_leaf(s, sc, chain[len - 1]->a);
  for (int i = len - 1; i >= 0; i--)
    r = apply(s, sc, chain[i], r);
  if (chain != small)
    free(chain);
  return r;
}

/* ---- statements ------------------------------------------------------------------- */

static void poison(Sema *s, Scope *sc, const Node *st) {
  for (int i = 0; i < st->list.len; i++) {
    const char *name = st->list.items[i]->name;
    Binding *b = sema_rebinds(sc, name);
    if (b)
      b->kind = BK_POISON;
    else if (!sema_lookup_local(sc, name) && (b = sema_bind(s, sc, name, BK_POISON, st->list.items[i]->span)))
      b->rebindable = true;
  }
}

bool sema_exec_let(Sema *s, Scope *sc, const Node *st) {
  R r = sema_eval(s, sc, st->a);
  if (r.k == R_NONE) {
    poison(s, sc, st);
    return false;
  }
  int want = st->list.len;
  int have = r.k == R_TUPLE ? r.n : 1;
  if (want != have) {
    sema_error(s, st->span, "let binds %d name%s but the expression gives %d value%s", want, want == 1 ? "" : "s",
         have, have == 1 ? "" : "s");
    poison(s, sc, st);
    return false;
  }
  for (int i = 0; i < want; i++) {
    const Node *nm = st->list.items[i];
    if (strcmp(nm->name, "_") == 0)
      continue;
    R one = r.k == R_TUPLE ? rval(r.vs[i]) : r;
    BindKind k = one.k == R_INT ? BK_INT : one.k == R_FLOAT ? BK_FLOAT : BK_VALUE;
    Binding *b = sema_bind_let(s, sc, nm, k);
    if (!b)
      return false;
    if (one.k == R_INT) {
      b->i = one.i;
    } else if (one.k == R_FLOAT) {
      b->f = one.f;
    } else {
      b->v = one.v;
      if (!one.v->name && one.v->op != OP_PARAM && one.v->op != OP_INPUT)
        one.v->name = nm->name;
    }
  }
  return true;
}

static const Define *find_define(Sema *s, const char *name, int *index) {
  for (int i = s->opt ? s->opt->ndefines - 1 : -1; i >= 0; i--)
    if (strcmp(s->opt->defines[i].name, name) == 0) {
      *index = i;
      return &s->opt->defines[i];
    }
  return NULL;
}

/* -D overrides the consts of the user's program and of what it imports */
static void exec_const(Sema *s, Scope *sc, const Node *st) {
  int di;
  const Define *d = sc == &s->global ? find_define(s, st->name, &di) : NULL;
  R r;
  if (d) {
    s->define_used[di] = true;
    char *end;
    errno = 0;
    long long iv = strtoll(d->value, &end, 10);
    if (*d->value && !*end && !errno) {
      r = rint_(iv);
    } else {
      errno = 0;
      double fv = strtod(d->value, &end);
      if (!*d->value || *end || errno) {
        sema_error(s, st->span, "-D %s=%s: the value is not a number", d->name, d->value);
        return;
      }
      r = rfloat(fv);
    }
  } else {
    r = sema_eval(s, sc, st->a);
    if (r.k == R_NONE)
      return;
    if (!is_num(r)) {
      sema_error(s, st->a->span, "const %s must be a compile-time number", st->name);
      return;
    }
  }
  Binding *b = sema_bind(s, sc, st->name, r.k == R_INT ? BK_INT : BK_FLOAT, st->span);
  if (b && r.k == R_INT)
    b->i = r.i;
  else if (b)
    b->f = r.f;
  if (b && sc == &s->global) { /* recorded for the manifest (gslrt_program_info's build) */
    Program *p = s->b.p;
    p->consts = xrealloc(p->consts, sizeof *p->consts * (size_t)(p->nconsts + 1));
    p->consts[p->nconsts++] = (ConstDef){st->name, r.k == R_INT, false, r.k == R_INT ? r.i : 0, r.k == R_INT ? 0 : r.f};
  }
}

static void exec_mesh(Sema *s, const Node *st) {
  if (s->have_mesh) {
    sema_error(s, st->span, "a program has at most one mesh");
    return;
  }
  if (s->have_tensor) {
    sema_error(s, st->span, "the mesh must be declared before any param or input");
    return;
  }
  s->have_mesh = true;
  Mesh *m = &s->b.p->mesh;
  m->span = st->span;
  if (st->list.len > GSL_MAX_AXES) {
    sema_error(s, st->span, "a mesh has at most %d axes", GSL_MAX_AXES);
    return;
  }
  int64_t total = 1;
  for (int i = 0; i < st->list.len; i++) {
    const Node *ax = st->list.items[i];
    bool ok = true;
    int64_t n = sema_eval_int(s, &s->global, ax->a, "a mesh axis size", &ok);
    for (int c = s->b.p->nconsts - 1; ok && ax->a->kind == AST_NAME && c >= 0; c--)
      if (!strcmp(s->b.p->consts[c].name, ax->a->name)) { /* a resume on another mesh changes it: no news */
        s->b.p->consts[c].mesh = true;
        break;
      }
    if (!ok)
      continue;
    if (n < 1 || n > (1 << 20)) {
      sema_error(s, ax->a->span, "mesh axis '%s' has size %" PRId64 "; sizes run from 1 to %d", ax->name, n, 1 << 20);
      continue;
    }
    if (sema_axis_index(s, ax->name) >= 0) {
      sema_error(s, ax->span, "mesh axis '%s' is declared twice", ax->name);
      continue;
    }
    if (strcmp(ax->name, "_") == 0) {
      sema_error(s, ax->span, "'_' cannot name a mesh axis");
      continue;
    }
    total *= n;
    if (total > (1 << 24)) {
      sema_error(s, st->span, "the mesh has more than %d devices", 1 << 24);
      return;
    }
    m->name[m->naxes] = ax->name;
    m->size[m->naxes++] = n;
  }
}

bool sema_dtype_name(const char *name, DType *dt) {
  if (strcmp(name, "f32") == 0)
    *dt = DT_F32;
  else if (strcmp(name, "i32") == 0)
    *dt = DT_I32;
  else if (strcmp(name, "bf16") == 0)
    *dt = DT_BF16;
  else
    return false;
  return true;
}

DType sema_promote_types(DType a, DType b) {
  if (a == b)
    return a;
  if (a == DT_F32 || b == DT_F32)
    return DT_F32; /* f32 with bf16 or i32 */
  return DT_BF16;  /* bf16 with i32 */
}

static bool read_type(Sema *s, const Node *t, DType *dt, Shape *sh) {
  if (!sema_dtype_name(t->name, dt)) {
    sema_error(s, t->span, "unknown type '%s' (expected f32, bf16 or i32)", t->name);
    return false;
  }
  if (t->list.len > GSL_MAX_RANK) {
    sema_error(s, t->span, "a tensor has at most %d dimensions", GSL_MAX_RANK);
    return false;
  }
  sh->rank = 0;
  int64_t total = 1;
  for (int i = 0; i < t->list.len; i++) {
    bool ok = true;
    int64_t d = sema_eval_int(s, &s->global, t->list.items[i], "a dimension", &ok);
    if (!ok)
      return false;
    if (d < 1) {
      sema_error(s, t->list.items[i]->span, "dimension %d is %" PRId64 "; dimensions must be positive", i, d);
      return false;
    }
    if (d > GSL_MAX_ELEMS / total) {
      sema_error(s, t->span, "the tensor has more than 2^40 elements");
      return false;
    }
    total *= d;
    sh->d[sh->rank++] = d;
  }
  return true;
}

static void exec_tensor_checked(Sema *s, const Node *st);

/* A declaration that failed still binds its name, silently, so that later
 * uses add no messages of their own. */
static void exec_decl(Sema *s, Scope *sc, const Node *st) {
  if (st->kind == AST_CONST)
    exec_const(s, sc, st);
  else
    exec_tensor_checked(s, st);
  if (!sema_lookup_local(sc, st->name))
    sema_bind(s, sc, st->name, BK_POISON, st->span);
}

static void exec_tensor_checked(Sema *s, const Node *st) {
  s->have_tensor = true;
  DType dt;
  Shape sh;
  if (!read_type(s, st->a, &dt, &sh))
    return;
  Tensor t = {0};
  t.name = st->name;
  t.kind = st->kind == AST_PARAM ? TK_PARAM : TK_INPUT;
  t.dtype = dt;
  t.shape = sh;
  t.span = st->span;
  t.frozen = st->flag;
  t.init = t.kind == TK_PARAM ? INIT_ZEROS : INIT_NONE;
  const char *what = arena_printf(s->b.p->arena, "%s '%s'", t.kind == TK_PARAM ? "param" : "input", t.name);
  if (st->b) { /* the sharding annotation, without its tensor argument */
    const Node *an = st->b;
    int id = an->kind == AST_CALL ? sema_builtin_lookup(an->name) : -1;
    Args a;
    if (id != BI_REPLICATE && id != BI_SPLIT && id != BI_SHARD) {
      sema_error(s, an->span, "expected a sharding annotation: replicate(), split(dim), split(dim, axis) or shard([...])");
      return;
    }
    if (!sema_split_args(s, an, &a))
      return;
    int lo = id == BI_REPLICATE ? 0 : 1, hi = id == BI_SPLIT ? 2 : lo;
    if (a.npos < lo || a.npos > hi || a.nkw) {
      sema_error(s, an->span, "on a declaration, %s takes %s", an->name,
           id == BI_REPLICATE ? "no arguments: replicate()"
           : id == BI_SPLIT   ? "a dimension and optionally an axis: split(0) or split(0, d)"
                              : "one list: shard([a, _])");
      return;
    }
    if (!sema_annotation_sharding(s, &s->global, id, &a, 0, &sh, &t.sh) || !sema_check_sharding(s, &t.sh, &sh, what, an->span))
      return;
    t.annotated = true;
  }
  if (st->c) {
    const Node *in = st->c;
    int id = in->kind == AST_CALL ? sema_builtin_lookup(in->name) : -1;
    Args a;
    if (id != BI_ZEROS && id != BI_ONES && id != BI_NORMAL && id != BI_UNIFORM) {
      sema_error(s, in->span, "expected an initializer: zeros(), ones(), normal(std) or uniform(lo, hi)");
      return;
    }
    if (!sema_split_args(s, in, &a) || !sema_check_builtin_args(s, id, &a))
      return;
    bool ok = true;
    if (id == BI_NORMAL) {
      t.init = INIT_NORMAL;
      t.a = sema_eval_number(s, &s->global, a.pos[0], "normal's std", &ok);
      if (ok && !(t.a >= 0)) {
        sema_error(s, a.pos[0]->span, "normal's std must not be negative");
        ok = false;
      }
    } else if (id == BI_UNIFORM) {
      t.init = INIT_UNIFORM;
      t.a = sema_eval_number(s, &s->global, a.pos[0], "uniform's low end", &ok);
      t.b = sema_eval_number(s, &s->global, a.pos[1], "uniform's high end", &ok);
      if (ok && !(t.a < t.b)) {
        sema_error(s, in->span, "uniform(lo, hi) needs lo < hi");
        ok = false;
      }
    } else {
      t.init = id == BI_ZEROS ? INIT_ZEROS : INIT_ONES;
    }
    if (!ok)
      return;
    if (dt == DT_I32 && t.init == INIT_NORMAL) { /* uniform(0, V) on i32 gives ids 0..V-1 */
      sema_error(s, in->span, "normal() draws floats; %s is i32 (uniform(lo, hi) draws integers lo..hi-1)", what);
      return;
    }
    if (dt == DT_I32 && t.init == INIT_UNIFORM && (t.a < INT32_MIN || t.b > (double)INT32_MAX + 1)) {
      sema_error(s, in->span, "uniform(lo, hi) on i32 %s draws integers lo..hi-1, which must lie in the i32 range "
                 "-2147483648..2147483647", what);
      return;
    }
    if (t.init == INIT_NORMAL || t.init == INIT_UNIFORM)
      t.stream = s->b.p->nstreams++;
  }
  Binding *b = sema_bind(s, &s->global, st->name, BK_VALUE, st->span);
  if (!b)
    return;
  b->v = ir_tensor(&s->b, &t);
}

static void exec_output(Sema *s, const Node *st) {
  Program *p = s->b.p;
  for (int i = 0; i < st->list.len; i++) {
    const Node *nm = st->list.items[i];
    Binding *b = sema_lookup(&s->global, nm->name);
    if (!b) {
      if (!sema_explain_ended(s, &s->global, nm->name, nm->span))
        sema_error(s, nm->span, "unknown name '%s'", nm->name);
      continue;
    }
    if (b->kind == BK_POISON)
      continue;
    if (b->kind != BK_VALUE) {
      sema_error(s, nm->span, "'%s' is not a tensor; only tensors can be outputs", nm->name);
      continue;
    }
    bool dup = false;
    for (int j = 0; j < p->noutputs; j++)
      dup |= strcmp(p->outputs[j].name, nm->name) == 0;
    if (dup) {
      sema_error(s, nm->span, "'%s' is already an output", nm->name);
      continue;
    }
    ir_output(p, nm->name, b->v, nm->span);
  }
}

/* v rounded to the nearest f32 (to nearest even), as a double; +-inf
 * beyond the largest f32 and its half ulp, without the undefined
 * conversion of an out-of-range double. */
static double f32_of(double v) {
  if (isnan(v) || fabs(v) >= (double)FLT_MAX + ldexp(1.0, 103))
    return isnan(v) ? v : v > 0 ? INFINITY : -INFINITY;
  return (double)(float)v;
}

/* The keywords every optimizer takes besides its own: the learning-rate
 * schedule and gradient clipping (Train's fields). */
static const char *const schedule_keywords[] = {"warmup", "decay", "decay_steps", "min_lr", "clip", NULL};

#define SEMA_MAX_STEPS 16777216.0 /* 2^24: the most steps an f32 step count holds exactly */

/* Keyword name of the train statement's a, a number >= 0 that an f32
 * holds (whole and at most SEMA_MAX_STEPS for a count of steps), into
 * *out; its node, or NULL if absent. *ok false after an error. */
static const Node *schedule_number(Sema *s, Scope *sc, const Args *a, const char *name, bool steps, double *out,
                                   bool *ok) {
  const Node *n = sema_kwarg(a, name);
  if (!n)
    return NULL;
  bool good = true;
  double v = sema_eval_number(s, sc, n, name, &good), f = f32_of(v);
  if (good && steps && !(v >= 0 && v <= SEMA_MAX_STEPS && v == floor(v))) {
    sema_error(s, n->span, "%s = %g is not a number of steps (a whole number from 0 to %.0f)", name, v,
               SEMA_MAX_STEPS);
    good = false;
  } else if (good && (!isfinite(v) || v < 0)) {
    sema_error(s, n->span, "%s = %g is out of range (it must be a number >= 0)", name, v);
    good = false;
  } else if (good && (!isfinite(f) || (f == 0 && v != 0))) {
    sema_error(s, n->span, "%s = %.12g becomes %.9g as an f32, the type the program computes in (%s)", name, v, f,
               !isfinite(f) ? "the largest f32 is 3.40282347e+38" : "a nonzero value must not round to 0");
    good = false;
  }
  *ok &= good;
  if (good)
    *out = v;
  return n;
}

/* The schedule and clipping keywords of the train statement's a into t
 * (lr, the optimizer's, already there); *ok false after an error. */
static void train_schedule(Sema *s, Scope *sc, const Args *a, Train *t, double lr, bool *ok) {
  schedule_number(s, sc, a, "warmup", true, &t->warmup, ok);
  bool good = true;
  const Node *dn = sema_kwarg(a, "decay");
  if (dn && dn->kind != AST_NAME) {
    sema_error(s, dn->span, "decay takes the name of a decay: constant, linear or cosine");
    good = false;
  } else if (dn && (t->decay = ir_decay_lookup(dn->name)) < 0) {
    sema_error(s, dn->span, "unknown decay '%s' (constant, linear or cosine)", dn->name);
    t->decay = DECAY_CONSTANT;
    good = false;
  }
  const Node *sn = schedule_number(s, sc, a, "decay_steps", true, &t->decay_steps, &good);
  const Node *mn = schedule_number(s, sc, a, "min_lr", false, &t->min_lr, &good);
  schedule_number(s, sc, a, "clip", false, &t->clip, ok);
  *ok &= good;
  if (!good) /* the rest is about how these go together */
    return;
  if (t->decay == DECAY_CONSTANT && (sn || mn)) {
    const Node *n = sn ? sn : mn;
    sema_error(s, n->span, "%s has no use with decay = constant%s; name a decay that falls, e.g. decay = cosine",
               sn ? "decay_steps" : "min_lr", dn ? "" : " (the default)");
    *ok = false;
  } else if (t->decay != DECAY_CONSTANT && !sn) {
    sema_error(s, dn->span, "decay = %s needs decay_steps, the steps it takes from lr down to min_lr", dn->name);
    *ok = false;
  } else if (sn && t->decay_steps == 0) {
    sema_error(s, sn->span, "decay_steps = 0: a decay takes at least one step (or leave decay constant)");
    *ok = false;
  } else if (mn && t->min_lr > lr) {
    sema_error(s, mn->span, "min_lr = %g is above lr = %g; the decay falls from lr to min_lr", t->min_lr, lr);
    *ok = false;
  } else if (isfinite(f32_of(lr))) { /* (an lr past f32 was reported with the optimizer's keywords) */
    /* the values the schedule computes in f32, not only lr, stay finite:
     * the warmup's lr * (e + 1) up to lr * warmup, and the decay's peak */
    const char *at;
    double lr32 = f32_of(lr), peak = ir_decay_peak(t->decay, &at);
    const Node *ln = sema_kwarg(a, "lr"), *wn = sema_kwarg(a, "warmup");
    if (t->warmup > 0 && !isfinite(f32_of(lr32 * t->warmup))) {
      sema_error(s, ln ? ln->span : wn->span, "lr = %g with warmup = %g: the warmup computes lr * (e + 1), up to "
                 "lr * warmup = %g, past the largest f32 (3.40282347e+38)", lr, t->warmup, lr32 * t->warmup);
      *ok = false;
    } else if (!isfinite(f32_of(peak * (lr32 - f32_of(t->min_lr))))) {
      sema_error(s, ln ? ln->span : dn->span, "lr = %g with decay = %s: the schedule computes %s, up to %g, past "
                 "the largest f32 (3.40282347e+38)", lr, ir_decay_name(t->decay), at,
                 peak * (lr32 - f32_of(t->min_lr)));
      *ok = false;
    }
  }
}

/* train LOSS with OPT(k = v, ...): the loss an f32 scalar, the optimizer a
 * row of optim.def with its keywords numbers (defaults filled in), and the
 * schedule's and clipping's keywords; kept in p->train for autodiff.c */
static void exec_train(Sema *s, Scope *sc, const Node *st) {
  Train tr = {0}, *t = &tr;
  t->span = st->span;
  R r = sema_eval(s, sc, st->a);
  bool ok = r.k != R_NONE;
  if (is_num(r)) {
    sema_error(s, st->a->span, "the loss is the constant %g; it must depend on params", num(r));
    ok = false;
  } else if (r.k == R_TUPLE) {
    sema_error(s, st->a->span, "the loss is %d values; it must be one f32 scalar", r.n);
    ok = false;
  } else if (r.k == R_VALUE && (r.v->dtype != DT_F32 || r.v->shape.rank != 0)) {
    sema_error(s, st->a->span, "the loss must be an f32 scalar, not %s%s", sema_vtype(s, r.v),
               r.v->dtype == DT_BF16 ? " (use f32(x))" : "");
    ok = false;
  }
  for (int i = 0; i < s->b.p->ntensors; i++) {
    const Tensor *pt = &s->b.p->tensors[i];
    if (pt->kind == TK_PARAM && !pt->frozen && pt->dtype == DT_BF16) {
      sema_error(s, pt->span, "param '%s' is bf16, and a trained param must be f32", pt->name);
      diag_note(s->diag, st->span,
                "trained here; keep the param f32 and convert where it is used (bf16(%s)), compile with "
                "--precision bf16, or declare it frozen", pt->name);
      ok = false;
    }
  }
  const Node *call = st->b;
  t->opt_span = call->span;
  t->opt = ir_optim_lookup(call->name);
  Args a;
  if (t->opt < 0) {
    sema_error(s, call->span, "unknown optimizer '%s' (sgd, momentum, adam or adamw)", call->name);
    ok = false;
  } else if (!sema_split_args(s, call, &a)) {
    ok = false;
    t->opt = -1;
  }
  if (t->opt < 0) {
    if (!s->b.p->train.span.src)
      s->b.p->train = tr;
    return;
  }
  if (a.npos) {
    sema_error(s, a.pos[0]->span, "%s's arguments are given by keyword, e.g. %s(lr = 0.001)", call->name,
               call->name);
    ok = false;
  }
  char name[64];
  double dflt;
  int nk = 0;
  for (int k = 0; ir_optim_keyword(t->opt, k, name, sizeof name, &dflt); k++, nk++) {
    t->args[k] = dflt;
    const Node *n = sema_kwarg(&a, name);
    if (!n)
      continue;
    bool good = true;
    bool flag = strcmp(name, "nesterov") == 0;
    t->args[k] = flag && n->kind == AST_BOOL ? n->flag : sema_eval_number(s, sc, n, name, &good);
    /* PyTorch's checks: lr, eps, weight decay and momentum >= 0, betas in
     * [0, 1); made on the value written and on the f32 the program stores */
    bool beta = strncmp(name, "beta", 4) == 0;
    const char *range = beta ? "0 <= beta < 1" : flag ? "true or false" : "it must be a number >= 0";
    double v = t->args[k], f = f32_of(v);
    if (good && (!isfinite(v) || v < 0 || (beta && v >= 1) || (flag && v != 0 && v != 1))) {
      sema_error(s, n->span, "%s = %g is out of range (%s)", name, v, range);
      good = false;
    } else if (good && (!isfinite(f) || (beta && f >= 1) || (f == 0 && v != 0))) {
      sema_error(s, n->span, "%s = %.12g becomes %.9g as an f32, the type the program computes in (%s)", name, v,
                 f, !isfinite(f) ? "the largest f32 is 3.40282347e+38" : f == 0 ? "a nonzero value must not round to 0" : range);
      good = false;
    }
    ok &= good;
  }
  double lr = 0;
  for (int k = 0; ir_optim_keyword(t->opt, k, name, sizeof name, &dflt); k++)
    if (strcmp(name, "lr") == 0)
      lr = t->args[k];
  train_schedule(s, sc, &a, t, lr, &ok);
  for (int i = 0; i < a.nkw; i++) {
    bool known = false;
    for (int k = 0; k < nk && !known; k++)
      known = ir_optim_keyword(t->opt, k, name, sizeof name, &dflt) && strcmp(name, a.kw[i]->name) == 0;
    for (int k = 0; schedule_keywords[k] && !known; k++)
      known = strcmp(schedule_keywords[k], a.kw[i]->name) == 0;
    if (!known) {
      sema_error(s, a.kw[i]->span, "%s takes no keyword '%s' (it takes %s; every optimizer takes warmup, decay, "
                 "decay_steps, min_lr and clip)", call->name, a.kw[i]->name, ir_optim(t->opt)->keywords);
      ok = false;
    }
  }
  if (s->b.p->train.span.src) {
    if (!s->train_twice) { /* once: the statement's own errors are shown for each */
      sema_error(s, st->span, "a program has one train statement");
      diag_note(s->diag, s->b.p->train.span, "the first is here");
    }
    s->train_twice = true;
    return;
  }
  if (ok)
    t->loss = r.v;
  s->b.p->train = tr;
}

static bool exec_block(Sema *s, Scope *sc, const NodeList *stmts);

static const char *find_import(Sema *s, const char *name) {
  const char *file = arena_printf(s->b.p->arena, "%s.gsl", name);
  int n = s->opt ? s->opt->ninclude : 0;
  for (int i = 0; i <= n; i++) {
    const char *dir = i < n ? s->opt->include_dirs[i] : (s->opt ? s->opt->stdlib_dir : NULL);
    if (!dir)
      continue;
    const char *path = arena_printf(s->b.p->arena, "%s/%s", dir, file);
    if (access(path, R_OK) == 0)
      return path;
  }
  return NULL;
}

/* Imports module name into the top-level scope sc (once per scope). */
static void import_into(Sema *s, Scope *sc, const char *name, Span at) {
  if (!*name || strchr(name, '/') || strstr(name, "..")) {
    sema_error(s, at, "import \"%s\": expected a module name like \"nn\"", name);
    return;
  }
  const char *path = find_import(s, name);
  if (!path) {
    sema_error(s, at, "cannot find module \"%s\" (looked for %s.gsl in the -I directories and in %s)", name, name,
               s->opt && s->opt->stdlib_dir ? s->opt->stdlib_dir : "the stdlib");
    return;
  }
  char *real = realpath(path, NULL);
  const char *key = arena_strdup(s->b.p->arena, real ? real : path);
  free(real);
  for (int i = 0; i < sc->nimported; i++)
    if (strcmp(sc->imported[i], key) == 0)
      return;
  sc->imported = xrealloc(sc->imported, sizeof(char *) * (size_t)(sc->nimported + 1));
  sc->imported[sc->nimported++] = key;
  Source *src = source_load(path);
  if (!src) {
    sema_error(s, at, "cannot read module \"%s\" at %s: %s", name, path, source_strerror(errno));
    return;
  }
  /* the source lives as long as the program: its spans point into it */
  Source *kept = arena_alloc(s->b.p->arena, sizeof *kept);
  kept->path = arena_strdup(s->b.p->arena, src->path);
  kept->len = src->len;
  char *text = arena_alloc(s->b.p->arena, src->len + 1);
  memcpy(text, src->text, src->len + 1);
  kept->text = text;
  source_free(src);
  Node *root = parse_source(kept, s->ast, s->diag);
  if (!root) {
    diag_note(s->diag, at, "imported here");
    s->errors++;
    return;
  }
  exec_block(s, sc, &root->list);
}

/* fn NAME(args) { body }: bound in sc, where its body's names will resolve */
static void exec_fn(Sema *s, Scope *sc, const Node *st) {
  Scope args = {0};
  bool ok = true;
  for (int j = 0; j < st->list.len && ok; j++)
    ok = sema_bind(s, &args, st->list.items[j]->name, BK_VALUE, st->list.items[j]->span) != NULL;
  Binding *b = ok ? sema_bind(s, sc, st->name, BK_FN, st->span) : NULL;
  if (b) {
    b->fn = st;
    b->home = sc;
  }
}

/* The statements of a top-level scope: the user's program (and what it
 * imports) in s->global, or a module sema_call loaded, which may hold only
 * fn, const and import. false once the program grew too large. */
static bool exec_block(Sema *s, Scope *sc, const NodeList *stmts) {
  bool user = sc == &s->global;
  for (int i = 0; i < stmts->len && !s->too_big && !diag_flooded(s->diag); i++) {
    const Node *st = stmts->items[i];
    if (!user && st->kind != AST_IMPORT && st->kind != AST_CONST && st->kind != AST_FN && st->kind != AST_ERROR) {
      sema_error(s, st->span, "a module the compiler calls into may hold only fn, const and import");
      continue;
    }
    switch (st->kind) {
    case AST_IMPORT:
      if (s->depth)
        sema_error(s, st->span, "import may only stand at the top level");
      else
        import_into(s, sc, st->name, st->span);
      break;
    case AST_MESH:
      exec_mesh(s, st);
      break;
    case AST_CONST:
    case AST_PARAM:
    case AST_INPUT:
      exec_decl(s, sc, st);
      break;
    case AST_FN:
      exec_fn(s, sc, st);
      break;
    case AST_LET:
      sema_exec_let(s, sc, st);
      break;
    case AST_OUTPUT:
      exec_output(s, st);
      break;
    case AST_RETURN:
      sema_error(s, st->span, "return outside a function");
      break;
    case AST_TRAIN:
      exec_train(s, sc, st);
      break;
    case AST_FOR:
      sema_exec_for(s, sc, st);
      break;
    case AST_ERROR:
      break;
    default:
      sema_error(s, st->span, "a %s cannot stand as a statement", ast_kind_name(st->kind));
      break;
    }
    if (!s->too_big && s->b.p->nvalues > SEMA_MAX_VALUES) {
      s->too_big = true;
      sema_error(s, st->span, "this statement takes the program past %d IR values", SEMA_MAX_VALUES);
    }
  }
  return !s->too_big;
}

/* ---- the public API ------------------------------------------------------------- */

Sema *sema_new(Program *p, Arena *ast_arena, const SemaOptions *opt, Diag *d) {
  Sema *s = xcalloc(1, sizeof *s);
  s->diag = d;
  s->b = build_at(p, PASS_FORWARD, (Span){0}, 0);
  s->ast = ast_arena;
  s->opt = opt;
  s->define_used = xcalloc((size_t)(opt ? opt->ndefines : 0) + 1, 1);
  return s;
}

static void make_updates(Sema *s);

bool sema_run(Sema *s, const Node *root) {
  int before = s->errors;
  exec_block(s, &s->global, &root->list);
  const SemaOptions *opt = s->opt;
  for (int i = 0; opt && i < opt->ndefines; i++)
    if (!s->define_used[i] && s->errors == before) {
      int j;
      if (find_define(s, opt->defines[i].name, &j) && j == i) {
        diag_fatal(s->diag, "-D %s: the program has no const named %s", opt->defines[i].name, opt->defines[i].name);
        s->errors++;
      }
    }
  /* the states sema makes (a moe block's routing bias) move after each
   * training step: without one they would move at every step of a
   * program that only computes */
  const Program *p = s->b.p;
  for (int i = 0; i < p->ntensors && !p->train.loss && s->errors == before; i++)
    if (p->tensors[i].kind == TK_STATE)
      sema_error(s, p->tensors[i].span,
                 "bias_rate moves the routing bias %s after each training step, and the program has no train statement",
                 p->tensors[i].name);
  if (s->errors == before && s->b.p->train.loss)
    make_updates(s);
  return s->errors == before;
}

/* The top-level scope of module name, loaded the first time; NULL after
 * reporting at `at` that it cannot be (then and on every later call). */
static Scope *module_scope(Sema *s, const char *name, Span at) {
  for (int i = 0; i < s->nmodules; i++)
    if (strcmp(s->modules[i].name, name) == 0)
      return s->modules[i].scope;
  Scope *sc = arena_alloc(s->b.p->arena, sizeof *sc);
  int before = s->errors;
  import_into(s, sc, name, at);
  if (s->errors != before) {
    free(sc->imported);
    sc = NULL;
  }
  s->modules = xrealloc(s->modules, sizeof *s->modules * (size_t)(s->nmodules + 1));
  s->modules[s->nmodules].name = arena_strdup(s->b.p->arena, name);
  s->modules[s->nmodules++].scope = sc;
  return sc;
}

/* sema_call's work, built with s->b */
static int call(Sema *s, const char *module, const char *fn, Value **args, int nargs, const int64_t *nums,
                int nnums, Value **results, int maxresults, Span at) {
  Scope *sc = module ? module_scope(s, module, at) : &s->global;
  if (!sc)
    return -1;
  Binding *b = sema_lookup_local(sc, fn);
  if (!b || b->kind != BK_FN) {
    if (module)
      sema_error(s, at, "module \"%s\" has no function '%s'", module, fn);
    else
      sema_error(s, at, "the program has no function '%s'", fn);
    return -1;
  }
  int all = nargs + nnums;
  if (all != b->fn->list.len) {
    sema_error(s, at, "'%s' takes %d argument%s, %d given", fn, b->fn->list.len, b->fn->list.len == 1 ? "" : "s",
               all);
    diag_note(s->diag, b->fn->span, "'%s' is defined here", fn);
    return -1;
  }
  Span *spans = arena_alloc(s->b.p->arena, sizeof *spans * (size_t)(all ? all : 1));
  R *rs = arena_alloc(s->b.p->arena, sizeof *rs * (size_t)(all ? all : 1));
  for (int i = 0; i < all; i++) {
    spans[i] = at;
    rs[i] = i < nargs ? rval(args[i]) : rint_(nums[i - nargs]);
  }
  R r = inline_fn(s, b->home, b->fn, rs, all, spans, at);
  int n = r.k == R_NONE ? -1 : r.k == R_TUPLE ? r.n : 1;
  if (n > maxresults)
    die("sema_call: '%s' gives %d values, room for %d", fn, n, maxresults);
  if (r.k == R_TUPLE)
    memcpy(results, r.vs, sizeof *results * (size_t)n);
  else if (n == 1)
    results[0] = sema_value_of(s, r, at);
  return n;
}

int sema_call(Sema *s, const Build *bd, const char *module, const char *fn, Value **args, int nargs,
              Value **results, int maxresults, Span at) {
  return sema_call_nums(s, bd, module, fn, args, nargs, NULL, 0, results, maxresults, at);
}

int sema_call_nums(Sema *s, const Build *bd, const char *module, const char *fn, Value **args, int nargs,
                   const int64_t *nums, int nnums, Value **results, int maxresults, Span at) {
  Build outer = s->b;
  s->b = *bd;
  int n = call(s, module, fn, args, nargs, nums, nnums, results, maxresults, at);
  s->b = outer;
  return n;
}

Program *sema_function(Sema *s, const char *module, const char *fn, const DType *dt, const Shape *sh, int nargs,
                       Span at) {
  /* the module is loaded into p, not the function: its sources and scope
   * outlive the function, and anything its top level makes stays p's */
  if (module && !module_scope(s, module, at))
    return NULL;
  Program *home = s->b.p, *f = ir_new_fn(home);
  /* f's own values, at no call site or region of home's, in f32: inlined,
   * they are copied as built, whatever pass inlines them */
  Build fb = build_f32(build_at(f, PASS_FORWARD, (Span){0}, 0));
  Value **args = xmalloc(sizeof *args * (size_t)(nargs ? nargs : 1));
  for (int i = 0; i < nargs; i++) {
    Tensor t = {0};
    t.name = arena_printf(home->arena, "%s.arg%d", fn, i);
    t.kind = TK_INPUT;
    t.dtype = dt[i];
    t.shape = sh[i];
    t.span = at;
    t.state_of = -1;
    args[i] = ir_tensor(&fb, &t);
  }
  Value *res[SEMA_MAX_ARGS];
  int n = sema_call(s, &fb, module, fn, args, nargs, res, SEMA_MAX_ARGS, at);
  free(args);
  if (n < 0) {
    ir_free(f);
    return NULL;
  }
  for (int j = 0; j < n; j++)
    ir_output(f, fn, res[j], at);
  return f;
}

/* The train statement's optimizer update, stdlib/optim.gsl's function of
 * its optimizer specialized to each shape of an f32 param that is not
 * frozen, into p->train.updates. Its parameters, in optim.def's order: the
 * param p, its gradient g, the states, the step number t (if the optimizer
 * takes it; an f32 scalar) and the hyperparameters (f32 scalars). With a
 * schedule, its lr function (decay.def's) into p->train.schedule, on five
 * f32 scalars: the steps done, lr, warmup, decay_steps and min_lr. */
static void make_updates(Sema *s) {
  Train *t = &s->b.p->train;
  const OptimInfo *o = ir_optim(t->opt);
  char w[64];
  double dflt;
  int ns = 0, nk = 0;
  if (ir_train_scheduled(t)) {
    DType dt[5] = {DT_F32, DT_F32, DT_F32, DT_F32, DT_F32};
    Shape sh[5] = {{0}};
    if (!(t->schedule = sema_function(s, "optim", ir_decay_fn(t->decay), dt, sh, 5, t->opt_span)))
      return;
  }
  while (ir_optim_state(t->opt, ns, w, sizeof w))
    ns++;
  while (ir_optim_keyword(t->opt, nk, w, sizeof w, &dflt))
    nk++;
  int n = 2 + ns + (o->step ? 1 : 0) + nk;
  if (n > SEMA_MAX_ARGS)
    die("optim.def's %s takes %d arguments, more than %d", o->name, n, SEMA_MAX_ARGS);
  DType dt[SEMA_MAX_ARGS];
  Shape sh[SEMA_MAX_ARGS];
  for (int i = 0; i < n; i++)
    dt[i] = DT_F32;
  for (int i = 0; i < s->b.p->ntensors; i++) {
    const Tensor *pt = &s->b.p->tensors[i];
    if (pt->kind != TK_PARAM || pt->frozen || pt->dtype != DT_F32)
      continue;
    bool have = false;
    for (int k = 0; k < t->nupdates && !have; k++)
      have = shape_eq(&t->updates[k]->tensors[0].shape, &pt->shape);
    if (have)
      continue;
    for (int k = 0; k < n; k++)
      sh[k] = k < 2 + ns ? pt->shape : (Shape){0};
    Program *f = sema_function(s, "optim", o->fn, dt, sh, n, t->opt_span);
    if (!f)
      return;
    t->updates = xrealloc(t->updates, sizeof *t->updates * (size_t)(t->nupdates + 1));
    t->updates[t->nupdates++] = f;
  }
}

void sema_free(Sema *s) {
  if (!s)
    return;
  for (int i = 0; i < s->nmodules; i++)
    if (s->modules[i].scope)
      free(s->modules[i].scope->imported);
  free(s->modules);
  free(s->global.imported);
  free(s->define_used);
  free(s);
}

Program *sema_program(const Node *root, const Source *src, Arena *ast_arena, const SemaOptions *opt, Diag *d) {
  Program *p = ir_new(src ? src->path : NULL);
  Sema *s = sema_new(p, ast_arena, opt, d);
  bool ok = sema_run(s, root);
  sema_free(s);
  if (!ok) {
    ir_free(p);
    return NULL;
  }
  ir_dce(p);
  return p;
}
