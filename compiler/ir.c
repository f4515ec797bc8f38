/* ir.c — the tensor IR: its op tables, building it, rewriting it,
 * printing it.
 *
 * A Program is an SSA graph kept as one array of Values in program order
 * (every operand before its users), plus the params and inputs (Tensors) and
 * the outputs that root it. Each Value is one tensor with a dtype, a shape,
 * a source span, its op's attributes (one struct, copied whole) and a
 * sharding slot.
 *
 * Per-op facts come from ops.def, unary.def and binary.def, compiled here
 * into the tables that every pass consults (ir_op, the fold functions).
 * The builder (ir_unary, ir_einsum, ...) is the one way a pass makes IR: it
 * derives each result's dtype and shape from its operands, so sema,
 * autodiff and the moe vectorizer all build the same well-formed values.
 * Every call takes a Build, which the pass makes (build_at) and passes:
 * the program to build into and the modes of what is built (the pass,
 * the call site and region stamped on each value, and whether products
 * autocast to bf16). The program holds none of them, so no mode outlives
 * the code that chose it.
 * The rewriter (ir_rewrite) copies a program through a value map, its
 * notes for the reports with it, which is how the partitioner makes the
 * SPMD program; a value made to stand for another takes its site, pass,
 * region, name and sharding in one call (ir_inherit); the inliner (ir_inline)
 * copies an IR function (a program of its own, ir_new_fn, whose tensors
 * are its parameters and whose outputs are its results) into the program
 * it was made for, which is how autodiff applies the optimizer's update
 * that sema compiled from stdlib/optim.gsl. optim.def's table lives here
 * too, below sema, autodiff and codegen, which all read it. So does
 * ir_index_sources, which follows an op's indices back through the ops
 * that move elements (OF_MOVE) to the inputs they come from, on the global
 * or the SPMD program alike, for codegen's run-time index checks. And so
 * does the one count of a value's uses (ir_uses: the operand slots that
 * read it, by consumer in program order, and the outputs that name it),
 * for every pass that asks how a value is read.
 *
 * The text form (--emit-ir) is one line per value:
 *   %7 h: f32[8, 32] = einsum "bi,ij->bj" %3, %5   ; mlp.gsl:12
 * (the comment names the source line that produced the value; for code
 * inlined from an imported module, that module's line)
 * with the sharding in braces once one is known, e.g. {[d, _]} or
 * {[_, _] partial(d)}. The verifier is verify.c. */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "gslc.h"
#include "gslrt.h" /* bf16 rounding */

/* ---- the op tables ---------------------------------------------------------- */

static const OpInfo op_table[] = {
#define X(op, s, n, cls, lvl, fl, d, ds, sh) {s, n, cls, lvl, fl, #d, (unsigned)(ds)},
#include "ops.def"
#undef X
};

const OpInfo *ir_op(Op op) {
  if ((unsigned)op >= OP__COUNT)
    die("op %d is not in ops.def", (int)op);
  return &op_table[op];
}

const char *op_name(Op op) { return ir_op(op)->name; }

static const struct {
  const char *name; /* as printed */
  bool int_ok;      /* defined on i32 */
} unary_table[] = {
#define X(id, name, fold, int_ok, d) {name, int_ok},
#include "unary.def"
#undef X
};

static const struct {
  const char *name; /* as printed */
  bool compare;     /* yields 1/0 */
} binary_table[] = {
#define X(id, name, sym, fold, cmp, dx, dy) {name, cmp},
#include "binary.def"
#undef X
};

static const char *const reduce_names[] = {"sum", "max", "argmax"};
static const char *const dist_names[] = {"uniform", "normal"};

const char *unary_fn_name(int fn) {
  if (fn < 0 || fn >= UF__COUNT)
    die("unary function %d is not in unary.def", fn);
  return unary_table[fn].name;
}

bool unary_int_ok(int fn) {
  unary_fn_name(fn);
  return unary_table[fn].int_ok;
}

double ir_fold_unary(int fn, double x) {
  switch (fn) {
#define X(id, name, fold, int_ok, d) \
  case UF_##id:                      \
    return fold;
#include "unary.def"
#undef X
  default:
    die("unary function %d is not in unary.def", fn);
  }
}

const char *binary_fn_name(int fn) {
  if (fn < 0 || fn >= BF__COUNT)
    die("binary function %d is not in binary.def", fn);
  return binary_table[fn].name;
}

bool binary_is_compare(int fn) {
  binary_fn_name(fn);
  return binary_table[fn].compare;
}

double ir_fold_binary(int fn, double x, double y) {
  switch (fn) {
#define X(id, name, sym, fold, cmp, dx, dy) \
  case BF_##id:                        \
    return fold;
#include "binary.def"
#undef X
  default:
    die("binary function %d is not in binary.def", fn);
  }
}

bool ir_fold_binary_int(int fn, int64_t x, int64_t y, int64_t *out) {
  int64_t r;
  switch (fn) {
  case BF_ADD:
    if (__builtin_add_overflow(x, y, &r))
      return false;
    break;
  case BF_SUB:
    if (__builtin_sub_overflow(x, y, &r))
      return false;
    break;
  case BF_MUL:
    if (__builtin_mul_overflow(x, y, &r))
      return false;
    break;
  case BF_DIV: /* truncating, as C and the generated code divide */
    if (y == 0 || (x == INT64_MIN && y == -1))
      return false;
    r = x / y;
    break;
  case BF_MAX: r = x > y ? x : y; break;
  case BF_MIN: r = x < y ? x : y; break;
  case BF_POW: return false; /* integer powers are folded in floating point */
  case BF_LT: r = x < y; break;
  case BF_LE: r = x <= y; break;
  case BF_GT: r = x > y; break;
  case BF_GE: r = x >= y; break;
  case BF_EQ: r = x == y; break;
  case BF_NE: r = x != y; break;
  default:
    die("binary function %d has no integer fold", fn);
  }
  *out = r;
  return true;
}

const char *reduce_fn_name(int fn) {
  if (fn < 0 || fn > RF_ARGMAX)
    die("reduce function %d unknown", fn);
  return reduce_names[fn];
}

const char *ir_pass_name(Pass pass) {
  static const char *const names[] = {"forward", "backward", "update", "recompute"};
  return pass >= 0 && pass < (int)(sizeof names / sizeof names[0]) ? names[pass] : "?";
}

const char *dtype_name(DType d) { return d == DT_I32 ? "i32" : d == DT_BF16 ? "bf16" : "f32"; }

/* ---- optim.def ----------------------------------------------------------------- */

static const OptimInfo optim_table[] = {
#define X(id, name, fn, states, step, kw) {name, fn, states, step, kw},
#include "optim.def"
#undef X
};

const OptimInfo *ir_optim(int id) {
  if (id < 0 || id >= OPT__COUNT)
    die("optimizer %d is not in optim.def", id);
  return &optim_table[id];
}

int ir_optim_lookup(const char *name) {
  for (int i = 0; i < OPT__COUNT; i++)
    if (strcmp(optim_table[i].name, name) == 0)
      return i;
  return -1;
}

/* word k (from 0) of a space-separated list into buf; false past the last */
static bool word(const char *list, int k, char *buf, size_t cap) {
  const char *q = list;
  for (;;) {
    while (*q == ' ')
      q++;
    if (!*q)
      return false;
    size_t n = strcspn(q, " ");
    if (k-- == 0) {
      if (n >= cap)
        die("optim.def word '%.*s' too long", (int)n, q);
      memcpy(buf, q, n);
      buf[n] = '\0';
      return true;
    }
    q += n;
  }
}

bool ir_optim_state(int id, int k, char *name, size_t cap) { return word(ir_optim(id)->states, k, name, cap); }

bool ir_optim_keyword(int id, int k, char *name, size_t cap, double *dflt) {
  char w[96];
  if (!word(ir_optim(id)->keywords, k, w, sizeof w))
    return false;
  char *eq = strchr(w, '=');
  if (!eq || (size_t)(eq - w) >= cap)
    die("optim.def keyword '%s' is not NAME=DEFAULT", w);
  memcpy(name, w, (size_t)(eq - w));
  name[eq - w] = '\0';
  *dflt = strtod(eq + 1, NULL);
  return true;
}

