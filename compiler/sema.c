/* sema.c — semantic analysis: from the AST to the global tensor IR.
 *
 * Method: the program is elaborated, statement by statement, as an abstract
 * interpreter over shapes. Names resolve through a chain of scopes (a call's
 * scope sits on the global one, never on the caller's). `const`s are folded
 * to numbers, with -D overriding them. Every call of a user function is
 * inlined: its arguments are checked against its argument types (shape names
 * in those types bind per call), and its body is elaborated afresh, so each
 * call has its own static shapes. Every builtin (builtins.def) checks the
 * dtypes and shapes of its arguments and emits IR values; higher-level ones
 * (softmax, mean, matmul, implicit broadcasts) expand into the IR's few
 * general ops. Each error is reported at the construct that caused it, with
 * a note at every call it was inlined through; an expression that failed
 * yields R_NONE, which the enclosing expressions pass along silently, so one
 * mistake gives one message. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gslc.h"

#define MAX_DEPTH 64        /* deepest chain of inlined calls */

/* ---- results and scopes ---------------------------------------------------- */

typedef enum RKind { R_NONE, R_INT, R_FLOAT, R_VALUE, R_TUPLE } RKind;

typedef struct R {
  RKind k;     /* what was computed; R_NONE after an error */
  int64_t i;   /* R_INT */
  double f;    /* R_FLOAT */
  Value *v;    /* R_VALUE */
  Value **vs;  /* R_TUPLE: the values */
  int n;       /* R_TUPLE: how many */
} R;

static const R none = {R_NONE, 0, 0, NULL, NULL, 0};

/* BK_POISON: a name whose definition failed; uses of it stay silent */
typedef enum BindKind { BK_INT, BK_FLOAT, BK_VALUE, BK_FN, BK_SHAPEVAR, BK_POISON } BindKind;

typedef struct Binding Binding;
struct Binding {
  const char *name; /* the bound name */
  BindKind kind;    /* what it names */
  int64_t i;        /* BK_INT, BK_SHAPEVAR */
  double f;         /* BK_FLOAT */
  Value *v;         /* BK_VALUE */
  const Node *fn;   /* BK_FN */
  Span span;        /* where it was bound */
  Binding *next;    /* older binding in the same scope */
};

typedef struct Scope Scope;
struct Scope {
  Scope *parent;    /* enclosing scope; NULL for the global one */
  Binding *head;    /* newest binding */
};

typedef struct Frame {
  const char *fn;   /* the function inlined */
  Span call;        /* the call site */
} Frame;

typedef struct Sema {
  Program *p;              /* the IR being built */
  Arena *ast;              /* arena for imported ASTs */
  const SemaOptions *opt;  /* search path, -D */
  Scope global;            /* top-level names */
  Frame stack[MAX_DEPTH];  /* calls being inlined, outermost first */
  int depth;               /* entries of stack in use */
  bool have_mesh;          /* a mesh statement was seen */
  bool have_tensor;        /* a param or input was seen */
  const char **imported;   /* resolved paths already imported */
  int nimported;
  bool *define_used;       /* per -D: matched a const */
} Sema;

typedef enum BuiltinId {
#define X(id, name, lo, hi, kw) BI_##id,
#include "builtins.def"
#undef X
  BI__COUNT
} BuiltinId;

typedef struct Builtin {
  const char *name;     /* as called */
  int lo, hi;           /* positional arguments taken */
  const char *keywords; /* keyword arguments taken, space-separated */
} Builtin;

static const Builtin builtins[] = {
#define X(id, name, lo, hi, kw) {name, lo, hi, kw},
#include "builtins.def"
#undef X
};

static int builtin_lookup(const char *name) {
  for (int i = 0; i < BI__COUNT; i++)
    if (strcmp(builtins[i].name, name) == 0)
      return i;
  return -1;
}

/* ---- diagnostics ------------------------------------------------------------- */

static void serr(Sema *s, Span sp, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(sp, "%s", msg);
  for (int i = s->depth - 1; i >= 0; i--)
    diag_note(s->stack[i].call, "in the call to '%s' here", s->stack[i].fn);
}

/* The source text of a span, shortened, for messages that name an expression. */
static const char *span_text(Sema *s, Span sp) {
  if (!sp.src || sp.end <= sp.off || sp.end > sp.src->len)
    return "expression";
  size_t n = sp.end - sp.off;
  if (n > 40)
    return arena_printf(s->p->arena, "%.37s...", sp.src->text + sp.off);
  return arena_strndup(s->p->arena, sp.src->text + sp.off, n);
}

static const char *type_str(Sema *s, DType dt, const Shape *sh) {
  return arena_printf(s->p->arena, "%s%s", dtype_name(dt), sh->rank ? shape_str(s->p->arena, sh) : "");
}

static const char *vtype(Sema *s, const Value *v) { return type_str(s, v->dtype, &v->shape); }

/* ---- scopes ------------------------------------------------------------------ */

static Binding *lookup_local(Scope *sc, const char *name) {
  for (Binding *b = sc->head; b; b = b->next)
    if (strcmp(b->name, name) == 0)
      return b;
  return NULL;
}

static Binding *lookup(Scope *sc, const char *name) {
  for (; sc; sc = sc->parent) {
    Binding *b = lookup_local(sc, name);
    if (b)
      return b;
  }
  return NULL;
}

static Binding *bind(Sema *s, Scope *sc, const char *name, BindKind k, Span sp) {
  Binding *old = lookup_local(sc, name);
  if (old) {
    serr(s, sp, "redefinition of '%s'", name);
    if (old->span.src)
      diag_note(old->span, "'%s' was defined here", name);
    return NULL;
  }
  if (builtin_lookup(name) >= 0 && k == BK_FN) {
    serr(s, sp, "'%s' is a builtin function and cannot be redefined", name);
    return NULL;
  }
  Binding *b = arena_alloc(s->p->arena, sizeof *b);
  b->name = name;
  b->kind = k;
  b->span = sp;
  b->next = sc->head;
  sc->head = b;
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
      int d = edit_distance(name, builtins[i].name);
      if (d <= bestd && (!best || d < bestd)) {
        best = builtins[i].name;
        bestd = d;
      }
    }
  return best;
}

/* ---- IR helpers ---------------------------------------------------------------- */

static uint32_t all_dims(int rank) { return rank >= 32 ? ~0u : (1u << rank) - 1; }

/* the shape of x with the dims in mask set to 1 (keepdims) */
static Shape keep_shape(const Shape *x, uint32_t mask) {
  Shape k = *x;
  for (int i = 0; i < x->rank; i++)
    if (mask & (1u << i))
      k.d[i] = 1;
  return k;
}

/* ---- results -------------------------------------------------------------------- */

static R rint_(int64_t i) { R r = none; r.k = R_INT; r.i = i; return r; }
static R rfloat(double f) { R r = none; r.k = R_FLOAT; r.f = f; return r; }
static R rval(Value *v) { R r = none; r.k = v ? R_VALUE : R_NONE; r.v = v; return r; }
static bool is_num(R r) { return r.k == R_INT || r.k == R_FLOAT; }
static double num(R r) { return r.k == R_INT ? (double)r.i : r.f; }

static R eval(Sema *s, Scope *sc, const Node *n);

/* Evaluates n and insists on a tensor (a number becomes an f32 scalar). */
static Value *eval_value(Sema *s, Scope *sc, const Node *n) {
  R r = eval(s, sc, n);
  switch (r.k) {
  case R_VALUE:
    return r.v;
  case R_INT:
  case R_FLOAT:
    return ir_const(s->p, DT_F32, num(r), n->span);
  case R_TUPLE:
    serr(s, n->span, "expected one value, but this gives %d", r.n);
    return NULL;
  default:
    return NULL;
  }
}

/* Evaluates n and insists on a compile-time integer. ok is cleared on error. */
static int64_t eval_int(Sema *s, Scope *sc, const Node *n, const char *what, bool *ok) {
  R r = eval(s, sc, n);
  if (r.k == R_INT)
    return r.i;
  if (r.k == R_FLOAT && r.f == floor(r.f) && fabs(r.f) < 9e15)
    return (int64_t)r.f;
  if (r.k != R_NONE)
    serr(s, n->span, "%s must be a compile-time integer", what);
  *ok = false;
  return 0;
}

