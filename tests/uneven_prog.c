/* uneven_prog.c — a program written by hand for tests/uneven.sh: libgslrt's
 * tensors on uneven tiles (the padded layout of gslrt.h, beside
 * gslrt_declare_tensor) end to end without the compiler: initializers,
 * --input files, index checks, --output, checkpoints and resuming on
 * another number of ranks.
 *
 * gsl_setup declares a mesh [d = N] on N ranks (none on one) and, each
 * split over d on the dimension of 5 or 7 (the first, or the last, where
 * the padding lies between the real elements of every row):
 *   param w: f32[5, 4] = normal(0.5), stream 3
 *   param h: bf16[5, 4] = normal(0.5), stream 3 (w's draws, rounded)
 *   param v: i32[5, 4] = uniform(0, 10), stream 4 (floored)
 *   param u: f32[4, 5] = normal(0.5), stream 6
 *   state "sgd.m.u": bf16[4, 5] = ones
 *   input x: f32[7, 3], no initializer (--input x=FILE)
 *   input z: f32[3, 7], no initializer (--input z=FILE)
 *   input ids: i32[7], no initializer (--input ids=FILE), the row indices
 *     of a table of 10 rows (gslrt_declare_index_check)
 *   input y: f32[3, 7] = uniform(-1, 1), stream 5, drawn every step
 * and all of them as outputs (the state as m). On 3 ranks the tiles of 5
 * hold 2, 2, 1 real elements of 2, on 4 ranks 2, 2, 1, 0; those of 7
 * 3, 3, 1 of 3, and 2, 2, 2, 1 of 2.
 *
 * Step s (from 0) checks, on this rank's tile, and fails the run naming
 * what is wrong otherwise: every padding element of every input is zero
 * (the runtime fills them anew; the program scribbles on them, below), and
 * in the first step the run computes, of every param and the state too
 * (initialized, or read from a checkpoint); x and
 * x, z and ids hold batch s % 2 of their files, whose elements the test
 * writes by formula (x[b, i, j] and z[b, i, j] = 100 b + 10 i + j, ids[b,
 * i] = (3 b + 2 i) % 10); y is its draw for step s keyed by global index,
 * uniform01(seed, 5, s, i * 7 + j) scaled to [-1, 1), as on one device.
 * In the first step of a run that was not resumed, w, h, v and u are
 * their initializers' draws keyed by global index (step -1) and the state
 * is ones. Then it adds 0.25 (s + 1) to w and u, 0.5 to h (rounded to
 * bf16), 1 to v and 1 to the state, in their real elements alone, and
 * writes 1000 into every padding
 * element of every tensor, as compiled code may: none of it may reach an
 * output or a checkpoint, and the runtime must zero what it fills again.
 *
 * UNEVEN_PROG_BIG=1 also declares a param big: f32[2, 3] split over d,
 * which on 3 ranks or more is more shards than elements: an error. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What the program writes into padding (exact in f32, bf16 and i32). */
#define JUNK 1000

/* A tensor as the program sees it. */
typedef struct view {
  const char *name;  /* its name, for messages */
  void **buf;        /* its buffer */
  int32_t dtype;     /* its dtype */
  int32_t rank;      /* 1 or 2 */
  int64_t shape[2];  /* its global shape ([n, 1] for a vector) */
  int32_t split;     /* the dimension split over d */
} view;

static void *w, *h, *v, *u, *m, *x, *z, *ids, *y;
static view views[] = {
    {"w", &w, GSLRT_F32, 2, {5, 4}, 0},       {"h", &h, GSLRT_BF16, 2, {5, 4}, 0},
    {"v", &v, GSLRT_I32, 2, {5, 4}, 0},       {"u", &u, GSLRT_F32, 2, {4, 5}, 1},
    {"sgd.m.u", &m, GSLRT_BF16, 2, {4, 5}, 1}, {"x", &x, GSLRT_F32, 2, {7, 3}, 0},
    {"z", &z, GSLRT_F32, 2, {3, 7}, 1},       {"ids", &ids, GSLRT_I32, 1, {7, 1}, 0},
    {"y", &y, GSLRT_F32, 2, {3, 7}, 1},
};
enum { NVIEWS = sizeof views / sizeof views[0] };
/* This rank's block index along d, and the number of blocks. */
static int64_t block, blocks = 1;
/* The first step this run computes has not come yet. */
static int first = 1;

