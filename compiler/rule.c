/* rule.c — each op's sharding rule, and the readings of it that
 * propagation, the partitioner, --auto-shard, the sharded updates and
 * --same-bits share.
 *
 * A rule (Shardy's OpShardingRule, GSPMD's hlo_sharding_util) names the
 * factors of one value's computation: the independent index ranges its
 * loops run over. Each dimension of its result and of each operand is
 * indexed by one factor, or by none (a broadcast's new dimension in its
 * operand, a reshape's dimensions). A factor is of one kind:
 *   pass   in the result: a cut of it carries from an operand to the
 *          result and back (an elementwise op's dims, an einsum's batch
 *          and free letters, a gather's index and row dims);
 *   sum    summed over, absent from the result: cut, it leaves the result
 *          a partial sum (an einsum's contracted letters, a reduce-sum's
 *          dims, a scatter-add's index dims);
 *   max    maxed over: cut, the local maxima are all-reduced;
 *   whole  must stay whole on every device: slice, concat and cumsum
 *          axes, one_hot's classes, argmax's dims, a gather's table rows
 *          and a scatter-add's result rows, the moe routing ops' experts,
 *          slots, tokens and choices.
 * An operand is data, an index (gather's and scatter-add's indices, the
 * routes: they take only the result's cuts, and their padding is filled
 * so that it reads or routes nowhere), or auxiliary (an einsum's fill
 * counts: laid out as their letters are, never propagated). A rule also
 * says which operands a pending partial sum passes through (linear), and
 * whether the op is linear in all of them at once (a sum of them: the
 * pending sums must agree) or in each alone (a product: the others must
 * be whole); and the order in which operands lead (a gather's and a
 * combine's follow their indices first).
 *
 * Each op's rule is one function below, named in its ops.def row. The
 * one op whose mapping is no factor table is reshape, whose cuts carry by
 * sharding.c's groups of dimensions (shard_reshape); the moe routing ops
 * are marked so that the partitioner weighs their two layouts, and so is
 * an einsum (whose operands' cuts of a contracted letter may be cheaper
 * to keep than its result's cuts).
 *
 * The readings, all over Cuts (the mesh axes of each factor):
 *   rule_forward   a result's sharding from its operands' (propagation
 *                  forward; --auto-shard's followers);
 *   rule_operand   an operand's sharding from the result's and, for its
 *                  summed factors, its siblings' (propagation backward;
 *                  what a follower needs of its operand);
 *   rule_layout    the cuts an op runs on, from its result's sharding and
 *                  its operands' (the partitioner), and rule_apply, a
 *                  dimension map's sharding under cuts (the partitioner's
 *                  operands and local result). --auto-shard reads the
 *                  rule's factors as a root's letters, its maps for what
 *                  the root needs of each operand, and rule_forward and
 *                  rule_operand for its followers.
 * And the partial sums, the one statement of them every pass reads:
 *   rule_summed_dims   an operand's dims that a summed factor indexes
 *                      (--same-bits blocks a sum over them);
 *   rule_pass_partial  which operands' pending sums pass through an op
 *                      (the partitioner, and rule_partials);
 *   rule_linear_uses   the values whose one use lets a sum stay pending;
 *   rule_partials      per value, the axes over which it comes out a
 *                      pending partial sum as the partitioner builds it,
 *                      and rule_resolved_whole, those a sharding would
 *                      make its operands resolve whole (the sharded
 *                      updates ask both of a gradient, update.c). */
#include <stdlib.h>
#include <string.h>

#include "gslc.h"

/* ---- the rules ------------------------------------------------------------------- */

static void init(ShardRule *r, int nmaps) {
  memset(r, 0, sizeof *r);
  memset(r->res, -1, sizeof r->res);
  memset(r->arg, -1, sizeof r->arg);
  r->nmaps = nmaps;
  for (int k = 0; k < RULE_MAX_ARGS; k++)
    r->order[k] = (uint8_t)k;
}

static int factor(ShardRule *r, int64_t size, FactorKind kind) {
  if (r->nf >= RULE_MAX_FACTORS)
    die("a sharding rule with more than %d factors", RULE_MAX_FACTORS);
  r->size[r->nf] = size;
  r->kind[r->nf] = (uint8_t)kind;
  return r->nf++;
}

