/* fail.c — the bottom of the runtime: how it ends a run and says why.
 * Every other runtime file calls these; they call none of them.
 *
 * Errors. A usage error is found by every rank alike: rank 0 prints
 * "PROG: error: CAUSE" and "Try 'PROG --help'.", every rank exits 2. A run-
 * time error every rank reaches together (a bad mesh, a bad input file,
 * decided on rank 0 and broadcast: health.c's gslrt_rank0_verdict) prints "PROG: rank
 * 0: error: CAUSE" once and every rank exits 1. A run-time error of one
 * rank (gslrt_fail, a failed read or allocation, an MPI error) prints
 * "PROG: rank R: error: CAUSE" and calls MPI_Abort(MPI_COMM_WORLD), which
 * ends every rank through the process manager: nothing waits forever on a
 * dead peer. With one rank it finalizes and exits 1 instead.
 *
 * Messages go to stderr in one write(2) each, so that the lines of ranks
 * failing together never interleave, after erasing the progress line that
 * main.c may have left on the terminal. What the run was doing (training
 * step or evaluation) and where an element lies are said alike by every
 * message that names them (gslrt_phase, gslrt_position); an index out of
 * range that compiled code finds (gslrt_fail_index) is one rank's error.
 *
 * Deadlines. A blocking MPI call that has no non-blocking form (making a
 * communicator, MPI-IO's open, view, writes, reads, sync and close,
 * MPI_Finalize) cannot be polled by the watchdog (health.c); such a call
 * runs under a deadline instead (gslrt_deadline, gslrt_deadline_off):
 * --collective-timeout seconds of SIGALRM (setitimer), whose handler
 * writes a line composed when the deadline was set,
 *   prog: rank 0: error: the MPI-IO write of param w (c/step-00000004.tmp.9/w.npy) did not complete
 *   within 3 s (writing the checkpoint of step 4): a blocking MPI call, which ranks had reached it is not known
 * and ends this rank with GSLRT_EXIT_HUNG (_exit: nothing else is safe in
 * a signal handler), after the pause vfatal makes too; the process
 * manager then ends every other rank, a stopped one included. The
 * start-up is one such call: MPI_Init waits for every rank of the job (a
 * rank stopped before it, or inside it, holds the others there for ever),
 * so main.c sets its deadline before MPI_Init (gslrt_deadline_startup),
 * from --collective-timeout as found in argv, before the options are
 * parsed (they need MPI: usage errors are said by rank 0 alone).
 *
 * The end. Past the work, a call that does not return changes nothing
 * of the run's outcome: MPI_Finalize (seen never to return under UCX's
 * TCP transport) runs under a deadline whose handler ends the rank with
 * the run's own status, 0 after the work was done and agreed, and
 * MPI_Abort under one of GSLRT_ABORT_GRACE seconds, so that a rank cut
 * off from the process manager ends itself rather than outlive its job
 * (gslrt_deadline_exit; each says so in a warning line). */
#include "internal.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* The context of the running gslrt_main, for errors raised without one. */
static gslrt_ctx *current;
/* A progress line is on the terminal and must be erased before printing. */
static int progress_shown;
/* Ends gslrt_deadline_exit's guard once MPI_Finalize has returned. */
static void guard_off(void);

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
    if (ctx && ctx->nranks > 1) { /* the status is the run's, whatever MPI_Finalize does */
      char why[64];
      snprintf(why, sizeof why, "the run ends with status %d", code);
      gslrt_deadline_exit(ctx->rank, ctx->prog, ctx->opts.collective_timeout, "MPI_Finalize", code, why, true);
    }
    if (ctx && ctx->comm != MPI_COMM_NULL)
      MPI_Comm_free(&ctx->comm);
    MPI_Finalize();
    guard_off();
  }
  exit(code);
}

/* Writes the prefix, the message, then (if given) a newline and the tail,
 * and a final newline, to stderr with one write(2), so that the lines of
 * ranks failing together never interleave (stderr is unbuffered: fprintf
 * would write the prefix and the message separately). The message is one
 * line whatever it quotes: a control byte in it (a file name with a
 * newline, say) is written \xNN. A message too long for the buffer is
 * cut, keeping its newline. */
