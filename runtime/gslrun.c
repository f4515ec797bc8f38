/* gslrun.c — the supervisor: runs a compiled program under mpirun and, when
 * the job fails, restarts it from the newest complete checkpoint of this
 * run, on fewer ranks where the hostfile has lost slots.
 *
 *   options -> [source: gslc --mesh-axes] -> segment loop:
 *     read the hostfile -> [source: choose the largest mesh that fits,
 *     compile it once] -> spawn mpirun (its own process group, its output
 *     through pipes, read line by line for what the job says) -> wait ->
 *     classify: 0 done; 3 stopped; 2 a usage error; a signal forwarded:
 *     never restarted; anything else a failure -> find the newest complete
 *     checkpoint, check it is this run's -> back off -> restart with
 *     --resume.
 *
 * A failure's rank comes from the runtime's `PROG: rank R: error:` line or
 * from hydra's BAD TERMINATION block (PID, host), its pid mapped to a rank
 * by the PMI_RANK of the job's local processes, read from /proc while the
 * job runs. The steps lost are the last step the job logged (its `step K/N`
 * lines, or its --metrics records) less the step resumed from. A run's
 * checkpoints are known by the run identity in their manifests: the one
 * the job resumed (with --resume given), or the one that appeared in DIR
 * after gslrun started under an identity DIR did not hold before. Which
 * names are checkpoints, which is complete and which the newest, and a
 * manifest's run, are read by ckdir.c, which the runtime links too: the
 * newest gslrun finds is the one the job resumes from. The
 * --metrics file, which every segment truncates, is kept whole: after each
 * segment gslrun takes that segment's records and writes the file again as
 * every segment's records, each followed by one record of gslrun's. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif

#include <jansson.h>

#include "config.h"
#include "ckdir.h"
#include "paths.h"

#define MAX_AXES 8       /* as GSL_MAX_AXES */
#define MAX_MESHES 16    /* distinct meshes compiled in one run */
#define MAX_RANKS 4096   /* local ranks mapped from pid */
#define BACKOFF_CAP 30.0 /* the longest back-off, seconds */
#define EXIT_STOPPED 3   /* the runtime's GSLRT_EXIT_STOPPED */
#define EXIT_USAGE 2     /* the runtime's usage errors */
#define EXIT_BUSY 5      /* the runtime's GSLRT_EXIT_BUSY: another run holds the --checkpoint DIR */
#define EXIT_NOSTART 1   /* gslrun could not start the job at all */
#define PM_GRACE 10.0    /* seconds mpirun has to end after every rank found on this host has */
#define TO_GSLRUN "gslrun-ranks:" /* the runtime's lines for gslrun alone: each rank's pid and host (health.c) */

/* A file as stat(2) saw it: changed when any of these differ. */
typedef struct FileId {
  bool exists;           /* stat found it */
  dev_t dev;             /* its device */
  ino_t ino;             /* and inode */
  off_t size;            /* its size */
  struct timespec mtime; /* its last change */
} FileId;

typedef struct Axis {
  char name[64];  /* the axis's name */
  long size;      /* its size as the user compiled it */
  char cname[64]; /* the const that sizes it, or "" (fixed) */
  bool data;      /* a data axis: shrinks first */
} Axis;

typedef struct Built {
  long size[MAX_AXES]; /* the mesh */
  char *path;          /* the binary compiled for it */
} Built;

typedef struct Run {
  /* options */
  long np;              /* -np N: the most ranks (0: the mesh's, source only) */
  long max_restarts;    /* --max-restarts */
  long min_np;          /* --min-np */
  double backoff;       /* --backoff: the first back-off, doubled each restart */
  const char *hostfile; /* --hostfile, or NULL */
  const char *program;  /* PROGRAM: a binary or a .gsl source */
  bool source;          /* PROGRAM is a .gsl source */
  char **gslc_args;     /* a source's gslc options */
  int ngslc;
  char **args; /* the program's arguments */
  int nargs;
  const char *ckdir;   /* its --checkpoint DIR, or NULL */
  const char *metrics; /* its --metrics FILE, or NULL */
  bool resume;         /* it was given --resume */
  /* tools */
  char *mpirun; /* mpirun's path */
  char *gslc;   /* gslc's path (source only) */
  char *tmpdir; /* where the binaries of a source go */
  /* a source's mesh */
  Axis axes[MAX_AXES];
  int naxes;
  Built built[MAX_MESHES];
  int nbuilt;
  /* this run's checkpoints */
  struct timespec started; /* when gslrun started (CLOCK_REALTIME) */
  char **pre_runs;         /* run identities DIR held when gslrun started */
  int npre;
  char ours[CKDIR_RUN]; /* this run's identity, "" while unknown */
  /* metrics */
  char *acc; /* every segment's records so far, with gslrun's */
  size_t acclen;
  bool wrote;  /* gslrun has written the --metrics file */
  FileId left; /* the file as gslrun left it, if it wrote it */
  long prev_rank0; /* the previous segment's rank 0 (the lock's holder), 0 unknown */
} Run;

/* What one segment of the run did, as its output and status say. */
typedef struct Segment {
  int k;                /* 1, 2, ... */
  long np;              /* its ranks */
  long size[MAX_AXES];  /* a source's mesh */
  long first;           /* the step it resumed from (0: fresh) */
  long last;            /* the last step it logged, -1: none */
  int status;           /* mpirun's exit status, or 128 + its signal */
  int signal;           /* the signal that ended mpirun itself, 0 */
  char exec_err[512];   /* hydra's `execvp error on file` line: the program cannot be run */
  int err_rank;         /* the rank an error line names, -1 */
  char err_line[512];   /* the first `rank R: error:` line */
  bool work_done;       /* rank 0 said every rank's work was done and agreed ("gslrun-ranks: done") */
  long bad_pid;         /* hydra's BAD TERMINATION: its pid, 0 */
  char bad_host[256];   /* and host */
  int bad_code;         /* and EXIT CODE, -1 */
  bool stopped;         /* a `stopped by SIG...` line */
  long pid[MAX_RANKS];  /* the local ranks' pids by rank, 0 unknown */
  long all_pid[MAX_RANKS];      /* every rank's pid, as the runtime tells gslrun (health.c), 0 unknown */
  char all_host[MAX_RANKS][64]; /* and host */
  int pidfd[MAX_RANKS]; /* a pidfd of each, polled for its end; -1 none */
  int nfound;           /* how many are known */
  int ntracked;         /* how many of them have a pidfd (none without pidfd_open) */
  int first_dead;       /* the local rank seen to end first, -1 */
  int together[8];      /* the ranks seen to end at that same wakeup, first_dead among them */
  int ntogether;
  double died_at;     /* when (now()) */
  double detect;      /* from then to mpirun's end, seconds */
  double pm_ended;    /* gslrun ended mpirun this long after the last rank found here had ended, 0 */
  char last_err[512]; /* the last line on the job's stderr */
  char written[256];  /* the last checkpoint the job said it wrote: DIR/step-N */
} Segment;

static volatile sig_atomic_t got_signal; /* SIGTERM or SIGINT to gslrun, unforwarded */
static int sig_pipe[2] = {-1, -1};       /* written by the handler, wakes poll */

static void on_signal(int sig) {
  int e = errno;
  got_signal = sig;
  if (sig_pipe[1] >= 0 && write(sig_pipe[1], "s", 1) < 0) {
  }
  errno = e;
}

/* One line on stderr: "gslrun: " and the message. */
static void say(const char *fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = snprintf(buf, sizeof buf, "gslrun: ");
  vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  va_end(ap);
  for (char *c = buf; *c; c++) /* one line whatever it quotes */
    if (*c == '\n' || *c == '\r')
      *c = ' ';
  size_t len = strlen(buf);
  buf[len++] = '\n';
  if (write(2, buf, len) < 0) {
  }
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    say("error: out of memory");
    exit(1);
  }
  return p;
}

static char *xstrdup(const char *s) {
  return strcpy(xmalloc(strlen(s) + 1), s);
}