/* ---- decay.def, the schedule and the signals ---------------------------------- */

static const struct {
  const char *name; /* as written after `decay =` */
  const char *fn;   /* its stdlib/optim.gsl function */
  double peak;      /* the largest multiple of lr - min_lr its arithmetic reaches */
  const char *at;   /* the expression that reaches it */
} decay_table[] = {
#define X(id, name, fn, peak, at) {name, fn, peak, at},
#include "decay.def"
#undef X
};

const char *ir_decay_name(int id) {
  if (id < 0 || id >= DECAY__COUNT)
    die("decay %d is not in decay.def", id);
  return decay_table[id].name;
}

const char *ir_decay_fn(int id) {
  ir_decay_name(id);
  return decay_table[id].fn;
}

double ir_decay_peak(int id, const char **at) {
  ir_decay_name(id);
  *at = decay_table[id].at;
  return decay_table[id].peak;
}

int ir_decay_lookup(const char *name) {
  for (int i = 0; i < DECAY__COUNT; i++)
    if (strcmp(decay_table[i].name, name) == 0)
      return i;
  return -1;
}

bool ir_train_scheduled(const Train *t) { return t->warmup > 0 || t->decay != DECAY_CONSTANT; }

const char *ir_optim_desc(Arena *a, const Train *t) {
  char kw[96];
  double dflt;
  const char *d = arena_printf(a, "%s(", ir_optim(t->opt)->name);
  for (int k = 0; ir_optim_keyword(t->opt, k, kw, sizeof kw, &dflt); k++)
    d = arena_printf(a, "%s%s%s=%.9g", d, k ? ", " : "", kw, t->args[k]);
  if (t->warmup > 0)
    d = arena_printf(a, "%s, warmup=%.9g", d, t->warmup);
  if (t->decay != DECAY_CONSTANT)
    d = arena_printf(a, "%s, decay=%s, decay_steps=%.9g, min_lr=%.9g", d, ir_decay_name(t->decay), t->decay_steps,
                     t->min_lr);
  if (t->clip > 0)
    d = arena_printf(a, "%s, clip=%.9g", d, t->clip);
  return arena_printf(a, "%s)", d);
}

/* ---- programs ---------------------------------------------------------------- */


Program *ir_new(const char *path) {
  Arena *a = arena_new();
  Program *p = arena_alloc(a, sizeof *p);
  p->arena = a;
  p->path = arena_strdup(a, path ? path : "<none>");
  return p;
}

Program *ir_new_fn(Program *home) {
  Program *f = arena_alloc(home->arena, sizeof *f);
  f->arena = home->arena;
  f->home = home;
  f->path = home->path;
  f->mesh = home->mesh;
  return f;
}

void ir_free(Program *p) {
  if (!p)
    return;
  for (int i = 0; i < p->train.nupdates; i++)
    if (p->train.updates[i]->home == p)
      ir_free(p->train.updates[i]);
  free(p->train.updates);
  if (p->train.schedule && p->train.schedule->home == p)
    ir_free(p->train.schedule);
  free(p->values);
  free(p->tensors);
  free(p->outputs);
  free(p->consts);
  free(p->regions);
  if (!p->home)
    arena_free(p->arena);
}

Build build_at(Program *p, Pass pass, Span site, int region) {
  return (Build){p, pass, site, region, p->precision == DT_BF16 && pass == PASS_FORWARD};
}

Build build_in(Build b, Span site, int region) {
  b.site = site;
  b.region = region;
  return b;
}

Build build_f32(Build b) {
  b.autocast = false;
  return b;
}

Value *ir_add(const Build *bd, Op op, DType dt, Shape shape, Span sp, int nargs, Value **args) {
  Program *p = bd->p;
  if (p->nvalues == p->capvalues) {
    p->capvalues = p->capvalues ? 2 * p->capvalues : 64;
    p->values = xrealloc(p->values, (size_t)p->capvalues * sizeof *p->values);
  }
  Value *v = arena_alloc(p->arena, sizeof *v);
  v->id = p->nvalues;
  v->op = op;
  v->dtype = dt;
  v->shape = shape;
  v->gshape = shape;
  v->span = sp;
  v->site = bd->site.src ? bd->site : sp;
  v->pass = bd->pass;
  v->region = bd->region;
  v->nargs = nargs;
  if (nargs) {
    v->args = arena_alloc(p->arena, (size_t)nargs * sizeof *v->args);
    memcpy(v->args, args, (size_t)nargs * sizeof *args);
  }
  for (int i = 0; i < GSL_MAX_RANK; i++)
    v->perm[i] = -1;
  p->values[p->nvalues++] = v;
  return v;
}

Shape shape_of(int rank, const int64_t *d) {
  Shape s = {0};
  if (rank < 0 || rank > GSL_MAX_RANK)
    die("rank %d out of range", rank);
  s.rank = rank;
  for (int i = 0; i < rank; i++)
    s.d[i] = d[i];
  return s;
}

int64_t shape_elems(const Shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++)
    n *= s->d[i];
  return n;
}

bool shape_eq(const Shape *a, const Shape *b) {
  if (a->rank != b->rank)
    return false;
  for (int i = 0; i < a->rank; i++)
    if (a->d[i] != b->d[i])
      return false;
  return true;
}

bool shape_broadcast(const Shape *a, const Shape *b, Shape *out, int *bad_dim) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  Shape o = {0};
  o.rank = r;
  for (int i = 0; i < r; i++) {
    int ia = i - (r - a->rank), ib = i - (r - b->rank);
    int64_t da = ia >= 0 ? a->d[ia] : 1, db = ib >= 0 ? b->d[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      if (bad_dim)
        *bad_dim = i;
      return false;
    }
    o.d[i] = da == 1 ? db : da;
  }
  *out = o;
  return true;
}

const char *shape_str(Arena *a, const Shape *s) {
  char buf[32 * GSL_MAX_RANK + 4];
  size_t n = 0;
  buf[n++] = '[';
  for (int i = 0; i < s->rank; i++)
    n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%" PRId64, i ? ", " : "", s->d[i]);
  buf[n++] = ']';
  buf[n] = '\0';
  return arena_strdup(a, buf);
}

/* ---- growing strings -------------------------------------------------------- */

/* A string built piece by piece, as long as it needs to be. */
typedef struct Buf {
  char *s;    /* malloc'ed, NUL-terminated */
  size_t len; /* bytes before the NUL */
  size_t cap; /* bytes allocated */
} Buf;

static void buf_printf(Buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0)
    die("vsnprintf failed");
  if (b->len + (size_t)n + 1 > b->cap) {
    b->cap = 2 * (b->len + (size_t)n + 1);
    b->s = xrealloc(b->s, b->cap);
  }
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

/* b's text, moved into arena a */
static const char *buf_done(Buf *b, Arena *a) {
  const char *s = arena_strdup(a, b->s ? b->s : "");
  free(b->s);
  return s;
}

const char *sharding_str(Arena *a, const Program *p, const Value *v) {
  Buf b = {0};
  buf_printf(&b, "[");
  for (int i = 0; i < v->shape.rank; i++) {
    if (i)
      buf_printf(&b, ", ");
    int k = v->sh.naxes[i];
    if (k == 0)
      buf_printf(&b, "_");
    for (int j = 0; j < k; j++)
      buf_printf(&b, "%s%s", k > 1 && j == 0 ? "(" : (j ? ", " : ""), p->mesh.name[v->sh.axes[i][j]]);
    if (k > 1)
      buf_printf(&b, ")");
  }
  buf_printf(&b, "]");
  if (v->sh.partial) {
    buf_printf(&b, " partial(");
    bool first = true;
    for (int ax = 0; ax < p->mesh.naxes; ax++)
      if (v->sh.partial & (1u << ax)) {
        buf_printf(&b, "%s%s", first ? "" : ", ", p->mesh.name[ax]);
        first = false;
      }
    buf_printf(&b, ")");
  }
  return buf_done(&b, a);
}

