/* gradcheck.c — checks the gradients gslc compiles against central finite
 * differences, for one tests/grad/NAME.gsl (run by tests/run-gsl.sh).
 *
 * A test program trains `train LOSS with sgd(lr = LR)` with `const LR = 1.0`
 * and params that start at zeros() and enter the loss only as w + x, with x
 * an input: then dLOSS/dw at w = 0 is dLOSS/dx at x. Its directives:
 *   # INPUT name f32|i32 d0,d1,... = v0 v1 ...   an input's values ("[]": a scalar)
 *   # GRAD w x                                   param w's gradient, against input x
 *   # NP n                                       ranks (default 1)
 *   # H h                                        the finite-difference step (default 0.05)
 *   # DRAWS                                      the program draws (dropout): see below
 *   #+ ...                                       continues the line before
 * The check:
 *   1. one step as written: w after it is 0 - 1 * g, so g = -w (exact);
 *   2. the program again with -D LR=0 (w stays 0), over 1 + 4N steps with
 *      each GRAD input given as a batch file (--input cycles batches): the
 *      base x, then x +- h and x +- 2h at each of its N elements; the
 *      losses come from --metrics;
 *   3. the fourth-order central difference
 *        d_j = (8 (L(x+h) - L(x-h)) - (L(x+2h) - L(x-2h))) / (12 h)
 *      in double precision from the f32 losses, against g_j:
 *        |g_j - d_j| <= 2e-3 max(|g_j|, |d_j|) + 2e-4 S,  S = max(1, |L|, max |d|).
 * A program that draws (dropout) draws anew at every step, so that its
 * loss at another step is another function: with DRAWS, each loss of 2.
 * is a run of its own of one step, step 0 as in 1., on its batch's files,
 * so that every loss sees the draws the gradient saw (1 + 4N runs).
 * Why that tolerance: the losses are f32 sums of O(1) terms, each good to
 * about 1e-6 of S, so the difference quotient carries about
 * 16 * 1e-6 S / (12 h) = 3e-5 S at h = 0.05; its truncation error is
 * O(h^4) (1e-5 for smooth O(1) functions); the compiled gradient is f32,
 * good to about 1e-6 relative. A wrong rule (a missing factor, a sign, a
 * transposed operand) is off by O(1) of the gradient, far outside. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "e2e/npy_load.h"

#define MAXT 16     /* inputs and grads per test */
#define MAXV 4096   /* elements per input */

typedef struct In {
  char name[64];
  int i32;          /* dtype i32 (else f32) */
  int rank;
  long dims[8];
  long n;           /* elements */
  double v[MAXV];   /* values */
} In;

static In ins[MAXT];
static int nins;
static char grad_w[MAXT][64], grad_x[MAXT][64];
static int ngrads, np = 1, draws;
static double h = 0.05;
static const char *work, *name;

static void die_(const char *fmt, const char *a) {
  fprintf(stderr, "gradcheck: %s: ", name);
  fprintf(stderr, fmt, a);
  fputc('\n', stderr);
  exit(1);
}

static In *find_input(const char *n) {
  for (int i = 0; i < nins; i++)
    if (!strcmp(ins[i].name, n))
      return &ins[i];
  die_("no INPUT named %s", n);
  return NULL;
}

/* the directives, with "#+" lines joined to the one before */
static void read_directives(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    die_("cannot open %s", path);
  static char line[1 << 16], all[1 << 17];
  char *lines[256];
  int nl = 0;
  size_t used = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    if (!strncmp(line, "#+ ", 3) && nl) {
      size_t k = strlen(line + 2);
      if (used + k > sizeof all)
        die_("%s", "too many directives");
      used--; /* append to the last line, the last thing in all, over its NUL */
      memcpy(all + used, line + 2, k + 1);
      used += k + 1;
    } else if (!strncmp(line, "# ", 2) && line[2] >= 'A' && line[2] <= 'Z') {
      size_t k = strlen(line + 2);
      if (used + k + 1 > sizeof all || nl == 256)
        die_("%s", "too many directives");
      lines[nl++] = all + used;
      memcpy(all + used, line + 2, k + 1);
      used += k + 1;
    }
  }
  fclose(f);
  for (int i = 0; i < nl; i++) {
    char *s = lines[i], key[16];
    int off = 0;
    if (sscanf(s, "%15s %n", key, &off) != 1)
      continue;
    s += off;
    if (!strcmp(key, "NP")) {
      np = atoi(s);
    } else if (!strcmp(key, "H")) {
      h = atof(s);
    } else if (!strcmp(key, "DRAWS")) {
      draws = 1;
    } else if (!strcmp(key, "GRAD")) {
      if (ngrads == MAXT || sscanf(s, "%63s %63s", grad_w[ngrads], grad_x[ngrads]) != 2)
        die_("bad GRAD line: %s", s);
      ngrads++;
    } else if (!strcmp(key, "INPUT")) {
      if (nins == MAXT)
        die_("%s", "too many inputs");
      In *in = &ins[nins++];
      char dt[8], shape[128];
      if (sscanf(s, "%63s %7s %127s =%n", in->name, dt, shape, &off) != 3)
        die_("bad INPUT line: %s", s);
      in->i32 = !strcmp(dt, "i32");
      in->rank = 0;
      in->n = 1;
      if (strcmp(shape, "[]"))
        for (char *t = strtok(shape, ","); t; t = strtok(NULL, ","))
          in->n *= in->dims[in->rank++] = atol(t);
      char *q = s + off;
      for (long j = 0; j < in->n; j++) {
        char *end;
        in->v[j] = strtod(q, &end);
        if (end == q || j >= MAXV)
          die_("INPUT %s has too few values", in->name);
        q = end;
      }
    }
  }
}