static double eval_number(Sema *s, Scope *sc, const Node *n, const char *what, bool *ok) {
  R r = eval(s, sc, n);
  if (is_num(r))
    return num(r);
  if (r.k != R_NONE)
    serr(s, n->span, "%s must be a compile-time number", what);
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


static R fold(Sema *s, int op, R a, R b, Span sp) {
  bool ints = a.k == R_INT && b.k == R_INT;
  double x = num(a), y = num(b);
  switch (op) {
  case BIN_ADD: return ints ? rint_(a.i + b.i) : rfloat(x + y);
  case BIN_SUB: return ints ? rint_(a.i - b.i) : rfloat(x - y);
  case BIN_MUL: return ints ? rint_(a.i * b.i) : rfloat(x * y);
  case BIN_DIV:
    if (y == 0) {
      serr(s, sp, "division by zero in a constant expression");
      return none;
    }
    if (ints && a.i % b.i == 0)
      return rint_(a.i / b.i);
    return rfloat(x / y);
  case BIN_LT: return rfloat(x < y);
  case BIN_LE: return rfloat(x <= y);
  case BIN_GT: return rfloat(x > y);
  case BIN_GE: return rfloat(x >= y);
  case BIN_EQ: return rfloat(x == y);
  case BIN_NE: return rfloat(x != y);
  case BIN_MATMUL:
    serr(s, sp, "'@' needs two tensors of rank 2 or more, not numbers");
    return none;
  default:
    die("unknown operator %d", op);
  }
}

/* Turns a number operand into a scalar of the other operand's dtype (a float
 * literal beside an i32 tensor makes the operation f32). */
static void promote(Sema *s, R *a, R *b, Span sp, Value **va, Value **vb) {
  if (a->k == R_VALUE && b->k == R_VALUE) {
    *va = a->v;
    *vb = b->v;
  } else if (a->k == R_VALUE) {
    DType dt = a->v->dtype == DT_I32 && b->k == R_INT ? DT_I32 : DT_F32;
    *va = ir_cast(s->p, a->v, dt, sp);
    *vb = ir_const(s->p, dt, num(*b), sp);
  } else {
    DType dt = b->v->dtype == DT_I32 && a->k == R_INT ? DT_I32 : DT_F32;
    *va = ir_const(s->p, dt, num(*a), sp);
    *vb = ir_cast(s->p, b->v, dt, sp);
  }
  if ((*va)->dtype != (*vb)->dtype) { /* i32 with f32: as JAX, compute in f32 */
    *va = ir_cast(s->p, *va, DT_F32, sp);
    *vb = ir_cast(s->p, *vb, DT_F32, sp);
  }
}

static Value *elementwise2(Sema *s, int fn, Value *a, Value *b, Span sp) {
  Shape out;
  int bad = 0;
  if (!shape_broadcast(&a->shape, &b->shape, &out, &bad)) {
    serr(s, sp, "shapes %s and %s do not broadcast", vtype(s, a), vtype(s, b));
    return NULL;
  }
  Value *v = ir_binary(s->p, fn, a, b, sp);
  if (binary_is_compare(fn) && v->dtype == DT_I32)
    v = ir_cast(s->p, v, DT_F32, sp);
  return v;
}

static Value *matmul(Sema *s, Value *a, Value *b, Span sp);

static R binary(Sema *s, int op, R a, R b, Span sp) {
  if (a.k == R_NONE || b.k == R_NONE)
    return none;
  if (a.k == R_TUPLE || b.k == R_TUPLE) {
    serr(s, sp, "operator '%s' applied to several values (a function returning more than one?)",
         ast_op_text(op));
    return none;
  }
  if (is_num(a) && is_num(b))
    return fold(s, op, a, b, sp);
  Value *va, *vb;
  if (op == BIN_MATMUL) {
    if (!(a.k == R_VALUE && b.k == R_VALUE)) {
      serr(s, sp, "'@' needs two tensors of rank 2 or more");
      return none;
    }
    return rval(matmul(s, a.v, b.v, sp));
  }
  promote(s, &a, &b, sp, &va, &vb);
  return rval(elementwise2(s, binop_fn(op), va, vb, sp));
}

/* ---- einsum ----------------------------------------------------------------------------- */

/* einsum(spec, a[, b]): the spec's letters checked against the operands'
 * ranks and extents, with the user's errors; the builder does the rest. */
static Value *einsum(Sema *s, const char *text, Value **ops, int nin, Span sp) {
  EinsumSpec z;
  char why[160];
  if (!ein_parse(text, nin, &z, why, sizeof why)) {
    serr(s, sp, "einsum spec \"%s\"%s", text, why);
    return NULL;
  }
  int64_t size[128];
  for (int i = 0; i < 128; i++)
    size[i] = -1;
  for (int k = 0; k < nin; k++) {
    if ((int)strlen(z.in[k]) != ops[k]->shape.rank) {
      serr(s, sp, "einsum spec \"%s\": operand %d has %d indices but its type is %s", text, k + 1,
           (int)strlen(z.in[k]), vtype(s, ops[k]));
      return NULL;
    }
    if (ops[k]->dtype != ops[0]->dtype) {
      serr(s, sp, "einsum operands differ in dtype: %s and %s", vtype(s, ops[0]), vtype(s, ops[k]));
      return NULL;
    }
    for (int i = 0; z.in[k][i]; i++) {
      int c = (unsigned char)z.in[k][i];
      if (size[c] >= 0 && size[c] != ops[k]->shape.d[i]) {
        serr(s, sp, "einsum spec \"%s\": index '%c' is %" PRId64 " in one place and %" PRId64 " in another",
             text, c, size[c], ops[k]->shape.d[i]);
        return NULL;
      }
      size[c] = ops[k]->shape.d[i];
    }
  }
  return ir_einsum(s->p, &z, ops, sp);
}

/* a @ b: batched matrix product over the last two dims, batch dims broadcast */
static Value *matmul(Sema *s, Value *a, Value *b, Span sp) {
  if (a->shape.rank < 2 || b->shape.rank < 2) {
    serr(s, sp, "'@' needs operands of rank 2 or more, got %s and %s", vtype(s, a), vtype(s, b));
    return NULL;
  }
  int ra = a->shape.rank, rb = b->shape.rank;
  if (a->shape.d[ra - 1] != b->shape.d[rb - 2]) {
    serr(s, sp, "'@' contracts the last dim of %s with the second-to-last of %s: %" PRId64 " vs %" PRId64,
         vtype(s, a), vtype(s, b), a->shape.d[ra - 1], b->shape.d[rb - 2]);
    return NULL;
  }
  if (a->dtype != b->dtype) {
    serr(s, sp, "'@' operands differ in dtype: %s and %s", vtype(s, a), vtype(s, b));
    return NULL;
  }
  /* letters: one per batch position ('a', 'b', ...), then rows w, inner y,
   * columns x. A size-1 batch dim facing a larger one is squeezed out of its
   * operand (it broadcasts); a missing one is simply absent. */
  int nb = (ra > rb ? ra : rb) - 2;
  char la[GSL_MAX_RANK + 1] = {0}, lb[GSL_MAX_RANK + 1] = {0}, lo[GSL_MAX_RANK + 1] = {0};
  Shape sa = {0}, sb = {0}, out = {0};
  for (int i = 0; i < nb; i++) {
    int ia = i - (nb - (ra - 2)), ib = i - (nb - (rb - 2));
    int64_t da = ia >= 0 ? a->shape.d[ia] : 0, db = ib >= 0 ? b->shape.d[ib] : 0;
    if (da > 1 && db > 1 && da != db) {
      serr(s, sp, "'@' batch dims of %s and %s do not broadcast", vtype(s, a), vtype(s, b));
      return NULL;
    }
    char c = (char)('a' + i);
    if (ia >= 0 && !(da == 1 && db > 1)) {
      la[sa.rank] = c;
      sa.d[sa.rank++] = da;
    }
    if (ib >= 0 && !(db == 1 && da > 1)) {
      lb[sb.rank] = c;
      sb.d[sb.rank++] = db;
    }
    lo[out.rank] = c;
    out.d[out.rank++] = da > db ? da : db;
  }
  la[sa.rank] = 'w';
  sa.d[sa.rank++] = a->shape.d[ra - 2];
  la[sa.rank] = 'y';
  sa.d[sa.rank++] = a->shape.d[ra - 1];
  lb[sb.rank] = 'y';
  sb.d[sb.rank++] = b->shape.d[rb - 2];
  lb[sb.rank] = 'x';
  sb.d[sb.rank++] = b->shape.d[rb - 1];
  lo[out.rank] = 'w';
  out.d[out.rank++] = a->shape.d[ra - 2];
  lo[out.rank] = 'x';
  out.d[out.rank++] = b->shape.d[rb - 1];
  Value *ops[2] = {ir_reshape(s->p, a, sa, sp), ir_reshape(s->p, b, sb, sp)};
  EinsumSpec e = {2, {{0}, {0}}, {0}};
  strcpy(e.in[0], la);
  strcpy(e.in[1], lb);
  strcpy(e.out, lo);
  return ir_einsum(s->p, &e, ops, sp);
}

/* ---- calls ------------------------------------------------------------------------------ */

typedef struct Args {
  const Node *call;      /* the CALL node */
  const Node *pos[8];    /* positional arguments */
  int npos;
  const Node *kw[8];     /* keyword arguments (KWARG nodes) */
  int nkw;
} Args;

static bool split_args(Sema *s, const Node *call, Args *a) {
  memset(a, 0, sizeof *a);
  a->call = call;
  for (int i = 0; i < call->list.len; i++) {
    const Node *x = call->list.items[i];
    if (x->kind == AST_KWARG) {
      if (a->nkw == 8) {
        serr(s, x->span, "too many keyword arguments");
        return false;
      }
      a->kw[a->nkw++] = x;
    } else {
      if (a->nkw) {
        serr(s, x->span, "positional argument after a keyword argument");
        return false;
      }
      if (a->npos == 8) {
        serr(s, x->span, "too many arguments");
        return false;
      }
      a->pos[a->npos++] = x;
    }
  }
  return true;
}

static const Node *kwarg(const Args *a, const char *name) {
  for (int i = 0; i < a->nkw; i++)
    if (strcmp(a->kw[i]->name, name) == 0)
      return a->kw[i]->a;
  return NULL;
}

static bool check_builtin_args(Sema *s, int id, const Args *a) {
  const Builtin *b = &builtins[id];
  if (a->npos < b->lo || a->npos > b->hi) {
    if (b->lo == b->hi)
      serr(s, a->call->span, "%s takes %d argument%s, %d given", b->name, b->lo, b->lo == 1 ? "" : "s", a->npos);
    else
      serr(s, a->call->span, "%s takes %d to %d arguments, %d given", b->name, b->lo, b->hi, a->npos);
    return false;
  }
  for (int i = 0; i < a->nkw; i++) {
    const char *k = a->kw[i]->name;
    size_t n = strlen(k);
    bool ok = false;
    for (const char *w = b->keywords; *w;) {
      size_t m = strcspn(w, " ");
      if (m == n && strncmp(w, k, n) == 0)
        ok = true;
      w += m;
      while (*w == ' ')
        w++;
    }
    if (!ok) {
      serr(s, a->kw[i]->span, "%s has no keyword argument '%s'", b->name, k);
      return false;
    }
    for (int j = 0; j < i; j++)
      if (strcmp(a->kw[j]->name, k) == 0) {
        serr(s, a->kw[i]->span, "keyword argument '%s' given twice", k);
        return false;
      }
    if (strcmp(k, "dim") == 0 && a->npos > 1) {
      serr(s, a->kw[i]->span, "%s: the dimension is given both by position and as dim", b->name);
      return false;
    }
  }
  return true;
}

/* The dimension argument at position pos, or the keyword argument dim. */
static const Node *dim_node(const Args *a, int pos) {
  return a->npos > pos ? a->pos[pos] : kwarg(a, "dim");
}

/* a dimension argument, negative counting from the end */
static bool dim_arg(Sema *s, Scope *sc, const Node *n, int rank, const char *fn, int *dim) {
  bool ok = true;
  int64_t d = eval_int(s, sc, n, "a dimension", &ok);
  if (!ok)
    return false;
  if (d < -rank || d >= rank) {
    serr(s, n->span, "%s: dimension %" PRId64 " is out of range for a tensor of rank %d", fn, d, rank);
    return false;
  }
  *dim = (int)(d < 0 ? d + rank : d);
  return true;
}

static bool bool_kwarg(Sema *s, Scope *sc, const Args *a, const char *name, bool dflt) {
  const Node *n = kwarg(a, name);
  if (!n)
    return dflt;
  R r = eval(s, sc, n);
  if (r.k == R_INT)
    return r.i != 0;
  if (r.k != R_NONE)
    serr(s, n->span, "'%s' must be true or false", name);
  return dflt;
}

/* ---- sharding annotations --------------------------------------------------------------- */

static int axis_index(const Sema *s, const char *name) {
  for (int i = 0; i < s->p->mesh.naxes; i++)
    if (strcmp(s->p->mesh.name[i], name) == 0)
      return i;
  return -1;
}

static bool check_sharding(Sema *s, const Sharding *sh, const Shape *shape, const char *what, Span sp) {
  for (int i = 0; i < shape->rank; i++) {
    int64_t shards = 1;
    for (int j = 0; j < sh->naxes[i]; j++)
      shards *= s->p->mesh.size[sh->axes[i][j]];
    if (shape->d[i] % shards != 0) {
      const char *axes = "";
      for (int j = 0; j < sh->naxes[i]; j++) {
        int ax = sh->axes[i][j];
        axes = arena_printf(s->p->arena, "%s%s%s = %" PRId64, axes, j ? ", " : "", s->p->mesh.name[ax],
                            s->p->mesh.size[ax]);
      }
      serr(s, sp, "dimension %d of %s (size %" PRId64 ") is not divisible by its %" PRId64 " shards (mesh axes %s)",
           i, what, shape->d[i], shards, axes);
      return false;
    }
  }
  return true;
}

static bool add_axis(Sema *s, Sharding *sh, int dim, const Node *axis, uint32_t *used) {
  int ax = axis_index(s, axis->name);
  if (ax < 0) {
    if (s->p->mesh.naxes == 0)
      serr(s, axis->span, "unknown mesh axis '%s' (the program declares no mesh)", axis->name);
    else
      serr(s, axis->span, "unknown mesh axis '%s'", axis->name);
    return false;
  }
  if (*used & (1u << ax)) {
    serr(s, axis->span, "mesh axis '%s' is used twice in one sharding", axis->name);
    return false;
  }
  *used |= 1u << ax;
  sh->axes[dim][sh->naxes[dim]++] = (uint8_t)ax;
  return true;
}

/* Reads the sharding an annotation call describes for a tensor of shape;
 * first is the index of its first argument after the tensor (0 on a
 * declaration, 1 in an expression). */
static bool annotation_sharding(Sema *s, Scope *sc, int id, const Args *a, int first, const Shape *shape,
                                Sharding *sh) {
  memset(sh, 0, sizeof *sh);
  const char *fn = builtins[id].name;
  if (id == BI_REPLICATE)
    return true;
  if (id == BI_SPLIT) {
    int dim;
    if (!dim_arg(s, sc, a->pos[first], shape->rank, fn, &dim))
      return false;
    uint32_t used = 0;
    if (a->npos > first + 1) {
      const Node *ax = a->pos[first + 1];
      if (ax->kind != AST_NAME) {
        serr(s, ax->span, "split: the axis must be a mesh axis name");
        return false;
      }
      return add_axis(s, sh, dim, ax, &used);
    }
    for (int i = 0; i < s->p->mesh.naxes; i++)
      sh->axes[dim][sh->naxes[dim]++] = (uint8_t)i;
    return true;
  }
  /* shard(x, [a, _, (b, c)]) */
  const Node *l = a->pos[first];
  if (l->kind != AST_LIST) {
    serr(s, l->span, "shard: expected a list like [a, _, (b, c)], one entry per dimension");
    return false;
  }
  if (l->list.len != shape->rank) {
    serr(s, l->span, "shard: the list has %d entries but the tensor has rank %d", l->list.len, shape->rank);
    return false;
  }
  uint32_t used = 0;
  for (int i = 0; i < l->list.len; i++) {
    const Node *e = l->list.items[i];
    if (e->kind == AST_NAME && strcmp(e->name, "_") == 0)
      continue;
    if (e->kind == AST_NAME) {
      if (!add_axis(s, sh, i, e, &used))
        return false;
    } else if (e->kind == AST_TUPLE) {
      for (int j = 0; j < e->list.len; j++) {
        if (e->list.items[j]->kind != AST_NAME) {
          serr(s, e->list.items[j]->span, "shard: expected a mesh axis name");
          return false;
        }
        if (!add_axis(s, sh, i, e->list.items[j], &used))
          return false;
      }
    } else {
      serr(s, e->span, "shard: expected a mesh axis, a tuple of axes, or _");
      return false;
    }
  }
  return true;
}

/* ---- builtins ------------------------------------------------------------------------- */

static const int unary_of[] = {
    [BI_EXP] = UF_EXP,   [BI_LOG] = UF_LOG,         [BI_SQRT] = UF_SQRT, [BI_RSQRT] = UF_RSQRT,
    [BI_TANH] = UF_TANH, [BI_SIGMOID] = UF_SIGMOID, [BI_RELU] = UF_RELU, [BI_GELU] = UF_GELU,
    [BI_ABS] = UF_ABS,
};

static Value *need_f32(Sema *s, const char *fn, Value *v, Span sp) {
  if (v && v->dtype != DT_F32) {
    serr(s, sp, "%s needs an f32 tensor, got %s (use cast(x, f32))", fn, vtype(s, v));
    return NULL;
  }
  return v;
}

static Value *softmax(Sema *s, Value *x, int dim, bool logarithm, Span sp) {
  Program *p = s->p;
  uint32_t m = 1u << dim;
  Shape k = keep_shape(&x->shape, m);
  Value *mx = ir_reshape(p, ir_reduce(p, RF_MAX, x, m, sp), k, sp);
  Value *z = ir_binary(p, BF_SUB, x, mx, sp);
  Value *e = ir_unary(p, UF_EXP, z, sp);
  Value *sum = ir_reshape(p, ir_reduce(p, RF_SUM, e, m, sp), k, sp);
  if (logarithm)
    return ir_binary(p, BF_SUB, z, ir_unary(p, UF_LOG, sum, sp), sp);
  return ir_binary(p, BF_DIV, e, sum, sp);
}

static R call_builtin(Sema *s, Scope *sc, int id, const Node *call) {
  Args a;
  if (!split_args(s, call, &a) || !check_builtin_args(s, id, &a))
    return none;
  Span sp = call->span;
  const char *fn = builtins[id].name;
  switch (id) {
  case BI_EXP: case BI_LOG: case BI_SQRT: case BI_RSQRT: case BI_TANH:
  case BI_SIGMOID: case BI_RELU: case BI_GELU: case BI_ABS: {
    R r = eval(s, sc, a.pos[0]);
    if (is_num(r))
      return rfloat(ir_fold_unary(unary_of[id], num(r)));
    if (r.k == R_TUPLE)
      serr(s, sp, "%s: the argument gives several values", fn);
    if (r.k != R_VALUE)
      return none;
    Value *x = r.v;
    if (id != BI_ABS && id != BI_RELU)
      x = need_f32(s, fn, x, sp);
    return x ? rval(ir_unary(s->p, unary_of[id], x, sp)) : none;
  }
  case BI_POW: case BI_MAX: case BI_MIN: {
    R x = eval(s, sc, a.pos[0]), y = eval(s, sc, a.pos[1]);
    if (x.k == R_NONE || y.k == R_NONE)
      return none;
    if (is_num(x) && is_num(y)) {
      double p = num(x), q = num(y);
      double r = id == BI_POW ? pow(p, q) : id == BI_MAX ? fmax(p, q) : fmin(p, q);
      return x.k == R_INT && y.k == R_INT && id != BI_POW ? rint_((int64_t)r) : rfloat(r);
    }
    if (x.k == R_TUPLE || y.k == R_TUPLE) {
      serr(s, sp, "%s: an argument gives several values", fn);
      return none;
    }
    Value *va, *vb;
    promote(s, &x, &y, sp, &va, &vb);
    if (id == BI_POW && !(va = need_f32(s, fn, va, sp)))
      return none;
    return rval(elementwise2(s, id == BI_POW ? BF_POW : id == BI_MAX ? BF_MAX : BF_MIN, va, vb, sp));
  }
  case BI_WHERE: {
    Value *c = eval_value(s, sc, a.pos[0]);
    R x = eval(s, sc, a.pos[1]), y = eval(s, sc, a.pos[2]);
    if (!c || x.k == R_NONE || y.k == R_NONE)
      return none;
    if (x.k == R_TUPLE || y.k == R_TUPLE) {
      serr(s, sp, "where: an argument gives several values");
      return none;
    }
    Value *va, *vb;
    if (is_num(x) && is_num(y)) {
      va = ir_const(s->p, DT_F32, num(x), sp);
      vb = ir_const(s->p, DT_F32, num(y), sp);
    } else {
      promote(s, &x, &y, sp, &va, &vb);
    }
    Shape o1, o;
    int bad;
    if (!shape_broadcast(&c->shape, &va->shape, &o1, &bad) || !shape_broadcast(&o1, &vb->shape, &o, &bad)) {
      serr(s, sp, "where: shapes %s, %s and %s do not broadcast", vtype(s, c), vtype(s, va), vtype(s, vb));
      return none;
    }
    return rval(ir_select(s->p, c, va, vb, sp));
  }
  case BI_CAST: {
    Value *x = eval_value(s, sc, a.pos[0]);
    const Node *t = a.pos[1];
    if (!x)
      return none;
    if (t->kind != AST_NAME || (strcmp(t->name, "f32") != 0 && strcmp(t->name, "i32") != 0)) {
      serr(s, t->span, "cast: the type must be f32 or i32");
      return none;
    }
    return rval(ir_cast(s->p, x, strcmp(t->name, "i32") == 0 ? DT_I32 : DT_F32, sp));
  }
  case BI_SUM: case BI_MEAN: case BI_AMAX: case BI_ARGMAX: {
    Value *x = eval_value(s, sc, a.pos[0]);
    if (!x)
      return none;
    uint32_t mask = all_dims(x->shape.rank);
    if (dim_node(&a, 1)) {
      int d;
      if (!dim_arg(s, sc, dim_node(&a, 1), x->shape.rank, fn, &d))
        return none;
      mask = 1u << d;
    } else if (id == BI_ARGMAX) {
      serr(s, sp, "argmax needs the dimension to reduce: argmax(x, dim)");
      return none;
    }
    bool keep = bool_kwarg(s, sc, &a, "keep", false);
    if ((id == BI_MEAN || id == BI_ARGMAX) && !need_f32(s, fn, x, sp))
      return none;
    Value *v;
    if (x->shape.rank == 0) {
      v = x;
    } else {
      v = ir_reduce(s->p, id == BI_AMAX ? RF_MAX : id == BI_ARGMAX ? RF_ARGMAX : RF_SUM, x, mask, sp);
      if (id == BI_MEAN) {
        int64_t n = shape_elems(&x->shape) / shape_elems(&v->shape);
        v = elementwise2(s, BF_MUL, v, ir_const(s->p, DT_F32, 1.0 / (double)n, sp), sp);
      }
    }
    if (keep)
      v = ir_reshape(s->p, v, keep_shape(&x->shape, mask), sp);
    return rval(v);
  }
  case BI_SOFTMAX: case BI_LOG_SOFTMAX: {
    Value *x = need_f32(s, fn, eval_value(s, sc, a.pos[0]), sp);
    int d = x ? x->shape.rank - 1 : 0;
    if (!x || (dim_node(&a, 1) && !dim_arg(s, sc, dim_node(&a, 1), x->shape.rank, fn, &d)))
      return none;
    if (x->shape.rank == 0) {
      serr(s, sp, "%s needs a tensor of rank 1 or more", fn);
      return none;
    }
    return rval(softmax(s, x, d, id == BI_LOG_SOFTMAX, sp));
  }
  case BI_CUMSUM: {
    Value *x = eval_value(s, sc, a.pos[0]);
    int d;
    if (!dim_node(&a, 1)) {
      serr(s, sp, "cumsum needs the dimension to scan: cumsum(x, dim)");
      return none;
    }
    if (!x || !dim_arg(s, sc, dim_node(&a, 1), x->shape.rank, fn, &d))
      return none;
    return rval(ir_cumsum(s->p, x, d, bool_kwarg(s, sc, &a, "exclusive", false), sp));
  }
  case BI_ONE_HOT: {
    Value *x = eval_value(s, sc, a.pos[0]);
    bool ok = true;
    int64_t n = eval_int(s, sc, a.pos[1], "one_hot's depth", &ok);
    if (!x || !ok)
      return none;
    if (x->dtype != DT_I32) {
      serr(s, a.pos[0]->span, "one_hot needs i32 indices, got %s (use cast(x, i32))", vtype(s, x));
      return none;
    }
    if (n <= 0 || x->shape.rank >= GSL_MAX_RANK) {
      serr(s, sp, n <= 0 ? "one_hot's depth must be positive" : "one_hot: result rank too large");
      return none;
    }
    return rval(ir_one_hot(s->p, x, n, sp));
  }
  case BI_GATHER: {
    Value *t = eval_value(s, sc, a.pos[0]), *ix = eval_value(s, sc, a.pos[1]);
    if (!t || !ix)
      return none;
    if (ix->dtype != DT_I32) {
      serr(s, a.pos[1]->span, "gather needs i32 indices, got %s (use cast(x, i32))", vtype(s, ix));
      return none;
    }
    if (t->shape.rank < 1 || ix->shape.rank + t->shape.rank - 1 > GSL_MAX_RANK) {
      serr(s, sp, t->shape.rank < 1 ? "gather needs a table of rank 1 or more" : "gather: result rank too large");
      return none;
    }
    return rval(ir_gather(s->p, t, ix, sp));
  }
  case BI_RESHAPE: {
    Value *x = eval_value(s, sc, a.pos[0]);
    const Node *l = a.pos[1];
    if (!x)
      return none;
    if (l->kind != AST_LIST) {
      serr(s, l->span, "reshape: expected the new shape as a list, like [4, -1]");
      return none;
    }
    if (l->list.len > GSL_MAX_RANK) {
      serr(s, l->span, "reshape: more than %d dimensions", GSL_MAX_RANK);
      return none;
    }
    Shape o = {0};
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < l->list.len; i++) {
      bool ok = true;
      int64_t d = eval_int(s, sc, l->list.items[i], "a dimension", &ok);
      if (!ok)
        return none;
      if (d == -1 && infer < 0) {
        infer = i;
      } else if (d <= 0) {
        serr(s, l->list.items[i]->span, "reshape: dimension %" PRId64 " is not positive (only one -1 may be inferred)", d);
        return none;
      } else {
        known *= d;
      }
      o.d[o.rank++] = d;
    }
    int64_t n = shape_elems(&x->shape);
    if (infer >= 0) {
      if (n % known != 0) {
        serr(s, sp, "reshape: %s cannot be viewed with shape %s", vtype(s, x), span_text(s, l->span));
        return none;
      }
      o.d[infer] = n / known;
      known = n;
    }
    if (known != n) {
      serr(s, sp, "reshape: %s has %" PRId64 " elements but the new shape %s has %" PRId64, vtype(s, x), n,
           shape_str(s->p->arena, &o), known);
      return none;
    }
    return rval(ir_reshape(s->p, x, o, sp));
  }
  case BI_TRANSPOSE: {
    Value *x = eval_value(s, sc, a.pos[0]);
    if (!x)
      return none;
    int r = x->shape.rank, perm[GSL_MAX_RANK];
    for (int i = 0; i < r; i++)
      perm[i] = r - 1 - i;
    if (a.npos > 1) {
      const Node *l = a.pos[1];
      if (l->kind != AST_LIST || l->list.len != r) {
        serr(s, l->span, "transpose: expected a permutation of the %d dimensions as a list", r);
        return none;
      }
      uint32_t seen = 0;
      for (int i = 0; i < r; i++) {
        int d;
        if (!dim_arg(s, sc, l->list.items[i], r, fn, &d))
          return none;
        if (seen & (1u << d)) {
          serr(s, l->list.items[i]->span, "transpose: dimension %d appears twice", d);
          return none;
        }
        seen |= 1u << d;
        perm[i] = d;
      }
    }
    return rval(ir_transpose(s->p, x, perm, sp));
  }
  case BI_CONCAT: {
    const Node *l = a.pos[0];
    if (l->kind != AST_LIST || l->list.len < 1) {
      serr(s, l->span, "concat: expected the tensors as a list, like [a, b]");
      return none;
    }
    Value **xs = arena_alloc(s->p->arena, sizeof(Value *) * (size_t)l->list.len);
    for (int i = 0; i < l->list.len; i++)
      if (!(xs[i] = eval_value(s, sc, l->list.items[i])))
        return none;
    int d;
    if (!dim_arg(s, sc, a.pos[1], xs[0]->shape.rank, fn, &d))
      return none;
    Shape o = xs[0]->shape;
    for (int i = 1; i < l->list.len; i++) {
      bool ok = xs[i]->shape.rank == o.rank && xs[i]->dtype == xs[0]->dtype;
      for (int j = 0; ok && j < o.rank; j++)
        ok = j == d || xs[i]->shape.d[j] == o.d[j];
      if (!ok) {
        serr(s, l->list.items[i]->span, "concat: %s does not fit beside %s along dimension %d", vtype(s, xs[i]),
             vtype(s, xs[0]), d);
        return none;
      }
      o.d[d] += xs[i]->shape.d[d];
    }
    return rval(ir_concat(s->p, xs, l->list.len, d, sp));
  }
  case BI_SLICE: {
    Value *x = eval_value(s, sc, a.pos[0]);
    int d;
    bool ok = true;
    if (!x || !dim_arg(s, sc, a.pos[1], x->shape.rank, fn, &d))
      return none;
    int64_t lo = eval_int(s, sc, a.pos[2], "slice's start", &ok);
    int64_t hi = eval_int(s, sc, a.pos[3], "slice's stop", &ok);
    if (!ok)
      return none;
    int64_t n = x->shape.d[d];
    if (lo < 0)
      lo += n;
    if (hi < 0)
      hi += n;
    if (lo < 0 || hi > n || lo >= hi) {
      serr(s, sp, "slice: [%s, %s) is not a non-empty range within dimension %d of %s (size %" PRId64 ")",
           span_text(s, a.pos[2]->span), span_text(s, a.pos[3]->span), d, vtype(s, x), n);
      return none;
    }
    return rval(ir_slice(s->p, x, d, lo, hi - lo, sp));
  }
  case BI_EINSUM: {
    const Node *t = a.pos[0];
    if (t->kind != AST_STRING) {
      serr(s, t->span, "einsum: the first argument must be a spec string like \"ij,jk->ik\"");
      return none;
    }
    Value *ops[2] = {NULL, NULL};
    for (int i = 1; i < a.npos; i++)
      if (!(ops[i - 1] = eval_value(s, sc, a.pos[i])))
        return none;
    return rval(einsum(s, t->name, ops, a.npos - 1, sp));
  }
  case BI_UNIFORM_LIKE: {
    Value *x = eval_value(s, sc, a.pos[0]);
    if (!x)
      return none;
    return rval(ir_rng(s->p, RNG_UNIFORM, 0, 1, x->shape, sp));
  }
  case BI_REPLICATE: case BI_SPLIT: case BI_SHARD: {
    Value *x = eval_value(s, sc, a.pos[0]);
    if (!x)
      return none;
    Sharding sh;
    if (!annotation_sharding(s, sc, id, &a, 1, &x->shape, &sh) ||
        !check_sharding(s, &sh, &x->shape, arena_printf(s->p->arena, "'%s'", span_text(s, a.pos[0]->span)), sp))
      return none;
    return rval(ir_annotate(s->p, x, &sh, sp));
  }
  case BI_ZEROS: case BI_ONES: case BI_NORMAL: case BI_UNIFORM:
    serr(s, sp, "%s() is an initializer: it belongs on a param or input declaration (param w: f32[4] = %s(...))",
         fn, fn);
    return none;
  default:
    die("builtin %s has no handler", fn);
  }
}

