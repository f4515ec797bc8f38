/* autodiff.c — reverse-mode automatic differentiation over the global IR,
 * and the optimizer step of `train LOSS with OPT(...)`.
 *
 * Method. The pass runs after sema, before sharding propagation, so the
 * backward values are propagated and partitioned like the forward ones: a
 * data-parallel gradient comes out of its einsum as a partial sum that the
 * partitioner resolves, with no gradient all-reduce of its own.
 *   1. Which values matter: those the loss reaches through operands that
 *      get a cotangent (ops.def's slots column; i32 values, comparisons,
 *      argmax and casts to or from i32 get none), and that depend on a
 *      trained param through such operands. A param the loss reaches only
 *      through other operands, or not at all, is warned about and left as
 *      it is.
 *   2. The sweep: the loss's cotangent is 1; values are visited in reverse
 *      program order, and each op's rule (ops.def's rule column, d_RULE
 *      below; the elementwise formulas are unary.def's and binary.def's)
 *      adds its operands' cotangents, built with ir.c's builder on the
 *      forward value's span, call site and region (so --explain names the
 *      line whose backward needed a collective, and a later pass's error
 *      the calls it was inlined through; a region's backward values are
 *      never recomputed, only its forward ones). Where the forward value lies
 *      in a region chosen for recomputation (Region.recompute: a remat fn
 *      or remat for, or --mem-budget's choice), the rule sees its copy
 *      instead (recomputed below): the region's values computed again,
 *      just before their first backward use, from the values the region
 *      reads, which alone stay live from the forward pass.
 *   3. The optimizer: the step count (a state, when the optimizer or the
 *      schedule needs it), the step's learning rate (lr, or the
 *      schedule's IR function of the steps done), the global norm of the
 *      gradients and, with clip, their common factor; then per trained
 *      param its state tensors (optim.def), zeros with the param's shape
 *      and annotation, and the update inlined (ir_inline) on the param,
 *      its gradient (times the factor), the states, the step number and
 *      the hyperparameters with that lr: sema compiled the
 *      stdlib/optim.gsl functions to IR functions (p->train.updates, one
 *      per param shape, and p->train.schedule), so this pass needs nothing
 *      of the front end. The new param and states become OUT_UPDATE roots
 *      (stored at the step's end), the lr and the norm OUT_SIGNAL roots,
 *      the loss the OUT_LOSS root (the last three reported every step). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gslc.h"

#define AD_MAX_ARGS 16 /* most arguments an optimizer's update takes */

/* ---- the sweep's state ---------------------------------------------------------- */

typedef struct AD {
  Program *p;    /* the program, growing at its end */
  Build b;       /* what the rules build with: the backward pass at the call site of the value being
                    differentiated */
  Value **ct;    /* per forward value id: its cotangent so far, NULL: none yet */
  bool *active;  /* per forward value id: gets a cotangent */
  int nfwd;      /* forward values: ids below it */
  int *unit;     /* per region number: the outermost recomputed region around it (or itself), 0: kept */
  Value **re;    /* per forward value id in a recomputed region: its recomputed copy, NULL: none yet */
  struct Runs *runs; /* per forward value id: slices' cotangents not yet joined into ct (accum_slice) */
  Span sp;       /* the forward value being differentiated: the backward values' span */
  DType dt;      /* its dtype if a float (f32 or bf16), else f32: the constants of its rule */
} AD;

/* Operand k of v gets a cotangent from v's: its slot is differentiable
 * (ops.def) and both are floats (f32 or bf16; a cotangent has its value's
 * dtype); comparisons and argmax give none. */
static bool diff_slot(const Value *v, int k) {
  const OpInfo *info = ir_op(v->op);
  if (!(info->dslots & (1u << (k < 31 ? k : 31))) || !dtype_is_float(v->dtype) ||
      !dtype_is_float(v->args[k]->dtype))
    return false;
  if (v->op == OP_BINARY && binary_is_compare(v->fn))
    return false;
  if (v->op == OP_REDUCE && v->fn == RF_ARGMAX)
    return false;
  return true;
}

/* The forward value x stands for: itself, or the one it recomputes. */
static const Value *fwd(const Value *x) { return x->remat_of ? x->remat_of : x; }

static bool is_active(const AD *a, const Value *x) { return a->active[fwd(x)->id]; }

/* ---- recomputation ------------------------------------------------------------------ */

/* v as the backward pass reads it: v itself, or, where v lies in a
 * recomputed region, its copy computed again from the values the region
 * reads (those outside it, even in another recomputed region: kept), made
 * here, at its first use. The copy
 * is the same op on the same attributes (an RNG draw the same stream), so
 * the same kernels give the same bits. A chain is walked with a stack of
 * its own: a region may hold a chain of thousands of values. */