/* a version 1 .npy of nb batches of in's shape (nb 0: in's own shape) */
static void write_npy(const char *path, const In *in, long nb, const double *vals) {
  FILE *f = fopen(path, "wb");
  if (!f)
    die_("cannot write %s", path);
  char hdr[256], shape[160] = "";
  size_t k = 0;
  if (nb)
    k += (size_t)snprintf(shape + k, sizeof shape - k, "%ld, ", nb);
  for (int i = 0; i < in->rank; i++)
    k += (size_t)snprintf(shape + k, sizeof shape - k, "%ld, ", in->dims[i]);
  if (in->rank + (nb > 0) > 1)
    shape[k - 2] = '\0';
  else if (k)
    shape[k - 1] = '\0';
  int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                   in->i32 ? "<i4" : "<f4", shape);
  int total = 10 + n + 1, pad = (64 - total % 64) % 64;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
  pre[8] = (unsigned char)((n + 1 + pad) & 0xff);
  pre[9] = (unsigned char)((n + 1 + pad) >> 8);
  fwrite(pre, 1, 10, f);
  fwrite(hdr, 1, (size_t)n, f);
  for (int i = 0; i < pad; i++)
    fputc(' ', f);
  fputc('\n', f);
  long count = in->n * (nb ? nb : 1);
  for (long j = 0; j < count; j++) {
    if (in->i32) {
      int32_t x = (int32_t)vals[j];
      fwrite(&x, 4, 1, f);
    } else {
      float x = (float)vals[j];
      fwrite(&x, 4, 1, f);
    }
  }
  if (fclose(f) != 0)
    die_("cannot write %s", path);
}

