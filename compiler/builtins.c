/* builtins.c — the built-in functions of GSL, one handler per builtins.def
 * row.
 *
 * Method: sema_builtins is generated from builtins.def: each row names its
 * handler (bi_HANDLER below, shared by rows that differ only in the IR
 * function they map to) and that function (the row's fn column: a UnaryFn,
 * BinaryFn or ReduceFn). A call first has its arguments counted and its
 * keywords checked against the row, then the handler evaluates them, checks
 * their dtypes and shapes with the user's errors, checks that the result
 * stays within GSL_MAX_ELEMS, and builds IR through ir.c's builder;
 * higher-level builtins (softmax, mean) expand into the IR's few general
 * ops. Sharding annotations (replicate, split, shard) are read here too, for
 * expressions and declarations alike. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "sema.h"

#define X(id, name, lo, hi, kw, handler, fn) static BuiltinFn bi_##handler;
#include "builtins.def"
#undef X

const Builtin sema_builtins[BI__COUNT] = {
#define X(id, name, lo, hi, kw, handler, fn) {BI_##id, name, lo, hi, kw, bi_##handler, fn},
#include "builtins.def"
#undef X
};

int sema_builtin_lookup(const char *name) {
  for (int i = 0; i < BI__COUNT; i++)
    if (strcmp(sema_builtins[i].name, name) == 0)
      return i;
  return -1;
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

/* ---- calls ------------------------------------------------------------------------------ */


bool sema_split_args(Sema *s, const Node *call, Args *a) {
  memset(a, 0, sizeof *a);
  a->call = call;
  for (int i = 0; i < call->list.len; i++) {
    const Node *x = call->list.items[i];
    if (x->kind == AST_KWARG) {
      if (a->nkw == SEMA_MAX_ARGS) {
        sema_error(s, x->span, "more than %d keyword arguments", SEMA_MAX_ARGS);
        return false;
      }
      for (int k = 0; k < a->nkw; k++)
        if (strcmp(a->kw[k]->name, x->name) == 0) {
          sema_error(s, x->span, "keyword argument '%s' is given twice", x->name);
          diag_note(s->diag, a->kw[k]->span, "it is first given here");
          return false;
        }
      a->kw[a->nkw++] = x;
    } else {
      if (a->nkw) {
        sema_error(s, x->span, "positional argument after a keyword argument");
        return false;
      }
      if (a->npos == SEMA_MAX_ARGS) {
        sema_error(s, x->span, "more than %d arguments", SEMA_MAX_ARGS);
        return false;
      }
      a->pos[a->npos++] = x;
    }
  }
  return true;
}

const Node *sema_kwarg(const Args *a, const char *name) {
  for (int i = 0; i < a->nkw; i++)
    if (strcmp(a->kw[i]->name, name) == 0)
      return a->kw[i]->a;
  return NULL;
}

bool sema_check_builtin_args(Sema *s, int id, const Args *a) {
  const Builtin *b = &sema_builtins[id];
  if (a->npos < b->lo || a->npos > b->hi) {
    if (b->lo == b->hi)
      sema_error(s, a->call->span, "%s takes %d argument%s, %d given", b->name, b->lo, b->lo == 1 ? "" : "s", a->npos);
    else
      sema_error(s, a->call->span, "%s takes %d to %d arguments, %d given", b->name, b->lo, b->hi, a->npos);
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
      sema_error(s, a->kw[i]->span, "%s has no keyword argument '%s'", b->name, k);
      return false;
    }
    for (int j = 0; j < i; j++)
      if (strcmp(a->kw[j]->name, k) == 0) {
        sema_error(s, a->kw[i]->span, "keyword argument '%s' given twice", k);
        return false;
      }
    if (strcmp(k, "dim") == 0 && a->npos > 1) {
      sema_error(s, a->kw[i]->span, "%s: the dimension is given both by position and as dim", b->name);
      return false;
    }
  }
  return true;
}

