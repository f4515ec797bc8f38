/* internal.h — what the runtime's files share and the unit tests see: the
 * gslrt_ctx struct, the option record and its parser, and the error paths.
 * Sectioned by the file that defines each function, from fail.c (errors
 * and verdicts), which every other file calls and which calls none, up;
 * nothing here is part of the contract with gslc (that is gslrt.h). */
#ifndef GSLRT_INTERNAL_H
#define GSLRT_INTERNAL_H

/* Every runtime .c includes this first: POSIX (pread, fileno, isatty) and,
 * under configure, config.h for PACKAGE_VERSION. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <mpi.h>

#include "gslrt.h"

#ifndef PACKAGE_VERSION
#define GSLRT_VERSION "0.1.0"
#else
#define GSLRT_VERSION PACKAGE_VERSION
#endif

#define GSLRT_ERRLEN 512 /* room for one error message */
#define GSLRT_EXIT_STOPPED 3 /* exit status of a run stopped by SIGTERM or SIGINT */
#define GSLRT_EXIT_HUNG 4    /* exit status of a run ended by the watchdog (health.c) */
#define GSLRT_EXIT_BUSY 5    /* exit status of a run refused because another run holds its --checkpoint DIR */
#define GSLRT_ABORT_GRACE 5  /* seconds MPI_Abort has to end the job before the rank ends itself */
#define GSLRT_COLLECTIVE_TIMEOUT 300 /* --collective-timeout's default, in seconds */
#define GSLRT_PACE_THRESHOLD 0.7 /* a score under this ... */
#define GSLRT_PACE_WINDOWS 3     /* ... for this many log windows in a row is warned of (health.c), */
#define GSLRT_PACE_MIN_LOSS 1e-3 /* if it computes at least this many seconds a step longer */

/* A group of mesh axes that collectives act over (gslrt_declare_group). */
typedef struct gslrt_group {
  int32_t n;                    /* number of axes; 0 is the group of this device alone */
  int32_t axes[GSLRT_MAX_AXES]; /* the axes, major first */
  int64_t size;                 /* devices in the group: the product of the axes' sizes */
  int64_t index;                /* this device's block index along the axes */
  MPI_Comm comm;                /* members ranked by index; MPI_COMM_NULL if size is 1 */
  int borrowed;                 /* comm is ctx->comm's (the group of every rank): not freed */
  /* the watchdog's (health.c), when --collective-timeout is not 0 and size > 1: */
  MPI_Comm watch;               /* ctx->watch, for the arrivals; MPI_COMM_NULL: not watched */
  int tag;                      /* its messages' tags there are 2 tag and 2 tag + 1 */
  int *world;                   /* member j's rank in ctx->comm (NULL: not watched) */
  int64_t seq;                  /* collectives begun on the group */
  int64_t sent;                 /* the number this rank last announced (a send buffer) */
  int64_t beat;                 /* the number of its last "still waiting" (a send buffer) */
  int64_t *heard;               /* per member: the number it announced (a receive buffer) */
  MPI_Request *ann;             /* [j]: the receive of member j's next arrival; [size + j]: mine to it */
} gslrt_group;

/* One --input, --output or --eval-input NAME=FILE. */
typedef struct gslrt_binding {
  char *name;       /* NAME, a copy freed by gslrt_free_options */
  const char *file; /* FILE, pointing into argv */
} gslrt_binding;

/* The compiled program's options (SPEC section 7). */
typedef struct gslrt_options {
  int64_t steps;            /* --steps N, default 1 */
  uint64_t seed;            /* --seed S, default 0 */
  int64_t log_every;        /* --log-every K; 0 until resolved by gslrt_log_every */
  int quiet;                /* --quiet */
  int help;                 /* --help or -h */
  int version;              /* --version */
  gslrt_binding *inputs;    /* --input bindings, in command-line order */
  int ninputs;              /* entries in inputs */
  gslrt_binding *outputs;   /* --output bindings, in command-line order */
  int noutputs;             /* entries in outputs */
  gslrt_binding *eval_inputs; /* --eval-input bindings, in command-line order */
  int neval_inputs;         /* entries in eval_inputs */
  int64_t eval_every;       /* --eval-every K, 0 if not given */
  const char *checkpoint;   /* --checkpoint DIR, or NULL */
  int64_t checkpoint_every; /* --checkpoint-every K, 0 if not given */
  int64_t keep;             /* --keep N: complete checkpoints kept; 0: not given (2) */
  int resume;               /* --resume */
  int seed_given;           /* --seed was on the command line */
  const char *metrics;      /* --metrics FILE, or NULL */
  int64_t generate;         /* --generate N: bytes of text to generate (generate.c); 0: train */
  const char *prompt;       /* --prompt TEXT (pointing into argv), or NULL */
  const char *prompt_file;  /* --prompt-file FILE, or NULL */
  double temperature;       /* --temperature T, >= 0, default 1; 0: the argmax */
  int64_t top_k;            /* --top-k K; 0 if not given (every token) */
  double max_time;          /* --max-time S: seconds of wall time the run may take; 0: not given */
  double collective_timeout; /* --collective-timeout S (default GSLRT_COLLECTIVE_TIMEOUT); 0: no watchdog */
} gslrt_options;

