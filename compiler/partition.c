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
 * Resharding from S to T, with the cheapest collectives:
 *   1. partial sums: a reduce-scatter onto a dimension T cuts over exactly
 *      those axes (and S leaves whole), else an all-reduce;
 *   2. an axis that cuts dimension d1 alone in S and dimension d2 alone in
 *      T: an all-to-all;
 *   3. a dimension whose axes in S are not a prefix of its axes in T: an
 *      all-gather (it becomes whole);
 *   4. a dimension T cuts further than S: a local slice (no communication).
 * Every step acts on one dimension and its axes, never on devices: the
 * program's size does not depend on the mesh size. */
#include <stdlib.h>
#include <string.h>

#include "gslc.h"

typedef struct Part {
  const Program *g; /* the global program */
  Program *s;       /* the SPMD program being built */
  Value **map;      /* global value id -> its SPMD value, in the value's sharding */
} Part;

static const char *sh_text(Part *P, const Value *v) { return sharding_str(P->s->arena, P->s, v); }

/* A new SPMD value for global value orig (NULL for a collective) with
 * sharding sh on global shape gshape. */
static Value *emit(Part *P, const Value *orig, Op op, DType dt, Shape gshape, const Sharding *sh, Span sp,
                   int n, Value **args) {
  Shape local = local_shape(P->s, &gshape, sh);
  Value *v = ir_add(P->s, op, dt, local, sp, n, args);
  v->gshape = gshape;
  v->sh = *sh;
  v->orig = orig;
  if (orig) {
    v->name = orig->name;
    v->fn = orig->fn;
    v->axis = orig->axis;
    v->start = orig->start;
    v->exclusive = orig->exclusive;
    v->rmask = orig->rmask;
    memcpy(v->perm, orig->perm, sizeof v->perm);
    v->fval = orig->fval;
    v->fval2 = orig->fval2;
    v->ival = orig->ival;
    v->stream = orig->stream;
    v->spec = orig->spec;
    v->tensor = orig->tensor;
    v->sh_origin = orig->sh_origin;
    v->sh_from = orig->sh_from;
  }
  return v;
}

static void set_group(Value *v, const uint8_t *axes, int n) {
  memcpy(v->group, axes, (size_t)n);
  v->ngroup = n;
}

static bool prefix(const Sharding *s, const Sharding *t, int d) {
  if (s->naxes[d] > t->naxes[d])
    return false;
  for (int j = 0; j < s->naxes[d]; j++)
    if (s->axes[d][j] != t->axes[d][j])
      return false;
  return true;
}

static bool dim_uses(const Sharding *s, int d, int ax) {
  for (int j = 0; j < s->naxes[d]; j++)
    if (s->axes[d][j] == ax)
      return true;
  return false;
}

/* Reshards x to t (which has no partial sums); the collectives it inserts
 * are charged to the consumer at span sp, for the reason why. */
