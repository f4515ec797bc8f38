/* main.c — gslrt_main, the life of a compiled GSL program:
 *
 *   under a process manager, ask the kernel to kill this rank when its
 *   launcher (hydra's proxy) is gone, so that no rank outlives its job;
 *   MPI_Init, under a deadline of --collective-timeout (read from argv
 *   before it: every rank waits there for the others); parse the
 *   options (usage errors: exit 2); duplicate
 *   MPI_COMM_WORLD, errors returned on the duplicate; --help / --version;
 *   parse the program's build record (ckpt_manifest.c); gsl_setup
 *   (declarations; the mesh is checked against the ranks);
 *   build the communicators of the declared groups of mesh axes;
 *   with --generate, generate text in place of all that follows, loading
 *   the params itself (generate.c);
 *   with --metrics or --checkpoint, make the run's provenance record
 *   (provenance.c: the ranks' hosts gathered once);
 *   match --input/--output/--eval-input with the declarations (eval.c);
 *   refuse a --metrics or --output file inside the --checkpoint
 *   directory (through links and ".."); check the output targets and
 *   the input and held-out files; take the --checkpoint directory's
 *   lock and check what it holds (ckpt_lock.c; a directory another
 *   run holds ends the run with status 5 before it has written
 *   anything); create the --metrics file;
 *   initialize params and states; with --resume, restore them, the seed
 *   and the step counter k from the newest checkpoint (checkpoint.c);
 *   for each step k..--steps: bind inputs (checking the indices read;
 *   tensors.c), gsl_step, stop on a non-finite loss, evaluate when due
 *   (every --eval-every steps and after the last, with --eval-input;
 *   eval.c), log, agree whether a rank was signalled,
 *   write a checkpoint when one is due (every --checkpoint-every steps,
 *   after the last, and after a signalled step), stop after a signalled
 *   step;
 *   write the outputs; agree that every rank's work is done; free
 *   everything; MPI_Finalize, whose hang past --collective-timeout ends
 *   the rank with status 0 and a warning (fail.c). A run resumed at or
 *   beyond --steps runs nothing, says so, and writes no output; resumed at
 *   exactly --steps with --eval-input, it evaluates the checkpoint and
 *   logs that.
 *
 * Errors end the run through fail.c (usage errors exit 2, run-time errors
 * 1, a rank's own error aborts every rank); this file keeps the options
 * and the run loop.
 *
 * Log (rank 0, stdout), every --log-every steps, at the last step and at
 * every step evaluated:
 *   step 10/100  loss 0.123456  lr 0.001  gnorm 1.23  tokens/s 12345  (3.2 ms/step, 0.03 s elapsed)
 *   step 20/100  loss 0.1  eval_loss 0.12  eval_ce 0.11  tokens/s 12345  (3.2 ms/step, 0.06 s elapsed; eval 0.012 s)
 * loss only if gslrt_report_loss was called during that step (%.6g);
 * each signal (gslrt_declare_signal) by its log name, only if reported
 * during that step (%.3g; nan, inf or -inf if not finite);
 * eval_loss and eval_NAME (%.6g; nan, inf or -inf if not finite) only
 * after an evaluation; tokens/s and ms/step are averaged over the steps
 * since the previous line, leaving out the time of evaluations and
 * checkpoints; elapsed is the wall time since step 1 began, up to the end
 * of the step (eval: the evaluation after it). On a terminal, stderr also
 * shows a progress line rewritten with '\r' and erased before each log line
 * and at the end. --quiet prints only errors.
 *
 * Metrics (rank 0, --metrics FILE, also with --quiet): the same steps as
 * the log, one JSON object a line, flushed at once so that the lines
 * written stay whatever happens later:
 *   {"step": 10, "loss": 0.123456789, "lr": 0.001, "grad_norm": 1.23456789, "tokens_per_s": 12345.6, "elapsed_s": 0.031, "ms_per_step": 3.2}
 * loss (%.9g: the f32 exactly) and the signals by name (%.9g, null if
 * not finite) only as for the log line; after an
 * evaluation "eval_loss" and "eval_NAME" (%.9g of the double mean, null if
 * not finite: JSON has no NaN) follow the loss, and "eval_s" ends the
 * line. A checkpoint evaluated without training logs
 *   step 6/6  eval_loss 0.12  (eval 0.012 s)
 *   {"step": 6, "eval_loss": 0.123456789, "eval_s": 0.012}
 * The run's first record (whichever it is) ends with "provenance", the
 * record a checkpoint manifest also holds (provenance.c):
 *   {"step": 1, "loss": 0.5, ..., "ms_per_step": 3.2, "provenance": {"user": "alice", ...}}
 * Rank 0 checks and
 * creates (truncates) FILE before step 1, like the --output targets; a
 * new FILE gets mode 0666 less the umask, an existing one keeps its mode; a
 * failed write later is a run-time error of rank 0.
 *
 * A NaN or infinite loss ends the run right after its step: the loss is the
 * same on every rank, so all decide alike, rank 0 says so once and all exit
 * 1; nothing is logged for that step and no --output is written.
 *
 * Signals. SIGTERM or SIGINT only sets a flag (sig_atomic_t). After every
 * step but the last the ranks take its maximum (one MPI_Allreduce of an
 * int), so a signal to one rank or to all stops every rank after the same
 * step: its checkpoint is written (with --checkpoint), rank 0 prints one
 * line, every rank exits GSLRT_EXIT_STOPPED (3), no --output. SIGXFSZ is
 * ignored: a write beyond the file-size limit fails with EFBIG and is
 * reported like any write error. A rank killed outright is the process
 * manager's to see: hydra ends the other ranks at once. */