/* ---- user functions ------------------------------------------------------------------ */

static bool check_arg_type(Sema *s, Scope *fsc, const Node *arg, const Node *fnode, Value *v, Span at) {
  const Node *t = arg->a;
  DType dt = strcmp(t->name, "i32") == 0 ? DT_I32 : DT_F32;
  if (strcmp(t->name, "f32") != 0 && strcmp(t->name, "i32") != 0) {
    serr(s, t->span, "unknown type '%s' (expected f32 or i32)", t->name);
    return false;
  }
  const char *fname = fnode->name ? fnode->name : "moe";
  if (v->dtype != dt || v->shape.rank != t->list.len) {
    serr(s, at, "argument '%s' of '%s' must be %s, got %s", arg->name, fname, span_text(s, t->span), vtype(s, v));
    return false;
  }
  for (int i = 0; i < t->list.len; i++) {
    const Node *d = t->list.items[i];
    int64_t want;
    /* a shape name binds per call (shadowing any global const of that name)
     * unless an earlier argument of this call bound it */
    if (d->kind == AST_NAME && !lookup_local(fsc, d->name)) {
      Binding *b = bind(s, fsc, d->name, BK_SHAPEVAR, d->span);
      if (b)
        b->i = v->shape.d[i];
      continue;
    }
    bool ok = true;
    want = eval_int(s, fsc, d, "a dimension", &ok);
    if (!ok)
      return false;
    if (want != v->shape.d[i]) {
      serr(s, at, "argument '%s' of '%s' must be %s, got %s: dimension %d is %" PRId64 ", expected %" PRId64,
           arg->name, fname, span_text(s, t->span), vtype(s, v), i, v->shape.d[i], want);
      return false;
    }
  }
  return true;
}