static Value *reshard(Part *P, Value *x, const Sharding *t, Span sp, const char *why) {
  int rank = x->gshape.rank;
  Sharding cur = x->sh;
  if (sharding_eq(&cur, t, rank))
    return x;
  const char *before = sh_text(P, x);
  /* 1. partial sums */
  for (int d = 0; d < rank && cur.partial; d++) {
    if (cur.naxes[d] || !t->naxes[d])
      continue;
    uint32_t m = 0;
    for (int j = 0; j < t->naxes[d]; j++)
      m |= 1u << t->axes[d][j];
    if ((cur.partial & m) != m)
      continue;
    Sharding next = cur;
    next.partial &= ~m;
    next.naxes[d] = t->naxes[d];
    memcpy(next.axes[d], t->axes[d], sizeof next.axes[d]);
    Value *r = emit(P, NULL, OP_REDUCE_SCATTER, x->dtype, x->gshape, &next, sp, 1, &x);
    r->axis = d;
    set_group(r, t->axes[d], t->naxes[d]);
    r->why = why;
    x = r;
    cur = next;
  }
  if (cur.partial) {
    uint8_t axes[GSL_MAX_AXES];
    int n = 0;
    for (int ax = 0; ax < P->s->mesh.naxes; ax++)
      if (cur.partial & (1u << ax))
        axes[n++] = (uint8_t)ax;
    Sharding next = cur;
    next.partial = 0;
    Value *r = emit(P, NULL, OP_ALL_REDUCE, x->dtype, x->gshape, &next, sp, 1, &x);
    r->fn = RF_SUM;
    set_group(r, axes, n);
    r->why = why;
    x = r;
    cur = next;
  }
  /* 2. one axis moving from one dimension to another: all-to-all */
  for (int d1 = 0; d1 < rank; d1++) {
    if (cur.naxes[d1] != 1 || dim_uses(t, d1, cur.axes[d1][0]))
      continue;
    int ax = cur.axes[d1][0];
    for (int d2 = 0; d2 < rank; d2++) {
      if (d2 == d1 || cur.naxes[d2] || t->naxes[d2] != 1 || t->axes[d2][0] != ax)
        continue;
      Sharding next = cur;
      next.naxes[d1] = 0;
      next.naxes[d2] = 1;
      next.axes[d2][0] = (uint8_t)ax;
      Value *r = emit(P, NULL, OP_ALL_TO_ALL, x->dtype, x->gshape, &next, sp, 1, &x);
      r->axis = d2;
      r->axis2 = d1;
      set_group(r, cur.axes[d1], 1);
      r->why = why;
      x = r;
      cur = next;
      break;
    }
  }
  /* 3. dimensions cut in a way T does not continue: all-gather */
  for (int d = 0; d < rank; d++) {
    if (!cur.naxes[d] || prefix(&cur, t, d))
      continue;
    Sharding next = cur;
    next.naxes[d] = 0;
    Value *r = emit(P, NULL, OP_ALL_GATHER, x->dtype, x->gshape, &next, sp, 1, &x);
    r->axis = d;
    set_group(r, cur.axes[d], cur.naxes[d]);
    r->why = why;
    x = r;
    cur = next;
  }
  /* 4. dimensions T cuts further: local slices */
  for (int d = 0; d < rank; d++) {
    if (cur.naxes[d] == t->naxes[d])
      continue;
    Sharding next = cur;
    next.naxes[d] = t->naxes[d];
    memcpy(next.axes[d], t->axes[d], sizeof next.axes[d]);
    Value *r = emit(P, NULL, OP_LOCAL_SLICE, x->dtype, x->gshape, &next, sp, 1, &x);
    r->axis = d;
    set_group(r, t->axes[d] + cur.naxes[d], t->naxes[d] - cur.naxes[d]);
    r->why = why;
    x = r;
    cur = next;
  }
  if (!sharding_eq(&cur, t, rank))
    die("resharding %s did not reach its target", before);
  return x;
}

static const char *reason(Part *P, const Value *consumer, int k, const Value *x, const Sharding *want) {
  Value tmp = *x;
  tmp.sh = *want;
  return arena_printf(P->s->arena, "operand %d of %s (%%%d) is %s, needs %s", k + 1, op_name(consumer->op),
                      consumer->id, sh_text(P, x), sharding_str(P->s->arena, P->s, &tmp));
}

/* The SPMD value of global operand k of v, resharded to want. */
static Value *operand(Part *P, const Value *v, int k, const Sharding *want) {
  Value *x = P->map[v->args[k]->id];
  if (sharding_eq(&x->sh, want, x->gshape.rank))
    return x;
  return reshard(P, x, want, v->span, reason(P, v, k, x, want));
}

/* Reshards the op's natural local result to the value's own sharding. */
static Value *finish(Part *P, const Value *v, Value *r) {
  if (sharding_eq(&r->sh, &v->sh, v->shape.rank))
    return r;
  const char *why = arena_printf(P->s->arena, "%s (%%%d) gives %s, its sharding is %s", op_name(v->op), v->id,
                                 sh_text(P, r), sharding_str(P->s->arena, P->s, v));
  return reshard(P, r, &v->sh, v->span, why);
}

static Value *emit_like(Part *P, const Value *v, const Sharding *sh, Value **args) {
  return emit(P, v, v->op, v->dtype, v->shape, sh, v->span, v->nargs, args);
}

