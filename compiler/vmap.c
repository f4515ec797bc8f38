/* vmap.c — batching: IR built for one member of a batch, rebuilt for all of
 * them at once over a new leading dimension (the moe vectorizer: a body
 * written for one expert runs as one program over every expert).
 *
 * Method: sema elaborates the body as usual, for one member, on stand-in
 * values (the seeds: the expert's tokens t, the expert index e). ir_vmap
 * then walks the values built since, in program order, and rebuilds, with
 * the IR builder, each one that depends on a seed, over [n, ...]: every
 * op's batching rule shifts its dimension attributes by one (reduce
 * masks, slice, concat and cumsum axes, transpose and broadcast maps),
 * gives an einsum a new letter for the batch on the operands that have
 * it, and broadcasts an operand that does not depend on a seed where an
 * elementwise op meets one that does (JAX's vmap, on this IR). Values
 * that depend on no seed are left as they are: computed once, shared by
 * all members. A random draw in the body (rng, dropout) is drawn for
 * each member: one draw over the batch, under a stream of its own. The
 * member's index e, used to index a tensor whose leading dimension is
 * the batch (w[e]: a gather by e), batches to that tensor itself: no copy,
 * and its sharding reaches the body untouched. The per-member values are
 * left dead; the caller's DCE drops them. */
#include <stdlib.h>
#include <string.h>

#include "gslc.h"

typedef struct Vmap {
  Build b;             /* what it builds with: the caller's builder (b.p: the program, growing), at the call
                          site of the value being batched */
  int first, end;      /* the values to batch: ids in [first, end) */
  int64_t n;           /* the batch */
  Value **batch;       /* per value id - first: its batched form, NULL if it depends on no seed */
  const Value *member; /* the seed standing for the member's index, or NULL */
  Value *iota;         /* 0..n-1 (i32[n]), made on first use */
} Vmap;

static Value *batched(Vmap *V, const Value *x) {
  return x->id >= V->first && x->id < V->end ? V->batch[x->id - V->first] : NULL;
}

static Shape with_batch(int64_t n, const Shape *s) {
  Shape o = {s->rank + 1, {n}};
  memcpy(o.d + 1, s->d, sizeof *s->d * (size_t)s->rank);
  return o;
}

/* x over [n, ...]: its batched form, or x repeated for every member */
static Value *lift(Vmap *V, Value *x, Span sp) {
  Value *y = batched(V, x);
  return y ? y : ir_broadcast(&V->b, x, with_batch(V->n, &x->shape), sp);
}

static Value *iota(Vmap *V, Span sp) {
  if (!V->iota) {
    Shape s = {1, {V->n}};
    Value *ones = ir_broadcast(&V->b, ir_const(&V->b, DT_F32, 1.0, sp), s, sp);
    V->iota = ir_cast(&V->b, ir_cumsum(&V->b, ones, 0, true, sp), DT_I32, sp);
  }
  return V->iota;
}

/* a letter no operand or result of spec z uses */
static char free_letter(const EinsumSpec *z) {
  for (char c = 'a'; c <= 'z'; c++)
    if (!strchr(z->in[0], c) && !(z->nin > 1 && strchr(z->in[1], c)) && !strchr(z->out, c))
      return c;
  die("einsum with every letter in use");
}

static void prepend(char *letters, char c) {
  memmove(letters + 1, letters, strlen(letters) + 1);
  letters[0] = c;
}

/* gather(table, idx) with one of them batched */
static Value *batch_gather(Vmap *V, const Value *v) {
  const Build *bd = &V->b;
  Value *t = v->args[0], *ix = v->args[1], *bt = batched(V, t);
  if (!bt && ix == V->member && t->shape.d[0] == V->n)
    return t; /* w[e]: every member's row is the tensor itself */
  if (!bt)
    return ir_gather(bd, t, batched(V, ix), v->span);
  /* each member gathers from its own table: rows of the [n * rows, ...]
   * table, offset by member * rows */
  Shape flat = bt->shape;
  int64_t rows = flat.d[1];
  flat.d[0] *= rows;
  for (int i = 1; i + 1 < flat.rank; i++)
    flat.d[i] = flat.d[i + 1];
  flat.rank--;
  Value *bix = lift(V, ix, v->span);
  Value *off = ir_binary(bd, BF_MUL, iota(V, v->span), ir_const(bd, DT_I32, (double)rows, v->span), v->span);
  Shape os = {1, {V->n}};
  for (int i = 0; i < ix->shape.rank; i++)
    os.d[os.rank++] = 1;
  off = ir_broadcast(bd, ir_reshape(bd, off, os, v->span), bix->shape, v->span);
  return ir_gather(bd, ir_reshape(bd, bt, flat, v->span), ir_binary(bd, BF_ADD, bix, off, v->span), v->span);
}

/* v rebuilt over [n, ...], at least one operand being batched; NULL when
 * its op has no batching rule */
