/* moe_ref.h — the plain C reference of the moe block (SPEC section 6), shared
 * by the tests/e2e/moe_*_check.c programs. Each of them defines the block's
 * settings and then includes this file, which is its main():
 *
 *   MOE_GSL        the test program's file name, beside the check's source
 *   MOE_TOP        K, from 1 to 8 (and below E)
 *   MOE_CAPACITY   the capacity factor F; C = ceil(F * K * S / E) in double,
 *                  or S for 0 (dropless)
 *   MOE_ZLOSS      the router z-loss's weight W (default 0): aux gains
 *                  W * mean over every token of logsumexp(logits)^2
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
 *   e1 = argmax_e gates (ties: lowest index), g1 its gate; for top K >= 2,
 *   e_k = argmax over the experts not yet chosen, g_k its gate, then
 *   w_k = g_k / (g_1 + ... + g_K); for top 1, w1 = g1 (not renormalized);
 *   random routing (top 2): a second choice is routed only where 2 w2 > u[g, s];
 *   slots: first choices in token order take slot pos1 = the number of earlier
 *   first choices of the same expert, kept iff pos1 < C; then the k-th
 *   choices, for k = 2 .. K in turn, in token order take count[e] + the
 *   number of earlier ROUTED k-th choices of the same expert, with count[e]
 *   the slots of e the choices before k kept, kept iff < C; an unrouted
 *   choice takes no slot; a dropped or unrouted choice has weight 0;
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
#ifndef MOE_ZLOSS
#define MOE_ZLOSS 0.0
#endif
#define MAXK 8
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
#ifndef MOE_WANT_NO_DROPS /* no choice dropped (dropless) */
#define MOE_WANT_NO_DROPS 0
#endif
#ifndef MOE_WANT_DROPS_AT_ONE /* capacity 1.0 would drop some choice of this routing */
#define MOE_WANT_DROPS_AT_ONE 0
#endif
#ifndef MOE_WANT_LATER_KEPT /* some third or later choice kept */
#define MOE_WANT_LATER_KEPT 0
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
  if (K < 1 || K > MAXK)
    die("MOE_TOP must be from 1 to 8", "");
  if (MOE_RANDOM && K != 2)
    die("random routing needs top 2", "");
  if (E < K + 1)
    die("too few experts for these tests", "");
  const long C = MOE_CAPACITY == 0 ? S : (long)ceil((double)MOE_CAPACITY * K * S / (double)E);

  /* The weights must be drawn, not left zero or constant. */
  double ss = 0;
  for (long i = 0; i < E * M * H; i++)
    ss += (double)wi[i] * wi[i] + (double)wo[i] * wo[i];
  if (!(ss > 0))
    die("wi and wo are all zero", "");

#if MOE_RANDOM
  const uint32_t stream = rng_stream(G, S);
#endif
  double *gates = malloc(sizeof(double) * (size_t)(S * E)), *lse = malloc(sizeof(double) * (size_t)S);
  long *ch = malloc(sizeof(long) * (size_t)(S * K));   /* the k-th choice of token s: ch[s * K + k] */
  double *w = malloc(sizeof(double) * (size_t)(S * K)); /* its weight before dropping */
  long *cs = malloc(sizeof(long) * (size_t)(S * K));   /* its slot or -1 */
  long *routed = malloc(sizeof(long) * (size_t)(S * K));
  long *count = malloc(sizeof(long) * (size_t)E), *nk = malloc(sizeof(long) * (size_t)E);
  long *unrouted_earlier = malloc(sizeof(long) * (size_t)E);
  long *slot_tok = malloc(sizeof(long) * (size_t)(E * G * C)); /* token of slot (e, g, c), -1 if empty */
  double *out = malloc(sizeof(double) * (size_t)(E * G * C * M));
  double *y = calloc((size_t)(G * S * M), sizeof(double));
  double *hbuf = malloc(sizeof(double) * (size_t)H);
  long *tokens_of = calloc((size_t)E, sizeof(long));
  double aux = 0, zsum = 0;
  long ndropped = 0, ndropped_tokens = 0, nempty = 0, nunrouted = 0, nrouted = 0, nafter_unrouted = 0;
  long nempty_nonzero = 0, nlater_kept = 0;

  for (long i = 0; i < E * G * C; i++)
    slot_tok[i] = -1;
  /* kept choices, to combine after the body: (e, c, weight) per token and choice */
  long *ke = malloc(sizeof(long) * (size_t)(G * S * K)), *kc = malloc(sizeof(long) * (size_t)(G * S * K));
  double *kw = malloc(sizeof(double) * (size_t)(G * S * K));

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
      lse[s] = mx + log(sum);
      zsum += lse[s] * lse[s];
      for (long e = 0; e < E; e++)
        row[e] /= sum;
      /* the top choices in turn: strict > keeps the lowest index on ties;
       * one more (K + 1) is found to check the K-th is not a tie */
      long *c = ch + s * K, best[MAXK + 1];
      for (int k = 0; k <= K && k < E; k++) {
        long b = -1;
        for (long e = 0; e < E; e++) {
          int taken = 0;
          for (int j = 0; j < k; j++)
            taken |= best[j] == e;
          if (!taken && (b < 0 || row[e] > row[b]))
            b = e;
        }
        best[k] = b;
        if (k > 0 && row[best[k - 1]] - row[b] < AMBIGUOUS)
          ambiguous("two consecutive choices' gates", g, s, row[best[k - 1]], row[b]);
      }
      double tot = 0;
      for (int k = 0; k < K; k++)
        c[k] = best[k], tot += row[best[k]];
      for (int k = 0; k < K; k++)
        w[s * K + k] = K == 1 ? row[best[0]] : row[best[k]] / tot;
      for (int k = 0; k < K; k++)
        routed[s * K + k] = 1;
