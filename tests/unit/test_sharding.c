/* test_sharding.c — sharding.c: the algebra (equality, local shapes,
 * fitting, reshapes), the resharding planner and its byte costs.
 *
 * Every expected plan and byte count is worked out by hand in the comment
 * beside it, from the rules in sharding.c's header: b is a device's local
 * input bytes for the step (4 per element), n the devices in its group;
 * all-reduce 2 b (n-1)/n, all-gather b (n-1), reduce-scatter and
 * all-to-all b (n-1)/n, collective-permute b, local slice 0. */
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "gslc.h"
#include "tests.h"

/* a program with no values on the mesh of the given axes */
static Program *on_mesh(int naxes, const char **names, const int64_t *sizes) {
  Program *p = ir_new("t.gsl");
  p->mesh.naxes = naxes;
  for (int i = 0; i < naxes; i++) {
    p->mesh.name[i] = names[i];
    p->mesh.size[i] = sizes[i];
  }
  return p;
}

static Program *mesh_d4(void) { return on_mesh(1, (const char *[]){"d"}, (const int64_t[]){4}); }
static Program *mesh_a2b4(void) { return on_mesh(2, (const char *[]){"a", "b"}, (const int64_t[]){2, 4}); }

enum { A = 0, B = 1, D = 0 }; /* mesh axis numbers */

/* dim of sh cut by the n axes that follow, major first */
static void cut(Sharding *sh, int dim, int n, ...) {
  va_list ap;
  va_start(ap, n);
  sh->naxes[dim] = (uint8_t)n;
  for (int j = 0; j < n; j++)
    sh->axes[dim][j] = (uint8_t)va_arg(ap, int);
  va_end(ap);
}

/* Checks one step of a plan: its op, dims, group (n axes) and the
 * sharding it reaches. */
static void check_step(const ShardStep *st, Op op, int axis, int axis2, const Sharding *after, int rank, int n, ...) {
  CU_ASSERT_EQUAL(st->op, op);
  CU_ASSERT_EQUAL(st->axis, axis);
  if (op == OP_ALL_TO_ALL)
    CU_ASSERT_EQUAL(st->axis2, axis2);
  CU_ASSERT_EQUAL(st->ngroup, n);
  va_list ap;
  va_start(ap, n);
  for (int j = 0; j < n && j < st->ngroup; j++)
    CU_ASSERT_EQUAL(st->group[j], va_arg(ap, int));
  va_end(ap);
  CU_ASSERT_TRUE(shard_eq(&st->after, after, rank));
}

/* ---- the algebra ---------------------------------------------------------- */

static void test_eq(void) {
  Sharding x = {0}, y = {0};
  cut(&x, 0, 2, A, B);
  cut(&y, 0, 2, A, B);
  CU_ASSERT_TRUE(shard_eq(&x, &y, 2));
  cut(&y, 2, 1, A); /* beyond rank 2: not compared */
  CU_ASSERT_TRUE(shard_eq(&x, &y, 2));
  CU_ASSERT_FALSE(shard_eq(&x, &y, 3));
  y = x;
  cut(&y, 0, 2, B, A); /* same axes, other order */
  CU_ASSERT_FALSE(shard_eq(&x, &y, 2));
  y = x;
  y.partial = 1u << B;
  CU_ASSERT_FALSE(shard_eq(&x, &y, 2));
  CU_ASSERT_EQUAL(shard_dim_axes(&x, 0), (1u << A) | (1u << B));
  CU_ASSERT_EQUAL(shard_dim_axes(&x, 1), 0);
  Sharding z = {0};
  cut(&z, 1, 1, B);
  shard_copy_dim(&z, 0, &x, 0); /* z = [(a, b), b]: all axes {a, b} */
  CU_ASSERT_EQUAL(z.naxes[0], 2);
  CU_ASSERT_EQUAL(shard_all_axes(&z, 2), (1u << A) | (1u << B));
}