/* ---- einsum specs -------------------------------------------------------------- */

static bool ein_fail(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return false;
}

bool ein_parse(const char *text, int nin, EinsumSpec *out, char *err, size_t errlen) {
  EinsumSpec z;
  memset(&z, 0, sizeof z);
  char buf[128];
  size_t n = 0;
  for (const char *c = text; *c; c++)
    if (!isspace((unsigned char)*c)) {
      if (n + 1 >= sizeof buf)
        return ein_fail(err, errlen, ": the spec is too long");
      buf[n++] = *c;
    }
  buf[n] = '\0';
  char *arrow = strstr(buf, "->");
  if (arrow)
    *arrow = '\0';
  int k = 0;
  for (char *tok = buf;; k++) {
    char *comma = strchr(tok, ',');
    if (comma)
      *comma = '\0';
    if (k >= 2)
      return ein_fail(err, errlen, " has more than two operands");
    if (strlen(tok) > GSL_MAX_RANK)
      return ein_fail(err, errlen, ": operand %d has more than %d indices", k + 1, GSL_MAX_RANK);
    strcpy(z.in[k], tok);
    if (!comma)
      break;
    tok = comma + 1;
  }
  z.nin = k + 1;
  if (z.nin != nin)
    return ein_fail(err, errlen, " names %d operand%s but %d %s given", z.nin, z.nin == 1 ? "" : "s", nin,
                    nin == 1 ? "is" : "are");
  if (arrow) {
    if (strlen(arrow + 2) > GSL_MAX_RANK)
      return ein_fail(err, errlen, ": the result has more than %d indices", GSL_MAX_RANK);
    strcpy(z.out, arrow + 2);
  } else { /* numpy's implicit form: letters used once, alphabetical */
    int m = 0;
    for (char c = 'A'; c <= 'z'; c++) {
      int count = 0;
      for (int i = 0; i < z.nin; i++)
        count += strchr(z.in[i], c) != NULL;
      if (count == 1 && isalpha((unsigned char)c) && m < GSL_MAX_RANK)
        z.out[m++] = c;
    }
  }
  for (int i = 0; i <= z.nin; i++) {
    const char *t = i < z.nin ? z.in[i] : z.out;
    for (const char *c = t; *c; c++) {
      if (!isalpha((unsigned char)*c))
        return ein_fail(err, errlen, ": '%c' is not an index letter", *c);
      if (strchr(c + 1, *c))
        return ein_fail(err, errlen, ": index '%c' repeats within one %s (diagonals are not supported)", *c,
                        i < z.nin ? "operand" : "result");
    }
  }
  for (const char *c = z.out; *c; c++)
    if (!strchr(z.in[0], *c) && !(z.nin > 1 && strchr(z.in[1], *c)))
      return ein_fail(err, errlen, ": result index '%c' is in no operand", *c);
  *out = z;
  return true;
}

const char *ein_str(Arena *a, const EinsumSpec *e) {
  if (e->nin == 1)
    return arena_printf(a, "%s->%s", e->in[0], e->out);
  return arena_printf(a, "%s,%s->%s", e->in[0], e->in[1], e->out);
}

/* ---- the builder ------------------------------------------------------------------ */

static Value *add1(const Build *bd, Op op, DType dt, Shape sh, Span sp, Value *a) {
  return ir_add(bd, op, dt, sh, sp, 1, &a);
}

/* Dies unless the operands fit the op (ok): a misfit is a compiler bug
 * (user errors are sema's to report first); misfit says how. */
static void operands_fit(bool ok, const char *misfit) {
  if (!ok)
    die("IR builder: %s", misfit);
}

/* the runtime's rounding (gslrt.h), so that a constant folds to the bf16
 * the program would compute */
double ir_round_bf16(double x) { return gslrt_bf16_widen(gslrt_bf16_round((float)x)); }

Value *ir_const(const Build *bd, DType dt, double x, Span sp) {
  Shape sc = {0};
  Value *v = ir_add(bd, OP_CONST, dt, sc, sp, 0, NULL);
  if (dt == DT_I32)
    v->ival = (int64_t)x;
  else
    v->fval = dt == DT_BF16 ? ir_round_bf16(x) : x;
  return v;
}

Value *ir_unary(const Build *bd, int fn, Value *x, Span sp) {
  unary_fn_name(fn);
  Value *v = add1(bd, OP_UNARY, x->dtype, x->shape, sp, x);
  v->fn = fn;
  return v;
}

Value *ir_broadcast(const Build *bd, Value *x, Shape to, Span sp) {
  if (shape_eq(&x->shape, &to))
    return x;
  Shape check;
  operands_fit(to.rank >= x->shape.rank && shape_broadcast(&x->shape, &to, &check, NULL) && shape_eq(&check, &to),
       "broadcast to a shape the operand does not reach");
  Value *b = add1(bd, OP_BROADCAST, x->dtype, to, sp, x);
  int off = to.rank - x->shape.rank;
  for (int i = 0; i < to.rank; i++)
    b->perm[i] = i >= off ? i - off : -1;
  return b;
}

Value *ir_binary(const Build *bd, int fn, Value *a, Value *b, Span sp) {
  binary_fn_name(fn);
  Shape out;
  operands_fit(a->dtype == b->dtype, "binary operands of different dtypes");
  operands_fit(shape_broadcast(&a->shape, &b->shape, &out, NULL), "binary operands that do not broadcast");
  Value *args[2] = {ir_broadcast(bd, a, out, sp), ir_broadcast(bd, b, out, sp)};
  Value *v = ir_add(bd, OP_BINARY, a->dtype, out, sp, 2, args);
  v->fn = fn;
  return v;
}

Value *ir_select(const Build *bd, Value *c, Value *a, Value *b, Span sp) {
  Shape o1, o;
  operands_fit(a->dtype == b->dtype, "select between different dtypes");
  operands_fit(shape_broadcast(&c->shape, &a->shape, &o1, NULL) && shape_broadcast(&o1, &b->shape, &o, NULL),
       "select operands that do not broadcast");
  Value *args[3] = {ir_broadcast(bd, c, o, sp), ir_broadcast(bd, a, o, sp), ir_broadcast(bd, b, o, sp)};
  return ir_add(bd, OP_SELECT, a->dtype, o, sp, 3, args);
}

Value *ir_cast(const Build *bd, Value *x, DType dt, Span sp) {
  if (x->dtype == dt)
    return x;
  /* bf16 -> f32 -> bf16 gives back every bf16: the round trip is the original */
  if (x->op == OP_CAST && x->args[0]->dtype == dt && dt == DT_BF16 && x->dtype == DT_F32)
    return x->args[0];
  return add1(bd, OP_CAST, dt, x->shape, sp, x);
}

/* bf16 values are stored as bf16 and computed in f32: an op that
 * accumulates (a reduction, a cumsum, a scatter) runs on x widened to f32,
 * and its result is rounded back to bf16 once (wide_end). */
static Value *wide(const Build *bd, Value *x, Span sp) { return x->dtype == DT_BF16 ? ir_cast(bd, x, DT_F32, sp) : x; }
static Value *wide_end(const Build *bd, Value *v, DType dt, Span sp) {
  return dt == DT_BF16 ? ir_cast(bd, v, dt, sp) : v;
}

Value *ir_reshape(const Build *bd, Value *x, Shape to, Span sp) {
  if (shape_eq(&x->shape, &to))
    return x;
  operands_fit(shape_elems(&x->shape) == shape_elems(&to), "reshape that changes the element count");
  return add1(bd, OP_RESHAPE, x->dtype, to, sp, x);
}

Value *ir_transpose(const Build *bd, Value *x, const int *perm, Span sp) {
  Shape o = {0};
  bool ident = true;
  uint32_t seen = 0;
  for (int i = 0; i < x->shape.rank; i++) {
    operands_fit(perm[i] >= 0 && perm[i] < x->shape.rank && !(seen & (1u << perm[i])),
                 "transpose by a non-permutation");
    seen |= 1u << perm[i];
    o.d[o.rank++] = x->shape.d[perm[i]];
    ident &= perm[i] == i;
  }
  if (ident)
    return x;
  Value *v = add1(bd, OP_TRANSPOSE, x->dtype, o, sp, x);
  memcpy(v->perm, perm, sizeof(int) * (size_t)x->shape.rank);
  return v;
}