#include "internal.h"
#include "ckdir.h"
#include "paths.h"
#include "seterr.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

/* The SIGTERM or SIGINT received (0: none), set by on_stop_signal. */
static volatile sig_atomic_t stop_signal;
/* When it came (CLOCK_MONOTONIC). */
static struct timespec stop_time;

/* A signal this soon after the first is the same stop delivered twice:
 * Ctrl-C, timeout(1) and batch systems signal the whole process group,
 * ranks included, and mpiexec passes the signal it got on to the ranks
 * too (seen here: 1 run in 12 of `timeout ... mpiexec` killed at once,
 * with no checkpoint, before this). */
#define STOP_REPEAT_NS 200000000L

/* Asks the run to stop after the current step. A second signal while the
 * first is pending, and not within STOP_REPEAT_NS of it, acts as if there
 * were no handler (Ctrl-C twice ends the process at once).
 * Async-signal-safe (clock_gettime is). */
static void on_stop_signal(int sig) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (stop_signal) {
    long ns = (long)(now.tv_sec - stop_time.tv_sec) * 1000000000L + (now.tv_nsec - stop_time.tv_nsec);
    if (ns < STOP_REPEAT_NS)
      return;
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  stop_time = now;
  stop_signal = sig;
}

/* SIGTERM and SIGINT stop the run after a step (run_steps); SIGXFSZ is
 * ignored, so that a write beyond the file-size limit fails with EFBIG,
 * reported like any failed write, instead of killing the process. */
static void install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGTERM); /* the handlers do not interrupt each other */
  sigaddset(&sa.sa_mask, SIGINT);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGXFSZ, SIG_IGN);
}

void gslrt_report_loss(gslrt_ctx *ctx, float loss) {
  ctx->loss = loss;
  ctx->have_loss = 1;
}

void gslrt_declare_signal(gslrt_ctx *ctx, const char *name, const char *log_name, int32_t count) {
  if (!name || !*name || (log_name && !*log_name))
    gslrt_fatal(ctx, "gslrt_declare_signal: a signal without a name");
  if (count < 0 || (count > 0 && log_name))
    gslrt_fatal(ctx, "gslrt_declare_signal: %s: %d elements%s", name, (int)count,
                count > 0 ? ", in the log line" : "");
  for (int i = 0; i < ctx->nsignals; i++)
    if (!strcmp(ctx->signals[i].name, name) ||
        (log_name && ctx->signals[i].log_name && !strcmp(ctx->signals[i].log_name, log_name)))
      gslrt_fatal(ctx, "gslrt_declare_signal: %s (%s) declared twice", name, log_name ? log_name : "-");
  gslrt_signal *s = realloc(ctx->signals, sizeof *s * (size_t)(ctx->nsignals + 1));
  float *v = calloc(count ? (size_t)count : 1, sizeof *v);
  if (!s || !v)
    gslrt_fatal(ctx, "gslrt_declare_signal: out of memory");
  ctx->signals = s;
  ctx->signals[ctx->nsignals++] = (gslrt_signal){name, log_name, count, v, 0};
}

void gslrt_report_signal(gslrt_ctx *ctx, int32_t k, const float *value) {
  if (k < 0 || k >= ctx->nsignals)
    gslrt_fatal(ctx, "gslrt_report_signal: signal %d of %d declared", (int)k, ctx->nsignals);
  gslrt_signal *s = &ctx->signals[k];
  memcpy(s->value, value, sizeof *s->value * (size_t)(s->count ? s->count : 1));
  s->have = 1;
}

static const char *basename_of(const char *path) {
  const char *slash = path ? strrchr(path, '/') : NULL;
  return slash ? slash + 1 : path ? path : "gsl-program";
}

static void print_version(const gslrt_ctx *ctx) {
  printf("%s (GSL runtime %s, compiled from %s by gslc %s)\n", ctx->prog, GSLRT_VERSION,
         ctx->info->source ? ctx->info->source : "?",
         ctx->info->compiler_version ? ctx->info->compiler_version : "?");
}

