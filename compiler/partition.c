/* partition.c — the SPMD partitioner: from the global IR, whose values all
 * carry a sharding (propagate.c), to the program every device runs.
 *
 * Method: values are partitioned in program order. Each op runs on the
 * cuts of its factors that its sharding rule (rule.c) gives: its result's
 * cuts of the factors it passes, and the operands' cuts of the factors it
 * sums or maxes over where their axes are free (an einsum weighs that
 * against keeping its operands' contracted cuts first, by the bytes each
 * receives; the moe routing ops weigh the groups where their tokens lie
 * against where their result wants them). Each operand is resharded to
 * its dimensions' cuts (whole factors whole: a slice's axis, a gather's
 * table rows), its padding along summed and maxed dims (an index's along
 * all) filled so that it contributes nothing, the op emitted on local
 * shapes, and the local result resharded to the sharding propagation
 * chose for the value. A cut summed dimension leaves a partial sum, which
 * that last resharding resolves, unless the value's one use is linear in
 * it (rule_linear_uses): then it stays pending to that use. Reshapes carry
 * cuts by sharding.c's groups of dimensions.
 *
 * Each resharding is planned by sharding.c (shard_plan) and emitted step
 * by step as collectives; a step over axes of size 1 moves no data and is
 * emitted as an annotate that only renames the sharding. A resharded value
 * is remembered, so that a second consumer needing the same layout of the
 * same value reuses it.
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
  if (orig) {
    ir_inherit(v, orig);
    v->attr = orig->attr;
  }
  v->gshape = gshape;
  v->sh = *sh;
  v->orig = orig;
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

/* SPMD value x in sharding want if it is at hand: x itself, or x already
 * resharded so for another consumer; else NULL. */
static Value *at_hand(const Part *P, Value *x, const Sharding *want) {
  if (shard_eq(&x->sh, want, x->gshape.rank))
    return x;
  for (Reuse *r = P->reuse; r; r = r->next)
    if (r->from == x && shard_eq(&r->to->sh, want, x->gshape.rank))
      return r->to;
  return NULL;
}

/* x resharded to want for consumer v at sp, for the reason why, and
 * remembered for the next consumer that needs the same */
static Value *reshard_kept(Part *P, Value *x, const Sharding *want, Span sp, const char *why) {
  Value *y = reshard(P, x, want, sp, why);
  Reuse *r = arena_alloc(P->s->arena, sizeof *r);
  r->from = x;
  r->to = y;
  r->next = P->reuse;
  P->reuse = r;
  return y;
}

/* The SPMD value of global operand k of v, resharded to want. */
static Value *operand(Part *P, const Value *v, int k, const Sharding *want) {
  Value *x = P->map[v->args[k]->id];
  Value *y = at_hand(P, x, want); /* a value already resharded this way for another consumer is reused */
  if (y)
    return y;
  /* an annotation that says why it is there (samebits.c's) gives its reason */
  const char *why = v->op == OP_ANNOTATE && v->why ? v->why : reason(P, v, k, x, want);
  return reshard_kept(P, x, want, v->span, why);
}

/* Reshards the op's natural local result to the value's own sharding,
 * leaving partial sums pending where the value's one use is linear (they
 * are resolved once, at the first consumer that needs the whole value). */
static Value *finish(Part *P, const Value *v, Value *r) {
  uint32_t keep = P->linear[v->id] ? r->sh.partial & ~shard_all_axes(&v->sh, v->shape.rank) : 0;
  Sharding t = with_partial(v->sh, keep);
  if (shard_eq(&r->sh, &t, v->shape.rank))
    return r;
  /* a value that says why its result moves (samebits.c's) gives its reason */
  const char *why = v->why ? v->why
                           : arena_printf(P->s->arena, "%s (%%%d) gives %s, its sharding is %s", op_name(v->op), v->id,
                                          sharding_str(P->s->arena, P->s, r), sharding_str(P->s->arena, P->s, v));
  return reshard(P, r, &t, v->span, why);
}

