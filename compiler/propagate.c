/* propagate.c — sharding propagation over the global IR (GSPMD section 3.5).
 *
 * Method: the user's annotations (annotate ops, annotated params and
 * inputs) are fixed. Every other value starts undecided and takes the first
 * sharding a neighbour offers it: forward from its operands through its op,
 * or backward from a user through the user's op. What an op offers either
 * way is read from its sharding rule (rule.c): forward, each factor of the
 * result takes the cut of the first decided operand, in the rule's order,
 * that cuts it (of operands indexed alike, such as an elementwise op's,
 * the one whose sharding the others reach with the fewest bytes moved,
 * sharding.c's cost of resharding, then the most cut, then the earliest);
 * backward, each operand takes the result's cuts of its factors, and of
 * the factors it sums over (an einsum's contracted letters) the cuts its
 * decided siblings have. Factors a rule keeps whole (a slice's axis, a
 * gather's table rows, moe routing's experts and slots) are never offered.
 * The result depends on the program and its mesh only, deterministically.
 *
 * Only offers that split something are made, so a value with no sharded
 * neighbour stays undecided and ends replicated. Ops are visited in three
 * priority levels, as GSPMD orders them (ops.def's level): pass-through
 * ops first (elementwise, transpose, reshape, slice, concat, cumsum,
 * one_hot, gather, scatter-add), then einsum and reduce, then broadcast
 * and the moe routing ops (dispatch, combine): an expert dimension that
 * the experts' weights cut reaches a moe body through its einsums before
 * the groups' cut reaches it through the routing. Each sweep goes forward
 * over the program, then backward; after any change the sweeps restart
 * at level 0, so the cheapest kind of inference always runs to a fixed
 * point before a costlier kind is tried. A trained param and its update
 * (the value stored into it at the step's end) offer each other their
 * shardings at level 0, as the operands of an elementwise op, and so do a
 * recomputed value and its forward value.
 *
 * An offer is fitted to its value before it is taken (shard_fit): an axis
 * repeated in one sharding is dropped, and so is each dimension's axis
 * from the first one that would leave a shard without an element (a
 * dimension its shards do not divide is cut unevenly, in padded tiles:
 * gsl.7, SHARDING). A decided value merges a later offer's cuts of the
 * dimensions it leaves whole. */
#include <string.h>

#include "gslc.h"

typedef struct Prop {
  Program *p;     /* the program */
  bool changed;   /* a sweep decided some value */
} Prop;

static bool splits_anything(const Sharding *sh, int rank) {
  for (int i = 0; i < rank; i++)
    if (sh->naxes[i])
      return true;
  return false;
}

/* A decided value takes from an offer the cuts of its dimensions that it
 * leaves whole, as far as their axes are free in it (GSPMD's merge of
 * compatible shardings): [expert, _] and [_, data] make [expert, data]. */
static bool merge(const Program *p, Value *v, const Sharding *sh) {
  Sharding m = v->sh;
  uint32_t used = shard_all_axes(&m, v->shape.rank);
  bool grew = false;
  for (int i = 0; i < v->shape.rank; i++) {
    if (m.naxes[i])
      continue;
    for (int k = 0; k < sh->naxes[i] && !(used & (1u << sh->axes[i][k])); k++) {
      m.axes[i][m.naxes[i]++] = sh->axes[i][k];
      used |= 1u << sh->axes[i][k];
    }
  }
  shard_fit(p, &m, &v->shape);
  for (int i = 0; i < v->shape.rank; i++)
    grew |= m.naxes[i] > v->sh.naxes[i];
  if (grew)
    v->sh = m;
  return grew;
}

static void offer(Prop *P, Value *v, Sharding sh, const Value *from) {
  if (v->sh_origin == SO_ANNOTATED || v->sh_origin == SO_AUTO)
    return;
  shard_fit(P->p, &sh, &v->shape);
  if (!splits_anything(&sh, v->shape.rank))
    return;
  if (v->sh_origin == SO_PROPAGATED) {
    P->changed |= merge(P->p, v, &sh);
    return;
  }
  v->sh = sh;
  v->sh_origin = SO_PROPAGATED;
  v->sh_from = from;
  P->changed = true;
}