/* The dimension argument at position pos, or the keyword argument dim. */
static const Node *dim_node(const Args *a, int pos) {
  return a->npos > pos ? a->pos[pos] : sema_kwarg(a, "dim");
}

/* a dimension argument, negative counting from the end */
static bool dim_arg(Sema *s, Scope *sc, const Node *n, int rank, const char *fn, int *dim) {
  bool ok = true;
  int64_t d = sema_eval_int(s, sc, n, "a dimension", &ok);
  if (!ok)
    return false;
  if (d < -rank || d >= rank) {
    sema_error(s, n->span, "%s: dimension %" PRId64 " is out of range for a tensor of rank %d", fn, d, rank);
    return false;
  }
  *dim = (int)(d < 0 ? d + rank : d);
  return true;
}

bool sema_bool_kwarg(Sema *s, Scope *sc, const Args *a, const char *name, bool dflt) {
  const Node *n = sema_kwarg(a, name);
  if (!n)
    return dflt;
  R r = sema_eval(s, sc, n);
  if (r.k == R_INT)
    return r.i != 0;
  if (r.k != R_NONE)
    sema_error(s, n->span, "'%s' must be true or false", name);
  return dflt;
}

/* ---- sharding annotations --------------------------------------------------------------- */

int sema_axis_index(const Sema *s, const char *name) {
  for (int i = 0; i < s->b.p->mesh.naxes; i++)
    if (strcmp(s->b.p->mesh.name[i], name) == 0)
      return i;
  return -1;
}

bool sema_check_sharding(Sema *s, const Sharding *sh, const Shape *shape, const char *what, Span sp) {
  for (int i = 0; i < shape->rank; i++) {
    int64_t shards = 1;
    for (int j = 0; j < sh->naxes[i]; j++)
      shards *= s->b.p->mesh.size[sh->axes[i][j]];
    if (shape->d[i] < shards) {
      const char *axes = "";
      for (int j = 0; j < sh->naxes[i]; j++) {
        int ax = sh->axes[i][j];
        axes = arena_printf(s->b.p->arena, "%s%s%s = %" PRId64, axes, j ? ", " : "", s->b.p->mesh.name[ax],
                            s->b.p->mesh.size[ax]);
      }
      sema_error(s, sp, "dimension %d of %s (size %" PRId64 ") cannot be cut into %" PRId64 " shards (mesh axes %s): "
                 "every shard would need at least one element",
           i, what, shape->d[i], shards, axes);
      return false;
    }
  }
  return true;
}

static bool add_axis(Sema *s, Sharding *sh, int dim, const Node *axis, uint32_t *used) {
  int ax = sema_axis_index(s, axis->name);
  if (ax < 0) {
    if (s->b.p->mesh.naxes == 0)
      sema_error(s, axis->span, "unknown mesh axis '%s' (the program declares no mesh)", axis->name);
    else
      sema_error(s, axis->span, "unknown mesh axis '%s'", axis->name);
    return false;
  }
  if (*used & (1u << ax)) {
    sema_error(s, axis->span, "mesh axis '%s' is used twice in one sharding", axis->name);
    return false;
  }
  *used |= 1u << ax;
  sh->axes[dim][sh->naxes[dim]++] = (uint8_t)ax;
  return true;
}

/* Reads the sharding an annotation call describes for a tensor of shape;
 * first is the index of its first argument after the tensor (0 on a
 * declaration, 1 in an expression). */
