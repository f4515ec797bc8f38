/* moe_a2a.c — the two all-to-alls of a sharded moe layer (bench/moe.gsl at
 * -D D=N, N ranks) through libgslrt, against MPI_Alltoall on the same bytes
 * (bench/run.sh runs it under mpiexec -n 2; see bench/README.md).
 *
 * What gslc emits for a moe block whose groups (x: f32[G, S, M] split(0)) and
 * experts (wi, wo split(0)) are split over the mesh axis d of N devices
 * (gslc --emit-spmd shows it):
 *   dispatch: the dispatched tensor, global [E, G, C, M], is local
 *     [E, G/N, C, M] (split on G); gslrt_all_to_all(split dim 0, join dim 1)
 *     sends block j of E to member j and joins what it receives along G:
 *     local [E/N, G, C, M] (split on E), the experts' input;
 *   combine: the experts' output, local [E/N, G, C, M], back:
 *     gslrt_all_to_all(split dim 1, join dim 0): local [E, G/N, C, M].
 * Splitting along dim 0 sends contiguous blocks, joining along dim 1
 * interleaves them (and the combine the other way round): gslrt sends each
 * run of (G/N)·C·M floats that is contiguous on both sides as a message of
 * its own, straight between the buffers (runs under 16 KiB go through its
 * scratch space, packed or unpacked). Each is timed against
 *   raw MPI: MPI_Alltoall on the same buffers and byte count, contiguous
 *     blocks both sides (what the all-to-all costs without the layout); and
 *   MPI datatype: MPI_Alltoall with an MPI_Type_vector on the interleaved
 *     side, so that MPI itself produces gslrt's layout (the alternative to
 *     gslrt's packing).
 * gslrt's results are checked against the expected global layout (values
 * are global element indices) and the datatype way's against gslrt's; a
 * difference prints WRONG RESULT and exits 1.
 *
 * Method as in bench/collectives.c: a GSL program written by hand (gsl_setup
 * declares the mesh [d = N] and its group, so gslrt_main builds the group's
 * communicator as for a compiled program); WARMUP calls of each way, then
 * REPS timed calls of each, alternating, every call after an MPI_Barrier and
 * timed with MPI_Wtime; a call's time is the slowest rank's; the table shows
 * medians in ms and ratios to raw MPI (below 1: faster than raw MPI).
 *
 * Settings (environment): MOE_A2A_SHAPES (global E x G x C x M of each
 * size, space-separated; default "8x4x128x64 16x8x256x256": bench/moe.gsl's
 * SPEC size and the large size, C = ceil(2.0 * 2 * S / E)), BENCH_REPS
 * (default 25), BENCH_WARMUP (default 3). */
#include "harness.h"

#include <stdio.h>

enum { RAW, GSLRT, DTYPE, NWAYS };

/* The element (e, g, c, m) of the global dispatched tensor [E, G, C, M]: its
 * flat index, kept below 2^24 so that it is exact in f32. */
static float value(int64_t e, int64_t g, int64_t c, int64_t m, int64_t G, int64_t C, int64_t M) {
  return (float)((((e * G + g) * C + c) * M + m) % 16777213);
}

/* Fills t, local [e1, g1, C, M] at global offset (e0, g0), with the global pattern. */
static void fill(float *t, int64_t e0, int64_t e1, int64_t g0, int64_t g1, int64_t G, int64_t C,
                 int64_t M) {
  for (int64_t e = 0; e < e1; e++)
    for (int64_t g = 0; g < g1; g++)
      for (int64_t c = 0; c < C; c++)
        for (int64_t m = 0; m < M; m++)
          t[((e * g1 + g) * C + c) * M + m] = value(e0 + e, g0 + g, c, m, G, C, M);
}

