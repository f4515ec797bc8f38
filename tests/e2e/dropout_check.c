/* dropout_check.c — the C reference of dropout.gsl: its outputs y, z, yb
 * and h from x, with the runtime's draw (runtime/rng.c) recomputed here.
 *
 * The draw of global element i at step s of stream t with seed S is
 * Philox-4x32-10 (COPIED below from runtime/rng.c: the CHECK step builds
 * this file alone, without libgslrt; the unit tests check the runtime's
 * copy against Random123's known answers) of counter {lo32(i), hi32(i),
 * lo32(s), t} (s < 2^32) and key {lo32(S), hi32(S)}; u = (out[0] >> 8) *
 * 2^-24. A dropout keeps element i where u >= p, as x_i * f32(1 / (1 -
 * p)) (an f32 product; for bf16, of the bf16 x, rounded to bf16 to nearest
 * even), and is 0 elsewhere. The streams are the compiler's choice: read,
 * in program order, from `$GSLC --emit-ir dropout.gsl`, which must show
 * five dropouts (y, z, yb, and the loop's two), all different. Checked:
 *   - every element of y, z, yb and h exactly (h: kept by both of its
 *     iterations' draws, x * 2 * 2, else 0);
 *   - the fraction of y's elements zeroed within 4 binomial standard
 *     deviations of p, and h's of 1 - 0.5^2;
 *   - the masks of y and z (the same x, the same p) differ. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy_load.h"
#include "philox_ref.h"

#define SEED 7
#define STEP 1
#define P 0.3
#define NSITES 5

static void die(const char *msg, const char *what) {
  fprintf(stderr, "dropout.gsl check: %s%s\n", msg, what);
  exit(1);
}


static int kept(uint32_t stream, uint64_t i, double p) { return uniform01(SEED, stream, STEP, i) >= p; }

/* f32 to bf16, to nearest even (the values here are finite) */
static float bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

/* the streams of the program's dropouts, in program order, from --emit-ir */
static void streams(uint32_t *s) {
  const char *gslc = getenv("GSLC");
  if (!gslc || !*gslc)
    die("GSLC is not set: cannot ask the compiler for the dropouts' streams", "");
  char src[4096], cmd[8192], line[4096];
  snprintf(src, sizeof src, "%s", __FILE__);
  char *slash = strrchr(src, '/');
  if (!slash)
    die("built from a relative path, cannot find the test program beside ", __FILE__);
  snprintf(slash + 1, sizeof src - (size_t)(slash + 1 - src), "dropout.gsl");
  snprintf(cmd, sizeof cmd, "'%s' --emit-ir '%s' 2>&1", gslc, src);
  FILE *f = popen(cmd, "r");
  if (!f)
    die("cannot run ", cmd);
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    char *d = strstr(line, "= dropout p ");
    if (!d)
      continue;
    char *t = strstr(d, " stream ");
    if (!t || n == NSITES)
      die("an unexpected dropout line: ", line);
    s[n++] = (uint32_t)strtoul(t + strlen(" stream "), NULL, 10);
  }
  if (pclose(f) != 0 || n != NSITES)
    die("--emit-ir does not show the program's five dropouts: ", cmd);
  for (int j = 0; j < n; j++)
    for (int k = 0; k < j; k++)
      if (s[j] == s[k])
        die("two dropouts share a stream", "");
  printf("dropout.gsl check: seed %d, step %d, streams y %u, z %u, yb %u, h %u and %u (from --emit-ir)\n", SEED, STEP,
         s[0], s[1], s[2], s[3], s[4]);
}

static float *load(const char *name, long n) {
  int rank;
  long dims[8];
  float *v = npy_load(name, &rank, dims);
  if (rank != 2 || dims[0] != 16 || dims[1] != 256 || npy_count(rank, dims) != n)
    die("not of shape (16, 256): ", name);
  return v;
}

int main(void) {
  const long n = 16 * 256;
  uint32_t s[NSITES];
  streams(s);
  float *x = load("x.npy", n), *y = load("y.npy", n), *z = load("z.npy", n), *yb = load("yb.npy", n),
        *h = load("h.npy", n);
  const float scale = (float)(1.0 / (1.0 - P));
  long bad = 0, zy = 0, zh = 0, differ = 0;
  for (long i = 0; i < n; i++) {
    float wy = kept(s[0], (uint64_t)i, P) ? x[i] * scale : 0.0f;
    float wz = kept(s[1], (uint64_t)i, P) ? x[i] * scale : 0.0f;
    float wb = kept(s[2], (uint64_t)i, P) ? bf16(bf16(x[i]) * scale) : 0.0f;
    float wh = kept(s[3], (uint64_t)i, 0.5) && kept(s[4], (uint64_t)i, 0.5) ? x[i] * 2.0f * 2.0f : 0.0f;
    const float got[4] = {y[i], z[i], yb[i], h[i]}, want[4] = {wy, wz, wb, wh};
    for (int k = 0; k < 4; k++)
      if (memcmp(&got[k], &want[k], 4) && bad++ < 10)
        fprintf(stderr, "dropout.gsl check: %s[%ld, %ld] = %.9g, the reference %.9g (x %.9g)\n",
                (const char *[]){"y", "z", "yb", "h"}[k], i / 256, i % 256, got[k], want[k], x[i]);
    zy += wy == 0.0f;
    zh += wh == 0.0f;
    differ += (wy == 0.0f) != (wz == 0.0f);
  }
  double fy = (double)zy / n, fh = (double)zh / n, sy = sqrt(P * (1 - P) / n), sh = sqrt(0.75 * 0.25 / n);
  printf("dropout.gsl check: zeroed %.4f of y (p %.2f, sd %.4f), %.4f of h (0.75, sd %.4f); y and z differ at %ld\n", fy,
         P, sy, fh, sh, differ);
  if (bad)
    die("elements differ from the reference", "");
  if (fabs(fy - P) > 4 * sy || fabs(fh - 0.75) > 4 * sh)
    die("the fraction zeroed is not near p", "");
  if (differ < n / 4)
    die("the masks of y and z (two calls) are nearly the same", "");
  return 0;
}
