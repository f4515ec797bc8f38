/* harness.h — what the hand-written GSL programs of bench/ share
 * (collectives.c, moe_a2a.c): a mesh of one axis d over all ranks and its
 * group, declared in gsl_setup so that gslrt_main builds the group's
 * communicator as for a compiled program; the repetition settings; medians;
 * buffers; and main. Included once, by the program's source. */
#ifndef BENCH_HARNESS_H
#define BENCH_HARNESS_H

#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* The group of the mesh's one axis. */
static int32_t group;
/* Repetitions timed (BENCH_REPS), and untimed ones before them (BENCH_WARMUP). */
static int reps, warmup;
/* Set when a result was wrong: the exit status. */
static int failed;

static void setup(gslrt_ctx *ctx) {
  int n = 1;
  int32_t axis = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  gslrt_declare_axis(ctx, "d", n);
  group = gslrt_declare_group(ctx, 1, &axis);
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, by_value);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* count zeroed f32, 64-byte aligned */
static float *buffer(gslrt_ctx *ctx, int64_t count) {
  float *p = aligned_alloc(64, (size_t)count * 4);
  if (!p)
    gslrt_fatal(ctx, "cannot allocate %lld bytes", (long long)count * 4);
  memset(p, 0, (size_t)count * 4);
  return p;
}

static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v && atoi(v) > 0 ? atoi(v) : fallback;
}

/* gslrt_main on the program prog whose step is step; non-zero if it
 * failed or a result was wrong */
static int bench_main(int argc, char **argv, const char *prog, void (*step)(gslrt_ctx *, int64_t)) {
  gslrt_program_info info = {prog, "none", setup, step, NULL, GSLRT_F32};
  reps = env_int("BENCH_REPS", 25);
  warmup = env_int("BENCH_WARMUP", 3);
  int rc = gslrt_main(argc, argv, &info);
  return rc ? rc : failed;
}

#endif