static void test_local_shape(void) {
  Program *p = mesh_a2b4();
  Shape g = shape_of(2, (int64_t[]){8, 16});
  Sharding s = {0};
  /* replicated: the global shape */
  Shape l = shard_local_shape(p, &g, &s);
  CU_ASSERT_TRUE(shape_eq(&l, &g));
  /* [(a, b), _]: 8 / (2 * 4) = 1 rows */
  cut(&s, 0, 2, A, B);
  l = shard_local_shape(p, &g, &s);
  CU_ASSERT_EQUAL(l.d[0], 1);
  CU_ASSERT_EQUAL(l.d[1], 16);
  CU_ASSERT_EQUAL(shard_shards(p, &s, 0), 8);
  /* [a, b]: 8 / 2 = 4, 16 / 4 = 4 */
  memset(&s, 0, sizeof s);
  cut(&s, 0, 1, A);
  cut(&s, 1, 1, B);
  l = shard_local_shape(p, &g, &s);
  CU_ASSERT_EQUAL(l.d[0], 4);
  CU_ASSERT_EQUAL(l.d[1], 4);
  /* partial sums do not change the shape: [_, b] partial(a) is [8, 4] */
  memset(&s, 0, sizeof s);
  cut(&s, 1, 1, B);
  s.partial = 1u << A;
  l = shard_local_shape(p, &g, &s);
  CU_ASSERT_EQUAL(l.d[0], 8);
  CU_ASSERT_EQUAL(l.d[1], 4);
  /* a scalar stays a scalar */
  Shape sc = shape_of(0, NULL);
  l = shard_local_shape(p, &sc, &s);
  CU_ASSERT_EQUAL(l.rank, 0);
  ir_free(p);
}

static void test_fit(void) {
  Program *p = mesh_a2b4();
  /* [(a, b), a] partial(b) on [8, 6]: dim 0 keeps a (8 % 2 = 0) and b
   * (8 % 8 = 0); dim 1's a is used already; partial sums go */
  Sharding s = {0}, want = {0};
  cut(&s, 0, 2, A, B);
  cut(&s, 1, 1, A);
  s.partial = 1u << B;
  Shape sh = shape_of(2, (int64_t[]){8, 6});
  shard_fit(p, &s, &sh);
  cut(&want, 0, 2, A, B);
  CU_ASSERT_TRUE(shard_eq(&s, &want, GSL_MAX_RANK));
  /* [(b, a), _] on [4, 6]: b fits (4 elements for 4 shards), a does not
   * (8 shards would leave some without an element) */
  memset(&s, 0, sizeof s);
  memset(&want, 0, sizeof want);
  cut(&s, 0, 2, B, A);
  sh = shape_of(2, (int64_t[]){4, 6});
  shard_fit(p, &s, &sh);
  cut(&want, 0, 1, B);
  CU_ASSERT_TRUE(shard_eq(&s, &want, GSL_MAX_RANK));
  /* [a, _, b] fitted to a rank-2 shape [8, 8]: dim 2 dropped */
  memset(&s, 0, sizeof s);
  memset(&want, 0, sizeof want);
  cut(&s, 0, 1, A);
  cut(&s, 2, 1, B);
  sh = shape_of(2, (int64_t[]){8, 8});
  shard_fit(p, &s, &sh);
  cut(&want, 0, 1, A);
  CU_ASSERT_TRUE(shard_eq(&s, &want, GSL_MAX_RANK));
  /* [b, a] on [6, 3]: an uneven cut stays (6 over 4, 3 over 2: every
   * shard has an element) */
  memset(&s, 0, sizeof s);
  cut(&s, 0, 1, B);
  cut(&s, 1, 1, A);
  want = s;
  sh = shape_of(2, (int64_t[]){6, 3});
  shard_fit(p, &s, &sh);
  CU_ASSERT_TRUE(shard_eq(&s, &want, GSL_MAX_RANK));
  /* its tiles: ceil(6 / 4) = 2, ceil(3 / 2) = 2; both dims padded */
  Shape l = shard_local_shape(p, &sh, &s);
  CU_ASSERT_EQUAL(l.d[0], 2);
  CU_ASSERT_EQUAL(l.d[1], 2);
  CU_ASSERT_EQUAL(shard_padded(p, &sh, &s), 3u);
  /* [b, _] on [8, 3]: even, nothing padded */
  memset(&s, 0, sizeof s);
  cut(&s, 0, 1, B);
  sh = shape_of(2, (int64_t[]){8, 3});
  CU_ASSERT_EQUAL(shard_padded(p, &sh, &s), 0u);
  ir_free(p);
}