Value *ir_slice(const Build *bd, Value *x, int axis, int64_t start, int64_t len, Span sp) {
  operands_fit(axis >= 0 && axis < x->shape.rank && start >= 0 && len > 0 && start + len <= x->shape.d[axis],
       "slice out of range");
  if (start == 0 && len == x->shape.d[axis])
    return x;
  Shape o = x->shape;
  o.d[axis] = len;
  Value *v = add1(bd, OP_SLICE, x->dtype, o, sp, x);
  v->axis = axis;
  v->start = start;
  return v;
}

Value *ir_concat(const Build *bd, Value **xs, int n, int axis, Span sp) {
  operands_fit(n >= 1 && axis >= 0 && axis < xs[0]->shape.rank, "concat of nothing, or along no dim");
  if (n == 1)
    return xs[0];
  Shape o = xs[0]->shape;
  for (int i = 1; i < n; i++) {
    bool ok = xs[i]->shape.rank == o.rank && xs[i]->dtype == xs[0]->dtype;
    for (int j = 0; ok && j < o.rank; j++)
      ok = j == axis || xs[i]->shape.d[j] == o.d[j];
    operands_fit(ok, "concat of tensors that do not fit side by side");
    o.d[axis] += xs[i]->shape.d[axis];
  }
  operands_fit(o.d[axis] <= GSL_MAX_ELEMS / (shape_elems(&xs[0]->shape) / xs[0]->shape.d[axis]),
       "concat result past the element limit");
  Value *v = ir_add(bd, OP_CONCAT, xs[0]->dtype, o, sp, n, xs);
  v->axis = axis;
  return v;
}

Value *ir_reduce(const Build *bd, int fn, Value *x, uint32_t mask, Span sp) {
  reduce_fn_name(fn);
  if (x->dtype == DT_BF16) {
    Value *r = ir_reduce(bd, fn, wide(bd, x, sp), mask, sp);
    return fn == RF_ARGMAX ? r : wide_end(bd, r, DT_BF16, sp);
  }
  operands_fit(x->shape.rank == 32 || !(mask >> x->shape.rank), "reduce over dims the operand lacks");
  operands_fit(fn != RF_ARGMAX || x->dtype == DT_F32, "argmax of a non-f32 tensor");
  Shape out = {0};
  for (int i = 0; i < x->shape.rank; i++)
    if (!(mask & (1u << i)))
      out.d[out.rank++] = x->shape.d[i];
  Value *v = add1(bd, OP_REDUCE, fn == RF_ARGMAX ? DT_I32 : x->dtype, out, sp, x);
  v->fn = fn;
  v->rmask = mask;
  return v;
}

Value *ir_cumsum(const Build *bd, Value *x, int axis, bool exclusive, Span sp) {
  operands_fit(axis >= 0 && axis < x->shape.rank, "cumsum along no dim");
  if (x->dtype == DT_BF16)
    return wide_end(bd, ir_cumsum(bd, wide(bd, x, sp), axis, exclusive, sp), DT_BF16, sp);
  Value *v = add1(bd, OP_CUMSUM, x->dtype, x->shape, sp, x);
  v->axis = axis;
  v->exclusive = exclusive;
  return v;
}

/* Sums away the letters of operand x that appear neither in other nor in
 * out; updates letters in place. */
static Value *sum_private(const Build *bd, Value *x, char *letters, const char *other, const char *out, Span sp) {
  uint32_t mask = 0;
  char kept[GSL_MAX_RANK + 1];
  int m = 0;
  for (int i = 0; letters[i]; i++) {
    if (!strchr(out, letters[i]) && !(other && strchr(other, letters[i])))
      mask |= 1u << i;
    else
      kept[m++] = letters[i];
  }
  kept[m] = '\0';
  if (!mask)
    return x;
  strcpy(letters, kept);
  return ir_reduce(bd, RF_SUM, x, mask, sp);
}

double ein_flops(const EinsumSpec *e, const Shape *const *args) {
  char seen[2 * GSL_MAX_RANK + 1] = {0};
  double n = 2;
  int k = 0;
  for (int i = 0; i < e->nin; i++)
    for (int d = 0; e->in[i][d]; d++)
      if (!strchr(seen, e->in[i][d])) {
        seen[k++] = e->in[i][d];
        n *= (double)args[i]->d[d];
      }
  return n;
}

double ir_flops(const Value *v) {
  if (v->op != OP_EINSUM)
    return 0;
  const Shape *args[2] = {&v->args[0]->shape, v->nargs > 1 ? &v->args[1]->shape : NULL};
  return ein_flops(&v->ein, args);
}

double ir_model_flops(const Value *v, bool *product) {
  *product = v->op == OP_EINSUM;
  if (*product)
    return ir_flops(v) * (v->ein.fill[0] ? v->ein.fill_share : 1.0);
  const Shape *x = v->nargs ? &v->args[0]->shape : NULL;
  switch (ir_op(v->op)->cls) {
  case OC_ELEMENTWISE: return (double)shape_elems(&v->shape);
  case OC_REDUCTION: return (double)shape_elems(x);
  case OC_INDEX:
    if (v->op == OP_SCATTER_ADD)
      return (double)shape_elems(x);
    if (v->op == OP_COMBINE) /* G·S·K rows of M, each weighted and added */
      return 2.0 * (double)shape_elems(&v->args[1]->shape) * (double)v->shape.d[v->shape.rank - 1];
    if (v->op == OP_DISPATCH && v->nargs == 4) /* G·S·K rows of M, each weighted */
      return (double)shape_elems(&v->args[1]->shape) * (double)v->shape.d[v->shape.rank - 1];
    return 0;
  default: return 0;
  }
}

/* the extent of every letter of e over operands ops; dies on a misfit */
static void ein_extents(const EinsumSpec *e, Value **ops, int64_t *size) {
  for (int i = 0; i < 128; i++)
    size[i] = -1;
  for (int k = 0; k < e->nin; k++) {
    operands_fit((int)strlen(e->in[k]) == ops[k]->shape.rank, "einsum operand rank differs from its letters");
    operands_fit(ops[k]->dtype == ops[0]->dtype, "einsum operands of different dtypes");
    for (int i = 0; e->in[k][i]; i++) {
      int c = e->in[k][i] & 127;
      operands_fit(size[c] < 0 || size[c] == ops[k]->shape.d[i], "einsum letter with two extents");
      size[c] = ops[k]->shape.d[i];
    }
  }
}

Value *ir_einsum(const Build *bd, const EinsumSpec *spec, Value **ops, Span sp) {
  Value *v = ir_einsum_acc(bd, spec, ops, sp);
  return wide_end(bd, v, ops[0]->dtype, sp);
}

/* gslc --precision bf16 (torch.autocast, GShard), where the builder
 * autocasts (build_at: the forward pass; build_f32 turns it off): products
 * of f32 operands take them rounded to bf16 and accumulate in f32; a moe
 * block's dispatched tokens and its experts' results move as bf16. */