/* One all-to-all of direction dir (0: dispatch, 1: combine) the way w. */
static void run(gslrt_ctx *ctx, MPI_Comm comm, int dir, int w, const float *in, float *out,
                const int64_t *shape, int64_t block, MPI_Datatype strided) {
  int rc = MPI_SUCCESS;
  if (w == GSLRT)
    gslrt_all_to_all(ctx, group, GSLRT_F32, in, out, 4, shape, dir == 0 ? 0 : 1, dir == 0 ? 1 : 0,
                     gslrt_group_size(ctx, group) * shape[dir == 0 ? 1 : 0]);
  else if (w == RAW)
    rc = MPI_Alltoall(in, (int)block, MPI_FLOAT, out, (int)block, MPI_FLOAT, comm);
  else if (dir == 0)
    rc = MPI_Alltoall(in, (int)block, MPI_FLOAT, out, 1, strided, comm);
  else
    rc = MPI_Alltoall(in, 1, strided, out, (int)block, MPI_FLOAT, comm);
  gslrt_mpi_check(ctx, rc, "MPI_Alltoall");
}

static void shape_str(char *s, size_t n, const int64_t *d) {
  snprintf(s, n, "[%lld,%lld,%lld,%lld]", (long long)d[0], (long long)d[1], (long long)d[2],
           (long long)d[3]);
}

