/* main.c — the gslc driver: options, then the pipeline, read as lists of
 * passes, one a line:
 *
 *   compile        output_path -> source_load -> front_end -> [machine_load] -> budget_search
 *                  -> emit (or write_report)
 *   front_end      parse_source -> sema_run: sema's program, which every build copies
 *   budget_search  per attempt train_copy, then per round build_once, until the plan fits
 *   train_copy     ir_clone (with the regions chosen so far recomputed) -> ad_train -> ir_dce
 *                  -> slots_skip_empty
 *   build_once     [auto_shard] -> shard_propagate -> shard_updates -> [samebits_block]
 *                  -> spmd_partition -> spmd_combine -> plan_buffers
 *   emit           cg_emit -> link_program
 *
 * with ir_verify after every pass that makes or changes IR (run_pass,
 * verified), and plan_verify after planning (a broken invariant is a
 * compiler bug and dies). What a build makes is held in a Built, each
 * program named for the pass that made it and freed by build_free. One
 * attempt unless --mem-budget finds the plan past the budget: then the
 * next recomputes more regions (remat.c measures and orders them on the
 * first plan), and with --auto-shard each attempt may search again with a
 * smaller bound on params and states (MEM_ROUNDS). Every mode plans:
 * --emit-ir prints the global program with the shardings found,
 * --emit-spmd and --explain the SPMD program, --stats the plan;
 * --mesh-axes alone reads sema's program, before any build.
 *
 * Diagnostics go to one Diag, made here and handed to each phase that
 * reports; an attempt after the first trains with a Diag that prints
 * nothing (its warnings were given). Each phase says whether it failed,
 * and the driver stops after the first that did. Linking spawns the
 * compiler driver configure found (mpicc), as cproc spawns its assembler
 * and linker, with libgslrt and the BLAS after the program's object; the
 * linker's stderr is held back and printed after our own error line. The
 * output file is never a source: -o naming the input is refused before
 * any work, -o naming an imported module before anything is written. The
 * runtime and the stdlib are found from where gslc itself is
 * (find_resources): a build tree or an install, moved or not. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "gslc.h"

extern char **environ;

typedef enum Mode { MODE_LINK, MODE_OBJECT, MODE_ASM, MODE_LLVM, MODE_IR, MODE_SPMD, MODE_EXPLAIN, MODE_STATS, MODE_ANNOTATIONS, MODE_MESH } Mode;

typedef struct Options {
  const char *input;      /* the .gsl file */
  const char *output;     /* -o, or NULL for the default */
  Mode mode;              /* what to produce */
  int opt_level;          /* -O0..-O3 */
  DType precision;        /* --precision: DT_F32 or DT_BF16 */
  const char **includes;  /* -I */
  int ninclude;
  Define *defines;        /* -D */
  int ndefine;
  bool no_skip_empty;     /* -fno-moe-skip-empty: moe bodies compute every capacity slot */
  bool no_skip_loops;     /* -fno-moe-skip-loops: moe bodies' elementwise loops run over every slot */
  bool auto_shard;        /* --auto-shard: the cost search chooses the unannotated shardings */
  const char *machine;    /* --machine FILE: the rates the search prices with, or NULL */
  int64_t mem_budget;     /* --mem-budget: the most bytes a device may need (--stats' total), 0: none */
  int same_bits;          /* --same-bits[=N]: the most blocks a summed dimension is cut into, 0: off */
} Options;

#define MEM_ROUNDS 4 /* searches under --mem-budget, each with the bound the last plan's excess shrank */

/* "123", "64K", "1.5G" (K, M, G: powers of 1024) as bytes; -1 if malformed */
static int64_t parse_bytes(const char *s) {
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (end == s || errno || !(x > 0) || *s == '-' || *s == '+')
    return -1;
  if (*end == 'K' || *end == 'k')
    x *= 1024.0, end++;
  else if (*end == 'M' || *end == 'm')
    x *= 1024.0 * 1024.0, end++;
  else if (*end == 'G' || *end == 'g')
    x *= 1024.0 * 1024.0 * 1024.0, end++;
  if (*end || x < 1 || x > 9e18)
    return -1;
  return (int64_t)x;
}