#if MOE_RANDOM
      double u = uniform01((uint64_t)MOE_SEED, stream, (int64_t)MOE_STEP, (uint64_t)(g * S + s));
      if (fabs(2 * w[s * K + 1] - u) < AMBIGUOUS)
        ambiguous("2 w2 against the draw u", g, s, 2 * w[s * K + 1], u);
      routed[s * K + 1] = 2 * w[s * K + 1] > u;
#endif
      if (K == 2) {
        nrouted += routed[s * K + 1];
        nunrouted += !routed[s * K + 1];
      }
    }
    /* aux: f from first choices before dropping, m the mean gate */
    double la = 0;
    for (long e = 0; e < E; e++) {
      double f = 0, mm = 0;
      for (long s = 0; s < S; s++) {
        f += ch[s * K] == e;
        mm += gates[s * E + e];
      }
      la += (f / (double)S) * (mm / (double)S);
    }
    aux += (double)E * la / (double)G;
    /* slots: the k-th choices in token order, k = 1 .. K in turn, each
     * after every earlier choice of the group */
    for (long e = 0; e < E; e++)
      count[e] = 0;
    for (int k = 0; k < K; k++) {
      for (long e = 0; e < E; e++)
        nk[e] = unrouted_earlier[e] = 0;
      for (long s = 0; s < S; s++) {
        long e = ch[s * K + k], i = s * K + k;
        cs[i] = -1;
        if (!routed[i]) {
          unrouted_earlier[e]++;
          continue;
        }
        long pos = count[e] + nk[e]++;
        cs[i] = pos < C ? pos : -1;
        ndropped += pos >= C;
        nlater_kept += k >= 2 && pos < C;
        /* kept, but would not have been had unrouted choices taken slots */
        if (pos < C && pos + unrouted_earlier[e] >= C)
          nafter_unrouted++;
      }
      for (long e = 0; e < E; e++)
        count[e] = count[e] + nk[e] < C ? count[e] + nk[e] : C;
    }
    for (long s = 0; s < S; s++) {
      int any = 0;
      for (int k = 0; k < K; k++) {
        long i = s * K + k, j = (g * S + s) * K + k;
        ke[j] = ch[i], kc[j] = cs[i], kw[j] = cs[i] >= 0 ? w[i] : 0;
        if (cs[i] >= 0) {
          slot_tok[(ch[i] * G + g) * C + cs[i]] = s, tokens_of[ch[i]]++;
          any = 1;
        }
      }
      ndropped_tokens += !any;
    }
  }
  aux += MOE_ZLOSS * zsum / (double)(G * S);
  /* the choices a capacity factor of 1.0 would drop on the same routing:
   * an expert's routed choices past ceil(K * S / E) in a group */
  long ndropped_at_one = 0;
  {
    long C1 = (long)ceil((double)K * S / (double)E);
    for (long g = 0; g < G; g++)
      for (long e = 0; e < E; e++) {
        long n = 0;
        for (long s = 0; s < S; s++)
          for (int k = 0; k < K; k++)
            n += ke[(g * S + s) * K + k] == e && (kc[(g * S + s) * K + k] >= 0 || MOE_CAPACITY != 0);
        ndropped_at_one += n > C1 ? n - C1 : 0;
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
        long i = (g * S + s) * K + k;
        if (kc[i] < 0)
          continue;
        for (long m = 0; m < M; m++)
          y[(g * S + s) * M + m] += kw[i] * out[((ke[i] * G + g) * C + kc[i]) * M + m];
      }

  long idle = 0;
  for (long e = 0; e < E; e++)
    idle += tokens_of[e] == 0;
  printf("%s check: G %ld S %ld M %ld H %ld E %ld, top %d, capacity %g: C = %ld slots per expert and group; "
         "z-loss %g\n", me, G, S, M, H, E, K, (double)MOE_CAPACITY, C, (double)MOE_ZLOSS);
  printf("%s check: %ld choices dropped, %ld tokens dropped entirely, %ld empty slots (%ld with non-zero output), "
         "%ld idle experts",
         me, ndropped, ndropped_tokens, nempty, nempty_nonzero, idle);
  if (K == 2)
    printf(", %ld second choices routed, %ld not, %ld kept thanks to unrouted ones", nrouted, nunrouted,
           nafter_unrouted);
  printf(", %ld choices capacity 1.0 would drop\n", ndropped_at_one);

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
  WANT(MOE_WANT_NO_DROPS, ndropped == 0, "a choice is dropped (a dropless block drops none)")
  WANT(MOE_WANT_DROPS_AT_ONE, ndropped_at_one > 0, "capacity 1.0 would drop no choice of this routing")
  WANT(MOE_WANT_LATER_KEPT, nlater_kept > 0, "no third or later choice is kept")

  int bad = compare("y", yg, y, G * S * M, 3, dy);
  bad += compare("aux", auxg, &aux, 1, 0, da);
  return bad != 0 || weak;
}
