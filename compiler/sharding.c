/* sharding.c — the sharding algebra, the resharding planner and the one
 * byte-cost model that propagation, partitioning and --explain share.
 *
 * The algebra: a Sharding names, per dimension, the mesh axes that cut it
 * (major first) and the axes over which the value is a pending partial
 * sum. From it follow the local (per-device) shape, the fitting of an
 * offered sharding to a shape (an axis used twice is dropped, and so is
 * every axis from the first one that would leave a shard of a dimension
 * without an element),
 * and the carrying of a sharding through a reshape: the two shapes split
 * into groups of dimensions with equal products, and within a group only a
 * split of its first real dimension (size > 1), with no other dimension of
 * the group split, carries over onto the other side's first real dimension.
 *
 * The planner: resharding from S to T (T has no partial sums) with the
 * cheapest collectives, in this order:
 *   1. partial sums: a reduce-scatter onto a dimension T cuts over exactly
 *      those axes (and S leaves whole), else an all-reduce;
 *   2. an axis that cuts dimension d1 alone in S and dimension d2 alone in
 *      T: an all-to-all;
 *   3. a dimension cut by the same axes in another order: a
 *      collective-permute (its blocks change devices);
 *   4. a dimension whose axes in S are not a prefix of its axes in T: an
 *      all-gather (it becomes whole);
 *   5. a dimension T cuts further than S: a local slice (no communication).
 * A dimension its shards do not divide is held in tiles of ceil(n / k)
 * elements, shard j's real ones first, padding after (gsl.7, SHARDING);
 * a step that keeps some of its axes (an all-to-all out of or into a cut
 * dimension, a local slice of a tile) is taken only where the coarser
 * tiles are whole numbers of the finer ones (nests()), else the dimension
 * is gathered whole and cut again.
 * Every step acts on one dimension and its axes, never on devices: the
 * program's size does not depend on the mesh size.
 *
 * The cost model: bytes one device receives per step with the usual ring
 * and pairwise algorithms, for a group of n devices and b local input
 * bytes: all-reduce 2 b (n-1)/n; all-gather b (n-1); reduce-scatter and
 * all-to-all b (n-1)/n; collective-permute b (at most: a block already in
 * place does not move); a local slice moves nothing; over a group of one
 * device nothing moves. A plan's cost is the sum of its steps', which is
 * how an einsum chooses its layout (partition.c), how operands indexed
 * alike settle a conflict (rule.c), and what --explain reports for each
 * collective of the SPMD program (explain.c). */
#include <stdlib.h>
#include <string.h>

#include "gslc.h"

/* ---- the algebra -------------------------------------------------------------- */