/* Uneven cuts on [a = 2, b = 4]: where tiles nest, the plan steps as for
 * even ones; where they do not, the dim is gathered and cut again. */
static void test_plan_uneven(void) {
  Program *p = mesh_a2b4();
  ShardStep st[SHARD_MAX_STEPS];
  Sharding from = {0}, to = {0};
  /* f32[10]: [a] (tiles of 5) -> [(a, b)] (tiles of ceil(10 / 8) = 2; 4
   * of them are 8, not 5): all-gather over a (whole: 10), then a local
   * slice over (a, b) */
  Shape g = shape_of(1, (int64_t[]){10});
  cut(&from, 0, 1, A);
  cut(&to, 0, 2, A, B);
  int n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 2);
  CU_ASSERT_EQUAL(st[0].op, OP_ALL_GATHER);
  CU_ASSERT_EQUAL(st[1].op, OP_LOCAL_SLICE);
  CU_ASSERT_EQUAL(st[1].ngroup, 2);
  /* f32[12]: [a] (6) -> [(a, b)] (ceil(12 / 8) = 2, 4 of them 8 > 6): the
   * same; f32[16]: tiles of 8 = 4 x 2, one local slice over b */
  g = shape_of(1, (int64_t[]){12});
  CU_ASSERT_EQUAL(shard_plan(p, &g, &from, &to, st), 2);
  g = shape_of(1, (int64_t[]){16});
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  CU_ASSERT_EQUAL(st[0].op, OP_LOCAL_SLICE);
  CU_ASSERT_EQUAL(st[0].ngroup, 1);
  /* f32[6, 5]: [b, _] -> [_, b]: the all-to-all out of a whole-to-be dim
   * and into a whole one is taken uneven or not */
  g = shape_of(2, (int64_t[]){6, 5});
  memset(&from, 0, sizeof from);
  memset(&to, 0, sizeof to);
  cut(&from, 0, 1, B);
  cut(&to, 1, 1, B);
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  CU_ASSERT_EQUAL(st[0].op, OP_ALL_TO_ALL);
  ir_free(p);
}

