/* partition.c — the SPMD partitioner: from the global IR, whose values all
 * carry a sharding (propagate.c), to the program every device runs.
 *
 * Method: values are partitioned in program order. For each op the
 * partitioner decides the shardings its operands must have for the op to
 * run on local tiles alone (the "natural" form: e.g. an einsum wants each
 * letter cut alike in both operands, a slice wants its axis whole),
 * reshards each operand to that, emits the op on local shapes, and then
 * reshards the local result to the sharding propagation chose for the value.
 * A contracted or reduced dimension that is cut leaves a partial sum, which
 * that last resharding resolves.
 *
 * Each resharding is planned by sharding.c (shard_plan) and emitted step
 * by step as collectives; a step over axes of size 1 moves no data and is
 * emitted as an annotate that only renames the sharding. A resharded value
 * is remembered, so that a second consumer needing the same layout of the
 * same value reuses it. An einsum chooses between keeping a cut contracted
 * dimension and following its result's sharding by the bytes each choice
 * receives (sharding.c's cost model).
 *
 * The SPMD program is built with the rewriter (ir_rewrite): each global
 * value maps to its SPMD value, in the value's sharding. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gslc.h"

/* A resharded value, kept so that a second consumer needing the same
 * layout of the same value reuses it instead of communicating again. */
typedef struct Reuse Reuse;
struct Reuse {
  const Value *from; /* the SPMD value resharded */
  Value *to;         /* the result, in its new sharding */
  Reuse *next;       /* older entry */
};

typedef struct Part {
  Reuse *reuse;     /* resharded values, newest first */
  const Value *at;  /* the global value being partitioned */
  Program *s;       /* the SPMD program being built */
  Value **map;      /* global value id -> its SPMD value, in the value's sharding (plus pending partial sums) */
  bool *linear;     /* global value id -> its one use is a linear consumer: a partial sum may stay pending */
} Part;

/* ---- pending partial sums --------------------------------------------------------- */

/* The partial sums operand k of v has pending that v's sharding leaves
 * free to stay pending through v */
static uint32_t pending(const Part *P, const Value *v, int k, const Sharding *want) {
  return P->map[v->args[k]->id]->sh.partial & ~shard_all_axes(want, v->args[k]->shape.rank) &
         ~shard_all_axes(&v->sh, v->shape.rank);
}

static Sharding with_partial(Sharding sh, uint32_t partial) {
  sh.partial = partial;
  return sh;
}

/* A new SPMD value for global value orig (NULL for a collective) with
 * sharding sh on global shape gshape. */
static Value *emit(Part *P, const Value *orig, Op op, DType dt, Shape gshape, const Sharding *sh, Span sp,
                   int n, Value **args) {
  Shape local = shard_local_shape(P->s, &gshape, sh);
  /* in the region of the global value being partitioned: its SPMD values, collectives included */
  Build at = build_at(P->s, PASS_FORWARD, (Span){0}, P->at ? P->at->region : 0);
  Value *v = ir_add(&at, op, dt, local, sp, n, args);
  v->gshape = gshape;
  v->sh = *sh;
  v->orig = orig;
  if (orig) {
    v->site = orig->site;
    v->pass = orig->pass;
    v->name = orig->name;
    v->attr = orig->attr;
    v->sh_origin = orig->sh_origin;
    v->sh_from = orig->sh_from;
  }
  return v;
}

static void set_group(Value *v, const uint8_t *axes, int n) {
  memcpy(v->group, axes, (size_t)n);
  v->ngroup = n;
}

/* x with its padding along each of `dims` that its tiles pad (uneven
 * cuts, gsl.7 SHARDING) set to fill: the identity of the reduction or
 * contraction about to read it, so that the padding never contributes
 * (a select, not a product: padding may hold anything, even a NaN). */
