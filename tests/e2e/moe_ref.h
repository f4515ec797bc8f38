/* moe_ref.h — the plain C reference of the moe block (SPEC section 6), shared
 * by the tests/e2e/moe_*_check.c programs. Each of them defines the block's
 * settings and then includes this file, which is its main():
 *
 *   MOE_GSL        the test program's file name, beside the check's source
 *   MOE_TOP        1 or 2
 *   MOE_CAPACITY   the capacity factor F; C = ceil(F * K * S / E) in double
 *   MOE_RANDOM     1: random routing of second choices (top 2 only)
 *   MOE_SEED       --seed of the run, MOE_STEP its last step (steps count
 *                  from 0), both only used with MOE_RANDOM
 *   MOE_BIAS       the body is relu(t @ wi[e] + MOE_BIAS) @ wo[e]
 *   MOE_WANT_*     what the test's data must exercise (below): the check
 *                  fails if they do not, so a test cannot silently stop
 *                  testing what its name says
 *
 * It reads x f32[G, S, M], wg f32[M, E], wi f32[E, M, H], wo f32[E, H, M]
 * (as the run wrote them with --output, or the inputs the harness bound),
 * and y f32[G, S, M] and aux f32[] from the run directory, recomputes y and
 * aux in double precision, and compares: every element must satisfy
 *   |got - want| <= 1e-5 * max(1, max |want| over that tensor),
 * a bound relative to the tensor's scale (the test weights make |y| about 1).
 * It fails naming the first differing elements.
 *
 * Semantics, per group g independently:
 *   gates[s, e] = softmax_e(sum_m x[g, s, m] wg[m, e]);
 *   e1 = argmax_e gates (ties: lowest index), g1 its gate; for top 2,
 *   e2 = argmax over e != e1, g2, then w1 = g1 / (g1 + g2), w2 = g2 / (g1 + g2);
 *   for top 1, w1 = g1 (not renormalized);
 *   random routing: a second choice is routed only where 2 w2 > u[g, s];
 *   slots: first choices in token order take slot pos1 = the number of earlier
 *   first choices of the same expert, kept iff pos1 < C; then second choices
 *   in token order take count1[e] + the number of earlier ROUTED second
 *   choices of the same expert, with count1[e] = min(#first choices of e, C),
 *   kept iff < C; an unrouted choice takes no slot; a dropped or unrouted
 *   choice has weight 0;
 *   t[e, g, c, :] = x[g, s, :] for each kept choice, zero rows elsewhere;
 *   out[e, g, c, :] = relu(t[e, g, c, :] @ wi[e] + MOE_BIAS) @ wo[e] for EVERY
 *   slot (so with a bias, empty slots give non-zero rows the combine must
 *   ignore);
 *   y[g, s, :] = sum over kept choices k of w_k out[e_k, g, c_k, :];
 *   aux = mean_g E sum_e f[g, e] m[g, e], f[g, e] = #{s : e1[s] = e} / S (before
 *   dropping), m[g, e] = mean_s gates[s, e].
 *
 * Random routing: u[g, s] is the runtime's counter-based draw (runtime/rng.c)
 * of element g * S + s of an f32[G, S] uniform(0, 1) value. Philox-4x32-10 is
 * COPIED below from runtime/rng.c (the CHECK step builds this file alone,
 * without libgslrt); the unit tests check the runtime's copy against
 * Random123's known answers. The draw's stream number is the compiler's
 * choice (params and inputs with random initializers take 0, 1, ... in
 * declaration order, then rng ops in program order): the check reads it,
 * and the draw's shape, from `$GSLC --emit-ir MOE_GSL` (GSLC is exported to
 * the tests by AM_TESTS_ENVIRONMENT), which must show exactly one rng op.
 *
 * Decisions the program makes in f32 (an argmax between two gates, 2 w2
 * against u) are recomputed here in double; where the two sides are closer
 * than 1e-5 the f32 program could honestly decide either way, so the check
 * fails saying the test's data are ambiguous (a test's data are fixed: the
 * fix is other data, not a looser check). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy_load.h"

#ifndef MOE_RANDOM
#define MOE_RANDOM 0
#endif
#ifndef MOE_SEED
#define MOE_SEED 0
#endif
#ifndef MOE_STEP
#define MOE_STEP 0
#endif
#ifndef MOE_BIAS
#define MOE_BIAS 0.0
#endif
#ifndef MOE_WANT_DROPS /* some routed choice dropped for capacity */
#define MOE_WANT_DROPS 0
#endif
#ifndef MOE_WANT_DROPPED_TOKEN /* some token dropped by all its choices (y = 0) */
#define MOE_WANT_DROPPED_TOKEN 0
#endif
#ifndef MOE_WANT_EMPTY_SLOTS /* some slot holds no token */
#define MOE_WANT_EMPTY_SLOTS 0
#endif
#ifndef MOE_WANT_IDLE_EXPERT /* some expert gets no token of any group */
#define MOE_WANT_IDLE_EXPERT 0
#endif
#ifndef MOE_WANT_UNROUTED /* some second choice not routed (random routing) */
#define MOE_WANT_UNROUTED 0
#endif
#ifndef MOE_WANT_SLOT_AFTER_UNROUTED /* a routed second choice kept only because an */
#define MOE_WANT_SLOT_AFTER_UNROUTED 0 /* earlier unrouted one took no slot */
#endif