static void test_reshape(void) {
  Shape s8x12 = shape_of(2, (int64_t[]){8, 12}), s96 = shape_of(1, (int64_t[]){96});
  Shape s1x8x12 = shape_of(3, (int64_t[]){1, 8, 12}), s4x6 = shape_of(2, (int64_t[]){4, 6});
  Shape s6x4 = shape_of(2, (int64_t[]){6, 4});
  Sharding s = {0}, want = {0}, r;
  Program *p = mesh_d4();
  /* [8, 12] -> [96]: one group (8 * 12 = 96); its first real dim 0 is cut
   * by d and nothing else is: [d, _] -> [d] */
  cut(&s, 0, 1, D);
  r = shard_reshape(p, &s, &s8x12, &s96);
  cut(&want, 0, 1, D);
  CU_ASSERT_TRUE(shard_eq(&r, &want, GSL_MAX_RANK));
  /* [_, d] -> [96]: a dim other than the first real one is cut: dropped */
  memset(&s, 0, sizeof s);
  cut(&s, 1, 1, D);
  r = shard_reshape(p, &s, &s8x12, &s96);
  memset(&want, 0, sizeof want);
  CU_ASSERT_TRUE(shard_eq(&r, &want, GSL_MAX_RANK));
  /* [96] -> [8, 12], [d]: onto the first real dim of the group: [d, _] */
  memset(&s, 0, sizeof s);
  cut(&s, 0, 1, D);
  r = shard_reshape(p, &s, &s96, &s8x12);
  cut(&want, 0, 1, D);
  CU_ASSERT_TRUE(shard_eq(&r, &want, GSL_MAX_RANK));
  /* [1, 8, 12] -> [8, 12], [_, d, _]: groups {0, 1} -> {0} (1 * 8 = 8) and
   * {2} -> {1}; the first group's first real dim is 1: [d, _] */
  memset(&s, 0, sizeof s);
  cut(&s, 1, 1, D);
  r = shard_reshape(p, &s, &s1x8x12, &s8x12);
  memset(&want, 0, sizeof want);
  cut(&want, 0, 1, D);
  CU_ASSERT_TRUE(shard_eq(&r, &want, GSL_MAX_RANK));
  /* [4, 6] -> [6, 4], [d, _] on d = 4: one group (24 = 24), but the
   * tiles differ: [1, 6] holds 6 elements, [6, 4] cut unevenly over 4
   * (ceil(6 / 4) = 2 rows) 8: dropped */
  memset(&s, 0, sizeof s);
  cut(&s, 0, 1, D);
  r = shard_reshape(p, &s, &s4x6, &s6x4);
  memset(&want, 0, sizeof want);
  CU_ASSERT_TRUE(shard_eq(&r, &want, GSL_MAX_RANK));
  /* [6, 4] -> [6, 2, 2], [d, _]: the uneven cut's tiles of 2 rows are 8
   * elements on both sides: carried, [d, _, _] */
  Shape s6x2x2 = shape_of(3, (int64_t[]){6, 2, 2}), s24 = shape_of(1, (int64_t[]){24});
  r = shard_reshape(p, &s, &s6x4, &s6x2x2);
  cut(&want, 0, 1, D);
  CU_ASSERT_TRUE(shard_eq(&r, &want, GSL_MAX_RANK));
  /* [6, 4] -> [24], [d, _]: tiles of 8 against ceil(24 / 4) = 6: dropped */
  r = shard_reshape(p, &s, &s6x4, &s24);
  memset(&want, 0, sizeof want);
  CU_ASSERT_TRUE(shard_eq(&r, &want, GSL_MAX_RANK));
  ir_free(p);
}

/* ---- plans on a 1-D mesh [d = 4], f32[8, 12] ----------------------------------- */

