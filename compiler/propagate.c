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
 * broadcast. Each sweep goes forward over the program, then backward; after
 * any change the sweeps restart at level 0, so the cheapest kind of
 * inference always runs to a fixed point before a costlier kind is tried.
 * Where an op's operands disagree, the offer is the operand sharding that
 * the others reach with the fewest bytes moved (partition.c's cost of
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

bool sharding_eq(const Sharding *a, const Sharding *b, int rank) {
  if (a->partial != b->partial)
    return false;
  for (int i = 0; i < rank; i++) {
    if (a->naxes[i] != b->naxes[i])
      return false;
    for (int j = 0; j < a->naxes[i]; j++)
      if (a->axes[i][j] != b->axes[i][j])
        return false;
  }
  return true;
}

int64_t sharding_shards(const Program *p, const Sharding *sh, int dim) {
  int64_t n = 1;
  for (int j = 0; j < sh->naxes[dim]; j++)
    n *= p->mesh.size[sh->axes[dim][j]];
  return n;
}

Shape local_shape(const Program *p, const Shape *global, const Sharding *sh) {
  Shape s = *global;
  for (int i = 0; i < s.rank; i++)
    s.d[i] /= sharding_shards(p, sh, i);
  return s;
}

static bool splits_anything(const Sharding *sh, int rank) {
  for (int i = 0; i < rank; i++)
    if (sh->naxes[i])
      return true;
  return false;
}

static void clear_dim(Sharding *sh, int d) { sh->naxes[d] = 0; }

void sharding_copy_dim(Sharding *to, int dt, const Sharding *from, int df) {
  to->naxes[dt] = from->naxes[df];
  memcpy(to->axes[dt], from->axes[df], sizeof to->axes[dt]);
}

uint32_t sharding_dim_axes(const Sharding *sh, int dim) {
  uint32_t m = 0;
  for (int j = 0; j < sh->naxes[dim]; j++)
    m |= 1u << sh->axes[dim][j];
  return m;
}

uint32_t sharding_all_axes(const Sharding *sh, int rank) {
  uint32_t m = 0;
  for (int i = 0; i < rank; i++)
    m |= sharding_dim_axes(sh, i);
  return m;
}

/* Drops repeated axes and axes that do not divide their dimension. */
static void fit(const Program *p, Sharding *sh, const Shape *s) {
  uint32_t used = 0;
  sh->partial = 0;
  for (int i = 0; i < s->rank; i++) {
    int n = 0;
    int64_t shards = 1;
    for (int j = 0; j < sh->naxes[i]; j++) {
      int ax = sh->axes[i][j];
      int64_t size = p->mesh.size[ax];
      if ((used & (1u << ax)) || s->d[i] % (shards * size) != 0)
        break; /* the axes after one that does not fit would cut wrongly */
      used |= 1u << ax;
      shards *= size;
      sh->axes[i][n++] = (uint8_t)ax;
    }
    sh->naxes[i] = (uint8_t)n;
  }
  for (int i = s->rank; i < GSL_MAX_RANK; i++)
    sh->naxes[i] = 0;
}

static void offer(Prop *P, Value *v, Sharding sh, const Value *from) {
  if (v->sh_origin != SO_NONE)
    return;
  fit(P->p, &sh, &v->shape);
  if (!splits_anything(&sh, v->shape.rank))
    return;
  v->sh = sh;
  v->sh_origin = SO_PROPAGATED;
  v->sh_from = from;
  P->changed = true;
}

static bool known(const Value *v) { return v->sh_origin != SO_NONE; }

/* ---- reshape: groups of dimensions with equal products -------------------- */

typedef struct Group {
  int a0, a1; /* operand dims [a0, a1) */
  int b0, b1; /* result dims [b0, b1) */
} Group;

/* Splits a reshape into groups; returns their number. */
static int reshape_groups(const Shape *a, const Shape *b, Group *g) {
  int n = 0, i = 0, j = 0;
  while (i < a->rank || j < b->rank) {
    Group x = {i, i, j, j};
    int64_t pa = 1, pb = 1;
    if (i < a->rank)
      pa = a->d[i++];
    if (j < b->rank)
      pb = b->d[j++];
    while (pa != pb) {
      if (pa < pb && i < a->rank)
        pa *= a->d[i++];
      else if (j < b->rank)
        pb *= b->d[j++];
      else
        break;
    }
    x.a1 = i;
    x.b1 = j;
    g[n++] = x;
  }
  return n;
}

/* the first dimension of [lo, hi) larger than 1, or -1 */
static int first_real(const Shape *s, int lo, int hi) {
  for (int i = lo; i < hi; i++)
    if (s->d[i] > 1)
      return i;
  return -1;
}

/* Carries a sharding through a reshape from shape `from` to shape `to`:
 * within each group only a split of its first real dimension carries over,
 * onto the other side's first real dimension. */
Sharding reshape_sharding(const Sharding *sh, const Shape *from, const Shape *to) {
  Group g[2 * GSL_MAX_RANK + 2];
  int n = reshape_groups(from, to, g);
  Sharding out = {0};
  for (int k = 0; k < n; k++) {
    int f0 = g[k].a0, f1 = g[k].a1, t0 = g[k].b0, t1 = g[k].b1;
    int fr = first_real(from, f0, f1), tr = first_real(to, t0, t1);
    if (fr < 0 || tr < 0)
      continue;
    bool others = false;
    for (int i = f0; i < f1; i++)
      others |= i != fr && sh->naxes[i];
    if (!others)
      sharding_copy_dim(&out, tr, sh, fr);
  }
  return out;
}

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
  uint32_t m = sharding_dim_axes(&x->sh, k);
  if (m & *used)
    return;
  *used |= m;
  sharding_copy_dim(sh, d, &x->sh, k);
}