/* the result's dims, one pass factor each, in order */
static void result_factors(ShardRule *r, const Value *v) {
  for (int i = 0; i < v->shape.rank; i++)
    r->res[i] = (int8_t)factor(r, v->shape.d[i], FK_PASS);
}

/* sources and the SPMD program's own ops: no operand to relate */
static void r_none(const Value *v, ShardRule *r) {
  init(r, 0);
  result_factors(r, v);
}

/* every operand indexed as the result (unary, binary, select, cast, and
 * the user's annotation); negation, sums and differences are linear in
 * all operands at once, a product in each, a quotient in its dividend;
 * an annotation is the identity: a partial sum pending in its operand
 * reaches it and is resolved into the annotated layout (a reduce-scatter
 * where that cuts the sum's axes, not an all-reduce and a slice) */
static void r_elementwise(const Value *v, ShardRule *r) {
  init(r, v->nargs);
  result_factors(r, v);
  for (int k = 0; k < v->nargs; k++)
    memcpy(r->arg[k], r->res, sizeof r->res);
  if (v->op == OP_ANNOTATE) {
    r->linear = 1, r->joint = true;
  } else if (v->op == OP_UNARY && v->fn == UF_NEG) {
    r->linear = 1, r->joint = true;
  } else if (v->op == OP_BINARY) {
    if (v->fn == BF_ADD || v->fn == BF_SUB)
      r->linear = 3, r->joint = true;
    else if (v->fn == BF_MUL)
      r->linear = 3;
    else if (v->fn == BF_DIV)
      r->linear = 1;
  }
}

/* result dim i is operand dim perm[i], or (a broadcast) a new or
 * stretched dim its operand does not index */
static void r_transpose(const Value *v, ShardRule *r) {
  const Value *a = v->args[0];
  init(r, 1);
  result_factors(r, v);
  for (int i = 0; i < v->shape.rank; i++)
    if (v->perm[i] >= 0 && a->shape.d[v->perm[i]] == v->shape.d[i])
      r->arg[0][v->perm[i]] = r->res[i];
  if (v->op == OP_TRANSPOSE) /* a broadcast is linear too, but resolving after it moves more bytes */
    r->linear = 1, r->joint = true;
}

static void r_reshape(const Value *v, ShardRule *r) {
  init(r, 1);
  result_factors(r, v); /* its operand's dims: by shard_reshape */
  r->reshape = true;
  r->linear = 1, r->joint = true;
}

/* the operands indexed as the result, one dim whole: slice, cumsum and
 * concat along their axis, one_hot along its classes (its operand lacks
 * that dim); a concat is linear in all its operands at once */
static void r_whole_axis(const Value *v, ShardRule *r) {
  init(r, v->op == OP_CONCAT ? 1 : v->nargs);
  result_factors(r, v);
  int axis = v->op == OP_ONE_HOT ? v->shape.rank - 1 : v->axis;
  r->kind[r->res[axis]] = FK_WHOLE;
  memcpy(r->arg[0], r->res, sizeof r->res);
  if (v->op == OP_ONE_HOT)
    r->arg[0][axis] = -1;
  if (v->op == OP_CONCAT)
    r->variadic = true, r->linear = 1, r->joint = true;
}

/* the operand's dims in order, the reduced ones summed, maxed, or (an
 * argmax, whose index is global) whole */
static void r_reduce(const Value *v, ShardRule *r) {
  const Value *a = v->args[0];
  FactorKind kind = v->fn == RF_SUM ? FK_SUM : v->fn == RF_MAX ? FK_MAX : FK_WHOLE;
  init(r, 1);
  for (int i = 0, k = 0; i < a->shape.rank; i++) {
    bool reduced = v->rmask & (1u << i);
    r->arg[0][i] = (int8_t)factor(r, a->shape.d[i], reduced ? kind : FK_PASS);
    if (!reduced)
      r->res[k++] = r->arg[0][i];
  }
  if (v->fn == RF_SUM)
    r->linear = 1, r->joint = true;
}

/* one factor a letter, in the order the letters first appear in the
 * operands; the letters the result lacks summed; the fill counts
 * (auxiliary) indexed by their letters */