static const char usage[] =
    "usage: gslc [options] FILE.gsl\n"
    "Compiles a GSL program to an executable linked with libgslrt and MPI.\n"
    "\n"
    "  -o FILE        write FILE (default: FILE.gsl without .gsl, or .o/.s/.ll)\n"
    "  -c             write an object file, do not link\n"
    "  -S             write assembly\n"
    "  --emit-llvm    write LLVM IR (after optimization)\n"
    "  --emit-ir      write the global tensor IR with the shardings found (stdout unless -o)\n"
    "  --emit-spmd    write the per-device program: local shapes and collectives\n"
    "  --explain      report each value's sharding and why, each collective and its cost\n"
    "  --stats        report memory per device (planned peak, without reuse) and bytes per collective\n"
    "  -D NAME=VALUE  override const NAME\n"
    "  -I DIR         search DIR for imports before the stdlib\n"
    "  -O0 .. -O3     optimization level (default -O2)\n"
    "  --precision P  f32 (default) or bf16: products and moe bodies in bf16 with f32 accumulation,\n"
    "                 params, optimizer states, losses, norms and softmaxes in f32\n"
    "  -fno-moe-skip-empty  run moe bodies' matrix products over every capacity slot,\n"
    "                 empty ones too (default: over the filled slots where the body is row by row)\n"
    "  -fno-moe-skip-loops  run them over the filled slots, but the elementwise loops between\n"
    "                 them over every slot (default: those too over the filled slots alone)\n"
    "  --auto-shard   choose every sharding the program does not annotate by a cost search\n"
    "                 (an integer linear program, solved by CBC); --explain says what it chose\n"
    "  --same-bits[=N]  the same bits on every mesh: sums over split dimensions in fixed blocks\n"
    "                 (the extent's largest divisor not above N, default 12), added in block order\n"
    "  --machine FILE the rates --auto-shard, --mem-budget and --explain's estimate use\n"
    "                 (man gslc, MACHINE FILES)\n"
    "  --mem-budget BYTES  the most bytes a device may need (--stats' total; K, M, G suffixes):\n"
    "                 a training step recomputes regions for its backward pass (the cheapest\n"
    "                 per byte saved first), and --auto-shard cuts params, states and inputs, to fit\n"
    "  --mesh-axes    write one line per mesh axis: its name, its size, the const that sizes it\n"
    "                 (or -), and data (the annotations split an input over it and no param) or model\n"
    "  --emit-annotations  write the params' and inputs' declarations with their shardings\n"
    "                 written in (with --auto-shard: the ones it chose), to pin them in the source\n"
    "  --help         show this help\n"
    "  --version      show the version\n";

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "gslc: error: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'gslc --help'.\n");
  return 1;
}

/* the value of an option given as "-oFILE" or "-o FILE" */
static const char *option_value(int argc, char **argv, int *i, const char *opt) {
  const char *a = argv[*i];
  size_t n = strlen(opt);
  if (a[n])
    return a[n] == '=' && opt[1] == '-' ? a + n + 1 : a + n;
  if (*i + 1 >= argc)
    return NULL;
  return argv[++*i];
}

static int parse_options(int argc, char **argv, Options *o) {
  memset(o, 0, sizeof *o);
  o->opt_level = 2;
  o->includes = xcalloc((size_t)argc, sizeof *o->includes);
  o->defines = xcalloc((size_t)argc, sizeof *o->defines);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(usage, stdout);
      exit(0);
    } else if (strcmp(a, "--version") == 0) {
      printf("gslc (GSL) %s\nLLVM 14, runtime libgslrt over MPI\n"
             "Licensed under the Apache License, Version 2.0: no warranty; see LICENSE.\n",
             PACKAGE_VERSION);
      exit(0);
    } else if (strcmp(a, "-c") == 0) {
      o->mode = MODE_OBJECT;
    } else if (strcmp(a, "-S") == 0) {
      o->mode = MODE_ASM;
    } else if (strcmp(a, "--emit-llvm") == 0) {
      o->mode = MODE_LLVM;
    } else if (strcmp(a, "--emit-ir") == 0) {
      o->mode = MODE_IR;
    } else if (strcmp(a, "--emit-spmd") == 0) {
      o->mode = MODE_SPMD;
    } else if (strcmp(a, "--explain") == 0) {
      o->mode = MODE_EXPLAIN;
    } else if (strcmp(a, "--stats") == 0) {
      o->mode = MODE_STATS;
    } else if (strcmp(a, "--emit-annotations") == 0) {
      o->mode = MODE_ANNOTATIONS;
    } else if (strcmp(a, "--mesh-axes") == 0) {
      o->mode = MODE_MESH;
    } else if (strncmp(a, "--precision", 11) == 0 && (a[11] == '\0' || a[11] == '=')) {
      const char *v = option_value(argc, argv, &i, "--precision");
      if (!v || (strcmp(v, "f32") != 0 && strcmp(v, "bf16") != 0))
        return usage_error("--precision takes f32 or bf16, got '%s'", v ? v : "");
      o->precision = strcmp(v, "bf16") == 0 ? DT_BF16 : DT_F32;
    } else if (strcmp(a, "-fno-moe-skip-empty") == 0 || strcmp(a, "-fmoe-skip-empty") == 0) {
      o->no_skip_empty = a[2] == 'n';
    } else if (strcmp(a, "-fno-moe-skip-loops") == 0 || strcmp(a, "-fmoe-skip-loops") == 0) {
      o->no_skip_loops = a[2] == 'n';
    } else if (strcmp(a, "--auto-shard") == 0) {
      o->auto_shard = true;
    } else if (strcmp(a, "--same-bits") == 0) {
      o->same_bits = 12;
    } else if (strncmp(a, "--same-bits=", 12) == 0) {
      char *end;
      long n = strtol(a + 12, &end, 10);
      if (end == a + 12 || *end || n < 1 || n > SAMEBITS_MAX_BOUND)
        return usage_error("--same-bits=N takes a block count from 1 to " SAMEBITS_MAX_TEXT ", got '%s'", a + 12);
      o->same_bits = (int)n;
    } else if (strncmp(a, "--mem-budget", 12) == 0 && (a[12] == '\0' || a[12] == '=')) {
      const char *v = option_value(argc, argv, &i, "--mem-budget");
      if (!v || (o->mem_budget = parse_bytes(v)) < 0)
        return usage_error("--mem-budget takes a number of bytes with an optional K, M or G (powers of 1024), "
                           "got '%s'", v ? v : "");
    } else if (strncmp(a, "--machine", 9) == 0 && (a[9] == '\0' || a[9] == '=')) {
      if (!(o->machine = option_value(argc, argv, &i, "--machine")) || !*o->machine)
        return usage_error("--machine needs a file name%s", "");
    } else if (a[0] == '-' && a[1] == 'O' && a[2] >= '0' && a[2] <= '3' && !a[3]) {
      o->opt_level = a[2] - '0';
    } else if (strncmp(a, "-o", 2) == 0) {
      if (!(o->output = option_value(argc, argv, &i, "-o")) || !*o->output)
        return usage_error("-o needs a file name%s", "");
    } else if (strncmp(a, "-I", 2) == 0) {
      const char *d = option_value(argc, argv, &i, "-I");
      if (!d || !*d)
        return usage_error("-I needs a directory%s", "");
      o->includes[o->ninclude++] = d;
    } else if (strncmp(a, "-D", 2) == 0) {
      const char *d = option_value(argc, argv, &i, "-D");
      const char *eq = d ? strchr(d, '=') : NULL;
      if (!d || !eq || eq == d)
        return usage_error("-D needs NAME=VALUE, got '%s'", d ? d : "");
      o->defines[o->ndefine].name = xstrdup(d);
      ((char *)o->defines[o->ndefine].name)[eq - d] = '\0';
      o->defines[o->ndefine].value = eq + 1;
      o->ndefine++;
    } else if (a[0] == '-' && a[1]) {
      return usage_error("unknown option '%s'", a);
    } else if (o->input) {
      return usage_error("more than one input file ('%s')", a);
    } else {
      o->input = a;
    }
  }
  if (!o->input)
    return usage_error("no input file%s", "");
  if (o->same_bits && o->auto_shard)
    return usage_error("--same-bits blocks the sums over the dimensions the annotations split, the same ones on "
                       "every mesh; --auto-shard chooses them by the mesh's sizes%s", "");
  if (o->machine && !o->auto_shard && !o->mem_budget && o->mode != MODE_EXPLAIN)
    return usage_error("--machine gives the rates of --auto-shard's search, --mem-budget's choice of what to "
                       "recompute and --explain's estimate: it needs one of them%s", "");
  return 0;
}

