/* collectives_test.c — libgslrt's groups of mesh axes and its collectives
 * against plain references, on however many ranks it is started (1 to 4 in
 * tests/collectives.sh).
 *
 * Method. The test is a GSL program written by hand. gsl_setup declares a
 * mesh [d = N] (no mesh with one rank) and a few groups, so gslrt_main
 * builds them exactly as for a compiled program; gsl_step then checks that
 * context, and private contexts made from the runtime's internals for other
 * meshes of N devices ([2, 2], [1, 4], [2, 1, 2], ...) with groups of one
 * axis, of two in either order, of three, and the empty group.
 *
 * Each rank's data is a formula of its mesh rank, a per-call salt and the
 * element index, so every rank computes any member's data itself. Members
 * and block indices are computed here from coordinates (independently of
 * gslrt_block_index), and the expected results with plain index loops over
 * the output; values are small multiples of 1/4, so f32 sums are exact and
 * the comparison is ==. Checked per group: its size and this device's index;
 * that a dimension tiled over the group's axes starts at index * extent
 * (and, uneven, holds the real extent the layout says);
 * all_reduce (sum and max), all_gather, reduce_scatter, all_to_all and
 * collective_permute (between groups of the same axes in two orders) on f32,
 * i32 and bf16 (whose multiples of 1/4 here are exact too), along the first,
 * middle and last dimension of a rank-3 tile with unequal extents
 * (all_to_all with both sides direct, packed or unpacked), and an
 * all_to_all carrying an i32 rider (gslrt_all_to_all_rider): each gives
 * what it would alone. Uneven tiles (gslrt.h's padded layout): tiles of 7
 * and 5 over the group; all_gather of 7 and 5 in tiles of ceil(n / g) and
 * of 5 in tiles one longer (so trailing members hold nothing, e.g. 3, 2,
 * 0 over 3); reduce_scatter of 7 and 5 (the tile's padding zero);
 * all_to_all on every pair of dimensions with an uneven cut, an uneven
 * total2, and both; riders with both uneven. The padding of their inputs
 * is poisoned with a value no formula gives, and the expected outputs are
 * written from the layout's definition. bf16 sums are
 * also checked where rounding shows: bit patterns worked out by hand for
 * 1 + (g - 1) 2^-9 and 1 + 2^-7 + (g - 1) 2^-8 over g members (rounded once
 * from f32, not step by step), and, on values that are not exact, against
 * the f32 collective on the widened values, rounded (the same bits).
 *
 * Every failed check prints one line; rank 0 prints "collectives: N checks
 * passed" (summed over the ranks) and the exit status is 1 if any rank saw
 * a failure. With COLLECTIVES_TEST_BAD=repeat (or range) in the
 * environment, gsl_setup also declares a group naming an axis twice (or an
 * axis the mesh does not have), which must end the run with an error. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define RANK 3 /* rank of the test tensors */

/* Failed checks on this rank, then (after the step) on all ranks. */
static int failures;
/* Checks made on this rank. */
static int checks;
/* The per-call salt of the data formula. */
static int salt;

/* Element i of mesh rank r's input in the call with salt s, as a multiple
 * of 1/4 (f32) or an integer (i32). */
static int64_t datum(int64_t r, int s, int64_t i) { return (r * 37 + s * 11 + i * 7) % 61 - 30; }

static void fill(void *buf, int32_t dtype, int64_t r, int s, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (dtype == GSLRT_F32)
      ((float *)buf)[i] = (float)datum(r, s, i) * 0.25f;
    else if (dtype == GSLRT_BF16)
      ((uint16_t *)buf)[i] = gslrt_bf16_round((float)datum(r, s, i) * 0.25f);
    else
      ((int32_t *)buf)[i] = (int32_t)datum(r, s, i);
  }
}

/* A value datum never gives (in its units: 250 for f32 and bf16), put in
 * the padding of the inputs of uneven calls: it must never reach an output. */
#define POISON 1000

static void poison(void *buf, int32_t dtype, int64_t e) {
  if (dtype == GSLRT_F32)
    ((float *)buf)[e] = (float)POISON * 0.25f;
  else if (dtype == GSLRT_BF16)
    ((uint16_t *)buf)[e] = gslrt_bf16_round((float)POISON * 0.25f);
  else
    ((int32_t *)buf)[e] = POISON;
}

/* Member j's real elements in a dimension of total held in tiles of c,
 * written out from the layout's definition (gslrt.h): the elements of
 * [j * c, (j + 1) * c) that are below total. */
static int64_t real_in_tile(int64_t total, int64_t c, int64_t j) {
  int64_t r = 0;
  for (int64_t i = j * c; i < (j + 1) * c; i++)
    r += i < total;
  return r;
}

