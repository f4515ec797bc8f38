/* optim_check.c — optim.gsl's second Adam step against PyTorch's
 * formulas (torch.optim.Adam, and AdamW for the decoupled weight decay)
 * in double: from p, g and g2 (the test's inputs), two steps each with
 * lr 0.1, betas 0.9 and 0.999, eps 1e-8, and weight decay 0 or 0.01;
 * p_adam2, m2, v2 and p_adamw2 must agree to 1e-5 of their magnitude
 * (at least 1e-6). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy_load.h"

#define N 4

/* the N values of a .npy file of shape [N] */
static void load(const char *path, double *out) {
  int rank;
  long dims[8];
  float *x = npy_load(path, &rank, dims);
  if (rank != 1 || dims[0] != N) {
    fprintf(stderr, "%s: not of shape [%d]\n", path, N);
    exit(1);
  }
  for (int i = 0; i < N; i++)
    out[i] = x[i];
  free(x);
}

/* one Adam(W) step at step t */
static void adam(double *p, const double *g, double *m, double *v, int t, double wd) {
  const double lr = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  for (int i = 0; i < N; i++) {
    p[i] -= lr * wd * p[i];
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    double mhat = m[i] / (1 - pow(b1, t)), vhat = v[i] / (1 - pow(b2, t));
    p[i] -= lr * mhat / (sqrt(vhat) + eps);
  }
}

static int check(const char *path, const double *want) {
  double got[N];
  load(path, got);
  int ok = 1;
  for (int i = 0; i < N; i++) {
    double tol = fmax(1e-5 * fabs(want[i]), 1e-6);
    if (fabs(got[i] - want[i]) > tol) {
      fprintf(stderr, "%s[%d] = %.9g, expected %.9g\n", path, i, got[i], want[i]);
      ok = 0;
    }
  }
  printf("%s: %s\n", path, ok ? "agrees" : "DIFFERS");
  return ok;
}

int main(void) {
  double p0[N], g[N], g2[N];
  load("p.npy", p0);
  load("g.npy", g);
  load("g2.npy", g2);
  int ok = 1;
  for (int w = 0; w < 2; w++) {
    double p[N], m[N] = {0}, v[N] = {0};
    memcpy(p, p0, sizeof p);
    adam(p, g, m, v, 1, w ? 0.01 : 0);
    adam(p, g2, m, v, 2, w ? 0.01 : 0);
    if (w) {
      ok &= check("p_adamw2.npy", p);
    } else {
      ok &= check("p_adam2.npy", p);
      ok &= check("m2.npy", m);
      ok &= check("v2.npy", v);
    }
  }
  return ok ? 0 : 1;
}