static Value *recomputed(AD *a, Value *v) {
  if (v->id >= a->nfwd || !a->unit[v->region])
    return v;
  if (a->re[v->id])
    return a->re[v->id];
  Value **stack = xmalloc(sizeof *stack * 16);
  int n = 0, cap = 16;
  stack[n++] = v;
  while (n) {
    Value *u = stack[n - 1];
    bool ready = true;
    for (int k = 0; k < u->nargs; k++) {
      Value *x = u->args[k];
      if (x->id < a->nfwd && a->unit[x->region] == a->unit[u->region] && !a->re[x->id]) {
        if (n == cap)
          stack = xrealloc(stack, sizeof *stack * (size_t)(cap *= 2));
        stack[n++] = x;
        ready = false;
      }
    }
    if (!ready)
      continue;
    n--;
    if (a->re[u->id])
      continue;
    Value *args[16], **ops = u->nargs <= 16 ? args : xmalloc(sizeof *ops * (size_t)u->nargs);
    for (int k = 0; k < u->nargs; k++)
      ops[k] = a->unit[u->args[k]->region] == a->unit[u->region] && a->re[u->args[k]->id] ? a->re[u->args[k]->id]
                                                                                         : u->args[k];
    Value *c = ir_copy(a->p, u, ops);
    c->pass = PASS_RECOMPUTE;
    c->remat_of = u;
    if (ops != args)
      free(ops);
    a->re[u->id] = c;
  }
  free(stack);
  return a->re[v->id];
}

static Value *zeros(AD *a, DType dt, Shape s) {
  return ir_broadcast(&a->b, ir_const(&a->b, dt, 0, a->sp), s, a->sp);
}

/* ---- accumulating cotangents ----------------------------------------------------- */

/* A run of a cotangent along one axis: [start, start + len), holding v, or
 * zeros where v is NULL. */
typedef struct Seg {
  int64_t start, len;
  Value *v;
} Seg;

static bool is_zeros(const Value *v) {
  while (v->op == OP_BROADCAST)
    v = v->args[0];
  return v->op == OP_CONST && dtype_is_float(v->dtype) && v->fval == 0;
}

/* v as runs along axis, in order, into out: a concat's operands (zeros
 * where an operand is a broadcast 0), else v as one run. */
static void runs_of(Value *v, int axis, Seg *out) {
  if (v->op != OP_CONCAT || v->axis != axis) {
    out[0] = (Seg){0, v->shape.d[axis], is_zeros(v) ? NULL : v};
    return;
  }
  int64_t at = 0;
  for (int k = 0; k < v->nargs; k++) {
    Value *u = v->args[k];
    out[k] = (Seg){at, u->shape.d[axis], is_zeros(u) ? NULL : u};
    at += u->shape.d[axis];
  }
}

/* old + d where both are concats along one axis whose non-zero runs never
 * straddle a boundary of the other: the concat of the runs' sums, with
 * zeros where both are zero, or NULL where the sum is not of that form.
 * The gradient of a stacked param read a slice at a time (w[0], w[1], ...)
 * is then one concat of the slices' gradients, not a sum of padded copies. */
static Value *add_runs(AD *a, Value *old, Value *d) {
  if (old->op != OP_CONCAT && d->op != OP_CONCAT)
    return NULL;
  int axis = old->op == OP_CONCAT ? old->axis : d->axis;
  if ((old->op == OP_CONCAT && old->axis != axis) || (d->op == OP_CONCAT && d->axis != axis))
    return NULL;
  int cap = (old->op == OP_CONCAT ? old->nargs : 1) + (d->op == OP_CONCAT ? d->nargs : 1);
  Seg *ra = xmalloc((size_t)cap * sizeof *ra), *rb = xmalloc((size_t)cap * sizeof *rb);
  Seg *out = xmalloc((size_t)cap * sizeof *out);
  runs_of(old, axis, ra);
  runs_of(d, axis, rb);
  /* walk both lists of runs by their boundaries */
  int i = 0, j = 0, n = 0;
  int64_t at = 0, end = old->shape.d[axis];
  while (at < end) {
    int64_t ea = ra[i].start + ra[i].len, eb = rb[j].start + rb[j].len, e = ea < eb ? ea : eb;
    /* a non-zero run must be whole within [at, e) */
    if ((ra[i].v && (ra[i].start != at || ea != e)) || (rb[j].v && (rb[j].start != at || eb != e)))
      goto fail;
    Value *v = ra[i].v && rb[j].v ? ir_binary(&a->b, BF_ADD, ra[i].v, rb[j].v, a->sp) : ra[i].v ? ra[i].v : rb[j].v;
    if (!v && n && !out[n - 1].v)
      out[n - 1].len += e - at; /* zeros after zeros: one run */
    else
      out[n++] = (Seg){at, e - at, v};
    at = e;
    if (ea == e)
      i++;
    if (eb == e)
      j++;
  }
  Value **parts = xmalloc((size_t)n * sizeof *parts);
  for (int k = 0; k < n; k++) {
    Shape s = old->shape;
    s.d[axis] = out[k].len;
    parts[k] = out[k].v ? out[k].v : zeros(a, old->dtype, s);
  }
  Value *r = ir_concat(&a->b, parts, n, axis, a->sp);
  free(parts);
  free(ra);
  free(rb);
  free(out);
  return r;
fail:
  free(ra);
  free(rb);
  free(out);
  return NULL;
}

/* The cotangents of slices of one value along one axis, kept apart until
 * the value's cotangent is read (ct_of): a param stacked over L layers and
 * read a slice a layer gets L of them, and joining each into a concat of
 * the runs so far made L concats of up to L operands (65536 layers took
 * gigabytes). Joined at once, they make one concat, the same as the
 * pairwise joins of add_runs: runs at the same place summed in the order
 * they came, zeros between. */
