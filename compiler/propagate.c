/* propagate.c — sharding propagation over the global IR (GSPMD section 3.5).
 *
 * Method: the user's annotations (annotate ops, annotated params and
 * inputs) are fixed. Every other value starts undecided and takes the first
 * sharding a neighbour offers it: forward from its operands through its op,
 * or backward from a user through the user's op. Only offers that split
 * something are made, so a value with no sharded neighbour stays undecided
 * and ends replicated. Ops are visited in three priority levels, as GSPMD
 * orders them: pass-through ops first (elementwise, transpose, reshape,
 * slice, concat, cumsum, one_hot, gather), then einsum and reduce, then
 * broadcast and the moe routing ops (dispatch, combine): an expert
 * dimension that the experts' weights cut reaches a moe body through its
 * einsums before the groups' cut reaches it through the routing. Each
 * sweep goes forward over the program, then backward; after any change
 * the sweeps restart at level 0, so the cheapest kind of inference always
 * runs to a fixed point before a costlier kind is tried. A trained param
 * and its update (the value stored into it at the step's end) offer each
 * other their shardings at level 0, as the operands of an elementwise op,
 * and so do a recomputed value and its forward value.
 * Where an op's operands disagree, the offer is the operand sharding that
 * the others reach with the fewest bytes moved (sharding.c's cost of
 * resharding), then the most cut, then the earliest: the result depends on
 * the program and its mesh only, deterministically.
 *
 * An offer is fitted to its value before it is taken: an axis repeated in
 * one sharding is dropped, and so are the axes a dimension's size is not
 * divisible by. */
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

static void clear_dim(Sharding *sh, int d) { sh->naxes[d] = 0; }

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

/* ---- einsum letters ------------------------------------------------------- */

static int index_of(const char *letters, char c) {
  const char *q = strchr(letters, c);
  return q ? (int)(q - letters) : -1;
}

/* Puts the axes value x has on letter c into dim d of sh, unless one of
 * them is taken already. */
static void take_letter(Sharding *sh, int d, const Value *x, const char *xl, char c, uint32_t *used) {
  int k = index_of(xl, c);
  if (k < 0 || !known(x) || sh->naxes[d])
    return;
  uint32_t m = shard_dim_axes(&x->sh, k);
  if (m & *used)
    return;
  *used |= m;
  shard_copy_dim(sh, d, &x->sh, k);
}

/* ---- forward: a result from its operands ----------------------------------- */

static int64_t split_product(const Program *p, const Value *v) {
  int64_t n = 1;
  for (int i = 0; i < v->shape.rank; i++)
    n *= shard_shards(p, &v->sh, i);
  return n;
}