/* The tile of a dimension of n over the blocks, from the layout's
 * definition: c = ceil(n / blocks) elements, the real ones those of
 * [block * c, (block + 1) * c) below n. */
static int64_t tile_of(int64_t n) { return (n + blocks - 1) / blocks; }
static int64_t real_of(int64_t n) {
  int64_t c = tile_of(n), r = 0;
  for (int64_t i = block * c; i < (block + 1) * c; i++)
    r += i < n;
  return r;
}

/* Element e of a buffer of dtype as a double. */
static double get(const void *buf, int32_t dtype, int64_t e) {
  return dtype == GSLRT_F32    ? ((const float *)buf)[e]
         : dtype == GSLRT_BF16 ? gslrt_bf16_widen(((const uint16_t *)buf)[e])
                               : ((const int32_t *)buf)[e];
}

static void put(void *buf, int32_t dtype, int64_t e, double value) {
  if (dtype == GSLRT_F32)
    ((float *)buf)[e] = (float)value;
  else if (dtype == GSLRT_BF16)
    ((uint16_t *)buf)[e] = gslrt_bf16_round((float)value);
  else
    ((int32_t *)buf)[e] = (int32_t)value;
}

static void fail_at(gslrt_ctx *ctx, int64_t s, const char *what, const view *t, const int64_t *at, double got,
                    double want) {
  char msg[256];
  snprintf(msg, sizeof msg, "step %lld: %s %s at global [%lld, %lld] is %.9g, expected %.9g", (long long)s, what,
           t->name, (long long)at[0], (long long)at[1], got, want);
  gslrt_fail(ctx, msg);
}

/* The value tensor t must hold at global position at before step s (want
 * is set, and 1 returned, only where the test knows it). */
static int expected(gslrt_ctx *ctx, const view *t, int64_t s, const int64_t *at, double *want) {
  uint64_t gi = (uint64_t)(at[0] * t->shape[1] + at[1]);
  if (t->buf == &x || t->buf == &z)
    *want = 100 * (s % 2) + 10 * at[0] + at[1];
  else if (t->buf == &ids)
    *want = (3 * (s % 2) + 2 * at[0]) % 10;
  else if (t->buf == &y)
    *want = (float)(-1.0 + 2.0 * gslrt_rng_uniform01(ctx->seed, 5, s, gi));
  else if (!first || s != 0)
    return 0;
  else if (t->buf == &w)
    *want = (float)(0.5 * gslrt_rng_normal01(ctx->seed, 3, -1, gi));
  else if (t->buf == &h)
    *want = gslrt_bf16_widen(gslrt_bf16_round((float)(0.5 * gslrt_rng_normal01(ctx->seed, 3, -1, gi))));
  else if (t->buf == &v)
    *want = floorf((float)(10.0 * gslrt_rng_uniform01(ctx->seed, 4, -1, gi)));
  else if (t->buf == &u)
    *want = (float)(0.5 * gslrt_rng_normal01(ctx->seed, 6, -1, gi));
  else
    *want = 1;
  return 1;
}

/* Calls f for every element of t's tile: its index e in the buffer, its
 * global position, and whether it is real. */
static void each(gslrt_ctx *ctx, int64_t s, const view *t,
                 void (*f)(gslrt_ctx *, int64_t, const view *, int64_t, const int64_t *, int)) {
  int64_t tile[2] = {t->shape[0], t->shape[1]}, at[2];
  tile[t->split] = tile_of(t->shape[t->split]);
  for (int64_t i = 0; i < tile[0]; i++)
    for (int64_t j = 0; j < tile[1]; j++) {
      int64_t local[2] = {i, j};
      at[0] = i, at[1] = j;
      at[t->split] += block * tile[t->split];
      f(ctx, s, t, i * tile[1] + j, at, local[t->split] < real_of(t->shape[t->split]));
    }
}