/* A declared param, input or optimizer state. */
typedef struct gslrt_tensor {
  const char *name;                             /* the GSL name (owned by the program) */
  int32_t kind;                                 /* GSLRT_PARAM, GSLRT_INPUT or GSLRT_STATE */
  int32_t dtype;                                /* GSLRT_F32 or GSLRT_I32 */
  int32_t rank;                                 /* number of dimensions */
  int64_t global_shape[GSLRT_MAX_RANK];         /* the whole tensor's shape */
  int64_t local_shape[GSLRT_MAX_RANK];          /* this rank's tile, padded (the buffer's shape) */
  int64_t local_offset[GSLRT_MAX_RANK];         /* where the tile starts in the whole */
  int64_t local_real[GSLRT_MAX_RANK];           /* the real elements at the tile's start, per dim */
  int64_t local_count;                          /* elements in the tile, padding included */
  int64_t real_count;                           /* elements in its real box (local_real) */
  int32_t dim_axes[GSLRT_MAX_RANK * GSLRT_MAX_AXES]; /* the sharding, as declared */
  void **slot;                                  /* where the program keeps the buffer's address */
  int32_t init;                                 /* enum gslrt_init */
  double a, b;                                  /* initializer arguments */
  uint32_t stream;                              /* rng stream of the initializer */
  int32_t frozen;                               /* not trained (unused by the runtime yet) */
  const char *file;                             /* --input FILE, or NULL */
  gslrt_npy npy;                                /* that file's header */
  int64_t batches;                              /* B of a [B, ...] file; 0 if the shape is exact */
  const char *eval_file;                        /* --eval-input FILE, or NULL */
  gslrt_npy eval_npy;                           /* that file's header */
  int64_t eval_batches;                         /* B of a [B, ...] eval file; 0 if the shape is exact */
} gslrt_tensor;

/* Elements of an input that index a table's rows (gslrt_declare_index_check). */
typedef struct gslrt_index_check {
  int tensor;                 /* the input: index into ctx->tensors */
  int64_t rows;               /* the table's rows: the elements must be in [0, rows) */
  int64_t lo[GSLRT_MAX_RANK]; /* the box of the input's global shape they lie in: from lo */
  int64_t hi[GSLRT_MAX_RANK]; /* to hi (exclusive), per dimension */
  const char *what;           /* the op and where it is written (the program's string) */
  int in_eval;                /* gsl_eval runs the op: the --eval-input batches are checked too */
} gslrt_index_check;

/* A training signal (gslrt_declare_signal) and its value this step. */
typedef struct gslrt_signal {
  const char *name;     /* its key in --metrics records and manifests ("grad_norm") */
  const char *log_name; /* its key in the log line ("gnorm"), or NULL: not logged there */
  int32_t count;        /* 0: a scalar; else a vector of count elements */
  float *value;         /* gslrt_report_signal's values (count of them, or 1) */
  int have;             /* reported during the step being logged */
} gslrt_signal;

/* A value --output may name. */
typedef struct gslrt_output {
  const char *name;                     /* the GSL name */
  int32_t dtype;                        /* GSLRT_F32 or GSLRT_I32 */
  int32_t rank;                         /* number of dimensions */
  int64_t global_shape[GSLRT_MAX_RANK]; /* the whole value's shape */
  int64_t local_shape[GSLRT_MAX_RANK];  /* this rank's tile, padded (the buffer's shape) */
  int64_t local_offset[GSLRT_MAX_RANK]; /* where the tile starts */
  int64_t local_real[GSLRT_MAX_RANK];   /* the real elements at the tile's start, per dim */
  int64_t local_count;                  /* elements in the tile, padding included */
  int64_t real_count;                   /* elements in its real box (local_real) */
  int32_t dim_axes[GSLRT_MAX_RANK * GSLRT_MAX_AXES]; /* the sharding, as declared */
  void **slot;                          /* holds the buffer's address after setup */
  const char *file;                     /* --output FILE, or NULL */
} gslrt_output;