Value *ir_einsum_acc(const Build *bd, const EinsumSpec *spec, Value **ops, Span sp) {
  Value *cast[2];
  if (spec->nin == 2 && bd->autocast && ops[0]->dtype == DT_F32 && ops[1]->dtype == DT_F32) {
    cast[0] = ir_cast(bd, ops[0], DT_BF16, sp);
    cast[1] = ir_cast(bd, ops[1], DT_BF16, sp);
    ops = cast;
  }
  EinsumSpec z = *spec;
  operands_fit(z.nin == 1 || z.nin == 2, "einsum of neither one nor two operands");
  int64_t size[128];
  ein_extents(&z, ops, size);
  Shape out = {0};
  for (int i = 0; z.out[i]; i++) {
    operands_fit(size[z.out[i] & 127] > 0, "einsum result letter in no operand");
    out.d[out.rank++] = size[z.out[i] & 127];
  }
  Value *a = sum_private(bd, ops[0], z.in[0], z.nin > 1 ? z.in[1] : NULL, z.out, sp);
  if (z.nin == 1) { /* what is left is a permutation */
    int perm[GSL_MAX_RANK];
    for (int i = 0; z.out[i]; i++)
      perm[i] = (int)(strchr(z.in[0], z.out[i]) - z.in[0]);
    return ir_transpose(bd, a, perm, sp);
  }
  Value *b = sum_private(bd, ops[1], z.in[1], z.in[0], z.out, sp);
  Value *args[2] = {a, b};
  Value *v = ir_add(bd, OP_EINSUM, a->dtype == DT_BF16 ? DT_F32 : a->dtype, out, sp, 2, args);
  v->ein = z;
  return v;
}

Value *ir_gather(const Build *bd, Value *table, Value *idx, Span sp) {
  operands_fit(idx->dtype == DT_I32 && table->shape.rank >= 1 && idx->shape.rank + table->shape.rank - 1 <= GSL_MAX_RANK,
       "gather with bad operands");
  Shape o = idx->shape;
  for (int i = 1; i < table->shape.rank; i++)
    o.d[o.rank++] = table->shape.d[i];
  Value *args[2] = {table, idx};
  return ir_add(bd, OP_GATHER, table->dtype, o, sp, 2, args);
}

Value *ir_scatter_add(const Build *bd, Value *src, Value *idx, int64_t rows, Span sp) {
  if (src->dtype == DT_BF16)
    return wide_end(bd, ir_scatter_add(bd, wide(bd, src, sp), idx, rows, sp), DT_BF16, sp);
  operands_fit(idx->dtype == DT_I32 && src->dtype == DT_F32 && rows > 0 && idx->shape.rank <= src->shape.rank &&
           src->shape.rank - idx->shape.rank + 1 <= GSL_MAX_RANK,
       "scatter_add with bad operands");
  Shape o = {1, {rows}};
  for (int i = 0; i < idx->shape.rank; i++)
    operands_fit(idx->shape.d[i] == src->shape.d[i], "scatter_add rows that do not match the indices");
  for (int i = idx->shape.rank; i < src->shape.rank; i++)
    o.d[o.rank++] = src->shape.d[i];
  Value *args[2] = {src, idx};
  return ir_add(bd, OP_SCATTER_ADD, DT_F32, o, sp, 2, args);
}

Value *ir_one_hot(const Build *bd, Value *idx, int64_t n, Span sp) {
  operands_fit(idx->dtype == DT_I32 && n > 0 && idx->shape.rank < GSL_MAX_RANK, "one_hot with bad operands");
  Shape o = idx->shape;
  o.d[o.rank++] = n;
  return add1(bd, OP_ONE_HOT, DT_F32, o, sp, idx);
}

/* operands_fit for the index operands of a routing op: i32[G, S, K] on
 * x's (or the combined result's) groups and tokens */
static void routes_fit(const Value *expert, const Value *slot, int64_t g, int64_t s) {
  operands_fit(expert->dtype == DT_I32 && slot->dtype == DT_I32 && expert->shape.rank == 3 &&
                   shape_eq(&expert->shape, &slot->shape) && expert->shape.d[0] == g && expert->shape.d[1] == s,
               "routing indices that are not i32[G, S, K]");
}

static Value *dispatch(const Build *bd, Value *x, Value *expert, Value *slot, Value *weight, int64_t e, int64_t c,
                       Span sp) {
  operands_fit(dtype_is_float(x->dtype) && x->shape.rank == 3 && e > 0 && c > 0,
               "dispatch of a non-float [G, S, M] tensor");
  routes_fit(expert, slot, x->shape.d[0], x->shape.d[1]);
  operands_fit(!weight || (weight->dtype == DT_F32 && shape_eq(&weight->shape, &expert->shape)),
               "dispatch weights not f32[G, S, K]");
  Shape o = {4, {e, x->shape.d[0], c, x->shape.d[2]}};
  Value *args[4] = {x, expert, slot, weight};
  return ir_add(bd, OP_DISPATCH, x->dtype, o, sp, weight ? 4 : 3, args);
}

Value *ir_dispatch(const Build *bd, Value *x, Value *expert, Value *slot, int64_t e, int64_t c, Span sp) {
  if (bd->autocast)
    x = ir_cast(bd, x, DT_BF16, sp);
  return dispatch(bd, x, expert, slot, NULL, e, c, sp);
}

Value *ir_dispatch_weighted(const Build *bd, Value *x, Value *expert, Value *slot, Value *weight, int64_t e, int64_t c,
                            Span sp) {
  return dispatch(bd, x, expert, slot, weight, e, c, sp);
}

Value *ir_combine(const Build *bd, Value *y, Value *expert, Value *slot, Value *weight, Span sp) {
  if (bd->autocast)
    y = ir_cast(bd, y, DT_BF16, sp);
  operands_fit(dtype_is_float(y->dtype) && y->shape.rank == 4, "combine of a non-float [E, G, C, M] tensor");
  routes_fit(expert, slot, y->shape.d[1], expert->shape.d[1]);
  operands_fit(weight->dtype == DT_F32 && shape_eq(&weight->shape, &expert->shape), "combine weights not f32[G, S, K]");
  Shape o = {3, {y->shape.d[1], expert->shape.d[1], y->shape.d[3]}};
  Value *args[4] = {y, expert, slot, weight};
  return ir_add(bd, OP_COMBINE, DT_F32, o, sp, 4, args);
}

Value *ir_rng(const Build *bd, int dist, double a, double b, Shape shape, Span sp) {
  Value *v = ir_add(bd, OP_RNG, DT_F32, shape, sp, 0, NULL);
  v->fn = dist;
  v->fval = a;
  v->fval2 = b;
  v->stream = bd->p->nstreams++;
  return v;
}

Value *ir_dropout(const Build *bd, Value *x, double p, Span sp) {
  operands_fit(dtype_is_float(x->dtype) && p >= 0 && p < 1, "dropout of an i32 value, or p outside [0, 1)");
  if (p == 0)
    return x;
  Value *v = add1(bd, OP_DROPOUT, x->dtype, x->shape, sp, x);
  v->fval = p;
  v->stream = bd->p->nstreams++;
  return v;
}

Value *ir_dropout_as(const Build *bd, Value *x, const Value *d, Span sp) {
  operands_fit(d->op == OP_DROPOUT && x->dtype == d->dtype && shape_eq(&x->shape, &d->shape),
               "a dropout's mask on a value of another dtype or shape");
  Value *v = add1(bd, OP_DROPOUT, x->dtype, x->shape, sp, x);
  v->fval = d->fval;
  v->stream = d->stream;
  return v;
}

Value *ir_iota(const Build *bd, Shape shape, int axis, Span sp) {
  operands_fit(axis >= 0 && axis < shape.rank && shape.d[axis] <= (int64_t)INT32_MAX + 1, "iota with a bad axis");
  Value *v = ir_add(bd, OP_IOTA, DT_I32, shape, sp, 0, NULL);
  v->axis = axis;
  return v;
}

Value *ir_annotate(const Build *bd, Value *x, const Sharding *sh, Span sp) {
  Value *v = add1(bd, OP_ANNOTATE, x->dtype, x->shape, sp, x);
  v->sh = *sh;
  v->sh_origin = SO_ANNOTATED;
  return v;
}

Value *ir_tensor(const Build *bd, const Tensor *t) {
  Program *p = bd->p;
  if (p->ntensors == p->captensors) {
    p->captensors = p->captensors ? 2 * p->captensors : 16;
    p->tensors = xrealloc(p->tensors, (size_t)p->captensors * sizeof *p->tensors);
  }
  Value *v = ir_add(bd, t->kind == TK_INPUT ? OP_INPUT : OP_PARAM, t->dtype, t->shape, t->span, 0, NULL);
  v->name = t->name;
  v->tensor = p->ntensors;
  if (t->annotated) {
    v->sh = t->sh;
    v->sh_origin = SO_ANNOTATED;
  }
  p->tensors[p->ntensors] = *t;
  p->tensors[p->ntensors++].value = v;
  return v;
}