static bool exec_let(Sema *s, Scope *sc, const Node *st);

static R call_fn(Sema *s, Scope *sc, const Node *fnode, const Node *call) {
  Args a;
  if (!split_args(s, call, &a))
    return none;
  if (a.nkw) {
    serr(s, a.kw[0]->span, "'%s' takes no keyword arguments", fnode->name);
    return none;
  }
  if (a.npos != fnode->list.len) {
    serr(s, call->span, "'%s' takes %d argument%s, %d given", fnode->name, fnode->list.len,
         fnode->list.len == 1 ? "" : "s", a.npos);
    diag_note(fnode->span, "'%s' is defined here", fnode->name);
    return none;
  }
  if (s->depth == MAX_DEPTH) {
    serr(s, call->span, "calls nest more than %d deep (is '%s' recursive?)", MAX_DEPTH, fnode->name);
    return none;
  }
  Value *vals[8];
  for (int i = 0; i < a.npos; i++)
    if (!(vals[i] = eval_value(s, sc, a.pos[i])))
      return none;
  Scope fsc = {&s->global, NULL};
  for (int i = 0; i < a.npos; i++) {
    const Node *arg = fnode->list.items[i];
    if (arg->a && !check_arg_type(s, &fsc, arg, fnode, vals[i], a.pos[i]->span))
      return none;
    Binding *b = bind(s, &fsc, arg->name, BK_VALUE, arg->span);
    if (!b)
      return none;
    b->v = vals[i];
  }
  s->stack[s->depth].fn = fnode->name;
  s->stack[s->depth].call = call->span;
  if (s->depth++ == 0)
    s->p->site = call->span; /* values inlined from here carry the outermost call */
  R result = none;
  bool ok = true, returned = false;
  for (int i = 0; i < fnode->list2.len && ok; i++) {
    const Node *st = fnode->list2.items[i];
    if (returned) {
      serr(s, st->span, "statement after return");
      ok = false;
      break;
    }
    if (st->kind == AST_LET) {
      ok = exec_let(s, &fsc, st);
    } else if (st->kind == AST_RETURN) {
      returned = true;
      if (st->list.len == 1) {
        result = eval(s, &fsc, st->list.items[0]);
        if (result.k == R_TUPLE) {
          serr(s, st->span, "return of a call that gives several values: name them with let first");
          result = none;
        }
      } else {
        Value **vs = arena_alloc(s->p->arena, sizeof(Value *) * (size_t)st->list.len);
        for (int j = 0; j < st->list.len; j++)
          if (!(vs[j] = eval_value(s, &fsc, st->list.items[j])))
            ok = false;
        if (ok) {
          result = none;
          result.k = R_TUPLE;
          result.vs = vs;
          result.n = st->list.len;
        }
      }
      ok = ok && result.k != R_NONE;
    } else if (st->kind != AST_ERROR) {
      serr(s, st->span, "only let and return may stand in a function body");
      ok = false;
    }
  }
  if (ok && !returned)
    serr(s, fnode->span, "function '%s' ends without return", fnode->name);
  if (--s->depth == 0)
    s->p->site = (Span){0};
  return ok && returned ? result : none;
}