static const char *dtype_name(int32_t dtype) {
  return dtype == GSLRT_F32 ? "f32" : dtype == GSLRT_BF16 ? "bf16" : "i32";
}

/* Bytes of n elements of dtype. */
static size_t bytes_of(int32_t dtype, int64_t n) { return (size_t)n * (size_t)gslrt_dtype_size(dtype); }

static int64_t count_of(const int64_t *shape) { return shape[0] * shape[1] * shape[2]; }

static int64_t flat(const int64_t *shape, const int64_t *idx) {
  return (idx[0] * shape[1] + idx[1]) * shape[2] + idx[2];
}

static void unflat(const int64_t *shape, int64_t e, int64_t *idx) {
  idx[2] = e % shape[2], e /= shape[2];
  idx[1] = e % shape[1], idx[0] = e / shape[1];
}

/* A group as the test sees it. */
typedef struct tgroup {
  int32_t id;                   /* the id gslrt_declare_group returned */
  int n;                        /* number of axes */
  int32_t axes[GSLRT_MAX_AXES]; /* the axes, major first */
  int64_t size;                 /* devices in the group */
  int64_t index;                /* this device's block index */
  int64_t member[64];           /* mesh rank of each member, in block order */
} tgroup;

/* What names a check in failure lines. */
static char where[160];

static void fail(gslrt_ctx *ctx, const char *what, int64_t e, double got, double want) {
  failures++;
  fprintf(stderr, "FAIL rank %d: %s %s: element %lld is %g, expected %g\n", ctx->rank, where,
          what, (long long)e, got, want);
}

/* Compares out (n elements of dtype) with want (in units of 1/4 for f32). */
static void compare(gslrt_ctx *ctx, const char *what, int32_t dtype, const void *out,
                    const int64_t *want, int64_t n) {
  checks++;
  for (int64_t e = 0; e < n; e++) {
    double got = dtype == GSLRT_F32    ? ((const float *)out)[e]
                 : dtype == GSLRT_BF16 ? gslrt_bf16_widen(((const uint16_t *)out)[e])
                                       : ((const int32_t *)out)[e];
    double w = dtype == GSLRT_I32 ? (double)want[e] : (double)want[e] * 0.25;
    if (got != w) {
      fail(ctx, what, e, got, w);
      return;
    }
  }
}

static void *xmalloc(size_t n) {
  void *p = calloc(n ? n : 1, 1);
  if (!p) {
    fprintf(stderr, "collectives_test: out of memory\n");
    exit(1);
  }
  return p;
}

/* Works out the group's members and this device's index from coordinates. */
static void describe(gslrt_ctx *ctx, tgroup *t) {
  int64_t c[GSLRT_MAX_AXES], r = ctx->rank;
  for (int a = ctx->naxes - 1; a >= 0; a--)
    c[a] = r % ctx->axis_size[a], r /= ctx->axis_size[a];
  t->size = 1, t->index = 0;
  for (int i = 0; i < t->n; i++) {
    t->size *= ctx->axis_size[t->axes[i]];
    t->index = t->index * ctx->axis_size[t->axes[i]] + c[t->axes[i]];
  }
  for (int64_t j = 0; j < t->size; j++) {
    int64_t m[GSLRT_MAX_AXES], k = j, rank = 0;
    memcpy(m, c, sizeof m);
    for (int i = t->n - 1; i >= 0; i--)
      m[t->axes[i]] = k % ctx->axis_size[t->axes[i]], k /= ctx->axis_size[t->axes[i]];
    for (int a = 0; a < ctx->naxes; a++)
      rank = rank * ctx->axis_size[a] + m[a];
    t->member[j] = rank;
  }
}

static void check_all_reduce(gslrt_ctx *ctx, const tgroup *t, int32_t dtype, int32_t op) {
  int64_t n = 30, *want = xmalloc((size_t)n * sizeof *want);
  void *buf = xmalloc(bytes_of(dtype, n));
  int s = ++salt;
  fill(buf, dtype, ctx->rank, s, n);
  for (int64_t e = 0; e < n; e++) {
    want[e] = op == GSLRT_SUM ? 0 : INT64_MIN;
    for (int64_t j = 0; j < t->size; j++) {
      int64_t v = datum(t->member[j], s, e);
      want[e] = op == GSLRT_SUM ? want[e] + v : v > want[e] ? v : want[e];
    }
  }
  gslrt_all_reduce(ctx, t->id, dtype, op, buf, n);
  char what[64];
  snprintf(what, sizeof what, "all_reduce %s %s", op == GSLRT_SUM ? "sum" : "max", dtype_name(dtype));
  compare(ctx, what, dtype, buf, want, n);
  free(want), free(buf);
}