static void say(const char *prefix, const char *tail, const char *fmt, va_list ap) {
  char buf[2 * GSLRT_ERRLEN], msg[GSLRT_ERRLEN];
  size_t cap = sizeof buf - 2, n = (size_t)snprintf(buf, cap, "%s", prefix);
  vsnprintf(msg, sizeof msg, fmt, ap);
  for (const unsigned char *c = (const unsigned char *)msg; *c && n < cap; c++)
    n += (size_t)(*c < 0x20 || *c == 0x7f ? snprintf(buf + n, cap - n, "\\x%02x", *c) : snprintf(buf + n, cap - n, "%c", *c));
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

/* gslrt_fatal's body: the message, then every rank ends with code. */
static void vfatal(gslrt_ctx *ctx, int code, const char *fmt, va_list ap) __attribute__((noreturn));
static void vfatal(gslrt_ctx *ctx, int code, const char *fmt, va_list ap) {
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
  say(prefix, NULL, fmt, ap);
  /* MPI_COMM_WORLD, not our duplicate: MPICH's ch4 aborts the world through
   * the process manager (PMI_Abort), but any other communicator by sending
   * abort messages that a peer already in MPI_Finalize never answers. */
  if (up && nranks > 1) {
    /* mpiexec (Hydra) may tear the job down on MPI_Abort before its proxy
     * has forwarded what this rank just wrote to stderr (seen here under
     * load: 2 runs in 30 lost the message, and MPICH's own abort line too);
     * a short pause lets the proxy forward the line first */
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL);
    /* MPI_Abort reaches the other ranks through the process manager; cut
     * off from it (a lost link, a launcher gone), it may never return, and
     * this rank would outlive its job */
    gslrt_deadline_exit(rank, ctx ? ctx->prog : "gslrt", GSLRT_ABORT_GRACE, "MPI_Abort", code,
                        "the process manager may be out of reach", false);
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  gslrt_exit(ctx, code);
}

void gslrt_fatal(gslrt_ctx *ctx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfatal(ctx, 1, fmt, ap);
}

void gslrt_fatal_code(gslrt_ctx *ctx, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfatal(ctx, code, fmt, ap);
}

static void vfail_all(gslrt_ctx *ctx, int code, const char *fmt, va_list ap) __attribute__((noreturn));
static void vfail_all(gslrt_ctx *ctx, int code, const char *fmt, va_list ap) {
  if (ctx->rank == 0) {
    char prefix[256];
    gslrt_erase_progress();
    fflush(stdout);
    snprintf(prefix, sizeof prefix, "%s: rank 0: error: ", ctx->prog);
    say(prefix, NULL, fmt, ap);
  }
  gslrt_exit(ctx, code);
}

void gslrt_fail_all(gslrt_ctx *ctx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail_all(ctx, 1, fmt, ap);
}

void gslrt_fail_all_code(gslrt_ctx *ctx, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail_all(ctx, code, fmt, ap);
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

void gslrt_doing(gslrt_ctx *ctx, const char *fmt, ...) {
  va_list ap;
  ctx->doing[0] = '\0';
  if (!fmt)
    return;
  va_start(ap, fmt);
  vsnprintf(ctx->doing, sizeof ctx->doing, fmt, ap);
  va_end(ap);
}

void gslrt_phase(const gslrt_ctx *ctx, int with_batch, char *buf, size_t len) {
  if (ctx->doing[0])
    snprintf(buf, len, "%s", ctx->doing);
  else if (ctx->generating)
    snprintf(buf, len, "generating byte %lld", (long long)ctx->step + 1);
  else if (ctx->held_out < 0)
    snprintf(buf, len, "training step %lld", (long long)ctx->step + 1);
  else if (with_batch)
    snprintf(buf, len, "evaluation after step %lld, held-out batch %lld of %lld", (long long)ctx->step,
             (long long)ctx->held_out, (long long)ctx->eval_batches);
  else
    snprintf(buf, len, "evaluation after step %lld", (long long)ctx->step);
}

void gslrt_position(int32_t rank, const int64_t *shape, int64_t e, const int64_t *offset, char *buf,
                    size_t len) {
  int64_t at[GSLRT_MAX_RANK];
  for (int32_t d = rank - 1; d >= 0; d--) {
    at[d] = shape[d] > 0 ? e % shape[d] : 0;
    e = shape[d] > 0 ? e / shape[d] : 0;
  }
  size_t n = 0;
  buf[0] = '\0';
  for (int32_t d = 0; d < rank && n < len; d++)
    n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "[",
                          (long long)(at[d] + (offset ? offset[d] : 0)));
  if (rank > 0 && n < len)
    snprintf(buf + n, len - n, "]");
}

void gslrt_type_str(char *buf, size_t len, int32_t dtype, int32_t rank, const int64_t *shape) {
  size_t n = (size_t)snprintf(buf, len, "%s[", gslrt_dtype_name(dtype));
  for (int32_t i = 0; i < rank && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (n < len)
    snprintf(buf + n, len - n, "]");
}

/* The backstop for indices the code computes (tokens + 1, an argmax): an
 * input's own are checked as they are read (tensors.c). Reached on the
 * failure path only, so it scans the tile again for the first bad index. */
void gslrt_fail_index(gslrt_ctx *ctx, const char *what, int64_t rows, const int32_t *idx, int32_t rank,
                      const int64_t *local_shape, const int64_t *offset) {
  int64_t count = 1, e = 0;
  char at[32 * GSLRT_MAX_RANK], phase[160];
  gslrt_phase(ctx, 1, phase, sizeof phase);
  if (rank < 0 || rank > GSLRT_MAX_RANK)
    rank = 0, count = 0;
  for (int32_t d = 0; d < rank; d++)
    count *= local_shape[d];
  while (e < count && idx[e] >= 0 && idx[e] < rows)
    e++;
  if (e == count) /* not reached: the compiled check saw one */
    gslrt_fatal(ctx, "%s: an index is out of range for its table of %lld rows (%s)", what, (long long)rows,
                phase);
  gslrt_position(rank, local_shape, e, offset, at, sizeof at);
  gslrt_fatal(ctx, "%s: index %d%s%s is out of range for its table of %lld rows (%s)", what, (int)idx[e],
              *at ? " at " : "", at, (long long)rows, phase);
}

/* ---- deadlines over blocking calls ------------------------------------------ */

/* Set between gslrt_deadline_exit(..., guard) and the return of the call
 * it guards (MPI_Finalize): the rank's end is the run's own. */
static volatile sig_atomic_t guard_on;
/* The process manager's PMI-1 connection (hydra's PMI_FD), read when the
 * guard is set; -1 without one. */
static int pm_fd = -1;

/* Tells the process manager that this rank has finalized, as MPI_Finalize
 * would have: PMI-1's "cmd=finalize", then its ack waited for (at most
 * 2 s; the manager answers at once). Hydra takes a rank that ends without
 * it for a failed one: it kills the job's other ranks (a rank still
 * writing its warning, say) and may report status 1 for a rank that ended
 * 0. Async-signal-safe. MSG_NOSIGNAL: a connection already closed (the
 * call had finalized with the manager before it was cut short) raises no
 * SIGPIPE, and then no ack is waited for. */
static void tell_pm_finalized(void) {
  static const char cmd[] = "cmd=finalize\n", ack[] = "cmd=finalize_ack";
  if (pm_fd < 0 || send(pm_fd, cmd, sizeof cmd - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof cmd - 1))
    return;
  char buf[512];
  size_t have = 0;
  for (int tries = 0; tries < 16; tries++) {
    struct pollfd p = {pm_fd, POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0)
      return;
    ssize_t k = read(pm_fd, buf + have, sizeof buf - 1 - have);
    if (k <= 0)
      return;
    have += (size_t)k;
    buf[have] = 0;
    if (strstr(buf, ack))
      return;
    if (have > sizeof buf / 2) { /* keep the tail: an ack split across reads */
      memmove(buf, buf + have - sizeof ack, sizeof ack);
      have = sizeof ack;
    }
  }
}

/* The line the handler writes, composed when the deadline was set. */
static char deadline_line[2 * GSLRT_ERRLEN];
static size_t deadline_len;
/* The status the handler ends the rank with: GSLRT_EXIT_HUNG, or the
 * run's own past MPI_Finalize and MPI_Abort (gslrt_deadline_exit). */
static volatile sig_atomic_t deadline_code = GSLRT_EXIT_HUNG;

static void on_deadline(int sig) {
  (void)sig;
  for (size_t done = 0; done < deadline_len;) {
    ssize_t k = write(STDERR_FILENO, deadline_line + done, deadline_len - done);
    if (k <= 0)
      break;
    done += (size_t)k;
  }
  struct timespec pause = {0, 200 * 1000 * 1000}; /* as vfatal's: the proxy forwards the line first */
  nanosleep(&pause, NULL);
  if (guard_on)
    tell_pm_finalized();
  _exit(deadline_code);
}

/* Installs on_deadline for SIGALRM (once) and sets the timer to limit
 * seconds: 0, or -1 with errno set. */
static int arm(double limit) {
  static int installed;
  if (!installed) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_deadline;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL) != 0)
      return -1;
    installed = 1;
  }
  struct itimerval it = {{0, 0}, {(time_t)limit, (suseconds_t)((limit - (double)(time_t)limit) * 1e6)}};
  if (it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0)
    it.it_value.tv_usec = 1;
  return setitimer(ITIMER_REAL, &it, NULL);
}