/* The counts that bound v's slot rows (slots.c) on its local tile in
 * sharding sh: its block's counts on the cuts of its E and G dims, when its
 * C dim is whole, it holds no partial sums, and those counts are at hand
 * without moving a byte (resharded so for a product already, or needing
 * only a renaming or a local slice); else NULL: the tile runs over every
 * slot. */
static Value *local_rows(Part *P, const Value *v, const Sharding *sh) {
  const int8_t *d = v->rows_dim;
  if (!v->rows || sh->naxes[d[2]] || sh->partial)
    return NULL;
  Value *x = P->map[v->rows->id];
  Sharding want = {{0}, {{0}}, 0};
  for (int r = 0; r < 2; r++) {
    want.naxes[r] = sh->naxes[d[r]];
    memcpy(want.axes[r], sh->axes[d[r]], sizeof want.axes[r]);
  }
  Value *n = at_hand(P, x, &want);
  if (!n && !x->sh.partial && !shard_reshard_bytes(P->s, &x->gshape, x->dtype, &x->sh, &want))
    n = reshard_kept(P, x, &want, v->span,
                     arena_printf(P->s->arena, "the counts that bound %s (%%%d)", op_name(v->op), v->id));
  return n;
}

static Value *emit_like(Part *P, const Value *v, const Sharding *sh, Value **args) {
  Value *n = local_rows(P, v, sh);
  Value *o = emit(P, v, v->op, v->dtype, v->shape, sh, v->span, v->nargs, args);
  if (n) {
    o->rows = n;
    memcpy(o->rows_dim, v->rows_dim, sizeof o->rows_dim);
  }
  return o;
}

/* operand k's SPMD value's sharding, for the rule's readings */
static const Sharding *spmd_sharding(void *ctx, const Value *v, int k) {
  const Part *P = ctx;
  return &P->map[v->args[k]->id]->sh;
}

/* The bytes received to run v on cuts c, and then to reach its sharding. */
static int64_t layout_cost(const Part *P, const Value *v, const ShardRule *r, const Cuts *c) {
  int64_t cost = 0;
  for (int k = 0; k < v->nargs; k++) {
    if (rule_role(r, k) == AR_AUX)
      continue;
    Sharding w = rule_apply(r, rule_map(r, k), v->args[k]->shape.rank, c);
    cost += reshard_cost(P, P->map[v->args[k]->id], &w);
  }
  Sharding rs = rule_apply(r, r->res, v->shape.rank, c);
  rs.partial = rule_cut_axes(r, c, FK_SUM);
  return cost + shard_reshard_bytes(P->s, &v->shape, v->dtype, &rs, &v->sh);
}

/* The partial sums pending in v's operands that pass through v (its rule
 * says which: rule_pass_partial), set in the wants of the operands they
 * pass from; returns them. Sums over the axes v itself sums over
 * (summed) are resolved first. */
static uint32_t pass_pending(const Part *P, const Value *v, const ShardRule *r, Sharding *want, uint32_t summed) {
  int n = v->nargs;
  uint32_t buf[16], *pend = n <= 8 ? buf : xmalloc(2 * (size_t)n * sizeof *pend), *held = pend + n;
  for (int k = 0; k < n; k++) {
    pend[k] = pending(P, v, k, &want[k]);
    held[k] = P->map[v->args[k]->id]->sh.partial;
  }
  int from;
  uint32_t keep = rule_pass_partial(r, n, pend, held, summed, &from);
  for (int k = 0; k < n && keep; k++)
    if (from < 0 || k == from)
      want[k].partial = keep;
  if (pend != buf)
    free(pend);
  return keep;
}

/* The SPMD values of op v by its rule: the cuts it runs on (its result's
 * first; for a contraction, of that and its operands' summed cuts first,
 * the layout that receives fewer bytes),
 * its operands resharded to them and their padding along summed and
 * maxed dims (and an index's along all) filled so that it contributes
 * nothing, the op on local tiles, a max's local maxima all-reduced, and
 * the result resharded to v's sharding (partial sums pending where v's
 * one use is linear). */