/* Times both all-to-alls of one layer of global sizes E, G, C, M. */
static void bench(gslrt_ctx *ctx, int64_t E, int64_t G, int64_t C, int64_t M, double *total) {
  MPI_Comm comm = ctx->groups[group].comm;
  int64_t n = gslrt_group_size(ctx, group), r = gslrt_group_index(ctx, group);
  if (E % n || G % n) {
    if (ctx->rank == 0)
      printf("E=%lld G=%lld: not divisible by %lld ranks, skipped\n", (long long)E, (long long)G,
             (long long)n);
    return;
  }
  int64_t count = E * (G / n) * C * M, block = count / n, gl = G / n, el = E / n;
  if (block > 2147483647) {
    if (ctx->rank == 0)
      printf("E=%lld G=%lld C=%lld M=%lld: blocks above INT_MAX elements, skipped\n", (long long)E,
             (long long)G, (long long)C, (long long)M);
    return;
  }
  /* The interleaved side of either direction: from (or to) member j, el runs
   * of gl * C * M floats, G * C * M apart, starting at j * gl * C * M. */
  MPI_Datatype vec, strided;
  gslrt_mpi_check(ctx, MPI_Type_vector((int)el, (int)(gl * C * M), (int)(G * C * M), MPI_FLOAT, &vec),
                  "MPI_Type_vector");
  gslrt_mpi_check(ctx, MPI_Type_create_resized(vec, 0, (MPI_Aint)(gl * C * M * 4), &strided),
                  "MPI_Type_create_resized");
  gslrt_mpi_check(ctx, MPI_Type_commit(&strided), "MPI_Type_commit");
  MPI_Type_free(&vec);

  int64_t split_g[4] = {E, gl, C, M}, split_e[4] = {el, G, C, M};
  float *ing = buffer(ctx, count), *ine = buffer(ctx, count), *expect_e = buffer(ctx, count);
  fill(ing, 0, E, r * gl, gl, G, C, M);            /* the dispatched tensor, split on G */
  fill(expect_e, r * el, el, 0, G, G, C, M);       /* the same, split on E */
  memcpy(ine, expect_e, (size_t)count * 4);        /* the experts' output (same layout) */
  for (int dir = 0; dir < 2; dir++) {
    const float *in = dir == 0 ? ing : ine;
    const float *expect = dir == 0 ? expect_e : ing;
    const int64_t *shape = dir == 0 ? split_g : split_e;
    float *out[NWAYS];
    double *t[NWAYS], med[NWAYS];
    for (int w = 0; w < NWAYS; w++) {
      out[w] = buffer(ctx, count);
      t[w] = malloc((size_t)reps * sizeof *t[w]);
      if (!t[w])
        gslrt_fatal(ctx, "out of memory");
    }
    for (int i = -warmup; i < reps; i++)
      for (int w = 0; w < NWAYS; w++) {
        gslrt_mpi_check(ctx, MPI_Barrier(comm), "MPI_Barrier");
        double t0 = MPI_Wtime();
        run(ctx, comm, dir, w, in, out[w], shape, block, strided);
        double dt = MPI_Wtime() - t0;
        if (i >= 0)
          t[w][i] = dt;
      }
    for (int w = 0; w < NWAYS; w++) {
      gslrt_mpi_check(ctx, MPI_Allreduce(MPI_IN_PLACE, t[w], reps, MPI_DOUBLE, MPI_MAX, comm),
                      "MPI_Allreduce");
      med[w] = median(t[w], reps);
      total[w] += med[w];
      free(t[w]);
    }
    int bad = memcmp(out[GSLRT], expect, (size_t)count * 4) != 0 ||
              memcmp(out[DTYPE], expect, (size_t)count * 4) != 0;
    gslrt_mpi_check(ctx, MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
    failed |= bad;
    if (ctx->rank == 0) {
      char a[64], b[64], sz[32];
      int64_t in_shape[4], out_shape[4];
      memcpy(in_shape, shape, sizeof in_shape);
      memcpy(out_shape, dir == 0 ? split_e : split_g, sizeof out_shape);
      shape_str(a, sizeof a, in_shape);
      shape_str(b, sizeof b, out_shape);
      int mib = count * 4 >= 1 << 20;
      snprintf(sz, sizeof sz, "%lld %s", (long long)(count * 4 >> (mib ? 20 : 10)), mib ? "MiB" : "KiB");
      printf("%-9s %-18s %-18s %8s %9.3f %9.3f %6.2f %9.3f %6.2f%s\n",
             dir == 0 ? "dispatch" : "combine", a, b, sz, 1e3 * med[RAW], 1e3 * med[GSLRT],
             med[GSLRT] / med[RAW], 1e3 * med[DTYPE], med[DTYPE] / med[RAW], bad ? "  WRONG RESULT" : "");
    }
    for (int w = 0; w < NWAYS; w++)
      free(out[w]);
  }
  free(ing);
  free(ine);
  free(expect_e);
  MPI_Type_free(&strided);
}

static void step(gslrt_ctx *ctx, int64_t s) {
  (void)s;
  const char *env = getenv("MOE_A2A_SHAPES");
  const char *src = env && *env ? env : "8x4x128x64 16x8x256x256";
  char *spec = malloc(strlen(src) + 1);
  if (!spec)
    gslrt_fatal(ctx, "out of memory");
  strcpy(spec, src);
  if (ctx->rank == 0) {
    printf("moe all-to-alls through libgslrt against raw MPI: %d ranks, f32, median of %d calls after "
           "%d warm-up calls, ms (slowest rank)\n", ctx->nranks, reps, warmup);
    printf("%-9s %-18s %-18s %8s %9s %9s %6s %9s %6s\n", "", "local in", "local out", "per rank",
           "raw MPI", "gslrt", "ratio", "MPI dtype", "ratio");
  }
  for (char *tok = strtok(spec, " "); tok; tok = strtok(NULL, " ")) {
    long long E, G, C, M;
    if (sscanf(tok, "%lldx%lldx%lldx%lld", &E, &G, &C, &M) != 4 || E < 1 || G < 1 || C < 1 || M < 1)
      gslrt_fatal(ctx, "MOE_A2A_SHAPES: '%s' is not ExGxCxM", tok);
    double total[NWAYS] = {0};
    if (ctx->rank == 0)
      printf("E=%lld G=%lld C=%lld M=%lld (global [E, G, C, M]):\n", E, G, C, M);
    bench(ctx, E, G, C, M, total);
    if (ctx->rank == 0 && total[RAW] > 0)
      printf("%-9s %-18s %-18s %8s %9.3f %9.3f %6.2f %9.3f %6.2f\n", "both", "", "", "",
             1e3 * total[RAW], 1e3 * total[GSLRT], total[GSLRT] / total[RAW], 1e3 * total[DTYPE],
             total[DTYPE] / total[RAW]);
  }
  free(spec);
  if (ctx->rank == 0)
    printf("(ratio = way / raw MPI: below 1 means faster than raw MPI; raw MPI sends and receives "
           "contiguous blocks and so does not produce the layout; \"MPI dtype\" does, with an "
           "MPI_Type_vector)\n");
  fflush(stdout);
}

int main(int argc, char **argv) { return bench_main(argc, argv, "bench/moe_a2a.c", step); }