struct gslrt_ctx {
  const char *prog;                       /* basename of argv[0], for messages */
  const gslrt_program_info *info;         /* what the program said about itself */
  MPI_Comm comm;                          /* our duplicate of MPI_COMM_WORLD */
  int rank;                               /* this process's rank in comm */
  int nranks;                             /* ranks in comm */
  gslrt_options opts;                     /* the parsed command line */
  uint64_t seed;                          /* --seed, the rng key */
  int naxes;                              /* mesh axes declared */
  const char *axis_name[GSLRT_MAX_AXES];  /* their names */
  int64_t axis_size[GSLRT_MAX_AXES];      /* their sizes */
  int64_t coord[GSLRT_MAX_AXES];          /* this rank's coordinate on each axis */
  int mesh_checked;                       /* the mesh was compared with nranks */
  gslrt_tensor *tensors;                  /* declared params, inputs and states */
  int ntensors;                           /* entries in tensors */
  gslrt_output *outputs;                  /* declared outputs */
  int noutputs;                           /* entries in outputs */
  void **allocs;                          /* every buffer handed out, freed at exit */
  int nallocs;                            /* entries in allocs */
  int cap_allocs;                         /* capacity of allocs */
  gslrt_group *groups;                    /* declared groups, indexed by id */
  int ngroups;                            /* entries in groups */
  int groups_built;                       /* their communicators exist */
  void *scratch;                          /* packing space of the collectives */
  size_t scratch_bytes;                   /* its size */
  void *rider;                            /* packing space of all_to_all riders */
  size_t rider_bytes;                     /* its size */
  int have_loss;                          /* gslrt_report_loss was called this step */
  float loss;                             /* the value it reported */
  const char *optimizer;                  /* gslrt_declare_optimizer's description, or NULL */
  gslrt_signal *signals;                  /* gslrt_declare_signal's, in order */
  int nsignals;                           /* entries in signals */
  int ckpt_dir;                           /* rank 0: the open --checkpoint DIR, or -1 */
  int ckpt_lock;                          /* rank 0: DIR/.lock, flock'd for the run, or -1 */
  char run_id[33];                        /* the run's identity in its checkpoints (hex) */
  void *build;                            /* info->build parsed (a jansson json_t object), or NULL */
  int argc;                               /* the command line as the program got it, before MPI_Init: */
  const char **argv;                      /* argc arguments (the array malloc'd, the strings argv's) */
  time_t started_at;                      /* the wall-clock time gslrt_main began */
  void *provenance;                       /* rank 0: the provenance record (a jansson json_t object), or NULL */
  int64_t metrics_records;                /* rank 0: records written to --metrics so far */
  const char **eval_names;                /* gslrt_declare_eval's names, in order */
  int neval;                              /* entries in eval_names */
  int64_t eval_batches;                   /* held-out batches B; 0: no --eval-input, no evaluation */
  int have_eval;                          /* the step being logged was evaluated */
  double *eval_values;                    /* then its results: [0] eval_loss, [1 + i] eval_NAME */
  double eval_seconds;                    /* and the wall time the evaluation took */
  int64_t end;                            /* the step count the run ends at: --steps, or fewer at --max-time */
  double started;                         /* MPI_Wtime() just after MPI_Init: --max-time counts from it */
  gslrt_index_check *checks;              /* declared index checks, in declaration order */
  int nchecks;                            /* entries in checks */
  int64_t *check_first;                   /* per check: scratch for the first element out of range */
  int64_t step;                           /* the step running (0-based); in an evaluation, the
                                             steps done before it (messages say which) */
  int64_t held_out;                       /* the held-out batch being evaluated, or -1 (training) */
  FILE *metrics;                          /* the open --metrics file (rank 0), or NULL */
  uint64_t metrics_dev, metrics_ino;      /* its device and inode (rank 0) */
  int generating;                         /* --generate runs: step is the byte being generated */
  char doing[128];                        /* what the run does outside a step, or "" (gslrt_doing) */
  gslrt_group everyone;                   /* every rank (comm borrowed): the runtime's own collectives */
  MPI_Comm watch;                         /* a duplicate of comm for the watchdog's messages, or MPI_COMM_NULL */
  char (*hosts)[64];                      /* each rank's host (MPI_Get_processor_name), or NULL */
  const char *site;                       /* where the next collective is written (gslrt_collective_at) */
  const char *coll_kind;                  /* the collective running: "all_reduce", ... */
  gslrt_group *coll_group;                /* its group */
  double coll_begun;                      /* when it began (MPI_Wtime) */
  double coll_seconds;                    /* seconds inside collective calls, since the start */
  double pace_compute, pace_wait;         /* this log window: seconds of steps' compute and wait */
  int *pace_low;                          /* rank 0: per rank, log windows in a row under the threshold,
                                             then in a row not, then whether it was warned of */
  int pace_have;                          /* the last window's results below are set (several ranks) */
  int pace_slowest;                       /* the rank with the most compute time in the window */
  double pace_score;                      /* the fastest rank's compute time over the slowest's */
  double pace_compute_ms, pace_wait_ms;   /* the slowest's compute and wait per step, in ms */
  long *peak_rss;                         /* rank 0, after the last step: each rank's ru_maxrss (KiB) */
  MPI_Status *statuses;                   /* room for the statuses of a collective's requests */
  int nstatuses;                          /* its size */
};