static Value *part_rule(Part *P, const Value *v, const ShardRule *r) {
  Cuts c = rule_layout(r, v, &v->sh, spmd_sharding, P, false);
  if (r->contraction) {
    Cuts b = rule_layout(r, v, &v->sh, spmd_sharding, P, true);
    if (layout_cost(P, v, r, &b) < layout_cost(P, v, r, &c))
      c = b;
  }
  int n = v->nargs;
  Sharding wbuf[8], *want = n <= 8 ? wbuf : xmalloc((size_t)n * sizeof *want);
  Value *abuf[8], **args = n <= 8 ? abuf : xmalloc((size_t)n * sizeof *args);
  for (int k = 0; k < n; k++)
    want[k] = rule_apply(r, rule_map(r, k), v->args[k]->shape.rank, &c);
  uint32_t summed = rule_cut_axes(r, &c, FK_SUM), maxed = rule_cut_axes(r, &c, FK_MAX);
  Sharding rs = rule_apply(r, r->res, v->shape.rank, &c);
  rs.partial = summed | pass_pending(P, v, r, want, summed);
  for (int k = 0; k < n; k++)
    if (rule_role(r, k) != AR_AUX)
      args[k] = operand(P, v, k, &want[k]);
  for (int k = 0; k < n; k++) { /* padding along a summed or maxed dim contributes nothing */
    if (rule_role(r, k) == AR_AUX)
      continue;
    if (rule_role(r, k) == AR_INDEX) {
      args[k] = masked(P, args[k], ~0u, r->fill[k], v->span);
      continue;
    }
    uint32_t sum = 0, max = 0;
    const int8_t *map = rule_map(r, k);
    for (int d = 0; d < v->args[k]->shape.rank; d++)
      if (map[d] >= 0)
        *(r->kind[map[d]] == FK_SUM ? &sum : r->kind[map[d]] == FK_MAX ? &max : &(uint32_t){0}) |= 1u << d;
    args[k] = masked(P, masked(P, args[k], sum, 0.0, v->span), max, -INFINITY, v->span);
  }
  for (int k = 0; k < n; k++) /* an einsum's fill counts follow the cuts of their letters */
    if (rule_role(r, k) == AR_AUX)
      args[k] = operand(P, v, k, &want[k]);
  Value *o = emit_like(P, v, &rs, args);
  if (want != wbuf)
    free(want);
  if (args != abuf)
    free(args);
  if (maxed) {
    uint8_t axes[GSL_MAX_AXES];
    int na = 0;
    for (int ax = 0; ax < P->s->mesh.naxes; ax++)
      if (maxed & (1u << ax))
        axes[na++] = (uint8_t)ax;
    Value *m = emit(P, NULL, OP_ALL_REDUCE, o->dtype, o->gshape, &rs, v->span, 1, &o);
    m->fn = RF_MAX;
    m->site = v->site;
    set_group(m, axes, na);
    m->why = arena_printf(P->s->arena, "%s max (%%%d) over a cut dimension: the local maxima", op_name(v->op), v->id);
    o = m;
  }
  return finish(P, v, o);
}

/* dispatch and combine (their rule's route) run on a cut of the groups G
 * (factor 0) and the model dim M (factor 1), with experts, slots, tokens
 * and choices whole; the result is then resharded to the value's
 * sharding. Into a moe body whose expert dim the weights cut, and out of
 * it, that is one all-to-all each (GShard section 3.2). */

/* the dim of a map (rank of them) that factor f indexes */
static int dim_of(const int8_t *map, int rank, int f) {
  for (int d = 0; d < rank; d++)
    if (map[d] == f)
      return d;
  die("a routing rule without factor %d", f);
}

/* The cuts whose groups are cut as dim gd of g, and the model dim as dim
 * md of model unless the groups' axes took it. */