static char *xasprintf(const char *fmt, ...) {
  va_list ap, aq;
  va_start(ap, fmt);
  va_copy(aq, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = xmalloc((size_t)n + 1);
  vsnprintf(s, (size_t)n + 1, fmt, aq);
  va_end(aq);
  return s;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char usage[] =
    "usage: gslrun [options] -np N PROGRAM [ARGS...]\n"
    "       gslrun [options] [-np N] FILE.gsl [GSLC-OPTIONS...] [-- ARGS...]\n"
    "Runs a program compiled by gslc under mpirun and restarts it from its newest\n"
    "checkpoint (--checkpoint DIR among ARGS) when the job fails; given a source, on the\n"
    "largest mesh the hostfile's slots hold.\n"
    "\n"
    "  -np N, -n N        the ranks (a source: the most ranks; default the mesh's)\n"
    "  --max-restarts N   restart a failed job at most N times (default 3)\n"
    "  --hostfile F       mpirun's hostfile (host[:slots] a line), read afresh before each start\n"
    "  --min-np K         never shrink a source's mesh below K ranks (default 1)\n"
    "  --backoff S        wait S seconds before the first restart, twice that before the\n"
    "                     next, at most 30 (default 1)\n"
    "  --help             show this help\n"
    "  --version          show the version\n";

static int usage_error(const char *fmt, const char *arg) {
  char msg[1024];
  snprintf(msg, sizeof msg, fmt, arg);
  say("error: %s", msg);
  fprintf(stderr, "Try 'gslrun --help'.\n");
  return EXIT_USAGE;
}

/* a whole number from lo to hi, or -1 */
static long number(const char *s, long lo, long hi) {
  char *end;
  errno = 0;
  long v = s && isdigit((unsigned char)*s) ? strtol(s, &end, 10) : -1;
  if (v < 0 || errno || *end || v < lo || v > hi)
    return -1;
  return v;
}

/* The value of option `opt` at argv[*i]: "--opt=V" or "--opt V". */
static const char *value_of(int argc, char **argv, int *i, const char *opt) {
  const char *a = argv[*i];
  size_t n = strlen(opt);
  if (a[n] == '=')
    return a + n + 1;
  return *i + 1 < argc ? argv[++*i] : NULL;
}

static bool is_opt(const char *a, const char *opt) {
  size_t n = strlen(opt);
  return strncmp(a, opt, n) == 0 && (a[n] == '\0' || a[n] == '=');
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int parse_options(int argc, char **argv, Run *r) {
  r->max_restarts = 3;
  r->min_np = 1;
  r->backoff = 1;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *a = argv[i], *v;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      exit(0);
    } else if (!strcmp(a, "--version")) {
      printf("gslrun (GSL) %s\n", PACKAGE_VERSION);
      exit(0);
    } else if (is_opt(a, "-np") || is_opt(a, "-n")) {
      v = value_of(argc, argv, &i, a[2] == 'p' ? "-np" : "-n");
      if ((r->np = number(v, 1, MAX_RANKS)) < 0)
        return usage_error("-np needs a number of ranks from 1 to 4096, not '%s'", v ? v : "");
    } else if (is_opt(a, "--max-restarts")) {
      v = value_of(argc, argv, &i, "--max-restarts");
      if ((r->max_restarts = number(v, 0, 1000000)) < 0)
        return usage_error("--max-restarts needs a number from 0 to 1000000, not '%s'", v ? v : "");
    } else if (is_opt(a, "--min-np")) {
      v = value_of(argc, argv, &i, "--min-np");
      if ((r->min_np = number(v, 1, MAX_RANKS)) < 0)
        return usage_error("--min-np needs a number from 1 to 4096, not '%s'", v ? v : "");
    } else if (is_opt(a, "--hostfile")) {
      if (!(r->hostfile = value_of(argc, argv, &i, "--hostfile")) || !*r->hostfile)
        return usage_error("--hostfile needs a file%s", "");
    } else if (is_opt(a, "--backoff")) {
      v = value_of(argc, argv, &i, "--backoff");
      char *end;
      r->backoff = v ? strtod(v, &end) : -1;
      if (!v || end == v || *end || !(r->backoff >= 0 && r->backoff <= BACKOFF_CAP))
        return usage_error("--backoff needs a number of seconds from 0 to 30, not '%s'", v ? v : "");
    } else if (!strcmp(a, "--")) {
      i++;
      break;
    } else {
      return usage_error("unknown option '%s' (gslrun's options come before PROGRAM)", a);
    }
  }
  if (i >= argc)
    return usage_error("no PROGRAM given%s", "");
  r->program = argv[i++];
  r->source = ends_with(r->program, ".gsl");
  if (!r->source && !r->np)
    return usage_error("-np N is needed to run %s (a binary)", r->program);
  if (r->np && r->min_np > r->np)
    return usage_error("--min-np is more than -np%s", "");
  r->args = argv + i;
  r->nargs = argc - i;
  if (r->source) { /* FILE.gsl GSLC-OPTIONS... [-- ARGS...] */
    r->gslc_args = argv + i;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++)
      r->ngslc++;
    r->args = i < argc ? argv + i + 1 : argv + argc;
    r->nargs = i < argc ? argc - i - 1 : 0;
  }
  for (int j = 0; j < r->nargs; j++) {
    const char *a = r->args[j];
    if (!strcmp(a, "--resume"))
      r->resume = true;
    else if (is_opt(a, "--checkpoint"))
      r->ckdir = a[12] == '=' ? a + 13 : j + 1 < r->nargs ? r->args[++j] : NULL;
    else if (is_opt(a, "--metrics"))
      r->metrics = a[9] == '=' ? a + 10 : j + 1 < r->nargs ? r->args[++j] : NULL;
    else if (a[0] == '-' && a[1] == '-' && !strchr(a, '=') && j + 1 < r->nargs && r->args[j + 1][0] != '-')
      j++; /* another option's value */
  }
  return 0;
}

/* ---- tools ------------------------------------------------------------------- */

/* NAME's path on PATH, or NULL */
static char *on_path(const char *name) {
  const char *path = getenv("PATH");
  if (!path || !*path)
    path = "/usr/bin:/bin";
  for (const char *p = path; *p;) {
    size_t n = strcspn(p, ":");
    char *c = xasprintf("%.*s/%s", (int)n, n ? p : ".", name);
    if (access(c, X_OK) == 0)
      return c;
    free(c);
    p += n;
    if (*p == ':')
      p++;
  }
  return NULL;
}

/* Whether hydra can run the binary prog (it execvp's it: a name without
 * '/' is looked for on PATH alone): true, or false with why in why. */
static bool runnable(const char *prog, char *why, size_t cap) {
  struct stat st;
  if (!*prog) {
    snprintf(why, cap, "an empty name");
    return false;
  }
  if (!strchr(prog, '/')) {
    char *found = on_path(prog);
    bool here = access(prog, F_OK) == 0;
    free(found);
    if (found)
      return true;
    if (here)
      snprintf(why, cap, "no %s on PATH (mpirun runs a name without '/' from PATH only; give ./%s for the file here)",
               prog, prog);
    else
      snprintf(why, cap, "no %s on PATH (mpirun runs a name without '/' from PATH only)", prog);
    return false;
  }
  if (stat(prog, &st) != 0) {
    snprintf(why, cap, "%s", errno == ENOENT ? "no such file" : strerror(errno));
    return false;
  }
  if (S_ISDIR(st.st_mode)) {
    snprintf(why, cap, "it is a directory");
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(why, cap, "it is not a regular file");
    return false;
  }
  if (access(prog, X_OK) != 0) {
    snprintf(why, cap, "%s", errno == EACCES && !(st.st_mode & 0111) ? "it is not executable (no x bit: chmod +x)"
                                                                       : strerror(errno));
    return false;
  }
  return true;
}

/* gslc beside this gslrun (a build tree, an install), else on PATH */
static char *find_gslc(void) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = '\0';
      char *c = xasprintf("%s/gslc", self);
      if (access(c, X_OK) == 0)
        return c;
      free(c);
    }
  }
  return on_path("gslc");
}

/* Runs argv (a child in our process group), its stdout into *out when out
 * is given; its exit status, or -1 if it could not be run. */
static int run_tool(char **argv, char **out) {
  int fd[2] = {-1, -1};
  if (out && pipe(fd) != 0)
    return -1;
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    if (out) {
      dup2(fd[1], 1);
      close(fd[0]);
      close(fd[1]);
    }
    execv(argv[0], argv);
    _exit(127);
  }
  if (out) {
    close(fd[1]);
    size_t len = 0, cap = 256;
    char *buf = xmalloc(cap);
    ssize_t k;
    while ((k = read(fd[0], buf + len, cap - len - 1)) != 0) {
      if (k < 0 && errno == EINTR)
        continue;
      if (k < 0)
        break;
      len += (size_t)k;
      if (cap - len < 2)
        buf = realloc(buf, cap *= 2);
    }
    buf[len] = '\0';
    close(fd[0]);
    *out = buf;
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR)
      return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- a source's mesh ------------------------------------------------------------ */