typedef struct Runs {
  int axis;   /* the axis the slices were taken along */
  int n, cap; /* entries of seg */
  Seg *seg;   /* in the order they came */
} Runs;

static int by_start(const void *x, const void *y) {
  const Seg *a = x, *b = y;
  return a->start < b->start ? -1 : a->start > b->start;
}

/* Joins x's pending runs into its cotangent (which has none else: a
 * value's first non-slice cotangent joins them first). */
static void join_runs(AD *a, int id) {
  Runs *r = &a->runs[id];
  if (!r->n)
    return;
  const Value *x = a->p->values[id];
  qsort(r->seg, (size_t)r->n, sizeof *r->seg, by_start);
  Value **parts = xmalloc(sizeof *parts * (size_t)(2 * r->n + 1));
  int n = 0;
  int64_t at = 0, end = x->shape.d[r->axis];
  Shape s = x->shape;
  for (int k = 0; k <= r->n; k++) {
    int64_t next = k < r->n ? r->seg[k].start : end;
    if (next > at) {
      s.d[r->axis] = next - at;
      parts[n++] = zeros(a, x->dtype, s);
    }
    if (k < r->n) {
      parts[n++] = r->seg[k].v;
      at = r->seg[k].start + r->seg[k].len;
    }
  }
  a->ct[id] = n == 1 ? parts[0] : ir_concat(&a->b, parts, n, r->axis, a->sp);
  free(parts);
  r->n = 0;
}

/* x's cotangent so far, its pending runs joined */
static Value *ct_of(AD *a, int id) {
  join_runs(a, id);
  return a->ct[id];
}

static void accum(AD *a, const Value *x, Value *d);

/* Adds g as the cotangent of x's slice [start, start + len) along axis:
 * a run kept apart while x's cotangent is runs alone along that axis,
 * none of them overlapping it but one at the same place (summed); else
 * g between zeros, added as any cotangent. */
static void accum_slice(AD *a, const Value *x, int axis, int64_t start, int64_t len, Value *g) {
  x = fwd(x);
  if (!a->active[x->id])
    return;
  Runs *r = &a->runs[x->id];
  bool apart = !a->ct[x->id] && (!r->n || r->axis == axis);
  int same = -1;
  for (int k = 0; k < r->n && apart; k++) {
    const Seg *q = &r->seg[k];
    if (q->start == start && q->len == len)
      same = k;
    else if (q->start < start + len && start < q->start + q->len)
      apart = false; /* a partial overlap */
  }
  if (apart && same >= 0) {
    r->seg[same].v = ir_binary(&a->b, BF_ADD, r->seg[same].v, g, a->sp);
    return;
  }
  if (apart) {
    if (r->n == r->cap)
      r->seg = xrealloc(r->seg, sizeof *r->seg * (size_t)(r->cap = r->cap ? 2 * r->cap : 4));
    r->axis = axis;
    r->seg[r->n++] = (Seg){start, len, g};
    return;
  }
  Value *parts[3];
  int n = 0;
  int64_t after = x->shape.d[axis] - start - len;
  Shape s = x->shape;
  if (start) {
    s.d[axis] = start;
    parts[n++] = zeros(a, g->dtype, s);
  }
  parts[n++] = g;
  if (after) {
    s.d[axis] = after;
    parts[n++] = zeros(a, g->dtype, s);
  }
  accum(a, x, n == 1 ? g : ir_concat(&a->b, parts, n, axis, a->sp));
}

static void accum(AD *a, const Value *x, Value *d) {
  x = fwd(x); /* a recomputed operand's cotangent is its forward value's */
  if (!d || !a->active[x->id])
    return;
  join_runs(a, x->id);
  if (!shape_eq(&d->shape, &x->shape) || d->dtype != x->dtype)
    die("the cotangent of %%%d is %s%s, the value %s%s", x->id, dtype_name(d->dtype),
        shape_str(a->p->arena, &d->shape), dtype_name(x->dtype), shape_str(a->p->arena, &x->shape));
  Value *old = a->ct[x->id];
  Value *sum = old ? add_runs(a, old, d) : d;
  a->ct[x->id] = sum ? sum : ir_binary(&a->b, BF_ADD, old, d, a->sp);
}

/* ---- the elementwise formulas of unary.def and binary.def ------------------------- */

#define K(c) ir_const(&a->b, a->dt, (c), a->sp)
#define NEG(u) ir_unary(&a->b, UF_NEG, (u), a->sp)
#define LOG(u) ir_unary(&a->b, UF_LOG, (u), a->sp)
#define ADD(u, w) ir_binary(&a->b, BF_ADD, (u), (w), a->sp)
#define SUB(u, w) ir_binary(&a->b, BF_SUB, (u), (w), a->sp)
#define MUL(u, w) ir_binary(&a->b, BF_MUL, (u), (w), a->sp)
#define DIV(u, w) ir_binary(&a->b, BF_DIV, (u), (w), a->sp)
#define POW(u, w) ir_binary(&a->b, BF_POW, (u), (w), a->sp)
#define GT(u, w) ir_binary(&a->b, BF_GT, (u), (w), a->sp)
#define LT(u, w) ir_binary(&a->b, BF_LT, (u), (w), a->sp)
#define GE(u, w) ir_binary(&a->b, BF_GE, (u), (w), a->sp)
#define LE(u, w) ir_binary(&a->b, BF_LE, (u), (w), a->sp)
#define COS(u) ir_unary(&a->b, UF_COS, (u), a->sp)
#define SIN(u) ir_unary(&a->b, UF_SIN, (u), a->sp)
#define GELU_D(u) gelu_slope(a, (u))
#define NONE NULL

