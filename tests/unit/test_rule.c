/* test_rule.c — rule.c: each op's sharding rule, and its readings
 * (forward, an operand's, the partitioner's layout).
 *
 * Values are made by hand (an op, a shape, operands), not through the
 * builder: a rule reads only those. Every expected factor, map and cut is
 * worked out in the comment beside it from rule.c's header. The mesh is
 * [a = 2, b = 4]. */
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "gslc.h"
#include "tests.h"

enum { A = 0, B = 1 }; /* mesh axes */

static Program *mesh_a2b4(void) {
  Program *p = ir_new("t.gsl");
  p->mesh.naxes = 2;
  p->mesh.name[0] = "a", p->mesh.size[0] = 2;
  p->mesh.name[1] = "b", p->mesh.size[1] = 4;
  return p;
}

/* a value of op with the given dims (rank of them) and operands */
static Value *val(Program *p, Op op, int nargs, Value **args, int rank, ...) {
  Value *v = arena_alloc(p->arena, sizeof *v);
  v->op = op;
  v->dtype = DT_F32;
  v->shape.rank = rank;
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++)
    v->shape.d[i] = va_arg(ap, int);
  va_end(ap);
  v->nargs = nargs;
  v->args = arena_alloc(p->arena, sizeof(Value *) * (size_t)(nargs + 1));
  for (int k = 0; k < nargs; k++)
    v->args[k] = args[k];
  return v;
}

/* sh with its dims cut as given: one int per dim, -1 whole, else an axis */
static Sharding cuts(int rank, ...) {
  Sharding sh = {0};
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) {
    int ax = va_arg(ap, int);
    if (ax >= 0)
      sh.naxes[i] = 1, sh.axes[i][0] = (uint8_t)ax;
  }
  va_end(ap);
  return sh;
}

/* the operands' shardings for the readings; NULL: undecided */
typedef struct Given {
  const Sharding *sh[4];
} Given;

static const Sharding *given(void *ctx, const Value *v, int k) {
  (void)v;
  return ((const Given *)ctx)->sh[k];
}

static void map_is(const int8_t *map, int rank, ...) {
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++)
    CU_ASSERT_EQUAL(map[i], va_arg(ap, int));
  va_end(ap);
}

/* einsum bsm,mh->bsh of x[8, 16, 32] and w[32, 64]: factors in order of
 * first appearance b, s, m, h; m summed; neither operand linear */
