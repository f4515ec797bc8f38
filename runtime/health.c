/* health.c — a run's health: the watchdog over its collectives, and each
 * rank's pace.
 *
 * Watchdog. Every collective of a group of several members runs as MPI's
 * non-blocking call (collectives.c), polled here with MPI_Testall until it
 * completes or --collective-timeout seconds (default 300) have passed
 * since it began; with --collective-timeout 0 it is waited for with
 * MPI_Waitall, for ever, and nothing below is sent. To say who had
 * arrived, one duplicate of the run's communicator (ctx->watch, for every
 * group: a communicator costs memory) carries, with tags of the group's
 * own, what every member, as it begins a collective on a group, sends each
 * other member
 * one int64: the number of collectives it has begun on the group, and
 * posts the receive of each other member's; after the collective it waits
 * for them (every member sent its number before joining, so they are
 * there, and each must be this collective's: the ranks call the group's
 * collectives in one order), so nothing is pending between collectives.
 * When the time is up, a member whose number has come had arrived; one
 * whose number has not, had not. Half-way to
 * the deadline a waiting rank also sends each member a "still waiting"
 * (the same number, another tag), so that a rank silent since (stopped,
 * inside the collective or before it, or cut off) can be told from one
 * waiting in another collective. Past the deadline the rank prints one
 * line,
 *   prog: rank 0: error: the all_reduce at t.gsl:9:12 over (d) did not
 *   complete within 10 s (training step 4): ranks 0, 2 had arrived, rank
 *   1 had not; rank 1 (host n2) has been silent since (stopped or cut off)
 * and ends the job through MPI_Abort with status GSLRT_EXIT_HUNG (4),
 * which kills the stopped rank as well. Each rank whose deadline passes
 * prints its own line (fail.c's pause before the abort lets ranks whose
 * deadlines fall close print theirs). The runtime's own collectives over
 * every rank are watched alike (gslrt_world_*, and gslrt_agree_max,
 * gslrt_rank0_verdict), named by what they do: the hosts' gathering at
 * start-up, rank 0's verdicts on options and files, the inputs' headers
 * and index checks, the checkpoints' agreements, names and checksums, the
 * check for a stop signal after each step, --max-time's, the pace's
 * gather below, the outputs' gathering; gslrt_doing says in which part of
 * the run. The compiled program names its own (gslrt_collective_at)
 * before each. What MPI offers no non-blocking form of (communicators,
 * MPI-IO, MPI_Finalize) runs under fail.c's deadline instead, which
 * cannot say who had arrived.
 *
 * Pace. main.c times each step (gsl_step) and the time spent inside the
 * collective calls it made (ctx->coll_seconds); the rest is the step's
 * compute time. At each log line every rank sends rank 0 the compute and
 * wait seconds of the steps since the previous one, in one MPI_Igather of
 * three doubles; rank 0 names the rank with the most compute time, the
 * slowest, and its score: the least compute time of any rank over its
 * own (1: every rank computes alike; 0.5: it takes twice as long as the
 * fastest). A rank whose own score is under GSLRT_PACE_THRESHOLD (0.7),
 * and which computes at least GSLRT_PACE_MIN_LOSS (1 ms) a step longer
 * than the fastest (steps of microseconds vary by more than 30% with
 * the scheduler alone), for GSLRT_PACE_WINDOWS (3) log windows in a row
 * is named by a warning on stderr (unless --quiet), once until it has
 * kept pace for as many windows in a row:
 *   prog: warning: rank 2 on host n3 computes 1.9 times slower than rank 0
 * (the ratio of the last window). The gather after the last step carries
 * each rank's peak resident set (getrusage's ru_maxrss) too. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* The tags of group gr's messages on the watch communicator: its arrivals
 * and its "still waiting"s. */
static int tag_arrived(const gslrt_group *gr) { return 2 * gr->tag; }
static int tag_waiting(const gslrt_group *gr) { return 2 * gr->tag + 1; }

/* Under gslrun (GSLRUN_RANKS in the environment): rank 0 prints each
 * rank's pid and host, a line of up to 32 ranks "gslrun-ranks: R=PID@HOST
 * ...", on stdout, which gslrun reads (and does not pass on) to name a
 * rank on another host that ended first; it finds the ranks on its own
 * host itself. */