void gslrt_deadline_startup(const char *prog, double limit) {
  const char *rank = getenv("PMI_RANK"), *size = getenv("PMI_SIZE");
  if (limit <= 0 || !size || atoi(size) < 2) /* one rank waits on nobody; a singleton has no PMI_SIZE */
    return;
  int n = snprintf(deadline_line, sizeof deadline_line,
                   "%s: rank %s: error: the start-up (MPI_Init and the run's communicator) did not complete within "
                   "%g s: a blocking MPI call, which ranks had reached it is not known (a rank stopped, or lost "
                   "with its host, before or while it started)\n",
                   prog, rank && *rank ? rank : "?", limit);
  deadline_len = n < 0 ? 0 : (size_t)n < sizeof deadline_line ? (size_t)n : sizeof deadline_line - 1;
  if (arm(limit) != 0) {
    fprintf(stderr, "%s: rank %s: error: cannot set the start-up's deadline: %s\n", prog, rank ? rank : "?",
            strerror(errno));
    exit(1);
  }
}

void gslrt_deadline(gslrt_ctx *ctx, const char *fmt, ...) {
  char what[GSLRT_ERRLEN], phase[160];
  double limit = ctx->opts.collective_timeout;
  va_list ap;
  if (limit <= 0 || ctx->nranks < 2)
    return;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  gslrt_phase(ctx, 1, phase, sizeof phase);
  int n = snprintf(deadline_line, sizeof deadline_line,
                   "%s%s: rank %d: error: %s did not complete within %g s (%s): a blocking MPI call, which ranks had "
                   "reached it is not known\n",
                   progress_shown ? "\r\033[K" : "", ctx->prog, ctx->rank, what, limit, phase);
  deadline_len = n < 0 ? 0 : (size_t)n < sizeof deadline_line ? (size_t)n : sizeof deadline_line - 1;
  deadline_code = GSLRT_EXIT_HUNG;
  if (arm(limit) != 0)
    gslrt_fatal(ctx, "cannot set the deadline's timer: %s", strerror(errno));
}

