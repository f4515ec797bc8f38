/* bf16_more_check.c — the C reference of bf16_more.gsl: every op computed in
 * double from the same bf16 inputs (x, w, read back widened; ix as the
 * test's INPUT line gives it) and rounded to bf16 once, against the
 * program's bf16 results (written as float32, widened).
 *
 * Tolerance: the program computes each op in f32 (its exp, and so tanh,
 * sigmoid and gelu, to about 2 f32 ulps; its sums in another order) and
 * rounds once, so its f32 value is within a few 2^-24 of the exact one
 * relative to the op's scale; rounding that to bf16 lands on the same bf16
 * as the exact value's rounding, or on its neighbour when the two straddle
 * a rounding boundary. So each result must be within one bf16 ulp (2^-7
 * relative to its leading bit) of the reference, plus an absolute floor of
 * 2^-7 * 2^-24 * scale for results near zero that come from cancellation
 * (softmax, layer_norm, the product); max, amax, gather and concat move
 * bits, so they must be equal. Rounding each f32 step to bf16 inside an op
 * (a sum in bf16, say) would be off by many ulps on the sums of 16. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "npy_load.h"

#define R 8  /* x's rows */
#define K 16 /* x's and w's columns */
#define W 12 /* w's rows */

static const int ix[6] = {0, 11, 3, 3, 5, 1};

/* to the nearest bf16, ties to even (finite inputs) */
static double bf16(double v) {
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&f, &u, 4);
  return f;
}

static double ulp(double v) { /* of a bf16 near v: 2^(e - 7) for |v| in [2^e, 2^(e+1)) */
  int e;
  frexp(fabs(v), &e);
  return ldexp(1.0, e - 8);
}

static int bad;

static void check(const char *name, const double *want, int n, double floor_abs, int exact) {
  char path[64];
  int rank;
  long dims[8];
  snprintf(path, sizeof path, "%s.npy", name);
  float *got = npy_load(path, &rank, dims);
  if (npy_count(rank, dims) != n) {
    fprintf(stderr, "check: %s has %ld elements, want %d\n", name, npy_count(rank, dims), n);
    bad = 1;
    return;
  }
  int shown = 0;
  for (int i = 0; i < n; i++) {
    double d = fabs(got[i] - want[i]);
    if (exact ? d != 0 : d > ulp(want[i]) + floor_abs) {
      if (shown++ < 5)
        fprintf(stderr, "check: %s[%d] = %.9g, want %.9g (bf16 ulp %.3g)\n", name, i, got[i], want[i],
                ulp(want[i]));
      bad = 1;
    }
    if (!exact && bf16(got[i]) != got[i]) {
      fprintf(stderr, "check: %s[%d] = %.9g is not a bf16\n", name, i, got[i]);
      bad = 1;
    }
  }
  free(got);
}

static double gelu(double v) { return 0.5 * v * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (v + 0.044715 * v * v * v))); }

int main(void) {
  int rank;
  long dims[8];
  float *xf = npy_load("x.npy", &rank, dims), *wf = npy_load("w.npy", &rank, dims);
  double x[R * K], w[W * K], out[3 * R * K + W * K]; /* room for sm, ln and cs side by side */
  for (int i = 0; i < R * K; i++)
    x[i] = xf[i];
  for (int i = 0; i < W * K; i++)
    w[i] = wf[i];
  const double tiny = ldexp(1.0, -31); /* 2^-7 * 2^-24: cancellation's floor at scale 1 */

#define EACH(name, expr)                  \
  for (int i = 0; i < R * K; i++) {       \
    double v = x[i];                      \
    out[i] = bf16(expr);                  \
  }                                       \
  check(name, out, R * K, tiny, 0)
  EACH("e", exp(v));
  EACH("t", tanh(v));
  EACH("s", 1 / (1 + exp(-v)));
  EACH("g", gelu(v));
  EACH("r", 1 / sqrt(bf16(fabs(v) + 1)));
  EACH("q", v / bf16(fabs(v) + 0.5));
#undef EACH
  for (int i = 0; i < R * K; i++)
    out[i] = x[i] > 0.25 ? x[i] : 0.25;
  check("mx", out, R * K, 0, 1);
  for (int i = 0; i < R; i++)
    for (int k = 0; k < W; k++) {
      double acc = 0;
      for (int j = 0; j < K; j++)
        acc += x[i * K + j] * w[k * K + j];
      out[i * W + k] = bf16(acc);
    }
  check("p", out, R * W, 16 * tiny * 4, 0);
  double am[R];
  for (int i = 0; i < R; i++) {
    double m = -INFINITY, sum = 0, mu = 0, var = 0, run = 0;
    for (int j = 0; j < K; j++)
      m = fmax(m, x[i * K + j]);
    am[i] = m;
    for (int j = 0; j < K; j++)
      sum += exp(x[i * K + j] - m);
    for (int j = 0; j < K; j++)
      out[i * K + j] = bf16(exp(x[i * K + j] - m) / sum);
    for (int j = 0; j < K; j++)
      mu += x[i * K + j] / K;
    for (int j = 0; j < K; j++)
      var += (x[i * K + j] - mu) * (x[i * K + j] - mu) / K;
    for (int j = 0; j < K; j++)
      out[R * K + i * K + j] = bf16((x[i * K + j] - mu) / sqrt(var + 1e-5));
    for (int j = 0; j < K; j++) {
      run += x[i * K + j];
      out[2 * R * K + i * K + j] = bf16(run);
    }
  }
  check("sm", out, R * K, tiny, 0);
  check("ln", out + R * K, R * K, 16 * tiny, 0);
  check("cs", out + 2 * R * K, R * K, 16 * tiny * 4, 0);
  check("am", am, R, 0, 1);
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < K; j++)
      out[i * K + j] = w[ix[i] * K + j];
  check("ga", out, 6 * K, 0, 1);
  memcpy(out, x, sizeof x);
  memcpy(out + R * K, w, sizeof w);
  check("cc", out, (R + W) * K, 0, 1);
  free(xf);
  free(wf);
  if (!bad)
    printf("bf16_more: every op within one bf16 ulp of the double reference (moves exact)\n");
  return bad;
}