/* The mesh from `gslc --mesh-axes`: 0, or 1 after saying why not. */
static int read_axes(Run *r) {
  char **argv = xmalloc(sizeof *argv * (size_t)(r->ngslc + 4));
  int n = 0;
  argv[n++] = r->gslc;
  argv[n++] = "--mesh-axes";
  for (int i = 0; i < r->ngslc; i++)
    argv[n++] = r->gslc_args[i];
  argv[n++] = (char *)r->program;
  argv[n] = NULL;
  char *out = NULL;
  int rc = run_tool(argv, &out);
  free(argv);
  if (rc != 0) {
    say("error: %s --mesh-axes %s failed (status %d)", r->gslc, r->program, rc);
    free(out);
    return 1;
  }
  char *save = NULL;
  for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    Axis *a = &r->axes[r->naxes];
    char role[16];
    if (r->naxes == MAX_AXES || sscanf(line, "%63s %ld %63s %15s", a->name, &a->size, a->cname, role) != 4) {
      say("error: cannot read gslc --mesh-axes's line '%s'", line);
      free(out);
      return 1;
    }
    if (!strcmp(a->cname, "-"))
      a->cname[0] = '\0';
    a->data = !strcmp(role, "data");
    r->naxes++;
  }
  free(out);
  return 0;
}

static long mesh_devices(const Run *r, const long *size) {
  long n = 1;
  for (int i = 0; i < r->naxes; i++)
    n *= size[i];
  return n;
}

/* "[data = 2, model = 2]" */
static char *mesh_text(const Run *r, const long *size) {
  char buf[1024];
  size_t n = 0;
  buf[n++] = '[';
  for (int i = 0; i < r->naxes; i++)
    n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s = %ld", i ? ", " : "", r->axes[i].name, size[i]);
  snprintf(buf + n, sizeof buf - n, "]");
  return xstrdup(buf);
}

typedef struct Fit {
  long size[MAX_AXES]; /* the best so far */
  long devices;        /* its devices, 0: none */
  long model;          /* the devices of its model axes */
} Fit;

/* Every mesh with axis i.. of sizes 1..the compiled one (a fixed axis:
 * the compiled one), devices at most avail: the most devices, then the most
 * along model axes (data shrinks first), then the earliest axes largest. */
static void fit_from(const Run *r, int i, long *size, long devices, long avail, Fit *best) {
  if (i == r->naxes) {
    long model = 1;
    for (int a = 0; a < r->naxes; a++)
      model *= r->axes[a].data ? 1 : size[a];
    if (devices > best->devices || (devices == best->devices && model > best->model)) {
      memcpy(best->size, size, sizeof best->size);
      best->devices = devices;
      best->model = model;
    }
    return;
  }
  const Axis *a = &r->axes[i];
  for (long s = a->size; s >= (a->cname[0] ? 1 : a->size); s--) {
    if (devices * s > avail)
      continue;
    size[i] = s;
    fit_from(r, i + 1, size, devices * s, avail, best);
  }
}

/* Whether mesh size was compiled already. */
static bool build_known(const Run *r, const long *size) {
  for (int b = 0; b < r->nbuilt; b++)
    if (!memcmp(r->built[b].size, size, sizeof(long) * (size_t)r->naxes))
      return true;
  return false;
}

/* The binary of mesh size, compiled now if not yet: NULL after saying why. */
static const char *build_for(Run *r, const long *size) {
  for (int b = 0; b < r->nbuilt; b++)
    if (!memcmp(r->built[b].size, size, sizeof(long) * (size_t)r->naxes))
      return r->built[b].path;
  if (r->nbuilt == MAX_MESHES) {
    say("error: more than %d meshes in one run", MAX_MESHES);
    return NULL;
  }
  const char *base = strrchr(r->program, '/') ? strrchr(r->program, '/') + 1 : r->program;
  char *dir = xasprintf("%s/%d", r->tmpdir, r->nbuilt + 1);
  char *path = xasprintf("%s/%.*s", dir, (int)(strlen(base) - 4), base);
  if (mkdir(dir, 0700) != 0) {
    say("error: cannot create %s: %s", dir, strerror(errno));
    return NULL;
  }
  free(dir);
  char **argv = xmalloc(sizeof *argv * (size_t)(r->ngslc + 2 * r->naxes + 5));
  char **defs = xmalloc(sizeof *defs * (size_t)(r->naxes + 1));
  int n = 0, nd = 0;
  argv[n++] = r->gslc;
  for (int i = 0; i < r->ngslc; i++)
    argv[n++] = r->gslc_args[i];
  for (int i = 0; i < r->naxes; i++) /* after the user's: the last -D counts */
    if (r->axes[i].cname[0]) {
      argv[n++] = "-D";
      argv[n++] = defs[nd++] = xasprintf("%s=%ld", r->axes[i].cname, size[i]);
    }
  argv[n++] = (char *)r->program;
  argv[n++] = "-o";
  argv[n++] = path;
  argv[n] = NULL;
  int rc = run_tool(argv, NULL);
  for (int i = 0; i < nd; i++)
    free(defs[i]);
  free(defs);
  free(argv);
  if (rc != 0) {
    say("error: gslc failed to compile %s for mesh %s (status %d)", r->program, mesh_text(r, size), rc);
    return NULL;
  }
  memcpy(r->built[r->nbuilt].size, size, sizeof r->built[0].size);
  r->built[r->nbuilt++].path = path;
  return path;
}

/* The slots of the hostfile (MPICH's `host[:slots]` a line, # comments):
 * -1 after putting why not into err (it cannot be read, a line's slots
 * are not a whole number from 1, or it names no host). */
static long hostfile_slots(const char *path, char *err, size_t cap) {
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, cap, "--hostfile %s: cannot read it: %s", path, strerror(errno));
    return -1;
  }
  char line[1024];
  long slots = 0, hosts = 0;
  for (int at = 1; fgets(line, sizeof line, f); at++) {
    char *c = strchr(line, '#');
    if (c)
      *c = '\0';
    char *h = line;
    while (isspace((unsigned char)*h))
      h++;
    if (!*h)
      continue;
    h[strcspn(h, " \t\r\n")] = '\0';
    char *colon = strrchr(h, ':');
    long n = colon ? number(colon + 1, 1, 1L << 20) : 1;
    if (n < 1 || colon == h) {
      snprintf(err, cap, "--hostfile %s:%d: '%s': %s", path, at, h,
               colon == h ? "no host before ':'"
               : colon && number(colon + 1, 0, 0) == 0
                   ? "0 slots; a host needs at least 1 (leave the line out to use none of it)"
                   : "the slots after ':' must be a whole number from 1 to 1048576");
      fclose(f);
      return -1;
    }
    slots += n;
    hosts++;
  }
  fclose(f);
  if (!hosts) {
    snprintf(err, cap, "no hosts in %s (only comments and blank lines)", path);
    return -1;
  }
  return slots;
}

/* ---- checkpoints -------------------------------------------------------------- */

/* The layout of DIR (its names, what is complete, the newest, a
 * manifest's run) is ckdir.c's, as the runtime reads it: gslrun opens DIR
 * for each look, since the job may make it or rename checkpoints into it. */

/* DIR opened for ckdir.c's functions, or -1. */
static int open_dir(const char *dir) { return open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); }

/* The run identity in DIR/name/manifest.json into run (CKDIR_RUN bytes),
 * and its time of change into *mtime if not NULL: 0 or -1. */
static int run_of(const char *dir, const char *name, char *run, struct timespec *mtime) {
  int dfd = open_dir(dir), rc = dfd >= 0 ? gslrt_ckdir_run_of(dfd, name, run, mtime) : -1;
  if (dfd >= 0)
    close(dfd);
  return rc;
}

/* The newest complete checkpoint in dir (the highest step, as --resume
 * takes it): its name into name, its step; -1 if none. */
static long newest(const char *dir, char *name, size_t cap) {
  int dfd = open_dir(dir);
  int64_t best = dfd >= 0 ? gslrt_ckdir_newest(dfd, name, cap) : -1;
  if (dfd >= 0)
    close(dfd);
  return best >= 0 ? (long)best : -1;
}

/* Notes the run identities DIR holds as gslrun starts; with --resume the
 * newest one's is this run's. */
static void note_checkpoints(Run *r) {
  int dfd = open_dir(r->ckdir);
  DIR *d = dfd >= 0 ? gslrt_ckdir_list(dfd) : NULL;
  if (!d) {
    if (dfd >= 0)
      close(dfd);
    return;
  }
  for (struct dirent *e; (e = readdir(d));) {
    char run[CKDIR_RUN];
    if (gslrt_ckdir_step_of(e->d_name) >= 0 && gslrt_ckdir_entry_kind(dfd, e->d_name) == CKDIR_COMPLETE &&
        gslrt_ckdir_run_of(dfd, e->d_name, run, NULL) == 0) {
      r->pre_runs = realloc(r->pre_runs, sizeof *r->pre_runs * (size_t)(r->npre + 1));
      r->pre_runs[r->npre++] = xstrdup(run);
    }
  }
  closedir(d);
  close(dfd);
  char name[256];
  if (r->resume && newest(r->ckdir, name, sizeof name) >= 0)
    run_of(r->ckdir, name, r->ours, NULL);
}