static void r_einsum(const Value *v, ShardRule *r) {
  const EinsumSpec *e = &v->ein;
  char names[RULE_MAX_FACTORS + 1] = {0};
  init(r, v->nargs);
  for (int k = 0; k < e->nin; k++)
    for (int i = 0; e->in[k][i]; i++) {
      const char *q = strchr(names, e->in[k][i]);
      int f = q ? (int)(q - names) : -1;
      if (f < 0) {
        f = factor(r, v->args[k]->shape.d[i], strchr(e->out, e->in[k][i]) ? FK_PASS : FK_SUM);
        names[f] = e->in[k][i];
      }
      r->arg[k][i] = (int8_t)f;
    }
  for (int i = 0; e->out[i]; i++)
    r->res[i] = (int8_t)(strchr(names, e->out[i]) - names);
  r->contraction = true;
  if (e->fill[0]) {
    for (int i = 0; e->fill[i]; i++)
      r->arg[e->nin][i] = (int8_t)(strchr(names, e->fill[i]) - names);
    r->role[e->nin] = AR_AUX;
  }
}

/* table[V, D...], idx[I...] -> [I..., D...]: the indices lead; the
 * table's rows whole (an index is global); padded indices read row 0 */
static void r_gather(const Value *v, ShardRule *r) {
  const Value *t = v->args[0], *ix = v->args[1];
  init(r, 2);
  result_factors(r, v);
  r->arg[0][0] = (int8_t)factor(r, t->shape.d[0], FK_WHOLE);
  for (int i = 1; i < t->shape.rank; i++)
    r->arg[0][i] = r->res[ix->shape.rank + i - 1];
  for (int i = 0; i < ix->shape.rank; i++)
    r->arg[1][i] = r->res[i];
  r->role[1] = AR_INDEX;
  r->order[0] = 1, r->order[1] = 0;
}

/* src[I..., D...], idx[I...] -> [V, D...]: rows added at their index, so
 * the index dims are summed over and the result's rows whole; padded
 * indices add zeros to row 0 */
static void r_scatter_add(const Value *v, ShardRule *r) {
  const Value *src = v->args[0], *ix = v->args[1];
  init(r, 2);
  for (int i = 0; i < src->shape.rank; i++)
    r->arg[0][i] = (int8_t)factor(r, src->shape.d[i], i < ix->shape.rank ? FK_SUM : FK_PASS);
  for (int i = 0; i < ix->shape.rank; i++)
    r->arg[1][i] = r->arg[0][i];
  r->res[0] = (int8_t)factor(r, v->shape.d[0], FK_WHOLE);
  for (int i = 1; i < v->shape.rank; i++)
    r->res[i] = r->arg[0][ix->shape.rank + i - 1];
  r->role[1] = AR_INDEX;
  r->order[0] = 1, r->order[1] = 0;
}

/* moe routing, between the tokens [G, S, M] and the experts' slots
 * [E, G, C, M]: the groups G and the model dim M pass; the tokens S, the
 * choices K, the experts E and the slots C stay whole (routing is local
 * to a group). The routes [G, S, K] (expert, slot, weight) are indices:
 * a padded token routes nowhere (expert 0, slot -1, weight 0). tokens and
 * slots are the two sides' shapes, tmap and smap their maps in r. */
static void routing(const Value *v, ShardRule *r, Shape tokens, Shape slots, int8_t *tmap, int8_t *smap) {
  const Value *ex = v->args[1];
  int g = factor(r, tokens.d[0], FK_PASS), m = factor(r, tokens.d[2], FK_PASS);
  int s = factor(r, tokens.d[1], FK_WHOLE), k = factor(r, ex->shape.d[2], FK_WHOLE);
  int e = factor(r, slots.d[0], FK_WHOLE), c = factor(r, slots.d[2], FK_WHOLE);
  int8_t t[3] = {(int8_t)g, (int8_t)s, (int8_t)m}, b[4] = {(int8_t)e, (int8_t)g, (int8_t)c, (int8_t)m};
  memcpy(tmap, t, sizeof t);
  memcpy(smap, b, sizeof b);
  for (int j = 1; j < v->nargs; j++) {
    r->arg[j][0] = (int8_t)g, r->arg[j][1] = (int8_t)s, r->arg[j][2] = (int8_t)k;
    r->role[j] = AR_INDEX;
    r->fill[j] = j == 2 ? -1 : 0;
  }
  r->route = true;
}