/* d/dx of 0.5 x (1 + tanh(c (x + 0.044715 x^3))), c = sqrt(2/pi):
 * 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 * 0.044715 x^2) */
static Value *gelu_slope(AD *a, Value *x) {
  const double c = 0.79788456080286535588;
  Value *x2 = MUL(x, x);
  Value *t = ir_unary(&a->b, UF_TANH, MUL(K(c), ADD(x, MUL(K(0.044715), MUL(x2, x)))), a->sp);
  Value *half = MUL(K(0.5), ADD(K(1), t));
  Value *inner = MUL(K(c), ADD(K(1), MUL(K(3 * 0.044715), x2)));
  return ADD(half, MUL(MUL(K(0.5), x), MUL(SUB(K(1), MUL(t, t)), inner)));
}

static void d_unary(AD *a, const Value *v, Value *g) {
  Value *x = v->args[0], *r = (Value *)v;
  Value *d = NULL;
  switch ((UnaryFn)v->fn) {
#define X(id, name, fold, int_ok, deriv) \
  case UF_##id:                          \
    d = deriv;                           \
    break;
#include "unary.def"
#undef X
  case UF__COUNT:
    die("unary %d", v->fn);
  }
  (void)r;
  accum(a, x, d);
}

static void d_binary(AD *a, const Value *v, Value *g) {
  Value *x = v->args[0], *y = v->args[1], *r = (Value *)v;
  bool dx = diff_slot(v, 0) && is_active(a, x), dy = diff_slot(v, 1) && is_active(a, y);
  switch ((BinaryFn)v->fn) {
#define X(id, name, sym, fold, cmp, ddx, ddy) \
  case BF_##id:                               \
    if (dx)                                   \
      accum(a, x, ddx);                       \
    if (dy)                                   \
      accum(a, y, ddy);                       \
    break;
#include "binary.def"
#undef X
  case BF__COUNT:
    die("binary %d", v->fn);
  }
  (void)r;
}

#undef K
#undef NEG
#undef LOG
#undef ADD
#undef SUB
#undef MUL
#undef DIV
#undef POW
#undef GT
#undef LT
#undef GE
#undef LE
#undef COS
#undef SIN
#undef GELU_D
#undef NONE

/* ---- the rules of ops.def ----------------------------------------------------------- */

typedef void DerivFn(AD *a, const Value *v, Value *g);

static void d_none(AD *a, const Value *v, Value *g) { (void)a, (void)v, (void)g; }

static void d_spmd(AD *a, const Value *v, Value *g) {
  (void)a, (void)g;
  die("%s %%%d in the global program", op_name(v->op), v->id);
}

static void d_select(AD *a, const Value *v, Value *g) {
  Value *z = ir_const(&a->b, g->dtype, 0, a->sp);
  if (diff_slot(v, 1))
    accum(a, v->args[1], ir_select(&a->b, v->args[0], g, z, a->sp));
  if (diff_slot(v, 2))
    accum(a, v->args[2], ir_select(&a->b, v->args[0], z, g, a->sp));
}

/* between f32 and bf16: the cotangent cast back (f32 gradients of bf16
 * uses are summed in f32) */
static void d_cast(AD *a, const Value *v, Value *g) {
  accum(a, v->args[0], ir_cast(&a->b, g, v->args[0]->dtype, a->sp));
}

/* the cotangent through the forward's mask: dropped where it dropped,
 * scaled by the same factor (the same p and stream draw the same bits
 * again, in the backward pass, rather than keeping a mask from the
 * forward one: gsl.7, TRAINING, Dropout) */
static void d_dropout(AD *a, const Value *v, Value *g) {
  accum(a, v->args[0], ir_dropout_as(&a->b, g, v, a->sp));
}

static void d_annotate(AD *a, const Value *v, Value *g) {
  accum(a, v->args[0], ir_annotate(&a->b, g, &v->sh, a->sp)); /* the cotangent laid out as the value */
}

static void d_reshape(AD *a, const Value *v, Value *g) {
  accum(a, v->args[0], ir_reshape(&a->b, g, v->args[0]->shape, a->sp));
}

static void d_transpose(AD *a, const Value *v, Value *g) {
  int inv[GSL_MAX_RANK];
  for (int i = 0; i < v->shape.rank; i++)
    inv[v->perm[i]] = i;
  accum(a, v->args[0], ir_transpose(&a->b, g, inv, a->sp));
}