static Cuts route_cuts(const Sharding *g, int gd, const Sharding *model, int md) {
  Cuts c = {0};
  c.naxes[0] = g->naxes[gd];
  memcpy(c.axes[0], g->axes[gd], sizeof c.axes[0]);
  if (!(shard_dim_axes(model, md) & shard_dim_axes(g, gd))) {
    c.naxes[1] = model->naxes[md];
    memcpy(c.axes[1], model->axes[md], sizeof c.axes[1]);
  }
  return c;
}

/* Two layouts, the cheaper built (the first on a tie): the groups where
 * the tokens' side has them (x for dispatch, the routes for combine: the
 * operand that leads), and where the result has them (as --auto-shard
 * prices a route), if that shares the work among as many devices (fewer
 * bytes received are not worth doing the route's work twice). */
static Value *part_route(Part *P, const Value *v, const ShardRule *r) {
  int lead = r->order[0], rank = v->shape.rank;
  const Value *side = P->map[v->args[lead]->id];
  const int8_t *sm = rule_map(r, lead);
  bool in = lead == 0; /* the tokens are the operand: the model dim follows them too */
  Cuts a = route_cuts(&side->sh, dim_of(sm, side->gshape.rank, 0), in ? &side->sh : &v->sh,
                      in ? dim_of(sm, side->gshape.rank, 1) : dim_of(r->res, rank, 1));
  Cuts b = route_cuts(&v->sh, dim_of(r->res, rank, 0), &v->sh, dim_of(r->res, rank, 1));
  int64_t wa = shard_group_size(P->s, a.axes[0], a.naxes[0]) * shard_group_size(P->s, a.axes[1], a.naxes[1]);
  int64_t wb = shard_group_size(P->s, b.axes[0], b.naxes[0]) * shard_group_size(P->s, b.axes[1], b.naxes[1]);
  const Cuts *c = layout_cost(P, v, r, &b) < layout_cost(P, v, r, &a) && wb >= wa ? &b : &a;
  Value *args[RULE_MAX_ARGS];
  for (int k = 0; k < v->nargs; k++) { /* padded tokens route nowhere (the rule's fill) */
    Sharding w = rule_apply(r, rule_map(r, k), v->args[k]->shape.rank, c);
    args[k] = operand(P, v, k, &w);
    if (rule_role(r, k) == AR_INDEX)
      args[k] = masked(P, args[k], ~0u, r->fill[k], v->span);
  }
  Sharding rs = rule_apply(r, r->res, rank, c);
  return finish(P, v, emit_like(P, v, &rs, args));
}

/* A reshape runs on tiles where they carry its result's cuts (sharding.c's
 * groups of dimensions), else whole, then cut. */
static Value *part_reshape(Part *P, const Value *v) {
  Sharding want;
  if (rule_reshape_tiles(P->s, v, &v->sh, &want)) {
    uint32_t keep = pending(P, v, 0, &want); /* a reshape is linear */
    want.partial = keep;
    Value *o = operand(P, v, 0, &want);
    Sharding rs = with_partial(v->sh, keep);
    return finish(P, v, emit_like(P, v, &rs, &o));
  }
  Sharding none = {0};
  Value *o = operand(P, v, 0, &none);
  return finish(P, v, emit_like(P, v, &none, &o));
}

static Value *part_value(Part *P, const Value *v) {
  ShardRule r;
  if (!v->nargs) /* a source: made in its own sharding */
    return emit_like(P, v, &v->sh, NULL);
  if (ir_op(v->op)->cls == OC_ANNOTATION) /* the user's layout: its operand resharded to it */
    return operand(P, v, 0, &v->sh);
  if (ir_op(v->op)->flags & OF_SPMD)
    die("op %s cannot be partitioned", op_name(v->op));
  shard_rule(v, &r);
  if (r.reshape)
    return part_reshape(P, v);
  if (r.route)
    return part_route(P, v, &r);
  return part_rule(P, v, &r);
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
  Part P = {NULL, NULL, NULL, NULL, rule_linear_uses(g)};
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
  free(P.linear);
  return s;
}