#define AMBIGUOUS 1e-5

static const char *me = MOE_GSL;

static void die(const char *msg, const char *what) {
  fprintf(stderr, "%s check: %s%s\n", me, msg, what);
  exit(1);
}

static void want_shape(const char *name, int rank, const long *dims, int wrank, long d0, long d1, long d2) {
  long w[3] = {d0, d1, d2};
  int ok = rank == wrank;
  for (int i = 0; ok && i < wrank; i++)
    ok = dims[i] == w[i];
  if (!ok) {
    fprintf(stderr, "%s check: %s has shape (", me, name);
    for (int i = 0; i < rank; i++)
      fprintf(stderr, "%s%ld", i ? ", " : "", dims[i]);
    fprintf(stderr, "), expected (");
    for (int i = 0; i < wrank; i++)
      fprintf(stderr, "%s%ld", i ? ", " : "", w[i]);
    fprintf(stderr, ")\n");
    exit(1);
  }
}

#if MOE_RANDOM
#include "philox_ref.h"

/* The stream of the program's one rng op, from `$GSLC --emit-ir`, whose
 * lines read `%21 u: f32[4, 8] {[_, _]} = rng uniform(0, 1) stream 4   ; ...`;
 * its shape must be [G, S] (or [G, S, 1]: the same global indices). */
static uint32_t rng_stream(long G, long S) {
  const char *gslc = getenv("GSLC");
  if (!gslc || !*gslc)
    die("GSLC is not set: cannot ask the compiler for the stream of the routing draw", "");
  char src[4096], cmd[8192], line[4096];
  snprintf(src, sizeof src, "%s", __FILE__);
  char *slash = strrchr(src, '/');
  if (!slash)
    die("built from a relative path, cannot find the test program beside ", __FILE__);
  snprintf(slash + 1, sizeof src - (size_t)(slash + 1 - src), "%s", MOE_GSL);
  snprintf(cmd, sizeof cmd, "'%s' --emit-ir '%s' 2>&1", gslc, src);
  FILE *p = popen(cmd, "r");
  if (!p)
    die("cannot run ", cmd);
  int n = 0;
  uint32_t stream = 0;
  char found[4096] = "";
  while (fgets(line, sizeof line, p)) {
    if (!strstr(line, "= rng "))
      continue;
    n++;
    snprintf(found, sizeof found, "%s", line);
  }
  if (pclose(p) != 0)
    die("failed: ", cmd);
  if (n != 1) {
    fprintf(stderr, "%s check: --emit-ir shows %d rng ops, expected exactly one (the routing draw)\n", me, n);
    exit(1);
  }
  char *u = strstr(found, "rng uniform(0, 1) stream ");
  char *sh = strstr(found, ": f32[");
  if (!u || !sh)
    die("cannot read the rng op (want a uniform(0, 1) f32 draw): ", found);
  stream = (uint32_t)strtoul(u + strlen("rng uniform(0, 1) stream "), NULL, 10);
  long d[8];
  int r = 0;
  char *s = sh + strlen(": f32[");
  while (*s != ']' && r < 8) {
    char *end;
    d[r++] = strtol(s, &end, 10);
    if (end == s)
      die("cannot read the rng op's shape: ", found);
    s = end;
    while (*s == ',' || *s == ' ')
      s++;
  }
  if (!((r == 2 || (r == 3 && d[2] == 1)) && d[0] == G && d[1] == S))
    die("the routing draw is not f32[G, S]; this reference draws u[g, s] at global index g * S + s: ", found);
  printf("%s check: routing draw: seed %d, step %d, stream %u (from --emit-ir)\n", me, (int)MOE_SEED,
         (int)MOE_STEP, (unsigned)stream);
  return stream;
}
#endif