bool shard_eq(const Sharding *a, const Sharding *b, int rank) {
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

uint32_t shard_dim_axes(const Sharding *sh, int dim) {
  uint32_t m = 0;
  for (int j = 0; j < sh->naxes[dim]; j++)
    m |= 1u << sh->axes[dim][j];
  return m;
}

uint32_t shard_all_axes(const Sharding *sh, int rank) {
  uint32_t m = 0;
  for (int i = 0; i < rank; i++)
    m |= shard_dim_axes(sh, i);
  return m;
}

void shard_copy_dim(Sharding *to, int dt, const Sharding *from, int df) {
  to->naxes[dt] = from->naxes[df];
  memcpy(to->axes[dt], from->axes[df], sizeof to->axes[dt]);
}

int64_t shard_group_size(const Program *p, const uint8_t *axes, int n) {
  int64_t k = 1;
  for (int i = 0; i < n; i++)
    k *= p->mesh.size[axes[i]];
  return k;
}

int64_t shard_shards(const Program *p, const Sharding *sh, int dim) {
  return shard_group_size(p, sh->axes[dim], sh->naxes[dim]);
}

Shape shard_local_shape(const Program *p, const Shape *global, const Sharding *sh) {
  Shape s = *global;
  for (int i = 0; i < s.rank; i++) {
    int64_t k = shard_shards(p, sh, i);
    s.d[i] = (s.d[i] + k - 1) / k;
  }
  return s;
}

bool shard_slice_past(const Program *s, const Value *v) {
  return v->op == OP_LOCAL_SLICE &&
         shard_group_size(s, v->group, v->ngroup) * v->shape.d[v->axis] > v->args[0]->shape.d[v->axis];
}

int64_t shard_last_real(int64_t n, int64_t k) {
  int64_t c = (n + k - 1) / k, last = n - (k - 1) * c;
  return last > 0 ? last : 0;
}

uint32_t shard_padded(const Program *p, const Shape *global, const Sharding *sh) {
  uint32_t m = 0;
  for (int i = 0; i < global->rank; i++)
    if (global->d[i] % shard_shards(p, sh, i))
      m |= 1u << i;
  return m;
}

/* Whether dim d of n elements cut by the first `keep` of sh's axes of it
 * (kp devices) holds, in each tile, exactly the tiles of the cut by all of
 * them (ks more): ceil(n / kp) = ks ceil(n / (kp ks)). Even cuts do; an
 * uneven one may not (10 over 2 then 3: tiles of 5, but 3 tiles of 2). */
static bool nests(const Program *p, int64_t n, const Sharding *sh, int d, int keep) {
  int64_t kp = 1, ks = 1;
  for (int j = 0; j < sh->naxes[d]; j++)
    *(j < keep ? &kp : &ks) *= p->mesh.size[sh->axes[d][j]];
  return keep == 0 || (n + kp - 1) / kp == ks * ((n + kp * ks - 1) / (kp * ks));
}

void shard_fit(const Program *p, Sharding *sh, const Shape *s) {
  uint32_t used = 0;
  sh->partial = 0;
  for (int i = 0; i < s->rank; i++) {
    int n = 0;
    int64_t shards = 1;
    for (int j = 0; j < sh->naxes[i]; j++) {
      int ax = sh->axes[i][j];
      int64_t size = p->mesh.size[ax];
      if ((used & (1u << ax)) || s->d[i] < shards * size)
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

/* ---- reshape: groups of dimensions with equal products -------------------- */

/* dimensions [a0, a1) of one shape hold the elements of [b0, b1) of the other */
typedef struct Group {
  int a0, a1; /* `from` dims [a0, a1) */
  int b0, b1; /* `to` dims [b0, b1) */
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

Sharding shard_reshape(const Program *p, const Sharding *sh, const Shape *from, const Shape *to) {
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
    /* the tiles must hold the same run of the group's elements on both
     * sides: ceil(nf / k) * inner_f = ceil(nt / k) * inner_t (an even cut
     * always does; an uneven one only by chance) */
    int64_t kk = shard_shards(p, sh, fr), inner_f = 1, inner_t = 1;
    for (int i = fr + 1; i < f1; i++)
      inner_f *= from->d[i];
    for (int i = tr + 1; i < t1; i++)
      inner_t *= to->d[i];
    bool same_tiles = (from->d[fr] + kk - 1) / kk * inner_f == (to->d[tr] + kk - 1) / kk * inner_t;
    if (!others && same_tiles)
      shard_copy_dim(&out, tr, sh, fr);
  }
  return out;
}

Sharding shard_reshape_need(const Program *p, const Sharding *sh, const Shape *from, const Shape *to) {
  Sharding w = shard_reshape(p, sh, to, from);
  Sharding back = shard_reshape(p, &w, from, to);
  if (!shard_eq(&back, sh, to->rank))
    memset(&w, 0, sizeof w); /* reshaped whole, then cut */
  return w;
}

/* ---- the planner ---------------------------------------------------------------- */

/* s's axes of dimension d begin t's */
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

static void add_step(ShardStep *steps, int *n, Op op, int axis, int axis2, const uint8_t *g, int ng,
                     const Sharding *after) {
  if (*n >= SHARD_MAX_STEPS)
    die("a resharding plan has more than %d steps", SHARD_MAX_STEPS);
  ShardStep *st = &steps[(*n)++];
  memset(st, 0, sizeof *st);
  st->op = op;
  st->axis = axis;
  st->axis2 = axis2;
  memcpy(st->group, g, (size_t)ng);
  st->ngroup = ng;
  st->after = *after;
}

int shard_plan(const Program *p, const Shape *gshape, const Sharding *from, const Sharding *t, ShardStep *steps) {
  int rank = gshape->rank;
  Sharding cur = *from;
  int n = 0;
  if ((t->partial & ~from->partial) || (t->partial & shard_all_axes(t, rank)))
    die("a resharding target with partial sums its source lacks, or over axes it cuts");
  if (shard_eq(&cur, t, rank))
    return 0;
  /* partial sums T keeps pending stay as they are (T cuts none of their
   * axes); the others are resolved first */
  uint32_t keep = t->partial;
  /* 1. partial sums: reduce-scatter onto a dim T cuts over exactly them */
  for (int d = 0; d < rank && (cur.partial & ~keep); d++) {
    if (cur.naxes[d] || !t->naxes[d])
      continue;
    uint32_t m = shard_dim_axes(t, d);
    if ((cur.partial & m) != m)
      continue;
    cur.partial &= ~m;
    shard_copy_dim(&cur, d, t, d);
    add_step(steps, &n, OP_REDUCE_SCATTER, d, 0, t->axes[d], t->naxes[d], &cur);
  }
  if (cur.partial & ~keep) { /* the rest: all-reduce */
    uint8_t axes[GSL_MAX_AXES];
    int k = 0;
    for (int ax = 0; ax < p->mesh.naxes; ax++)
      if (cur.partial & ~keep & (1u << ax))
        axes[k++] = (uint8_t)ax;
    cur.partial = keep;
    add_step(steps, &n, OP_ALL_REDUCE, 0, 0, axes, k, &cur);
  }
  /* 2. one axis moving from one dimension to another: all-to-all. The
   * axis leaves d1 as its minor one and joins d2 as its next one, where
   * d2's cut so far is the start of T's: within the group of that axis,
   * d1's blocks are consecutive and d2's tile is cut into consecutive
   * blocks ([_, (data, expert)] -> [expert, data] is one all-to-all over
   * expert). */
  for (bool moved = true; moved;) {
    moved = false;
    for (int d1 = 0; d1 < rank && !moved; d1++) {
      int k1 = cur.naxes[d1];
      if (!k1 || dim_uses(t, d1, cur.axes[d1][k1 - 1]))
        continue;
      uint8_t ax = cur.axes[d1][k1 - 1];
      for (int d2 = 0; d2 < rank && !moved; d2++) {
        int k2 = cur.naxes[d2];
        if (d2 == d1 || t->naxes[d2] <= k2 || t->axes[d2][k2] != ax || memcmp(cur.axes[d2], t->axes[d2], (size_t)k2))
          continue;
        Sharding next = cur;
        next.naxes[d1]--;
        next.axes[d2][next.naxes[d2]++] = ax;
        /* uneven tiles: the axis must leave d1's tile and join d2's as
         * blocks of them (or d1 become whole, d2 be whole before) */
        if (!nests(p, gshape->d[d1], &cur, d1, k1 - 1) || !nests(p, gshape->d[d2], &next, d2, k2))
          continue;
        cur = next;
        add_step(steps, &n, OP_ALL_TO_ALL, d2, d1, &ax, 1, &cur);
        moved = true;
      }
    }
  }
  /* 3. a dimension cut by the same axes in another order: its blocks only
   * change places (collective-permute) */
  for (int d = 0; d < rank; d++) {
    if (cur.naxes[d] < 2 || cur.naxes[d] != t->naxes[d] || prefix(&cur, t, d))
      continue;
    if (shard_dim_axes(&cur, d) != shard_dim_axes(t, d))
      continue;
    Sharding next = cur;
    memcpy(next.axes[d], t->axes[d], sizeof next.axes[d]);
    add_step(steps, &n, OP_COLLECTIVE_PERMUTE, d, 0, cur.axes[d], cur.naxes[d], &next);
    memcpy(steps[n - 1].group2, t->axes[d], sizeof steps[n - 1].group2);
    cur = next;
  }
  /* 4. dimensions cut in a way T does not continue: all-gather */
  for (int d = 0; d < rank; d++) {
    if (!cur.naxes[d] || (prefix(&cur, t, d) && nests(p, gshape->d[d], t, d, cur.naxes[d])))
      continue;
    uint8_t g[GSL_MAX_AXES];
    int k = cur.naxes[d];
    memcpy(g, cur.axes[d], (size_t)k);
    cur.naxes[d] = 0;
    add_step(steps, &n, OP_ALL_GATHER, d, 0, g, k, &cur);
  }
  /* 5. dimensions T cuts further: local slices */
  for (int d = 0; d < rank; d++) {
    if (cur.naxes[d] == t->naxes[d])
      continue;
    int have = cur.naxes[d];
    shard_copy_dim(&cur, d, t, d);
    add_step(steps, &n, OP_LOCAL_SLICE, d, 0, t->axes[d] + have, t->naxes[d] - have, &cur);
  }
  if (!shard_eq(&cur, t, rank))
    die("a resharding plan did not reach its target");
  return n;
}

/* ---- the cost model --------------------------------------------------------------- */

int64_t shard_step_bytes(Op op, int64_t in, int64_t n) {
  if (n < 1)
    die("a collective over a group of %lld devices", (long long)n);
  switch (op) {
  case OP_ALL_REDUCE:
    return 2 * in * (n - 1) / n;
  case OP_ALL_GATHER:
    return in * (n - 1);
  case OP_REDUCE_SCATTER:
  case OP_ALL_TO_ALL:
    return in * (n - 1) / n;
  case OP_COLLECTIVE_PERMUTE:
    return n > 1 ? in : 0; /* every block moves but the ones that stay put: an upper bound */
  case OP_LOCAL_SLICE:
    return 0; /* a device's own block: no communication */
  default:
    die("op %s is not a resharding step", op_name(op));
  }
}

/* in[i]: the local bytes step i of a plan starting in sharding start takes in */
static void plan_inputs(const Program *p, const Shape *gshape, DType dt, const Sharding *start, const ShardStep *steps,
                        int n, int64_t *in) {
  const Sharding *cur = start;
  for (int i = 0; i < n; i++) {
    Shape local = shard_local_shape(p, gshape, cur);
    in[i] = dtype_size(dt) * shape_elems(&local);
    cur = &steps[i].after;
  }
}

int64_t shard_plan_bytes(const Program *p, const Shape *gshape, DType dt, const Sharding *start,
                         const ShardStep *steps, int n) {
  int64_t in[SHARD_MAX_STEPS], total = 0;
  plan_inputs(p, gshape, dt, start, steps, n, in);
  for (int i = 0; i < n; i++)
    total += shard_step_bytes(steps[i].op, in[i], shard_group_size(p, steps[i].group, steps[i].ngroup));
  return total;
}

int64_t shard_reshard_bytes(const Program *p, const Shape *gshape, DType dt, const Sharding *from, const Sharding *to) {
  ShardStep steps[SHARD_MAX_STEPS];
  int n = shard_plan(p, gshape, from, to, steps);
  return shard_plan_bytes(p, gshape, dt, from, steps, n);
}

int64_t shard_collective_bytes(const Program *spmd, const Value *v) {
  if (!(ir_op(v->op)->flags & OF_SPMD) || v->nargs != 1)
    die("%%%d (%s) is not a collective or local slice", v->id, op_name(v->op));
  const Value *a = v->args[0];
  int64_t n = shard_group_size(spmd, v->group, v->ngroup), es = dtype_size(a->dtype);
  if (v->op == OP_ALL_GATHER && n > 1 && v->shape.d[v->axis] < n * a->shape.d[v->axis]) {
    /* uneven tiles along the leading dim move their real elements alone
     * (runtime/collectives.c): the device holding the fewest receives
     * the most, total - its own */
    int64_t outer = 1, inner = 1, total = v->shape.d[v->axis];
    for (int i = 0; i < a->shape.rank; i++)
      *(i < v->axis ? &outer : &inner) *= i == v->axis ? 1 : a->shape.d[i];
    if (outer == 1)
      return es * inner * (total - shard_last_real(total, n));
  }
  return shard_step_bytes(v->op, es * shape_elems(&a->shape), n);
}

double shard_step_seconds(const Program *p, const Machine *m, Op op, int64_t in, const uint8_t *group, int ngroup) {
  int64_t n = shard_group_size(p, group, ngroup);
  if (op == OP_LOCAL_SLICE || n <= 1)
    return 0;
  double bw = 0;
  for (int i = 0; i < ngroup; i++)
    if (p->mesh.size[group[i]] > 1 && (bw == 0 || machine_link(m, group[i]) < bw))
      bw = machine_link(m, group[i]);
  return m->latency_s + (double)shard_step_bytes(op, in, n) / bw;
}

double shard_reshard_seconds(const Program *p, const Machine *m, const Shape *gshape, DType dt, const Sharding *from,
                             const Sharding *to) {
  ShardStep steps[SHARD_MAX_STEPS];
  int64_t in[SHARD_MAX_STEPS];
  int n = shard_plan(p, gshape, from, to, steps);
  plan_inputs(p, gshape, dt, from, steps, n, in);
  double t = 0;
  for (int i = 0; i < n; i++)
    t += shard_step_seconds(p, m, steps[i].op, in[i], steps[i].group, steps[i].ngroup);
  return t;
}

double shard_value_seconds(const Program *s, const Machine *m, const Value *v, bool *comm) {
  *comm = (ir_op(v->op)->flags & OF_SPMD) && v->op != OP_PAD_MASK;
  if (*comm)
    return shard_step_seconds(s, m, v->op, dtype_size(v->args[0]->dtype) * shape_elems(&v->args[0]->shape), v->group,
                              v->ngroup);
  const Shape *args[GSL_MAX_RANK * 4];
  for (int k = 0; k < v->nargs && k < (int)(sizeof args / sizeof *args); k++)
    args[k] = &v->args[k]->shape;
  return machine_op_seconds(m, s, v, &v->shape, args);
}

void shard_estimate(const Program *s, const Machine *m, double *compute, double *comm) {
  *compute = *comm = 0;
  for (int i = 0; i < s->nvalues; i++) {
    bool c;
    double t = shard_value_seconds(s, m, s->values[i], &c);
    *(c ? comm : compute) += t;
  }
}