static void test_einsum(void) {
  Program *p = mesh_a2b4();
  Value *x = val(p, OP_INPUT, 0, NULL, 3, 8, 16, 32), *w = val(p, OP_PARAM, 0, NULL, 2, 32, 64);
  Value *v = val(p, OP_EINSUM, 2, (Value *[]){x, w}, 3, 8, 16, 64);
  char err[128];
  CU_ASSERT_TRUE_FATAL(ein_parse("bsm,mh->bsh", 2, &v->ein, err, sizeof err));
  ShardRule r;
  shard_rule(v, &r);
  CU_ASSERT_EQUAL(r.nf, 4);
  CU_ASSERT_EQUAL(r.kind[0], FK_PASS);
  CU_ASSERT_EQUAL(r.kind[2], FK_SUM);
  CU_ASSERT_EQUAL(r.size[3], 64);
  map_is(r.res, 3, 0, 1, 3);
  map_is(rule_map(&r, 0), 3, 0, 1, 2);
  map_is(rule_map(&r, 1), 2, 2, 3);
  CU_ASSERT_FALSE(rule_linear(&r, 0));
  CU_ASSERT_TRUE(r.contraction);
  CU_ASSERT_FALSE(rule_alike(&r, v));

  /* forward: x [a, _, _], w [_, b] -> b from x, h from w: [a, _, b], led by x */
  Sharding xs = cuts(3, A, -1, -1), ws = cuts(2, -1, B), out;
  const Value *from = NULL;
  Given g = {{&xs, &ws}};
  CU_ASSERT_TRUE(rule_forward(p, v, &r, given, &g, &out, &from));
  Sharding want = cuts(3, A, -1, B);
  CU_ASSERT_TRUE(shard_eq(&out, &want, 3));
  CU_ASSERT_PTR_EQUAL(from, x);
  /* x [a, _, b] (m cut by b), w [b, _]: b from x; h: w does not cut it */
  xs = cuts(3, A, -1, B), ws = cuts(2, B, -1);
  CU_ASSERT_TRUE(rule_forward(p, v, &r, given, &g, &out, &from));
  want = cuts(3, A, -1, -1);
  CU_ASSERT_TRUE(shard_eq(&out, &want, 3));
  /* only w decided: it leads */
  g.sh[0] = NULL;
  ws = cuts(2, -1, B);
  CU_ASSERT_TRUE(rule_forward(p, v, &r, given, &g, &out, &from));
  want = cuts(3, -1, -1, B);
  CU_ASSERT_TRUE(shard_eq(&out, &want, 3));
  CU_ASSERT_PTR_EQUAL(from, w);

  /* w from the result [a, _, b] and x: h from the result (axis b, now
   * taken); m from x, [_, _, b]: b is taken, so m stays whole */
  Sharding res = cuts(3, A, -1, B);
  xs = cuts(3, -1, -1, B);
  g.sh[0] = &xs;
  out = rule_operand(p, v, &r, 1, &res, given, &g, false);
  want = cuts(2, -1, B);
  CU_ASSERT_TRUE(shard_eq(&out, &want, 2));
  /* x [_, _, a]: m takes a, w [a, b] */
  xs = cuts(3, -1, -1, A);
  res = cuts(3, -1, -1, B);
  out = rule_operand(p, v, &r, 1, &res, given, &g, false);
  want = cuts(2, A, B);
  CU_ASSERT_TRUE(shard_eq(&out, &want, 2));
  /* with no sibling, the summed letter stays whole */
  out = rule_operand(p, v, &r, 1, &res, NULL, NULL, false);
  want = cuts(2, -1, B);
  CU_ASSERT_TRUE(shard_eq(&out, &want, 2));

  /* the partitioner's two layouts for result [b, _, _] and x [_, _, b]:
   * the result's first gives letter b axis b and leaves m whole; the
   * summed first gives m axis b (a partial sum over b) and b whole */
  res = cuts(3, B, -1, -1);
  xs = cuts(3, -1, -1, B);
  ws = cuts(2, -1, -1);
  g.sh[1] = &ws;
  Cuts c1 = rule_layout(&r, v, &res, given, &g, false), c2 = rule_layout(&r, v, &res, given, &g, true);
  CU_ASSERT_EQUAL(c1.naxes[0], 1);
  CU_ASSERT_EQUAL(c1.axes[0][0], B);
  CU_ASSERT_EQUAL(c1.naxes[2], 0);
  CU_ASSERT_EQUAL(rule_cut_axes(&r, &c1, FK_SUM), 0);
  CU_ASSERT_EQUAL(c2.naxes[0], 0);
  CU_ASSERT_EQUAL(rule_cut_axes(&r, &c2, FK_SUM), 1u << B);
  out = rule_apply(&r, rule_map(&r, 1), 2, &c2); /* w laid out [b, _] */
  want = cuts(2, B, -1);
  CU_ASSERT_TRUE(shard_eq(&out, &want, 2));
  ir_free(p);
}

/* gather of table[100, 32] at idx[8, 16] -> [8, 16, 32]: the result's
 * dims pass, the table's rows (100) whole; the indices lead */