/* all_gather along dim of tiles of c ({2, 3, 5} with dim = c) into total
 * (<= g * c; g * c is the even call): member j's first real_in_tile(total,
 * c, j) elements along dim land at j * c; the rest of its tile is
 * poisoned and must not show. */
static void check_all_gather(gslrt_ctx *ctx, const tgroup *t, int32_t dtype, int32_t dim, int64_t c,
                             int64_t total) {
  int64_t in_shape[RANK] = {2, 3, 5}, out_shape[RANK], idx[RANK];
  in_shape[dim] = c;
  memcpy(out_shape, in_shape, sizeof out_shape);
  out_shape[dim] = total;
  int64_t n = count_of(out_shape), *want = xmalloc((size_t)n * sizeof *want);
  void *in = xmalloc(bytes_of(dtype, count_of(in_shape))), *out = xmalloc(bytes_of(dtype, n));
  int s = ++salt;
  fill(in, dtype, ctx->rank, s, count_of(in_shape));
  for (int64_t e = 0; e < count_of(in_shape); e++) {
    unflat(in_shape, e, idx);
    if (idx[dim] >= real_in_tile(total, c, t->index))
      poison(in, dtype, e);
  }
  for (int64_t e = 0; e < n; e++) {
    unflat(out_shape, e, idx);
    int64_t j = idx[dim] / c;
    idx[dim] %= c;
    want[e] = datum(t->member[j], s, flat(in_shape, idx));
  }
  gslrt_all_gather(ctx, t->id, dtype, in, out, RANK, in_shape, dim, total);
  char what[64];
  snprintf(what, sizeof what, "all_gather %s dim %d, %lld of %lld", dtype_name(dtype), dim, (long long)total,
           (long long)(c * t->size));
  compare(ctx, what, dtype, out, want, n);
  free(want), free(in), free(out);
}

/* reduce_scatter along dim of extent n ({2, 3, 5} with dim = n): this
 * member's tile of c = ceil(n / g), its real elements the sums, its
 * padding zero (out starts poisoned). */
static void check_reduce_scatter(gslrt_ctx *ctx, const tgroup *t, int32_t dtype, int32_t dim, int64_t n_dim) {
  int64_t in_shape[RANK] = {2, 3, 5}, out_shape[RANK], idx[RANK];
  int64_t c = (n_dim + t->size - 1) / t->size, real = real_in_tile(n_dim, c, t->index);
  in_shape[dim] = n_dim;
  memcpy(out_shape, in_shape, sizeof out_shape);
  out_shape[dim] = c;
  int64_t n = count_of(out_shape), *want = xmalloc((size_t)n * sizeof *want);
  void *in = xmalloc(bytes_of(dtype, count_of(in_shape))), *out = xmalloc(bytes_of(dtype, n));
  int s = ++salt;
  fill(in, dtype, ctx->rank, s, count_of(in_shape));
  for (int64_t e = 0; e < n; e++) {
    poison(out, dtype, e);
    unflat(out_shape, e, idx);
    want[e] = 0;
    if (idx[dim] >= real)
      continue;
    idx[dim] += t->index * c;
    for (int64_t j = 0; j < t->size; j++)
      want[e] += datum(t->member[j], s, flat(in_shape, idx));
  }
  gslrt_reduce_scatter(ctx, t->id, dtype, in, out, RANK, in_shape, dim);
  char what[64];
  snprintf(what, sizeof what, "reduce_scatter %s dim %d of %lld", dtype_name(dtype), dim, (long long)n_dim);
  compare(ctx, what, dtype, out, want, n);
  free(want), free(in), free(out);
}

/* One all_to_all's buffers and the output it must give. */
typedef struct a2a_case {
  int64_t in_shape[RANK]; /* the input's shape */
  int64_t n;              /* elements of the output */
  int64_t *want;          /* the output, by formula */
  void *in, *out;         /* the buffers */
  int32_t dtype, dim, dim2;
  int64_t total2;         /* the output's extent along dim2 */
} a2a_case;

/* base: the input's shape but along dim, which is n_dim (whole); the
 * output joins total2 along dim2 (the even call: n_dim = g * base[dim],
 * total2 = g * the block's extent along dim2). {2, 3, 5} makes every side
 * packed or contiguous, {3, 2, 2048} gives chunks of 16 KiB that go as
 * messages straight between the buffers. The expected output, from the
 * layout's definition: position p along dim2 is sender j = p / c2's
 * element p % c2 of its block for this member, and position q < c along
 * dim is element index * c + q of dim, or zero padding past n_dim. The
 * input's padding along dim2 (past this member's real elements of total2)
 * is poisoned. */