static Value *masked(Part *P, Value *x, uint32_t dims, double fill, Span sp) {
  uint32_t pad = dims & shard_padded(P->s, &x->gshape, &x->sh);
  for (int d = 0; d < x->gshape.rank; d++) {
    if (!(pad & (1u << d)))
      continue;
    Value *m = emit(P, NULL, OP_PAD_MASK, x->dtype, x->gshape, &x->sh, sp, 1, &x);
    m->pass = P->at ? P->at->pass : PASS_UPDATE;
    m->site = P->at ? P->at->site : sp;
    m->axis = d;
    m->fval = fill;
    m->ival = fill > 2147483647.0 ? 2147483647 : fill < -2147483648.0 ? -2147483647 - 1 : (int64_t)fill;
    set_group(m, x->sh.axes[d], x->sh.naxes[d]);
    x = m;
  }
  return x;
}

/* Reshards x to t (which has no partial sums); the collectives it inserts
 * are charged to the consumer at span sp, for the reason why. */
static Value *reshard(Part *P, Value *x, const Sharding *t, Span sp, const char *why) {
  ShardStep steps[SHARD_MAX_STEPS];
  int n = shard_plan(P->s, &x->gshape, &x->sh, t, steps);
  for (int i = 0; i < n; i++) {
    /* over axes of size 1 the data is already where it must be: only the
     * sharding's name for it changes */
    Op op = shard_group_size(P->s, steps[i].group, steps[i].ngroup) == 1 ? OP_ANNOTATE : steps[i].op;
    Value *r = emit(P, NULL, op, x->dtype, x->gshape, &steps[i].after, sp, 1, &x);
    if (op == OP_ANNOTATE) {
      x = r;
      continue;
    }
    r->site = P->at ? P->at->site : sp;
    r->pass = P->at ? P->at->pass : PASS_UPDATE;
    r->axis = steps[i].axis;
    r->axis2 = steps[i].axis2;
    r->fn = RF_SUM;
    set_group(r, steps[i].group, steps[i].ngroup);
    memcpy(r->group2, steps[i].group2, sizeof r->group2);
    r->why = why;
    x = r;
  }
  return x;
}

static int64_t reshard_cost(const Part *P, const Value *x, const Sharding *t) {
  return shard_reshard_bytes(P->s, &x->gshape, x->dtype, &x->sh, t);
}

static const char *reason(Part *P, const Value *consumer, int k, const Value *x, const Sharding *want) {
  Value tmp = *x;
  tmp.sh = *want;
  return arena_printf(P->s->arena, "operand %d of %s (%%%d) is %s, needs %s", k + 1, op_name(consumer->op),
                      consumer->id, sharding_str(P->s->arena, P->s, x), sharding_str(P->s->arena, P->s, &tmp));
}

/* The SPMD value of global operand k of v, resharded to want. */
static Value *operand(Part *P, const Value *v, int k, const Sharding *want) {
  Value *x = P->map[v->args[k]->id];
  if (shard_eq(&x->sh, want, x->gshape.rank))
    return x;
  /* a value already resharded this way for another consumer is reused */
  for (Reuse *r = P->reuse; r; r = r->next)
    if (r->from == x && shard_eq(&r->to->sh, want, x->gshape.rank))
      return r->to;
  Value *y = reshard(P, x, want, v->span, reason(P, v, k, x, want));
  Reuse *r = arena_alloc(P->s->arena, sizeof *r);
  r->from = x;
  r->to = y;
  r->next = P->reuse;
  P->reuse = r;
  return y;
}

/* Reshards the op's natural local result to the value's own sharding,
 * leaving partial sums pending where the value's one use is linear (they
 * are resolved once, at the first consumer that needs the whole value). */
static Value *finish(Part *P, const Value *v, Value *r) {
  uint32_t keep = P->linear[v->id] ? r->sh.partial & ~shard_all_axes(&v->sh, v->shape.rank) : 0;
  Sharding t = with_partial(v->sh, keep);
  if (shard_eq(&r->sh, &t, v->shape.rank))
    return r;
  const char *why = arena_printf(P->s->arena, "%s (%%%d) gives %s, its sharding is %s", op_name(v->op), v->id,
                                 sharding_str(P->s->arena, P->s, r), sharding_str(P->s->arena, P->s, v));
  return reshard(P, r, &t, v->span, why);
}