void ir_root(Program *p, OutputKind kind, const char *name, Value *v, int tensor, Span sp) {
  if (p->noutputs == p->capoutputs) {
    p->capoutputs = p->capoutputs ? 2 * p->capoutputs : 8;
    p->outputs = xrealloc(p->outputs, (size_t)p->capoutputs * sizeof *p->outputs);
  }
  p->outputs[p->noutputs++] = (Output){name, v, sp, kind, tensor, NULL};
}

void ir_signal(Program *p, const char *name, const char *log, Value *v, Span sp) {
  if (ir_has_signal(p, name))
    die("signal %s made twice", name);
  ir_root(p, OUT_SIGNAL, name, v, -1, sp);
  p->outputs[p->noutputs - 1].log = log;
}

bool ir_has_signal(const Program *p, const char *name) {
  for (int i = 0; i < p->noutputs; i++)
    if (p->outputs[i].kind == OUT_SIGNAL && !strcmp(p->outputs[i].name, name))
      return true;
  return false;
}

void ir_output(Program *p, const char *name, Value *v, Span sp) { ir_root(p, OUT_VALUE, name, v, -1, sp); }

/* ---- regions ---------------------------------------------------------------------- */

int ir_region_new(Program *p, int parent, Span span, Span site, const char *name, int64_t iter, const char *loops,
                  bool marked) {
  if (p->nregions == p->capregions) {
    p->capregions = p->capregions ? 2 * p->capregions : 16;
    p->regions = xrealloc(p->regions, sizeof *p->regions * (size_t)p->capregions);
  }
  p->regions[p->nregions++] = (Region){span, site, name, iter, loops, parent, marked, marked, NULL, 0, 0, 0};
  return p->nregions;
}

int ir_region_unit(const Program *p, int r) {
  int u = 0;
  for (; r > 0; r = p->regions[r - 1].parent)
    if (p->regions[r - 1].recompute)
      u = r;
  return u;
}

void ir_note_calls(Diag *d, const Program *p, const Value *v) {
  for (int r = v->region; r > 0; r = p->regions[r - 1].parent) {
    const Region *R = &p->regions[r - 1];
    if (R->iter >= 0)
      diag_note(d, R->site, "in iteration %s = %" PRId64 " of the loop here", R->name, R->iter);
    else if (R->loops && !R->parent) /* a call in loops at the top level: their headers are not kept */
      diag_note(d, R->site, "in the call to '%s' here, in iteration %s", R->name, R->loops);
    else
      diag_note(d, R->site, "in the call to '%s' here", R->name);
  }
}

/* ---- the rewriter ---------------------------------------------------------------- */

void ir_inherit(Value *v, const Value *from) {
  v->site = from->site; /* even where from has none: not v's span */
  v->pass = from->pass;
  v->region = from->region;
  v->name = from->name;
  v->sh = from->sh;
  v->sh_origin = from->sh_origin;
  v->sh_from = from->sh_from;
}

Value *ir_copy(Program *dst, const Value *v, Value **args) {
  Build at = build_at(dst, v->pass, v->site, v->region);
  Value *c = ir_add(&at, v->op, v->dtype, v->shape, v->span, v->nargs, args);
  ir_inherit(c, v);
  c->remat_of = v->remat_of;
  c->attr = v->attr;
  c->gshape = v->gshape;
  c->orig = v->orig;
  c->why = v->why;
  c->rows = v->rows;
  memcpy(c->rows_dim, v->rows_dim, sizeof c->rows_dim);
  return c;
}

int ir_inline(const Build *bd, const Program *fn, Value **args, int nargs, Value **results, int maxresults) {
  Program *dst = bd->p;
  if (fn->home != dst && (!dst->base || fn->home != dst->base))
    die("ir_inline: an IR function inlined into a program it was not made for");
  if (nargs != fn->ntensors)
    die("ir_inline: %d arguments for an IR function of %d", nargs, fn->ntensors);
  if (fn->noutputs > maxresults)
    die("ir_inline: %d results, room for %d", fn->noutputs, maxresults);
  Value **map = xcalloc((size_t)fn->nvalues + 1, sizeof *map);
  for (int i = 0; i < nargs; i++) {
    const Value *a = fn->tensors[i].value;
    if (args[i]->dtype != a->dtype || !shape_eq(&args[i]->shape, &a->shape))
      die("ir_inline: argument %d is not of its parameter's type", i);
    map[a->id] = args[i];
  }
  Value *stack[16];
  for (int i = 0; i < fn->nvalues; i++) {
    const Value *v = fn->values[i];
    if (map[i])
      continue;
    if (v->op == OP_PARAM || v->op == OP_INPUT)
      die("ir_inline: an IR function reads a tensor that is not its parameter");
    Value **ops = v->nargs <= 16 ? stack : xmalloc(sizeof(Value *) * (size_t)v->nargs);
    for (int j = 0; j < v->nargs; j++)
      ops[j] = map[v->args[j]->id];
    Value *c = ir_copy(dst, v, ops);
    if (ops != stack)
      free(ops);
    c->pass = bd->pass;
    c->region = bd->region;
    if (bd->site.src)
      c->site = bd->site;
    if (ir_op(v->op)->flags & OF_DRAW)
      c->stream = dst->nstreams++;
    map[i] = c;
  }
  for (int j = 0; j < fn->noutputs; j++)
    results[j] = map[fn->outputs[j].value->id];
  free(map);
  return fn->noutputs;
}

/* src's notes for --explain and --stats (its moe blocks', its blocked
 * sums', each tensor's update and --auto-shard notes) in dst, their text
 * in dst's arena (src may be freed first). */
static void carry_notes(Program *dst, const Program *src) {
  for (int i = 0; i < dst->ntensors; i++) {
    Tensor *t = &dst->tensors[i];
    if (t->update_note)
      t->update_note = arena_strdup(dst->arena, t->update_note);
    if (t->auto_note)
      t->auto_note = arena_strdup(dst->arena, t->auto_note);
  }
  dst->nmoe = src->nmoe;
  dst->moe = src->nmoe ? arena_alloc(dst->arena, sizeof *dst->moe * (size_t)src->nmoe) : NULL;
  for (int i = 0; i < src->nmoe; i++) {
    dst->moe[i] = src->moe[i];
    if (src->moe[i].why)
      dst->moe[i].why = arena_strdup(dst->arena, src->moe[i].why);
  }
  dst->nsame = src->nsame;
  dst->same = src->nsame ? arena_alloc(dst->arena, sizeof *dst->same * (size_t)src->nsame) : NULL;
  for (int i = 0; i < src->nsame; i++) {
    dst->same[i] = src->same[i];
    if (src->same[i].fits)
      dst->same[i].fits = arena_strdup(dst->arena, src->same[i].fits);
  }
}