bool sema_annotation_sharding(Sema *s, Scope *sc, int id, const Args *a, int first, const Shape *shape,
                                Sharding *sh) {
  memset(sh, 0, sizeof *sh);
  const char *fn = sema_builtins[id].name;
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
        sema_error(s, ax->span, "split: the axis must be a mesh axis name");
        return false;
      }
      return add_axis(s, sh, dim, ax, &used);
    }
    for (int i = 0; i < s->b.p->mesh.naxes; i++)
      sh->axes[dim][sh->naxes[dim]++] = (uint8_t)i;
    return true;
  }
  /* shard(x, [a, _, (b, c)]) */
  const Node *l = a->pos[first];
  if (l->kind != AST_LIST) {
    sema_error(s, l->span, "shard: expected a list like [a, _, (b, c)], one entry per dimension");
    return false;
  }
  if (l->list.len != shape->rank) {
    sema_error(s, l->span, "shard: the list has %d entries but the tensor has rank %d", l->list.len, shape->rank);
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
          sema_error(s, e->list.items[j]->span, "shard: expected a mesh axis name");
          return false;
        }
        if (!add_axis(s, sh, i, e->list.items[j], &used))
          return false;
      }
    } else {
      sema_error(s, e->span, "shard: expected a mesh axis, a tuple of axes, or _");
      return false;
    }
  }
  return true;
}

/* ---- handlers -------------------------------------------------------------------------- */

static Value *need_f32(Sema *s, const char *fn, Value *v, Span sp) {
  if (v && !dtype_is_float(v->dtype)) {
    sema_error(s, sp, "%s needs an f32 or bf16 tensor, got %s (use f32(x))", fn, sema_vtype(s, v));
    return NULL;
  }
  return v;
}

static R bi_unary(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  const char *fn = b->name;
  Span sp = a->call->span;
  R r = sema_eval(s, sc, a->pos[0]);
  if (is_num(r))
    return rfloat(ir_fold_unary(b->fn, num(r)));
  if (r.k == R_TUPLE)
    sema_error(s, sp, "%s: the argument gives several values", fn);
  if (r.k != R_VALUE)
    return none;
  Value *x = r.v;
  if (!unary_int_ok(b->fn))
    x = need_f32(s, fn, x, sp);
  return x ? rval(ir_unary(&s->b, b->fn, x, sp)) : none;
}

static R bi_binary(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  const char *fn = b->name;
  Span sp = a->call->span;
  R x = sema_eval(s, sc, a->pos[0]), y = sema_eval(s, sc, a->pos[1]);
  if (x.k == R_NONE || y.k == R_NONE)
    return none;
  if (is_num(x) && is_num(y)) {
    int64_t r;
    if (x.k == R_INT && y.k == R_INT && ir_fold_binary_int(b->fn, x.i, y.i, &r))
      return rint_(r); /* max and min; pow folds in floating point */
    return rfloat(ir_fold_binary(b->fn, num(x), num(y)));
  }
  if (x.k == R_TUPLE || y.k == R_TUPLE) {
    sema_error(s, sp, "%s: an argument gives several values", fn);
    return none;
  }
  Value *va, *vb;
  sema_promote(s, &x, &y, sp, &va, &vb);
  if (b->fn == BF_POW && !(va = need_f32(s, fn, va, sp)))
    return none;
  return rval(sema_elementwise2(s, b->fn, va, vb, sp));
}

static R bi_where(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  Span sp = a->call->span;
  Value *c = sema_eval_value(s, sc, a->pos[0]);
  R x = sema_eval(s, sc, a->pos[1]), y = sema_eval(s, sc, a->pos[2]);
  if (!c || x.k == R_NONE || y.k == R_NONE)
    return none;
  if (x.k == R_TUPLE || y.k == R_TUPLE) {
    sema_error(s, sp, "where: an argument gives several values");
    return none;
  }
  Value *va, *vb;
  if (is_num(x) && is_num(y)) {
    va = ir_const(&s->b, DT_F32, num(x), sp);
    vb = ir_const(&s->b, DT_F32, num(y), sp);
  } else {
    sema_promote(s, &x, &y, sp, &va, &vb);
  }
  Shape o1, o;
  int bad;
  if (!shape_broadcast(&c->shape, &va->shape, &o1, &bad) || !shape_broadcast(&o1, &vb->shape, &o, &bad)) {
    sema_error(s, sp, "where: shapes %s, %s and %s do not broadcast", sema_vtype(s, c), sema_vtype(s, va),
               sema_vtype(s, vb));
    return none;
  }
  if (!sema_check_shape(s, &o, va->dtype, "where", sp))
    return none;
  return rval(ir_select(&s->b, c, va, vb, sp));
}