static a2a_case a2a_prepare_uneven(gslrt_ctx *ctx, const tgroup *t, int32_t dtype, int32_t dim, int32_t dim2,
                                   const int64_t *base, int64_t n_dim, int64_t total2) {
  a2a_case c = {.dtype = dtype, .dim = dim, .dim2 = dim2, .total2 = total2};
  int64_t block[RANK], out_shape[RANK], idx[RANK];
  int64_t g = t->size, cut = (n_dim + g - 1) / g;
  memcpy(c.in_shape, base, sizeof c.in_shape);
  c.in_shape[dim] = n_dim;
  memcpy(block, c.in_shape, sizeof block);
  block[dim] = cut;
  int64_t c2 = block[dim2];
  memcpy(out_shape, block, sizeof out_shape);
  out_shape[dim2] = total2;
  c.n = count_of(out_shape);
  c.want = xmalloc((size_t)c.n * sizeof *c.want);
  c.in = xmalloc(bytes_of(dtype, count_of(c.in_shape)));
  c.out = xmalloc(bytes_of(dtype, c.n));
  int s = ++salt;
  fill(c.in, dtype, ctx->rank, s, count_of(c.in_shape));
  for (int64_t e = 0; dim != dim2 && e < count_of(c.in_shape); e++) {
    unflat(c.in_shape, e, idx);
    if (idx[dim2] >= real_in_tile(total2, c2, t->index))
      poison(c.in, dtype, e);
  }
  for (int64_t e = 0; e < c.n; e++) {
    unflat(out_shape, e, idx);
    int64_t j = idx[dim2] / c2;
    idx[dim2] %= c2;
    if (idx[dim] >= real_in_tile(n_dim, cut, t->index)) {
      c.want[e] = 0;
      continue;
    }
    idx[dim] += t->index * cut;
    c.want[e] = datum(t->member[j], s, flat(c.in_shape, idx));
  }
  return c;
}

static a2a_case a2a_prepare(gslrt_ctx *ctx, const tgroup *t, int32_t dtype, int32_t dim, int32_t dim2,
                            const int64_t *base) {
  int64_t block2 = dim == dim2 ? base[dim] : base[dim2];
  return a2a_prepare_uneven(ctx, t, dtype, dim, dim2, base, base[dim] * t->size, block2 * t->size);
}

static void a2a_finish(gslrt_ctx *ctx, a2a_case *c, const char *kind) {
  char what[96];
  snprintf(what, sizeof what, "%s %s dims %d, %d, [%lld, %lld, %lld] to %lld", kind, dtype_name(c->dtype),
           c->dim, c->dim2, (long long)c->in_shape[0], (long long)c->in_shape[1], (long long)c->in_shape[2],
           (long long)c->total2);
  compare(ctx, what, c->dtype, c->out, c->want, c->n);
  free(c->want), free(c->in), free(c->out);
}

static void run_all_to_all(gslrt_ctx *ctx, const tgroup *t, a2a_case *c) {
  gslrt_all_to_all(ctx, t->id, c->dtype, c->in, c->out, RANK, c->in_shape, c->dim, c->dim2, c->total2);
  a2a_finish(ctx, c, "all_to_all");
}

static void check_all_to_all(gslrt_ctx *ctx, const tgroup *t, int32_t dtype, int32_t dim,
                             int32_t dim2, const int64_t *base) {
  a2a_case c = a2a_prepare(ctx, t, dtype, dim, dim2, base);
  run_all_to_all(ctx, t, &c);
}

/* The uneven all_to_alls of {2, 3, 5} along dim and dim2 over g members:
 * dim of g * b - 1 (the last block one short; b = base[dim]), of (g - 1)
 * * b (the last member's block all padding when b > 1), and even; the
 * output's dim2 of g * c2 - c2 - 1 (the last member's elements all
 * dropped, the one before it short), and even; every pair but the even
 * one. */
static void check_all_to_all_uneven(gslrt_ctx *ctx, const tgroup *t, int32_t dtype, int32_t dim, int32_t dim2) {
  static const int64_t base[RANK] = {2, 3, 5};
  int64_t g = t->size, b = base[dim];
  int64_t ns[3] = {g * b - 1, (g - 1) * b, g * b};
  for (int i = 0; i < 3; i++) {
    if (ns[i] < 1)
      continue;
    int64_t cut = (ns[i] + g - 1) / g, c2 = dim == dim2 ? cut : base[dim2];
    int64_t totals[2] = {g > 1 ? g * c2 - c2 - 1 : c2 - 1, g * c2};
    for (int k = 0; k < 2; k++) {
      if (totals[k] < 0 || (ns[i] == g * b && totals[k] == g * c2))
        continue;
      a2a_case c = a2a_prepare_uneven(ctx, t, dtype, dim, dim2, base, ns[i], totals[k]);
      run_all_to_all(ctx, t, &c);
    }
  }
}