static void check(gslrt_ctx *ctx, int64_t s, const view *t, int64_t e, const int64_t *at, int real) {
  double got = get(*t->buf, t->dtype, e), want;
  /* inputs are filled anew every step, params and states once (or from a
   * checkpoint): their padding holds the junk of the step before */
  int filled = first || t->buf == &x || t->buf == &z || t->buf == &ids || t->buf == &y;
  if (!real && filled && got != 0)
    fail_at(ctx, s, "padding of", t, at, got, 0);
  if (real && expected(ctx, t, s, at, &want) && got != want)
    fail_at(ctx, s, "element of", t, at, got, want);
}

static void update(gslrt_ctx *ctx, int64_t s, const view *t, int64_t e, const int64_t *at, int real) {
  (void)ctx, (void)at;
  double add = t->buf == &w || t->buf == &u ? 0.25 * (double)(s + 1)
               : t->buf == &h             ? 0.5
               : t->buf == &v || t->buf == &m ? 1
                                              : 0;
  put(*t->buf, t->dtype, e, real ? get(*t->buf, t->dtype, e) + add : JUNK);
}

static void setup(gslrt_ctx *ctx) {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n > 1) {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    gslrt_declare_axis(ctx, "d", n);
    block = r, blocks = n;
  }
  for (int k = 0; k < NVIEWS; k++) {
    const view *t = &views[k];
    int32_t axes[2 * GSLRT_MAX_AXES];
    for (int i = 0; i < 2 * GSLRT_MAX_AXES; i++)
      axes[i] = -1;
    if (n > 1)
      axes[t->split * GSLRT_MAX_AXES] = 0;
    int32_t kind = t->buf == &m ? GSLRT_STATE : t->buf == &x || t->buf == &z || t->buf == &ids || t->buf == &y
                                                     ? GSLRT_INPUT : GSLRT_PARAM;
    int32_t init = t->buf == &m ? GSLRT_INIT_ONES
                   : t->buf == &v || t->buf == &y ? GSLRT_INIT_UNIFORM
                   : kind == GSLRT_PARAM ? GSLRT_INIT_NORMAL : GSLRT_INIT_NONE;
    double a = t->buf == &y ? -1 : init == GSLRT_INIT_NORMAL ? 0.5 : 0, b = t->buf == &y ? 1 : 10;
    uint32_t stream = t->buf == &w || t->buf == &h ? 3 : t->buf == &v ? 4 : t->buf == &y ? 5 : 6;
    gslrt_declare_tensor(ctx, t->name, kind, t->dtype, t->rank, t->shape, axes, t->buf, init, a, b, stream, 0);
    gslrt_declare_output(ctx, t->buf == &m ? "m" : t->name, t->dtype, t->rank, t->shape, axes, t->buf);
  }
  static const int64_t lo[1] = {0}, hi[1] = {7};
  gslrt_declare_index_check(ctx, "ids", 10, lo, hi, "the gather at uneven_prog.c", 0);
  const char *big = getenv("UNEVEN_PROG_BIG");
  static const int64_t bshape[2] = {2, 3};
  static void *bbuf;
  if (big && !strcmp(big, "1")) {
    int32_t axes[2 * GSLRT_MAX_AXES];
    for (int i = 0; i < 2 * GSLRT_MAX_AXES; i++)
      axes[i] = i == 0 && n > 1 ? 0 : -1;
    gslrt_declare_tensor(ctx, "big", GSLRT_PARAM, GSLRT_F32, 2, bshape, axes, &bbuf, GSLRT_INIT_ZEROS, 0, 0, 0, 0);
  }
}

static void step(gslrt_ctx *ctx, int64_t s) {
  for (int k = 0; k < NVIEWS; k++)
    each(ctx, s, &views[k], check);
  first = 0;
  for (int k = 0; k < NVIEWS; k++)
    each(ctx, s, &views[k], update);
}

int main(int argc, char **argv) {
  static const gslrt_program_info info = {"tests/uneven_prog.c", "none", setup, step, NULL, GSLRT_F32, NULL};
  return gslrt_main(argc, argv, &info);
}