/* Where the runtime library and the stdlib are, found from where this gslc
 * is, as clang finds its resource directory: from the directory D of
 * /proc/self/exe (links resolved), each the first place that has it
 * (libgslrt.a; nn.gsl) of
 *   a build tree:  D/runtime/, and D/stdlib/ (a build in the source tree)
 *                  or, beside a D/runtime/, the configured source tree's;
 *   an install:    the configured libdir and stdlib dir taken relative to
 *                  the configured bindir, from D (so an install moved to any
 *                  prefix, or made with DESTDIR, works);
 *   the configured libdir and stdlib dir themselves.
 * Each is looked for apart: the stdlib is needed to compile, the runtime
 * only to link ("" where none was found). */
typedef struct Resources {
  char runtime[PATH_MAX]; /* libgslrt.a, or "" */
  char stdlib[PATH_MAX];  /* the directory of nn.gsl, moe.gsl, optim.gsl, or "" */
} Resources;

/* to relative to from ("/usr/local/bin", "/usr/local/lib" -> "../lib"),
 * both absolute paths without "." or ".." components */
static void relative_to(const char *from, const char *to, char *out, size_t cap) {
  const char *f = from, *t = to;
  for (;;) { /* past their common leading components */
    while (*f == '/')
      f++;
    while (*t == '/')
      t++;
    size_t nf = strcspn(f, "/"), nt = strcspn(t, "/");
    if (!nf || nf != nt || strncmp(f, t, nf) != 0)
      break;
    f += nf, t += nt;
  }
  size_t n = 0;
  out[0] = '\0';
  while (*f) { /* one ".." for each component of from left */
    n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, "../");
    f += strcspn(f, "/");
    while (*f == '/')
      f++;
  }
  snprintf(out + n, n < cap ? cap - n : 0, "%s", *t ? t : ".");
}

/* out = a "/" b; false if it does not fit */
static bool join(char *out, size_t cap, const char *a, const char *b) {
  int n = snprintf(out, cap, "%s/%s", a, b);
  return n > 0 && (size_t)n < cap;
}

/* Where out is still empty (nothing found before): whether directory dir
 * holds a readable file, and out then names dir. */
static bool holds(char *out, size_t cap, const char *dir, const char *file) {
  char f[PATH_MAX];
  return !*out && join(f, sizeof f, dir, file) && access(f, R_OK) == 0 && snprintf(out, cap, "%s", dir) < (int)cap;
}