/* A carrier of dtype (dims dim, dim2, block base) with an i32 rider of
 * block {2, 3, 5} along dims 1 and 0 (both sides packed where the group is
 * larger than 1): each must give what it gives alone. uneven: the carrier
 * and the rider both cut an uneven dimension (g * b - 1) and join an
 * uneven total2 (g * c2 - 1, or the one element of one device). */
static void check_all_to_all_rider(gslrt_ctx *ctx, const tgroup *t, int32_t dtype, int32_t dim,
                                   int32_t dim2, const int64_t *base, int uneven) {
  static const int64_t small[RANK] = {2, 3, 5};
  int64_t g = t->size;
  a2a_case c, r;
  if (uneven) {
    int64_t n = g * base[dim] - 1, rn = g * small[1] - 1;
    int64_t c2 = dim == dim2 ? (n + g - 1) / g : base[dim2], rc2 = small[0];
    c = a2a_prepare_uneven(ctx, t, dtype, dim, dim2, base, n, g * c2 - 1);
    r = a2a_prepare_uneven(ctx, t, GSLRT_I32, 1, 0, small, rn, g * rc2 - 1);
  } else {
    c = a2a_prepare(ctx, t, dtype, dim, dim2, base);
    r = a2a_prepare(ctx, t, GSLRT_I32, 1, 0, small);
  }
  gslrt_all_to_all_rider(ctx, t->id, dtype, c.in, c.out, RANK, c.in_shape, dim, dim2, c.total2, GSLRT_I32, r.in,
                         r.out, RANK, r.in_shape, 1, 0, r.total2);
  a2a_finish(ctx, &c, "all_to_all carrying a rider");
  a2a_finish(ctx, &r, "all_to_all rider");
}

/* collective_permute from group f's order to group t's (the same axes):
 * this device must end with the block of the member numbered, in f's
 * order, by its own index in t's order. */
static void check_permute(gslrt_ctx *ctx, const tgroup *f, const tgroup *t, int32_t dtype) {
  int64_t n = 13, *want = xmalloc((size_t)n * sizeof *want);
  void *in = xmalloc(bytes_of(dtype, n)), *out = xmalloc(bytes_of(dtype, n));
  int s = ++salt;
  fill(in, dtype, ctx->rank, s, n);
  for (int64_t e = 0; e < n; e++)
    want[e] = datum(f->member[t->index], s, e);
  gslrt_collective_permute(ctx, f->id, t->id, dtype, in, out, n);
  char what[64];
  snprintf(what, sizeof what, "collective_permute %s", dtype_name(dtype));
  compare(ctx, what, dtype, out, want, n);
  free(want), free(in), free(out);
}

/* bf16 sums rounded once from f32, by hand: over g members, element 0
 * is 1 (member 0) + 2^-9 from each other member, element 1 is 1 + 2^-7
 * (member 0) + 2^-8 from each other; 1 + (g-1) 2^-9 rounds to 0x3f80
 * (g = 2: below the tie; g = 3: the tie 1 + 2^-8, to even) or 0x3f81 (g =
 * 4: past it); 1 + 2^-7 + (g-1) 2^-8 to 0x3f82 (g = 2: a tie, to even;
 * g = 3: exact; g = 4: 1 + 5 2^-8, a tie, to even). Rounding after each
 * addition would give 0x3f80 and 0x3f81 throughout. all_reduce on [2];
 * reduce_scatter on [2 g] along dim 0, member i keeping elements 2i, 2i+1. */
static void check_bf16_rounding(gslrt_ctx *ctx, const tgroup *t) {
  static const uint16_t want0[4] = {0x3f80, 0x3f80, 0x3f80, 0x3f81}, want1[4] = {0x3f81, 0x3f82, 0x3f82, 0x3f82};
  int64_t g = t->size, shape[1] = {2 * g};
  uint16_t buf[2], *in = xmalloc(bytes_of(GSLRT_BF16, 2 * g)), out[2];
  if (g > 4)
    return;
  int first = t->index == 0;
  buf[0] = gslrt_bf16_round(first ? 1.0f : 0x1p-9f);
  buf[1] = gslrt_bf16_round(first ? 1.0f + 0x1p-7f : 0x1p-8f);
  for (int64_t j = 0; j < g; j++)
    in[2 * j] = buf[0], in[2 * j + 1] = buf[1];
  gslrt_all_reduce(ctx, t->id, GSLRT_BF16, GSLRT_SUM, buf, 2);
  gslrt_reduce_scatter(ctx, t->id, GSLRT_BF16, in, out, 1, shape, 0);
  checks += 2;
  if (buf[0] != want0[g - 1] || buf[1] != want1[g - 1] || out[0] != want0[g - 1] || out[1] != want1[g - 1]) {
    failures++;
    fprintf(stderr, "FAIL rank %d: %s: bf16 sums over %lld members are all_reduce 0x%04x 0x%04x, "
            "reduce_scatter 0x%04x 0x%04x, expected 0x%04x 0x%04x\n", ctx->rank, where, (long long)g,
            buf[0], buf[1], out[0], out[1], want0[g - 1], want1[g - 1]);
  }
  free(in);
}

