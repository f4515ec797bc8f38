/* npy_load.h — the .npy reader of the C references in tests/e2e (each
 * CHECK program includes it): its own, sharing no code with the runtime,
 * so that a runtime bug in reading or writing .npy cannot hide itself. */
#ifndef NPY_LOAD_H
#define NPY_LOAD_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void npy_fail(const char *what, const char *path) {
  fprintf(stderr, "check: %s: %s\n", path, what);
  exit(1);
}

/* Reads a little-endian f32 .npy file (version 1, C order, at most 8
 * dimensions); fills rank and dims (a scalar has rank 0); returns the data. */
static inline float *npy_load(const char *path, int *rank, long *dims) {
  FILE *f = fopen(path, "rb");
  if (!f)
    npy_fail("cannot open", path);
  unsigned char pre[10];
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] != 1)
    npy_fail("not a version 1 .npy file", path);
  int hlen = pre[8] | pre[9] << 8;
  char *h = calloc(1, (size_t)hlen + 1);
  if (!h || fread(h, 1, (size_t)hlen, f) != (size_t)hlen || !strstr(h, "'<f4'") ||
      !strstr(h, "'fortran_order': False") || !strstr(h, "'shape'"))
    npy_fail("bad header (want '<f4', C order)", path);
  char *s = strchr(strstr(h, "'shape'"), '(');
  if (!s)
    npy_fail("bad shape", path);
  s++;
  long n = 1;
  *rank = 0;
  while (*s != ')') {
    char *end;
    long d = strtol(s, &end, 10);
    if (end == s || *rank == 8)
      npy_fail("bad shape", path);
    dims[(*rank)++] = d;
    n *= d;
    s = end;
    while (*s == ',' || *s == ' ')
      s++;
  }
  float *data = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  if (!data || fread(data, sizeof(float), (size_t)n, f) != (size_t)n)
    npy_fail("short data", path);
  free(h);
  fclose(f);
  return data;
}

/* the element count of a shape */
static inline long npy_count(int rank, const long *dims) {
  long n = 1;
  for (int i = 0; i < rank; i++)
    n *= dims[i];
  return n;
}

#endif