/* ---- expressions -------------------------------------------------------------------- */

static R eval_index(Sema *s, Scope *sc, const Node *n) {
  Value *x = eval_value(s, sc, n->a);
  if (!x)
    return none;
  for (int k = 0; k < n->list.len; k++) {
    const Node *ix = n->list.items[k];
    if (x->shape.rank == 0) {
      serr(s, ix->span, "cannot index a scalar");
      return none;
    }
    R r = eval(s, sc, ix);
    if (r.k == R_NONE)
      return none;
    Shape rest = {0};
    for (int i = 1; i < x->shape.rank; i++)
      rest.d[rest.rank++] = x->shape.d[i];
    if (r.k == R_INT || (r.k == R_FLOAT && r.f == floor(r.f))) {
      int64_t i = r.k == R_INT ? r.i : (int64_t)r.f;
      int64_t n0 = x->shape.d[0];
      if (i < -n0 || i >= n0) {
        serr(s, ix->span, "index %" PRId64 " is out of range for dimension 0 of %s", i, vtype(s, x));
        return none;
      }
      if (i < 0)
        i += n0;
      x = ir_reshape(s->p, ir_slice(s->p, x, 0, i, 1, n->span), rest, n->span);
    } else if (r.k == R_VALUE && r.v->dtype == DT_I32 && r.v->shape.rank == 0) {
      x = ir_gather(s->p, x, r.v, n->span);
    } else {
      serr(s, ix->span, "an index must be an integer or an i32 scalar");
      return none;
    }
  }
  return rval(x);
}