static Value *batch_value(Vmap *V, const Value *v) {
  const Build *bd = &V->b;
  Value *a = v->nargs ? batched(V, v->args[0]) : NULL;
  Span sp = v->span;
  int perm[GSL_MAX_RANK];
  switch (v->op) {
  case OP_UNARY:
    return ir_unary(bd, v->fn, a, sp);
  case OP_CAST:
    return ir_cast(bd, a, v->dtype, sp);
  case OP_DROPOUT: /* each member its own mask: a draw over the batch */
    return ir_dropout(bd, lift(V, v->args[0], sp), v->fval, sp);
  case OP_BINARY:
    return ir_binary(bd, v->fn, lift(V, v->args[0], sp), lift(V, v->args[1], sp), sp);
  case OP_SELECT:
    return ir_select(bd, lift(V, v->args[0], sp), lift(V, v->args[1], sp), lift(V, v->args[2], sp), sp);
  case OP_BROADCAST: {
    Value *r = ir_add(bd, OP_BROADCAST, v->dtype, with_batch(V->n, &v->shape), sp, 1, &a);
    r->perm[0] = 0;
    for (int i = 0; i < v->shape.rank; i++)
      r->perm[i + 1] = v->perm[i] >= 0 ? v->perm[i] + 1 : -1;
    return r;
  }
  case OP_RESHAPE:
    return ir_reshape(bd, a, with_batch(V->n, &v->shape), sp);
  case OP_TRANSPOSE:
    perm[0] = 0;
    for (int i = 0; i < v->shape.rank; i++)
      perm[i + 1] = v->perm[i] + 1;
    return ir_transpose(bd, a, perm, sp);
  case OP_SLICE:
    return ir_slice(bd, a, v->axis + 1, v->start, v->shape.d[v->axis], sp);
  case OP_CONCAT: {
    Value **xs = arena_alloc(bd->p->arena, sizeof *xs * (size_t)v->nargs);
    for (int k = 0; k < v->nargs; k++)
      xs[k] = lift(V, v->args[k], sp);
    return ir_concat(bd, xs, v->nargs, v->axis + 1, sp);
  }
  case OP_CUMSUM:
    return ir_cumsum(bd, a, v->axis + 1, v->exclusive, sp);
  case OP_REDUCE:
    return ir_reduce(bd, v->fn, a, v->rmask << 1, sp);
  case OP_EINSUM: {
    EinsumSpec z = v->ein;
    char c = free_letter(&z);
    Value *ops[2];
    for (int k = 0; k < z.nin; k++) {
      Value *x = batched(V, v->args[k]);
      ops[k] = x ? x : v->args[k];
      if (x)
        prepend(z.in[k], c);
    }
    prepend(z.out, c);
    return ir_einsum_acc(bd, &z, ops, sp); /* as v: f32 from bf16 operands */
  }
  case OP_GATHER:
    return batch_gather(V, v);
  case OP_ONE_HOT:
    return ir_one_hot(bd, a, v->shape.d[v->shape.rank - 1], sp);
  case OP_ANNOTATE:  /* a sharding for one member says nothing of the batch's */
  case OP_SCATTER_ADD: /* only autodiff makes it, after every moe body is batched */
  case OP_DISPATCH:  /* moe blocks do not nest */
  case OP_COMBINE:
    return NULL;
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
  die("%s cannot be batched", op_name(v->op));
}

const Value *ir_vmap(const Build *bd, int first, int64_t n, Value **seeds, Value **batch, int nseeds,
                     const Value *member, Value **results, Value **out, int nresults) {
  Program *p = bd->p;
  Vmap V = {*bd, first, p->nvalues, n, NULL, member, NULL};
  V.batch = xcalloc((size_t)(V.end - first) + 1, sizeof *V.batch);
  const Value *bad = NULL;
  for (int i = first; i < V.end && !bad; i++) {
    Value *v = p->values[i];
    V.b = build_in(*bd, v->site, bd->region);
    Value *r = NULL;
    for (int k = 0; k < nseeds; k++)
      if (seeds[k] == v)
        r = batch[k];
    bool any = (ir_op(v->op)->flags & OF_DRAW) != 0;
    for (int k = 0; k < v->nargs; k++)
      any |= batched(&V, v->args[k]) != NULL;
    if (v == member) {
      r = iota(&V, v->span);
    } else if (!r && any && shape_elems(&v->shape) > GSL_MAX_ELEMS / n) {
      bad = v; /* too large once batched */
    } else if (!r && v->op == OP_RNG) {
      r = ir_rng(&V.b, v->fn, v->fval, v->fval2, with_batch(n, &v->shape), v->span);
    } else if (!r && any && !(r = batch_value(&V, v))) {
      bad = v;
    }
    V.batch[i - first] = r;
  }
  for (int j = 0; j < nresults && !bad; j++) {
    V.b = build_in(*bd, results[j]->site, bd->region);
    out[j] = lift(&V, results[j], results[j]->span);
  }
  free(V.batch);
  return bad;
}
