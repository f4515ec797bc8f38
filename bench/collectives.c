/* collectives.c — libgslrt's collectives against the raw MPI calls they
 * wrap, on the same buffers and the same communicator (bench/run.sh runs it
 * under mpiexec -n 2; see bench/README.md).
 *
 * Method. A GSL program written by hand: gsl_setup declares a mesh [d = N]
 * and the group of its one axis, so gslrt_main builds the group's
 * communicator as for a compiled program; gsl_step runs the benchmark. For
 * each collective and each size per rank (the bytes each rank puts in:
 * 64 KiB to 16 MiB of f32) it times, alternately, gslrt's call and the raw
 * call (MPI_Allreduce with MPI_IN_PLACE, MPI_Allgather,
 * MPI_Reduce_scatter_block, MPI_Alltoall) on the group's communicator:
 * WARMUP calls of each, then REPS timed calls of each, every call started
 * after an MPI_Barrier and timed with MPI_Wtime. A call's time is the
 * slowest rank's; the table shows the median over the repetitions and
 * gslrt/raw (below 1: gslrt is faster). gslrt's calls act on the leading
 * dimension, where the tensor already is one block per member, as the raw
 * call assumes; the last column times gslrt along the last dimension of an
 * [n / 64, 64] tensor instead, which adds packing (or unpacking) through its
 * scratch space. gslrt's results are also compared with the raw call's (a
 * row ending in WRONG RESULT and exit status 1 if they differ).
 *
 * Settings (environment): BENCH_REPS (default 25), BENCH_WARMUP (default 3). */
#include "harness.h"

enum { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, NOPS };
static const char *op_names[NOPS] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all"};

/* The three ways of doing op; in/out sized for count f32 per rank. */
enum { RAW, GSLRT, GSLRT_PACKED, NWAYS };

static void run(gslrt_ctx *ctx, MPI_Comm comm, int op, int way, float *in, float *out,
                int64_t count, int64_t g) {
  int64_t lead[1] = {count}, packed[2] = {count / 64, 64};
  const int64_t *shape = way == GSLRT_PACKED ? packed : lead;
  int32_t rank = way == GSLRT_PACKED ? 2 : 1, dim = rank - 1;
  int rc = MPI_SUCCESS;
  switch (op) {
  case ALL_REDUCE:
    if (way == RAW)
      rc = MPI_Allreduce(MPI_IN_PLACE, in, (int)count, MPI_FLOAT, MPI_SUM, comm);
    else
      gslrt_all_reduce(ctx, group, GSLRT_F32, GSLRT_SUM, in, count);
    break;
  case ALL_GATHER:
    if (way == RAW)
      rc = MPI_Allgather(in, (int)count, MPI_FLOAT, out, (int)count, MPI_FLOAT, comm);
    else
      gslrt_all_gather(ctx, group, GSLRT_F32, in, out, rank, shape, dim, g * shape[dim]);
    break;
  case REDUCE_SCATTER:
    if (way == RAW)
      rc = MPI_Reduce_scatter_block(in, out, (int)(count / g), MPI_FLOAT, MPI_SUM, comm);
    else
      gslrt_reduce_scatter(ctx, group, GSLRT_F32, in, out, rank, shape, dim);
    break;
  default:
    if (way == RAW)
      rc = MPI_Alltoall(in, (int)(count / g), MPI_FLOAT, out, (int)(count / g), MPI_FLOAT, comm);
    else
      gslrt_all_to_all(ctx, group, GSLRT_F32, in, out, rank, shape, dim, dim, shape[dim]);
  }
  gslrt_mpi_check(ctx, rc, op_names[op]);
}

/* Fills in with a pattern of the rank, resetting all_reduce's in-place buffer. */
static void fill(float *in, int64_t count, int rank) {
  for (int64_t i = 0; i < count; i++)
    in[i] = (float)((i * 7 + rank * 3) % 17);
}

/* Whether the packed way's all-gather (along the last dimension of
 * [count / 64, 64]) holds the raw call's blocks, reordered. */
static int same_gathered(const float *packed, const float *raw, int64_t count, int64_t g) {
  int same = 1;
  for (int64_t r = 0; r < count / 64; r++)
    for (int64_t j = 0; j < g; j++)
      same &= !memcmp(packed + (r * g + j) * 64, raw + j * count + r * 64, 64 * 4);
  return same;
}

