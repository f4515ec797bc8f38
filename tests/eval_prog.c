/* eval_prog.c — a training program with gsl_eval, written by hand for
 * tests/eval.sh: what libgslrt does with --eval-input, --eval-every and
 * gslrt_declare_eval (runtime/eval.c), without the compiler.
 *
 * gsl_setup declares a mesh [d = N] on N ranks (none on one); a param
 * w: f32[2] split over d, ones; an input x: f32[4, 2], rows split over d,
 * without initializer; an input noise: f32[2], replicated, uniform(0, 1)
 * on stream 7; a scalar xsum; the outputs w, x and xsum; and the eval
 * values xsum and wmean.
 *
 * Step s (from 0) checks that w = 1 + s / 2 and that noise holds the draw
 * of step s, sets xsum to the sum of x (over every rank), reports the loss
 * mean(x) * w[0], then adds 1/2 to w.
 *
 * gsl_eval(key) checks that key is GSLRT_EVAL_KEY + j for some j >= 0 and
 * that noise holds the draw keyed by key, not that of step j (the low 32
 * bits of the key); sets xsum to the sum of x (as a compiled gsl_eval
 * writes the step's own buffers), and writes values = {mean(x) * mean(w),
 * xsum, mean(w)}. It also reports a loss of -1, which the runtime must not
 * log as the step's.
 *
 * The environment steers it:
 *   EVAL_PROG_NO_TRAIN=1      info.eval is NULL (a program with no train statement)
 *   EVAL_PROG_NAN=1           gsl_eval's loss is a NaN with its sign bit set
 *   EVAL_PROG_SLEEP_MS=M      gsl_eval sleeps M ms per batch (for the timings) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "gslrt.h"

/* The buffers of w, x, noise and xsum, as the runtime allocated them. */
static float *w, *x, *noise, *xsum;
/* Elements of this rank's tile of w, and of x. */
static int64_t wlocal, xlocal;

static long env_long(const char *name) {
  const char *v = getenv(name);
  return v ? strtol(v, NULL, 10) : 0;
}

static void setup(gslrt_ctx *ctx) {
  static const int64_t wshape[1] = {2}, xshape[2] = {4, 2}, nshape[1] = {2};
  int32_t waxes[GSLRT_MAX_AXES], xaxes[2 * GSLRT_MAX_AXES];
  int n = 1;
  for (int i = 0; i < 2 * GSLRT_MAX_AXES; i++)
    xaxes[i] = -1;
  for (int i = 0; i < GSLRT_MAX_AXES; i++)
    waxes[i] = -1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n > 1) {
    gslrt_declare_axis(ctx, "d", n);
    waxes[0] = xaxes[0] = 0;
  }
  wlocal = 2 / n, xlocal = 8 / n;
  gslrt_declare_tensor(ctx, "w", GSLRT_PARAM, GSLRT_F32, 1, wshape, waxes, (void **)&w,
                       GSLRT_INIT_ONES, 0, 0, 0, 0);
  gslrt_declare_tensor(ctx, "x", GSLRT_INPUT, GSLRT_F32, 2, xshape, xaxes, (void **)&x,
                       GSLRT_INIT_NONE, 0, 0, 0, 0);
  gslrt_declare_tensor(ctx, "noise", GSLRT_INPUT, GSLRT_F32, 1, nshape, NULL, (void **)&noise,
                       GSLRT_INIT_UNIFORM, 0, 1, 7, 0);
  xsum = gslrt_alloc(ctx, 4);
  gslrt_declare_output(ctx, "w", GSLRT_F32, 1, wshape, waxes, (void **)&w);
  gslrt_declare_output(ctx, "x", GSLRT_F32, 2, xshape, xaxes, (void **)&x);
  gslrt_declare_output(ctx, "xsum", GSLRT_F32, 0, NULL, NULL, (void **)&xsum);
  gslrt_declare_eval(ctx, "xsum");
  gslrt_declare_eval(ctx, "wmean");
}

/* Whether noise holds the draw of key (step). */
static int noise_is(gslrt_ctx *ctx, int64_t key) {
  static const int64_t shape[1] = {2};
  float want[2];
  gslrt_rng_fill(ctx, want, GSLRT_UNIFORM, 0, 1, 7, key, 1, shape, NULL, shape);
  return !memcmp(want, noise, sizeof want);
}

/* The sum over every rank of the n floats at p. */
static double global_sum(const float *p, int64_t n) {
  double mine = 0, all = 0;
  for (int64_t i = 0; i < n; i++)
    mine += p[i];
  MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return all;
}

static void step(gslrt_ctx *ctx, int64_t s) {
  for (int64_t i = 0; i < wlocal; i++)
    if (w[i] != 1.0f + 0.5f * (float)s)
      gslrt_fail(ctx, "param w was not kept across steps (or an evaluation changed it)");
  if (!noise_is(ctx, s))
    gslrt_fail(ctx, "input noise does not hold the draw of the step");
  *xsum = (float)global_sum(x, xlocal);
  gslrt_report_loss(ctx, (float)(*xsum / 8.0 * w[0]));
  for (int64_t i = 0; i < wlocal; i++)
    w[i] += 0.5f;
}

static void eval(gslrt_ctx *ctx, int64_t key, float *values) {
  long sleep_ms = env_long("EVAL_PROG_SLEEP_MS");
  if (sleep_ms > 0) {
    struct timespec ts = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
      ;
  }
  if (key < GSLRT_EVAL_KEY)
    gslrt_fail(ctx, "gsl_eval was given a training step's key");
  if (!noise_is(ctx, key) || noise_is(ctx, key - GSLRT_EVAL_KEY))
    gslrt_fail(ctx, "input noise does not hold the draw of the eval key (or holds a step's)");
  *xsum = (float)global_sum(x, xlocal);
  float wmean = (float)(global_sum(w, wlocal) / 2.0);
  values[0] = env_long("EVAL_PROG_NAN") ? copysignf(NAN, -1.0f) : (float)(*xsum / 8.0 * wmean);
  values[1] = *xsum;
  values[2] = wmean;
  gslrt_report_loss(ctx, -1.0f);
}

int main(int argc, char **argv) {
  gslrt_program_info info = {"tests/eval_prog.c", "none", setup, step, eval, GSLRT_F32};
  if (env_long("EVAL_PROG_NO_TRAIN"))
    info.eval = NULL;
  return gslrt_main(argc, argv, &info);
}