/* compares got to want over n elements of a tensor of the given shape */
static int compare(const char *name, const float *got, const double *want, long n, int rank, const long *dims) {
  double scale = 1;
  for (long i = 0; i < n; i++)
    if (fabs(want[i]) > scale)
      scale = fabs(want[i]);
  double tol = 1e-5 * scale, worst = 0;
  int bad = 0;
  for (long i = 0; i < n; i++) {
    double err = fabs((double)got[i] - want[i]);
    if (err > worst)
      worst = err;
    if (!(err <= tol)) { /* NaN fails too */
      if (bad++ < 8) {
        long idx[8], r = i;
        for (int d = rank - 1; d >= 0; d--) {
          idx[d] = r % dims[d];
          r /= dims[d];
        }
        fprintf(stderr, "%s check: %s[", me, name);
        for (int d = 0; d < rank; d++)
          fprintf(stderr, "%s%ld", d ? ", " : "", idx[d]);
        fprintf(stderr, "] = %.9g, expected %.9g (difference %.3g > %.3g)\n", got[i], want[i], err, tol);
      }
    }
  }
  printf("%s check: %s: %ld values, max |difference| %.3g (bound %.3g), %d differ\n", me, name, n, worst, tol, bad);
  return bad;
}

static void ambiguous(const char *what, long g, long s, double a, double b) {
  fprintf(stderr,
          "%s check: the test's data are ambiguous: %s at group %ld token %ld: %.9g vs %.9g differ by less than %g, "
          "so an f32 program may decide either way; choose other data\n",
          me, what, g, s, a, b, AMBIGUOUS);
  exit(1);
}