static void tell_gslrun(gslrt_ctx *ctx) {
  long long pid = (long long)getpid(), *pids = malloc(sizeof *pids * (size_t)ctx->nranks);
  if (!pids)
    gslrt_fatal(ctx, "gslrt_health_init: out of memory");
  gslrt_world_allgather(ctx, &pid, 1, MPI_LONG_LONG, pids, "the gathering of each rank's pid for gslrun");
  if (ctx->rank == 0) {
    char line[4096];
    for (int r = 0; r < ctx->nranks; r += 32) {
      size_t n = (size_t)snprintf(line, sizeof line, "gslrun-ranks:");
      for (int q = r; q < ctx->nranks && q < r + 32 && n < sizeof line; q++)
        n += (size_t)snprintf(line + n, sizeof line - n, " %d=%lld@%s", q, pids[q], ctx->hosts[q]);
      printf("%s\n", line);
    }
    fflush(stdout);
  }
  free(pids);
}

void gslrt_health_init(gslrt_ctx *ctx) {
  char mine[sizeof *ctx->hosts] = "", name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  if (ctx->nranks < 2 || ctx->hosts)
    return;
  if (MPI_Get_processor_name(name, &len) == MPI_SUCCESS)
    snprintf(mine, sizeof mine, "%.*s", len, name);
  ctx->hosts = calloc((size_t)ctx->nranks, sizeof *ctx->hosts);
  if (!ctx->hosts)
    gslrt_fatal(ctx, "gslrt_health_init: out of memory");
  gslrt_world_allgather(ctx, mine, (int)sizeof mine, MPI_CHAR, ctx->hosts, "the gathering of each rank's host");
  if (getenv("GSLRUN_RANKS"))
    tell_gslrun(ctx);
}

/* Under gslrun, after the agreement that every rank's work is done (the
 * steps, the final checkpoint and the outputs written): rank 0 says so in
 * the line "gslrun-ranks: done", which gslrun reads (and does not pass
 * on) to take the segment as finished whatever mpirun's status after it
 * (an MPI_Finalize that hung, or a rank killed in it). The other ranks
 * wait for the line to be written before they go on to MPI_Finalize: a
 * rank killed there makes the process manager kill the others, rank 0
 * too, perhaps before it had written it. */
void gslrt_health_done(gslrt_ctx *ctx) {
  if (!getenv("GSLRUN_RANKS"))
    return;
  if (ctx->rank == 0) {
    printf("gslrun-ranks: done\n");
    fflush(stdout);
  }
  if (ctx->nranks > 1) {
    int said = 1, all = 0;
    gslrt_world_allreduce(ctx, &said, &all, 1, MPI_INT, MPI_MIN, "the wait for rank 0's word to gslrun that the work is done");
  }
}

void gslrt_health_free(gslrt_ctx *ctx) {
  free(ctx->hosts);
  free(ctx->pace_low);
  free(ctx->peak_rss);
  free(ctx->statuses);
  ctx->hosts = NULL, ctx->pace_low = NULL, ctx->peak_rss = NULL, ctx->statuses = NULL;
  ctx->nstatuses = 0;
}

/* ---- the watchdog ------------------------------------------------------------ */

/* Posts the receive of every other member's arrival at this collective. */
static void post_receives(gslrt_ctx *ctx, gslrt_group *gr) {
  for (int j = 0; j < (int)gr->size; j++)
    if (j != gr->index)
      gslrt_mpi_check(ctx, MPI_Irecv(&gr->heard[j], 1, MPI_INT64_T, gr->world[j], tag_arrived(gr), gr->watch,
                                     &gr->ann[j]),
                      "MPI_Irecv (arrivals)");
}