static Value *emit_like(Part *P, const Value *v, const Sharding *sh, Value **args) {
  return emit(P, v, v->op, v->dtype, v->shape, sh, v->span, v->nargs, args);
}

/* An einsum's layout: the axes of each letter, the operands' shardings
 * that follow, and the local result's sharding (partial over the axes of
 * cut contracted letters). */
typedef struct Layout {
  Sharding want[2]; /* operands */
  Sharding result;  /* the local result */
  int64_t cost;     /* bytes received to get there and then to the value's sharding */
} Layout;

/* contracted_first: contracted letters keep the operands' cuts even where
 * the result's sharding wants those axes (leaving a partial sum to
 * reduce-scatter); otherwise the result's sharding comes first. */
static Layout einsum_layout(const Part *P, const Value *v, const EinsumSpec *z, bool contracted_first) {
  Layout L = {0};
  const Value *x[2] = {P->map[v->args[0]->id], P->map[v->args[1]->id]};
  Sharding letter = {0}; /* dim k: the axes of letter names[k] */
  char names[2 * GSL_MAX_RANK + 1] = {0};
  int nl = 0;
  uint32_t used = 0;
  /* contracted letters */
  Sharding con = {0};
  char cnames[2 * GSL_MAX_RANK + 1] = {0};
  int nc = 0;
  for (int k = 0; k < 2; k++)
    for (int i = 0; z->in[k][i]; i++) {
      char c = z->in[k][i];
      if (strchr(z->out, c) || strchr(cnames, c))
        continue;
      cnames[nc] = c;
      con.naxes[nc] = 0;
      if (contracted_first)
        for (int kk = 0; kk < 2 && !con.naxes[nc]; kk++) {
          int d = (int)(strchr(z->in[kk], c) - z->in[kk]);
          uint32_t m = shard_dim_axes(&x[kk]->sh, d);
          if (m && !(m & used)) {
            shard_copy_dim(&con, nc, &x[kk]->sh, d);
            used |= m;
          }
        }
      nc++;
    }
  /* result letters: the value's sharding, less axes taken above */
  Sharding rs = {0};
  for (int i = 0; z->out[i]; i++) {
    names[nl] = z->out[i];
    uint32_t m = shard_dim_axes(&v->sh, i);
    if (!(m & used)) {
      shard_copy_dim(&letter, nl, &v->sh, i);
      shard_copy_dim(&rs, i, &v->sh, i);
      used |= m;
    }
    nl++;
  }
  if (!contracted_first) /* contracted letters take what is left */
    for (int c = 0; c < nc; c++)
      for (int kk = 0; kk < 2 && !con.naxes[c]; kk++) {
        int d = (int)(strchr(z->in[kk], cnames[c]) - z->in[kk]);
        uint32_t m = shard_dim_axes(&x[kk]->sh, d);
        if (m && !(m & used)) {
          shard_copy_dim(&con, c, &x[kk]->sh, d);
          used |= m;
        }
      }
  for (int c = 0; c < nc; c++) {
    names[nl] = cnames[c];
    shard_copy_dim(&letter, nl++, &con, c);
    rs.partial |= shard_dim_axes(&con, c);
  }
  for (int k = 0; k < 2; k++) {
    for (int i = 0; z->in[k][i]; i++)
      shard_copy_dim(&L.want[k], i, &letter, (int)(strchr(names, z->in[k][i]) - names));
    L.cost += reshard_cost(P, x[k], &L.want[k]);
  }
  L.result = rs;
  L.cost += shard_reshard_bytes(P->s, &v->shape, v->dtype, &rs, &v->sh);
  return L;
}