/* g summed over the new and the stretched dims, back to the operand's shape */
static void d_broadcast(AD *a, const Value *v, Value *g) {
  const Value *x = v->args[0];
  uint32_t mask = 0;
  int kept[GSL_MAX_RANK], nk = 0;
  for (int i = 0; i < v->shape.rank; i++)
    if (v->perm[i] < 0 || x->shape.d[v->perm[i]] != v->shape.d[i])
      mask |= 1u << i;
    else
      kept[nk++] = v->perm[i];
  Value *s = mask ? ir_reduce(&a->b, RF_SUM, g, mask, a->sp) : g;
  int order[GSL_MAX_RANK]; /* the kept dims in the operand's order */
  bool sorted = true;
  for (int i = 0; i < nk; i++) {
    order[i] = i;
    for (int j = 0; j < i; j++)
      sorted &= kept[j] < kept[i];
  }
  if (!sorted) {
    for (int i = 0; i < nk; i++)
      for (int j = i + 1; j < nk; j++)
        if (kept[order[j]] < kept[order[i]]) {
          int t = order[i];
          order[i] = order[j];
          order[j] = t;
        }
    s = ir_transpose(&a->b, s, order, a->sp);
  }
  accum(a, x, ir_reshape(&a->b, s, x->shape, a->sp));
}

/* g between zeros along the axis */
static void d_slice(AD *a, const Value *v, Value *g) {
  accum_slice(a, v->args[0], v->axis, v->start, v->shape.d[v->axis], g);
}

static void d_concat(AD *a, const Value *v, Value *g) {
  int64_t off = 0;
  for (int k = 0; k < v->nargs; k++) {
    int64_t len = v->args[k]->shape.d[v->axis];
    if (diff_slot(v, k))
      accum(a, v->args[k], ir_slice(&a->b, g, v->axis, off, len, a->sp));
    off += len;
  }
}

/* operand k's cotangent: einsum(out, other -> in[k]) of g and the other
 * operand; every letter of in[k] is in the result or the other operand */
static void d_einsum(AD *a, const Value *v, Value *g) {
  const EinsumSpec *e = &v->ein;
  if (e->nin != 2)
    die("one-operand einsum %%%d reached autodiff (ir_einsum makes it a transpose)", v->id);
  for (int k = 0; k < 2; k++) {
    if (!diff_slot(v, k) || !is_active(a, v->args[k]))
      continue;
    EinsumSpec z = {.nin = 2};
    strcpy(z.in[0], e->out);
    strcpy(z.in[1], e->in[1 - k]);
    strcpy(z.out, e->in[k]);
    Value *ops[2] = {ir_cast(&a->b, g, v->args[1 - k]->dtype, a->sp), v->args[1 - k]}; /* bf16 ops: g rounded */
    accum(a, v->args[k], ir_einsum(&a->b, &z, ops, a->sp));
  }
}

/* g with the reduced dims put back as size 1 */
static Value *unreduce(AD *a, Value *g, const Value *x, uint32_t rmask) {
  Shape s = x->shape;
  for (int i = 0; i < s.rank; i++)
    if (rmask & (1u << i))
      s.d[i] = 1;
  return ir_reshape(&a->b, g, s, a->sp);
}

/* sum: g broadcast back; max: g shared equally by the elements equal to
 * the maximum (PyTorch's amax) */
static void d_reduce(AD *a, const Value *v, Value *g) {
  Value *x = v->args[0];
  Value *gb = ir_broadcast(&a->b, unreduce(a, g, x, v->rmask), x->shape, a->sp);
  if (v->fn == RF_SUM) {
    accum(a, x, gb);
    return;
  }
  Value *m = ir_broadcast(&a->b, unreduce(a, (Value *)v, x, v->rmask), x->shape, a->sp);
  Value *hit = ir_binary(&a->b, BF_EQ, x, m, a->sp);
  Value *count = ir_reduce(&a->b, RF_SUM, hit, v->rmask, a->sp);
  Value *cb = ir_broadcast(&a->b, unreduce(a, count, x, v->rmask), x->shape, a->sp);
  accum(a, x, ir_binary(&a->b, BF_DIV, ir_binary(&a->b, BF_MUL, gb, hit, a->sp), cb, a->sp));
}

/* inclusive: x_j reaches y_i for i >= j, so dx = total - exclusive
 * cumsum of g; exclusive: i > j, so dx = total - inclusive cumsum */
static void d_cumsum(AD *a, const Value *v, Value *g) {
  Value *x = v->args[0];
  Value *tot = ir_reduce(&a->b, RF_SUM, g, 1u << v->axis, a->sp);
  Value *tb = ir_broadcast(&a->b, unreduce(a, tot, x, 1u << v->axis), x->shape, a->sp);
  accum(a, x, ir_binary(&a->b, BF_SUB, tb, ir_cumsum(&a->b, g, v->axis, !v->exclusive, a->sp), a->sp));
}

static void d_gather(AD *a, const Value *v, Value *g) {
  accum(a, v->args[0], ir_scatter_add(&a->b, g, v->args[1], v->args[0]->shape.d[0], a->sp));
}

static void d_scatter_add(AD *a, const Value *v, Value *g) {
  accum(a, v->args[0], ir_gather(&a->b, g, v->args[1], a->sp));
}