/* dispatch: x[G, S, M] (, routes) -> [E, G, C, M], x leading */
static void r_dispatch(const Value *v, ShardRule *r) {
  init(r, v->nargs);
  routing(v, r, v->args[0]->shape, v->shape, r->arg[0], r->res);
}

/* combine: y[E, G, C, M], routes -> [G, S, M]: the groups follow the routes first */
static void r_combine(const Value *v, ShardRule *r) {
  static const uint8_t order[4] = {1, 3, 2, 0};
  init(r, v->nargs);
  routing(v, r, v->shape, v->args[0]->shape, r->res, r->arg[0]);
  memcpy(r->order, order, sizeof order);
}

typedef void RuleFn(const Value *v, ShardRule *r);
static RuleFn *const rules[] = {
#define X(op, s, n, cls, lvl, fl, d, ds, sh) r_##sh,
#include "ops.def"
#undef X
};

void shard_rule(const Value *v, ShardRule *r) {
  if ((unsigned)v->op >= OP__COUNT)
    die("op %d is not in ops.def", (int)v->op);
  rules[v->op](v, r);
}

const int8_t *rule_map(const ShardRule *r, int k) {
  if (r->variadic)
    return r->arg[0];
  if (k >= r->nmaps)
    die("operand %d past a sharding rule's %d", k, r->nmaps);
  return r->arg[k];
}

ArgRole rule_role(const ShardRule *r, int k) { return r->variadic ? AR_DATA : (ArgRole)r->role[k]; }

bool rule_linear(const ShardRule *r, int k) { return r->variadic ? r->linear & 1 : k < 32 && (r->linear >> k & 1); }

/* the operand that leads i-th */
static int lead(const ShardRule *r, int i) { return r->variadic ? i : r->order[i]; }

bool rule_alike(const ShardRule *r, const Value *v) {
  if (r->reshape || v->nargs < 2)
    return false;
  for (int f = 0; f < r->nf; f++)
    if (r->kind[f] == FK_SUM || r->kind[f] == FK_MAX)
      return false;
  if (r->variadic)
    return true;
  for (int k = 1; k < v->nargs; k++)
    if (rule_role(r, k) == AR_AUX || memcmp(r->arg[k], r->arg[0], sizeof r->arg[0]))
      return false;
  return true;
}

uint32_t rule_kinds(const ShardRule *r) {
  uint32_t m = 0;
  for (int f = 0; f < r->nf; f++)
    m |= 1u << r->kind[f];
  return m;
}

/* ---- cuts ----------------------------------------------------------------------------- */

/* Factor f takes the axes dim d of sh has, unless it has axes already or
 * one of them is taken. */
static void take(Cuts *c, int f, const Sharding *sh, int d) {
  uint32_t m = shard_dim_axes(sh, d);
  if (f < 0 || c->naxes[f] || !m || (m & c->used))
    return;
  c->used |= m;
  c->naxes[f] = sh->naxes[d];
  memcpy(c->axes[f], sh->axes[d], sizeof c->axes[f]);
}

Sharding rule_apply(const ShardRule *r, const int8_t *map, int rank, const Cuts *c) {
  Sharding sh = {0};
  for (int i = 0; i < rank; i++) {
    int f = map[i];
    if (f < 0 || r->kind[f] == FK_WHOLE)
      continue;
    sh.naxes[i] = c->naxes[f];
    memcpy(sh.axes[i], c->axes[f], sizeof sh.axes[i]);
  }
  return sh;
}

uint32_t rule_cut_axes(const ShardRule *r, const Cuts *c, FactorKind kind) {
  uint32_t m = 0;
  for (int f = 0; f < r->nf; f++)
    if (r->kind[f] == kind)
      for (int j = 0; j < c->naxes[f]; j++)
        m |= 1u << c->axes[f][j];
  return m;
}

/* The factors of the kinds in `kinds` (bits 1 << FactorKind) from the
 * operands' shardings: each from the first operand, in the rule's order,
 * that cuts it with axes still free. get gives operand k's sharding, or
 * NULL (undecided); operand skip and auxiliary operands give none, nor
 * do index operands unless indices is set. */