/* Where a restart resumes: the step of the newest complete checkpoint (its
 * name in name), 0 when DIR holds none; -1 after saying why not when the
 * newest is not this run's. This run's identity, while unknown, is that of
 * the checkpoint the job last said it wrote, else (a --quiet job) of one
 * DIR did not hold before, written since gslrun started. */
static long resume_point(Run *r, const Segment *sg, char *name, size_t cap) {
  name[0] = '\0';
  if (!r->ckdir)
    return 0;
  const char *slash = strrchr(sg->written, '/');
  if (!r->ours[0] && slash)
    run_of(r->ckdir, slash + 1, r->ours, NULL);
  long step = newest(r->ckdir, name, cap);
  if (step < 0) {
    name[0] = '\0';
    return 0;
  }
  char run[CKDIR_RUN];
  struct timespec mtime = {0, 0};
  if (run_of(r->ckdir, name, run, &mtime) != 0) {
    say("not restarting: the newest checkpoint %s/%s has no run identity that can be read", r->ckdir, name);
    return -1;
  }
  if (!r->ours[0]) { /* not known yet: a run DIR did not hold, written since gslrun started */
    bool before = false;
    for (int i = 0; i < r->npre; i++)
      before |= !strcmp(r->pre_runs[i], run);
    if (!before && (mtime.tv_sec > r->started.tv_sec ||
                    (mtime.tv_sec == r->started.tv_sec && mtime.tv_nsec >= r->started.tv_nsec)))
      memcpy(r->ours, run, CKDIR_RUN);
  }
  if (strcmp(run, r->ours) != 0) {
    say("not restarting: the newest checkpoint %s/%s is another run's (run %.8s...%s), not this one's; "
        "a restart never resumes another run",
        r->ckdir, name, run, r->ours[0] ? "" : ", and this run wrote none");
    return -1;
  }
  return step;
}

/* ---- the job ---------------------------------------------------------------------- */

/* The pids of the job's local ranks by PMI_RANK: its processes found by
 * walking /proc from mpirun's pid down. */
static void find_ranks(pid_t root, Segment *s) {
  pid_t fam[4096];
  int nfam = 0;
  fam[nfam++] = root;
  for (int grew = 1; grew && nfam < 4096;) {
    grew = 0;
    DIR *d = opendir("/proc");
    if (!d)
      return;
    for (struct dirent *e; (e = readdir(d)) && nfam < 4096;) {
      if (!isdigit((unsigned char)e->d_name[0]))
        continue;
      pid_t pid = (pid_t)atol(e->d_name);
      bool known = false;
      for (int i = 0; i < nfam && !known; i++)
        known = fam[i] == pid;
      if (known)
        continue;
      char path[64], buf[512];
      snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
      int fd = open(path, O_RDONLY);
      if (fd < 0)
        continue;
      ssize_t n = read(fd, buf, sizeof buf - 1);
      close(fd);
      if (n <= 0)
        continue;
      buf[n] = '\0';
      char *rp = strrchr(buf, ')');
      int ppid = 0;
      char state;
      if (!rp || sscanf(rp + 1, " %c %d", &state, &ppid) != 2)
        continue;
      for (int i = 0; i < nfam; i++)
        if (fam[i] == ppid) {
          fam[nfam++] = pid;
          grew = 1;
          break;
        }
    }
    closedir(d);
  }
  for (int i = 1; i < nfam; i++) {
    char path[64];
    static char env[65536];
    snprintf(path, sizeof path, "/proc/%d/environ", (int)fam[i]);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
      continue;
    ssize_t n = read(fd, env, sizeof env - 1);
    close(fd);
    for (ssize_t o = 0; n > 0 && o < n; o += (ssize_t)strlen(env + o) + 1) {
      env[n] = '\0';
      if (!strncmp(env + o, "PMI_RANK=", 9)) {
        long rank = number(env + o + 9, 0, MAX_RANKS - 1);
        if (rank >= 0 && !s->pid[rank]) {
          s->pid[rank] = fam[i];
          s->nfound++;
#if defined(__linux__) && defined(SYS_pidfd_open)
          s->pidfd[rank] = (int)syscall(SYS_pidfd_open, (pid_t)fam[i], 0);
          s->ntracked += s->pidfd[rank] >= 0;
#endif
        }
        break;
      }
    }
  }
}

/* Reads what one line of the job's output says. */
/* Whether a watchdog's error line (runtime/health.c) names rank r among
 * the ranks "silent since": "...; rank 1 (host n2) has been silent
 * since", "...; ranks 2, 3 (host hB) have been silent since" (the numbers
 * outside the parentheses between the last "; rank" and "been silent"). */
static bool names_silent(const char *line, long r) {
  const char *end = strstr(line, " been silent"), *from = NULL;
  for (const char *q = line; end && (q = strstr(q, "; rank")) && q < end; q++)
    from = q;
  if (!from)
    return false;
  int depth = 0;
  for (const char *c = from + strlen("; rank"); c < end; c++) {
    depth += *c == '(' ? 1 : *c == ')' ? -1 : 0;
    if (!depth && *c >= '0' && *c <= '9' && (c[-1] < '0' || c[-1] > '9') && strtol(c, NULL, 10) == r)
      return true;
  }
  return false;
}

static void scan_line(Segment *s, const char *line, bool err) {
  long a, b;
  int n = 0;
  const char *p;
  if (!err && !strncmp(line, TO_GSLRUN, strlen(TO_GSLRUN))) { /* " R=PID@HOST" each, or " done" */
    char host[64];
    if (!strcmp(line + strlen(TO_GSLRUN), " done")) {
      s->work_done = true;
      return;
    }
    for (p = line + strlen(TO_GSLRUN); sscanf(p, " %ld=%ld@%63s%n", &a, &b, host, &n) == 3; p += n)
      if (a >= 0 && a < MAX_RANKS) {
        s->all_pid[a] = b;
        snprintf(s->all_host[a], sizeof s->all_host[a], "%s", host);
      }
    return;
  }
  if (sscanf(line, "step %ld/%ld%n", &a, &b, &n) == 2 && n > 0 && a > s->last)
    s->last = a;
  else if ((p = strstr(line, ": rank ")) && sscanf(p, ": rank %ld: error:%n", &a, &n) == 1 && n > 0 &&
           (s->err_rank < 0 || (a != s->err_rank && names_silent(s->err_line, a)))) {
    /* the first error line, unless a rank it names as silent reports its
     * own: that rank was waiting on another, which is nearer the cause */
    s->err_rank = (int)a;
    snprintf(s->err_line, sizeof s->err_line, "%s", line);
  } else if (sscanf(line, "=   PID %ld RUNNING AT %255s", &a, s->bad_host) == 2)
    s->bad_pid = a;
  else if (sscanf(line, "=   EXIT CODE: %ld", &a) == 1)
    s->bad_code = (int)a;
  else if (strstr(line, ": stopped by SIG"))
    s->stopped = true;
  else if ((p = strstr(line, "execvp error on file ")) && !s->exec_err[0])
    snprintf(s->exec_err, sizeof s->exec_err, "%s", p);
  else if (sscanf(line, "resumed from %*s at step %ld", &a) == 1)
    s->first = a;
  else if (!strncmp(line, "checkpoint ", 11) && (p = strstr(line, " written (")) && p - line - 11 < 255)
    snprintf(s->written, sizeof s->written, "%.*s", (int)(p - line - 11), line + 11);
  if (err && *line)
    snprintf(s->last_err, sizeof s->last_err, "%s", line);
}

typedef struct Stream {
  int fd;          /* the pipe's read end, -1 at EOF */
  int out;         /* where it goes: 1 or 2 */
  char line[4096]; /* the line so far */
  size_t len;
  bool long_line;  /* the line so far outgrew line: its start was copied out already */
} Stream;


static void write_all(int fd, const char *buf, size_t n) {
  for (size_t o = 0; o < n;) {
    ssize_t w = write(fd, buf + o, n - o);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      break;
    o += (size_t)w;
  }
}

/* The line so far ends (with term, or 0 at EOF): scanned, and copied to
 * our own stream unless it is the runtime's line for gslrun. */
static void end_line(Stream *st, Segment *s, char term) {
  st->line[st->len] = '\0';
  if (!st->long_line) /* a long line was scanned by its start */
    scan_line(s, st->line, st->out == 2);
  bool ours = !st->long_line && !strncmp(st->line, TO_GSLRUN, strlen(TO_GSLRUN));
  if (term)
    st->line[st->len++] = term;
  if (!ours)
    write_all(st->out, st->line, st->len);
  st->len = 0;
  st->long_line = false;
}