/* [G, S, K]: per choice k, the dot product over M of u's row [G, S, M]
 * with the expert-side row of big [E, G, C, M] it is routed to (0 where
 * dropped): a combine whose weights select choice k, times u, summed */
static Value *route_dot(AD *a, Value *u, Value *big, Value *expert, Value *slot) {
  int64_t G = expert->shape.d[0], S = expert->shape.d[1], K = expert->shape.d[2];
  Value **parts = xmalloc(sizeof *parts * (size_t)K);
  Shape gs = {2, {G, S}}, col = {3, {G, S, 1}};
  for (int64_t k = 0; k < K; k++) {
    Value *ck = ir_broadcast(&a->b, ir_const(&a->b, DT_I32, (double)k, a->sp), gs, a->sp);
    Value *row = ir_combine(&a->b, big, expert, slot, ir_one_hot(&a->b, ck, K, a->sp), a->sp);
    Value *dot = ir_reduce(&a->b, RF_SUM, ir_binary(&a->b, BF_MUL, ir_cast(&a->b, u, DT_F32, a->sp), row, a->sp),
                           1u << 2, a->sp);
    parts[k] = ir_reshape(&a->b, dot, col, a->sp);
  }
  Value *r = K == 1 ? parts[0] : ir_concat(&a->b, parts, (int)K, 2, a->sp);
  free(parts);
  return r;
}

/* dispatch (x [G, S, M] -> [E, G, C, M], rows scaled by an optional
 * weight): x gets the rows of g its choices were routed to, weighted, as
 * combine does; the weight gets x's row dotted with that row */
static void d_dispatch(AD *a, const Value *v, Value *g) {
  Value *ex = v->args[1], *sl = v->args[2];
  Value *w = v->nargs == 4 ? v->args[3] : ir_broadcast(&a->b, ir_const(&a->b, DT_F32, 1, a->sp), ex->shape, a->sp);
  if (diff_slot(v, 0))
    accum(a, v->args[0], ir_cast(&a->b, ir_combine(&a->b, g, ex, sl, w, a->sp), v->args[0]->dtype, a->sp));
  if (v->nargs == 4 && diff_slot(v, 3) && is_active(a, w))
    accum(a, w, route_dot(a, v->args[0], g, ex, sl));
}

/* combine (y [E, G, C, M] -> [G, S, M], sum of weight * routed row): y
 * gets g's rows dispatched back, weighted; the weights get the routed
 * row of y dotted with g's */
static void d_combine(AD *a, const Value *v, Value *g) {
  Value *y = v->args[0], *ex = v->args[1], *sl = v->args[2], *w = v->args[3];
  if (diff_slot(v, 0) && is_active(a, y))
    accum(a, y, ir_dispatch_weighted(&a->b, ir_cast(&a->b, g, y->dtype, a->sp), ex, sl, w, y->shape.d[0],
                                     y->shape.d[2], a->sp)); /* a bf16 y: g rounded before it is moved */
  if (diff_slot(v, 3) && is_active(a, w))
    accum(a, w, route_dot(a, g, y, ex, sl));
}

static DerivFn *const rules[] = {
#define X(op, s, n, cls, lvl, fl, d, ds, sh) d_##d,
#include "ops.def"
#undef X
};

/* ---- the pass ------------------------------------------------------------------------ */

static bool trained(const Program *p, const Value *v) {
  return v->op == OP_PARAM && p->tensors[v->tensor].kind == TK_PARAM && !p->tensors[v->tensor].frozen;
}

/* The optimizer-wide step count (a state tensor counting from 0: the
 * steps done), whose next value, one more, is the step number t the
 * optimizer sees and the count stored for the next step. */
static Value *step_count(const Build *bd, const Train *t, Value **next_out) {
  Program *p = bd->p;
  Tensor st = {0};
  st.name = arena_printf(p->arena, "%s.t", ir_optim(t->opt)->name);
  st.kind = TK_STATE;
  st.dtype = DT_F32;
  st.shape.rank = 0;
  st.span = t->span;
  st.init = INIT_ZEROS;
  st.state_of = -1;
  int idx = p->ntensors;
  Value *tv = ir_tensor(bd, &st);
  Value *next = ir_binary(bd, BF_ADD, tv, ir_const(bd, DT_F32, 1, t->span), t->span);
  ir_root(p, OUT_UPDATE, st.name, next, idx, t->span);
  *next_out = next;
  return tv;
}

/* The learning rate of this step: lr as written, or the schedule's
 * function (decay.def's, sema compiled it) of the steps done. */
static Value *learning_rate(const Build *bd, const Train *t, Value *done) {
  char w[64];
  double dflt, lr = 0;
  for (int k = 0; ir_optim_keyword(t->opt, k, w, sizeof w, &dflt); k++)
    if (strcmp(w, "lr") == 0)
      lr = t->args[k];
  Value *r = ir_const(bd, DT_F32, lr, t->opt_span);
  if (!t->schedule)
    return r;
  Value *args[5] = {done, r, ir_const(bd, DT_F32, t->warmup, t->opt_span),
                    ir_const(bd, DT_F32, t->decay_steps, t->opt_span), ir_const(bd, DT_F32, t->min_lr, t->opt_span)};
  if (ir_inline(bd, t->schedule, args, 5, &r, 1) != 1 || r->dtype != DT_F32 || r->shape.rank != 0)
    die("optim.gsl's %s does not give one f32 scalar", ir_decay_fn(t->decay));
  return r;
}