static void find_resources(Resources *r) {
  char self[PATH_MAX], dir[PATH_MAX], rel[PATH_MAX];
  r->runtime[0] = r->stdlib[0] = '\0';
  char rtdir[PATH_MAX] = "";
  if (realpath("/proc/self/exe", self)) {
    *strrchr(self, '/') = '\0'; /* its directory */
    if (join(dir, sizeof dir, self, "stdlib"))
      holds(r->stdlib, sizeof r->stdlib, dir, "nn.gsl");
    if (join(dir, sizeof dir, self, "runtime") && holds(rtdir, sizeof rtdir, dir, "libgslrt.a"))
      holds(r->stdlib, sizeof r->stdlib, GSL_SRCDIR "/stdlib", "nn.gsl"); /* a build tree beside its sources */
    relative_to(GSL_BINDIR, GSL_LIBDIR, rel, sizeof rel);
    if (join(dir, sizeof dir, self, rel))
      holds(rtdir, sizeof rtdir, dir, "libgslrt.a");
    relative_to(GSL_BINDIR, GSL_STDLIBDIR, rel, sizeof rel);
    if (join(dir, sizeof dir, self, rel))
      holds(r->stdlib, sizeof r->stdlib, dir, "nn.gsl");
  }
  holds(rtdir, sizeof rtdir, GSL_LIBDIR, "libgslrt.a");
  holds(r->stdlib, sizeof r->stdlib, GSL_STDLIBDIR, "nn.gsl");
  if (*rtdir && !join(r->runtime, sizeof r->runtime, rtdir, "libgslrt.a"))
    r->runtime[0] = '\0';
}

/* FILE.gsl -> FILE + ext; a file not named .gsl gives a.out (or a + ext),
 * never the input's own name */
static char *default_output(const char *input, const char *ext) {
  size_t n = strlen(input);
  if (n > 4 && strcmp(input + n - 4, ".gsl") == 0)
    n -= 4;
  else
    return xstrdup(*ext ? (strcmp(ext, ".o") == 0 ? "a.o" : strcmp(ext, ".s") == 0 ? "a.s" : "a.ll") : "a.out");
  char *out = xmalloc(n + strlen(ext) + 1);
  memcpy(out, input, n);
  strcpy(out + n, ext);
  return out;
}

/* The file this run writes: -o, or the default for the mode; NULL for
 * standard output (--emit-ir, --emit-spmd, --explain without -o). */
static char *output_path(const Options *o) {
  if (o->output)
    return xstrdup(o->output);
  switch (o->mode) {
  case MODE_LINK: return default_output(o->input, "");
  case MODE_OBJECT: return default_output(o->input, ".o");
  case MODE_ASM: return default_output(o->input, ".s");
  case MODE_LLVM: return default_output(o->input, ".ll");
  case MODE_IR:
  case MODE_SPMD:
  case MODE_EXPLAIN:
  case MODE_STATS:
  case MODE_ANNOTATIONS: return NULL;
  case MODE_MESH: return NULL;
  }
  die("unknown mode %d", (int)o->mode);
}

/* Whether a and b name one existing file (device and inode, so a second
 * name, a symlink or a "./" prefix is seen through). */
static bool same_file(const char *a, const char *b) {
  struct stat sa, sb;
  return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Refuses an output that is a source this run read: the input (checked
 * before any work) or, after sema, a module the program imports. */
static bool output_overwrites_source(const char *out, const char *input, Diag *d) {
  if (!out)
    return false;
  if (same_file(out, input)) {
    diag_fatal(d, "the output file %s is the input file %s; refusing to overwrite it", out, input);
    return true;
  }
  const char *src = source_was_read(out);
  if (src) {
    diag_fatal(d, "the output file %s is the module %s that %s imports; refusing to overwrite it", out, src,
               input);
    return true;
  }
  return false;
}

/* Copies what a child wrote to the temporary file fd to our stderr. */
static void copy_child_output(int fd) {
  char buf[4096];
  ssize_t n;
  fflush(stderr);
  if (lseek(fd, 0, SEEK_SET) != 0)
    return;
  while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0 && fwrite(buf, 1, (size_t)n, stderr) != (size_t)n)
      return;
}

/* Runs argv[0] with argv; true if it exited 0. Its stderr goes to a
 * temporary file, copied to ours after our own message, so that a failure
 * reads "gslc: error: linking failed ..." first and the linker's lines
 * after it. */
static bool run(char **argv, Diag *d) {
  pid_t pid;
  FILE *cap = tmpfile();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (cap)
    posix_spawn_file_actions_adddup2(&fa, fileno(cap), STDERR_FILENO);
  int err = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  bool ok = false;
  if (err) {
    diag_fatal(d, "cannot run %s: %s", argv[0], strerror(err));
    goto done;
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      diag_fatal(d, "waiting for %s: %s", argv[0], strerror(errno));
      goto done;
    }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    diag_fatal(d, "linking failed (%s exited with status %d)", argv[0],
               WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    goto done;
  }
  ok = true;
done:
  if (cap) {
    copy_child_output(fileno(cap));
    fclose(cap);
  }
  return ok;
}

static bool link_program(const char *object, const char *out, const char *runtime, Diag *d) {
  char *argv[32];
  int n = 0;
  argv[n++] = (char *)GSL_LINKER;
  argv[n++] = (char *)"-o";
  argv[n++] = (char *)out;
  argv[n++] = (char *)object;
  argv[n++] = (char *)runtime;
  char *libs = xstrdup(GSL_LINK_LIBS);
  for (char *tok = strtok(libs, " "); tok && n < 30; tok = strtok(NULL, " "))
    argv[n++] = tok;
  argv[n] = NULL;
  bool ok = run(argv, d);
  free(libs);
  return ok;
}