static void test_plan_1d(void) {
  Program *p = mesh_d4();
  Shape g = shape_of(2, (int64_t[]){8, 12});
  ShardStep st[SHARD_MAX_STEPS];
  Sharding from, to;
  int n;

  /* all-reduce: [_, _] partial(d) -> [_, _]; b = 8 * 12 * 4 = 384,
   * 2 * 384 * 3 / 4 = 576 */
  memset(&from, 0, sizeof from);
  memset(&to, 0, sizeof to);
  from.partial = 1u << D;
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  check_step(&st[0], OP_ALL_REDUCE, 0, 0, &to, 2, 1, D);
  CU_ASSERT_EQUAL(shard_plan_bytes(p, &g, DT_F32, &from, st, n), 576);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 576);

  /* reduce-scatter: partial(d) -> [d, _]; b = 384, 384 * 3 / 4 = 288 */
  cut(&to, 0, 1, D);
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  check_step(&st[0], OP_REDUCE_SCATTER, 0, 0, &to, 2, 1, D);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 288);

  /* all-to-all: [d, _] -> [_, d]; local [2, 12], b = 96, 96 * 3 / 4 = 72 */
  memset(&from, 0, sizeof from);
  memset(&to, 0, sizeof to);
  cut(&from, 0, 1, D);
  cut(&to, 1, 1, D);
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  check_step(&st[0], OP_ALL_TO_ALL, 1, 0, &to, 2, 1, D);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 72);

  /* all-gather: [d, _] -> [_, _]; b = 96, 96 * 3 = 288 */
  memset(&to, 0, sizeof to);
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  check_step(&st[0], OP_ALL_GATHER, 0, 0, &to, 2, 1, D);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 288);

  /* local slice: [_, _] -> [_, d]: no communication, 0 bytes */
  memset(&from, 0, sizeof from);
  cut(&to, 1, 1, D);
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  check_step(&st[0], OP_LOCAL_SLICE, 1, 0, &to, 2, 1, D);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 0);

  /* reduce-scatter onto dim 1: partial(d) -> [_, d]; b = 384, 288 bytes */
  from.partial = 1u << D;
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  check_step(&st[0], OP_REDUCE_SCATTER, 1, 0, &to, 2, 1, D);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 288);

  /* no-op: [d, _] -> [d, _]: no steps, 0 bytes */
  memset(&from, 0, sizeof from);
  cut(&from, 0, 1, D);
  to = from;
  CU_ASSERT_EQUAL(shard_plan(p, &g, &from, &to, st), 0);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 0);

  /* a collective-permute needs a dimension cut by two axes: there is
   * none on a 1-D mesh (test_plan_2d has it) */
  ir_free(p);
}

/* ---- plans on a 2-D mesh [a = 2, b = 4], f32[8, 16] -------------------------------- */

