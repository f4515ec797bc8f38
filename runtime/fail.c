/* fail.c — the bottom of the runtime: how it ends a run and says why.
 * Every other runtime file calls these; they call none of them.
 *
 * Errors. A usage error is found by every rank alike: rank 0 prints
 * "PROG: error: CAUSE" and "Try 'PROG --help'.", every rank exits 2. A run-
 * time error every rank reaches together (a bad mesh, a bad input file,
 * decided on rank 0 and broadcast: gslrt_rank0_verdict) prints "PROG: rank
 * 0: error: CAUSE" once and every rank exits 1. A run-time error of one
 * rank (gslrt_fail, a failed read or allocation, an MPI error) prints
 * "PROG: rank R: error: CAUSE" and calls MPI_Abort(MPI_COMM_WORLD), which
 * ends every rank through the process manager: nothing waits forever on a
 * dead peer. With one rank it finalizes and exits 1 instead.
 *
 * Messages go to stderr in one write(2) each, so that the lines of ranks
 * failing together never interleave, after erasing the progress line that
 * main.c may have left on the terminal. */
#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The context of the running gslrt_main, for errors raised without one. */
static gslrt_ctx *current;
/* A progress line is on the terminal and must be erased before printing. */
static int progress_shown;

void gslrt_set_current(gslrt_ctx *ctx) { current = ctx; }

void gslrt_progress_shown(void) { progress_shown = 1; }

void gslrt_erase_progress(void) {
  if (progress_shown) {
    fputs("\r\033[K", stderr);
    fflush(stderr);
    progress_shown = 0;
  }
}

void gslrt_exit(gslrt_ctx *ctx, int code) {
  int up = 0, down = 0;
  fflush(stdout);
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (up && !down) {
    if (ctx && ctx->comm != MPI_COMM_NULL)
      MPI_Comm_free(&ctx->comm);
    MPI_Finalize();
  }
  exit(code);
}

/* Writes the prefix, the message, then (if given) a newline and the tail,
 * and a final newline, to stderr with one write(2), so that the lines of
 * ranks failing together never interleave (stderr is unbuffered: fprintf
 * would write the prefix and the message separately). A message too long
 * for the buffer is cut, keeping its newline. */
static void say(const char *prefix, const char *tail, const char *fmt, va_list ap) {
  char buf[2 * GSLRT_ERRLEN];
  size_t cap = sizeof buf - 2, n = (size_t)snprintf(buf, cap, "%s", prefix);
  if (n < cap)
    n += (size_t)vsnprintf(buf + n, cap - n, fmt, ap);
  if (n < cap && tail)
    n += (size_t)snprintf(buf + n, cap - n, "\n%s", tail);
  if (n > cap - 1)
    n = cap - 1;
  buf[n++] = '\n';
  for (size_t done = 0; done < n;) {
    ssize_t k = write(STDERR_FILENO, buf + done, n - done);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    done += (size_t)k;
  }
}

void gslrt_say(const char *prefix, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  say(prefix, NULL, fmt, ap);
  va_end(ap);
}

void gslrt_fatal(gslrt_ctx *ctx, const char *fmt, ...) {
  va_list ap;
  int rank = 0, nranks = 1, up = 0;
  if (!ctx)
    ctx = current;
  MPI_Initialized(&up);
  if (ctx)
    rank = ctx->rank, nranks = ctx->nranks;
  else if (up)
    MPI_Comm_rank(MPI_COMM_WORLD, &rank), MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  gslrt_erase_progress();
  fflush(stdout);
  char prefix[256];
  snprintf(prefix, sizeof prefix, "%s: rank %d: error: ", ctx ? ctx->prog : "gslrt", rank);
  va_start(ap, fmt);
  say(prefix, NULL, fmt, ap);
  va_end(ap);
  /* MPI_COMM_WORLD, not our duplicate: MPICH's ch4 aborts the world through
   * the process manager (PMI_Abort), but any other communicator by sending
   * abort messages that a peer already in MPI_Finalize never answers. */
  if (up && nranks > 1)
    MPI_Abort(MPI_COMM_WORLD, 1);
  gslrt_exit(ctx, 1);
}

void gslrt_fail_all(gslrt_ctx *ctx, const char *fmt, ...) {
  va_list ap;
  if (ctx->rank == 0) {
    char prefix[256];
    gslrt_erase_progress();
    fflush(stdout);
    snprintf(prefix, sizeof prefix, "%s: rank 0: error: ", ctx->prog);
    va_start(ap, fmt);
    say(prefix, NULL, fmt, ap);
    va_end(ap);
  }
  gslrt_exit(ctx, 1);
}

void gslrt_usage_error(gslrt_ctx *ctx, const char *fmt, ...) {
  va_list ap;
  if (ctx->rank == 0) {
    char prefix[256], tail[256];
    snprintf(prefix, sizeof prefix, "%s: error: ", ctx->prog);
    snprintf(tail, sizeof tail, "Try '%s --help'.", ctx->prog);
    va_start(ap, fmt);
    say(prefix, tail, fmt, ap);
    va_end(ap);
  }
  gslrt_exit(ctx, 2);
}

void gslrt_rank0_verdict(gslrt_ctx *ctx, int status, const char *err) {
  gslrt_mpi_check(ctx, MPI_Bcast(&status, 1, MPI_INT, 0, ctx->comm), "MPI_Bcast");
  if (status == 2)
    gslrt_usage_error(ctx, "%s", err);
  if (status != 0)
    gslrt_fail_all(ctx, "%s", err);
}

void gslrt_mpi_check(gslrt_ctx *ctx, int rc, const char *call) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
      snprintf(msg, sizeof msg, "MPI error %d", rc);
    gslrt_fatal(ctx, "%s failed: %s", call, msg);
  }
}

void gslrt_fail(gslrt_ctx *ctx, const char *msg) { gslrt_fatal(ctx, "%s", msg); }
