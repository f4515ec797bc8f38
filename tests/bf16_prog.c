/* bf16_prog.c — a program written by hand for tests/bf16.sh: libgslrt's
 * bf16 tensors (issue 19) end to end without the compiler: initializers,
 * --input of a float32 file, --output, checkpoints, resume and the notes
 * of a resume across precisions.
 *
 * gsl_setup declares a mesh [d = N] on N ranks (none on one) and, split
 * over d on their first dimension:
 *   param w: bf16[4, 6] = normal(0.5), stream 7 (BF16_PROG_W=f32: f32)
 *   param r: f32[4, 6] = normal(0.5), stream 7, frozen: the same draws
 *   state "sgd.m.w": bf16[4, 6] = ones
 *   input x: bf16[4, 6], no initializer (--input x=FILE, float32)
 * and outputs w, r, x and m (the state). Step s adds x to w and 1 to m,
 * each in f32 and rounded to bf16 (w of f32 is not rounded); before the
 * first step of a run that was not resumed it checks that w is r rounded
 * (or equal to it, f32) and m is ones (0x3f80), failing otherwise.
 * BF16_PROG_PRECISION=bf16 says the program was compiled with --precision
 * bf16 (gslrt_program_info.precision); it is f32 otherwise. */
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "gslrt.h"

/* The buffers, as the runtime allocated them. */
static void *w, *m, *x;
static float *r;
/* w's dtype (GSLRT_BF16 or GSLRT_F32). */
static int32_t wdtype = GSLRT_BF16;
/* Elements of this rank's tile of each. */
static int64_t local;
/* The first step this run computes has not come yet. */
static int first = 1;

static void setup(gslrt_ctx *ctx) {
  static const int64_t shape[2] = {4, 6};
  int32_t axes[2 * GSLRT_MAX_AXES];
  int n = 1;
  const char *wd = getenv("BF16_PROG_W");
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  for (int i = 0; i < 2 * GSLRT_MAX_AXES; i++)
    axes[i] = -1;
  if (n > 1) {
    gslrt_declare_axis(ctx, "d", n);
    axes[0] = 0;
  }
  local = 4 / n * 6;
  wdtype = wd && !strcmp(wd, "f32") ? GSLRT_F32 : GSLRT_BF16;
  gslrt_declare_tensor(ctx, "w", GSLRT_PARAM, wdtype, 2, shape, axes, &w, GSLRT_INIT_NORMAL, 0.5, 0, 7, 0);
  gslrt_declare_tensor(ctx, "r", GSLRT_PARAM, GSLRT_F32, 2, shape, axes, (void **)&r, GSLRT_INIT_NORMAL, 0.5,
                       0, 7, 1);
  gslrt_declare_tensor(ctx, "sgd.m.w", GSLRT_STATE, GSLRT_BF16, 2, shape, axes, &m, GSLRT_INIT_ONES, 0, 0, 0,
                       0);
  gslrt_declare_tensor(ctx, "x", GSLRT_INPUT, GSLRT_BF16, 2, shape, axes, &x, GSLRT_INIT_NONE, 0, 0, 0, 0);
  gslrt_declare_output(ctx, "w", wdtype, 2, shape, axes, &w);
  gslrt_declare_output(ctx, "r", GSLRT_F32, 2, shape, axes, (void **)&r);
  gslrt_declare_output(ctx, "x", GSLRT_BF16, 2, shape, axes, &x);
  gslrt_declare_output(ctx, "m", GSLRT_BF16, 2, shape, axes, &m);
}

static void step(gslrt_ctx *ctx, int64_t s) {
  uint16_t *wh = w, *mh = m;
  const uint16_t *xh = x;
  float *wf = w;
  for (int64_t i = 0; i < local && first && s == 0; i++) {
    if (wdtype == GSLRT_BF16 ? wh[i] != gslrt_bf16_round(r[i]) : wf[i] != r[i])
      gslrt_fail(ctx, "param w is not its f32 draw rounded to bf16");
    if (mh[i] != 0x3f80)
      gslrt_fail(ctx, "state sgd.m.w is not ones in bf16");
  }
  first = 0;
  for (int64_t i = 0; i < local; i++) {
    if (wdtype == GSLRT_BF16)
      wh[i] = gslrt_bf16_round(gslrt_bf16_widen(wh[i]) + gslrt_bf16_widen(xh[i]));
    else
      wf[i] += gslrt_bf16_widen(xh[i]);
    mh[i] = gslrt_bf16_round(gslrt_bf16_widen(mh[i]) + 1.0f);
  }
}

int main(int argc, char **argv) {
  const char *p = getenv("BF16_PROG_PRECISION");
  gslrt_program_info info = {"tests/bf16_prog.c", "none", setup, step, NULL,
                             p && !strcmp(p, "bf16") ? GSLRT_BF16 : GSLRT_F32};
  return gslrt_main(argc, argv, &info);
}