static Value *part_einsum(Part *P, const Value *v) {
  const EinsumSpec z = v->ein;
  Layout a = einsum_layout(P, v, &z, false), b = einsum_layout(P, v, &z, true);
  const Layout *L = b.cost < a.cost ? &b : &a;
  Value *ops[3] = {operand(P, v, 0, &L->want[0]), operand(P, v, 1, &L->want[1])};
  for (int k = 0; k < 2; k++) { /* padding along a contracted letter contributes nothing */
    uint32_t con = 0;
    for (int i = 0; z.in[k][i]; i++)
      if (!strchr(z.out, z.in[k][i]))
        con |= 1u << i;
    ops[k] = masked(P, ops[k], con, 0.0, v->span);
  }
  if (z.fill[0]) { /* the fill counts follow the cuts of their letters in the operand that has them */
    Sharding fs = {0};
    for (int i = 0; z.fill[i]; i++) {
      int k = strchr(z.in[0], z.fill[i]) ? 0 : 1;
      shard_copy_dim(&fs, i, &L->want[k], (int)(strchr(z.in[k], z.fill[i]) - z.in[k]));
    }
    ops[2] = operand(P, v, 2, &fs);
  }
  return finish(P, v, emit_like(P, v, &L->result, ops));
}

static Value *part_reduce(Part *P, const Value *v) {
  const Value *a = v->args[0];
  Value *x = P->map[a->id];
  Sharding want = {0}, rs = v->sh;
  int k = 0;
  for (int i = 0; i < a->shape.rank; i++)
    if (!(v->rmask & (1u << i)))
      shard_copy_dim(&want, i, &v->sh, k++);
  /* A cut reduced dim stays cut: a sum becomes partial (resolved by the
   * resharding to the value's sharding), a max is completed at once by an
   * all-reduce of the local maxima. An argmax needs the dim whole: its
   * index is global. */
  uint32_t maxed = 0;
  if (v->fn != RF_ARGMAX) {
    uint32_t used = shard_all_axes(&v->sh, v->shape.rank);
    for (int i = 0; i < a->shape.rank; i++) {
      if (!(v->rmask & (1u << i)) || !x->sh.naxes[i])
        continue;
      uint32_t m = shard_dim_axes(&x->sh, i);
      if (m & used)
        continue;
      used |= m;
      if (v->fn == RF_SUM)
        rs.partial |= m;
      else
        maxed |= m;
      shard_copy_dim(&want, i, &x->sh, i);
    }
  }
  if (v->fn == RF_SUM) { /* a sum is linear: pending partial sums of x stay pending */
    uint32_t keep = pending(P, v, 0, &want) & ~rs.partial;
    want.partial = keep;
    rs.partial |= keep;
  }
  Value *o = masked(P, operand(P, v, 0, &want), v->rmask, v->fn == RF_SUM ? 0.0 : -INFINITY, v->span);
  Value *r = emit_like(P, v, &rs, &o);
  if (maxed) {
    uint8_t axes[GSL_MAX_AXES];
    int n = 0;
    for (int ax = 0; ax < P->s->mesh.naxes; ax++)
      if (maxed & (1u << ax))
        axes[n++] = (uint8_t)ax;
    Value *m = emit(P, NULL, OP_ALL_REDUCE, r->dtype, r->gshape, &rs, v->span, 1, &r);
    m->fn = RF_MAX;
    m->site = v->site;
    set_group(m, axes, n);
    m->why = arena_printf(P->s->arena, "reduce max (%%%d) over a cut dimension: the local maxima", v->id);
    r = m;
  }
  return finish(P, v, r);
}

/* the natural form of an op that needs dimension axis whole */
static Value *part_whole_axis(Part *P, const Value *v, int axis) {
  Sharding nat = v->sh;
  nat.naxes[axis] = 0;
  Value *ops[GSL_MAX_RANK * 4];
  Value **args = v->nargs <= (int)(sizeof ops / sizeof ops[0]) ? ops : xmalloc(sizeof(Value *) * (size_t)v->nargs);
  /* a concat is linear: operands all partial over the same axes give a
   * partial result (the counts of stdlib/moe.gsl's routing_signals: one
   * all-reduce, not one an operand) */
  uint32_t keep = v->op == OP_CONCAT ? pending(P, v, 0, &nat) : 0;
  for (int k = 1; k < v->nargs && keep; k++)
    if (pending(P, v, k, &nat) != keep)
      keep = 0;
  nat.partial = keep;
  for (int k = 0; k < v->nargs; k++) /* one_hot's operand is nat without its last dim */
    args[k] = operand(P, v, k, &nat);
  Value *r = finish(P, v, emit_like(P, v, &nat, args));
  if (args != ops)
    free(args);
  return r;
}