static R eval(Sema *s, Scope *sc, const Node *n) {
  switch (n->kind) {
  case AST_INT:
    return rint_(n->ival);
  case AST_FLOAT:
    return rfloat(n->fval);
  case AST_BOOL:
    return rint_(n->flag);
  case AST_STRING:
    serr(s, n->span, "a string may only stand as einsum's spec");
    return none;
  case AST_NAME: {
    Binding *b = lookup(sc, n->name);
    if (!b) {
      if (strcmp(n->name, "_") == 0)
        serr(s, n->span, "'_' may only stand in a shard() list");
      else if (builtin_lookup(n->name) >= 0)
        serr(s, n->span, "'%s' is a builtin function: call it", n->name);
      else if (suggest(sc, n->name, false))
        serr(s, n->span, "unknown name '%s'; did you mean '%s'?", n->name, suggest(sc, n->name, false));
      else
        serr(s, n->span, "unknown name '%s'", n->name);
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
      serr(s, n->span, "'%s' is a function: call it", n->name);
      return none;
    case BK_POISON:
      return none;
    }
    return none;
  }
  case AST_BINARY: {
    R a = eval(s, sc, n->a);
    R b = eval(s, sc, n->b);
    return binary(s, n->op, a, b, n->span);
  }
  case AST_UNARY: {
    R a = eval(s, sc, n->a);
    if (a.k == R_INT)
      return rint_(-a.i);
    if (a.k == R_FLOAT)
      return rfloat(-a.f);
    if (a.k == R_VALUE)
      return rval(ir_unary(s->p, UF_NEG, a.v, n->span));
    if (a.k == R_TUPLE)
      serr(s, n->span, "unary '-' applied to several values");
    return none;
  }
  case AST_CALL: {
    Binding *b = lookup(sc, n->name);
    if (b && b->kind == BK_FN)
      return call_fn(s, sc, b->fn, n);
    int id = builtin_lookup(n->name);
    if (id >= 0)
      return call_builtin(s, sc, id, n);
    if (b)
      serr(s, n->span, "'%s' is not a function", n->name);
    else if (suggest(sc, n->name, true))
      serr(s, n->span, "unknown function '%s'; did you mean '%s'?", n->name, suggest(sc, n->name, true));
    else
      serr(s, n->span, "unknown function '%s'", n->name);
    return none;
  }
  case AST_INDEX:
    return eval_index(s, sc, n);
  case AST_LIST:
  case AST_TUPLE:
    serr(s, n->span, "a %s may only stand as an argument of reshape, transpose, concat or shard",
         n->kind == AST_LIST ? "list" : "tuple");
    return none;
  case AST_MOE:
    serr(s, n->span, "moe blocks are not supported yet (they arrive with the mixture-of-experts issue)");
    return none;
  case AST_KWARG:
    serr(s, n->span, "keyword argument outside a call");
    return none;
  case AST_ERROR:
    return none;
  default:
    serr(s, n->span, "a %s is not an expression", ast_kind_name(n->kind));
    return none;
  }
}