static uint32_t axes_mask(const Sharding *sh, int rank) {
  uint32_t m = 0;
  for (int i = 0; i < rank; i++)
    for (int j = 0; j < sh->naxes[i]; j++)
      m |= 1u << sh->axes[i][j];
  return m;
}

static void copy_dim(Sharding *to, int dt, const Sharding *from, int df) {
  to->naxes[dt] = from->naxes[df];
  memcpy(to->axes[dt], from->axes[df], sizeof to->axes[dt]);
}

static Value *part_einsum(Part *P, const Value *v) {
  const char *s = v->spec, *comma = strchr(s, ','), *arrow = strstr(s, "->");
  char in[2][GSL_MAX_RANK + 1] = {{0}}, out[GSL_MAX_RANK + 1] = {0};
  memcpy(in[0], s, (size_t)(comma - s));
  memcpy(in[1], comma + 1, (size_t)(arrow - comma - 1));
  strcpy(out, arrow + 2);
  /* each letter's axes: the result's for its letters; for a contracted
   * letter, an operand's own cut where its axes are free (lhs first) */
  Sharding letter = {0}; /* indexed by letter slot: out letters first, then contracted */
  char names[2 * GSL_MAX_RANK + 1] = {0};
  int nl = 0;
  uint32_t used = 0;
  for (int i = 0; out[i]; i++) {
    names[nl] = out[i];
    copy_dim(&letter, nl++, &v->sh, i);
  }
  used = axes_mask(&v->sh, v->shape.rank);
  Sharding rs = v->sh;
  for (int k = 0; k < 2; k++)
    for (int i = 0; in[k][i]; i++) {
      char c = in[k][i];
      if (strchr(names, c) || strchr(out, c))
        continue;
      names[nl] = c;
      letter.naxes[nl] = 0;
      for (int kk = 0; kk < 2 && !letter.naxes[nl]; kk++) {
        const char *q = strchr(in[kk], c);
        const Value *x = P->map[v->args[kk]->id];
        int d = (int)(q - in[kk]);
        uint32_t m = 0;
        for (int j = 0; j < x->sh.naxes[d]; j++)
          m |= 1u << x->sh.axes[d][j];
        if (x->sh.naxes[d] && !(m & used)) {
          copy_dim(&letter, nl, &x->sh, d);
          used |= m;
          rs.partial |= m;
        }
      }
      nl++;
    }
  Value *ops[2];
  for (int k = 0; k < 2; k++) {
    Sharding want = {0};
    for (int i = 0; in[k][i]; i++)
      copy_dim(&want, i, &letter, (int)(strchr(names, in[k][i]) - names));
    ops[k] = operand(P, v, k, &want);
  }
  return finish(P, v, emit_like(P, v, &rs, ops));
}

static Value *part_reduce(Part *P, const Value *v) {
  const Value *a = v->args[0];
  Value *x = P->map[a->id];
  Sharding want = {0}, rs = v->sh;
  int k = 0;
  for (int i = 0; i < a->shape.rank; i++)
    if (!(v->rmask & (1u << i)))
      copy_dim(&want, i, &v->sh, k++);
  if (v->fn == RF_SUM) { /* a cut reduced dim stays cut: the sum becomes partial */
    uint32_t used = axes_mask(&v->sh, v->shape.rank);
    for (int i = 0; i < a->shape.rank; i++) {
      if (!(v->rmask & (1u << i)) || !x->sh.naxes[i])
        continue;
      uint32_t m = 0;
      for (int j = 0; j < x->sh.naxes[i]; j++)
        m |= 1u << x->sh.axes[i][j];
      if (m & used)
        continue;
      used |= m;
      rs.partial |= m;
      copy_dim(&want, i, &x->sh, i);
    }
  }
  Value *o = operand(P, v, 0, &want);
  return finish(P, v, emit_like(P, v, &rs, &o));
}