/* Every operand in the value's sharding. A pending partial sum passes
 * through a linear op: negation; a sum or difference of two values
 * partial over the same axes; a product with (or a quotient by) a value
 * that is whole over those axes. Anything else resolves it first. */
static Value *part_elementwise(Part *P, const Value *v) {
  Sharding want[3] = {v->sh, v->sh, v->sh};
  uint32_t keep = 0;
  if (v->op == OP_UNARY && v->fn == UF_NEG) {
    keep = want[0].partial = pending(P, v, 0, &v->sh);
  } else if (v->op == OP_BINARY) {
    uint32_t pa = pending(P, v, 0, &v->sh), pb = pending(P, v, 1, &v->sh);
    if ((v->fn == BF_ADD || v->fn == BF_SUB) && pa == pb)
      keep = want[0].partial = want[1].partial = pa;
    else if ((v->fn == BF_MUL || v->fn == BF_DIV) && pa && !P->map[v->args[1]->id]->sh.partial)
      keep = want[0].partial = pa;
    else if (v->fn == BF_MUL && pb && !P->map[v->args[0]->id]->sh.partial)
      keep = want[1].partial = pb;
  }
  Value *args[3];
  for (int k = 0; k < v->nargs; k++)
    args[k] = operand(P, v, k, &want[k]);
  Sharding rs = with_partial(v->sh, keep);
  return finish(P, v, emit_like(P, v, &rs, args));
}

/* dispatch and combine run on a cut of the groups (and the model dim),
 * with experts and slots whole; the result is then resharded to the
 * value's sharding. Into a moe body whose expert dim the weights cut, and
 * out of it, that is one all-to-all each (GShard section 3.2). */
typedef struct Route {
  Sharding tok;    /* the [G, S, M] side: x (dispatch) or the result (combine) */
  Sharding routes; /* the routes [G, S, K]: the groups as tok cuts them */
  Sharding big;    /* the [E, G, C, M] side: groups and model dim as tok's */
  int64_t cost;    /* bytes received to get there and then to the value's sharding */
} Route;

/* The layout whose groups are cut as dim gd of g, and the model dim as
 * dim md of model unless the groups' axes took it. */
static Route route_layout(const Part *P, const Value *v, const Sharding *g, int gd, const Sharding *model, int md) {
  bool in = v->op == OP_DISPATCH;
  Route R = {0};
  shard_copy_dim(&R.tok, 0, g, gd);
  shard_copy_dim(&R.routes, 0, g, gd);
  if (!(shard_dim_axes(model, md) & shard_dim_axes(&R.tok, 0)))
    shard_copy_dim(&R.tok, 2, model, md);
  shard_copy_dim(&R.big, 1, &R.tok, 0);
  shard_copy_dim(&R.big, 3, &R.tok, 2);
  R.cost = reshard_cost(P, P->map[v->args[0]->id], in ? &R.tok : &R.big);
  for (int k = 1; k < v->nargs; k++)
    R.cost += reshard_cost(P, P->map[v->args[k]->id], &R.routes);
  R.cost += shard_reshard_bytes(P->s, &v->shape, v->dtype, in ? &R.big : &R.tok, &v->sh);
  return R;
}

/* Two layouts, the cheaper built (the first on a tie): the groups where
 * the tokens' side has them (x for dispatch, the routes for combine), and
 * where the result has them (as --auto-shard prices a route), if that
 * shares the work among as many devices (fewer bytes received are not
 * worth doing the route's work twice). */