/* Copies what the pipe has to our own stream, scanning each line. */
static void pump(Stream *st, Segment *s) {
  char buf[8192];
  ssize_t n = read(st->fd, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN))
    return;
  if (n <= 0) {
    if (st->len || st->long_line)
      end_line(st, s, 0);
    close(st->fd);
    st->fd = -1;
    return;
  }
  for (ssize_t i = 0; i < n; i++) {
    if (buf[i] == '\n' || buf[i] == '\r') {
      end_line(st, s, buf[i]);
    } else {
      if (st->len == sizeof st->line - 2) { /* a long line: scanned by its start, copied as it comes */
        if (!st->long_line) {
          st->line[st->len] = '\0';
          scan_line(s, st->line, st->out == 2);
        }
        write_all(st->out, st->line, st->len);
        st->len = 0;
        st->long_line = true;
      }
      st->line[st->len++] = buf[i];
    }
  }
}

/* Runs one segment: mpirun -np NP [-f HOSTFILE] BIN ARGS [--resume]; fills
 * s; its status (128 + a signal that ended mpirun itself). */
static int run_job(Run *r, const char *bin, bool resume, Segment *s) {
  char **argv = xmalloc(sizeof *argv * (size_t)(r->nargs + 10));
  char np[32];
  int n = 0;
  snprintf(np, sizeof np, "%ld", s->np);
  argv[n++] = r->mpirun;
  argv[n++] = "-np";
  argv[n++] = np;
  if (r->hostfile) {
    argv[n++] = "-f";
    argv[n++] = (char *)r->hostfile;
  }
  argv[n++] = (char *)bin;
  for (int i = 0; i < r->nargs; i++)
    argv[n++] = r->args[i];
  if (resume)
    argv[n++] = "--resume";
  argv[n] = NULL;
  int out[2], err[2];
  if (pipe(out) != 0 || pipe(err) != 0) {
    say("error: pipe: %s", strerror(errno));
    return 1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    say("error: fork: %s", strerror(errno));
    return 1;
  }
  if (pid == 0) {
    setpgid(0, 0); /* signals to gslrun's group reach the job once, through gslrun */
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* gslrun killed: the job checkpoints and stops */
#endif
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    setenv("GSLRUN_RANKS", "1", 1); /* hydra passes it to every rank: rank 0 tells each one's pid and host */
    if (isatty(0)) { /* a background group reading the terminal would stop */
      int nul = open("/dev/null", O_RDONLY);
      if (nul >= 0)
        dup2(nul, 0);
    }
    dup2(out[1], 1);
    dup2(err[1], 2);
    close(out[0]), close(out[1]), close(err[0]), close(err[1]);
    close(sig_pipe[0]), close(sig_pipe[1]);
    execv(argv[0], argv);
    fprintf(stderr, "gslrun: error: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  free(argv);
  close(out[1]);
  close(err[1]);
  Stream st[2] = {{out[0], 1, "", 0, false}, {err[0], 2, "", 0, false}};
  int status = -1, forwarded = 0;
  double ended = 0, started = now(), scanned = 0;
  double gone = 0, termed = 0; /* when every rank found here had ended; when gslrun sent mpirun SIGTERM */
  for (;;) {
    if (got_signal && forwarded != got_signal) {
      forwarded = got_signal;
      kill(pid, got_signal); /* hydra passes it to every rank */
    }
    if (status < 0) {
      int w;
      pid_t got = waitpid(pid, &w, WNOHANG);
      if (got == pid) {
        status = WIFEXITED(w) ? WEXITSTATUS(w) : 128 + WTERMSIG(w);
        s->signal = WIFSIGNALED(w) ? WTERMSIG(w) : 0;
        ended = now();
      } else if (s->nfound < s->np && now() - scanned > (now() - started < 10 ? 0.1 : 2)) {
        find_ranks(pid, s); /* ranks on other hosts are never found: less often after 10 s */
        scanned = now();
      }
    }
    if (st[0].fd < 0 && st[1].fd < 0 && status >= 0)
      break;
    if (status >= 0 && now() - ended > 2) /* a process left holding the pipes */
      break;
    if (status < 0 && s->ntracked > 0) {
      /* Every rank found on this host has ended, and mpirun has not: it
       * waits on a host it no longer reaches (one lost while the ranks
       * were inside a blocking MPI call, which the runtime's deadline
       * ended: hydra then waits for that host's proxy for ever). Past
       * PM_GRACE, time for the other hosts' ranks to end and say why,
       * gslrun ends mpirun's group as a signal would: SIGTERM, then
       * SIGKILL. Only ranks watched through a pidfd count: without
       * pidfd_open nothing is ended this way. */
      bool live = false;
      for (int q = 0; q < s->np && q < MAX_RANKS && !live; q++)
        live = s->pidfd[q] >= 0;
      if (live)
        gone = 0;
      else if (!gone)
        gone = now();
      else if (!termed && now() - gone > PM_GRACE) {
        s->pm_ended = now() - gone;
        termed = now();
        kill(-pid, SIGTERM);
      } else if (termed && now() - termed > 3) {
        kill(-pid, SIGKILL);
        termed = now() + 1e9; /* once */
      }
    }
    struct pollfd pf[3 + 64] = {{st[0].fd, POLLIN, 0}, {st[1].fd, POLLIN, 0}, {sig_pipe[0], POLLIN, 0}};
    int npf = 3, rank_of[64];
    for (int q = 0; q < s->np && q < MAX_RANKS && npf < 3 + 64; q++)
      if (s->pidfd[q] >= 0) {
        rank_of[npf - 3] = q;
        pf[npf++] = (struct pollfd){s->pidfd[q], POLLIN, 0};
      }
    int k = poll(pf, (nfds_t)npf, 100);
    if (k <= 0)
      continue;
    bool first = s->first_dead < 0 && status < 0; /* the ranks that ended by this wakeup: no order among them */
    for (int q = 3; q < npf; q++)
      if (pf[q].revents) { /* a rank ended: the first one is the failure's */
        if (first) {
          if (s->first_dead < 0) {
            s->first_dead = rank_of[q - 3];
            s->died_at = now();
          }
          if (s->ntogether < 8)
            s->together[s->ntogether++] = rank_of[q - 3];
        }
        close(s->pidfd[rank_of[q - 3]]);
        s->pidfd[rank_of[q - 3]] = -1;
      }
    if (pf[2].revents) {
      char c[16];
      if (read(sig_pipe[0], c, sizeof c) < 0) {
      }
    }
    for (int i = 0; i < 2; i++)
      if (st[i].fd >= 0 && pf[i].revents)
        pump(&st[i], s);
  }
  for (int i = 0; i < 2; i++)
    if (st[i].fd >= 0)
      close(st[i].fd);
  for (int q = 0; q < MAX_RANKS; q++)
    if (s->pidfd[q] >= 0)
      close(s->pidfd[q]);
  if (s->first_dead >= 0 && status == 0)
    s->first_dead = -1; /* every rank ended, well */
  if (s->first_dead >= 0)
    s->detect = ended - s->died_at;
  return status;
}

/* ---- metrics --------------------------------------------------------------------- */

static FileId file_id(const char *path) {
  struct stat st;
  FileId f = {0};
  if (lstat(path, &st) == 0) { /* a link itself: gslrun never writes through one */
    f = (FileId){true, st.st_dev, st.st_ino, st.st_size, st.st_mtim};
  }
  return f;
}

static bool same_file(FileId a, FileId b) {
  return a.exists == b.exists && a.dev == b.dev && a.ino == b.ino && a.size == b.size &&
         a.mtime.tv_sec == b.mtime.tv_sec && a.mtime.tv_nsec == b.mtime.tv_nsec;
}

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  size_t cap = 4096, n = 0;
  char *buf = xmalloc(cap);
  size_t k;
  while ((k = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += k;
    if (cap - n < 2)
      buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  buf[n] = '\0';
  *len = n;
  return buf;
}

static void acc_put(Run *r, const char *text, size_t len) {
  r->acc = realloc(r->acc, r->acclen + len + 1);
  memcpy(r->acc + r->acclen, text, len);
  r->acclen += len;
  r->acc[r->acclen] = '\0';
}

/* Why gslrun may not write the --metrics file path (the program's own
 * rules, which gslrun keeps for its writes): NULL, or the reason (into
 * buf). Never into the --checkpoint directory, through links and "..";
 * never through a symbolic link, nor into a directory, FIFO or device. */
static const char *metrics_refused(const Run *r, const char *path, char *buf, size_t cap) {
  char dir[PATH_MAX];
  struct stat st;
  if (r->ckdir && gslrt_resolve(r->ckdir, dir) == 0 && gslrt_inside(path, dir)) {
    snprintf(buf, cap, "--metrics %s is inside the --checkpoint directory %s (a run never writes its own files there)",
             path, r->ckdir);
    return buf;
  }
  if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    snprintf(buf, cap, "--metrics %s is %s, not a regular file (refusing to write it)", path,
             S_ISLNK(st.st_mode)   ? "a symbolic link"
             : S_ISDIR(st.st_mode) ? "a directory"
             : S_ISFIFO(st.st_mode) ? "a FIFO"
                                    : "a device or socket");
    return buf;
  }
  return NULL;
}

/* Writes len bytes of text as the file path, whole or not at all: a
 * temporary beside it, flushed, renamed over it. 0, or -1 (errno set). */
static int write_whole(const char *path, const char *text, size_t len) {
  char *tmp = xasprintf("%s.gslrun-%ld.tmp", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666), rc = -1;
  if (fd >= 0) {
    size_t done = 0;
    while (done < len) {
      ssize_t k = write(fd, text + done, len - done);
      if (k < 0 && errno == EINTR)
        continue;
      if (k <= 0)
        break;
      done += (size_t)k;
    }
    rc = done == len && fsync(fd) == 0 ? 0 : -1;
    if (close(fd) != 0)
      rc = -1;
    if (rc == 0)
      rc = rename(tmp, path);
    if (rc != 0) {
      int e = errno;
      unlink(tmp);
      errno = e;
    }
  }
  free(tmp);
  return rc;
}

/* After segment s: takes its records from the --metrics file (those the
 * runtime wrote since it truncated the file), the last step among them,
 * then writes the file again as every segment's records with one record
 * of gslrun's after each. A segment the program refused (a usage error,
 * or the checkpoint directory another run's: that run may be writing the
 * file) gives nothing and writes nothing. The file is written only where
 * this segment's program wrote it, or where it is as gslrun itself left
 * it: never one the program did not open (it refused it, or never got so
 * far), and never under metrics_refused's rules. */
static void metrics_after(Run *r, Segment *s, FileId before, const char *end, const char *cause) {
  if (s->status == EXIT_USAGE || s->status == EXIT_BUSY)
    return;
  size_t len = 0;
  char *text = NULL, why[PATH_MAX + 256];
  FileId now_id = file_id(r->metrics);
  bool changed = now_id.exists && !same_file(before, now_id), ours = r->wrote && same_file(r->left, now_id);
  if (changed && !metrics_refused(r, r->metrics, why, sizeof why))
    text = read_all(r->metrics, &len);
  size_t skip = 0;
  if (text && len >= r->acclen && r->acclen && !memcmp(text, r->acc, r->acclen))
    skip = r->acclen; /* not truncated since gslrun wrote it */
  if (text) {
    for (char *p = text + skip; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
      long step;
      if (sscanf(p, "{\"step\": %ld", &step) == 1 && step > s->last)
        s->last = step;
    }
    acc_put(r, text + skip, len - skip);
    if (r->acclen && r->acc[r->acclen - 1] != '\n')
      acc_put(r, "\n", 1);
  }
  free(text);
  json_t *rec = json_object(), *mesh = json_object();
  json_object_set_new(rec, "gslrun", json_string(end));
  json_object_set_new(rec, "segment", json_integer(s->k));
  for (int i = 0; i < r->naxes; i++)
    json_object_set_new(mesh, r->axes[i].name, json_integer(s->size[i]));
  json_object_set_new(rec, "mesh", r->source ? mesh : json_null());
  if (!r->source)
    json_decref(mesh);
  json_object_set_new(rec, "np", json_integer(s->np));
  json_object_set_new(rec, "first_step", json_integer(s->first));
  json_object_set_new(rec, "last_step", s->last >= 0 ? json_integer(s->last) : json_null());
  json_object_set_new(rec, "status", json_integer(s->status));
  if (cause)
    json_object_set_new(rec, "cause", json_string(cause));
  char *line = json_dumps(rec, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(rec);
  if (line) {
    acc_put(r, line, strlen(line));
    acc_put(r, "\n", 1);
    free(line);
  }
  if (!(changed || ours)) /* not the program's file this segment, nor gslrun's: the records wait in memory */
    return;
  if (metrics_refused(r, r->metrics, why, sizeof why)) {
    say("warning: not writing gslrun's records: %s", why);
    return;
  }
  if (write_whole(r->metrics, r->acc, r->acclen) != 0) {
    say("warning: --metrics %s: cannot write gslrun's records: %s", r->metrics, strerror(errno));
    return;
  }
  r->wrote = true;
  r->left = file_id(r->metrics);
}

/* ---- the supervisor -------------------------------------------------------------- */

static const char *signame(int sig) {
  switch (sig) {
  case SIGKILL: return "SIGKILL";
  case SIGTERM: return "SIGTERM";
  case SIGINT: return "SIGINT";
  case SIGSEGV: return "SIGSEGV";
  case SIGABRT: return "SIGABRT";
  case SIGBUS: return "SIGBUS";
  case SIGFPE: return "SIGFPE";
  case SIGHUP: return "SIGHUP";
  case SIGSTOP: return "SIGSTOP";
  default: return "a signal";
  }
}

/* Whether two host names are one host: equal up to the first '.' of
 * either (hydra may say n2 where the host calls itself n2.cluster). */
static bool same_host(const char *a, const char *b) {
  size_t n = strcspn(a, "."), m = strcspn(b, ".");
  return n == m && !strncmp(a, b, n);
}

/* The ranks of segment s that gslrun never found on this host, grouped
 * by the host the runtime said each runs on: "ranks 2, 3 on host h2",
 * "rank 2 on host h2, rank 3 on host h3", "ranks 2, 3 on a host not
 * known"; NULL when there are none. */
static char *unseen_ranks(const Segment *s) {
  char buf[1024] = "";
  bool done[MAX_RANKS] = {false};
  int shown = 0;
  for (long q = 0; q < s->np && q < MAX_RANKS; q++) {
    if (done[q] || s->pid[q])
      continue;
    const char *host = s->all_host[q][0] ? s->all_host[q] : NULL;
    char ranks[512] = "";
    int n = 0;
    for (long u = q; u < s->np && u < MAX_RANKS; u++)
      if (!done[u] && !s->pid[u] && (host ? s->all_host[u][0] && same_host(s->all_host[u], host) : !s->all_host[u][0])) {
        done[u] = true;
        if (n++ < 16)
          snprintf(ranks + strlen(ranks), sizeof ranks - strlen(ranks), "%s%ld", n > 1 ? ", " : "", u);
        else if (n == 17)
          snprintf(ranks + strlen(ranks), sizeof ranks - strlen(ranks), ", ...");
      }
    if (shown++ < 8)
      snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s %s on %s%s", shown > 1 ? ", " : "",
               n == 1 ? "rank" : "ranks", ranks, host ? "host " : "a host not known", host ? host : "");
  }
  return buf[0] ? xstrdup(buf) : NULL;
}

/* What ended segment s, in words: the rank whose error line came first,
 * else a rank of another host that hydra's BAD TERMINATION block names
 * (mapped to its rank by the runtime's gslrun-ranks lines), else the
 * rank seen to end first (a local rank, by its pidfd), else the one
 * hydra names; the signal or status; mpirun's status. */
static char *cause_of(const Segment *s) {
  char who[512] = "", host[256] = "", me[256] = "";
  gethostname(me, sizeof me - 1);
  bool local_pid = false; /* hydra's pid is one of the ranks gslrun found under mpirun */
  for (int i = 0; i < MAX_RANKS && s->bad_pid && !local_pid; i++)
    local_pid = s->pid[i] == s->bad_pid;
  /* a rank of another host that hydra names ended first: the local ranks
   * gslrun saw end were hydra's clean-up after it */
  bool remote = s->bad_pid && s->bad_host[0] && !local_pid && !same_host(s->bad_host, me) &&
                strcmp(s->bad_host, "localhost") != 0;
  /* a rank that hydra reports killed by a signal on another host ended
   * first; a survivor's failed MPI call ("rank R: error: MPI_..." from
   * gslrt_mpi_check) was its consequence, not the cause */
  bool after = remote && s->bad_code > 0 && s->bad_code < 64 && strstr(s->err_line, ": error: MPI_");
  const char *err_line = after ? "" : s->err_line;
  int rank = s->err_rank >= 0 && !after ? s->err_rank : remote ? -1 : s->first_dead;
  long pid = rank >= 0 && rank < MAX_RANKS ? s->pid[rank] : 0;
  if (rank < 0 && s->bad_pid && !remote)
    for (int i = 0; i < MAX_RANKS && rank < 0; i++)
      if (s->pid[i] == s->bad_pid)
        rank = i, pid = s->bad_pid;
  if (rank < 0 && remote) /* the runtime's pids: of hydra's host where two ranks share the pid */
    for (int i = 0; i < MAX_RANKS; i++)
      if (s->all_pid[i] == s->bad_pid && (rank < 0 || same_host(s->all_host[i], s->bad_host)))
        rank = i, pid = s->bad_pid;
  if (rank >= 0 && rank < MAX_RANKS && s->all_host[rank][0]) /* the rank's own word for its host */
    snprintf(host, sizeof host, "%s", s->all_host[rank]);
  else if (pid && pid == s->bad_pid)
    snprintf(host, sizeof host, "%s", s->bad_host);
  else if (pid)
    snprintf(host, sizeof host, "%s", me);
  bool at_once = rank == s->first_dead && s->ntogether > 1 && !err_line[0];
  if (at_once) { /* several seen ended by one wakeup (gslrun not scheduled between) */
    char ranks[128] = "", pids[256] = "";
    for (int i = 0; i < s->ntogether; i++) {
      const char *sep = i == 0 ? "" : i == s->ntogether - 1 ? " and " : ", ";
      snprintf(ranks + strlen(ranks), sizeof ranks - strlen(ranks), "%s%d", sep, s->together[i]);
      snprintf(pids + strlen(pids), sizeof pids - strlen(pids), "%s%ld", sep, s->pid[s->together[i]]);
    }
    snprintf(host, sizeof host, "%s", s->all_host[s->together[0]][0] ? s->all_host[s->together[0]] : me);
    snprintf(who, sizeof who, "ranks %s (pids %s on host %s)", ranks, pids, host);
  } else if (rank >= 0 && pid)
    snprintf(who, sizeof who, "rank %d (pid %ld on host %s)", rank, pid, host);
  else if (rank >= 0)
    snprintf(who, sizeof who, "rank %d", rank);
  else if (s->bad_pid)
    snprintf(who, sizeof who, "a rank (pid %ld on host %s)", s->bad_pid, s->bad_host);
  char how[256] = "";
  if (s->bad_pid && s->bad_code > 0 && s->bad_code < 64 && at_once)
    snprintf(how, sizeof how, "mpirun reports signal %d (%s) for pid %ld", s->bad_code, signame(s->bad_code),
             s->bad_pid);
  else if (s->bad_pid && s->bad_code > 0 && s->bad_code < 64)
    snprintf(how, sizeof how, "killed by signal %d (%s)%s", s->bad_code, signame(s->bad_code),
             pid != s->bad_pid ? " as mpirun reports it" : "");
  else if (s->bad_pid)
    snprintf(how, sizeof how, "ended with status %d", s->bad_code);
  char *text;
  if (s->exec_err[0])
    text = xasprintf("the program cannot be run: mpirun's %s; mpirun's status %d", s->exec_err, s->status);
  else if (err_line[0])
    text = xasprintf("%s%s'%s'; mpirun's status %d", who, *who ? " failed: " : "", err_line, s->status);
  else if (*who && *how)
    text = xasprintf("%s%s %s%s%s%s; mpirun's status %d", who,
                     at_once                 ? " ended at once (gslrun saw no order among them);"
                     : rank == s->first_dead || remote ? " ended first,"
                                             : " was",
                     how, after ? "; after it, '" : "", after ? s->err_line : "", after ? "'" : "", s->status);
  else if (*who)
    text = xasprintf("%s ended first; mpirun's status %d%s%s%s", who, s->status,
                     s->last_err[0] ? "; the job's last line: '" : "", s->last_err, s->last_err[0] ? "'" : "");
  else if (s->signal)
    text = xasprintf("mpirun was ended by signal %d (%s)%s%s%s", s->signal, signame(s->signal),
                     s->last_err[0] ? "; the job's last line: '" : "", s->last_err, s->last_err[0] ? "'" : "");
  else
    text = xasprintf("exit status %d%s%s%s", s->status, s->last_err[0] ? "; the job's last line: '" : "", s->last_err,
                     s->last_err[0] ? "'" : "");
  if (s->pm_ended > 0) {
    char *more = unseen_ranks(s);
    char *whole = xasprintf("%s; mpirun had not ended %.0f s after the last rank found on this host (%s) had, so "
                            "gslrun ended it%s%s",
                            text, s->pm_ended, me, more ? "; not seen to end: " : "", more ? more : "");
    free(text);
    free(more);
    text = whole;
  }
  return text;
}

/* Whether DIR/.lock names, as its holder, the previous segment's rank 0
 * on this host (a rank of ours still ending), not another run. */
static bool lock_was_ours(const Run *r, long rank0) {
  char *path = xasprintf("%s/" CKDIR_LOCK, r->ckdir ? r->ckdir : "."), line[512] = "", host[256] = "", me[256] = "";
  long pid = 0;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  free(path);
  if (fd < 0)
    return false;
  ssize_t k = read(fd, line, sizeof line - 1);
  close(fd);
  line[k > 0 ? k : 0] = '\0';
  gethostname(me, sizeof me - 1);
  return rank0 > 0 && gslrt_ckdir_lock_holder(line, &pid, host) && pid == rank0 && !strcmp(host, me);
}

static void sleep_for(double secs) {
  double end = now() + secs;
  while (!got_signal && now() < end) {
    struct pollfd pf = {sig_pipe[0], POLLIN, 0};
    int ms = (int)((end - now()) * 1000) + 1;
    poll(&pf, 1, ms > 0 ? ms : 0);
  }
}

#define LOCK_GRACE 5.0 /* s: for this segment's rank 0, killed with the job, to let go of DIR/.lock */

/* Whether another run holds DIR/.lock, the segment over: its flock still
 * taken (not even a shared lock can be had) LOCK_GRACE s on (this
 * segment's rank 0 may not have ended yet when mpirun has), and by other
 * than the previous segment's rank 0. */
static bool lock_held_elsewhere(const Run *r, long rank0) {
  char *path = xasprintf("%s/" CKDIR_LOCK, r->ckdir ? r->ckdir : ".");
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  free(path);
  if (fd < 0)
    return false;
  double end = now() + LOCK_GRACE;
  bool held;
  while ((held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) && !got_signal && now() < end)
    sleep_for(0.05);
  close(fd);
  return held && !lock_was_ours(r, rank0);
}

static void remove_tmp(Run *r) {
  if (!r->tmpdir)
    return;
  for (int b = 0; b < r->nbuilt; b++) {
    unlink(r->built[b].path);
    char *slash = strrchr(r->built[b].path, '/');
    *slash = '\0';
    rmdir(r->built[b].path);
  }
  rmdir(r->tmpdir);
}

static int supervise(Run *r) {
  long cur[MAX_AXES] = {0};
  char *prev_mesh = NULL;
  int last_status = 0;
  char *last_cause = NULL;
  bool resume = r->resume;
  for (int k = 1;; k++) {
    Segment *s = calloc(1, sizeof *s);
    if (!s) {
      say("error: out of memory");
      return 1;
    }
    s->k = k;
    s->last = -1;
    s->err_rank = -1;
    s->bad_code = -1;
    s->first_dead = -1;
    s->ntogether = 0;
    for (int q = 0; q < MAX_RANKS; q++)
      s->pidfd[q] = -1;
    long slots = -1;
    char herr[1400];
    if (r->hostfile && (slots = hostfile_slots(r->hostfile, herr, sizeof herr)) < 0) {
      say("error: %s%s", herr, k > 1 ? "; not restarting" : "");
      if (last_cause)
        say("the last failure: %s", last_cause);
      free(s);
      return last_status ? last_status : EXIT_NOSTART;
    }
    const char *bin = r->program;
    char *mesh = NULL;
    if (r->source) {
      long full[MAX_AXES];
      for (int i = 0; i < r->naxes; i++)
        full[i] = r->axes[i].size;
      long avail = r->np ? r->np : mesh_devices(r, full);
      if (slots >= 0 && slots < avail)
        avail = slots;
      Fit best = {{0}, 0, 0};
      long size[MAX_AXES];
      fit_from(r, 0, size, 1, avail, &best);
      if (!best.devices || best.devices < r->min_np) {
        if (!best.devices)
          say("not %s: the mesh %s does not fit on %ld device%s (its fixed axes alone need more)",
              k == 1 ? "starting" : "restarting", mesh_text(r, full), avail, avail == 1 ? "" : "s");
        else
          say("not %s: the largest mesh that fits on %ld device%s, %s, has %ld rank%s, fewer than --min-np %ld",
              k == 1 ? "starting" : "restarting", avail, avail == 1 ? "" : "s", mesh_text(r, best.size), best.devices,
              best.devices == 1 ? "" : "s", r->min_np);
        if (last_cause)
          say("the last failure: %s", last_cause);
        return last_status ? last_status : 1;
      }
      memcpy(cur, best.size, sizeof cur);
      mesh = mesh_text(r, cur);
      char why[512]; /* what limits the devices */
      if (slots >= 0 && slots == avail)
        snprintf(why, sizeof why, "the hostfile %s has %ld slot%s", r->hostfile, slots, slots == 1 ? "" : "s");
      else
        snprintf(why, sizeof why, "-np %ld", avail);
      if (prev_mesh && strcmp(prev_mesh, mesh) != 0)
        say("%s: %s %s for mesh %s (%ld ranks, was %s)", why,
            build_known(r, cur) ? "running the binary compiled before of" : "recompiling", r->program, mesh,
            best.devices, prev_mesh);
      else if (!prev_mesh && best.devices < mesh_devices(r, full))
        say("%s: compiling %s for mesh %s (%ld ranks) instead of %s", why, r->program, mesh, best.devices,
            mesh_text(r, full));
      if (!(bin = build_for(r, cur)))
        return last_status ? last_status : 1;
      s->np = best.devices;
      memcpy(s->size, cur, sizeof s->size);
    } else {
      s->np = r->np;
      if (slots >= 0 && slots < r->np)
        say("the hostfile %s has %ld slots for %ld ranks: mpirun places several on a slot (give the program's "
            "source to shrink its mesh)",
            r->hostfile, slots, r->np);
    }
    s->first = 0;
    if (resume && r->ckdir) {
      char name[256];
      long st = newest(r->ckdir, name, sizeof name);
      s->first = st > 0 ? st : 0;
    }
    if (got_signal) { /* during a compilation */
      say("stopped by %s before segment %d", signame(got_signal), k);
      free(s);
      return EXIT_STOPPED;
    }
    say("segment %d: %ld ranks%s%s%s", k, s->np, mesh ? ", mesh " : "", mesh ? mesh : "",
        resume && k > 1 ? ", resuming" : "");
    FileId before = r->metrics ? file_id(r->metrics) : (FileId){0};
    double t0 = now();
    int status = run_job(r, bin, resume, s);
    double took = now() - t0;
    bool forwarded = got_signal != 0;
    if (status != 0 && s->work_done && !forwarded) {
      /* every rank's work was done and agreed before mpirun's status: an
       * MPI_Finalize cut short by the runtime's deadline, or hydra's
       * clean-up after it (doc/cluster.md) */
      say("warning: segment %d: mpirun's status %d came after every rank's work was done and agreed (the steps, the "
          "checkpoint and the outputs written): the run is finished",
          k, status);
      status = 0;
    }
    s->status = status;
    const char *end = status == 0 && !(forwarded && s->stopped)             ? "completed"
                      : status == EXIT_STOPPED || (forwarded && s->stopped) ? "stopped"
                                                                            : "failed";
    char *cause = strcmp(end, "failed") ? NULL : cause_of(s);
    if (r->metrics)
      metrics_after(r, s, before, end, cause);
    free(prev_mesh);
    prev_mesh = mesh;
    if (!cause) {
      if (!strcmp(end, "stopped")) {
        say("segment %d stopped%s after %.1f s (status 3)", k, forwarded ? " by gslrun's signal" : "", took);
        free(s);
        return EXIT_STOPPED;
      }
      free(s);
      return 0;
    }
    if (forwarded) {
      say("segment %d ended by the signal gslrun passed on: %s; not restarting", k, cause);
      free(s);
      return status ? status : EXIT_STOPPED;
    }
    long rank0 = r->prev_rank0;
    r->prev_rank0 = s->pid[0];
    last_status = status;
    free(last_cause);
    last_cause = cause;
    if (s->exec_err[0]) {
      say("segment %d: the job could not be started: %s; not restarting", k, cause);
      free(s);
      return EXIT_NOSTART;
    }
    /* status 5 is the program's refusal only where another run holds the
     * lock now: an MPI_Abort's code can end in the same byte (MPICH's was
     * seen to, a rank aborted inside a checkpoint when its peer died) */
    if (status == EXIT_BUSY && lock_held_elsewhere(r, rank0)) {
      say("segment %d was refused: another run holds the --checkpoint directory %s (the program's message is "
          "above); not restarting, and nothing written",
          k, r->ckdir ? r->ckdir : "");
      free(s);
      return status;
    }
    if (status == EXIT_USAGE) {
      say("segment %d failed with a usage error (status 2): not restarting", k);
      free(s);
      return status;
    }
    if (k > r->max_restarts) {
      say("giving up after %ld restart%s: segment %d failed after %.1f s: %s", r->max_restarts,
          r->max_restarts == 1 ? "" : "s", k, took, cause);
      free(s);
      return status;
    }
    if (s->first_dead >= 0)
      say("segment %d failed after %.1f s: %s (the job ended %.2f s after the rank)", k, took, cause, s->detect);
    else
      say("segment %d failed after %.1f s: %s", k, took, cause);
    char name[256];
    long from = resume_point(r, s, name, sizeof name);
    if (from < 0) {
      free(s);
      return status;
    }
    double wait = r->backoff;
    for (int j = 1; j < k && wait < BACKOFF_CAP; j++)
      wait *= 2;
    if (wait > BACKOFF_CAP)
      wait = BACKOFF_CAP;
    char lost[128];
    if (s->last >= 0)
      snprintf(lost, sizeof lost, "%ld step%s lost (the last logged was step %ld)", s->last > from ? s->last - from : 0,
               s->last - from == 1 ? "" : "s", s->last);
    else
      snprintf(lost, sizeof lost, "steps lost unknown (no step was logged)");
    if (name[0])
      say("restart %d of %ld in %.1f s: resuming from %s/%s (step %ld); %s", k, r->max_restarts, wait, r->ckdir, name,
          from, lost);
    else
      say("restart %d of %ld in %.1f s: from step 0 (%s); %s", k, r->max_restarts, wait,
          r->ckdir ? "no checkpoint was written yet" : "no --checkpoint DIR was given", lost);
    free(s);
    sleep_for(wait);
    if (got_signal) {
      say("stopped by %s before restart %d; not restarting%s%s", signame(got_signal), k,
          name[0] ? " (continue with --resume from " : "", name[0] ? r->ckdir : "");
      return EXIT_STOPPED;
    }
    resume = r->resume || name[0];
  }
}

int main(int argc, char **argv) {
  Run r = {0};
  int rc = parse_options(argc, argv, &r);
  if (rc)
    return rc;
  clock_gettime(CLOCK_REALTIME, &r.started);
  const char *env = getenv("GSLRUN_MPIRUN");
  r.mpirun = env && *env ? xstrdup(env) : on_path("mpirun");
  if (!r.mpirun && !(r.mpirun = on_path("mpiexec"))) {
    say("error: cannot find mpirun on PATH");
    return 1;
  }
  char why[PATH_MAX + 256];
  if (!r.source && !runnable(r.program, why, sizeof why)) { /* a restart would fail alike */
    say("error: cannot run %s: %s; not starting", r.program, why);
    return EXIT_NOSTART;
  }
  if (r.metrics && metrics_refused(&r, r.metrics, why, sizeof why)) { /* gslrun rewrites it after each segment */
    say("error: %s; not starting", why);
    return strstr(why, "inside the --checkpoint") ? EXIT_USAGE : EXIT_NOSTART;
  }
  if (r.source) {
    if (!(r.gslc = find_gslc())) {
      say("error: cannot find gslc beside gslrun or on PATH");
      return 1;
    }
    if (read_axes(&r))
      return 1;
    char tmpl[] = "/tmp/gslrun-XXXXXX";
    const char *td = getenv("TMPDIR");
    char *t = xasprintf("%s/gslrun-XXXXXX", td && *td ? td : "/tmp");
    if (!mkdtemp(t)) {
      free(t);
      if (!mkdtemp(tmpl)) {
        say("error: cannot create a temporary directory: %s", strerror(errno));
        return 1;
      }
      t = xstrdup(tmpl);
    }
    r.tmpdir = t;
  }
  if (r.ckdir)
    note_checkpoints(&r);
  if (pipe(sig_pipe) != 0) {
    say("error: pipe: %s", strerror(errno));
    return 1;
  }
  fcntl(sig_pipe[0], F_SETFL, O_NONBLOCK);
  fcntl(sig_pipe[1], F_SETFL, O_NONBLOCK);
  fcntl(sig_pipe[0], F_SETFD, FD_CLOEXEC);
  fcntl(sig_pipe[1], F_SETFD, FD_CLOEXEC);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  rc = supervise(&r);
  remove_tmp(&r);
  return rc;
}