/* ---- forward: a result from its operands ----------------------------------- */

static int64_t split_product(const Program *p, const Value *v) {
  int64_t n = 1;
  for (int i = 0; i < v->shape.rank; i++)
    n *= sharding_shards(p, &v->sh, i);
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
          cost += reshard_bytes(P->p, &v->shape, &v->args[j]->sh, &c->sh);
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
    if (!known(a))
      return;
    for (int i = 0; i < v->shape.rank; i++)
      sharding_copy_dim(&sh, i, &a->sh, v->perm[i]);
    offer(P, v, sh, a);
    return;
  case OP_RESHAPE:
    if (known(a))
      offer(P, v, reshape_sharding(&a->sh, &a->shape, &v->shape), a);
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
        sharding_copy_dim(&sh, i, &ix->sh, i);
    if (known(t))
      for (int i = 1; i < t->shape.rank; i++)
        sharding_copy_dim(&sh, ix->shape.rank + i - 1, &t->sh, i);
    if (known(ix) || known(t))
      offer(P, v, sh, known(ix) ? ix : t);
    return;
  }
  case OP_REDUCE: {
    if (!known(a))
      return;
    int k = 0;
    for (int i = 0; i < a->shape.rank; i++)
      if (!(v->rmask & (1u << i)))
        sharding_copy_dim(&sh, k++, &a->sh, i);
    offer(P, v, sh, a);
    return;
  }
  case OP_EINSUM: {
    if (v->nargs != 2)
      return;
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
  case OP_BROADCAST:
    if (!known(a))
      return;
    for (int i = 0; i < v->shape.rank; i++)
      if (v->perm[i] >= 0 && a->shape.d[v->perm[i]] == v->shape.d[i])
        sharding_copy_dim(&sh, i, &a->sh, v->perm[i]);
    offer(P, v, sh, a);
    return;
  default:
    return;
  }
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
    for (int i = 0; i < v->shape.rank; i++)
      sharding_copy_dim(&sh, v->perm[i], &v->sh, i);
    offer(P, a, sh, v);
    return;
  case OP_RESHAPE:
    offer(P, a, reshape_sharding(&v->sh, &v->shape, &a->shape), v);
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
      sharding_copy_dim(&sh, i, &v->sh, i);
    offer(P, ix, sh, v);
    Sharding ts = {0};
    for (int i = 1; i < t->shape.rank; i++)
      sharding_copy_dim(&ts, i, &v->sh, ix->shape.rank + i - 1);
    offer(P, t, ts, v);
    return;
  }
  case OP_REDUCE: {
    int k = 0;
    for (int i = 0; i < a->shape.rank; i++)
      if (!(v->rmask & (1u << i)))
        sharding_copy_dim(&sh, i, &v->sh, k++);
    offer(P, a, sh, v);
    return;
  }
  case OP_EINSUM: {
    if (v->nargs != 2)
      return;
    const EinsumSpec l = v->ein;
    for (int k = 0; k < 2; k++) {
      Sharding os = {0};
      uint32_t used = 0;
      for (int i = 0; l.in[k][i]; i++) {
        int o = index_of(l.out, l.in[k][i]);
        if (o >= 0) {
          sharding_copy_dim(&os, i, &v->sh, o);
          used |= sharding_dim_axes(&v->sh, o);
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
  case OP_BROADCAST:
    for (int i = 0; i < v->shape.rank; i++)
      if (v->perm[i] >= 0 && a->shape.d[v->perm[i]] == v->shape.d[i])
        sharding_copy_dim(&sh, v->perm[i], &v->sh, i);
    offer(P, a, sh, v);
    return;
  default:
    return;
  }
}

static void sweep(Prop *P, int level) {
  Program *p = P->p;
  for (int i = 0; i < p->nvalues; i++) {
    Value *v = p->values[i];
    if (!known(v) && v->nargs && ir_op(v->op)->level == level)
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