static Value *part_route(Part *P, const Value *v) {
  bool in = v->op == OP_DISPATCH;
  const Value *side = P->map[v->args[in ? 0 : 1]->id];
  const Sharding *model = in ? &side->sh : &v->sh;
  Route a = route_layout(P, v, &side->sh, 0, model, 2);
  Route b = in ? route_layout(P, v, &v->sh, 1, &v->sh, 3) : route_layout(P, v, &v->sh, 0, &v->sh, 2);
  int64_t wa = shard_shards(P->s, &a.tok, 0) * shard_shards(P->s, &a.tok, 2);
  const Route *R = b.cost < a.cost && shard_shards(P->s, &b.tok, 0) * shard_shards(P->s, &b.tok, 2) >= wa ? &b : &a;
  Value *args[4];
  args[0] = operand(P, v, 0, in ? &R->tok : &R->big);
  /* padded tokens (groups cut unevenly) route nowhere: expert 0, slot -1
   * (a dropped choice), weight 0 */
  for (int k = 1; k < v->nargs; k++)
    args[k] = masked(P, operand(P, v, k, &R->routes), ~0u, k == 2 ? -1.0 : 0.0, v->span);
  return finish(P, v, emit_like(P, v, in ? &R->big : &R->tok, args));
}

/* scatter_add runs where its rows are: the source's index dims cut as the
 * indices are, its row dims as the result's; each device adds its own rows
 * into a whole-[V] result, a partial sum over the axes cutting the
 * indices, resolved by the resharding to the value's sharding (an
 * all-reduce, or a reduce-scatter where the value cuts V) */
static Value *part_scatter_add(Part *P, const Value *v) {
  const Value *ix = v->args[1], *xi = P->map[ix->id];
  Sharding ss = {0}, is = {0}, rs = {0};
  uint32_t used = 0;
  for (int i = 1; i < v->shape.rank; i++) {
    shard_copy_dim(&rs, i, &v->sh, i);
    used |= shard_dim_axes(&v->sh, i);
  }
  for (int i = 0; i < ix->shape.rank; i++) {
    uint32_t m = shard_dim_axes(&xi->sh, i);
    if (!m || (m & used))
      continue;
    used |= m;
    shard_copy_dim(&is, i, &xi->sh, i);
    shard_copy_dim(&ss, i, &xi->sh, i);
    rs.partial |= m;
  }
  for (int i = 1; i < v->shape.rank; i++)
    shard_copy_dim(&ss, ix->shape.rank + i - 1, &v->sh, i);
  /* padded indices add zeros to row 0 */
  uint32_t idims = (1u << ix->shape.rank) - 1;
  Value *args[2] = {masked(P, operand(P, v, 0, &ss), idims, 0.0, v->span),
                    masked(P, operand(P, v, 1, &is), ~0u, 0.0, v->span)};
  return finish(P, v, emit_like(P, v, &rs, args));
}

static Value *part_reshape(Part *P, const Value *v) {
  const Value *a = v->args[0];
  Sharding want = shard_reshape(P->s, &v->sh, &v->shape, &a->shape);
  Sharding back = shard_reshape(P->s, &want, &a->shape, &v->shape);
  if (shard_eq(&back, &v->sh, v->shape.rank)) {
    uint32_t keep = pending(P, v, 0, &want); /* a reshape is linear */
    want.partial = keep;
    Value *o = operand(P, v, 0, &want);
    Sharding rs = with_partial(v->sh, keep);
    return finish(P, v, emit_like(P, v, &rs, &o));
  }
  /* not expressible on tiles: reshape whole, then cut */
  Sharding none = {0};
  Value *o = operand(P, v, 0, &none);
  return finish(P, v, emit_like(P, v, &none, &o));
}