static void forward(Prop *P, Value *v) {
  Sharding sh = {0};
  Value *a = v->nargs ? v->args[0] : NULL;
  switch (v->op) {
  case OP_UNARY:
  case OP_CAST:
    if (known(a))
      offer(P, v, a->sh, a);
    return;
  case OP_BINARY:
  case OP_SELECT: {
    const Value *best = NULL;
    int64_t best_cost = 0;
    for (int i = 0; i < v->nargs; i++) {
      const Value *c = v->args[i];
      if (!known(c))
        continue;
      int64_t cost = 0; /* bytes the other decided operands move to follow c */
      for (int j = 0; j < v->nargs; j++)
        if (j != i && known(v->args[j]))
          cost += shard_reshard_bytes(P->p, &v->shape, v->args[j]->dtype, &v->args[j]->sh, &c->sh);
      if (!best || cost < best_cost || (cost == best_cost && split_product(P->p, c) > split_product(P->p, best))) {
        best = c;
        best_cost = cost;
      }
    }
    if (best)
      offer(P, v, best->sh, best);
    return;
  }
  case OP_TRANSPOSE:
  case OP_BROADCAST:
    if (!known(a))
      return;
    offer(P, v, shard_through(v, &a->sh, false), a);
    return;
  case OP_RESHAPE:
    if (known(a))
      offer(P, v, shard_reshape(P->p, &a->sh, &a->shape, &v->shape), a);
    return;
  case OP_SLICE:
  case OP_CUMSUM:
    if (!known(a))
      return;
    sh = a->sh;
    clear_dim(&sh, v->axis);
    offer(P, v, sh, a);
    return;
  case OP_CONCAT:
    for (int i = 0; i < v->nargs; i++)
      if (known(v->args[i])) {
        sh = v->args[i]->sh;
        clear_dim(&sh, v->axis);
        offer(P, v, sh, v->args[i]);
        return;
      }
    return;
  case OP_ONE_HOT:
    if (!known(a))
      return;
    sh = a->sh;
    offer(P, v, sh, a);
    return;
  case OP_GATHER: {
    const Value *t = v->args[0], *ix = v->args[1];
    if (known(ix))
      for (int i = 0; i < ix->shape.rank; i++)
        shard_copy_dim(&sh, i, &ix->sh, i);
    if (known(t))
      for (int i = 1; i < t->shape.rank; i++)
        shard_copy_dim(&sh, ix->shape.rank + i - 1, &t->sh, i);
    if (known(ix) || known(t))
      offer(P, v, sh, known(ix) ? ix : t);
    return;
  }
  case OP_SCATTER_ADD: { /* src [I..., D...] -> [V, D...]: the row dims follow src, V stays whole */
    const Value *ix = v->args[1];
    if (!known(a))
      return;
    for (int i = 1; i < v->shape.rank; i++)
      shard_copy_dim(&sh, i, &a->sh, ix->shape.rank + i - 1);
    offer(P, v, sh, a);
    return;
  }
  case OP_DISPATCH: /* [G, S, M] -> [E, G, C, M]: the groups and the model dim follow x */
    if (known(a)) {
      shard_copy_dim(&sh, 1, &a->sh, 0);
      shard_copy_dim(&sh, 3, &a->sh, 2);
    } else if (known(v->args[1])) {
      shard_copy_dim(&sh, 1, &v->args[1]->sh, 0);
    } else {
      return;
    }
    offer(P, v, sh, known(a) ? a : v->args[1]);
    return;
  case OP_COMBINE: { /* [E, G, C, M] -> [G, S, M]: the groups follow the routes, else y */
    const Value *r = known(v->args[1]) ? v->args[1] : known(v->args[3]) ? v->args[3] : NULL;
    if (r)
      shard_copy_dim(&sh, 0, &r->sh, 0);
    else if (known(a))
      shard_copy_dim(&sh, 0, &a->sh, 1);
    if (known(a) && !(shard_dim_axes(&a->sh, 3) & shard_dim_axes(&sh, 0)))
      shard_copy_dim(&sh, 2, &a->sh, 3);
    if (r || known(a))
      offer(P, v, sh, r ? r : a);
    return;
  }
  case OP_REDUCE: {
    if (!known(a))
      return;
    int k = 0;
    for (int i = 0; i < a->shape.rank; i++)
      if (!(v->rmask & (1u << i)))
        shard_copy_dim(&sh, k++, &a->sh, i);
    offer(P, v, sh, a);
    return;
  }
  case OP_EINSUM: {
    if (v->ein.nin != 2)
      die("one-operand einsum reached propagation (ir_einsum makes it a transpose)");
    const EinsumSpec l = v->ein;
    uint32_t used = 0;
    for (int i = 0; l.out[i]; i++)
      take_letter(&sh, i, v->args[0], l.in[0], l.out[i], &used);
    for (int i = 0; l.out[i]; i++)
      take_letter(&sh, i, v->args[1], l.in[1], l.out[i], &used);
    if (known(v->args[0]) || known(v->args[1]))
      offer(P, v, sh, known(v->args[0]) ? v->args[0] : v->args[1]);
    return;
  }
  case OP_ANNOTATE:
    return; /* fixed by the user: always known, never offered to */
  case OP_PARAM:
  case OP_INPUT:
  case OP_CONST:
  case OP_IOTA:
  case OP_RNG:
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
  die("op %s does not propagate forward", op_name(v->op));
}

/* ---- backward: operands from their result ---------------------------------- */

static void backward(Prop *P, Value *v) {
  Value *a = v->nargs ? v->args[0] : NULL;
  Sharding sh = {0};
  switch (v->op) {
  case OP_UNARY:
  case OP_CAST:
  case OP_ANNOTATE:
    offer(P, a, v->sh, v);
    return;
  case OP_BINARY:
  case OP_SELECT:
    for (int i = 0; i < v->nargs; i++)
      offer(P, v->args[i], v->sh, v);
    return;
  case OP_TRANSPOSE:
  case OP_BROADCAST:
    offer(P, a, shard_through(v, &v->sh, true), v);
    return;
  case OP_RESHAPE:
    offer(P, a, shard_reshape(P->p, &v->sh, &v->shape, &a->shape), v);
    return;
  case OP_SLICE:
  case OP_CUMSUM:
  case OP_CONCAT:
    sh = v->sh;
    clear_dim(&sh, v->axis);
    for (int i = 0; i < v->nargs; i++)
      offer(P, v->args[i], sh, v);
    return;
  case OP_ONE_HOT:
    sh = v->sh;
    clear_dim(&sh, v->shape.rank - 1);
    offer(P, a, sh, v);
    return;
  case OP_GATHER: {
    Value *t = v->args[0], *ix = v->args[1];
    for (int i = 0; i < ix->shape.rank; i++)
      shard_copy_dim(&sh, i, &v->sh, i);
    offer(P, ix, sh, v);
    Sharding ts = {0};
    for (int i = 1; i < t->shape.rank; i++)
      shard_copy_dim(&ts, i, &v->sh, ix->shape.rank + i - 1);
    offer(P, t, ts, v);
    return;
  }
  case OP_SCATTER_ADD: { /* the source's row dims from the result's; its index dims from the indices' */
    Value *ix = v->args[1];
    if (known(ix))
      for (int i = 0; i < ix->shape.rank; i++)
        shard_copy_dim(&sh, i, &ix->sh, i);
    for (int i = 1; i < v->shape.rank; i++)
      shard_copy_dim(&sh, ix->shape.rank + i - 1, &v->sh, i);
    offer(P, a, sh, v);
    return;
  }
  case OP_DISPATCH: {
    shard_copy_dim(&sh, 0, &v->sh, 1);
    shard_copy_dim(&sh, 2, &v->sh, 3);
    offer(P, a, sh, v);
    Sharding rs = {0};
    shard_copy_dim(&rs, 0, &v->sh, 1);
    for (int k = 1; k < v->nargs; k++)
      offer(P, v->args[k], rs, v);
    return;
  }
  case OP_COMBINE: {
    shard_copy_dim(&sh, 1, &v->sh, 0);
    shard_copy_dim(&sh, 3, &v->sh, 2);
    offer(P, a, sh, v);
    Sharding rs = {0};
    shard_copy_dim(&rs, 0, &v->sh, 0);
    for (int k = 1; k < 4; k++)
      offer(P, v->args[k], rs, v);
    return;
  }
  case OP_REDUCE: {
    int k = 0;
    for (int i = 0; i < a->shape.rank; i++)
      if (!(v->rmask & (1u << i)))
        shard_copy_dim(&sh, i, &v->sh, k++);
    offer(P, a, sh, v);
    return;
  }
  case OP_EINSUM: {
    if (v->ein.nin != 2)
      die("one-operand einsum reached propagation (ir_einsum makes it a transpose)");
    const EinsumSpec l = v->ein;
    for (int k = 0; k < 2; k++) {
      Sharding os = {0};
      uint32_t used = 0;
      for (int i = 0; l.in[k][i]; i++) {
        int o = index_of(l.out, l.in[k][i]);
        if (o >= 0) {
          shard_copy_dim(&os, i, &v->sh, o);
          used |= shard_dim_axes(&v->sh, o);
        }
      }
      /* contracting letters follow the other operand, where it is decided */
      for (int i = 0; l.in[k][i]; i++)
        if (index_of(l.out, l.in[k][i]) < 0)
          take_letter(&os, i, v->args[1 - k], l.in[1 - k], l.in[k][i], &used);
      offer(P, v->args[k], os, v);
    }
    return;
  }
  case OP_PARAM:
  case OP_INPUT:
  case OP_CONST:
  case OP_IOTA:
  case OP_RNG:
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
  die("op %s does not propagate backward", op_name(v->op));
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
  shard_updates(p);
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