static void test_plan_2d(void) {
  Program *p = mesh_a2b4();
  Shape g = shape_of(2, (int64_t[]){8, 16});
  ShardStep st[SHARD_MAX_STEPS];
  Sharding from, to, mid;
  int n;

  /* all-reduce over b: [a, _] partial(b) -> [a, _]; local [4, 16], b = 256,
   * n = 4: 2 * 256 * 3 / 4 = 384 */
  memset(&from, 0, sizeof from);
  memset(&to, 0, sizeof to);
  cut(&from, 0, 1, A);
  from.partial = 1u << B;
  cut(&to, 0, 1, A);
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  check_step(&st[0], OP_ALL_REDUCE, 0, 0, &to, 2, 1, B);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 384);

  /* all-reduce over both axes: partial(a, b) -> replicated; b = 512, n = 8:
   * 2 * 512 * 7 / 8 = 896 */
  memset(&from, 0, sizeof from);
  memset(&to, 0, sizeof to);
  from.partial = (1u << A) | (1u << B);
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  check_step(&st[0], OP_ALL_REDUCE, 0, 0, &to, 2, 2, A, B);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 896);

  /* reduce-scatter over both: partial(a, b) -> [(a, b), _]; b = 512, n = 8:
   * 512 * 7 / 8 = 448 */
  cut(&to, 0, 2, A, B);
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  check_step(&st[0], OP_REDUCE_SCATTER, 0, 0, &to, 2, 2, A, B);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 448);

  /* reduce-scatter then all-reduce: partial(a, b) -> [b, _]:
   * 1. reduce-scatter over b onto dim 0, to [b, _] partial(a): b = 512,
   *    n = 4: 512 * 3 / 4 = 384;
   * 2. all-reduce over a, to [b, _]: local [2, 16], b = 128, n = 2:
   *    2 * 128 * 1 / 2 = 128. Total 512. */
  memset(&to, 0, sizeof to);
  cut(&to, 0, 1, B);
  mid = to;
  mid.partial = 1u << A;
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 2);
  check_step(&st[0], OP_REDUCE_SCATTER, 0, 0, &mid, 2, 1, B);
  check_step(&st[1], OP_ALL_REDUCE, 0, 0, &to, 2, 1, A);
  CU_ASSERT_EQUAL(shard_plan_bytes(p, &g, DT_F32, &from, st, n), 512);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 512);

  /* keeping a partial sum pending: partial(a, b) -> [b, _] partial(a) is
   * step 1 of the plan above alone (384 bytes); partial(a, b) ->
   * partial(b) is an all-reduce over a alone (b = 512, n = 2:
   * 2 * 512 * 1 / 2 = 512); and a partial kept as it is costs nothing */
  n = shard_plan(p, &g, &from, &mid, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  check_step(&st[0], OP_REDUCE_SCATTER, 0, 0, &mid, 2, 1, B);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &mid), 384);
  memset(&to, 0, sizeof to);
  to.partial = 1u << B;
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  check_step(&st[0], OP_ALL_REDUCE, 0, 0, &to, 2, 1, A);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 512);
  CU_ASSERT_EQUAL(shard_plan(p, &g, &from, &from, st), 0);

  /* all-to-all over a: [a, _] -> [_, a]; local [4, 16], b = 256, n = 2:
   * 256 * 1 / 2 = 128 */
  memset(&from, 0, sizeof from);
  memset(&to, 0, sizeof to);
  cut(&from, 0, 1, A);
  cut(&to, 1, 1, A);
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  check_step(&st[0], OP_ALL_TO_ALL, 1, 0, &to, 2, 1, A);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 128);

  /* all-to-all of a minor axis: [(a, b), _] -> [a, b]; b leaves dim 0 for
   * dim 1; local [1, 16], b = 64, n = 4: 64 * 3 / 4 = 48 */
  memset(&from, 0, sizeof from);
  memset(&to, 0, sizeof to);
  cut(&from, 0, 2, A, B);
  cut(&to, 0, 1, A);
  cut(&to, 1, 1, B);
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  check_step(&st[0], OP_ALL_TO_ALL, 1, 0, &to, 2, 1, B);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 48);

  /* and back, onto the end of a cut dim: [a, b] -> [(a, b), _] */
  n = shard_plan(p, &g, &to, &from, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  check_step(&st[0], OP_ALL_TO_ALL, 0, 1, &from, 2, 1, B);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &to, &from), 48);

  /* collective-permute: [(a, b), _] -> [(b, a), _]; local [1, 16], b = 64,
   * n = 8: 64 */
  memset(&from, 0, sizeof from);
  memset(&to, 0, sizeof to);
  cut(&from, 0, 2, A, B);
  cut(&to, 0, 2, B, A);
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  check_step(&st[0], OP_COLLECTIVE_PERMUTE, 0, 0, &to, 2, 2, A, B);
  CU_ASSERT_EQUAL(st[0].group2[0], B);
  CU_ASSERT_EQUAL(st[0].group2[1], A);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 64);

  /* all-gather over b: [a, b] -> [a, _]; local [4, 4], b = 64, n = 4:
   * 64 * 3 = 192 */
  memset(&from, 0, sizeof from);
  memset(&to, 0, sizeof to);
  cut(&from, 0, 1, A);
  cut(&from, 1, 1, B);
  cut(&to, 0, 1, A);
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  check_step(&st[0], OP_ALL_GATHER, 1, 0, &to, 2, 1, B);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 192);

  /* all-gather then local slice: [(a, b), _] -> [a, _]: (a, b) is not a
   * prefix of (a), so
   * 1. all-gather over (a, b), to [_, _]: local [1, 16], b = 64, n = 8:
   *    64 * 7 = 448;
   * 2. local slice over a, to [a, _]: 0. Total 448. */
  memset(&from, 0, sizeof from);
  cut(&from, 0, 2, A, B);
  memset(&mid, 0, sizeof mid);
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 2);
  check_step(&st[0], OP_ALL_GATHER, 0, 0, &mid, 2, 2, A, B);
  check_step(&st[1], OP_LOCAL_SLICE, 0, 0, &to, 2, 1, A);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 448);

  /* local slice: [a, _] -> [(a, b), _]: a is a prefix, b cuts further:
   * one local slice over b, 0 bytes */
  memset(&from, 0, sizeof from);
  memset(&to, 0, sizeof to);
  cut(&from, 0, 1, A);
  cut(&to, 0, 2, A, B);
  n = shard_plan(p, &g, &from, &to, st);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  check_step(&st[0], OP_LOCAL_SLICE, 0, 0, &to, 2, 1, B);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 0);

  /* no-op: [a, b] -> [a, b] */
  memset(&from, 0, sizeof from);
  cut(&from, 0, 1, A);
  cut(&from, 1, 1, B);
  to = from;
  CU_ASSERT_EQUAL(shard_plan(p, &g, &from, &to, st), 0);
  CU_ASSERT_EQUAL(shard_reshard_bytes(p, &g, DT_F32, &from, &to), 0);
  ir_free(p);
}

