/* mlp_check.c — the plain C reference for mlp_example.gsl: reads x, w1, b1,
 * w2, b2 and y (.npy, f32, C order) from the run directory, recomputes
 * y = gelu(x @ w1 + b1) @ w2 + b2 in double precision with the tanh form of
 * gelu, and compares: |got - want| <= 1e-5 |want| + 1e-6. It shares no code
 * with the runtime: its .npy reader is npy_load.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy_load.h"

static double gelu(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x))); }

int main(void) {
  int r;
  long dx[8], dw1[8], db1[8], dw2[8], db2[8], dy[8];
  float *x = npy_load("x.npy", &r, dx), *w1 = npy_load("w1.npy", &r, dw1), *b1 = npy_load("b1.npy", &r, db1);
  float *w2 = npy_load("w2.npy", &r, dw2), *b2 = npy_load("b2.npy", &r, db2), *y = npy_load("y.npy", &r, dy);
  long B = dx[0], D = dx[1], H = dw1[1], O = dw2[1];
  if (dw1[0] != D || db1[0] != H || dw2[0] != H || db2[0] != O || dy[0] != B || dy[1] != O) {
    fprintf(stderr, "mlp_check: shapes do not fit together\n");
    return 1;
  }
  /* the weights must be drawn, not left zero: normal(0.0625) has std 1/16 */
  double ss = 0;
  for (long i = 0; i < D * H; i++)
    ss += (double)w1[i] * w1[i];
  double std = sqrt(ss / (double)(D * H));
  if (std < 0.04 || std > 0.09) {
    fprintf(stderr, "mlp_check: w1's std is %g, expected about 0.0625\n", std);
    return 1;
  }
  int bad = 0;
  double *h = malloc(sizeof(double) * (size_t)H);
  for (long b = 0; b < B; b++) {
    for (long j = 0; j < H; j++) {
      double acc = b1[j];
      for (long k = 0; k < D; k++)
        acc += (double)x[b * D + k] * w1[k * H + j];
      h[j] = gelu(acc);
    }
    for (long o = 0; o < O; o++) {
      double want = b2[o];
      for (long j = 0; j < H; j++)
        want += h[j] * w2[j * O + o];
      double got = y[b * O + o];
      if (fabs(got - want) > 1e-5 * fabs(want) + 1e-6) {
        if (bad++ < 5)
          fprintf(stderr, "mlp_check: y[%ld, %ld] = %.9g, expected %.9g\n", b, o, got, want);
      }
    }
  }
  free(h);
  printf("mlp_check: %ld x %ld outputs checked, %d differ\n", B, O, bad);
  return bad != 0;
}