static void test_gather(void) {
  Program *p = mesh_a2b4();
  Value *t = val(p, OP_PARAM, 0, NULL, 2, 100, 32), *ix = val(p, OP_INPUT, 0, NULL, 2, 8, 16);
  ix->dtype = DT_I32;
  Value *v = val(p, OP_GATHER, 2, (Value *[]){t, ix}, 3, 8, 16, 32);
  ShardRule r;
  shard_rule(v, &r);
  CU_ASSERT_EQUAL(r.nf, 4);
  CU_ASSERT_EQUAL(r.kind[3], FK_WHOLE);
  CU_ASSERT_EQUAL(r.size[3], 100);
  map_is(r.res, 3, 0, 1, 2);
  map_is(rule_map(&r, 0), 2, 3, 2);
  map_is(rule_map(&r, 1), 2, 0, 1);
  CU_ASSERT_EQUAL(rule_role(&r, 1), AR_INDEX);
  CU_ASSERT_EQUAL(r.order[0], 1);
  CU_ASSERT_EQUAL(r.fill[1], 0.0);
  /* forward: table [a, b] (its rows' cut is not carried), idx [a, _] ->
   * [a, _, b], led by the indices */
  Sharding ts = cuts(2, A, B), is = cuts(2, A, -1), out;
  const Value *from;
  Given g = {{&ts, &is}};
  CU_ASSERT_TRUE(rule_forward(p, v, &r, given, &g, &out, &from));
  Sharding want = cuts(3, A, -1, B);
  CU_ASSERT_TRUE(shard_eq(&out, &want, 3));
  CU_ASSERT_PTR_EQUAL(from, ix);
  /* backward from [b, a, _]: the table whole, the indices [b, a] */
  Sharding res = cuts(3, B, A, -1);
  out = rule_operand(p, v, &r, 0, &res, given, &g, false);
  want = cuts(2, -1, -1);
  CU_ASSERT_TRUE(shard_eq(&out, &want, 2));
  out = rule_operand(p, v, &r, 1, &res, given, &g, false);
  want = cuts(2, B, A);
  CU_ASSERT_TRUE(shard_eq(&out, &want, 2));
  ir_free(p);
}

/* dispatch of x[4, 16, 32] by expert, slot [4, 16, 2] into [8, 4, 5, 32]:
 * G (4) and M (32) pass; S, K, E, C whole; the routes are indices whose
 * padding routes nowhere (slot -1); combine back, its routes leading */
static void test_routing(void) {
  Program *p = mesh_a2b4();
  Value *x = val(p, OP_INPUT, 0, NULL, 3, 4, 16, 32), *ex = val(p, OP_INPUT, 0, NULL, 3, 4, 16, 2),
        *sl = val(p, OP_INPUT, 0, NULL, 3, 4, 16, 2), *wt = val(p, OP_INPUT, 0, NULL, 3, 4, 16, 2);
  Value *d = val(p, OP_DISPATCH, 3, (Value *[]){x, ex, sl}, 4, 8, 4, 5, 32);
  ShardRule r;
  shard_rule(d, &r);
  CU_ASSERT_EQUAL(r.nf, 6);
  CU_ASSERT_TRUE(r.route);
  CU_ASSERT_EQUAL(r.kind[0], FK_PASS);
  CU_ASSERT_EQUAL(r.kind[1], FK_PASS);
  for (int f = 2; f < 6; f++)
    CU_ASSERT_EQUAL(r.kind[f], FK_WHOLE);
  CU_ASSERT_EQUAL(r.size[0], 4);
  CU_ASSERT_EQUAL(r.size[1], 32);
  CU_ASSERT_EQUAL(r.res[1], 0);
  CU_ASSERT_EQUAL(r.res[3], 1);
  map_is(rule_map(&r, 0), 3, 0, 2, 1);
  CU_ASSERT_EQUAL(rule_map(&r, 2)[0], 0);
  CU_ASSERT_EQUAL(rule_role(&r, 2), AR_INDEX);
  CU_ASSERT_EQUAL(r.fill[2], -1.0);
  CU_ASSERT_EQUAL(r.fill[1], 0.0);
  /* forward: x [a, _, b] -> [_, a, _, b]; backward to the routes: [a, _, _] */
  Sharding xs = cuts(3, A, -1, B), out;
  const Value *from;
  Given g = {{&xs}};
  CU_ASSERT_TRUE(rule_forward(p, d, &r, given, &g, &out, &from));
  Sharding want = cuts(4, -1, A, -1, B);
  CU_ASSERT_TRUE(shard_eq(&out, &want, 4));
  out = rule_operand(p, d, &r, 1, &want, given, &g, false);
  Sharding rw = cuts(3, A, -1, -1);
  CU_ASSERT_TRUE(shard_eq(&out, &rw, 3));

  /* combine of y [_, a, _, b] with routes [b, _, _]: the groups follow the
   * routes (b); the model dim's b is then taken: [b, _, _] */
  Value *c = val(p, OP_COMBINE, 4, (Value *[]){d, ex, sl, wt}, 3, 4, 16, 32);
  shard_rule(c, &r);
  CU_ASSERT_EQUAL(r.order[0], 1);
  CU_ASSERT_EQUAL(r.kind[r.res[1]], FK_WHOLE); /* the tokens S */
  Sharding ys = cuts(4, -1, A, -1, B), es = cuts(3, B, -1, -1);
  Given h = {{&ys, &es}};
  CU_ASSERT_TRUE(rule_forward(p, c, &r, given, &h, &out, &from));
  want = cuts(3, B, -1, -1);
  CU_ASSERT_TRUE(shard_eq(&out, &want, 3));
  CU_ASSERT_PTR_EQUAL(from, ex);
  ir_free(p);
}