/* ---- statements ------------------------------------------------------------------- */

static void poison(Sema *s, Scope *sc, const Node *st) {
  for (int i = 0; i < st->list.len; i++)
    if (!lookup_local(sc, st->list.items[i]->name))
      bind(s, sc, st->list.items[i]->name, BK_POISON, st->list.items[i]->span);
}

static bool exec_let(Sema *s, Scope *sc, const Node *st) {
  R r = eval(s, sc, st->a);
  if (r.k == R_NONE) {
    poison(s, sc, st);
    return false;
  }
  int want = st->list.len;
  int have = r.k == R_TUPLE ? r.n : 1;
  if (want != have) {
    serr(s, st->span, "let binds %d name%s but the expression gives %d value%s", want, want == 1 ? "" : "s",
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
    Binding *b = bind(s, sc, nm->name, k, nm->span);
    if (!b)
      return false;
    b->i = one.i;
    b->f = one.f;
    b->v = one.v;
    if (one.v && !one.v->name && one.v->op != OP_PARAM && one.v->op != OP_INPUT)
      one.v->name = nm->name;
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

static void exec_const(Sema *s, const Node *st) {
  int di;
  const Define *d = find_define(s, st->name, &di);
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
        serr(s, st->span, "-D %s=%s: the value is not a number", d->name, d->value);
        return;
      }
      r = rfloat(fv);
    }
  } else {
    r = eval(s, &s->global, st->a);
    if (r.k == R_NONE)
      return;
    if (!is_num(r)) {
      serr(s, st->a->span, "const %s must be a compile-time number", st->name);
      return;
    }
  }
  Binding *b = bind(s, &s->global, st->name, r.k == R_INT ? BK_INT : BK_FLOAT, st->span);
  if (b) {
    b->i = r.i;
    b->f = r.f;
  }
}

static void exec_mesh(Sema *s, const Node *st) {
  if (s->have_mesh) {
    serr(s, st->span, "a program has at most one mesh");
    return;
  }
  if (s->have_tensor) {
    serr(s, st->span, "the mesh must be declared before any param or input");
    return;
  }
  s->have_mesh = true;
  Mesh *m = &s->p->mesh;
  m->span = st->span;
  if (st->list.len > GSL_MAX_AXES) {
    serr(s, st->span, "a mesh has at most %d axes", GSL_MAX_AXES);
    return;
  }
  int64_t total = 1;
  for (int i = 0; i < st->list.len; i++) {
    const Node *ax = st->list.items[i];
    bool ok = true;
    int64_t n = eval_int(s, &s->global, ax->a, "a mesh axis size", &ok);
    if (!ok)
      continue;
    if (n < 1 || n > (1 << 20)) {
      serr(s, ax->a->span, "mesh axis '%s' has size %" PRId64 "; sizes run from 1 to %d", ax->name, n, 1 << 20);
      continue;
    }
    if (axis_index(s, ax->name) >= 0) {
      serr(s, ax->span, "mesh axis '%s' is declared twice", ax->name);
      continue;
    }
    if (strcmp(ax->name, "_") == 0) {
      serr(s, ax->span, "'_' cannot name a mesh axis");
      continue;
    }
    total *= n;
    if (total > (1 << 24)) {
      serr(s, st->span, "the mesh has more than %d devices", 1 << 24);
      return;
    }
    m->name[m->naxes] = ax->name;
    m->size[m->naxes++] = n;
  }
}