static bool known(const Value *v) { return v->sh_origin != SO_NONE; }

/* ---- through an op, by its rule (rule.c) ---------------------------------------- */

/* an operand's sharding, or NULL while it is undecided */
static const Sharding *decided(void *ctx, const Value *v, int k) {
  (void)ctx;
  return known(v->args[k]) ? &v->args[k]->sh : NULL;
}

/* a result from its operands */
static void forward(Prop *P, Value *v) {
  ShardRule r;
  Sharding sh;
  const Value *from;
  shard_rule(v, &r);
  if (rule_forward(P->p, v, &r, decided, NULL, &sh, &from))
    offer(P, v, sh, from);
}

/* each operand (but an auxiliary one) from its result and, for the
 * factors it sums over, its decided siblings */
static void backward(Prop *P, Value *v) {
  ShardRule r;
  shard_rule(v, &r);
  for (int k = 0; k < v->nargs; k++)
    if (rule_role(&r, k) != AR_AUX)
      offer(P, v->args[k], rule_operand(P->p, v, &r, k, &v->sh, decided, NULL, false), v);
}

/* A param's (or optimizer state's) update and the tensor itself: one
 * buffer across steps, so each offers the other its sharding, as
 * elementwise operands do. */
static void tie_updates(Prop *P) {
  Program *p = P->p;
  for (int i = 0; i < p->noutputs; i++) {
    if (p->outputs[i].kind != OUT_UPDATE)
      continue;
    Value *u = p->outputs[i].value, *t = p->tensors[p->outputs[i].tensor].value;
    if (known(t))
      offer(P, u, t->sh, t);
    if (known(u))
      offer(P, t, u->sh, u);
  }
}

/* A recomputed value and its forward value: the same computation, laid
 * out alike so that it runs the same kernels on the same tiles (the same
 * bits), so each offers the other its sharding. */
static void tie_recomputed(Prop *P) {
  Program *p = P->p;
  for (int i = 0; i < p->nvalues; i++) {
    Value *c = p->values[i], *v = (Value *)p->values[i]->remat_of;
    if (!v)
      continue;
    if (known(v))
      offer(P, c, v->sh, v);
    if (known(c))
      offer(P, v, c->sh, c);
  }
}

static void sweep(Prop *P, int level) {
  Program *p = P->p;
  if (level == 0) {
    tie_updates(P);
    tie_recomputed(P);
  }
  for (int i = 0; i < p->nvalues; i++) {
    Value *v = p->values[i];
    if (v->sh_origin != SO_ANNOTATED && v->sh_origin != SO_AUTO && v->nargs && ir_op(v->op)->level == level)
      forward(P, v);
  }
  for (int i = p->nvalues - 1; i >= 0; i--) {
    Value *v = p->values[i];
    if (known(v) && v->nargs && ir_op(v->op)->level == level)
      backward(P, v);
  }
}

void shard_propagate(Program *p) {
  Prop P = {p, false};
  for (int i = 0; i < p->ntensors; i++) {
    Tensor *t = &p->tensors[i];
    if (t->annotated) {
      t->value->sh = t->sh;
      t->value->sh_origin = SO_ANNOTATED;
    }
  }
  if (p->mesh.naxes == 0)
    return;
  for (int level = 0; level < 3;) {
    P.changed = false;
    sweep(&P, level);
    level = P.changed ? 0 : level + 1;
  }
  /* what nothing reached stays replicated (its origin stays SO_NONE) */
  for (int i = 0; i < p->ntensors; i++)
    p->tensors[i].sh = p->tensors[i].value->sh;
}

void shard_reset(Program *p) {
  for (int i = 0; i < p->nvalues; i++) {
    Value *v = p->values[i];
    if (v->sh_origin == SO_ANNOTATED)
      continue;
    memset(&v->sh, 0, sizeof v->sh);
    v->sh_origin = SO_NONE;
    v->sh_from = NULL;
  }
  for (int i = 0; i < p->ntensors; i++) {
    Tensor *t = &p->tensors[i];
    if (!t->annotated)
      memset(&t->sh, 0, sizeof t->sh);
    t->update_note = NULL;
    t->auto_note = NULL;
  }
}