/* reduce and the elementwise ops: kinds of the reduced dims, linearity,
 * and the cheapest of operands indexed alike */
static void test_reduce_elementwise(void) {
  Program *p = mesh_a2b4();
  Value *x = val(p, OP_INPUT, 0, NULL, 2, 8, 16), *y = val(p, OP_INPUT, 0, NULL, 2, 8, 16);
  Value *s = val(p, OP_REDUCE, 1, &x, 1, 8);
  s->fn = RF_SUM, s->rmask = 2;
  ShardRule r;
  shard_rule(s, &r);
  CU_ASSERT_EQUAL(r.kind[1], FK_SUM);
  map_is(r.res, 1, 0);
  CU_ASSERT_TRUE(rule_linear(&r, 0));
  s->fn = RF_MAX;
  shard_rule(s, &r);
  CU_ASSERT_EQUAL(r.kind[1], FK_MAX);
  CU_ASSERT_FALSE(rule_linear(&r, 0));
  s->fn = RF_ARGMAX; /* its index is global: the dim stays whole */
  shard_rule(s, &r);
  CU_ASSERT_EQUAL(r.kind[1], FK_WHOLE);

  Value *m = val(p, OP_BINARY, 2, (Value *[]){x, y}, 2, 8, 16);
  m->fn = BF_MUL;
  shard_rule(m, &r);
  CU_ASSERT_TRUE(rule_alike(&r, m));
  CU_ASSERT_TRUE(rule_linear(&r, 0) && rule_linear(&r, 1));
  CU_ASSERT_FALSE(r.joint);
  m->fn = BF_DIV;
  shard_rule(m, &r);
  CU_ASSERT_TRUE(rule_linear(&r, 0));
  CU_ASSERT_FALSE(rule_linear(&r, 1));
  m->fn = BF_ADD;
  shard_rule(m, &r);
  CU_ASSERT_TRUE(r.joint);
  /* x [a, _] against y [_, b], 8 x 16 f32: following x, y moves
   * all-gather over b of its [8, 4] tile, 128 bytes times 3 = 384; following
   * y, x moves all-gather over a of its [4, 16] tile, 256 bytes times 1 =
   * 256. y is cheaper to follow. */
  Sharding xs = cuts(2, A, -1), ys = cuts(2, -1, B), out;
  const Value *from;
  Given g = {{&xs, &ys}};
  CU_ASSERT_TRUE(rule_forward(p, m, &r, given, &g, &out, &from));
  CU_ASSERT_TRUE(shard_eq(&out, &ys, 2));
  CU_ASSERT_PTR_EQUAL(from, y);
  ir_free(p);
}

/* The partial sums, on a program [a = 2, b = 4] built by ir_add:
 *   x[8, 16] {[_, a]}, w[16, 4] {[a, _]}
 *   e1, e2 = einsum ij,jk->ik x, w   [8, 4] whole: j cut by a, a partial sum over a
 *   c = concat e1, e2 along 0       [16, 4] whole: linear in both, each its one use
 *   y = annotate c {[_, _]}         the sum reaches the annotation, resolved there
 * and the readings of the single ops: which dims are summed, what passes. */