static bool read_type(Sema *s, const Node *t, DType *dt, Shape *sh) {
  if (strcmp(t->name, "f32") == 0)
    *dt = DT_F32;
  else if (strcmp(t->name, "i32") == 0)
    *dt = DT_I32;
  else {
    serr(s, t->span, "unknown type '%s' (expected f32 or i32)", t->name);
    return false;
  }
  if (t->list.len > GSL_MAX_RANK) {
    serr(s, t->span, "a tensor has at most %d dimensions", GSL_MAX_RANK);
    return false;
  }
  sh->rank = 0;
  int64_t total = 1;
  for (int i = 0; i < t->list.len; i++) {
    bool ok = true;
    int64_t d = eval_int(s, &s->global, t->list.items[i], "a dimension", &ok);
    if (!ok)
      return false;
    if (d < 1) {
      serr(s, t->list.items[i]->span, "dimension %d is %" PRId64 "; dimensions must be positive", i, d);
      return false;
    }
    if (d > GSL_MAX_ELEMS / total) {
      serr(s, t->span, "the tensor has more than 2^40 elements");
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
static void exec_decl(Sema *s, const Node *st) {
  if (st->kind == AST_CONST)
    exec_const(s, st);
  else
    exec_tensor_checked(s, st);
  if (!lookup_local(&s->global, st->name))
    bind(s, &s->global, st->name, BK_POISON, st->span);
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
  const char *what = arena_printf(s->p->arena, "%s '%s'", t.kind == TK_PARAM ? "param" : "input", t.name);
  if (st->b) { /* the sharding annotation, without its tensor argument */
    const Node *an = st->b;
    int id = an->kind == AST_CALL ? builtin_lookup(an->name) : -1;
    Args a;
    if (id != BI_REPLICATE && id != BI_SPLIT && id != BI_SHARD) {
      serr(s, an->span, "expected a sharding annotation: replicate(), split(dim), split(dim, axis) or shard([...])");
      return;
    }
    if (!split_args(s, an, &a))
      return;
    int lo = id == BI_REPLICATE ? 0 : 1, hi = id == BI_SPLIT ? 2 : lo;
    if (a.npos < lo || a.npos > hi || a.nkw) {
      serr(s, an->span, "on a declaration, %s takes %s", an->name,
           id == BI_REPLICATE ? "no arguments: replicate()"
           : id == BI_SPLIT   ? "a dimension and optionally an axis: split(0) or split(0, d)"
                              : "one list: shard([a, _])");
      return;
    }
    if (!annotation_sharding(s, &s->global, id, &a, 0, &sh, &t.sh) || !check_sharding(s, &t.sh, &sh, what, an->span))
      return;
    t.annotated = true;
  }
  if (st->c) {
    const Node *in = st->c;
    int id = in->kind == AST_CALL ? builtin_lookup(in->name) : -1;
    Args a;
    if (id != BI_ZEROS && id != BI_ONES && id != BI_NORMAL && id != BI_UNIFORM) {
      serr(s, in->span, "expected an initializer: zeros(), ones(), normal(std) or uniform(lo, hi)");
      return;
    }
    if (!split_args(s, in, &a) || !check_builtin_args(s, id, &a))
      return;
    bool ok = true;
    if (id == BI_NORMAL) {
      t.init = INIT_NORMAL;
      t.a = eval_number(s, &s->global, a.pos[0], "normal's std", &ok);
      if (ok && !(t.a >= 0)) {
        serr(s, a.pos[0]->span, "normal's std must not be negative");
        ok = false;
      }
    } else if (id == BI_UNIFORM) {
      t.init = INIT_UNIFORM;
      t.a = eval_number(s, &s->global, a.pos[0], "uniform's low end", &ok);
      t.b = eval_number(s, &s->global, a.pos[1], "uniform's high end", &ok);
      if (ok && !(t.a < t.b)) {
        serr(s, in->span, "uniform(lo, hi) needs lo < hi");
        ok = false;
      }
    } else {
      t.init = id == BI_ZEROS ? INIT_ZEROS : INIT_ONES;
    }
    if (!ok)
      return;
    if (dt == DT_I32 && t.init == INIT_NORMAL) { /* uniform(0, V) on i32 gives ids 0..V-1 */
      serr(s, in->span, "normal() draws floats; %s is i32 (uniform(lo, hi) draws integers lo..hi-1)", what);
      return;
    }
    if (t.init == INIT_NORMAL || t.init == INIT_UNIFORM)
      t.stream = s->p->nstreams++;
  }
  Binding *b = bind(s, &s->global, st->name, BK_VALUE, st->span);
  if (!b)
    return;
  b->v = ir_tensor(s->p, &t);
}

static void exec_output(Sema *s, const Node *st) {
  Program *p = s->p;
  for (int i = 0; i < st->list.len; i++) {
    const Node *nm = st->list.items[i];
    Binding *b = lookup(&s->global, nm->name);
    if (!b) {
      serr(s, nm->span, "unknown name '%s'", nm->name);
      continue;
    }
    if (b->kind == BK_POISON)
      continue;
    if (b->kind != BK_VALUE) {
      serr(s, nm->span, "'%s' is not a tensor; only tensors can be outputs", nm->name);
      continue;
    }
    bool dup = false;
    for (int j = 0; j < p->noutputs; j++)
      dup |= strcmp(p->outputs[j].name, nm->name) == 0;
    if (dup) {
      serr(s, nm->span, "'%s' is already an output", nm->name);
      continue;
    }
    ir_output(p, nm->name, b->v, nm->span);
  }
}

static void exec_block(Sema *s, const NodeList *stmts);

static const char *find_import(Sema *s, const char *name) {
  const char *file = arena_printf(s->p->arena, "%s.gsl", name);
  int n = s->opt ? s->opt->ninclude : 0;
  for (int i = 0; i <= n; i++) {
    const char *dir = i < n ? s->opt->include_dirs[i] : (s->opt ? s->opt->stdlib_dir : NULL);
    if (!dir)
      continue;
    const char *path = arena_printf(s->p->arena, "%s/%s", dir, file);
    if (access(path, R_OK) == 0)
      return path;
  }
  return NULL;
}

static void exec_import(Sema *s, const Node *st) {
  if (s->depth) {
    serr(s, st->span, "import may only stand at the top level");
    return;
  }
  const char *name = st->name;
  if (!*name || strchr(name, '/') || strstr(name, "..")) {
    serr(s, st->span, "import \"%s\": expected a module name like \"nn\"", name);
    return;
  }
  const char *path = find_import(s, name);
  if (!path) {
    serr(s, st->span, "cannot find module \"%s\" (looked for %s.gsl in the -I directories and in %s)", name, name,
         s->opt && s->opt->stdlib_dir ? s->opt->stdlib_dir : "the stdlib");
    return;
  }
  char *real = realpath(path, NULL);
  const char *key = arena_strdup(s->p->arena, real ? real : path);
  free(real);
  for (int i = 0; i < s->nimported; i++)
    if (strcmp(s->imported[i], key) == 0)
      return;
  s->imported = xrealloc(s->imported, sizeof(char *) * (size_t)(s->nimported + 1));
  s->imported[s->nimported++] = key;
  Source *src = source_load(path);
  if (!src) {
    serr(s, st->span, "cannot read module \"%s\" at %s: %s", name, path, strerror(errno));
    return;
  }
  /* the source lives as long as the program: its spans point into it */
  Source *kept = arena_alloc(s->p->arena, sizeof *kept);
  kept->path = arena_strdup(s->p->arena, src->path);
  kept->len = src->len;
  char *text = arena_alloc(s->p->arena, src->len + 1);
  memcpy(text, src->text, src->len + 1);
  kept->text = text;
  source_free(src);
  Node *root = parse_source(kept, s->ast);
  if (!root) {
    diag_note(st->span, "imported here");
    return;
  }
  exec_block(s, &root->list);
}

static void exec_block(Sema *s, const NodeList *stmts) {
  for (int i = 0; i < stmts->len; i++) {
    const Node *st = stmts->items[i];
    switch (st->kind) {
    case AST_IMPORT:
      exec_import(s, st);
      break;
    case AST_MESH:
      exec_mesh(s, st);
      break;
    case AST_CONST:
    case AST_PARAM:
    case AST_INPUT:
      exec_decl(s, st);
      break;
    case AST_FN: {
      Scope tmp = {NULL, NULL};
      bool ok = true;
      for (int j = 0; j < st->list.len && ok; j++)
        ok = bind(s, &tmp, st->list.items[j]->name, BK_VALUE, st->list.items[j]->span) != NULL;
      Binding *b = ok ? bind(s, &s->global, st->name, BK_FN, st->span) : NULL;
      if (b)
        b->fn = st;
      break;
    }
    case AST_LET:
      exec_let(s, &s->global, st);
      break;
    case AST_OUTPUT:
      exec_output(s, st);
      break;
    case AST_RETURN:
      serr(s, st->span, "return outside a function");
      break;
    case AST_TRAIN:
      serr(s, st->span, "train is not supported yet (training arrives with the autodiff issue)");
      break;
    case AST_ERROR:
      break;
    default:
      serr(s, st->span, "a %s cannot stand as a statement", ast_kind_name(st->kind));
      break;
    }
  }
}

Program *sema_program(const Node *root, const Source *src, Arena *ast_arena, const SemaOptions *opt) {
  Sema s = {0};
  s.p = ir_new(src ? src->path : NULL);
  s.ast = ast_arena;
  s.opt = opt;
  s.define_used = xcalloc((size_t)(opt ? opt->ndefines : 0) + 1, 1);
  int before = diag_errors();
  exec_block(&s, &root->list);
  for (int i = 0; opt && i < opt->ndefines; i++)
    if (!s.define_used[i] && diag_errors() == before) {
      int j;
      if (find_define(&s, opt->defines[i].name, &j) && j == i)
        diag_fatal("-D %s: the program has no const named %s", opt->defines[i].name, opt->defines[i].name);
    }
  free(s.define_used);
  free(s.imported);
  if (diag_errors() != before) {
    ir_free(s.p);
    return NULL;
  }
  ir_dce(s.p);
  return s.p;
}