static R bi_cast(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  Span sp = a->call->span;
  Value *x = sema_eval_value(s, sc, a->pos[0]);
  const Node *t = a->pos[1];
  if (!x)
    return none;
  DType dt;
  if (t->kind != AST_NAME || !sema_dtype_name(t->name, &dt)) {
    sema_error(s, t->span, "cast: the type must be f32, bf16 or i32");
    return none;
  }
  return rval(ir_cast(&s->b, x, dt, sp));
}

/* f32(x), bf16(x): casts (to bf16: to nearest, ties to even); of a number,
 * a scalar of that dtype */
static R bi_convert(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  Span sp = a->call->span;
  R r = sema_eval(s, sc, a->pos[0]);
  if (is_num(r))
    return rval(ir_const(&s->b, (DType)b->fn, num(r), sp));
  if (r.k == R_TUPLE)
    sema_error(s, sp, "%s: the argument gives several values", b->name);
  if (r.k != R_VALUE)
    return none;
  return rval(ir_cast(&s->b, r.v, (DType)b->fn, sp));
}

/* cast_like(x, y): x cast to y's dtype (a library function computing in
 * f32 gives its result back in its input's type) */
static R bi_cast_like(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  Span sp = a->call->span;
  Value *x = sema_eval_value(s, sc, a->pos[0]), *y = sema_eval_value(s, sc, a->pos[1]);
  (void)b;
  if (!x || !y)
    return none;
  return rval(ir_cast(&s->b, x, y->dtype, sp));
}

static R bi_reduce(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  int id = b->id;
  const char *fn = b->name;
  Span sp = a->call->span;
  Value *x = sema_eval_value(s, sc, a->pos[0]);
  if (!x)
    return none;
  uint32_t mask = all_dims(x->shape.rank);
  if (dim_node(a, 1)) {
    int d;
    if (!dim_arg(s, sc, dim_node(a, 1), x->shape.rank, fn, &d))
      return none;
    mask = 1u << d;
  } else if (id == BI_ARGMAX) {
    sema_error(s, sp, "argmax needs the dimension to reduce: argmax(x, dim)");
    return none;
  }
  bool keep = sema_bool_kwarg(s, sc, a, "keep", false);
  if ((id == BI_MEAN || id == BI_ARGMAX) && !need_f32(s, fn, x, sp))
    return none;
  Value *v;
  if (x->shape.rank == 0) {
    v = x;
  } else if (id == BI_MEAN) { /* in f32 whatever x is, rounded back once */
    v = ir_reduce(&s->b, b->fn, ir_cast(&s->b, x, DT_F32, sp), mask, sp);
    int64_t n = shape_elems(&x->shape) / shape_elems(&v->shape);
    v = ir_cast(&s->b, sema_elementwise2(s, BF_MUL, v, ir_const(&s->b, DT_F32, 1.0 / (double)n, sp), sp), x->dtype, sp);
  } else {
    v = ir_reduce(&s->b, b->fn, x, mask, sp);
  }
  if (keep)
    v = ir_reshape(&s->b, v, keep_shape(&x->shape, mask), sp);
  return rval(v);
}