/* The digits after the point a log line gives a time of seconds: elapsed
 * (%.2f up to 10 s), or an evaluation's (%.3f below 1 s, as a checkpoint's). */
static int secs_digits(double seconds) { return seconds >= 1000 ? 0 : seconds >= 10 ? 1 : 2; }
static int eval_digits(double seconds) { return seconds < 1 ? 3 : secs_digits(seconds); }

/* Prints v with %.*g (digits), a non-finite one as nan, inf or -inf
 * (glibc would print a NaN with its sign bit set as -nan). */
static void print_value(FILE *f, const char *key, double v, int digits) {
  if (isfinite(v))
    fprintf(f, "  %s %.*g", key, digits, v);
  else
    fprintf(f, "  %s %s", key, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

/* Writes v to the metrics as ", "key": %.9g", a non-finite one as null. */
static void write_value(FILE *f, const char *key, double v) {
  if (isfinite(v))
    fprintf(f, ", \"%s\": %.9g", key, v);
  else
    fprintf(f, ", \"%s\": null", key);
}

/* A signal in a metrics record: a number, or an array of them. */
static void write_signal(FILE *f, const gslrt_signal *s) {
  if (!s->count) {
    write_value(f, s->name, s->value[0]);
    return;
  }
  fprintf(f, ", \"%s\": [", s->name);
  for (int32_t i = 0; i < s->count; i++)
    if (isfinite(s->value[i]))
      fprintf(f, "%s%.9g", i ? ", " : "", (double)s->value[i]);
    else
      fprintf(f, "%snull", i ? ", " : "");
  fputc(']', f);
}

/* The eval_loss and eval_NAME of the evaluation just done, in the log
 * line (json 0) or in the metrics record (json 1). */
static void put_evals(gslrt_ctx *ctx, FILE *f, int json) {
  for (int i = 0; i <= ctx->neval; i++) {
    char key[256];
    snprintf(key, sizeof key, "eval_%s", i ? ctx->eval_names[i - 1] : "loss");
    if (json)
      write_value(f, key, ctx->eval_values[i]);
    else
      print_value(f, key, ctx->eval_values[i], 6);
  }
}

/* Ends a metrics record written to f, flushed at once; the run's first
 * record ends with its provenance (provenance.c). */
static void end_metrics(gslrt_ctx *ctx, FILE *f) {
  if (!ctx->metrics_records++) {
    fputs(", \"provenance\": ", f);
    gslrt_provenance_dump(ctx, f);
  }
  fputs("}\n", f);
  if (fflush(f) != 0 || ferror(f))
    gslrt_fatal(ctx, "--metrics %s: cannot write: %s", ctx->opts.metrics, strerror(errno));
}

/* Writes the metrics record of logged step (0-based) on rank 0. */
static void write_metrics(gslrt_ctx *ctx, int64_t step, double per, double elapsed, double tps) {
  FILE *f = ctx->metrics;
  fprintf(f, "{\"step\": %lld", (long long)step + 1);
  if (ctx->have_loss)
    fprintf(f, ", \"loss\": %.9g", (double)ctx->loss);
  for (int i = 0; i < ctx->nsignals; i++)
    if (ctx->signals[i].have)
      write_signal(f, &ctx->signals[i]);
  if (ctx->have_eval)
    put_evals(ctx, f, 1);
  fprintf(f, ", \"tokens_per_s\": %.1f, \"elapsed_s\": %.6f, \"ms_per_step\": %.6g", tps, elapsed,
          1000.0 * per);
  if (ctx->have_eval)
    fprintf(f, ", \"eval_s\": %.6f", ctx->eval_seconds);
  if (ctx->pace_have)
    fprintf(f, ", \"slowest_rank\": %d, \"slowest_score\": %.3f, \"compute_ms\": %.6g, \"wait_ms\": %.6g",
            ctx->pace_slowest, ctx->pace_score, ctx->pace_compute_ms, ctx->pace_wait_ms);
  if (ctx->peak_rss) {
    fputs(", \"peak_rss_kib\": [", f);
    for (int r = 0; r < ctx->nranks; r++)
      fprintf(f, "%s%ld", r ? ", " : "", ctx->peak_rss[r]);
    fputc(']', f);
  }
  end_metrics(ctx, f);
}

/* The largest peak RSS of any rank, in MiB, and its rank. */
static double peak_rss_mib(const gslrt_ctx *ctx, int *rank) {
  int top = 0;
  for (int r = 1; r < ctx->nranks; r++)
    if (ctx->peak_rss[r] > ctx->peak_rss[top])
      top = r;
  *rank = top;
  return (double)ctx->peak_rss[top] / 1024.0;
}

/* Logs step (0-based), the last of nsteps steps that took seconds, elapsed
 * seconds since step 1 began: the log line unless --quiet, and the metrics
 * record. Rank 0 only. */
static void log_step(gslrt_ctx *ctx, int64_t step, int64_t nsteps, double seconds, double elapsed,
                     int64_t tokens) {
  double per = seconds / (double)nsteps, ms = 1000.0 * per;
  double tps = (double)tokens / (per > 0 ? per : 1e-9);
  if (!ctx->opts.quiet) {
    gslrt_erase_progress();
    printf("step %lld/%lld", (long long)step + 1, (long long)ctx->opts.steps);
    if (ctx->have_loss)
      printf("  loss %.6g", (double)ctx->loss);
    for (int i = 0; i < ctx->nsignals; i++)
      if (ctx->signals[i].have && ctx->signals[i].log_name)
        print_value(stdout, ctx->signals[i].log_name, ctx->signals[i].value[0], 3);
    if (ctx->have_eval)
      put_evals(ctx, stdout, 0);
    printf("  tokens/s %.0f  (%.*f ms/step, %.*f s elapsed", tps, ms >= 100 ? 0 : ms >= 1 ? 1 : 3, ms,
           secs_digits(elapsed), elapsed);
    if (ctx->have_eval)
      printf("; eval %.*f s", eval_digits(ctx->eval_seconds), ctx->eval_seconds);
    if (ctx->pace_have)
      printf("; slowest rank %d, score %.2f", ctx->pace_slowest, ctx->pace_score);
    if (ctx->peak_rss) {
      int top;
      double mib = peak_rss_mib(ctx, &top);
      if (ctx->nranks > 1)
        printf("; peak RSS %.1f MiB on rank %d", mib, top);
      else
        printf("; peak RSS %.1f MiB", mib);
    }
    printf(")\n");
    fflush(stdout);
  }
  if (ctx->metrics)
    write_metrics(ctx, step, per, elapsed, tps);
}

/* Logs the evaluation of a checkpoint at step done, with no step run:
 * the log line unless --quiet, and the metrics record. Rank 0 only. */
static void log_eval_only(gslrt_ctx *ctx, int64_t done) {
  if (!ctx->opts.quiet) {
    printf("step %lld/%lld", (long long)done, (long long)ctx->opts.steps);
    put_evals(ctx, stdout, 0);
    printf("  (eval %.*f s)\n", eval_digits(ctx->eval_seconds), ctx->eval_seconds);
    fflush(stdout);
  }
  if (ctx->metrics) {
    fprintf(ctx->metrics, "{\"step\": %lld", (long long)done);
    put_evals(ctx, ctx->metrics, 1);
    fprintf(ctx->metrics, ", \"eval_s\": %.6f", ctx->eval_seconds);
    end_metrics(ctx, ctx->metrics);
  }
}

static void show_progress(gslrt_ctx *ctx, int64_t step, double per) {
  fprintf(stderr, "\r\033[Kstep %lld/%lld  %.1f ms/step", (long long)step + 1,
          (long long)ctx->opts.steps, 1000.0 * per);
  fflush(stderr);
  gslrt_progress_shown();
}

/* Whether path and the --input or --output FILE other are one file: the
 * same name, or names of one existing file (st, if path exists). */
static int same_file(const char *path, const struct stat *st, const char *other) {
  struct stat o;
  if (!strcmp(path, other))
    return 1;
  return st && stat(other, &o) == 0 && o.st_dev == st->st_dev && o.st_ino == st->st_ino;
}

/* Whether the existing file st is, by another name (a hard link), a file
 * in the directory dir or in one of its subdirectories (a checkpoint's),
 * whose name under dir goes to found (PATH_MAX bytes). */
static int linked_into(const struct stat *st, const char *dir, char *found) {
  DIR *d = opendir(dir), *sub;
  struct dirent *e, *f;
  struct stat o;
  char path[PATH_MAX];
  int hit = 0;
  while (d && !hit && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path || lstat(path, &o) != 0)
      continue;
    if (o.st_dev == st->st_dev && o.st_ino == st->st_ino) {
      snprintf(found, PATH_MAX, "%s", e->d_name), hit = 1;
    } else if (S_ISDIR(o.st_mode) && (sub = opendir(path))) {
      while (!hit && (f = readdir(sub))) {
        char inner[PATH_MAX];
        if (snprintf(inner, sizeof inner, "%s/%s", path, f->d_name) < (int)sizeof inner &&
            lstat(inner, &o) == 0 && S_ISREG(o.st_mode) && o.st_dev == st->st_dev && o.st_ino == st->st_ino)
          snprintf(found, PATH_MAX, "%s/%s", e->d_name, f->d_name), hit = 1;
      }
      closedir(sub);
    }
  }
  if (d)
    closedir(d);
  return hit;
}

/* Refuses, on rank 0 before anything is opened for writing, every file the
 * run writes (--metrics, each --output) that resolves into the --checkpoint
 * directory, through links and "..", whether or not --resume is
 * given: a run's own file there would replace a checkpoint's (a manifest
 * truncated, a tensor renamed over) or be taken for one. So is a --metrics
 * file that is a hard link to a file there, since it is truncated in
 * place (an --output is renamed over its name, a new file). A usage
 * error. */
static void check_not_in_checkpoint(gslrt_ctx *ctx) {
  const gslrt_options *op = &ctx->opts;
  char err[GSLRT_ERRLEN] = "", dir[PATH_MAX];
  int status = 0;
  if (!op->checkpoint || ctx->rank != 0 || gslrt_resolve(op->checkpoint, dir) != 0)
    goto fn_exit;
  if (op->metrics && gslrt_inside(op->metrics, dir)) {
    gslrt_seterr(err, sizeof err, "--metrics %s is inside the --checkpoint directory %s (a run never writes its "
                 "own files there)", op->metrics, op->checkpoint);
    status = 2;
    goto fn_exit;
  }
  struct stat st;
  char found[PATH_MAX];
  if (op->metrics && stat(op->metrics, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink > 1 &&
      linked_into(&st, dir, found)) {
    gslrt_seterr(err, sizeof err, "--metrics %s is another name (a hard link) of %s/%s, inside the --checkpoint "
                 "directory %s (a run never writes its own files there)", op->metrics, op->checkpoint, found,
                 op->checkpoint);
    status = 2;
    goto fn_exit;
  }
  for (int i = 0; i < op->noutputs; i++)
    if (gslrt_inside(op->outputs[i].file, dir)) {
      gslrt_seterr(err, sizeof err, "--output %s=%s is inside the --checkpoint directory %s (a run never writes "
                   "its own files there)", op->outputs[i].name, op->outputs[i].file, op->checkpoint);
      status = 2;
      goto fn_exit;
    }
fn_exit:
  gslrt_rank0_verdict(ctx, status, err);
}

/* Checks and creates (truncates) the --metrics file on rank 0; the verdict
 * on it: 0, or 2 (a usage error) or 1 (a run-time error) with the cause in
 * err. O_NONBLOCK: a FIFO without a reader fails at once instead of
 * blocking the open. */
static int create_metrics(gslrt_ctx *ctx, char *err, int errlen) {
  const gslrt_options *op = &ctx->opts;
  const char *path = op->metrics;
  struct stat st;
  int exists = stat(path, &st) == 0, fd;
  for (int i = 0; i < op->ninputs; i++)
    if (same_file(path, exists ? &st : NULL, op->inputs[i].file)) {
      gslrt_seterr(err, errlen, "--metrics %s and --input %s=%s name the same file", path,
                   op->inputs[i].name, op->inputs[i].file);
      return 2;
    }
  for (int i = 0; i < op->neval_inputs; i++)
    if (same_file(path, exists ? &st : NULL, op->eval_inputs[i].file)) {
      gslrt_seterr(err, errlen, "--metrics %s and --eval-input %s=%s name the same file", path,
                   op->eval_inputs[i].name, op->eval_inputs[i].file);
      return 2;
    }
  for (int i = 0; i < op->noutputs; i++)
    if (same_file(path, exists ? &st : NULL, op->outputs[i].file)) {
      gslrt_seterr(err, errlen, "--metrics %s and --output %s=%s name the same file", path,
                   op->outputs[i].name, op->outputs[i].file);
      return 2;
    }
  if (exists && S_ISDIR(st.st_mode)) {
    gslrt_seterr(err, errlen, "--metrics %s: %s is a directory", path, path);
    return 1;
  }
  /* as --output: never written through a link, nor into a device or FIFO */
  if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    gslrt_seterr(err, errlen, "--metrics %s: %s is %s, not a regular file (refusing to write it)", path, path,
                 S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket");
    return 1;
  }
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_NOFOLLOW, 0666);
  if (fd >= 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0 && fstat(fd, &st) == 0)
    ctx->metrics = fdopen(fd, "w");
  if (!ctx->metrics) {
    gslrt_seterr(err, errlen, "--metrics %s: cannot open %s for writing: %s", path, path,
                 strerror(errno));
    if (fd >= 0)
      close(fd);
    return 1;
  }
  ctx->metrics_dev = (uint64_t)st.st_dev, ctx->metrics_ino = (uint64_t)st.st_ino;
  return 0;
}

/* Creates the --metrics file before step 1 (rank 0) and shares the verdict. */
static void open_metrics(gslrt_ctx *ctx) {
  char err[GSLRT_ERRLEN] = "";
  int status = 0;
  if (!ctx->opts.metrics)
    return;
  if (ctx->rank == 0)
    status = create_metrics(ctx, err, sizeof err);
  gslrt_rank0_verdict(ctx, status, err);
}

/* Closes the --metrics file after the last step; a failed close is an error. */
static void close_metrics(gslrt_ctx *ctx) {
  FILE *f = ctx->metrics;
  ctx->metrics = NULL;
  if (f && fclose(f) != 0)
    gslrt_fatal(ctx, "--metrics %s: cannot write: %s", ctx->opts.metrics, strerror(errno));
}

/* Ends the run, on every rank alike, if the step's loss is NaN or infinite. */
static void check_loss(gslrt_ctx *ctx, int64_t step) {
  float l = ctx->loss;
  if (ctx->have_loss && !isfinite(l))
    gslrt_fail_all(ctx, "the loss is %s at step %lld; stopping",
                   isnan(l) ? "nan" : l > 0 ? "inf" : "-inf", (long long)step + 1);
}

static void free_ctx(gslrt_ctx *ctx) {
  for (int i = 0; i < ctx->nallocs; i++)
    free(ctx->allocs[i]);
  free(ctx->allocs);
  free(ctx->tensors);
  free(ctx->outputs);
  free(ctx->eval_names);
  for (int i = 0; i < ctx->nsignals; i++)
    free(ctx->signals[i].value);
  free(ctx->signals);
  free(ctx->checks);
  free(ctx->check_first);
  gslrt_checkpoint_free(ctx);
  gslrt_provenance_free(ctx);
  free(ctx->argv);
  ctx->argv = NULL, ctx->argc = 0;
  gslrt_free_groups(ctx);
  gslrt_health_free(ctx);
  gslrt_free_options(&ctx->opts);
  ctx->allocs = NULL, ctx->tensors = NULL, ctx->outputs = NULL, ctx->eval_names = NULL, ctx->signals = NULL;
  ctx->checks = NULL, ctx->check_first = NULL;
  ctx->nallocs = ctx->ntensors = ctx->noutputs = ctx->neval = ctx->nchecks = ctx->nsignals = 0;
}

/* Whether any rank was asked to stop (SIGTERM or SIGINT): the signal's
 * number (the greatest, if several), or 0; every rank together, after each
 * step but the last. */
static int stop_requested(gslrt_ctx *ctx) {
  return gslrt_agree_max(ctx, stop_signal, "the check for a stop signal after the step");
}

/* With --max-time: whether the run must end after step done (of this
 * run's steps since first) because one more step, and the evaluation and
 * checkpoint that end a run, would take it past the limit, by every
 * rank's clock (one MPI_Allreduce of an int, as stop_requested).
 * trained: the seconds those steps took, evaluations and checkpoints left
 * out. An evaluation not yet seen is priced as a step a held-out batch,
 * which costs more than one (a step also runs the backward pass). */
static int out_of_time(gslrt_ctx *ctx, int64_t done, int64_t first, double trained, double ckpt) {
  double step = trained / (double)(done - first);
  double eval = ctx->eval_batches ? (ctx->eval_seconds > 0 ? ctx->eval_seconds : step * ctx->eval_batches) : 0;
  int mine = MPI_Wtime() - ctx->started + step + eval + ckpt > ctx->opts.max_time;
  return gslrt_agree_max(ctx, mine, "the --max-time check after the step");
}

/* Ends a run stopped by signal sig after done steps, on every rank: rank 0
 * says so in one line, every rank exits GSLRT_EXIT_STOPPED. The checkpoint
 * of step done, if --checkpoint was given, is already written. */
static void stop_run(gslrt_ctx *ctx, int sig, int64_t done) __attribute__((noreturn));
static void stop_run(gslrt_ctx *ctx, int sig, int64_t done) {
  const char *name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
  close_metrics(ctx);
  if (ctx->rank == 0) {
    char prefix[256], step[CKDIR_NAME];
    gslrt_erase_progress();
    fflush(stdout);
    snprintf(prefix, sizeof prefix, "%s: ", ctx->prog);
    gslrt_ckdir_step_name(step, sizeof step, done);
    if (ctx->opts.checkpoint)
      gslrt_say(prefix, "stopped by %s after step %lld/%lld; checkpoint %s/%s written (continue "
             "with --resume)", name, (long long)done, (long long)ctx->opts.steps, ctx->opts.checkpoint, step);
    else
      gslrt_say(prefix, "stopped by %s after step %lld/%lld; no checkpoint was asked for (--checkpoint "
             "DIR), nothing was saved", name, (long long)done, (long long)ctx->opts.steps);
  }
  free_ctx(ctx);
  gslrt_exit(ctx, GSLRT_EXIT_STOPPED);
}

/* Runs steps first..steps-1 (0-based; first > 0 after --resume), writing
 * the checkpoints and evaluations that fall due; their time is left out of
 * ms/step. A step evaluated is always logged.
 * After every step but the last, the ranks agree on whether one of them
 * was signalled (one MPI_Allreduce of an int); if so, the checkpoint of
 * that step is written (if --checkpoint was given and it was not just
 * written as due) and the run stops (stop_run). */
static void run_steps(gslrt_ctx *ctx, int64_t first) {
  int64_t every = gslrt_log_every(&ctx->opts), tokens = gslrt_tokens_per_step(ctx);
  int tty = ctx->rank == 0 && !ctx->opts.quiet && isatty(fileno(stderr));
  double start = MPI_Wtime(), since = start, shown = start;
  double aside = 0, ckpt = 0; /* seconds of evaluations and checkpoints; the last checkpoint's */
  int64_t last_logged = first - 1;
  for (int64_t s = first; s < ctx->end; s++) {
    double begun = MPI_Wtime(), waited = ctx->coll_seconds; /* the step's time and its collectives' */
    ctx->step = s;
    gslrt_bind_inputs(ctx, s);
    ctx->have_loss = 0;
    for (int i = 0; i < ctx->nsignals; i++)
      ctx->signals[i].have = 0;
    ctx->info->step(ctx, s);
    double now = MPI_Wtime();
    gslrt_pace_step(ctx, now - begun, ctx->coll_seconds - waited);
    check_loss(ctx, s);
    if (ctx->opts.max_time > 0 && s + 1 < ctx->end && out_of_time(ctx, s + 1, first, now - start - aside, ckpt))
      ctx->end = s + 1;
    int last = s + 1 == ctx->end, evaluated = gslrt_eval_due(ctx, s + 1);
    ctx->have_eval = 0;
    if (evaluated) {
      gslrt_erase_progress();
      /* after the last step the --output buffers are kept as it left them */
      gslrt_evaluate(ctx, s + 1, last && ctx->opts.noutputs > 0);
    }
    if ((s + 1) % every == 0 || last || evaluated) {
      gslrt_pace_window(ctx, s - last_logged, last);
      if (ctx->rank == 0)
        log_step(ctx, s, s - last_logged, now - since, now - start, tokens);
      last_logged = s;
      since = now;
    } else if (tty && now - shown > 0.1) {
      show_progress(ctx, s, (now - since) / (double)(s - last_logged));
      shown = now;
    }
    if (evaluated) {
      since += ctx->eval_seconds;
      aside += ctx->eval_seconds;
    }
    int sig = !last ? stop_requested(ctx) : 0;
    if (gslrt_checkpoint_due(ctx, s + 1) || (sig && ctx->opts.checkpoint)) {
      double begun = MPI_Wtime();
      gslrt_erase_progress();
      gslrt_checkpoint_write(ctx, s + 1);
      ckpt = MPI_Wtime() - begun;
      since += ckpt;
      aside += ckpt;
    }
    if (sig)
      stop_run(ctx, sig, s + 1);
  }
  gslrt_erase_progress();
}

int gslrt_main(int argc, char **argv, const gslrt_program_info *info) {
  gslrt_ctx ctx;
  char err[GSLRT_ERRLEN];
  memset(&ctx, 0, sizeof ctx);
  ctx.prog = basename_of(argc > 0 ? argv[0] : NULL);
  ctx.info = info;
  if (info->same_bits)
    gslrt_gemm_pin(1); /* gslc --same-bits: products whose bits do not depend on their shape */
  ctx.comm = MPI_COMM_NULL;
  ctx.held_out = -1;
  gslrt_set_current(&ctx);
  ctx.started_at = time(NULL);
  if ((ctx.argv = malloc(sizeof *ctx.argv * (size_t)(argc > 0 ? argc : 1)))) /* as given: MPI_Init may edit argv */
    for (ctx.argc = 0; ctx.argc < argc; ctx.argc++)
      ctx.argv[ctx.argc] = argv[ctx.argc];
#ifdef __linux__
  if (getenv("PMI_RANK")) { /* started by a process manager: a rank whose launcher is gone ends with it */
    pid_t parent = getppid();
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 && getppid() != parent)
      _exit(1); /* it went before the call */
  }
#endif
  { /* MPI_Init waits for every rank: under --collective-timeout's deadline, read before MPI is up */
    gslrt_options early;
    char ignored[GSLRT_ERRLEN];
    int ok = gslrt_parse_options(argc, argv, &early, ignored, sizeof ignored) == 0; /* refused: said after MPI_Init */
    gslrt_deadline_startup(ctx.prog, ok ? early.collective_timeout : GSLRT_COLLECTIVE_TIMEOUT);
    gslrt_free_options(&early);
  }
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
    fprintf(stderr, "%s: rank ?: error: MPI_Init failed\n", ctx.prog);
    exit(1);
  }
  ctx.started = MPI_Wtime();
  gslrt_mpi_check(&ctx, MPI_Comm_rank(MPI_COMM_WORLD, &ctx.rank), "MPI_Comm_rank");
  gslrt_mpi_check(&ctx, MPI_Comm_size(MPI_COMM_WORLD, &ctx.nranks), "MPI_Comm_size");
  if (!ctx.argv)
    gslrt_fatal(&ctx, "out of memory for the command line");
  if (gslrt_parse_options(argc, argv, &ctx.opts, err, sizeof err) != 0)
    gslrt_usage_error(&ctx, "%s", err);
  /* after the options: the duplicate is made under --collective-timeout's deadline */
  gslrt_doing(&ctx, "starting up");
  gslrt_deadline(&ctx, "the MPI_Comm_dup making the run's communicator");
  gslrt_mpi_check(&ctx, MPI_Comm_dup(MPI_COMM_WORLD, &ctx.comm), "MPI_Comm_dup");
  gslrt_deadline_off(&ctx);
  gslrt_mpi_check(&ctx, MPI_Comm_set_errhandler(ctx.comm, MPI_ERRORS_RETURN),
                  "MPI_Comm_set_errhandler");
  if (ctx.opts.help || ctx.opts.version) {
    if (ctx.rank == 0 && ctx.opts.help)
      gslrt_print_usage(stdout, ctx.prog);
    else if (ctx.rank == 0)
      print_version(&ctx);
    free_ctx(&ctx);
    gslrt_exit(&ctx, 0);
  }
  ctx.seed = ctx.opts.seed;
  ctx.end = ctx.opts.steps;
  if (!ctx.opts.generate) /* generation has nothing to save: a signal ends it at once */
    install_signals();
  gslrt_checkpoint_build(&ctx);
  info->setup(&ctx);
  gslrt_check_mesh(&ctx);
  gslrt_build_groups(&ctx);
  gslrt_health_init(&ctx);
  if (ctx.opts.generate) {
    gslrt_doing(&ctx, "starting the generation");
    gslrt_generate(&ctx); /* in place of training: generate.c */
    goto fn_exit;
  }
  if (ctx.opts.metrics || ctx.opts.checkpoint)
    gslrt_provenance_gather(&ctx);
  gslrt_check_bindings(&ctx);
  gslrt_check_eval(&ctx);
  check_not_in_checkpoint(&ctx);
  gslrt_check_outputs(&ctx);
  gslrt_checkpoint_open(&ctx); /* the lock first: a run refused by it has written nothing */
  open_metrics(&ctx);
  gslrt_open_inputs(&ctx);
  gslrt_init_params(&ctx);
  int64_t first = gslrt_checkpoint_resume(&ctx);
  gslrt_doing(&ctx, NULL); /* started: messages name the step or the evaluation */
  if (first == ctx.opts.steps && ctx.eval_batches) {
    /* nothing left to train: evaluate the checkpoint */
    gslrt_evaluate(&ctx, first, 0);
    if (ctx.rank == 0)
      log_eval_only(&ctx, first);
    close_metrics(&ctx);
  } else if (first >= ctx.opts.steps) {
    if (ctx.rank == 0 && !ctx.opts.quiet)
      printf("the checkpoint is at step %lld, --steps %lld: nothing to run (no output written%s)\n",
             (long long)first, (long long)ctx.opts.steps,
             ctx.eval_batches ? "; --steps equal to the checkpoint's step evaluates it" : "");
    close_metrics(&ctx);
  } else {
    gslrt_check_training_inputs(&ctx, first);
    run_steps(&ctx, first);
    if (ctx.end < ctx.opts.steps && ctx.rank == 0 && !ctx.opts.quiet)
      printf("--max-time %g s: the run ends after step %lld of --steps %lld\n", ctx.opts.max_time,
             (long long)ctx.end, (long long)ctx.opts.steps);
    close_metrics(&ctx);
    gslrt_write_outputs(&ctx);
  }
fn_exit:
  gslrt_doing(&ctx, "ending the run");
  if (ctx.nranks > 1) { /* watched: a rank lost now is still a failure */
    int done = 1, all = 0;
    gslrt_world_allreduce(&ctx, &done, &all, 1, MPI_INT, MPI_MIN, "the agreement that the run's work is done");
  }
  gslrt_health_done(&ctx);
  free_ctx(&ctx);
  gslrt_mpi_check(&ctx, MPI_Comm_free(&ctx.comm), "MPI_Comm_free");
  if (ctx.nranks > 1) /* every rank's work is done: status 0, whatever MPI_Finalize does */
    gslrt_deadline_exit(ctx.rank, ctx.prog, ctx.opts.collective_timeout, "MPI_Finalize", 0,
                        "the run's work is done (its steps, checkpoint and outputs written) and agreed", true);
  MPI_Finalize();
  gslrt_deadline_off(&ctx);
  gslrt_set_current(NULL);
  return 0;
}