/* the natural form of an op that needs dimension axis whole */
static Value *part_whole_axis(Part *P, const Value *v, int axis) {
  Sharding nat = v->sh;
  nat.naxes[axis] = 0;
  Value *ops[GSL_MAX_RANK * 4];
  Value **args = v->nargs <= (int)(sizeof ops / sizeof ops[0]) ? ops : xmalloc(sizeof(Value *) * (size_t)v->nargs);
  for (int k = 0; k < v->nargs; k++) /* one_hot's operand is nat without its last dim */
    args[k] = operand(P, v, k, &nat);
  Value *r = finish(P, v, emit_like(P, v, &nat, args));
  if (args != ops)
    free(args);
  return r;
}

static Value *part_reshape(Part *P, const Value *v) {
  const Value *a = v->args[0];
  Sharding want = reshape_sharding(&v->sh, &v->shape, &a->shape);
  Sharding back = reshape_sharding(&want, &a->shape, &v->shape);
  if (sharding_eq(&back, &v->sh, v->shape.rank)) {
    Value *o = operand(P, v, 0, &want);
    return emit_like(P, v, &v->sh, &o);
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
  case OP_RNG:
    return emit_like(P, v, &v->sh, NULL);
  case OP_UNARY:
  case OP_CAST:
  case OP_BINARY:
  case OP_SELECT: {
    Value *args[3];
    for (int k = 0; k < v->nargs; k++)
      args[k] = operand(P, v, k, &v->sh);
    return emit_like(P, v, &v->sh, args);
  }
  case OP_ANNOTATE:
    return operand(P, v, 0, &v->sh);
  case OP_TRANSPOSE: {
    for (int i = 0; i < v->shape.rank; i++)
      copy_dim(&want, v->perm[i], &v->sh, i);
    Value *o = operand(P, v, 0, &want);
    return emit_like(P, v, &v->sh, &o);
  }
  case OP_BROADCAST: {
    const Value *a = v->args[0];
    for (int i = 0; i < v->shape.rank; i++)
      if (v->perm[i] >= 0 && a->shape.d[v->perm[i]] == v->shape.d[i])
        copy_dim(&want, v->perm[i], &v->sh, i);
    Value *o = operand(P, v, 0, &want);
    return emit_like(P, v, &v->sh, &o);
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
      copy_dim(&is, i, &v->sh, i);
    for (int i = 1; i < t->shape.rank; i++)
      copy_dim(&ts, i, &v->sh, ix->shape.rank + i - 1);
    Value *args[2] = {operand(P, v, 0, &ts), operand(P, v, 1, &is)};
    return emit_like(P, v, &v->sh, args);
  }
  case OP_REDUCE:
    return part_reduce(P, v);
  case OP_EINSUM:
    if (v->nargs == 2)
      return part_einsum(P, v);
    die("one-operand einsum reached the partitioner");
  default:
    die("op %s cannot be partitioned", op_name(v->op));
  }
}

Program *spmd_partition(const Program *g) {
  Program *s = ir_new(g->path);
  s->mesh = g->mesh;
  s->nstreams = g->nstreams;
  s->spmd = true;
  Part P = {g, s, xcalloc((size_t)g->nvalues + 1, sizeof(Value *))};
  s->ntensors = s->captensors = g->ntensors;
  s->tensors = xcalloc((size_t)g->ntensors + 1, sizeof(Tensor));
  memcpy(s->tensors, g->tensors, sizeof(Tensor) * (size_t)g->ntensors);
  for (int i = 0; i < g->nvalues; i++) {
    const Value *v = g->values[i];
    Value *r = part_value(&P, v);
    P.map[i] = r;
    if (v->op == OP_PARAM || v->op == OP_INPUT) {
      s->tensors[v->tensor].value = r;
      s->tensors[v->tensor].sh = v->sh;
    }
  }
  s->noutputs = s->capoutputs = g->noutputs;
  s->outputs = xcalloc((size_t)g->noutputs + 1, sizeof(Output));
  for (int i = 0; i < g->noutputs; i++) {
    s->outputs[i] = g->outputs[i];
    s->outputs[i].value = P.map[g->outputs[i].value->id];
  }
  free(P.map);
  ir_count_uses(s);
  return s;
}