/* Appends printf-style text to buf. */
static void put(char **buf, size_t *len, size_t *cap, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int n = vsnprintf(*buf + *len, *cap - *len, fmt, ap);
    va_end(ap);
    if ((size_t)n < *cap - *len) {
      *len += (size_t)n;
      return;
    }
    *buf = xrealloc(*buf, *cap = 2 * *cap + (size_t)n);
  }
}

/* Appends s as a JSON string. */
static void json_string(char **buf, size_t *len, size_t *cap, const char *s) {
  put(buf, len, cap, "\"");
  for (const unsigned char *c = (const unsigned char *)s; *c; c++)
    if (*c == '"' || *c == '\\')
      put(buf, len, cap, "\\%c", *c);
    else if (*c < 0x20 || *c >= 0x7f) /* not ASCII: escaped, so the text is JSON whatever the bytes */
      put(buf, len, cap, "\\u%04x", *c);
    else
      put(buf, len, cap, "%c", *c);
  put(buf, len, cap, "\"");
}

/* gslrt_program_info's build (runtime/gslrt.h): the -D settings, the
 * program's consts as compiled and those that size the mesh, every source
 * file read with its SHA-256, and one SHA-256 of them all (their bytes in
 * the order read). */
static char *build_json(const Options *o, const Program *p) {
  size_t len = 0, cap = 1024;
  char *buf = xmalloc(cap);
  put(&buf, &len, &cap, "{\"defines\": {");
  for (int i = 0; i < o->ndefine; i++) {
    bool later = false; /* -D given twice: the last counts, as in sema */
    for (int j = i + 1; j < o->ndefine; j++)
      later |= strcmp(o->defines[i].name, o->defines[j].name) == 0;
    if (later)
      continue;
    put(&buf, &len, &cap, len && buf[len - 1] != '{' ? ", " : "");
    json_string(&buf, &len, &cap, o->defines[i].name);
    put(&buf, &len, &cap, ": ");
    json_string(&buf, &len, &cap, o->defines[i].value);
  }
  put(&buf, &len, &cap, "}, \"consts\": {");
  for (int i = 0; i < p->nconsts; i++) {
    const ConstDef *c = &p->consts[i];
    put(&buf, &len, &cap, i ? ", " : "");
    json_string(&buf, &len, &cap, c->name);
    if (c->is_int)
      put(&buf, &len, &cap, ": %lld", (long long)c->i);
    else if (isfinite(c->f))
      put(&buf, &len, &cap, ": %.17g", c->f);
    else
      put(&buf, &len, &cap, ": null");
  }
  put(&buf, &len, &cap, "}, \"mesh_consts\": [");
  for (int i = 0, n = 0; i < p->nconsts; i++)
    if (p->consts[i].mesh) {
      put(&buf, &len, &cap, n++ ? ", " : "");
      json_string(&buf, &len, &cap, p->consts[i].name);
    }
  put(&buf, &len, &cap, "], \"sources\": [");
  for (int i = 0; i < source_nreads(); i++) {
    put(&buf, &len, &cap, "%s{\"file\": ", i ? ", " : "");
    json_string(&buf, &len, &cap, source_read_path(i));
    put(&buf, &len, &cap, ", \"sha256\": \"%s\"}", source_read_sha256(i));
  }
  put(&buf, &len, &cap, "], \"source_sha256\": \"%s\"}", source_sha256_all());
  return buf;
}

/* The const that sizes mesh axis `axis` of p, or NULL: the const sema
 * marked (ConstDef.mesh) whose name is the whole expression after
 * `NAME =` in the mesh declaration's text. */
static const char *axis_const(const Program *p, int axis) {
  const Mesh *m = &p->mesh;
  if (!m->span.src)
    return NULL;
  const char *t = m->span.src->text + m->span.off, *end = m->span.src->text + m->span.end;
  size_t n = strlen(m->name[axis]);
  for (const char *q = t; q + n <= end; q++) {
    bool starts = q == t || !(isalnum((unsigned char)q[-1]) || q[-1] == '_');
    if (!starts || strncmp(q, m->name[axis], n) != 0 || isalnum((unsigned char)q[n]) || q[n] == '_')
      continue;
    const char *r = q + n;
    while (r < end && isspace((unsigned char)*r))
      r++;
    if (r >= end || *r != '=')
      continue;
    for (r++; r < end && isspace((unsigned char)*r); r++)
      ;
    const char *id = r;
    while (r < end && (isalnum((unsigned char)*r) || *r == '_'))
      r++;
    size_t len = (size_t)(r - id);
    while (r < end && isspace((unsigned char)*r))
      r++;
    if (!len || r >= end || (*r != ',' && *r != ']'))
      return NULL;
    for (int c = 0; c < p->nconsts; c++)
      if (p->consts[c].mesh && strlen(p->consts[c].name) == len && !strncmp(p->consts[c].name, id, len))
        return p->consts[c].name;
    return NULL;
  }
  return NULL;
}