/* bf16 sums that are not exact (thirds, tenths) against the f32 collective
 * on the same values widened, then rounded: the same bits. all_reduce on
 * [2, 3, 5] and reduce_scatter along dim, of extent n_dim (0: g times its
 * extent there, the even call). */
static void check_bf16_as_f32(gslrt_ctx *ctx, const tgroup *t, int32_t dim, int64_t n_dim) {
  int64_t in_shape[RANK] = {2, 3, 5};
  in_shape[dim] = n_dim ? n_dim : in_shape[dim] * t->size;
  int64_t n = count_of(in_shape), m = n / in_shape[dim] * ((in_shape[dim] + t->size - 1) / t->size);
  uint16_t *h = xmalloc(bytes_of(GSLRT_BF16, n)), *ho = xmalloc(bytes_of(GSLRT_BF16, m));
  float *f = xmalloc((size_t)n * 4), *fo = xmalloc((size_t)m * 4);
  for (int64_t i = 0; i < n; i++) {
    h[i] = gslrt_bf16_round((float)datum(ctx->rank, salt, i) / 3.0f + (float)ctx->rank * 0.1f);
    f[i] = gslrt_bf16_widen(h[i]);
  }
  salt++;
  gslrt_reduce_scatter(ctx, t->id, GSLRT_BF16, h, ho, RANK, in_shape, dim);
  gslrt_reduce_scatter(ctx, t->id, GSLRT_F32, f, fo, RANK, in_shape, dim);
  gslrt_all_reduce(ctx, t->id, GSLRT_BF16, GSLRT_SUM, h, n);
  gslrt_all_reduce(ctx, t->id, GSLRT_F32, GSLRT_SUM, f, n);
  checks += 2;
  for (int64_t i = 0; i < n; i++)
    if (h[i] != gslrt_bf16_round(f[i])) {
      fail(ctx, "all_reduce bf16 against f32", i, gslrt_bf16_widen(h[i]), gslrt_bf16_round(f[i]));
      break;
    }
  for (int64_t i = 0; i < m; i++)
    if (ho[i] != gslrt_bf16_round(fo[i])) {
      fail(ctx, "reduce_scatter bf16 against f32", i, gslrt_bf16_widen(ho[i]), gslrt_bf16_round(fo[i]));
      break;
    }
  free(h), free(ho), free(f), free(fo);
}