/* ---- fail.c: the bottom: ending a run and saying why -------------------- */

/* A run-time error seen by this rank alone: prints "PROG: rank R: error:
 * cause" and ends every rank (MPI_Abort; with one rank, exit(1)). ctx may be
 * NULL (gslrt_sgemm): then the context of the running gslrt_main. */
void gslrt_fatal(gslrt_ctx *ctx, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));
/* A run-time error every rank reaches together (the same decision on the
 * same data): rank 0 prints "PROG: rank 0: error: cause"; all exit 1. */
void gslrt_fail_all(gslrt_ctx *ctx, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));
/* The same, every rank exiting with code (GSLRT_EXIT_BUSY). */
void gslrt_fail_all_code(gslrt_ctx *ctx, int code, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
/* A usage error, reached by every rank together: rank 0 prints "PROG:
 * error: cause" and "Try 'PROG --help'."; all exit 2. */
void gslrt_usage_error(gslrt_ctx *ctx, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));
/* Dies through gslrt_fatal naming call if rc is not MPI_SUCCESS. */
void gslrt_mpi_check(gslrt_ctx *ctx, int rc, const char *call);
/* Finalizes MPI (freeing ctx's communicator) if it is up, and exits with code. */
void gslrt_exit(gslrt_ctx *ctx, int code) __attribute__((noreturn));
/* prefix and the message on stderr in one write, with a newline. */
void gslrt_say(const char *prefix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* What the run is doing, for messages, into buf: "training step S" (S
 * from 1, as the log counts) or "evaluation after step S", and with
 * with_batch ", held-out batch J of B" after that; "generating byte J"
 * (from 1) under --generate. */
void gslrt_phase(const gslrt_ctx *ctx, int with_batch, char *buf, size_t len);
/* What the run is doing outside its steps ("writing the checkpoint of
 * step 4"), which gslrt_phase then says instead; fmt NULL: that is over. */
void gslrt_doing(gslrt_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A blocking MPI call with no non-blocking form begins (fmt names it):
 * should it not end within --collective-timeout seconds, this rank says
 * so and ends with GSLRT_EXIT_HUNG; gslrt_deadline_off after the call.
 * Nothing with one rank or --collective-timeout 0. */
void gslrt_deadline(gslrt_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gslrt_deadline_off(gslrt_ctx *ctx);
/* The same over the start-up, set before MPI_Init (no context yet): limit
 * seconds (--collective-timeout as argv gives it), rank and ranks from the
 * process manager's PMI_RANK and PMI_SIZE; nothing with one rank or limit
 * 0. gslrt_deadline for the run's communicator replaces it. */
void gslrt_deadline_startup(const char *prog, double limit);
/* A call past the run's work (MPI_Finalize, MPI_Abort) begins: should it
 * not return within limit seconds, this rank warns that the call did not
 * return, with why, and ends with code (the run's own status). Nothing
 * with limit 0. */
/* Past the work, a call that may not return (MPI_Finalize, MPI_Abort)
 * ends the rank with status code after limit seconds, saying why; with
 * guard, an exit or a hang-up, termination or broken pipe inside it too
 * (MPI_Finalize). */
void gslrt_deadline_exit(int rank, const char *prog, double limit, const char *call, int code, const char *why,
                         bool guard);
/* "[i, j, ...]" into buf: the position of element e (C order) of a tile
 * of shape (rank entries) at offset in its tensor (NULL: all zeros), in
 * the tensor; "" for a scalar. */
void gslrt_position(int32_t rank, const int64_t *shape, int64_t e, const int64_t *offset, char *buf,
                    size_t len);
/* "f32[2, 3]" into buf: a tensor's type as messages give it. */
void gslrt_type_str(char *buf, size_t len, int32_t dtype, int32_t rank, const int64_t *shape);
/* The running gslrt_main's context (NULL: none), for gslrt_fatal(NULL, ...). */
void gslrt_set_current(gslrt_ctx *ctx);
/* main.c has left a progress line on the terminal (rewritten with '\r');
 * gslrt_erase_progress erases it, if there is one, before anything is printed. */
void gslrt_progress_shown(void);
void gslrt_erase_progress(void);

/* The same with the exit status code (GSLRT_EXIT_HUNG: the watchdog). */
void gslrt_fatal_code(gslrt_ctx *ctx, int code, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));

/* ---- health.c: the watchdog over collectives, each rank's pace ----------- */

/* Each rank's host into ctx->hosts (every rank together, after the groups
 * are built); nothing with one rank. */
void gslrt_health_init(gslrt_ctx *ctx);
void gslrt_health_done(gslrt_ctx *ctx);
void gslrt_health_free(gslrt_ctx *ctx);
/* The watch over group gr (built; ctx->comm's group of every rank too):
 * its members' ranks in ctx->comm and its tag (a number of its own) on
 * ctx->watch, the one duplicate of ctx->comm for every group's arrivals,
 * made on first need, when --collective-timeout is not 0 and the group
 * has several members; and its end. Every member together. */
void gslrt_watch_group(gslrt_ctx *ctx, gslrt_group *gr, int tag);
void gslrt_unwatch_group(gslrt_ctx *ctx, gslrt_group *gr);
/* A collective of kind ("all_reduce") begins on gr (size > 1): its time
 * starts, and this rank announces its arrival to the other members. */
void gslrt_watch_enter(gslrt_ctx *ctx, gslrt_group *gr, const char *kind);
/* Waits for the collective's n requests (MPI_Testall polled), at most
 * --collective-timeout seconds since it began; past that, ends the run
 * (GSLRT_EXIT_HUNG) naming the collective, where it is written, which
 * members had arrived and which had not. call names the MPI call for an
 * error it returns. */
void gslrt_watch_wait(gslrt_ctx *ctx, int n, MPI_Request *req, const char *call);
/* The collective has ended: every member's arrival received, the time it
 * took added to ctx->coll_seconds. */
void gslrt_watch_leave(gslrt_ctx *ctx);
/* The maximum over every rank of mine (an MPI_Allreduce, watched), what
 * naming it for the watchdog ("the check for a stop signal"). */
int gslrt_agree_max(gslrt_ctx *ctx, int mine, const char *what);
/* The runtime's own collectives over every rank (ctx->comm), watched as
 * the program's are: what names each for the watchdog's message ("the
 * checkpoint's checksums"); before the groups are built, waited for
 * without a deadline. */
void gslrt_world_bcast(gslrt_ctx *ctx, void *buf, int n, MPI_Datatype type, int root, const char *what);
void gslrt_world_allreduce(gslrt_ctx *ctx, const void *in, void *out, int n, MPI_Datatype type, MPI_Op op,
                           const char *what);
void gslrt_world_reduce(gslrt_ctx *ctx, const void *in, void *out, int n, MPI_Datatype type, MPI_Op op, int root,
                        const char *what);
void gslrt_world_gather(gslrt_ctx *ctx, const void *in, int n, MPI_Datatype type, void *out, int root,
                        const char *what);
void gslrt_world_allgather(gslrt_ctx *ctx, const void *in, int n, MPI_Datatype type, void *out, const char *what);
void gslrt_world_gatherv(gslrt_ctx *ctx, const void *in, int n, MPI_Datatype type, void *out, const int *counts,
                         const int *displs, int root, const char *what);
/* A decision rank 0 made alone (status 0: fine; 2: a usage error;
 * GSLRT_EXIT_BUSY: the --checkpoint DIR is another run's; any other: a
 * run-time error, with its cause in rank 0's err), shared with every rank,
 * which then go on together or end together (with that status) as it says. */
void gslrt_rank0_verdict(gslrt_ctx *ctx, int status, const char *err);
/* A step took seconds, of which wait inside collectives: into the window. */
void gslrt_pace_step(gslrt_ctx *ctx, double seconds, double wait);
/* Ends a log window of steps steps (every rank together, one small
 * collective): rank 0 finds the slowest rank and its score (ctx->pace_*),
 * and warns of a rank under GSLRT_PACE_THRESHOLD for GSLRT_PACE_WINDOWS
 * windows in a row; with last, each rank's peak RSS too (ctx->peak_rss). */
void gslrt_pace_window(gslrt_ctx *ctx, int64_t steps, int last);

/* ---- options.c ----------------------------------------------------------- */

/* Parses argv[1..argc) into *o (zeroed first). 0 on success; -1 with the
 * cause (without program name) in err. Free with gslrt_free_options. */
int gslrt_parse_options(int argc, char **argv, gslrt_options *o, char *err, int errlen);
void gslrt_free_options(gslrt_options *o);
/* The --log-every in effect: the option, or the default for steps. */
int64_t gslrt_log_every(const gslrt_options *o);
/* The --help text. */
void gslrt_print_usage(FILE *f, const char *prog);

/* ---- tensors.c ----------------------------------------------------------- */

/* Compares the mesh with the number of ranks (once) and computes this
 * rank's coordinates; called by the first declaration and after setup. */
void gslrt_check_mesh(gslrt_ctx *ctx);
/* The tile of mesh rank r for a tensor of global_shape sharded by dim_axes
 * (rank * GSLRT_MAX_AXES entries), as gslrt.h lays it out (beside
 * gslrt_declare_tensor): the padded extents c = ceil(n / k) to local_shape,
 * the start j * c to local_offset, and, if local_real is not NULL, the
 * real extents max(0, min(c, n - j * c)) to it; what names the tensor in
 * errors (k > n is one, on every rank together). */
void gslrt_tile(gslrt_ctx *ctx, int r, const char *what, int32_t rank, const int64_t *global_shape,
                const int32_t *dim_axes, int64_t *local_shape, int64_t *local_offset);
void gslrt_tile_real(gslrt_ctx *ctx, int r, const char *what, int32_t rank, const int64_t *global_shape,
                     const int32_t *dim_axes, int64_t *local_shape, int64_t *local_offset,
                     int64_t *local_real);
/* Copies the real box (real, at the start of every dimension) of a padded
 * tile of shape (rank entries; esize-byte elements, C order) into packed,
 * a C-order array of the box's shape. */
void gslrt_box_pack(void *packed, const void *tile, int32_t rank, const int64_t *shape,
                    const int64_t *real, int esize);
/* The inverse: packed into the real box of tile, every padding element of
 * tile set to zero. */
void gslrt_box_unpack(void *tile, const void *packed, int32_t rank, const int64_t *shape,
                      const int64_t *real, int esize);
/* The coordinates of mesh rank r, row-major over the axes (the last axis
 * varies fastest). */
void gslrt_mesh_coords(const gslrt_ctx *ctx, int64_t r, int64_t *coord);
/* The block index of a device at coord along axes[0..n) read major first
 * (entries < 0 are skipped): ((c[a0] * s[a1]) + c[a1]) * s[a2] + ...; the
 * number of blocks, the product of the sizes, goes to *blocks if not NULL.
 * Tiles and groups both number their blocks this way. */
int64_t gslrt_block_index(const gslrt_ctx *ctx, const int64_t *coord, int n, const int32_t *axes,
                          int64_t *blocks);
/* Matches --input, --eval-input and --output with the declarations (usage
 * errors); an input without an initializer must have an --input, or, with
 * --resume, an --eval-input (then gslrt_check_training_inputs decides). */
void gslrt_check_bindings(gslrt_ctx *ctx);
/* After --resume at step first < --steps: every input without an
 * initializer must have an --input (a usage error). */
void gslrt_check_training_inputs(gslrt_ctx *ctx, int64_t first);
/* Checks every --output target on rank 0 before step 1: two names of one
 * file (the same path, or paths of one existing file), or a name of the
 * --metrics file (opened before), are a usage error; a target that is not
 * a regular file, or whose directory takes no new file, a run-time error. */
void gslrt_check_outputs(gslrt_ctx *ctx);
/* Reads and checks every --input and --eval-input file's header on rank 0,
 * shares them, and sets ctx->eval_batches (all --eval-input files must
 * hold the same number of batches). */
void gslrt_open_inputs(gslrt_ctx *ctx);
/* Initializes every param and state (draws with step -1). */
void gslrt_init_params(gslrt_ctx *ctx);
/* Fills every input for step: its tile of the file's batch step % B, or
 * its initializer drawn for step; then checks the indices read (every
 * rank together; ctx->step and ctx->held_out say the phase). */
void gslrt_bind_inputs(gslrt_ctx *ctx, int64_t step);
/* Fills every input for held-out batch j: its tile of batch j of its
 * --eval-input file, or its initializer drawn with key GSLRT_EVAL_KEY + j;
 * then checks the indices read, as gslrt_bind_inputs. */
void gslrt_bind_eval_inputs(gslrt_ctx *ctx, int64_t j);
/* Gathers each --output to rank 0 and writes them all or none. */
void gslrt_write_outputs(gslrt_ctx *ctx);
/* Output o's whole value (its global shape, C order), gathered from every
 * rank's tile: a malloc'd array on rank 0 (free it), NULL on the others.
 * Every rank together. */
void *gslrt_gather_output(gslrt_ctx *ctx, const gslrt_output *o);
/* Binds every input for generated byte j (key GSLRT_GEN_KEY + j): input
 * tokens (an index into ctx->tensors, i32) takes its tile of window, its
 * whole value (global shape, C order; the same on every rank); every
 * other input its initializer drawn with key. Indices are not checked
 * here: generate.c has checked that every token it writes is below every
 * table they index. */
void gslrt_bind_gen_inputs(gslrt_ctx *ctx, int tokens, const int32_t *window, int64_t key);
/* Tokens per step, of the first declared input (1 if none): the product
 * of all its dims but the last if it is f32 (rows of features), of all
 * its dims if it is i32 (token ids). */
int64_t gslrt_tokens_per_step(const gslrt_ctx *ctx);

/* ---- ckpt_manifest.c (the checkpoint's files share ckpt.h) -------------- */

/* Parses the program's "build" record (gslrt_program_info.build) into
 * ctx->build, once, at the start; text that is not a JSON object is a bug
 * of gslc, and ends the run saying so. Every rank alike. */
void gslrt_checkpoint_build(gslrt_ctx *ctx);
/* Frees ctx->build. */
void gslrt_checkpoint_free(gslrt_ctx *ctx);

/* ---- ckpt_lock.c --------------------------------------------------------- */

/* Checks the checkpoint options against each other (usage errors) and,
 * on rank 0, that DIR is or can be made a directory; every rank together. */
void gslrt_checkpoint_open(gslrt_ctx *ctx);

/* ---- checkpoint.c -------------------------------------------------------- */

/* With --resume: restores every param and state from the newest complete
 * checkpoint in DIR and returns its step (the steps done); 0 without
 * --resume or when DIR holds no checkpoint. Every rank together, after
 * gslrt_init_params. */
int64_t gslrt_checkpoint_resume(gslrt_ctx *ctx);
/* Whether a checkpoint is due after done steps (of --steps). */
int gslrt_checkpoint_due(const gslrt_ctx *ctx, int64_t done);
/* Writes the checkpoint of done steps into DIR, atomically, then prunes
 * the older ones beyond --keep. Every rank together. */
void gslrt_checkpoint_write(gslrt_ctx *ctx, int64_t done);

/* ---- provenance.c ------------------------------------------------------- */

/* Makes the provenance record (ctx->provenance, on rank 0) of a run that
 * writes a manifest or metrics: the ranks' hosts (one MPI_Gather), the
 * user, gslc's version, the sources' and the binary's SHA-256, argv and
 * the start time. Once, every rank together, after gslrt_checkpoint_build. */
void gslrt_provenance_gather(gslrt_ctx *ctx);
/* Writes the record to f as one line of JSON ({} if there is none); 0 or -1. */
int gslrt_provenance_dump(const gslrt_ctx *ctx, FILE *f);
/* Frees the record. */
void gslrt_provenance_free(gslrt_ctx *ctx);

/* ---- eval.c ------------------------------------------------------------- */

/* Checks --eval-input and --eval-every against the program (usage
 * errors), after gslrt_check_bindings has matched the names. */
void gslrt_check_eval(gslrt_ctx *ctx);
/* Whether an evaluation is due after done steps (of --steps). */
int gslrt_eval_due(const gslrt_ctx *ctx, int64_t done);
/* Evaluates the params as they stand after done steps on every held-out
 * batch and puts the means in ctx->eval_values (ctx->have_eval,
 * ctx->eval_seconds); the step's loss is kept, and with keep_outputs every
 * --output's buffer too. Every rank together. */
void gslrt_evaluate(gslrt_ctx *ctx, int64_t done, int keep_outputs);

/* ---- collectives.c ------------------------------------------------------- */

/* Validates the declared groups against the mesh and builds their
 * communicators; once, after gslrt_check_mesh, on every rank together. */
void gslrt_build_groups(gslrt_ctx *ctx);
/* Frees the groups' communicators, the groups and the scratch space. */
void gslrt_free_groups(gslrt_ctx *ctx);
/* Cuts a row-major [outer][g * d][inner] array of esize-byte elements into
 * g contiguous blocks, dst = [g][outer][d][inner]. */
void gslrt_pack_blocks(void *dst, const void *src, int64_t outer, int64_t g, int64_t d,
                       int64_t inner, int esize);
/* The inverse: joins src = [g][outer][d][inner] into dst = [outer][g * d][inner]. */
void gslrt_unpack_blocks(void *dst, const void *src, int64_t outer, int64_t g, int64_t d,
                         int64_t inner, int esize);

/* ---- blas.c -------------------------------------------------------------- */

/* What gslrt_sgemm and gslrt_gemm_bf16 have done since the run started,
 * for the tests and the benchmark: oneDNN primitives made and shapes it
 * declined (each once per distinct descriptor), cache lookups that found
 * one, and calls that ran on each library. */
typedef struct gslrt_gemm_counts {
  int64_t created;      /* oneDNN matmul primitives made */
  int64_t declined;     /* descriptors oneDNN could not serve (or only with its reference kernel) */
  int64_t hits;         /* products whose descriptor was in the cache already */
  int64_t onednn_calls; /* products run by oneDNN */
  int64_t blas_calls;   /* products run by OpenBLAS (batched: one call) */
} gslrt_gemm_counts;
void gslrt_gemm_get_counts(gslrt_gemm_counts *out);
/* on 0: every product from now on goes to OpenBLAS (bf16 widened), as if
 * oneDNN had declined it; 1 (the default): the usual choice. For tests. */
void gslrt_gemm_use_onednn(int on);
/* on 1: every product from now on is pinned.c's (gslc --same-bits: each
 * element one chain of FMAs over k in order, whatever the shape) */
void gslrt_gemm_pin(int on);

/* ---- pinned.c ------------------------------------------------------------ */

/* gslrt_sgemm's and gslrt_gemm_bf16's products with each element of C the
 * chain c = fma(a[i][k], b[k][j], c) over k = 0 .. K-1 from c = 0, the
 * same bits for an element whatever M, N, the batch or its place in C. */
void gslrt_sgemm_pinned(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                        const float *a, int64_t lda, int64_t stride_a, const float *b, int64_t ldb, int64_t stride_b,
                        float *c, int64_t ldc, int64_t stride_c);
void gslrt_gemm_bf16_pinned(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                            const uint16_t *a, int64_t lda, int64_t stride_a, const uint16_t *b, int64_t ldb,
                            int64_t stride_b, void *c, int32_t c_dtype, int64_t ldc, int64_t stride_c);
/* The tiles those products run from now on: the widest this CPU has (2
 * AVX-512, 1 AVX2 with FMA, 0 scalar fmaf), or at most at_most (>= 0:
 * the unit tests run each); returns the tiles chosen. Every choice gives
 * the same bits. */
int gslrt_pinned_tiles(int at_most);

/* ---- rng.c --------------------------------------------------------------- */

/* The draw for global element index i of (seed, stream, step): uniform in
 * [0,1) and normal (mean 0, std 1), exactly as gslrt_rng_fill makes them. */
double gslrt_rng_uniform01(uint64_t seed, uint32_t stream, int64_t step, uint64_t i);
double gslrt_rng_normal01(uint64_t seed, uint32_t stream, int64_t step, uint64_t i);
/* The same draw as a double uniform in [0, 1) with 53 random bits. */
double gslrt_rng_uniform53(uint64_t seed, uint32_t stream, int64_t step, uint64_t i);

/* ---- generate.c ---------------------------------------------------------- */

/* gsl_forward's key for generated byte 0 (byte j: + j): 3 * 2^61, apart
 * from training steps and from GSLRT_EVAL_KEY's held-out batches. */
#define GSLRT_GEN_KEY ((int64_t)3 << 61)
/* The stream of the sampling draws, past any the compiler numbers. */
#define GSLRT_GEN_STREAM 0xFFFFFFFFu

/* --generate N: checks the program against the convention and the
 * options against it (usage errors), reads the prompt, loads the params
 * (the newest checkpoint in --checkpoint DIR, or their initializers), and
 * writes the N bytes it samples to rank 0's stdout. Every rank together,
 * in place of training. */
void gslrt_generate(gslrt_ctx *ctx);
/* The token chosen from the scores z[0..v) for generated byte j (from 0),
 * with temperature and top_k (0: all v) and the uniform draw u: man/gslrun.7,
 * GENERATION. -1 with the cause in err if z holds a NaN or +inf, or no
 * finite score. No MPI: the unit tests call it. */
int gslrt_choose_token(const float *z, int64_t v, double temperature, int64_t top_k, double u, char *err,
                       int errlen);

#endif