/* --mesh-axes: per axis its name, size, sizing const (or -) and role:
 * data where the annotations split an input over it and no param. */
static void mesh_axes_print(FILE *f, const Program *p) {
  for (int a = 0; a < p->mesh.naxes; a++) {
    bool param = false, input = false;
    for (int i = 0; i < p->ntensors; i++) {
      const Tensor *t = &p->tensors[i];
      for (int d = 0; t->annotated && d < t->shape.rank; d++)
        for (int k = 0; k < t->sh.naxes[d]; k++)
          if (t->sh.axes[d][k] == a) {
            param |= t->kind != TK_INPUT;
            input |= t->kind == TK_INPUT;
          }
    }
    const char *c = axis_const(p, a);
    fprintf(f, "%s %lld %s %s\n", p->mesh.name[a], (long long)p->mesh.size[a], c ? c : "-",
            input && !param ? "data" : "model");
  }
}

/* ---- the pipeline --------------------------------------------------------------- */

/* Dies naming what does not verify: a broken invariant is gslc's bug.
 * Returns p, so a pass's new program is verified where it is made. */
static Program *verified(Program *p, const char *what) {
  if (!ir_verify(p, stderr))
    die("%s does not verify", what);
  return p;
}

/* Runs a pass that changes p in place, then the verifier on p. */
static void run_pass(Program *p, void (*pass)(Program *), const char *what) {
  pass(p);
  verified(p, what);
}

/* The front end: src parsed and elaborated into the global IR, sema's
 * program, which every build copies; NULL after reporting. */
static Program *front_end(const Options *o, const Source *src, const char *stdlib, Arena *ast_arena, Diag *d) {
  Node *root = parse_source(src, ast_arena, d);
  if (!root)
    return NULL;
  SemaOptions so = {o->includes, o->ninclude, stdlib, o->defines, o->ndefine};
  Program *p = ir_new(src->path);
  p->precision = o->precision;
  Sema *sema = sema_new(p, ast_arena, &so, d);
  bool elaborated = sema_run(sema, root);
  sema_free(sema);
  if (!elaborated) {
    ir_free(p);
    return NULL;
  }
  return p;
}

/* What one build made, from a copy of sema's program to the buffer plan.
 * Every program here is the build's own (build_free). */
typedef struct Built {
  Program *trained;   /* sema's program copied, the chosen regions recomputed, trained (ad_train) */
  Program *filled;    /* trained with its moe products restricted to the filled slots (slots_skip_empty;
                         it shares trained's strings), or NULL: no block was */
  Program *blocked;   /* --same-bits: the global program with its sums cut into blocks, else NULL */
  Program *global;    /* the last of those three made: the global program, sharded, as the reports read it */
  Program *spmd;      /* the per-device program, or NULL before it is made */
  Plan *plan;         /* its buffers, or NULL before they are planned */
  AutoShard searched; /* --auto-shard: what its last search did */
  double plain[2];    /* --explain --same-bits: the estimated step without it (compute, communication) */
} Built;

/* The first half of a build: sema's program front copied with the first
 * nchosen regions of order recomputed, trained (its warnings to d), its
 * dead values dropped, its moe products restricted to the filled slots. */
static void train_copy(const Options *o, const Program *front, const int *order, int nchosen, Diag *d, Built *b) {
  b->trained = ir_clone(front);
  for (int k = 0; k < nchosen; k++)
    b->trained->regions[order[k] - 1].recompute = true;
  ad_train(b->trained, d);
  run_pass(b->trained, ir_dce, "the IR sema built");
  b->filled = slots_skip_empty(b->trained, !o->no_skip_empty, !o->no_skip_loops);
  b->global = b->filled ? verified(b->filled, "the IR with moe fill counts") : b->trained;
}

/* --explain --same-bits: the estimated step of g partitioned without it
 * (compute and communication seconds, for the comparison). */
static void estimate_unblocked(const Program *g, const Machine *m, double plain[2]) {
  Program *s = spmd_partition(g);
  spmd_combine(s);
  shard_estimate(s, m, &plain[0], &plain[1]);
  ir_free(s);
}

/* The second half: the trained program sharded (--auto-shard's choices
 * within bound bytes of params, states and inputs a device, bound < 0:
 * none; then propagation), with --same-bits its sums blocked, partitioned
 * into the per-device program, and its buffers planned. False after
 * reporting, or with b->searched.infeasible and nothing reported: the
 * mesh cannot hold the params, states and inputs within bound. */
static bool build_once(const Options *o, Built *b, const Machine *m, double bound, Diag *d) {
  if (o->auto_shard && !auto_shard(b->global, m, bound, o->mode == MODE_EXPLAIN, &b->searched, d))
    return false;
  run_pass(b->global, shard_propagate, "the shardings propagation found");
  run_pass(b->global, shard_updates, "the shardings of the sharded updates");
  if (o->same_bits) {
    if (o->mode == MODE_EXPLAIN)
      estimate_unblocked(b->global, m, b->plain);
    if (!(b->blocked = samebits_block(b->global, o->same_bits, d)))
      return false;
    b->global = verified(b->blocked, "the IR with --same-bits' blocked sums");
  }
  b->spmd = verified(spmd_partition(b->global), "the SPMD program the partitioner built");
  run_pass(b->spmd, spmd_combine, "the SPMD program with riding all-to-alls");
  b->plan = plan_buffers(b->spmd);
  if (!plan_verify(b->plan, stderr))
    die("the buffer plan does not verify");
  return true;
}