static void test_partials(void) {
  Program *p = mesh_a2b4();
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  Value *x = ir_add(&bd, OP_INPUT, DT_F32, (Shape){2, {8, 16}}, (Span){0}, 0, NULL);
  Value *w = ir_add(&bd, OP_PARAM, DT_F32, (Shape){2, {16, 4}}, (Span){0}, 0, NULL);
  x->sh = cuts(2, -1, A), w->sh = cuts(2, A, -1);
  Value *e[2];
  char err[128];
  for (int i = 0; i < 2; i++) {
    e[i] = ir_add(&bd, OP_EINSUM, DT_F32, (Shape){2, {8, 4}}, (Span){0}, 2, (Value *[]){x, w});
    CU_ASSERT_TRUE_FATAL(ein_parse("ij,jk->ik", 2, &e[i]->ein, err, sizeof err));
  }
  Value *c = ir_add(&bd, OP_CONCAT, DT_F32, (Shape){2, {16, 4}}, (Span){0}, 2, e);
  c->axis = 0;
  Value *y = ir_add(&bd, OP_ANNOTATE, DT_F32, c->shape, (Span){0}, 1, &c);

  ShardRule r;
  shard_rule(e[0], &r); /* j: dim 1 of x, dim 0 of w */
  CU_ASSERT_EQUAL(rule_summed_dims(&r, e[0], 0), 2u);
  CU_ASSERT_EQUAL(rule_summed_dims(&r, e[0], 1), 1u);
  shard_rule(y, &r);
  CU_ASSERT_TRUE(rule_linear(&r, 0));

  RulePartials pp = rule_partials(p);
  CU_ASSERT_EQUAL(pp.made[e[0]->id], 1u << A);
  CU_ASSERT_EQUAL(pp.left[e[0]->id], 1u << A);
  CU_ASSERT_EQUAL(pp.made[c->id], 1u << A); /* both pending alike: it passes */
  CU_ASSERT_EQUAL(pp.left[c->id], 1u << A);
  CU_ASSERT_EQUAL(pp.made[y->id], 1u << A);
  CU_ASSERT_EQUAL(pp.left[y->id], 0u); /* an annotation leaves nothing pending */
  /* c cut along its axis over a: its operands summed whole first; cut
   * along dim 1, each is resolved into its own cut */
  Sharding rows = cuts(2, A, -1), cols = cuts(2, -1, A);
  CU_ASSERT_EQUAL(rule_resolved_whole(p, c, &rows, &pp), 1u << A);
  CU_ASSERT_EQUAL(rule_resolved_whole(p, c, &cols, &pp), 0u);
  rule_partials_free(&pp);

  /* a second use of e1: its sum is resolved where it is made, so c has
   * only e2's pending and a sum of them passes none */
  Value *u = ir_add(&bd, OP_UNARY, DT_F32, e[0]->shape, (Span){0}, 1, &e[0]);
  u->fn = UF_NEG;
  pp = rule_partials(p);
  CU_ASSERT_EQUAL(pp.left[e[0]->id], 0u);
  CU_ASSERT_EQUAL(pp.made[c->id], 0u);
  rule_partials_free(&pp);

  /* a product passes one operand's sum where the other holds none */
  Value *m = ir_add(&bd, OP_BINARY, DT_F32, (Shape){2, {8, 4}}, (Span){0}, 2, (Value *[]){e[1], u});
  m->fn = BF_MUL;
  shard_rule(m, &r);
  int from;
  CU_ASSERT_EQUAL(rule_pass_partial(&r, 2, (uint32_t[]){1u << B, 0}, (uint32_t[]){1u << B, 0}, 0, &from), 1u << B);
  CU_ASSERT_EQUAL(from, 0);
  CU_ASSERT_EQUAL(rule_pass_partial(&r, 2, (uint32_t[]){1u << B, 0}, (uint32_t[]){1u << B, 1u << A}, 0, &from), 0u);
  m->fn = BF_ADD; /* a sum passes what all its operands have pending alike */
  shard_rule(m, &r);
  CU_ASSERT_EQUAL(rule_pass_partial(&r, 2, (uint32_t[]){1u << B, 1u << B}, (uint32_t[]){1u << B, 1u << B}, 0, &from),
                  1u << B);
  CU_ASSERT_EQUAL(from, -1);
  CU_ASSERT_EQUAL(rule_pass_partial(&r, 2, (uint32_t[]){1u << B, 0}, (uint32_t[]){1u << B, 0}, 0, &from), 0u);
  ir_free(p);
}

void add_rule_tests(void) {
  CU_pSuite s = tests_suite("rule");
  tests_add(s, "an einsum's rule and its readings", test_einsum);
  tests_add(s, "a gather's rule", test_gather);
  tests_add(s, "the routing ops' rules", test_routing);
  tests_add(s, "reduce and elementwise rules", test_reduce_elementwise);
  tests_add(s, "the partial sums: summed dims, what passes, each value's", test_partials);
}