/* Times op at count f32 per rank; prints a row on rank 0; returns 0 if
 * gslrt's results matched the raw call's. (The packed reduce-scatter and
 * all-to-all keep other elements than the raw calls; tests/collectives_test
 * checks those.) */
static int bench(gslrt_ctx *ctx, int op, int64_t count) {
  MPI_Comm comm = ctx->groups[group].comm;
  int64_t g = gslrt_group_size(ctx, group);
  int64_t outn = op == ALL_GATHER ? g * count : op == REDUCE_SCATTER ? count / g : count;
  float *in = buffer(ctx, count), *out[NWAYS];
  double *t[NWAYS], med[NWAYS];
  for (int w = 0; w < NWAYS; w++) {
    out[w] = buffer(ctx, op == ALL_GATHER ? g * count : count);
    t[w] = malloc((size_t)reps * sizeof *t[w]);
    if (!t[w])
      gslrt_fatal(ctx, "out of memory");
  }
  fill(in, count, ctx->rank);
  for (int i = -warmup; i < reps; i++)
    for (int w = 0; w < NWAYS; w++) {
      if (op == ALL_REDUCE)
        fill(in, count, ctx->rank);
      gslrt_mpi_check(ctx, MPI_Barrier(comm), "MPI_Barrier");
      double t0 = MPI_Wtime();
      run(ctx, comm, op, w, in, out[w], count, g);
      double dt = MPI_Wtime() - t0;
      if (i >= 0)
        t[w][i] = dt;
      if (op == ALL_REDUCE)
        memcpy(out[w], in, (size_t)count * 4);
    }
  for (int w = 0; w < NWAYS; w++) {
    gslrt_mpi_check(ctx, MPI_Allreduce(MPI_IN_PLACE, t[w], reps, MPI_DOUBLE, MPI_MAX, comm),
                    "MPI_Allreduce");
    med[w] = median(t[w], reps);
    free(t[w]);
  }
  int bad = memcmp(out[RAW], out[GSLRT], (size_t)outn * 4) != 0;
  if (op == ALL_REDUCE)
    bad |= memcmp(out[RAW], out[GSLRT_PACKED], (size_t)outn * 4) != 0;
  if (op == ALL_GATHER)
    bad |= !same_gathered(out[GSLRT_PACKED], out[RAW], count, g);
  if (ctx->rank == 0) {
    int mib = count * 4 >= 1 << 20;
    printf("%-15s %4lld %s %11.3f %11.3f %8.2f %13.3f %8.2f%s\n", op_names[op],
           (long long)(count * 4 >> (mib ? 20 : 10)), mib ? "MiB" : "KiB", 1e3 * med[RAW],
           1e3 * med[GSLRT], med[GSLRT] / med[RAW], 1e3 * med[GSLRT_PACKED],
           med[GSLRT_PACKED] / med[RAW], bad ? "  WRONG RESULT" : "");
  }
  free(in);
  for (int w = 0; w < NWAYS; w++)
    free(out[w]);
  return bad;
}


static void step(gslrt_ctx *ctx, int64_t s) {
  (void)s;
  static const int64_t sizes[] = {64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20};
  if (ctx->rank == 0) {
    printf("libgslrt collectives against raw MPI: %d ranks, f32, median of %d calls after %d "
           "warm-up calls, ms (slowest rank)\n", ctx->nranks, reps, warmup);
    printf("%-15s %8s %11s %11s %8s %13s %8s\n", "collective", "per rank", "raw MPI", "gslrt",
           "ratio", "gslrt packed", "ratio");
  }
  for (int op = 0; op < NOPS; op++)
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
      failed |= bench(ctx, op, sizes[k] / 4);
  if (ctx->rank == 0)
    printf("(ratio = gslrt / raw MPI: below 1 means gslrt is faster; \"gslrt packed\" acts on "
           "the last dimension of [n/64, 64] and packs blocks)\n");
  fflush(stdout);
}

int main(int argc, char **argv) { return bench_main(argc, argv, "bench/collectives.c", step); }