/* Undoes build_once: the trained program unsharded, to search again. */
static void build_unplan(Built *b) {
  plan_free(b->plan);
  ir_free(b->spmd);
  ir_free(b->blocked);
  b->plan = NULL;
  b->spmd = b->blocked = NULL;
  b->global = b->filled ? b->filled : b->trained;
  shard_reset(b->global);
}

static void build_free(Built *b) {
  plan_free(b->plan);
  ir_free(b->spmd);
  ir_free(b->blocked);
  ir_free(b->filled);
  ir_free(b->trained);
  *b = (Built){0};
}

/* The regions of order after the first `chosen` (of ncand) that are
 * recomputed next: as many as it takes for their savings to cover excess
 * bytes, each told why for --explain. Returns how many are chosen then. */
static int choose_regions(const Options *o, Program *front, const int *order, int ncand, int chosen,
                          int64_t excess) {
  for (int64_t cover = 0; chosen < ncand && cover < excess; chosen++) {
    Region *R = &front->regions[order[chosen] - 1];
    R->why = arena_printf(front->arena, "--mem-budget %lld: it saves about %lld bytes a device for %.3g ms of "
                          "recompute, number %d of %d candidates by recompute time per byte saved",
                          (long long)o->mem_budget, (long long)R->saved, R->seconds * 1e3, chosen + 1, ncand);
    cover += R->saved;
  }
  return chosen;
}

/* Builds sema's program front into b: once, or under --mem-budget until
 * the plan fits. An attempt trains a copy recomputing the regions chosen
 * so far (none at first; without a budget, those the source marks) and
 * builds it; a plan past the budget is built again recomputing more
 * regions, remat.c's order (the least recompute time per byte saved
 * first, measured on the first plan), as many as the excess asks for.
 * Once none is left, --auto-shard searches again on the same copy with
 * its bound on params, states and inputs shrunk by the excess, up to
 * MEM_ROUNDS searches. False after reporting. */
static bool budget_search(const Options *o, Program *front, const Machine *m, Diag *d, Built *b) {
  int *order = xmalloc(sizeof *order * (size_t)(front->nregions + 1)); /* remat_order's candidates */
  int ncand = -1, chosen = 0; /* entries of order (-1: not measured yet); the first chosen of them */
  Diag quiet = {NULL, 0, false}; /* an attempt after the first: its warnings were given */
  bool ok = false;
  for (int attempt = 0;; attempt++) {
    train_copy(o, front, order, chosen, attempt ? &quiet : d, b);
    double budget = o->mem_budget > 0 ? (double)o->mem_budget : -1; /* --auto-shard's bound */
    const char *last_largest = NULL; /* the largest parts of the last plan past the budget */
    bool more = false;               /* regions left to recompute */
    for (int round = 0;; round++) {
      if (!build_once(o, b, m, budget, d)) {
        if (b->searched.infeasible)
          diag_fatal(d, "--mem-budget %lld: on this mesh a device holds at least %.0f bytes of params, optimizer "
                     "states and inputs (each cut over as many devices as its dimensions and annotations allow; "
                     "the largest: %s), more than %s",
                     (long long)o->mem_budget, b->searched.least, b->searched.largest,
                     round ? arena_printf(front->arena, "the %.0f bytes the budget leaves them beside the rest of "
                                                        "the plans found (the largest parts of the last: %s)",
                                          budget, last_largest)
                           : "the budget");
        goto done;
      }
      if (!o->mem_budget || plan_total(b->plan) <= o->mem_budget) {
        ok = true;
        goto done;
      }
      more = ncand != 0 && chosen != ncand; /* ncand < 0: not measured yet */
      if (more || !o->auto_shard || round == MEM_ROUNDS - 1)
        break;
      last_largest = stats_largest(front->arena, b->spmd, b->plan);
      budget -= (double)(plan_total(b->plan) - o->mem_budget);
      build_unplan(b);
    }
    if (ncand < 0) { /* what each region would save, measured on this first plan */
      remat_measure(front, b->spmd, b->plan, m);
      ncand = remat_order(front, order);
    }
    if (!more) {
      diag_fatal(d, "--mem-budget %lld: the plan found needs %lld bytes a device, more than the budget%s%s; the "
                 "largest parts: %s (gslc --stats says how)", (long long)o->mem_budget, (long long)plan_total(b->plan),
                 chosen ? " with every region recomputed" : "",
                 o->auto_shard ? "" : " (without --auto-shard, the annotations decide)",
                 stats_largest(front->arena, b->spmd, b->plan));
      goto done;
    }
    chosen = choose_regions(o, front, order, ncand, chosen, plan_total(b->plan) - o->mem_budget);
    build_free(b);
  }
done:
  free(order);
  return ok;
}

/* ---- the outputs ------------------------------------------------------------------ */

/* A report to out (standard output if NULL): --mesh-axes, of sema's
 * program front (b NULL: nothing built); --emit-ir, --emit-spmd,
 * --explain, --stats and --emit-annotations, of build b. False after
 * reporting. */