static void from_operands(const ShardRule *r, const Value *v, uint32_t kinds, RuleArgFn *get, void *ctx, int skip,
                          bool indices, Cuts *c) {
  for (int i = 0; i < v->nargs; i++) {
    int k = lead(r, i);
    ArgRole role = rule_role(r, k);
    const Sharding *sh = k == skip || role == AR_AUX || (role == AR_INDEX && !indices) ? NULL : get(ctx, v, k);
    if (!sh)
      continue;
    const int8_t *map = rule_map(r, k);
    for (int d = 0; d < v->args[k]->shape.rank; d++)
      if (map[d] >= 0 && (kinds >> r->kind[map[d]] & 1))
        take(c, map[d], sh, d);
  }
}

/* The pass factors from the result's sharding sh (those operand `only`
 * indexes, unless only < 0). */
static void from_result(const ShardRule *r, const Value *v, const Sharding *sh, int only, Cuts *c) {
  for (int i = 0; i < v->shape.rank; i++) {
    int f = r->res[i];
    if (f < 0 || r->kind[f] != FK_PASS)
      continue;
    if (only >= 0) {
      const int8_t *map = rule_map(r, only);
      bool has = false;
      for (int d = 0; d < v->args[only]->shape.rank && !has; d++)
        has = map[d] == f;
      if (!has)
        continue;
    }
    take(c, f, sh, i);
  }
}

/* ---- the readings ------------------------------------------------------------------------ */

static int64_t split_product(const Program *p, const Value *x, const Sharding *sh) {
  int64_t n = 1;
  for (int i = 0; i < x->shape.rank; i++)
    n *= shard_shards(p, sh, i);
  return n;
}

/* Of operands indexed alike, the one whose sharding the other decided
 * operands reach with the fewest bytes moved (sharding.c's cost of
 * resharding), then the most cut, then the earliest. Operands with one
 * sharding and dtype are weighed once, times their number (a concat of
 * thousands). */
static int cheapest(const Program *p, const Value *v, RuleArgFn *get, void *ctx) {
  int n = v->nargs, ng = 0, cap = 8;
  int *first = xmalloc((size_t)cap * sizeof *first), *count = xmalloc((size_t)cap * sizeof *count);
  for (int k = 0; k < n; k++) {
    const Sharding *sh = get(ctx, v, k);
    if (!sh)
      continue;
    int g = 0;
    while (g < ng && !(v->args[first[g]]->dtype == v->args[k]->dtype && shard_eq(get(ctx, v, first[g]), sh, v->shape.rank)))
      g++;
    if (g == ng) {
      if (ng == cap) {
        cap *= 2;
        first = xrealloc(first, (size_t)cap * sizeof *first);
        count = xrealloc(count, (size_t)cap * sizeof *count);
      }
      first[ng] = k, count[ng++] = 0;
    }
    count[g]++;
  }
  int best = -1;
  int64_t best_cost = 0;
  for (int i = 0; i < ng; i++) {
    const Value *c = v->args[first[i]];
    const Sharding *csh = get(ctx, v, first[i]);
    int64_t cost = 0; /* bytes the other decided operands move to follow c */
    for (int j = 0; j < ng; j++)
      if (j != i)
        cost += count[j] * shard_reshard_bytes(p, &v->shape, v->args[first[j]]->dtype, get(ctx, v, first[j]), csh);
    if (best < 0 || cost < best_cost ||
        (cost == best_cost && split_product(p, c, csh) > split_product(p, v->args[best], get(ctx, v, best)))) {
      best = first[i];
      best_cost = cost;
    }
  }
  free(first);
  free(count);
  return best;
}