/* softmax(x, dim) and log_softmax(x, dim): max-subtracted, as is stable */
static R softmax(Sema *s, Scope *sc, const Builtin *b, const Args *a, bool logarithm) {
  const char *fn = b->name;
  Span sp = a->call->span;
  Value *x = need_f32(s, fn, sema_eval_value(s, sc, a->pos[0]), sp);
  int d = x ? x->shape.rank - 1 : 0;
  if (!x || (dim_node(a, 1) && !dim_arg(s, sc, dim_node(a, 1), x->shape.rank, fn, &d)))
    return none;
  if (x->shape.rank == 0) {
    sema_error(s, sp, "%s needs a tensor of rank 1 or more", fn);
    return none;
  }
  const Build *bd = &s->b;
  uint32_t m = 1u << d;
  Shape k = keep_shape(&x->shape, m);
  DType dt = x->dtype;
  x = ir_cast(bd, x, DT_F32, sp); /* computed in f32, given back in x's dtype */
  Value *mx = ir_reshape(bd, ir_reduce(bd, RF_MAX, x, m, sp), k, sp);
  Value *z = ir_binary(bd, BF_SUB, x, mx, sp);
  Value *e = ir_unary(bd, UF_EXP, z, sp);
  Value *sum = ir_reshape(bd, ir_reduce(bd, RF_SUM, e, m, sp), k, sp);
  if (logarithm)
    return rval(ir_cast(bd, ir_binary(bd, BF_SUB, z, ir_unary(bd, UF_LOG, sum, sp), sp), dt, sp));
  return rval(ir_cast(bd, ir_binary(bd, BF_DIV, e, sum, sp), dt, sp));
}

static R bi_softmax(Sema *s, Scope *sc, const Builtin *b, const Args *a) { return softmax(s, sc, b, a, false); }
static R bi_log_softmax(Sema *s, Scope *sc, const Builtin *b, const Args *a) { return softmax(s, sc, b, a, true); }

static R bi_cumsum(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  const char *fn = b->name;
  Span sp = a->call->span;
  Value *x = sema_eval_value(s, sc, a->pos[0]);
  int d;
  if (!dim_node(a, 1)) {
    sema_error(s, sp, "cumsum needs the dimension to scan: cumsum(x, dim)");
    return none;
  }
  if (!x || !dim_arg(s, sc, dim_node(a, 1), x->shape.rank, fn, &d))
    return none;
  return rval(ir_cumsum(&s->b, x, d, sema_bool_kwarg(s, sc, a, "exclusive", false), sp));
}

static R bi_one_hot(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  Span sp = a->call->span;
  Value *x = sema_eval_value(s, sc, a->pos[0]);
  bool ok = true;
  int64_t n = sema_eval_int(s, sc, a->pos[1], "one_hot's depth", &ok);
  if (!x || !ok)
    return none;
  if (x->dtype != DT_I32) {
    sema_error(s, a->pos[0]->span, "one_hot needs i32 indices, got %s (use cast(x, i32))", sema_vtype(s, x));
    return none;
  }
  if (n <= 0 || x->shape.rank >= GSL_MAX_RANK) {
    sema_error(s, sp, n <= 0 ? "one_hot's depth must be positive" : "one_hot: result rank too large");
    return none;
  }
  Shape o = x->shape;
  o.d[o.rank++] = n;
  if (!sema_check_shape(s, &o, DT_F32, "one_hot", sp))
    return none;
  return rval(ir_one_hot(&s->b, x, n, sp));
}

/* iota's and arange's extent along the counted dimension: its indices
 * 0..n-1 must fit i32 */
#define IOTA_MAX ((int64_t)INT32_MAX + 1)

/* arange(n): i32[n] = [0, 1, ..., n-1] */
static R bi_arange(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  bool ok = true;
  int64_t n = sema_eval_int(s, sc, a->pos[0], "arange's length", &ok);
  if (!ok)
    return none;
  if (n <= 0 || n > IOTA_MAX) {
    sema_error(s, a->pos[0]->span,
               n <= 0 ? "arange: the length %" PRId64 " is not positive"
                      : "arange: the length %" PRId64 " is past 2^31: its indices do not fit i32",
               n);
    return none;
  }
  Shape o = {1, {n}};
  return rval(ir_iota(&s->b, o, 0, a->call->span));
}