/* The mesh axes param ti's annotation splits it over (0: none). */
static uint32_t split_axes(const Program *p, int ti) {
  const Tensor *t = &p->tensors[ti];
  uint32_t m = 0;
  for (int d = 0; t->annotated && d < t->shape.rank; d++)
    for (int k = 0; k < t->sh.naxes[d]; k++)
      m |= 1u << t->sh.axes[d][k];
  return m;
}

/* The global norm of the gradients grads[k] of params ti[k], k < n: the
 * square root of the sum of their squares, as
 * torch.nn.utils.clip_grad_norm_ computes it up to the order of the sums:
 * each gradient's sum over all of its elements, then these sums added
 * in declaration order, but the params split over the same mesh axes
 * together and first, so that their partial sums over those axes meet
 * before the one scalar all-reduce they need. */
static Value *grad_norm(const Build *bd, const int *ti, Value **grads, int n, Span sp) {
  const Program *p = bd->p;
  Value *total = NULL;
  bool *done = xcalloc((size_t)n + 1, 1);
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < n; i++) {
      uint32_t m = split_axes(p, ti[i]);
      if (done[i] || (pass == 0 && !m))
        continue;
      for (int j = i; j < n; j++) /* i and every later param split as it is */
        if (!done[j] && split_axes(p, ti[j]) == m) {
          done[j] = true;
          Value *sq = ir_binary(bd, BF_MUL, grads[j], grads[j], sp);
          uint32_t all = grads[j]->shape.rank ? (uint32_t)((1ull << grads[j]->shape.rank) - 1) : 0;
          Value *s = all ? ir_reduce(bd, RF_SUM, sq, all, sp) : sq;
          total = total ? ir_binary(bd, BF_ADD, total, s, sp) : s;
        }
    }
  free(done);
  return ir_unary(bd, UF_SQRT, total ? total : ir_const(bd, DT_F32, 0, sp), sp);
}

/* The update (sema's IR function) of the param's shape. */
static const Program *update_of(const Program *p, const Shape *sh) {
  for (int k = 0; k < p->train.nupdates; k++)
    if (shape_eq(&p->train.updates[k]->tensors[0].shape, sh))
      return p->train.updates[k];
  die("sema made no optimizer update of the shape %s", shape_str(p->arena, sh));
}

/* The optimizer step of param ti with gradient grad, at learning rate lr. */
static void optimize(const Build *bd, int ti, Value *grad, Value *step, Value *lr) {
  Program *p = bd->p;
  const Train *t = &p->train;
  const OptimInfo *o = ir_optim(t->opt);
  Value *args[AD_MAX_ARGS], *res[AD_MAX_ARGS];
  int sidx[AD_MAX_ARGS], n = 0, ns = 0;
  args[n++] = p->tensors[ti].value;
  args[n++] = grad;
  char w[64];
  for (; ir_optim_state(t->opt, ns, w, sizeof w); ns++) {
    const Tensor *pt = &p->tensors[ti];
    Tensor st = {0};
    st.name = arena_printf(p->arena, "%s.%s.%s", o->name, w, pt->name);
    st.kind = TK_STATE;
    st.dtype = DT_F32;
    st.shape = pt->shape;
    st.span = pt->span;
    st.init = INIT_ZEROS;
    st.state_of = ti;
    st.annotated = pt->annotated;
    st.sh = pt->sh;
    sidx[ns] = p->ntensors;
    args[n++] = ir_tensor(bd, &st);
  }
  if (o->step)
    args[n++] = step;
  double dflt;
  for (int k = 0; ir_optim_keyword(t->opt, k, w, sizeof w, &dflt); k++)
    args[n++] = strcmp(w, "lr") == 0 ? lr : ir_const(bd, DT_F32, t->args[k], t->opt_span);
  int got = ir_inline(bd, update_of(p, &p->tensors[ti].shape), args, n, res, AD_MAX_ARGS);
  if (got != 1 + ns)
    die("optim.gsl's %s gives %d values, optim.def names %d states", o->fn, got, ns);
  for (int k = 0; k < got; k++)
    if (res[k]->dtype != DT_F32 || !shape_eq(&res[k]->shape, &p->tensors[ti].shape))
      die("optim.gsl's %s gives a value of another shape than its param", o->fn);
  Span at = p->tensors[ti].span;
  ir_root(p, OUT_UPDATE, p->tensors[ti].name, res[0], ti, at);
  for (int k = 0; k < ns; k++)
    ir_root(p, OUT_UPDATE, p->tensors[sidx[k]].name, res[1 + k], sidx[k], at);
}