/* Past the deadline_exit, what else could end the rank inside the call
 * ends it with the same status and a warning: exit() from inside MPI
 * (MPICH's error handler, seen as a rank's "EXIT CODE: 1" in a hung
 * MPI_Finalize) and a hang-up, a termination or a broken pipe (the
 * process manager's clean-up, or its connection gone). */
static char guard_line[2 * GSLRT_ERRLEN];
static size_t guard_len;

static void write_line(const char *line, size_t len) {
  for (size_t done = 0; done < len;) {
    ssize_t k = write(STDERR_FILENO, line + done, len - done);
    if (k <= 0)
      break;
    done += (size_t)k;
  }
}

static void on_guard_signal(int sig) {
  (void)sig;
  write_line(guard_line, guard_len);
  tell_pm_finalized();
  _exit(deadline_code);
}

static void guard_off(void) { guard_on = 0; }

static void on_guard_exit(void) {
  if (!guard_on)
    return;
  fflush(NULL);
  write_line(guard_line, guard_len);
  tell_pm_finalized();
  _exit(deadline_code);
}

void gslrt_deadline_exit(int rank, const char *prog, double limit, const char *call, int code, const char *why,
                         bool guard) {
  if (limit <= 0)
    return;
  int n = snprintf(deadline_line, sizeof deadline_line,
                   "%s%s: rank %d: warning: %s did not return within %g s; %s: this rank ends itself with status %d\n",
                   progress_shown ? "\r\033[K" : "", prog, rank, call, limit, why, code);
  deadline_len = n < 0 ? 0 : (size_t)n < sizeof deadline_line ? (size_t)n : sizeof deadline_line - 1;
  n = snprintf(guard_line, sizeof guard_line,
               "%s: rank %d: warning: %s was ended from inside (an exit, or a signal from the process manager); %s: "
               "this rank ends with status %d\n",
               prog, rank, call, why, code);
  guard_len = n < 0 ? 0 : (size_t)n < sizeof guard_line ? (size_t)n : sizeof guard_line - 1;
  deadline_code = code;
  if (!guard) {
    arm(limit); /* failing, the call is waited for as before */
    return;
  }
  const char *fd = getenv("PMI_FD");
  pm_fd = fd && *fd ? atoi(fd) : -1;
  static int registered;
  if (!registered)
    registered = atexit(on_guard_exit) == 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_guard_signal;
  sigemptyset(&sa.sa_mask);
  int sigs[] = {SIGHUP, SIGTERM, SIGINT, SIGPIPE};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
    sigaction(sigs[i], &sa, NULL);
  guard_on = guard;
  arm(limit); /* failing, the call is waited for as before */
}

void gslrt_deadline_off(gslrt_ctx *ctx) {
  struct itimerval off = {{0, 0}, {0, 0}};
  (void)ctx;
  guard_off(); /* the call returned: exit() is the run's own again */
  setitimer(ITIMER_REAL, &off, NULL); /* whoever armed it: the start-up's has no options yet */
}