bool rule_forward(const Program *p, const Value *v, const ShardRule *r, RuleArgFn *get, void *ctx, Sharding *out,
                  const Value **from) {
  Cuts c = {0};
  *from = NULL;
  if (r->reshape) {
    const Sharding *sh = get(ctx, v, 0);
    if (sh)
      *out = shard_reshape(p, sh, &v->args[0]->shape, &v->shape), *from = v->args[0];
    return *from != NULL;
  }
  if (rule_alike(r, v)) {
    int k = cheapest(p, v, get, ctx);
    if (k < 0)
      return false;
    const Sharding *sh = get(ctx, v, k);
    const int8_t *map = rule_map(r, k);
    for (int d = 0; d < v->args[k]->shape.rank; d++)
      if (map[d] >= 0 && r->kind[map[d]] == FK_PASS)
        take(&c, map[d], sh, d);
    *from = v->args[k];
  } else {
    for (int i = 0; i < v->nargs && !*from; i++) { /* the first decided operand with a pass factor */
      int k = lead(r, i);
      const int8_t *map = rule_map(r, k);
      if (rule_role(r, k) == AR_AUX || !get(ctx, v, k))
        continue;
      for (int d = 0; d < v->args[k]->shape.rank && !*from; d++)
        if (map[d] >= 0 && r->kind[map[d]] == FK_PASS)
          *from = v->args[k];
    }
    from_operands(r, v, 1u << FK_PASS, get, ctx, -1, true, &c);
  }
  *out = rule_apply(r, r->res, v->shape.rank, &c);
  return *from != NULL;
}

Sharding rule_operand(const Program *p, const Value *v, const ShardRule *r, int k, const Sharding *res,
                      RuleArgFn *get, void *ctx, bool own) {
  const Value *a = v->args[k];
  if (r->reshape)
    return shard_reshape(p, res, &v->shape, &a->shape);
  Cuts c = {0};
  from_result(r, v, res, k, &c);
  if (get && rule_role(r, k) == AR_DATA)
    from_operands(r, v, 1u << FK_SUM | 1u << FK_MAX, get, ctx, own ? -1 : k, true, &c);
  return rule_apply(r, rule_map(r, k), a->shape.rank, &c);
}

Cuts rule_layout(const ShardRule *r, const Value *v, const Sharding *res, RuleArgFn *get, void *ctx,
                 bool summed_first) {
  Cuts c = {0};
  uint32_t summed = 1u << FK_SUM | 1u << FK_MAX;
  if (summed_first)
    from_operands(r, v, summed, get, ctx, -1, true, &c);
  from_result(r, v, res, -1, &c);
  if (!summed_first)
    from_operands(r, v, summed, get, ctx, -1, true, &c);
  return c;
}

/* ---- partial sums ------------------------------------------------------------------------ */

uint32_t rule_summed_dims(const ShardRule *r, const Value *v, int k) {
  const int8_t *map = rule_map(r, k);
  uint32_t m = 0;
  for (int d = 0; d < v->args[k]->shape.rank; d++)
    if (map[d] >= 0 && r->kind[map[d]] == FK_SUM)
      m |= 1u << d;
  return m;
}

uint32_t rule_pass_partial(const ShardRule *r, int n, const uint32_t *pend, const uint32_t *held, uint32_t summed,
                           int *from) {
  *from = -1;
  if (r->joint) {
    uint32_t keep = n ? pend[0] & ~summed : 0;
    for (int k = 1; k < n && keep; k++)
      if ((pend[k] & ~summed) != keep)
        keep = 0;
    return keep;
  }
  for (int k = 0; k < n; k++) {
    uint32_t pk = rule_linear(r, k) ? pend[k] : 0;
    bool others_whole = true;
    for (int j = 0; j < n && pk && others_whole; j++)
      others_whole = j == k || !held[j];
    if (pk && others_whole) {
      *from = k;
      return pk;
    }
  }
  return 0;
}

bool rule_reshape_tiles(const Program *p, const Value *v, const Sharding *sh, Sharding *want) {
  const Value *a = v->args[0];
  *want = shard_reshape(p, sh, &v->shape, &a->shape);
  Sharding back = shard_reshape(p, want, &a->shape, &v->shape);
  return shard_eq(&back, sh, v->shape.rank);
}

bool *rule_linear_uses(const Program *g) {
  IrUses uses = ir_uses(g);
  bool *lin = xcalloc((size_t)g->nvalues + 1, sizeof *lin);
  for (int i = 0; i < g->nvalues; i++)
    lin[i] = ir_uses_reads(&uses, i) == 1 && !uses.outputs[i]; /* one operand slot reads it, no output names it */
  for (int i = 0; i < g->nvalues; i++) {
    const Value *u = g->values[i];
    if (!u->nargs)
      continue;
    ShardRule r;
    shard_rule(u, &r);
    for (int k = 0; k < u->nargs; k++)
      lin[u->args[k]->id] &= rule_linear(&r, k);
  }
  ir_uses_free(&uses);
  return lin;
}

