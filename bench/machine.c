/* machine.c — the rates gslc --auto-shard prices a plan with, measured on
 * this machine and printed as a machine file (gslc(1), MACHINE FILES):
 * bench/run.sh ONLY=machine runs it under mpiexec -n 2 (one rank a core, as
 * the programs run; see bench/README.md).
 *
 * Every rank measures at once, so that each has what a rank of a running
 * program has (one core, the memory bus shared); rank 0 prints. Each rate
 * is the best of BENCH_REPS repetitions (default 5) of enough calls to fill
 * about 100 ms, after one untimed call:
 *   gemm_f32_gflops   libgslrt's gslrt_sgemm (the kernel compiled programs
 *                     call) on 512 x 512 x 512, 2 m n k FLOP a call;
 *   gemm_bf16_gflops  gslrt_gemm_bf16 on the same shape;
 *   memory_gbs        c[i] = a[i] * b[i] over 8 Mi floats: the bytes written
 *                     a second (the model prices an op by the bytes it
 *                     writes);
 *   rng_gbs           gslrt_rng_fill's normal draws (the kernel a compiled
 *                     program's draws call: Philox and Box-Muller) into
 *                     1 Mi floats: the bytes written a second;
 *   link_gbs          MPI_Allreduce of 4 MiB of f32 in place over every
 *                     rank: the bytes one rank receives (2 b (n - 1) / n,
 *                     the ring's) a second;
 *   latency_us        MPI_Allreduce of one float: its time.
 * The latency is taken out of the all-reduce's time before its rate. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gslrt.h"

static int reps(void) {
  const char *s = getenv("BENCH_REPS");
  int n = s ? atoi(s) : 5;
  return n > 0 ? n : 5;
}

/* the seconds one call of f takes: the best of reps() repetitions of
 * enough calls for about 100 ms, every rank in step */
static double best(void (*f)(void *), void *arg) {
  f(arg);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  f(arg);
  double one = MPI_Wtime() - t0;
  MPI_Allreduce(MPI_IN_PLACE, &one, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  int calls = one > 0 ? (int)(0.1 / one) + 1 : 1000;
  double bestt = 1e30;
  for (int r = 0; r < reps(); r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double s = MPI_Wtime();
    for (int i = 0; i < calls; i++)
      f(arg);
    double t = (MPI_Wtime() - s) / calls;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    bestt = t < bestt ? t : bestt;
  }
  return bestt;
}

enum { N = 512, MEM = 8 << 20, LINK = 1 << 20 };
static float *fa, *fb, *fc, *ma, *mb, *mc, *buf, one_f;
static uint16_t *ha, *hb;

static void gemm_f32(void *arg) {
  (void)arg;
  gslrt_sgemm(1, 0, 0, N, N, N, fa, N, 0, fb, N, 0, fc, N, 0);
}
static void gemm_bf16(void *arg) {
  (void)arg;
  gslrt_gemm_bf16(1, 0, 0, N, N, N, ha, N, 0, hb, N, 0, fc, GSLRT_F32, N, 0);
}
static void mem(void *arg) {
  (void)arg;
  for (int i = 0; i < MEM; i++)
    mc[i] = ma[i] * mb[i];
  __asm__ volatile("" : : "r"(mc) : "memory"); /* the stores are the point */
}
static void rng(void *arg) {
  (void)arg;
  static int64_t step;
  int64_t shape[1] = {MEM / 8};
  gslrt_rng_fill(NULL, mc, GSLRT_NORMAL, 1.0, 0.0, 1, step++, 1, shape, NULL, shape);
}
static void allreduce(void *arg) {
  (void)arg;
  MPI_Allreduce(MPI_IN_PLACE, buf, LINK, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}
static void latency(void *arg) {
  (void)arg;
  MPI_Allreduce(MPI_IN_PLACE, &one_f, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  fa = malloc(sizeof(float) * N * N), fb = malloc(sizeof(float) * N * N), fc = malloc(sizeof(float) * N * N);
  ha = malloc(sizeof(uint16_t) * N * N), hb = malloc(sizeof(uint16_t) * N * N);
  ma = malloc(sizeof(float) * MEM), mb = malloc(sizeof(float) * MEM), mc = malloc(sizeof(float) * MEM);
  buf = malloc(sizeof(float) * LINK);
  if (!fa || !fb || !fc || !ha || !hb || !ma || !mb || !mc || !buf) {
    fprintf(stderr, "bench/machine.c: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (int i = 0; i < N * N; i++) {
    fa[i] = fb[i] = (float)(i % 7) * 0.125f;
    ha[i] = hb[i] = 0x3e00; /* 0.125 */
  }
  for (int i = 0; i < MEM; i++)
    ma[i] = mb[i] = 1.0f;
  for (int i = 0; i < LINK; i++)
    buf[i] = 0.0f;
  double flop = 2.0 * N * N * N;
  double tf = best(gemm_f32, NULL), tb = best(gemm_bf16, NULL), tm = best(mem, NULL), tr = best(rng, NULL);
  double tl = n > 1 ? best(latency, NULL) : 0, ta = n > 1 ? best(allreduce, NULL) : 0;
  double received = 2.0 * sizeof(float) * LINK * (n - 1) / n;
  if (rank == 0) {
    printf("# bench/machine.c on %d ranks (one a core): the rates gslc --auto-shard prices plans with\n", n);
    printf("# (gslc --machine FILE; gslc(1), MACHINE FILES)\n");
    printf("gemm_f32_gflops = %.1f\n", flop / tf / 1e9);
    printf("gemm_bf16_gflops = %.1f\n", flop / tb / 1e9);
    printf("memory_gbs = %.2f\n", sizeof(float) * (double)MEM / tm / 1e9);
    printf("rng_gbs = %.3f\n", sizeof(float) * (double)(MEM / 8) / tr / 1e9);
    if (n > 1) {
      printf("link_gbs = %.2f\n", received / (ta > tl ? ta - tl : ta) / 1e9);
      printf("latency_us = %.1f\n", tl * 1e6);
    } else {
      printf("# one rank: no link to measure (run it under mpiexec -n 2)\n");
    }
  }
  MPI_Finalize();
  return 0;
}
