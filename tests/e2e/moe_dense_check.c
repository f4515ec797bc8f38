/* moe_dense_check.c — moe_dense.gsl's block output y against the dense
 * one-hot form yd, and aux against aux2, each to 1e-5 of the largest
 * magnitude (at least 1), and y not all but zero (max |y| > 0.01). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy_load.h"

/* the f32 values of a .npy file, their count in *n */
static float *load(const char *path, long *n) {
  int rank;
  long dims[8];
  float *v = npy_load(path, &rank, dims);
  *n = npy_count(rank, dims);
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