void gslrt_watch_group(gslrt_ctx *ctx, gslrt_group *gr, int tag) {
  int g = (int)gr->size;
  MPI_Group mine, all;
  gr->watch = MPI_COMM_NULL;
  if (ctx->opts.collective_timeout <= 0 || g < 2 || gr->comm == MPI_COMM_NULL)
    return;
  if (ctx->watch == MPI_COMM_NULL) { /* one for every group: a communicator costs memory */
    gslrt_deadline(ctx, "the MPI_Comm_dup making the watchdog's communicator");
    gslrt_mpi_check(ctx, MPI_Comm_dup(ctx->comm, &ctx->watch), "MPI_Comm_dup");
    gslrt_deadline_off(ctx);
    gslrt_mpi_check(ctx, MPI_Comm_set_errhandler(ctx->watch, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
  int *idx = malloc(sizeof *idx * (size_t)g);
  gr->world = malloc(sizeof *gr->world * (size_t)g);
  gr->heard = calloc((size_t)g, sizeof *gr->heard);
  gr->ann = malloc(sizeof *gr->ann * (size_t)(2 * g));
  if (!idx || !gr->world || !gr->heard || !gr->ann)
    gslrt_fatal(ctx, "gslrt_watch_group: out of memory");
  for (int j = 0; j < g; j++)
    idx[j] = j, gr->ann[j] = gr->ann[g + j] = MPI_REQUEST_NULL;
  gslrt_mpi_check(ctx, MPI_Comm_group(gr->comm, &mine), "MPI_Comm_group");
  gslrt_mpi_check(ctx, MPI_Comm_group(ctx->comm, &all), "MPI_Comm_group");
  gslrt_mpi_check(ctx, MPI_Group_translate_ranks(mine, g, idx, all, gr->world), "MPI_Group_translate_ranks");
  MPI_Group_free(&mine);
  MPI_Group_free(&all);
  free(idx);
  gr->watch = ctx->watch;
  gr->tag = tag;
  gr->seq = gr->sent = gr->beat = 0;
}

void gslrt_unwatch_group(gslrt_ctx *ctx, gslrt_group *gr) {
  if (gr->watch == MPI_COMM_NULL)
    return;
  for (int j = 0; j < (int)(2 * gr->size); j++)
    if (gr->ann[j] != MPI_REQUEST_NULL) {
      if (j < gr->size)
        MPI_Cancel(&gr->ann[j]);
      MPI_Wait(&gr->ann[j], MPI_STATUS_IGNORE);
    }
  gr->watch = MPI_COMM_NULL;
  free(gr->world), free(gr->heard), free(gr->ann);
  gr->world = NULL, gr->heard = NULL, gr->ann = NULL;
}

void gslrt_watch_enter(gslrt_ctx *ctx, gslrt_group *gr, const char *kind) {
  ctx->coll_kind = kind;
  ctx->coll_group = gr;
  ctx->coll_begun = MPI_Wtime();
  if (!gr || gr->watch == MPI_COMM_NULL)
    return;
  gr->sent = ++gr->seq;
  post_receives(ctx, gr);
  for (int j = 0; j < (int)gr->size; j++)
    if (j != gr->index)
      gslrt_mpi_check(ctx, MPI_Isend(&gr->sent, 1, MPI_INT64_T, gr->world[j], tag_arrived(gr), gr->watch,
                                     &gr->ann[gr->size + j]),
                      "MPI_Isend (arrivals)");
}

/* Tells every other member that this rank still waits in the group's
 * collective (once a collective). */
static void still_waiting(gslrt_ctx *ctx, gslrt_group *gr) {
  gr->beat = gr->seq;
  for (int j = 0; j < (int)gr->size; j++)
    if (j != gr->index) {
      MPI_Request r;
      gslrt_mpi_check(ctx, MPI_Isend(&gr->beat, 1, MPI_INT64_T, gr->world[j], tag_waiting(gr), gr->watch, &r),
                      "MPI_Isend (still waiting)");
      MPI_Request_free(&r);
    }
}

/* Ranks j of the group with flag[j] == want, as "rank 3" or "ranks 0, 2,
 * 5-7" (their ranks in ctx->comm), into buf; with hosts, the host of each
 * (once, if they share one). The count goes to *n. */
static void put_ranks(const gslrt_ctx *ctx, const gslrt_group *gr, const char *flag, int want, int hosts,
                      char *buf, size_t len, int *n) {
  int g = (int)gr->size, count = 0, one_host = 1;
  const char *host = NULL;
  size_t k = 0;
  for (int j = 0; j < g; j++)
    if (!flag[j] == !want) {
      const char *h = ctx->hosts ? ctx->hosts[gr->world[j]] : "";
      if (host && strcmp(host, h))
        one_host = 0;
      host = h, count++;
    }
  hosts = hosts && ctx->hosts && host;
  k += (size_t)snprintf(buf + k, len - k, "%s", count == 1 ? "rank " : "ranks ");
  for (int j = 0, first = 1; j < g && k < len; j++) {
    if (!flag[j] != !want)
      continue;
    int r = gr->world[j], run = j;
    while (!hosts || one_host) { /* a run of consecutive ranks, without hosts of their own */
      if (run + 1 < g && !flag[run + 1] == !want && gr->world[run + 1] == gr->world[run] + 1)
        run++;
      else
        break;
    }
    if (run - j < 2)
      run = j;
    k += (size_t)snprintf(buf + k, len - k, "%s%d", first ? "" : ", ", r);
    if (run > j && k < len)
      k += (size_t)snprintf(buf + k, len - k, "-%d", gr->world[run]);
    if (hosts && !one_host && k < len)
      k += (size_t)snprintf(buf + k, len - k, " (host %s)", ctx->hosts[r]);
    j = run, first = 0;
  }
  if (hosts && one_host && k < len)
    snprintf(buf + k, len - k, " (host %s)", host);
  *n = count;
}

/* The collective running has not completed in time: says which, where,
 * and who had arrived, and ends the job (GSLRT_EXIT_HUNG). */
/* Marks in alive (by rank in ctx->comm) every rank that has said it
 * still waits in a collective of group gr: of this collective (number
 * seq) if gr is the group that timed out, of any on the others. */
static void take_waiting(gslrt_ctx *ctx, gslrt_group *gr, int64_t seq, char *alive) {
  int flag = 0;
  MPI_Status st;
  if (gr->watch == MPI_COMM_NULL)
    return;
  while (MPI_Iprobe(MPI_ANY_SOURCE, tag_waiting(gr), gr->watch, &flag, &st) == MPI_SUCCESS && flag) {
    int64_t v = 0;
    if (MPI_Recv(&v, 1, MPI_INT64_T, st.MPI_SOURCE, tag_waiting(gr), gr->watch, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      break;
    if (seq < 0 || v == seq)
      alive[st.MPI_SOURCE] = 1;
  }
}

/* The collective running has not completed in time: says which, where,
 * who had arrived, who had not, and who has been silent since it began
 * (no "still waiting" from them, in any collective), and ends the job
 * (GSLRT_EXIT_HUNG). */
static void hung(gslrt_ctx *ctx, gslrt_group *gr) __attribute__((noreturn));
static void hung(gslrt_ctx *ctx, gslrt_group *gr) {
  int g = (int)gr->size, me = (int)gr->index, missing = 0, silent = 0, n;
  char *arrived = calloc((size_t)g, 1), *heard = calloc((size_t)g, 1), *alive = calloc((size_t)ctx->nranks, 1);
  char what[GSLRT_ERRLEN], who[GSLRT_ERRLEN], them[GSLRT_ERRLEN], quiet[2 * GSLRT_ERRLEN], story[4 * GSLRT_ERRLEN];
  char phase[160];
  size_t k = 0;
  if (!arrived || !heard || !alive)
    gslrt_fatal_code(ctx, GSLRT_EXIT_HUNG, "the %s did not complete within %g s", ctx->coll_kind,
                     ctx->opts.collective_timeout);
  take_waiting(ctx, gr, gr->seq, alive);
  for (int i = 0; i < ctx->ngroups; i++)
    if (&ctx->groups[i] != gr)
      take_waiting(ctx, &ctx->groups[i], -1, alive);
  if (gr != &ctx->everyone)
    take_waiting(ctx, &ctx->everyone, -1, alive);
  arrived[me] = heard[me] = 1;
  for (int j = 0; j < g; j++) {
    int flag = 0;
    if (j == me)
      continue;
    if (gr->ann[j] == MPI_REQUEST_NULL || MPI_Test(&gr->ann[j], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      flag = 0;
    arrived[j] = flag && gr->heard[j] == gr->seq;
    heard[j] = alive[gr->world[j]];
    missing += !arrived[j];
    silent += !heard[j];
  }
  /* what: where it is written and its group */
  if (gr == &ctx->everyone) {
    snprintf(what, sizeof what, "%s (the runtime's %s over every rank)", ctx->site ? ctx->site : "a check",
             ctx->coll_kind);
  } else {
    if (ctx->site)
      k = (size_t)snprintf(what, sizeof what, "%s over (", ctx->site);
    else
      k = (size_t)snprintf(what, sizeof what, "the %s over (", ctx->coll_kind);
    for (int32_t i = 0; i < gr->n && k < sizeof what; i++) {
      int32_t a = gr->axes[i];
      if (a >= 0 && a < ctx->naxes && ctx->axis_name[a])
        k += (size_t)snprintf(what + k, sizeof what - k, "%s%s", i ? ", " : "", ctx->axis_name[a]);
      else
        k += (size_t)snprintf(what + k, sizeof what - k, "%saxis %d", i ? ", " : "", (int)a);
    }
    if (k < sizeof what)
      snprintf(what + k, sizeof what - k, ")");
  }
  put_ranks(ctx, gr, arrived, 1, 0, who, sizeof who, &n);
  if (missing)
    put_ranks(ctx, gr, arrived, 0, !silent, them, sizeof them, &n);
  quiet[0] = 0;
  if (silent) {
    char list[GSLRT_ERRLEN];
    put_ranks(ctx, gr, heard, 0, 1, list, sizeof list, &n);
    snprintf(quiet, sizeof quiet, "; %s %s been silent since (stopped or cut off)", list, n == 1 ? "has" : "have");
  }
  if (missing)
    snprintf(story, sizeof story, "%s had arrived, %s had not%s", who, them, quiet);
  else
    snprintf(story, sizeof story, "every member had arrived (%s)%s", who, silent ? quiet : ", and is waiting");
  gslrt_phase(ctx, 1, phase, sizeof phase);
  gslrt_fatal_code(ctx, GSLRT_EXIT_HUNG, "%s did not complete within %g s (%s): %s", what,
                   ctx->opts.collective_timeout, phase, story);
}

/* Room for n statuses (ctx->statuses, grown as needed). */
static MPI_Status *statuses(gslrt_ctx *ctx, int n) {
  if (n > ctx->nstatuses) {
    free(ctx->statuses);
    ctx->statuses = malloc(sizeof *ctx->statuses * (size_t)n);
    if (!ctx->statuses)
      gslrt_fatal(ctx, "out of memory for %d MPI statuses", n);
    ctx->nstatuses = n;
  }
  return ctx->statuses;
}

/* MPI_Testall on req[0..n) until done, or past the deadline of the
 * collective running on gr (hung); half-way, once, still_waiting. */
static void poll(gslrt_ctx *ctx, gslrt_group *gr, int n, MPI_Request *req, const char *call) {
  double limit = ctx->opts.collective_timeout, end = ctx->coll_begun + limit;
  int done = 0;
  MPI_Status *st = statuses(ctx, n);
  for (;;) {
    gslrt_mpi_check(ctx, MPI_Testall(n, req, &done, st), call);
    if (done)
      return;
    double now = MPI_Wtime();
    if (gr->beat != gr->seq && now - ctx->coll_begun >= limit / 2)
      still_waiting(ctx, gr);
    if (now >= end)
      hung(ctx, gr);
  }
}

void gslrt_watch_wait(gslrt_ctx *ctx, int n, MPI_Request *req, const char *call) {
  gslrt_group *gr = ctx->coll_group;
  if (!gr || gr->watch == MPI_COMM_NULL) {
    gslrt_mpi_check(ctx, MPI_Waitall(n, req, statuses(ctx, n)), call);
    return;
  }
  poll(ctx, gr, n, req, call);
}

void gslrt_watch_leave(gslrt_ctx *ctx) {
  gslrt_group *gr = ctx->coll_group;
  if (gr && gr->watch != MPI_COMM_NULL) {
    poll(ctx, gr, (int)(2 * gr->size), gr->ann, "MPI_Irecv/MPI_Isend (arrivals)");
    for (int j = 0; j < (int)gr->size; j++)
      if (j != gr->index && gr->heard[j] != gr->seq)
        gslrt_fatal(ctx, "the %s: rank %d has begun %lld collectives of the group, this rank %lld (the ranks "
                    "call the group's collectives in different orders)",
                    ctx->coll_kind, gr->world[j], (long long)gr->heard[j], (long long)gr->seq);
  }
  ctx->coll_seconds += MPI_Wtime() - ctx->coll_begun;
  ctx->coll_group = NULL;
}

void gslrt_collective_at(gslrt_ctx *ctx, const char *where) { ctx->site = where; }

/* ---- the runtime's own collectives over every rank --------------------------- */

/* Every rank's group once built (before: none, and no watch). */
static gslrt_group *world(gslrt_ctx *ctx) { return ctx->everyone.size ? &ctx->everyone : NULL; }

/* Begins one, named what, of kind. */
static void world_enter(gslrt_ctx *ctx, const char *what, const char *kind) {
  ctx->site = what;
  gslrt_watch_enter(ctx, world(ctx), kind);
}

/* Waits for its request (call names the MPI call) and ends it. */
static void world_leave(gslrt_ctx *ctx, int rc, MPI_Request *req, const char *call) {
  gslrt_mpi_check(ctx, rc, call);
  gslrt_watch_wait(ctx, 1, req, call);
  gslrt_watch_leave(ctx);
  ctx->site = NULL;
}

void gslrt_world_bcast(gslrt_ctx *ctx, void *buf, int n, MPI_Datatype type, int root, const char *what) {
  MPI_Request req;
  world_enter(ctx, what, "broadcast");
  world_leave(ctx, MPI_Ibcast(buf, n, type, root, ctx->comm, &req), &req, "MPI_Ibcast");
}

void gslrt_world_allreduce(gslrt_ctx *ctx, const void *in, void *out, int n, MPI_Datatype type, MPI_Op op,
                           const char *what) {
  MPI_Request req;
  world_enter(ctx, what, "all_reduce");
  world_leave(ctx, MPI_Iallreduce(in, out, n, type, op, ctx->comm, &req), &req, "MPI_Iallreduce");
}

void gslrt_world_reduce(gslrt_ctx *ctx, const void *in, void *out, int n, MPI_Datatype type, MPI_Op op, int root,
                        const char *what) {
  MPI_Request req;
  world_enter(ctx, what, "reduce");
  world_leave(ctx, MPI_Ireduce(in, out, n, type, op, root, ctx->comm, &req), &req, "MPI_Ireduce");
}

void gslrt_world_gather(gslrt_ctx *ctx, const void *in, int n, MPI_Datatype type, void *out, int root,
                        const char *what) {
  MPI_Request req;
  world_enter(ctx, what, "gather");
  world_leave(ctx, MPI_Igather(in, n, type, out, n, type, root, ctx->comm, &req), &req, "MPI_Igather");
}

void gslrt_world_allgather(gslrt_ctx *ctx, const void *in, int n, MPI_Datatype type, void *out, const char *what) {
  MPI_Request req;
  world_enter(ctx, what, "all_gather");
  world_leave(ctx, MPI_Iallgather(in, n, type, out, n, type, ctx->comm, &req), &req, "MPI_Iallgather");
}

void gslrt_world_gatherv(gslrt_ctx *ctx, const void *in, int n, MPI_Datatype type, void *out, const int *counts,
                         const int *displs, int root, const char *what) {
  MPI_Request req;
  world_enter(ctx, what, "gather");
  world_leave(ctx, MPI_Igatherv(in, n, type, out, counts, displs, type, root, ctx->comm, &req), &req,
              "MPI_Igatherv");
}

int gslrt_agree_max(gslrt_ctx *ctx, int mine, const char *what) {
  int any = mine;
  if (ctx->nranks < 2)
    return mine;
  gslrt_world_allreduce(ctx, &mine, &any, 1, MPI_INT, MPI_MAX, what);
  return any;
}

void gslrt_rank0_verdict(gslrt_ctx *ctx, int status, const char *err) {
  gslrt_world_bcast(ctx, &status, 1, MPI_INT, 0, "the sharing of rank 0's verdict");
  if (status == 2)
    gslrt_usage_error(ctx, "%s", err);
  if (status == GSLRT_EXIT_BUSY)
    gslrt_fail_all_code(ctx, GSLRT_EXIT_BUSY, "%s", err);
  if (status != 0)
    gslrt_fail_all(ctx, "%s", err);
}

/* Takes in the "still waiting" messages of collectives that completed
 * after all: once a log window, on every group. */
static void drain_waiting(gslrt_ctx *ctx, gslrt_group *gr) {
  int flag = 0;
  MPI_Status st;
  if (gr->watch == MPI_COMM_NULL)
    return;
  while (MPI_Iprobe(MPI_ANY_SOURCE, tag_waiting(gr), gr->watch, &flag, &st) == MPI_SUCCESS && flag) {
    int64_t v;
    gslrt_mpi_check(ctx, MPI_Recv(&v, 1, MPI_INT64_T, st.MPI_SOURCE, tag_waiting(gr), gr->watch, MPI_STATUS_IGNORE),
                    "MPI_Recv (still waiting)");
  }
}

/* ---- pace ---------------------------------------------------------------------- */

void gslrt_pace_step(gslrt_ctx *ctx, double seconds, double wait) {
  ctx->pace_compute += seconds - wait;
  ctx->pace_wait += wait;
}

/* Rank 0: the window's results from every rank's (compute, wait) at
 * all[3 r], all[3 r + 1], and the warning of a rank slow for too long. */
static void judge(gslrt_ctx *ctx, const double *all, int64_t steps) {
  int n = ctx->nranks, fast = 0, slow = 0;
  for (int r = 1; r < n; r++) {
    if (all[3 * r] < all[3 * fast])
      fast = r;
    if (all[3 * r] > all[3 * slow])
      slow = r;
  }
  double least = all[3 * fast];
  ctx->pace_have = 1;
  ctx->pace_slowest = slow;
  ctx->pace_score = all[3 * slow] > 0 ? least / all[3 * slow] : 1;
  ctx->pace_compute_ms = 1000 * all[3 * slow] / (double)steps;
  ctx->pace_wait_ms = 1000 * all[3 * slow + 1] / (double)steps;
  /* per rank: slow windows in a row, fine windows in a row, warned */
  if (!ctx->pace_low && !(ctx->pace_low = calloc(3 * (size_t)n, sizeof *ctx->pace_low)))
    gslrt_fatal(ctx, "gslrt_pace_window: out of memory");
  int *low = ctx->pace_low, *fine = low + n, *warned = low + 2 * n;
  for (int r = 0; r < n; r++) {
    double score = all[3 * r] > 0 ? least / all[3 * r] : 1;
    int lags = least > 0 && score < GSLRT_PACE_THRESHOLD && all[3 * r] - least >= GSLRT_PACE_MIN_LOSS * (double)steps;
    low[r] = lags ? low[r] + 1 : 0;
    fine[r] = lags ? 0 : fine[r] + 1;
    if (fine[r] >= GSLRT_PACE_WINDOWS)
      warned[r] = 0;
    if (low[r] >= GSLRT_PACE_WINDOWS && !warned[r] && !ctx->opts.quiet) {
      warned[r] = 1;
      char prefix[256], host[128] = "";
      if (ctx->hosts && ctx->hosts[r][0])
        snprintf(host, sizeof host, " on host %s", ctx->hosts[r]);
      snprintf(prefix, sizeof prefix, "%s: warning: ", ctx->prog);
      gslrt_erase_progress();
      fflush(stdout);
      gslrt_say(prefix, "rank %d%s computes %.1f times slower than rank %d", r, host, all[3 * r] / least, fast);
    }
  }
}

void gslrt_pace_window(gslrt_ctx *ctx, int64_t steps, int last) {
  double mine[3] = {ctx->pace_compute, ctx->pace_wait, 0}, *all = NULL;
  MPI_Request req;
  ctx->pace_compute = ctx->pace_wait = 0;
  ctx->pace_have = 0;
  if (last) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
      mine[2] = (double)ru.ru_maxrss; /* KiB on Linux */
  }
  if (ctx->nranks < 2) {
    if (last && (ctx->peak_rss || (ctx->peak_rss = malloc(sizeof *ctx->peak_rss))))
      ctx->peak_rss[0] = (long)mine[2];
    return;
  }
  drain_waiting(ctx, &ctx->everyone);
  for (int g = 0; g < ctx->ngroups; g++)
    drain_waiting(ctx, &ctx->groups[g]);
  if (ctx->rank == 0 && !(all = malloc(sizeof *all * 3 * (size_t)ctx->nranks)))
    gslrt_fatal(ctx, "gslrt_pace_window: out of memory");
  ctx->site = "the gathering of each rank's pace";
  gslrt_watch_enter(ctx, &ctx->everyone, "gather");
  gslrt_mpi_check(ctx, MPI_Igather(mine, 3, MPI_DOUBLE, all, 3, MPI_DOUBLE, 0, ctx->comm, &req), "MPI_Igather");
  gslrt_watch_wait(ctx, 1, &req, "MPI_Igather");
  gslrt_watch_leave(ctx);
  ctx->site = NULL;
  if (ctx->rank == 0) {
    judge(ctx, all, steps > 0 ? steps : 1);
    if (last && (ctx->peak_rss || (ctx->peak_rss = malloc(sizeof *ctx->peak_rss * (size_t)ctx->nranks))))
      for (int r = 0; r < ctx->nranks; r++)
        ctx->peak_rss[r] = (long)all[3 * r + 2];
  }
  free(all);
}