static void run(const char *cmd) {
  int rc = system(cmd);
  if (rc != 0) {
    fprintf(stderr, "gradcheck: %s: failed (status %d): %s\n", name, rc, cmd);
    exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: gradcheck tests/grad/NAME.gsl\n");
    return 2;
  }
  const char *gslc = getenv("GSLC"), *mpiexec = getenv("MPIEXEC");
  if (!gslc || !mpiexec) {
    fprintf(stderr, "gradcheck: GSLC and MPIEXEC must be set\n");
    return 2;
  }
  name = argv[1];
  char tmpl[] = "/tmp/gradcheck.XXXXXX";
  if (!(work = mkdtemp(tmpl)))
    die_("mkdtemp: %s", strerror(errno));
  read_directives(argv[1]);
  if (!ngrads)
    die_("%s", "no GRAD directive");
  static char cmd[1 << 16], ios[1 << 14];

  /* 1. one step of sgd(lr = 1): w = -g */
  size_t k = 0;
  for (int i = 0; i < nins; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.npy", work, ins[i].name);
    write_npy(path, &ins[i], 0, ins[i].v);
    k += (size_t)snprintf(ios + k, sizeof ios - k, " --input %s=%s.npy", ins[i].name, ins[i].name);
  }
  for (int i = 0; i < ngrads; i++)
    k += (size_t)snprintf(ios + k, sizeof ios - k, " --output %s=grad_%s.npy", grad_w[i], grad_w[i]);
  snprintf(cmd, sizeof cmd, "'%s' '%s' -o '%s/prog' && cd '%s' && timeout 300 %s -n %d ./prog --quiet%s", gslc,
           argv[1], work, work, mpiexec, np, ios);
  run(cmd);

  /* 2. the losses around x, with LR = 0: batch s of every input in
   * b_NAME.npy, and with DRAWS also alone in bS_NAME.npy */
  long nb = 1;
  for (int i = 0; i < ngrads; i++)
    nb += 4 * find_input(grad_x[i])->n;
  k = 0;
  long at = 1; /* the batch of the first perturbation of the grad input being written */
  for (int i = 0; i < nins; i++) {
    In *in = &ins[i];
    double *b = malloc(sizeof *b * (size_t)(in->n * nb));
    for (long s = 0; s < nb; s++)
      memcpy(b + s * in->n, in->v, sizeof *b * (size_t)in->n);
    int g = -1;
    for (int j = 0; j < ngrads; j++)
      if (!strcmp(grad_x[j], in->name))
        g = j;
    if (g >= 0) {
      static const double step[4] = {2, 1, -1, -2};
      for (long j = 0; j < in->n; j++)
        for (int q = 0; q < 4; q++)
          b[(at + 4 * j + q) * in->n + j] += step[q] * h;
      at += 4 * in->n;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/b_%s.npy", work, in->name);
    write_npy(path, in, nb, b);
    for (long s = 0; draws && s < nb; s++) {
      snprintf(path, sizeof path, "%s/b%ld_%s.npy", work, s, in->name);
      write_npy(path, in, 0, b + s * in->n);
    }
    free(b);
  }
  snprintf(cmd, sizeof cmd, "'%s' -D LR=0 '%s' -o '%s/prog0'", gslc, argv[1], work);
  run(cmd);
  double *L = calloc((size_t)nb, sizeof *L);
  char path[512];
  static char line[4096];
  long got = 0;
  for (long r = 0; r < (draws ? nb : 1); r++) { /* one run of nb steps, or with DRAWS nb runs of one */
    k = 0;
    for (int i = 0; i < nins; i++)
      if (draws)
        k += (size_t)snprintf(ios + k, sizeof ios - k, " --input %s=b%ld_%s.npy", ins[i].name, r, ins[i].name);
      else
        k += (size_t)snprintf(ios + k, sizeof ios - k, " --input %s=b_%s.npy", ins[i].name, ins[i].name);
    snprintf(cmd, sizeof cmd, "cd '%s' && timeout 300 %s -n %d ./prog0 --quiet --steps %ld --log-every 1 --metrics m.jsonl%s",
             work, mpiexec, np, draws ? 1 : nb, ios);
    run(cmd);
    snprintf(path, sizeof path, "%s/m.jsonl", work);
    FILE *m = fopen(path, "r");
    if (!m)
      die_("no metrics file %s", path);
    while (fgets(line, sizeof line, m) && got < nb) {
      char *q = strstr(line, "\"loss\":");
      if (!q)
        die_("a metrics line without a loss: %s", line);
      L[got++] = strtod(q + 7, NULL);
    }
    fclose(m);
  }
  if (got != nb)
    die_("%s", "fewer metrics lines than steps");

  /* 3. compare */
  int bad = 0;
  at = 1;
  for (int i = 0; i < nins; i++) {
    int g = -1;
    for (int j = 0; j < ngrads; j++)
      if (!strcmp(grad_x[j], ins[i].name))
        g = j;
    if (g < 0)
      continue;
    const In *in = &ins[i];
    snprintf(path, sizeof path, "%s/grad_%s.npy", work, grad_w[g]);
    int rank;
    long dims[8];
    float *w = npy_load(path, &rank, dims);
    double *d = malloc(sizeof *d * (size_t)in->n), S = fmax(1, fabs(L[0]));
    for (long j = 0; j < in->n; j++) {
      const double *l = L + at + 4 * j; /* x+2h, x+h, x-h, x-2h */
      d[j] = (8 * (l[1] - l[2]) - (l[0] - l[3])) / (12 * h);
      S = fmax(S, fabs(d[j]));
    }
    for (long j = 0; j < in->n; j++) {
      double gj = -(double)w[j], tol = 2e-3 * fmax(fabs(gj), fabs(d[j])) + 2e-4 * S;
      int ok = fabs(gj - d[j]) <= tol;
      bad += !ok;
      if (!ok || getenv("GRADCHECK_VERBOSE"))
        printf("%s %s[%ld]: compiled %.7g, finite difference %.7g, |diff| %.2g, tolerance %.2g%s\n", name,
               grad_w[g], j, gj, d[j], fabs(gj - d[j]), tol, ok ? "" : "  <- differs");
    }
    printf("%s: d loss / d %s: %ld elements checked against finite differences (h %g, loss %.6g)\n", name,
           grad_w[g], in->n, h, L[0]);
    free(w);
    free(d);
    at += 4 * in->n;
  }
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
  if (!bad)
    run(cmd);
  else
    fprintf(stderr, "gradcheck: %s: %d elements differ (files kept in %s)\n", name, bad, work);
  free(L);
  return bad ? 1 : 0;
}