static Value *part_value(Part *P, const Value *v) {
  Sharding want = {0};
  switch (v->op) {
  case OP_PARAM:
  case OP_INPUT:
  case OP_CONST:
  case OP_IOTA:
  case OP_RNG:
    return emit_like(P, v, &v->sh, NULL);
  case OP_UNARY:
  case OP_CAST:
  case OP_BINARY:
  case OP_SELECT:
    return part_elementwise(P, v);
  case OP_ANNOTATE:
    return operand(P, v, 0, &v->sh);
  case OP_TRANSPOSE:
  case OP_BROADCAST: {
    want = shard_through(v, &v->sh, true);
    uint32_t keep = v->op == OP_TRANSPOSE ? pending(P, v, 0, &want) : 0; /* see linear_slot */
    want.partial = keep;
    Value *o = operand(P, v, 0, &want);
    Sharding rs = with_partial(v->sh, keep);
    return finish(P, v, emit_like(P, v, &rs, &o));
  }
  case OP_RESHAPE:
    return part_reshape(P, v);
  case OP_SLICE:
  case OP_CUMSUM:
  case OP_CONCAT:
    return part_whole_axis(P, v, v->axis);
  case OP_ONE_HOT:
    return part_whole_axis(P, v, v->shape.rank - 1);
  case OP_GATHER: {
    const Value *t = v->args[0], *ix = v->args[1];
    Sharding ts = {0}, is = {0};
    for (int i = 0; i < ix->shape.rank; i++)
      shard_copy_dim(&is, i, &v->sh, i);
    for (int i = 1; i < t->shape.rank; i++)
      shard_copy_dim(&ts, i, &v->sh, ix->shape.rank + i - 1);
    /* padded indices read row 0 (padding may hold any number, and the
     * code checks every index it reads) */
    Value *args[2] = {operand(P, v, 0, &ts), masked(P, operand(P, v, 1, &is), ~0u, 0.0, v->span)};
    return emit_like(P, v, &v->sh, args);
  }
  case OP_SCATTER_ADD:
    return part_scatter_add(P, v);
  case OP_DISPATCH:
  case OP_COMBINE:
    return part_route(P, v);
  case OP_REDUCE:
    return part_reduce(P, v);
  case OP_EINSUM:
    if (v->ein.nin == 2)
      return part_einsum(P, v);
    die("one-operand einsum reached the partitioner");
  case OP_ALL_REDUCE:
  case OP_ALL_GATHER:
  case OP_REDUCE_SCATTER:
  case OP_ALL_TO_ALL:
  case OP_COLLECTIVE_PERMUTE:
  case OP_LOCAL_SLICE:
  case OP_PAD_MASK:
  case OP__COUNT:
    break;
  }
  die("op %s cannot be partitioned", op_name(v->op));
}

/* the rewriter's callback: global value v's SPMD value */
static Value *part_rewrite(void *ctx, Program *dst, const Value *v, Value **map) {
  Part *P = ctx;
  P->s = dst;
  P->map = map;
  P->at = v;
  Value *r = part_value(P, v);
  if (v->op == OP_PARAM || v->op == OP_INPUT)
    dst->tensors[v->tensor].sh = v->sh;
  return r;
}

Program *spmd_partition(const Program *g) {
  Part P = {NULL, NULL, NULL, NULL, shard_linear_uses(g)};
  Program *s = ir_rewrite(g, true, part_rewrite, &P);
  /* an update goes back into its tensor's layout, where propagation left
   * the two apart; a signal cut by propagation is gathered */
  P.s = s;
  P.at = NULL;
  for (int i = 0; i < s->noutputs; i++) {
    Output *o = &s->outputs[i];
    if (o->kind == OUT_SIGNAL && o->value->shape.rank && o->value->sh.naxes[0]) {
      /* every rank reports the whole of a signal */
      Sharding whole = {{0}, {{0}}, 0};
      o->value = reshard(&P, o->value, &whole, o->value->span,
                         arena_printf(s->arena, "the signal %s is reported whole", o->name));
      continue;
    }
    if (o->kind != OUT_UPDATE)
      continue;
    const Tensor *t = &s->tensors[o->tensor];
    if (!shard_eq(&o->value->sh, &t->sh, t->shape.rank))
      o->value = reshard(&P, o->value, &t->sh, o->value->span,
                         arena_printf(s->arena, "the update of %s goes back to its sharding", t->name));
    /* a param's or state's padding stays zero: never updated, never decayed */
    o->value = masked(&P, o->value, ~0u, 0.0, o->value->span);
  }
  ir_count_uses(s);
  free(P.linear);
  return s;
}