/* ---- the cost of one step, and of a collective in an SPMD program ---------------- */

static void test_step_bytes(void) {
  /* b = 100: all-reduce over 4: 2 * 100 * 3 / 4 = 150; all-gather 300;
   * reduce-scatter and all-to-all 75; permute 100; local slice 0; over a
   * group of one device every kind moves 0 */
  CU_ASSERT_EQUAL(shard_step_bytes(OP_ALL_REDUCE, 100, 4), 150);
  CU_ASSERT_EQUAL(shard_step_bytes(OP_ALL_GATHER, 100, 4), 300);
  CU_ASSERT_EQUAL(shard_step_bytes(OP_REDUCE_SCATTER, 100, 4), 75);
  CU_ASSERT_EQUAL(shard_step_bytes(OP_ALL_TO_ALL, 100, 4), 75);
  CU_ASSERT_EQUAL(shard_step_bytes(OP_COLLECTIVE_PERMUTE, 100, 4), 100);
  CU_ASSERT_EQUAL(shard_step_bytes(OP_LOCAL_SLICE, 100, 4), 0);
  static const Op kinds[] = {OP_ALL_REDUCE, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_ALL_TO_ALL, OP_COLLECTIVE_PERMUTE,
                             OP_LOCAL_SLICE};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    CU_ASSERT_EQUAL(shard_step_bytes(kinds[i], 100, 1), 0);

  /* an all-gather over (a, b) of a local f32[1, 16] in an SPMD program:
   * b = 64, n = 8: 64 * 7 = 448, as the plan above counted it */
  Program *p = mesh_a2b4();
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  p->spmd = true;
  Value *x = ir_add(&bd, OP_CONST, DT_F32, shape_of(2, (int64_t[]){1, 16}), (Span){0}, 0, NULL);
  Value *v = ir_add(&bd, OP_ALL_GATHER, DT_F32, shape_of(2, (int64_t[]){8, 16}), (Span){0}, 1, &x);
  v->group[0] = A;
  v->group[1] = B;
  v->ngroup = 2;
  CU_ASSERT_EQUAL(shard_collective_bytes(p, v), 448);
  /* the same value as an all-reduce over b only: 2 * 64 * 3 / 4 = 96 */
  v->op = OP_ALL_REDUCE;
  v->group[0] = B;
  v->ngroup = 1;
  CU_ASSERT_EQUAL(shard_collective_bytes(p, v), 96);
  ir_free(p);
}

void add_sharding_tests(void) {
  CU_pSuite s = tests_suite("sharding");
  tests_add(s, "equality and axes", test_eq);
  tests_add(s, "local shapes", test_local_shape);
  tests_add(s, "fitting an offer", test_fit);
  tests_add(s, "plans of uneven cuts", test_plan_uneven);
  tests_add(s, "reshape groups", test_reshape);
  tests_add(s, "plans and bytes on a 1-D mesh", test_plan_1d);
  tests_add(s, "plans and bytes on a 2-D mesh", test_plan_2d);
  tests_add(s, "bytes of one step and of a collective", test_step_bytes);
}