Program *ir_rewrite(const Program *src, bool spmd, IrRewriteFn *fn, void *ctx) {
  Program *dst = ir_new(src->path);
  dst->mesh = src->mesh;
  dst->nstreams = src->nstreams;
  dst->spmd = spmd;
  dst->precision = src->precision;
  dst->same_bits = src->same_bits;
  dst->ntensors = dst->captensors = src->ntensors;
  dst->tensors = xcalloc((size_t)src->ntensors + 1, sizeof(Tensor));
  if (src->ntensors)
    memcpy(dst->tensors, src->tensors, sizeof(Tensor) * (size_t)src->ntensors);
  Value **map = xcalloc((size_t)src->nvalues + 1, sizeof *map);
  Value *stack[16];
  for (int i = 0; i < src->nvalues; i++) {
    const Value *v = src->values[i];
    Value *r = fn ? fn(ctx, dst, v, map) : NULL;
    if (!r) {
      Value **args = v->nargs <= 16 ? stack : xmalloc(sizeof(Value *) * (size_t)v->nargs);
      for (int j = 0; j < v->nargs; j++)
        args[j] = map[v->args[j]->id];
      r = ir_copy(dst, v, args);
      if (args != stack)
        free(args);
    }
    if (r->remat_of && r->remat_of == v->remat_of) /* a recomputed value: its forward value's copy */
      r->remat_of = map[v->remat_of->id];
    if (r->rows && r->rows == v->rows) /* a copy's counts: their copy */
      r->rows = map[v->rows->id];
    map[i] = r;
  }
  dst->base = src->base;
  dst->nregions = dst->capregions = src->nregions;
  if (src->nregions) {
    dst->regions = xmalloc(sizeof(Region) * (size_t)src->nregions);
    memcpy(dst->regions, src->regions, sizeof(Region) * (size_t)src->nregions);
  }
  for (int i = 0; i < dst->ntensors; i++) {
    dst->tensors[i].value = map[src->tensors[i].value->id];
    dst->tensors[i].grad = src->tensors[i].grad ? map[src->tensors[i].grad->id] : NULL;
  }
  for (int i = 0; i < src->noutputs; i++) {
    const Output *o = &src->outputs[i];
    ir_root(dst, o->kind, o->name, map[o->value->id], o->tensor, o->span);
    dst->outputs[dst->noutputs - 1].log = o->log;
  }
  dst->train = src->train;
  dst->train.updates = NULL; /* autodiff's, inlined before any rewrite */
  dst->train.nupdates = 0;
  dst->train.schedule = NULL;
  if (src->train.loss)
    dst->train.loss = map[src->train.loss->id];
  carry_notes(dst, src);
  free(map);
  return dst;
}

Program *ir_clone(const Program *src) {
  Program *dst = ir_rewrite(src, src->spmd, NULL, NULL);
  dst->base = src->base ? src->base : src;
  dst->train.nupdates = src->train.nupdates; /* borrowed: ir_free frees only a program's own */
  if (src->train.nupdates) {
    dst->train.updates = xmalloc(sizeof *dst->train.updates * (size_t)src->train.nupdates);
    memcpy(dst->train.updates, src->train.updates, sizeof *dst->train.updates * (size_t)src->train.nupdates);
  }
  dst->train.schedule = src->train.schedule;
  return dst;
}

void ir_dce(Program *p) {
  bool *live = xcalloc((size_t)p->nvalues, sizeof *live);
  for (int i = 0; i < p->noutputs; i++)
    live[p->outputs[i].value->id] = true;
  for (int i = 0; i < p->ntensors; i++)
    live[p->tensors[i].value->id] = true;
  if (p->train.loss) /* the OUT_LOSS root to be (autodiff makes it) */
    live[p->train.loss->id] = true;
  for (int i = p->nvalues - 1; i >= 0; i--)
    if (live[i])
      for (int j = 0; j < p->values[i]->nargs; j++)
        live[p->values[i]->args[j]->id] = true;
  int n = 0;
  for (int i = 0; i < p->nvalues; i++)
    if (live[i]) {
      p->values[n] = p->values[i];
      p->values[n]->id = n;
      n++;
    }
  p->nvalues = n;
  free(live);
}

/* ---- the uses of each value --------------------------------------------------- */

IrUses ir_uses(const Program *p) {
  int n = p->nvalues;
  IrUses u = {n, xcalloc((size_t)n + 1, sizeof *u.first), NULL, xcalloc((size_t)n + 1, sizeof *u.outputs)};
  for (int i = 0; i < n; i++) /* counted at first[id + 1], then summed up: first[id] is where id's begin */
    for (int k = 0; k < p->values[i]->nargs; k++)
      u.first[p->values[i]->args[k]->id + 1]++;
  for (int i = 0; i < n; i++)
    u.first[i + 1] += u.first[i];
  u.list = xcalloc(2 * (size_t)u.first[n] + 1, sizeof *u.list);
  int *at = xcalloc((size_t)n + 1, sizeof *at); /* per value: its pairs stored so far */
  for (int i = 0; i < n; i++)
    for (int k = 0; k < p->values[i]->nargs; k++) {
      int a = p->values[i]->args[k]->id, j = u.first[a] + at[a]++;
      u.list[2 * j] = i;
      u.list[2 * j + 1] = k;
    }
  free(at);
  for (int i = 0; i < p->noutputs; i++)
    u.outputs[p->outputs[i].value->id]++;
  return u;
}

void ir_uses_free(IrUses *u) {
  free(u->first);
  free(u->list);
  free(u->outputs);
  *u = (IrUses){0};
}


/* ---- where indices come from ------------------------------------------------- */

/* Adds to out[0..n) the input boxes that hold v's elements in the box
 * [lo, hi) of v's global shape, following the ops that move elements;
 * returns the new count. Global coordinates: an SPMD layout op reads its
 * operand as the global op does (the dims it moves are whole), and an
 * annotation or a collective that moves tiles holds the same global tensor
 * as its operand, tiled another way. */
static int trace_box(const Value *v, const int64_t *lo, const int64_t *hi, IndexSource *out, int n) {
  const Shape *gs = &v->gshape;
  for (int d = 0; d < gs->rank; d++)
    if (lo[d] >= hi[d])
      return n;
  if (v->dtype != DT_I32 || n == IR_MAX_SOURCES)
    return n;
  if (v->op == OP_INPUT) {
    for (int k = 0; k < n; k++)
      if (out[k].tensor == v->tensor && !memcmp(out[k].lo, lo, sizeof(int64_t) * (size_t)gs->rank) &&
          !memcmp(out[k].hi, hi, sizeof(int64_t) * (size_t)gs->rank))
        return n;
    memset(&out[n], 0, sizeof out[n]);
    out[n].tensor = v->tensor;
    memcpy(out[n].lo, lo, sizeof(int64_t) * (size_t)gs->rank);
    memcpy(out[n].hi, hi, sizeof(int64_t) * (size_t)gs->rank);
    return n + 1;
  }
  if (!(ir_op(v->op)->flags & OF_MOVE))
    return n;
  const Value *a = v->args[0];
  const Shape *as = &a->gshape;
  int64_t alo[GSL_MAX_RANK], ahi[GSL_MAX_RANK];
  switch (v->op) {
  case OP_TRANSPOSE:
    for (int i = 0; i < gs->rank; i++)
      alo[v->perm[i]] = lo[i], ahi[v->perm[i]] = hi[i];
    return trace_box(a, alo, ahi, out, n);
  case OP_BROADCAST: /* a dim of size 1 is read at 0 */
    for (int d = 0; d < as->rank; d++)
      alo[d] = 0, ahi[d] = as->d[d] == 1 ? 1 : -1;
    for (int i = 0; i < gs->rank; i++)
      if (v->perm[i] >= 0 && as->d[v->perm[i]] != 1)
        alo[v->perm[i]] = lo[i], ahi[v->perm[i]] = hi[i];
    for (int d = 0; d < as->rank; d++)
      if (ahi[d] < 0)
        return n; /* a dim no result dim reads */
    return trace_box(a, alo, ahi, out, n);
  case OP_SLICE:
    memcpy(alo, lo, sizeof(int64_t) * (size_t)gs->rank);
    memcpy(ahi, hi, sizeof(int64_t) * (size_t)gs->rank);
    alo[v->axis] += v->start, ahi[v->axis] += v->start;
    return trace_box(a, alo, ahi, out, n);
  case OP_CONCAT: {
    int64_t off = 0;
    for (int j = 0; j < v->nargs; off += v->args[j]->gshape.d[v->axis], j++) {
      int64_t ext = v->args[j]->gshape.d[v->axis];
      memcpy(alo, lo, sizeof(int64_t) * (size_t)gs->rank);
      memcpy(ahi, hi, sizeof(int64_t) * (size_t)gs->rank);
      alo[v->axis] = (lo[v->axis] > off ? lo[v->axis] : off) - off;
      ahi[v->axis] = (hi[v->axis] < off + ext ? hi[v->axis] : off + ext) - off;
      n = trace_box(v->args[j], alo, ahi, out, n);
    }
    return n;
  }
  case OP_RESHAPE: /* the same elements in C order: a whole box stays whole */
    for (int d = 0; d < gs->rank; d++)
      if (lo[d] != 0 || hi[d] != gs->d[d])
        return n;
    for (int d = 0; d < as->rank; d++)
      alo[d] = 0, ahi[d] = as->d[d];
    return trace_box(a, alo, ahi, out, n);
  default: /* annotate, all_gather, all_to_all, collective_permute, local_slice */
    if (!shape_eq(as, gs))
      return n;
    return trace_box(a, lo, hi, out, n);
  }
}

