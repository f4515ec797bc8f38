/* npytool.c — writes, prints and compares .npy files for the end-to-end
 * tests, through the runtime's own reader and writer (runtime/npy.c):
 *
 *   npytool write FILE f32|i32 D0,D1,... v0 v1 ...     (or '-': values from stdin)
 *   npytool print FILE                                  ("f32 [2, 3]", then %.9g per line)
 *   npytool compare FILE f32|i32 D0,D1,... [--rtol R] [--atol A] v0 v1 ... (or '-')
 *
 * A scalar's shape is written "" (an empty argument). compare exits 0 when
 * dtype and shape match and every |a - b| <= atol + rtol * |b| (defaults
 * rtol 1e-5, atol 1e-6), else prints the first mismatches and exits 1.
 * Usage errors exit 2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gslrt.h"

#define MAX_SHOWN 10 /* mismatches printed by compare */
#define GSLRT_ERRLEN 512 /* room for one error message */

static void die(const char *msg, const char *what) {
  fprintf(stderr, "npytool: %s%s%s\n", msg, what ? ": " : "", what ? what : "");
  exit(2);
}

static int32_t parse_dtype(const char *s) {
  if (!strcmp(s, "f32"))
    return GSLRT_F32;
  if (!strcmp(s, "i32"))
    return GSLRT_I32;
  die("dtype must be f32 or i32, not", s);
  return -1;
}

static int32_t parse_shape(const char *s, int64_t *shape) {
  int32_t rank = 0;
  while (*s) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || v < 0 || rank >= GSLRT_MAX_RANK + 1 || (*end && *end != ','))
      die("bad shape", s);
    shape[rank++] = v;
    s = *end ? end + 1 : end;
  }
  return rank;
}

/* Reads n values of dtype from args (or stdin when args is "-") into buf. */
static void read_values(int nargs, char **args, int32_t dtype, int64_t n, void *buf) {
  int from_stdin = nargs == 1 && !strcmp(args[0], "-");
  if (!from_stdin && nargs != n) {
    fprintf(stderr, "npytool: the shape has %lld elements but %d values were given\n", (long long)n,
            nargs);
    exit(2);
  }
  for (int64_t i = 0; i < n; i++) {
    char word[64], *end;
    const char *s = word;
    if (from_stdin) {
      if (scanf("%63s", word) != 1)
        die("too few values on stdin", NULL);
    } else {
      s = args[i];
    }
    if (dtype == GSLRT_I32) {
      long v = strtol(s, &end, 10);
      ((int32_t *)buf)[i] = (int32_t)v;
    } else {
      ((float *)buf)[i] = strtof(s, &end);
    }
    if (end == s || *end)
      die("bad value", s);
  }
}

static int64_t count_of(int32_t rank, const int64_t *shape) {
  int64_t n = 1;
  for (int32_t i = 0; i < rank; i++)
    n *= shape[i];
  return n;
}

/* Loads a whole file; exits 1 with the reader's message on failure. */
static void *load(const char *path, gslrt_npy *h) {
  char err[GSLRT_ERRLEN];
  int64_t off[GSLRT_MAX_RANK + 1] = {0};
  if (gslrt_npy_read_header(path, h, err, sizeof err) != 0) {
    fprintf(stderr, "npytool: %s\n", err);
    exit(1);
  }
  int64_t n = count_of(h->rank, h->shape);
  void *buf = malloc((size_t)n * 4 + 4);
  if (!buf || gslrt_npy_read_tile(path, h, off, h->shape, buf, err, sizeof err) != 0) {
    fprintf(stderr, "npytool: %s\n", buf ? err : "out of memory");
    exit(1);
  }
  return buf;
}

static double value(const void *buf, int32_t dtype, int64_t i) {
  return dtype == GSLRT_I32 ? (double)((const int32_t *)buf)[i] : (double)((const float *)buf)[i];
}

static void print_shape(FILE *f, int32_t rank, const int64_t *shape) {
  fputc('[', f);
  for (int32_t i = 0; i < rank; i++)
    fprintf(f, "%s%lld", i ? ", " : "", (long long)shape[i]);
  fputc(']', f);
}

int main(int argc, char **argv) {
  char err[GSLRT_ERRLEN];
  int64_t shape[GSLRT_MAX_RANK + 1];
  gslrt_npy h;
  if (argc >= 3 && !strcmp(argv[1], "print")) {
    void *buf = load(argv[2], &h);
    printf("%s ", h.dtype == GSLRT_I32 ? "i32" : "f32");
    print_shape(stdout, h.rank, h.shape);
    putchar('\n');
    for (int64_t i = 0; i < count_of(h.rank, h.shape); i++)
      printf("%.9g\n", value(buf, h.dtype, i));
    free(buf);
    return 0;
  }
  if (argc < 5 || (strcmp(argv[1], "write") && strcmp(argv[1], "compare")))
    die("usage: npytool write|compare FILE f32|i32 D0,D1,... [--rtol R] [--atol A] VALUES... "
        "| npytool print FILE", NULL);
  int32_t dtype = parse_dtype(argv[3]);
  int32_t rank = parse_shape(argv[4], shape);
  int64_t n = count_of(rank, shape);
  double rtol = 1e-5, atol = 1e-6;
  int first = 5;
  while (first + 1 < argc && (!strcmp(argv[first], "--rtol") || !strcmp(argv[first], "--atol"))) {
    char *end;
    double v = strtod(argv[first + 1], &end);
    if (end == argv[first + 1] || *end || v < 0)
      die("bad tolerance", argv[first + 1]);
    *(argv[first][2] == 'r' ? &rtol : &atol) = v;
    first += 2;
  }
  void *want = malloc((size_t)n * 4 + 4);
  if (!want)
    die("out of memory", NULL);
  read_values(argc - first, argv + first, dtype, n, want);
  if (!strcmp(argv[1], "write")) {
    if (gslrt_npy_write(argv[2], dtype, rank, shape, want, err, sizeof err) != 0) {
      fprintf(stderr, "npytool: %s\n", err);
      return 1;
    }
    free(want);
    return 0;
  }
  void *got = load(argv[2], &h);
  int same = h.dtype == dtype && h.rank == rank;
  for (int32_t i = 0; same && i < rank; i++)
    same = h.shape[i] == shape[i];
  if (!same) {
    fprintf(stderr, "npytool: %s is %s ", argv[2], h.dtype == GSLRT_I32 ? "i32" : "f32");
    print_shape(stderr, h.rank, h.shape);
    fprintf(stderr, ", expected %s ", argv[3]);
    print_shape(stderr, rank, shape);
    fputc('\n', stderr);
    return 1;
  }
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double a = value(got, dtype, i), b = value(want, dtype, i);
    if (!(fabs(a - b) <= atol + rtol * fabs(b))) {
      if (bad < MAX_SHOWN)
        fprintf(stderr, "npytool: %s[%lld] = %.9g, expected %.9g\n", argv[2], (long long)i, a, b);
      bad++;
    }
  }
  if (bad)
    fprintf(stderr, "npytool: %lld of %lld elements differ (rtol %g, atol %g)\n", (long long)bad,
            (long long)n, rtol, atol);
  free(got);
  free(want);
  return bad ? 1 : 0;
}
