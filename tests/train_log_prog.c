/* train_log_prog.c — a training program written by hand for
 * tests/train_log.sh: what libgslrt does with gslrt_report_loss (the log
 * line, --metrics, stopping on a non-finite loss) and with optimizer state
 * tensors (GSLRT_STATE), without the compiler.
 *
 * gsl_setup declares a mesh [d = N] on N ranks (none on one), a param
 * w: f32[2] split over d, initialized to ones, the state "adam.m.w" of the
 * same shape, also ones (the runtime must use a state's initializer once,
 * before step 0, and keep the state across steps), and w as an output.
 * Step s (from 0) checks that w = 1 + s / 2 and adam.m.w = 1 + s on this
 * rank's tile, fails the run if not, then adds 1/2 to w and 1 to the state,
 * and reports the loss 1 / (s + 1), rounded to f32.
 *
 * The environment steers it:
 *   TRAIN_LOG_BAD_STEP=K   step K (from 1) reports TRAIN_LOG_BAD instead:
 *   TRAIN_LOG_BAD=nan|inf|-inf   (default nan)
 *   TRAIN_LOG_NO_LOSS=1    no step reports a loss
 *   TRAIN_LOG_SIGNALS=1    declares the signals lr (logged as lr) and
 *                          grad_norm (as gnorm); step s (from 0) reports lr
 *                          0.125 / (s + 1) and grad_norm s + 1, but inf at
 *                          step 3 (from 1)
 *   TRAIN_LOG_SLEEP_MS=M   every step sleeps M ms first (for the timings)
 *   TRAIN_LOG_BUILD=TEXT   the program's build record (gslrt_program_info.build,
 *                          which gslc fills; none without it) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "gslrt.h"

/* The buffers of w and its state, as the runtime allocated them. */
static float *w, *m;
/* Elements of this rank's tile of each. */
static int64_t local;

static long env_long(const char *name) {
  const char *v = getenv(name);
  return v ? strtol(v, NULL, 10) : 0;
}

static void setup(gslrt_ctx *ctx) {
  static const int64_t shape[1] = {2};
  int32_t axes[GSLRT_MAX_AXES] = {-1, -1, -1, -1, -1, -1, -1, -1};
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n > 1) {
    gslrt_declare_axis(ctx, "d", n);
    axes[0] = 0;
  }
  local = 2 / n;
  gslrt_declare_tensor(ctx, "w", GSLRT_PARAM, GSLRT_F32, 1, shape, axes, (void **)&w,
                       GSLRT_INIT_ONES, 0, 0, 0, 0);
  gslrt_declare_tensor(ctx, "adam.m.w", GSLRT_STATE, GSLRT_F32, 1, shape, axes, (void **)&m,
                       GSLRT_INIT_ONES, 0, 0, 0, 0);
  gslrt_declare_output(ctx, "w", GSLRT_F32, 1, shape, axes, (void **)&w);
  if (env_long("TRAIN_LOG_SIGNALS")) {
    gslrt_declare_signal(ctx, "lr", "lr", 0);
    gslrt_declare_signal(ctx, "grad_norm", "gnorm", 0);
  }
}

static void step(gslrt_ctx *ctx, int64_t s) {
  long sleep_ms = env_long("TRAIN_LOG_SLEEP_MS");
  if (sleep_ms > 0) {
    struct timespec ts = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
      ;
  }
  for (int64_t i = 0; i < local; i++) {
    if (w[i] != 1.0f + 0.5f * (float)s)
      gslrt_fail(ctx, "param w was not kept across steps");
    if (m[i] != 1.0f + (float)s)
      gslrt_fail(ctx, "state adam.m.w was not initialized once and kept across steps");
    w[i] += 0.5f;
    m[i] += 1.0f;
  }
  if (env_long("TRAIN_LOG_SIGNALS")) {
    float lr = 0.125f / (float)(s + 1), norm = s == 2 ? INFINITY : (float)(s + 1);
    gslrt_report_signal(ctx, 0, &lr);
    gslrt_report_signal(ctx, 1, &norm);
  }
  if (env_long("TRAIN_LOG_NO_LOSS"))
    return;
  float loss = 1.0f / (float)(s + 1);
  if (s + 1 == env_long("TRAIN_LOG_BAD_STEP")) {
    const char *bad = getenv("TRAIN_LOG_BAD");
    loss = !bad || !strcmp(bad, "nan") ? NAN : !strcmp(bad, "-inf") ? -INFINITY : INFINITY;
  }
  gslrt_report_loss(ctx, loss);
}

int main(int argc, char **argv) {
  static gslrt_program_info info = {"tests/train_log_prog.c", "none", setup, step, NULL, GSLRT_F32};
  info.build = getenv("TRAIN_LOG_BUILD");
  return gslrt_main(argc, argv, &info);
}