/* iota([d0, d1, ...], dim): i32 of that shape, each element its index
 * along dim (JAX's broadcasted_iota) */
static R bi_iota(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  Span sp = a->call->span;
  const Node *l = a->pos[0];
  if (l->kind != AST_LIST) {
    sema_error(s, l->span, "iota: expected the shape as a list, like [4, 4]");
    return none;
  }
  if (l->list.len == 0 || l->list.len > GSL_MAX_RANK) {
    sema_error(s, l->span, l->list.len ? "iota: more than %d dimensions" : "iota: the shape has no dimensions",
               GSL_MAX_RANK);
    return none;
  }
  Shape o = {0};
  int64_t known = 1;
  bool huge = false; /* the dims multiply past GSL_MAX_ELEMS */
  for (int i = 0; i < l->list.len; i++) {
    bool ok = true;
    int64_t d = sema_eval_int(s, sc, l->list.items[i], "a dimension", &ok);
    if (!ok)
      return none;
    if (d <= 0) {
      sema_error(s, l->list.items[i]->span, "iota: dimension %" PRId64 " is not positive", d);
      return none;
    }
    if (d > GSL_MAX_ELEMS / known)
      huge = true;
    else
      known *= d;
    o.d[o.rank++] = d;
  }
  if (huge) {
    sema_error(s, sp, "iota: the shape %s has more than 2^40 elements", sema_span_text(s, l->span));
    return none;
  }
  const Node *dn = dim_node(a, 1);
  int d;
  if (!dn) {
    sema_error(s, sp, "iota needs the dimension to count along: iota(shape, dim)");
    return none;
  }
  if (!dim_arg(s, sc, dn, o.rank, b->name, &d))
    return none;
  if (o.d[d] > IOTA_MAX) {
    sema_error(s, l->list.items[d]->span, "iota: dimension %d has %" PRId64 " indices, past 2^31: they do not fit i32",
               d, o.d[d]);
    return none;
  }
  return rval(ir_iota(&s->b, o, d, sp));
}

static R bi_gather(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  Span sp = a->call->span;
  Value *t = sema_eval_value(s, sc, a->pos[0]), *ix = sema_eval_value(s, sc, a->pos[1]);
  if (!t || !ix)
    return none;
  if (ix->dtype != DT_I32) {
    sema_error(s, a->pos[1]->span, "gather needs i32 indices, got %s (use cast(x, i32))", sema_vtype(s, ix));
    return none;
  }
  if (t->shape.rank < 1 || ix->shape.rank + t->shape.rank - 1 > GSL_MAX_RANK) {
    sema_error(s, sp, t->shape.rank < 1 ? "gather needs a table of rank 1 or more" : "gather: result rank too large");
    return none;
  }
  Shape o = ix->shape;
  for (int i = 1; i < t->shape.rank; i++)
    o.d[o.rank++] = t->shape.d[i];
  if (!sema_check_shape(s, &o, t->dtype, "gather", sp))
    return none;
  return rval(ir_gather(&s->b, t, ix, sp));
}