void ad_train(Program *p, Diag *d) {
  Train *t = &p->train;
  if (!t->loss)
    return;
  int n = p->nvalues, L = t->loss->id;
  bool *reach = xcalloc((size_t)n, 1), *dreach = xcalloc((size_t)n, 1), *dep = xcalloc((size_t)n, 1);
  reach[L] = dreach[L] = true;
  for (int i = L; i >= 0; i--) {
    const Value *v = p->values[i];
    for (int k = 0; k < v->nargs && reach[i]; k++) {
      reach[v->args[k]->id] = true;
      if (dreach[i] && diff_slot(v, k))
        dreach[v->args[k]->id] = true;
    }
  }
  for (int i = 0; i <= L; i++) {
    const Value *v = p->values[i];
    dep[i] = trained(p, v);
    for (int k = 0; k < v->nargs && !dep[i]; k++)
      dep[i] = diff_slot(v, k) && dep[v->args[k]->id];
  }
  AD a = {p, build_at(p, PASS_BACKWARD, (Span){0}, 0), xcalloc((size_t)n, sizeof(Value *)),
          xcalloc((size_t)n, 1), n, xcalloc((size_t)p->nregions + 1, sizeof(int)),
          xcalloc((size_t)n, sizeof(Value *)), xcalloc((size_t)n + 1, sizeof(Runs)), t->span, DT_F32};
  for (int r = 1; r <= p->nregions; r++)
    a.unit[r] = ir_region_unit(p, r);
  for (int i = 0; i <= L; i++)
    a.active[i] = dep[i] && dreach[i];
  if (a.active[L]) {
    a.ct[L] = ir_const(&a.b, DT_F32, 1, t->span);
    for (int i = L; i >= 0; i--) {
      const Value *v = p->values[i];
      if (!a.active[i] || !ct_of(&a, i) || v->op == OP_PARAM)
        continue;
      a.sp = v->span;
      a.dt = dtype_is_float(v->dtype) ? v->dtype : DT_F32;
      a.b = build_at(p, PASS_BACKWARD, v->site, v->region); /* v's backward: at v's call site, in its calls */
      rules[v->op](&a, recomputed(&a, (Value *)v), a.ct[i]);
    }
  }
  Build upd = build_at(p, PASS_UPDATE, (Span){0}, 0); /* the optimizer's values */
  int ntensors = p->ntensors; /* the optimizer adds its states after */
  int *trained_ti = xmalloc(sizeof *trained_ti * (size_t)(ntensors + 1)), ntrained = 0;
  Value **grads = xmalloc(sizeof *grads * (size_t)(ntensors + 1));
  for (int i = 0; i < ntensors; i++) {
    const Tensor *pt = &p->tensors[i];
    if (pt->kind != TK_PARAM || pt->frozen)
      continue;
    int id = pt->value->id;
    if (!reach[id]) {
      diag_warning(d, pt->span, "param '%s' does not reach the loss; it is left as it is", pt->name);
      diag_note(d, t->span, "the loss trained here");
      continue;
    }
    if (!a.active[id] || !ct_of(&a, id)) {
      diag_warning(d, pt->span,
                   "param '%s' reaches the loss only through operations without a derivative (comparisons, "
                   "argmax, one_hot, indices, casts to i32); it is left as it is",
                   pt->name);
      diag_note(d, t->span, "the loss trained here");
      continue;
    }
    p->tensors[i].grad = a.ct[id];
    trained_ti[ntrained] = i;
    grads[ntrained++] = a.ct[id];
  }
  if (ntrained) {
    /* the step count, the lr, the norm and clipping, then every update */
    Value *step = NULL, *done = NULL;
    if (ir_optim(t->opt)->step || t->schedule)
      done = step_count(&upd, t, &step);
    Value *lr = learning_rate(&upd, t, done);
    Value *norm = grad_norm(&upd, trained_ti, grads, ntrained, t->opt_span);
    Value *coef = NULL;
    if (t->clip > 0) { /* min(1, clip / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_ */
      Value *eps = ir_binary(&upd, BF_ADD, norm, ir_const(&upd, DT_F32, 1e-6, t->opt_span), t->opt_span);
      coef = ir_binary(&upd, BF_MIN, ir_const(&upd, DT_F32, 1, t->opt_span),
                       ir_binary(&upd, BF_DIV, ir_const(&upd, DT_F32, t->clip, t->opt_span), eps, t->opt_span),
                       t->opt_span);
    }
    for (int k = 0; k < ntrained; k++)
      optimize(&upd, trained_ti[k], coef ? ir_binary(&upd, BF_MUL, grads[k], coef, t->opt_span) : grads[k], step,
               lr);
    ir_signal(p, "lr", "lr", lr, t->opt_span);
    ir_signal(p, "grad_norm", "gnorm", norm, t->opt_span);
  }
  free(trained_ti);
  free(grads);
  ir_root(p, OUT_LOSS, "loss", t->loss, -1, t->span);
  for (int k = 0; k < t->nupdates; k++)
    if (t->updates[k]->home == p) /* else borrowed from the program ir_clone copied */
      ir_free(t->updates[k]);
  free(t->updates);
  t->updates = NULL;
  t->nupdates = 0;
  if (t->schedule && t->schedule->home == p)
    ir_free(t->schedule);
  t->schedule = NULL;
  free(reach);
  free(dreach);
  free(dep);
  free(a.ct);
  free(a.active);
  free(a.unit);
  free(a.re);
  for (int i = 0; i < n; i++)
    free(a.runs[i].seg);
  free(a.runs);
}