/* Every check on one group of ctx. */
static void check_group(gslrt_ctx *ctx, tgroup *t) {
  static const int32_t pairs[][2] = {{0, 0}, {2, 0}, {0, 2}, {1, 1}, {0, 1}, {1, 0}};
  int n = snprintf(where, sizeof where, "mesh [");
  for (int a = 0; a < ctx->naxes; a++)
    n += snprintf(where + n, sizeof where - (size_t)n, "%s%lld", a ? ", " : "",
                  (long long)ctx->axis_size[a]);
  n += snprintf(where + n, sizeof where - (size_t)n, "] group (");
  for (int i = 0; i < t->n; i++)
    n += snprintf(where + n, sizeof where - (size_t)n, "%s%d", i ? ", " : "", (int)t->axes[i]);
  snprintf(where + n, sizeof where - (size_t)n, ")");
  describe(ctx, t);

  checks++;
  if (gslrt_group_size(ctx, t->id) != t->size || gslrt_group_index(ctx, t->id) != t->index) {
    failures++;
    fprintf(stderr, "FAIL rank %d: %s: size %lld index %lld, expected %lld and %lld\n", ctx->rank,
            where, (long long)gslrt_group_size(ctx, t->id),
            (long long)gslrt_group_index(ctx, t->id), (long long)t->size, (long long)t->index);
  }
  int32_t dim_axes[2 * GSLRT_MAX_AXES];
  int64_t global[2] = {7, 3 * t->size}, shape[2], off[2];
  for (int i = 0; i < 2 * GSLRT_MAX_AXES; i++)
    dim_axes[i] = i >= GSLRT_MAX_AXES && i - GSLRT_MAX_AXES < t->n ? t->axes[i - GSLRT_MAX_AXES] : -1;
  gslrt_tile(ctx, ctx->rank, "tile", 2, global, dim_axes, shape, off);
  checks++;
  if (shape[0] != 7 || off[0] != 0 || shape[1] != 3 || off[1] != 3 * t->index) {
    failures++;
    fprintf(stderr, "FAIL rank %d: %s: a dimension tiled over the group starts at %lld, "
            "expected %lld\n", ctx->rank, where, (long long)off[1], (long long)(3 * t->index));
  }
  /* uneven: 7 and 5 over the group, tiles of ceil(n / g), the real part first */
  for (int64_t n7 = 7; n7 >= 5; n7 -= 2) {
    int64_t real[2], c = (n7 + t->size - 1) / t->size;
    global[1] = n7;
    gslrt_tile_real(ctx, ctx->rank, "tile", 2, global, dim_axes, shape, off, real);
    checks++;
    if (shape[0] != 7 || real[0] != 7 || shape[1] != c || off[1] != c * t->index ||
        real[1] != real_in_tile(n7, c, t->index)) {
      failures++;
      fprintf(stderr, "FAIL rank %d: %s: %lld over the group tiled as %lld at %lld with %lld real, expected "
              "%lld at %lld with %lld\n", ctx->rank, where, (long long)n7, (long long)shape[1], (long long)off[1],
              (long long)real[1], (long long)c, (long long)(c * t->index), (long long)real_in_tile(n7, c, t->index));
    }
  }

  for (int32_t dtype = GSLRT_F32; dtype <= GSLRT_BF16; dtype++) {
    check_all_reduce(ctx, t, dtype, GSLRT_SUM);
    check_all_reduce(ctx, t, dtype, GSLRT_MAX);
    static const int64_t small[RANK] = {2, 3, 5}, big[RANK] = {3, 2, 2048};
    int64_t g = t->size;
    for (int32_t dim = 0; dim < RANK; dim++) {
      check_all_gather(ctx, t, dtype, dim, small[dim], g * small[dim]);
      check_reduce_scatter(ctx, t, dtype, dim, g * small[dim]);
      /* uneven: 7 and 5 in tiles of ceil(n / g) (over 4: 2, 2, 2, 1 and
       * 2, 2, 1, 0), and 5 in tiles one longer (over 3: 3, 2, 0) */
      check_all_gather(ctx, t, dtype, dim, (7 + g - 1) / g, 7);
      check_all_gather(ctx, t, dtype, dim, (5 + g - 1) / g, 5);
      check_all_gather(ctx, t, dtype, dim, (5 + g - 1) / g + 1, 5);
      check_reduce_scatter(ctx, t, dtype, dim, 7);
      check_reduce_scatter(ctx, t, dtype, dim, 5);
    }
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
      check_all_to_all(ctx, t, dtype, pairs[p][0], pairs[p][1], small);
      if (dtype != GSLRT_I32)
        check_all_to_all(ctx, t, dtype, pairs[p][0], pairs[p][1], big);
      check_all_to_all_uneven(ctx, t, dtype, pairs[p][0], pairs[p][1]);
    }
    if (dtype != GSLRT_I32) { /* a rider with a direct carrier, and with a packed one; even and uneven */
      for (int uneven = 0; uneven < 2; uneven++) {
        check_all_to_all_rider(ctx, t, dtype, 1, 0, big, uneven);
        check_all_to_all_rider(ctx, t, dtype, 0, 2, small, uneven);
      }
    }
  }
  check_bf16_rounding(ctx, t);
  for (int32_t dim = 0; dim < RANK; dim++) {
    check_bf16_as_f32(ctx, t, dim, 0);
    check_bf16_as_f32(ctx, t, dim, 7);
  }
}

/* Declares group (n axes) in ctx and records it in t. */
static void declare(gslrt_ctx *ctx, tgroup *t, int n, const int32_t *axes) {
  memset(t, 0, sizeof *t);
  t->n = n;
  if (n > 0)
    memcpy(t->axes, axes, (size_t)n * sizeof *axes);
  t->id = gslrt_declare_group(ctx, n, axes);
}

/* The groups of a mesh of naxes axes: each axis; with two axes both
 * orders of the pair; with three the first and last axes in both orders
 * and all three in reverse order; and the empty group. */
static int declare_groups(gslrt_ctx *ctx, tgroup *ts) {
  int k = 0;
  int32_t axes[GSLRT_MAX_AXES];
  for (int a = 0; a < ctx->naxes; a++)
    axes[0] = a, declare(ctx, &ts[k++], 1, axes);
  for (int a = 0; a < ctx->naxes; a++)
    for (int b = 0; b < ctx->naxes; b++)
      if (a != b && (ctx->naxes == 2 || a + b == 2))
        axes[0] = a, axes[1] = b, declare(ctx, &ts[k++], 2, axes);
  if (ctx->naxes == 3)
    axes[0] = 2, axes[1] = 1, axes[2] = 0, declare(ctx, &ts[k++], 3, axes);
  declare(ctx, &ts[k++], 0, axes);
  return k;
}