static R bi_reshape(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  Span sp = a->call->span;
  Value *x = sema_eval_value(s, sc, a->pos[0]);
  const Node *l = a->pos[1];
  if (!x)
    return none;
  if (l->kind != AST_LIST) {
    sema_error(s, l->span, "reshape: expected the new shape as a list, like [4, -1]");
    return none;
  }
  if (l->list.len > GSL_MAX_RANK) {
    sema_error(s, l->span, "reshape: more than %d dimensions", GSL_MAX_RANK);
    return none;
  }
  Shape o = {0};
  int infer = -1;
  int64_t known = 1;
  bool huge = false; /* the known dims multiply past GSL_MAX_ELEMS */
  for (int i = 0; i < l->list.len; i++) {
    bool ok = true;
    int64_t d = sema_eval_int(s, sc, l->list.items[i], "a dimension", &ok);
    if (!ok)
      return none;
    if (d == -1 && infer < 0) {
      infer = i;
    } else if (d <= 0) {
      sema_error(s, l->list.items[i]->span, "reshape: dimension %" PRId64 " is not positive (only one -1 may be inferred)", d);
      return none;
    } else if (d > GSL_MAX_ELEMS / known) {
      huge = true;
    } else {
      known *= d;
    }
    o.d[o.rank++] = d;
  }
  if (huge) {
    sema_error(s, sp, "reshape: the new shape %s has more than 2^40 elements", sema_span_text(s, l->span));
    return none;
  }
  int64_t n = shape_elems(&x->shape);
  if (infer >= 0) {
    if (n % known != 0) {
      sema_error(s, sp, "reshape: %s cannot be viewed with shape %s", sema_vtype(s, x), sema_span_text(s, l->span));
      return none;
    }
    o.d[infer] = n / known;
    known = n;
  }
  if (known != n) {
    sema_error(s, sp, "reshape: %s has %" PRId64 " elements but the new shape %s has %" PRId64, sema_vtype(s, x), n,
         shape_str(s->b.p->arena, &o), known);
    return none;
  }
  return rval(ir_reshape(&s->b, x, o, sp));
}

static R bi_transpose(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  const char *fn = b->name;
  Span sp = a->call->span;
  Value *x = sema_eval_value(s, sc, a->pos[0]);
  if (!x)
    return none;
  int r = x->shape.rank, perm[GSL_MAX_RANK];
  for (int i = 0; i < r; i++)
    perm[i] = r - 1 - i;
  if (a->npos > 1) {
    const Node *l = a->pos[1];
    if (l->kind != AST_LIST || l->list.len != r) {
      sema_error(s, l->span, "transpose: expected a permutation of the %d dimensions as a list", r);
      return none;
    }
    uint32_t seen = 0;
    for (int i = 0; i < r; i++) {
      int d;
      if (!dim_arg(s, sc, l->list.items[i], r, fn, &d))
        return none;
      if (seen & (1u << d)) {
        sema_error(s, l->list.items[i]->span, "transpose: dimension %d appears twice", d);
        return none;
      }
      seen |= 1u << d;
      perm[i] = d;
    }
  }
  return rval(ir_transpose(&s->b, x, perm, sp));
}

static R bi_concat(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  const char *fn = b->name;
  Span sp = a->call->span;
  const Node *l = a->pos[0];
  if (l->kind != AST_LIST || l->list.len < 1) {
    sema_error(s, l->span, "concat: expected the tensors as a list, like [a, b]");
    return none;
  }
  Value **xs = arena_alloc(s->b.p->arena, sizeof(Value *) * (size_t)l->list.len);
  for (int i = 0; i < l->list.len; i++)
    if (!(xs[i] = sema_eval_value(s, sc, l->list.items[i])))
      return none;
  int d;
  if (!dim_arg(s, sc, a->pos[1], xs[0]->shape.rank, fn, &d))
    return none;
  Shape o = xs[0]->shape;
  for (int i = 1; i < l->list.len; i++) {
    bool ok = xs[i]->shape.rank == o.rank && xs[i]->dtype == xs[0]->dtype;
    for (int j = 0; ok && j < o.rank; j++)
      ok = j == d || xs[i]->shape.d[j] == o.d[j];
    if (!ok) {
      sema_error(s, l->list.items[i]->span, "concat: %s does not fit beside %s along dimension %d", sema_vtype(s, xs[i]),
           sema_vtype(s, xs[0]), d);
      return none;
    }
    o.d[d] += xs[i]->shape.d[d];
  }
  if (!sema_check_shape(s, &o, xs[0]->dtype, "concat", sp))
    return none;
  return rval(ir_concat(&s->b, xs, l->list.len, d, sp));
}