static bool write_report(const Options *o, const char *out, const Program *front, const Built *b, const Machine *m,
                         Diag *d) {
  FILE *f = out ? fopen(out, "w") : stdout;
  if (!f) {
    diag_fatal(d, "cannot write %s: %s", out, strerror(errno));
    return false;
  }
  switch (o->mode) {
  case MODE_MESH: mesh_axes_print(f, front); break;
  case MODE_IR: ir_print(f, b->global); break;
  case MODE_SPMD: ir_print(f, b->spmd); break;
  case MODE_EXPLAIN:
    explain_print(f, b->global, b->spmd, o->auto_shard ? &b->searched : NULL, m, o->same_bits ? b->plain : NULL);
    break;
  case MODE_ANNOTATIONS: annotations_print(f, b->global); break;
  case MODE_STATS: stats_print(f, b->spmd, b->plan, b->global); break;
  case MODE_LINK:
  case MODE_OBJECT:
  case MODE_ASM:
  case MODE_LLVM: die("mode %d writes code, not a report", (int)o->mode);
  }
  if ((out ? fclose(f) : fflush(f)) != 0) {
    diag_fatal(d, "cannot write %s: %s", out ? out : "stdout", strerror(errno));
    return false;
  }
  return true;
}

/* Whether mode m writes code (an executable, an object, assembly or LLVM
 * IR), not a report. */
static bool writes_code(Mode m) { return m == MODE_LINK || m == MODE_OBJECT || m == MODE_ASM || m == MODE_LLVM; }

/* Build b's per-device program as code: an object file linked with the
 * runtime into the executable out (MODE_LINK), or out itself as an object
 * file, assembly or LLVM IR. False after reporting. */
static bool emit(const Options *o, const char *out, const Program *front, const Built *b, const char *runtime,
                 Diag *d) {
  char *build = build_json(o, front);
  CodegenOptions co = {o->opt_level, o->mode == MODE_ASM ? EMIT_ASM : o->mode == MODE_LLVM ? EMIT_LLVM : EMIT_OBJECT,
                       out, build};
  bool ok = false;
  if (o->mode != MODE_LINK) {
    ok = cg_emit(b->spmd, b->plan, &co, d);
  } else {
    char obj[] = "/tmp/gslc-XXXXXX.o"; /* the object, removed once linked */
    int fd = mkstemps(obj, 2);
    if (fd < 0) {
      diag_fatal(d, "cannot create a temporary file: %s", strerror(errno));
    } else {
      close(fd);
      co.out = obj;
      ok = cg_emit(b->spmd, b->plan, &co, d) && link_program(obj, out, runtime, d);
      unlink(obj);
    }
  }
  free(build);
  return ok;
}

/* The whole run: each step reports what stops it (to one Diag), and the
 * exit status is 1 after any error. */
static int compile(const Options *o) {
  Diag d = {stderr, 0, false};
  char *out = output_path(o);
  Source *src = NULL;
  Arena *ast_arena = arena_new();
  Program *front = NULL; /* sema's program */
  Built b = {0};
  Resources res;
  Machine mach;
  bool ok = false;
  if (output_overwrites_source(out, o->input, &d))
    goto done;
  if (!(src = source_load(o->input))) {
    diag_fatal(&d, "cannot read %s: %s", o->input, source_strerror(errno));
    goto done;
  }
  find_resources(&res);
  if (!*res.stdlib || (o->mode == MODE_LINK && !*res.runtime)) {
    diag_fatal(&d, "cannot find %s: not beside this gslc (as in its build tree, or as installed in %s and %s from "
               "%s), nor there", !*res.stdlib ? "the stdlib (nn.gsl)" : "the runtime library (libgslrt.a)",
               GSL_LIBDIR, GSL_STDLIBDIR, GSL_BINDIR);
    goto done;
  }
  /* the front end has read every module: none may be the output, in any
   * mode (--mesh-axes writes before anything is built) */
  if (!(front = front_end(o, src, res.stdlib, ast_arena, &d)) || output_overwrites_source(out, o->input, &d))
    goto done;
  if (o->mode == MODE_MESH) { /* the mesh as sema elaborated it: nothing built */
    ok = write_report(o, out, front, NULL, NULL, &d);
    goto done;
  }
  machine_default(&mach);
  if (o->machine && !machine_load(&mach, o->machine, front->mesh.name, front->mesh.naxes, &d))
    goto done;
  if (!budget_search(o, front, &mach, &d, &b))
    goto done;
  ok = writes_code(o->mode) ? emit(o, out, front, &b, res.runtime, &d) : write_report(o, out, front, &b, &mach, &d);
done:
  build_free(&b);
  ir_free(front);
  arena_free(ast_arena);
  source_free(src);
  free(out);
  return ok && !d.errors ? 0 : 1;
}

int main(int argc, char **argv) {
  Options o;
  int rc = parse_options(argc, argv, &o) ? 1 : compile(&o);
  for (int i = 0; i < o.ndefine; i++) /* a failed parse's too */
    free((char *)o.defines[i].name);
  free(o.defines);
  free(o.includes);
  return rc;
}