/* Checks a private context with the mesh sizes[0..naxes). */
static void check_mesh(gslrt_ctx *world, int naxes, const int64_t *sizes) {
  static const char *names[] = {"a", "b", "c"};
  tgroup ts[16];
  gslrt_ctx c;
  memset(&c, 0, sizeof c);
  c.prog = world->prog, c.info = world->info, c.rank = world->rank, c.nranks = world->nranks;
  gslrt_mpi_check(world, MPI_Comm_dup(world->comm, &c.comm), "MPI_Comm_dup");
  for (int a = 0; a < naxes; a++)
    gslrt_declare_axis(&c, names[a], sizes[a]);
  int k = declare_groups(&c, ts);
  gslrt_check_mesh(&c);
  gslrt_build_groups(&c);
  for (int i = 0; i < k; i++)
    check_group(&c, &ts[i]);
  for (int i = 0; i < k; i++) /* groups of the same axes in two orders */
    for (int j = 0; j < k; j++) {
      uint32_t mi = 0, mj = 0;
      for (int x = 0; x < ts[i].n; x++)
        mi |= 1u << ts[i].axes[x];
      for (int x = 0; x < ts[j].n; x++)
        mj |= 1u << ts[j].axes[x];
      if (i != j && ts[i].n >= 2 && mi == mj)
        for (int32_t dtype = GSLRT_F32; dtype <= GSLRT_BF16; dtype++)
          check_permute(&c, &ts[i], &ts[j], dtype);
    }
  gslrt_free_groups(&c);
  gslrt_mpi_check(world, MPI_Comm_free(&c.comm), "MPI_Comm_free");
}

/* The program's own groups, declared in gsl_setup. */
static tgroup own[3];
static int nown;

static void setup(gslrt_ctx *ctx) {
  int n = 1;
  int32_t zero = 0, twice[2] = {0, 0}, far = GSLRT_MAX_AXES - 1;
  const char *bad = getenv("COLLECTIVES_TEST_BAD");
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  nown = 0;
  if (bad && !strcmp(bad, "repeat"))
    gslrt_declare_group(ctx, 2, twice);
  if (bad && !strcmp(bad, "range"))
    gslrt_declare_group(ctx, 1, &far);
  if (n > 1) {
    gslrt_declare_axis(ctx, "d", n);
    declare(ctx, &own[nown++], 1, &zero);
    checks++;
    if (gslrt_declare_group(ctx, 1, &zero) != own[0].id) {
      failures++;
      fprintf(stderr, "FAIL: the same group declared twice got two ids\n");
    }
  }
  declare(ctx, &own[nown++], 0, NULL);
}

static void step(gslrt_ctx *ctx, int64_t s) {
  static const int64_t meshes[][4] = {
      /* nranks, axes... (0 ends) */
      {1, 1, 0}, {1, 1, 1, 0}, {2, 2, 0}, {2, 2, 1, 0}, {2, 1, 2, 0},
      {3, 3, 0}, {3, 1, 3, 0}, {4, 2, 2, 0}, {4, 1, 4, 0}, {4, 2, 1, 2}};
  for (int i = 0; i < nown; i++)
    check_group(ctx, &own[i]);
  for (size_t m = 0; m < sizeof meshes / sizeof meshes[0]; m++) {
    int naxes = 0;
    if (meshes[m][0] != ctx->nranks)
      continue;
    while (naxes < 3 && meshes[m][1 + naxes] > 0)
      naxes++;
    check_mesh(ctx, naxes, &meshes[m][1]);
  }
  int local[2] = {failures, checks}, total[2];
  gslrt_mpi_check(ctx, MPI_Allreduce(local, total, 2, MPI_INT, MPI_SUM, ctx->comm), "MPI_Allreduce");
  failures = total[0];
  if (ctx->rank == 0) {
    const char *ranks = ctx->nranks == 1 ? "rank" : "ranks";
    if (failures)
      printf("collectives: %d of %d checks failed on %d %s\n", failures, total[1], ctx->nranks,
             ranks);
    else
      printf("collectives: %d checks passed on %d %s\n", total[1], ctx->nranks, ranks);
  }
}

int main(int argc, char **argv) {
  static const gslrt_program_info info = {"tests/collectives_test.c", "none", setup, step, NULL, GSLRT_F32};
  int rc = gslrt_main(argc, argv, &info);
  return rc ? rc : failures ? 1 : 0;
}