int ir_index_sources(const Value *ix, IndexSource *out) {
  int64_t lo[GSL_MAX_RANK] = {0}, hi[GSL_MAX_RANK];
  for (int d = 0; d < ix->gshape.rank; d++)
    hi[d] = ix->gshape.d[d];
  return trace_box(ix, lo, hi, out, 0);
}

static void print_group(FILE *f, const Program *p, const uint8_t *g, int n) {
  fputc('(', f);
  for (int i = 0; i < n; i++)
    fprintf(f, "%s%s", i ? ", " : "", g[i] < p->mesh.naxes ? p->mesh.name[g[i]] : "?");
  fputc(')', f);
}

static void print_attrs(FILE *f, Arena *tmp, const Program *p, const Value *v) {
  switch (v->op) {
  case OP_PARAM:
  case OP_INPUT:
    fprintf(f, " %s", p->tensors[v->tensor].name);
    break;
  case OP_CONST:
    if (v->dtype == DT_I32)
      fprintf(f, " %" PRId64, v->ival);
    else
      fprintf(f, " %.9g", v->fval);
    break;
  case OP_RNG:
    fprintf(f, " %s(%.9g, %.9g) stream %u", dist_names[v->fn & 1], v->fval, v->fval2, v->stream);
    break;
  case OP_DROPOUT:
    fprintf(f, " p %.9g stream %u", v->fval, v->stream);
    break;
  case OP_UNARY:
    fprintf(f, " %s", unary_fn_name(v->fn));
    break;
  case OP_BINARY:
    fprintf(f, " %s", binary_fn_name(v->fn));
    break;
  case OP_BROADCAST:
  case OP_TRANSPOSE:
    fputs(" [", f);
    for (int i = 0; i < v->shape.rank; i++)
      fprintf(f, "%s%d", i ? ", " : "", v->perm[i]);
    fputc(']', f);
    break;
  case OP_SLICE:
    fprintf(f, " axis %d start %" PRId64, v->axis, v->start);
    break;
  case OP_CONCAT:
  case OP_IOTA:
    fprintf(f, " axis %d", v->axis);
    break;
  case OP_CUMSUM:
    fprintf(f, " axis %d%s", v->axis, v->exclusive ? " exclusive" : "");
    break;
  case OP_EINSUM:
    fprintf(f, " \"%s\"", ein_str(tmp, &v->ein));
    if (v->ein.fill[0]) /* the last operand: counts that bound fill_of, indexed by fill */
      fprintf(f, " fill \"%s:%c\"", v->ein.fill, v->ein.fill_of);
    break;
  case OP_REDUCE:
    fprintf(f, " %s [", reduce_fn_name(v->fn));
    for (int i = 0, first = 1; i < GSL_MAX_RANK; i++)
      if (v->rmask & (1u << i)) {
        fprintf(f, "%s%d", first ? "" : ", ", i);
        first = 0;
      }
    fputc(']', f);
    break;
  case OP_ALL_REDUCE:
    fprintf(f, " %s over ", reduce_fn_name(v->fn));
    print_group(f, p, v->group, v->ngroup);
    break;
  case OP_ALL_TO_ALL:
    fprintf(f, " split %d concat %d over ", v->axis, v->axis2);
    print_group(f, p, v->group, v->ngroup);
    if (v->carrier)
      fprintf(f, " (rides %%%d)", v->carrier->id);
    break;
  case OP_ALL_GATHER:
  case OP_REDUCE_SCATTER:
  case OP_LOCAL_SLICE:
    fprintf(f, " dim %d over ", v->axis);
    print_group(f, p, v->group, v->ngroup);
    break;
  case OP_PAD_MASK:
    fprintf(f, " dim %d over ", v->axis);
    print_group(f, p, v->group, v->ngroup);
    if (v->dtype == DT_I32)
      fprintf(f, " padding %lld", (long long)v->ival);
    else
      fprintf(f, " padding %g", v->fval);
    break;
  case OP_COLLECTIVE_PERMUTE:
    fprintf(f, " dim %d over ", v->axis);
    print_group(f, p, v->group, v->ngroup);
    fputs(" to ", f);
    print_group(f, p, v->group2, v->ngroup);
    break;
  case OP_SELECT:
  case OP_CAST:
  case OP_RESHAPE:
  case OP_GATHER:
  case OP_SCATTER_ADD:
  case OP_ONE_HOT:
  case OP_DISPATCH:
  case OP_COMBINE:
  case OP_ANNOTATE:
    break; /* no attributes: all in the shapes */
  case OP__COUNT:
    die("op %d printed", (int)v->op);
  }
}

void ir_print(FILE *f, const Program *p) {
  Arena *tmp = arena_new();
  if (p->mesh.naxes) {
    fputs("mesh [", f);
    for (int i = 0; i < p->mesh.naxes; i++)
      fprintf(f, "%s%s = %" PRId64, i ? ", " : "", p->mesh.name[i], p->mesh.size[i]);
    fputs("]\n", f);
  }
  for (int i = 0; i < p->ntensors; i++) {
    const Tensor *t = &p->tensors[i];
    static const char *const inits[] = {"none", "zeros", "ones", "normal", "uniform"};
    fprintf(f, "%s %s: %s%s", t->kind == TK_PARAM ? "param" : t->kind == TK_INPUT ? "input" : "state", t->name,
            dtype_name(t->dtype),
            shape_str(tmp, &t->shape));
    if (p->mesh.naxes && t->value) {
      Value tv = *t->value;
      tv.sh = t->sh;
      tv.shape = t->shape;
      fprintf(f, " {%s}", sharding_str(tmp, p, &tv));
    }
    fprintf(f, " init %s(%.9g, %.9g)%s\n", inits[t->init], t->a, t->b, t->frozen ? " frozen" : "");
  }
  for (int i = 0; i < p->nvalues; i++) {
    const Value *v = p->values[i];
    fprintf(f, "%%%d", v->id);
    if (v->name)
      fprintf(f, " %s", v->name);
    fprintf(f, ": %s%s", dtype_name(v->dtype), shape_str(tmp, &v->shape));
    if (p->mesh.naxes || v->sh_origin != SO_NONE)
      fprintf(f, " {%s}", sharding_str(tmp, p, v));
    fprintf(f, " = %s", op_name(v->op));
    print_attrs(f, tmp, p, v);
    for (int j = 0; j < v->nargs; j++)
      fprintf(f, "%s%%%d", j ? ", " : " ", v->args[j]->id);
    if (v->rows) /* its slot rows bounded by those counts, at these dims */
      fprintf(f, " rows %%%d [%d, %d, %d]", v->rows->id, v->rows_dim[0], v->rows_dim[1], v->rows_dim[2]);
    if (v->span.src) {
      const char *base = strrchr(v->span.src->path, '/');
      fprintf(f, "   ; %s:%u", base ? base + 1 : v->span.src->path, v->span.line);
    }
    if (v->pass != PASS_FORWARD)
      fprintf(f, " (%s)", ir_pass_name(v->pass));
    fputc('\n', f);
  }
  static const char *const kinds[] = {"output", "loss", "update", "signal"};
  for (int i = 0; i < p->noutputs; i++)
    if (p->outputs[i].kind == OUT_LOSS)
      fprintf(f, "loss = %%%d\n", p->outputs[i].value->id);
    else
      fprintf(f, "%s %s = %%%d\n", kinds[p->outputs[i].kind], p->outputs[i].name, p->outputs[i].value->id);
  arena_free(tmp);
}