static R bi_slice(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  const char *fn = b->name;
  Span sp = a->call->span;
  Value *x = sema_eval_value(s, sc, a->pos[0]);
  int d;
  bool ok = true;
  if (!x || !dim_arg(s, sc, a->pos[1], x->shape.rank, fn, &d))
    return none;
  int64_t lo = sema_eval_int(s, sc, a->pos[2], "slice's start", &ok);
  int64_t hi = sema_eval_int(s, sc, a->pos[3], "slice's stop", &ok);
  if (!ok)
    return none;
  int64_t n = x->shape.d[d];
  if (lo < 0)
    lo += n;
  if (hi < 0)
    hi += n;
  if (lo < 0 || hi > n || lo >= hi) {
    sema_error(s, sp, "slice: [%s, %s) is not a non-empty range within dimension %d of %s (size %" PRId64 ")",
         sema_span_text(s, a->pos[2]->span), sema_span_text(s, a->pos[3]->span), d, sema_vtype(s, x), n);
    return none;
  }
  return rval(ir_slice(&s->b, x, d, lo, hi - lo, sp));
}

static R bi_einsum(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  Span sp = a->call->span;
  const Node *t = a->pos[0];
  if (t->kind != AST_STRING) {
    sema_error(s, t->span, "einsum: the first argument must be a spec string like \"ij,jk->ik\"");
    return none;
  }
  Value *ops[2] = {NULL, NULL};
  for (int i = 1; i < a->npos; i++)
    if (!(ops[i - 1] = sema_eval_value(s, sc, a->pos[i])))
      return none;
  return rval(sema_einsum(s, t->name, ops, a->npos - 1, sp));
}

static R bi_uniform_like(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  Span sp = a->call->span;
  Value *x = sema_eval_value(s, sc, a->pos[0]);
  if (!x)
    return none;
  return rval(ir_rng(&s->b, RNG_UNIFORM, 0, 1, x->shape, sp));
}

/* dropout(x, p): x a float tensor, p a compile-time number in [0, 1)
 * (gsl.7, TRAINING, Dropout); p = 0 is x itself, drawing nothing */
static R bi_dropout(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  Span sp = a->call->span;
  Value *x = sema_eval_value(s, sc, a->pos[0]);
  bool ok = true;
  double p = sema_eval_number(s, sc, a->pos[1], "dropout's p", &ok);
  if (!x || !ok)
    return none;
  if (!dtype_is_float(x->dtype)) {
    sema_error(s, a->pos[0]->span, "dropout of %s: it drops elements of f32 or bf16 values", sema_vtype(s, x));
    return none;
  }
  if (!(p >= 0 && p < 1)) {
    sema_error(s, a->pos[1]->span, "dropout's p = %g is outside [0, 1) (the probability that an element is zeroed)",
               p);
    return none;
  }
  return rval(ir_dropout(&s->b, x, p, sp));
}

static R bi_annotate(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  int id = b->id;
  Span sp = a->call->span;
  Value *x = sema_eval_value(s, sc, a->pos[0]);
  if (!x)
    return none;
  Sharding sh;
  if (!sema_annotation_sharding(s, sc, id, a, 1, &x->shape, &sh) ||
      !sema_check_sharding(s, &sh, &x->shape,
                           arena_printf(s->b.p->arena, "'%s'", sema_span_text(s, a->pos[0]->span)), sp))
    return none;
  return rval(ir_annotate(&s->b, x, &sh, sp));
}

static R bi_initializer(Sema *s, Scope *sc, const Builtin *b, const Args *a) {
  const char *fn = b->name;
  Span sp = a->call->span;
  sema_error(s, sp, "%s() is an initializer: it belongs on a param or input declaration (param w: f32[4] = %s(...))",
       fn, fn);
  return none;
}

R sema_call_builtin(Sema *s, Scope *sc, int id, const Node *call) {
  Args a;
  if (!sema_split_args(s, call, &a) || !sema_check_builtin_args(s, id, &a))
    return none;
  return sema_builtins[id].handler(s, sc, &sema_builtins[id], &a);
}