/* operand k's sharding as propagation left it */
static const Sharding *global_sharding(void *ctx, const Value *v, int k) {
  (void)ctx;
  return &v->args[k]->sh;
}

/* What v's op, were v sharded sh, does with partial sums, each operand
 * leaving left[its id] pending into it (RulePartials.left): returns the
 * mesh axes over which its result comes out a pending partial sum, less
 * those that cut sh (its summed factors' cuts, and the pending sums that
 * pass through it); *whole: the pending sums its operands resolve whole
 * (to a layout that does not cut them) over axes that cut sh, where
 * resolving into a cut was wanted. As the partitioner does: an
 * annotation resolves what reaches it into its layout; a reshape runs on
 * tiles where they carry sh, else whole. */
static uint32_t partial_at(const Program *g, const Value *v, const Sharding *sh, const uint32_t *left,
                           uint32_t *whole) {
  uint32_t cut = shard_all_axes(sh, v->shape.rank);
  *whole = 0;
  if (ir_op(v->op)->cls == OC_ANNOTATION)
    return left[v->args[0]->id] & ~cut;
  ShardRule r;
  shard_rule(v, &r);
  if (r.reshape) {
    Sharding want;
    uint32_t held = left[v->args[0]->id];
    if (rule_reshape_tiles(g, v, sh, &want))
      return held & ~shard_all_axes(&want, v->args[0]->shape.rank) & ~cut;
    *whole = held & cut;
    return 0;
  }
  if (r.route)
    return 0;
  Cuts c = rule_layout(&r, v, sh, global_sharding, NULL, false);
  uint32_t summed = rule_cut_axes(&r, &c, FK_SUM);
  int n = v->nargs, m = n <= 8 ? 8 : n;
  uint32_t buf[24] = {0}, *pend = n <= 8 ? buf : xmalloc(3 * (size_t)m * sizeof *pend);
  uint32_t *held = pend + m, *wcut = held + m; /* all operand k has pending; the axes its layout cuts */
  for (int k = 0; k < n; k++) {
    const Value *a = v->args[k];
    Sharding w = rule_apply(&r, rule_map(&r, k), a->shape.rank, &c);
    wcut[k] = shard_all_axes(&w, a->shape.rank);
    held[k] = left[a->id];
    pend[k] = held[k] & ~wcut[k] & ~cut;
  }
  int from;
  uint32_t passed = rule_pass_partial(&r, n, pend, held, summed, &from);
  for (int k = 0; k < n; k++) /* what does not pass is resolved at the operand, into its layout */
    *whole |= held[k] & ~(from < 0 || from == k ? passed : 0) & ~wcut[k] & cut;
  if (pend != buf)
    free(pend);
  return (summed | passed) & ~cut;
}

RulePartials rule_partials(const Program *g) {
  bool *lin = rule_linear_uses(g);
  size_t n = (size_t)g->nvalues + 1;
  RulePartials pp = {xcalloc(n, sizeof *pp.made), xcalloc(n, sizeof *pp.left)};
  for (int i = 0; i < g->nvalues; i++) {
    const Value *v = g->values[i];
    if (!v->nargs || (ir_op(v->op)->flags & OF_SPMD))
      continue;
    uint32_t whole;
    pp.made[i] = partial_at(g, v, &v->sh, pp.left, &whole);
    /* an annotation's result is never pending: what reached it is resolved into its layout */
    pp.left[i] = lin[i] && ir_op(v->op)->cls != OC_ANNOTATION ? pp.made[i] : 0;
  }
  free(lin);
  return pp;
}

void rule_partials_free(RulePartials *pp) {
  free(pp->made);
  free(pp->left);
  pp->made = pp->left = NULL;
}

uint32_t rule_resolved_whole(const Program *g, const Value *v, const Sharding *sh, const RulePartials *pp) {
  uint32_t whole = 0;
  if (v->nargs && !(ir_op(v->op)->flags & OF_SPMD))
    partial_at(g, v, sh, pp->left, &whole);
  return whole;
}