int main(void) {
  int rx, rg, ri, ro, ry, ra;
  long dx[8], dg[8], di[8], dw[8], dy[8], da[8];
  float *x = npy_load("x.npy", &rx, dx), *wg = npy_load("wg.npy", &rg, dg), *wi = npy_load("wi.npy", &ri, di);
  float *wo = npy_load("wo.npy", &ro, dw), *yg = npy_load("y.npy", &ry, dy), *auxg = npy_load("aux.npy", &ra, da);
  if (rx != 3)
    die("x is not f32[G, S, M]", "");
  const long G = dx[0], S = dx[1], M = dx[2];
  if (rg != 2)
    die("wg is not f32[M, E]", "");
  const long E = dg[1];
  if (ri != 3)
    die("wi is not f32[E, M, H]", "");
  const long H = di[2];
  const int K = MOE_TOP;
  want_shape("wg", rg, dg, 2, M, E, 0);
  want_shape("wi", ri, di, 3, E, M, H);
  want_shape("wo", ro, dw, 3, E, H, M);
  want_shape("y", ry, dy, 3, G, S, M);
  want_shape("aux", ra, da, 0, 0, 0, 0);
  if (K != 1 && K != 2)
    die("MOE_TOP must be 1 or 2", "");
  if (MOE_RANDOM && K != 2)
    die("random routing needs top 2", "");
  if (E < K + 1)
    die("too few experts for these tests", "");
  const long C = (long)ceil((double)MOE_CAPACITY * K * S / (double)E);

  /* The weights must be drawn, not left zero or constant. */
  double ss = 0;
  for (long i = 0; i < E * M * H; i++)
    ss += (double)wi[i] * wi[i] + (double)wo[i] * wo[i];
  if (!(ss > 0))
    die("wi and wo are all zero", "");

#if MOE_RANDOM
  const uint32_t stream = rng_stream(G, S);
#endif
  double *gates = malloc(sizeof(double) * (size_t)(S * E));
  long *e1 = malloc(sizeof(long) * (size_t)S), *e2 = malloc(sizeof(long) * (size_t)S);
  double *w1 = malloc(sizeof(double) * (size_t)S), *w2 = malloc(sizeof(double) * (size_t)S);
  long *c1 = malloc(sizeof(long) * (size_t)S), *c2 = malloc(sizeof(long) * (size_t)S); /* slot or -1 */
  long *routed = malloc(sizeof(long) * (size_t)S);
  long *count = malloc(sizeof(long) * (size_t)E), *nfirst = malloc(sizeof(long) * (size_t)E);
  long *unrouted_earlier = malloc(sizeof(long) * (size_t)E);
  long *slot_tok = malloc(sizeof(long) * (size_t)(E * G * C)); /* token of slot (e, g, c), -1 if empty */
  double *out = malloc(sizeof(double) * (size_t)(E * G * C * M));
  double *y = calloc((size_t)(G * S * M), sizeof(double));
  double *hbuf = malloc(sizeof(double) * (size_t)H);
  long *tokens_of = calloc((size_t)E, sizeof(long));
  double aux = 0;
  long ndropped = 0, ndropped_tokens = 0, nempty = 0, nunrouted = 0, nrouted = 0, nafter_unrouted = 0;
  long nempty_nonzero = 0;

  for (long i = 0; i < E * G * C; i++)
    slot_tok[i] = -1;
  /* kept choices, to combine after the body: (e, c, weight) per token and choice */
  long *ke = malloc(sizeof(long) * (size_t)(G * S * 2)), *kc = malloc(sizeof(long) * (size_t)(G * S * 2));
  double *kw = malloc(sizeof(double) * (size_t)(G * S * 2));

  for (long g = 0; g < G; g++) {
    /* gates */
    for (long s = 0; s < S; s++) {
      double *row = gates + s * E, mx = -INFINITY, sum = 0;
      for (long e = 0; e < E; e++) {
        double acc = 0;
        for (long m = 0; m < M; m++)
          acc += (double)x[(g * S + s) * M + m] * wg[m * E + e];
        row[e] = acc;
        if (acc > mx)
          mx = acc;
      }
      for (long e = 0; e < E; e++)
        sum += row[e] = exp(row[e] - mx);
      for (long e = 0; e < E; e++)
        row[e] /= sum;
      /* top choices: strict > keeps the lowest index on ties */
      long b1 = 0;
      for (long e = 1; e < E; e++)
        if (row[e] > row[b1])
          b1 = e;
      long b2 = b1 == 0 ? 1 : 0;
      for (long e = 0; e < E; e++)
        if (e != b1 && row[e] > row[b2])
          b2 = e;
      if (row[b1] - row[b2] < AMBIGUOUS)
        ambiguous("the first and second gates", g, s, row[b1], row[b2]);
      e1[s] = b1;
      e2[s] = b2;
      if (K == 2) {
        long b3 = -1;
        for (long e = 0; e < E; e++)
          if (e != b1 && e != b2 && (b3 < 0 || row[e] > row[b3]))
            b3 = e;
        if (row[b2] - row[b3] < AMBIGUOUS)
          ambiguous("the second and third gates", g, s, row[b2], row[b3]);
        w1[s] = row[b1] / (row[b1] + row[b2]);
        w2[s] = row[b2] / (row[b1] + row[b2]);
      } else {
        w1[s] = row[b1];
        w2[s] = 0;
      }
      routed[s] = K == 2;
#if MOE_RANDOM
      double u = uniform01((uint64_t)MOE_SEED, stream, (int64_t)MOE_STEP, (uint64_t)(g * S + s));
      if (fabs(2 * w2[s] - u) < AMBIGUOUS)
        ambiguous("2 w2 against the draw u", g, s, 2 * w2[s], u);
      routed[s] = 2 * w2[s] > u;
#endif
      if (K == 2) {
        nrouted += routed[s];
        nunrouted += !routed[s];
      }
    }
    /* aux: f from first choices before dropping, m the mean gate */
    double la = 0;
    for (long e = 0; e < E; e++) {
      double f = 0, mm = 0;
      for (long s = 0; s < S; s++) {
        f += e1[s] == e;
        mm += gates[s * E + e];
      }
      la += (f / (double)S) * (mm / (double)S);
    }
    aux += (double)E * la / (double)G;
    /* slots: first choices in token order */
    for (long e = 0; e < E; e++)
      count[e] = nfirst[e] = unrouted_earlier[e] = 0;
    for (long s = 0; s < S; s++) {
      long e = e1[s], pos = nfirst[e]++;
      c1[s] = pos < C ? pos : -1;
      ndropped += pos >= C;
    }
    for (long e = 0; e < E; e++)
      count[e] = nfirst[e] < C ? nfirst[e] : C;
    /* then routed second choices, after every first choice of the group */
    for (long s = 0; s < S; s++) {
      c2[s] = -1;
      if (K != 2)
        continue;
      long e = e2[s];
      if (!routed[s]) {
        unrouted_earlier[e]++;
        continue;
      }
      long pos = count[e]++;
      c2[s] = pos < C ? pos : -1;
      ndropped += pos >= C;
      /* kept, but would not have been had unrouted choices taken slots */
      if (pos < C && pos + unrouted_earlier[e] >= C)
        nafter_unrouted++;
    }
    for (long s = 0; s < S; s++) {
      long *k_e = ke + (g * S + s) * 2, *k_c = kc + (g * S + s) * 2;
      double *k_w = kw + (g * S + s) * 2;
      k_e[0] = e1[s], k_c[0] = c1[s], k_w[0] = c1[s] >= 0 ? w1[s] : 0;
      k_e[1] = e2[s], k_c[1] = c2[s], k_w[1] = c2[s] >= 0 ? w2[s] : 0;
      if (c1[s] >= 0)
        slot_tok[(e1[s] * G + g) * C + c1[s]] = s, tokens_of[e1[s]]++;
      if (c2[s] >= 0)
        slot_tok[(e2[s] * G + g) * C + c2[s]] = s, tokens_of[e2[s]]++;
      if (c1[s] < 0 && c2[s] < 0)
        ndropped_tokens++;
    }
  }

  /* the body, on every slot of every expert: t = the slot's token or zeros */
  for (long e = 0; e < E; e++)
    for (long g = 0; g < G; g++)
      for (long c = 0; c < C; c++) {
        long s = slot_tok[(e * G + g) * C + c];
        double t[64];
        if (M > 64)
          die("M too large for this reference", "");
        for (long m = 0; m < M; m++)
          t[m] = s >= 0 ? (double)x[(g * S + s) * M + m] : 0.0;
        for (long j = 0; j < H; j++) {
          double acc = MOE_BIAS;
          for (long m = 0; m < M; m++)
            acc += t[m] * wi[(e * M + m) * H + j];
          hbuf[j] = acc > 0 ? acc : 0;
        }
        double norm = 0;
        for (long m = 0; m < M; m++) {
          double acc = 0;
          for (long j = 0; j < H; j++)
            acc += hbuf[j] * wo[(e * H + j) * M + m];
          out[((e * G + g) * C + c) * M + m] = acc;
          norm += fabs(acc);
        }
        if (s < 0) {
          nempty++;
          nempty_nonzero += norm > 1e-3;
        }
      }
  /* combine */
  for (long g = 0; g < G; g++)
    for (long s = 0; s < S; s++)
      for (int k = 0; k < K; k++) {
        long i = (g * S + s) * 2 + k;
        if (kc[i] < 0)
          continue;
        for (long m = 0; m < M; m++)
          y[(g * S + s) * M + m] += kw[i] * out[((ke[i] * G + g) * C + kc[i]) * M + m];
      }

  long idle = 0;
  for (long e = 0; e < E; e++)
    idle += tokens_of[e] == 0;
  printf("%s check: G %ld S %ld M %ld H %ld E %ld, top %d, capacity %g: C = %ld slots per expert and group\n", me, G,
         S, M, H, E, K, (double)MOE_CAPACITY, C);
  printf("%s check: %ld choices dropped, %ld tokens dropped entirely, %ld empty slots (%ld with non-zero output), "
         "%ld idle experts",
         me, ndropped, ndropped_tokens, nempty, nempty_nonzero, idle);
  if (K == 2)
    printf(", %ld second choices routed, %ld not, %ld kept thanks to unrouted ones", nrouted, nunrouted,
           nafter_unrouted);
  printf("\n");

  int weak = 0;
#define WANT(flag, cond, text)                                                                                        \
  if ((flag) && !(cond)) {                                                                                            \
    fprintf(stderr, "%s check: the test's data do not exercise what it is for: %s\n", me, text);                      \
    weak = 1;                                                                                                         \
  }
  WANT(MOE_WANT_DROPS, ndropped > 0, "no choice is dropped for capacity")
  WANT(MOE_WANT_DROPPED_TOKEN, ndropped_tokens > 0, "no token is dropped by all its choices")
  WANT(MOE_WANT_EMPTY_SLOTS, nempty > 0 && (MOE_BIAS == 0.0 || nempty_nonzero > 0),
       "no empty slot (with non-zero body output where the body has a bias)")
  WANT(MOE_WANT_IDLE_EXPERT, idle > 0, "every expert gets some token")
  WANT(MOE_WANT_UNROUTED, nunrouted > 0 && nrouted > 0, "random routing routes all or none of the second choices")
  WANT(MOE_WANT_SLOT_AFTER_UNROUTED, nafter_unrouted > 0,
       "no routed second choice depends on unrouted ones taking no slot")

  int bad = compare("y", yg, y, G * S * M, 3, dy);
  bad += compare("aux", auxg, &aux, 1, 0, da);
  return bad != 0 || weak;
}
