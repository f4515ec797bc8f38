/* moe_dense_check.c — moe_dense.gsl's block output y against the dense
 * one-hot form yd, and aux against aux2, each to 1e-5 of the largest
 * magnitude (at least 1), and y not all but zero (max |y| > 0.01). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the float32 payload of a little-endian .npy file, its count in *n */
static float *load(const char *path, long *n) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(1);
  }
  unsigned char pre[10];
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
    fprintf(stderr, "%s: not a .npy file\n", path);
    exit(1);
  }
  long hlen = pre[8] | (pre[9] << 8);
  char *h = calloc(1, (size_t)hlen + 1);
  if (fread(h, 1, (size_t)hlen, f) != (size_t)hlen || !strstr(h, "'<f4'")) {
    fprintf(stderr, "%s: not a float32 .npy file\n", path);
    exit(1);
  }
  free(h);
  long cap = 1024, k = 0;
  float *v = malloc(sizeof *v * (size_t)cap);
  float x;
  while (fread(&x, sizeof x, 1, f) == 1) {
    if (k == cap)
      v = realloc(v, sizeof *v * (size_t)(cap *= 2));
    v[k++] = x;
  }
  fclose(f);
  *n = k;
  return v;
}

static int same(const char *a, const char *b) {
  long na, nb;
  float *x = load(a, &na), *y = load(b, &nb);
  if (na != nb || na == 0) {
    fprintf(stderr, "%s has %ld values, %s %ld\n", a, na, b, nb);
    return 0;
  }
  double big = 1, worst = 0, mag = 0;
  long at = 0;
  for (long i = 0; i < na; i++) {
    big = fmax(big, fabs(y[i]));
    mag = fmax(mag, fabs(x[i]));
  }
  for (long i = 0; i < na; i++)
    if (fabs(x[i] - y[i]) > worst) {
      worst = fabs(x[i] - y[i]);
      at = i;
    }
  printf("%s vs %s: %ld values, max |difference| %.3g at %ld (bound %.3g)\n", a, b, na, worst, at, 1e-5 * big);
  if (worst > 1e-5 * big)
    return 0;
  if (mag < 0.01) {
    fprintf(stderr, "%s is all but zero: the test checks nothing\n", a);
    return 0;
  }
  return 1;
}

int main(void) {
  int ok = same("y.npy", "yd.npy") & same("aux.npy", "aux2.npy");
  return ok ? 0 : 1;
}
