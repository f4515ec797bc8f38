/* moe.c — the routing of a moe block on one device's tiles: dispatch
 * copies each kept choice's token row into its expert's slot, combine adds
 * the gate-weighted expert rows back into each token's row; a weighted
 * dispatch (autodiff's transpose of combine) scales each row it copies. These are the
 * index form of GShard's one-hot einsums "gsec,gsm->egcm" and
 * "gsec,egcm->gsm": the same numbers without the [G, S, E, C] masks and
 * without their E*C-fold multiply-adds.
 *
 * Layout (C order): x, out [G, S, M]; the expert side [E, G, C, M];
 * expert, slot [G, S, K] (i32); weight [G, S, K]. A slot outside [0, C)
 * is a dropped choice: skipped. An expert outside [0, E) is a broken
 * route (routing computed elsewhere than stdlib/moe.gsl): a fatal error.
 *
 * Element types (issue 19): x, y and out are f32 or bf16, weight f32. A
 * plain dispatch copies rows as they are; a weighted one computes
 * w * x in f32 and rounds once into a bf16 out; combine sums a token's
 * choices in f32, in choice order, from f32 or widened bf16 rows, and
 * rounds the sum once into a bf16 out: the numbers of the f32 code on the
 * widened values, rounded at the end. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Choice r (of token s of group g): the offset of its row in the
 * [E, G, C, M] side, -1 if it was dropped, -2 (after gslrt_fail) if its
 * expert is out of range. */
static int64_t route(gslrt_ctx *ctx, const int32_t *expert, const int32_t *slot, int64_t r, int64_t g,
                     int64_t E, int64_t G, int64_t C, int64_t M) {
  int64_t e = expert[r], c = slot[r];
  if (c < 0 || c >= C)
    return -1;
  if (e < 0 || e >= E) {
    char msg[160];
    snprintf(msg, sizeof msg, "moe routing sends a token to expert %lld of %lld", (long long)e, (long long)E);
    gslrt_fail(ctx, msg);
    return -2;
  }
  return ((e * G + g) * C + c) * M;
}

/* Dies naming call unless dtype is one routing handles (f32 or bf16). */
static void check_dtype(gslrt_ctx *ctx, const char *call, const char *what, int32_t dtype) {
  if (dtype != GSLRT_F32 && dtype != GSLRT_BF16)
    gslrt_fatal(ctx, "%s: %s has dtype %d, not f32 or bf16", call, what, (int)dtype);
}

/* The rows' inner loops: ROW_LOOP(M, m, stmt) runs stmt for m = 0..M-1,
 * in chunks of ROW_CHUNK, a trip count the compiler knows, then the rest:
 * gcc -O2's cautious vectorizer leaves a loop of M elements (M known only
 * at run time) scalar, and so it left combine's and the weighted
 * dispatch's. Each element gets the same operations in the same order
 * either way. */
#define ROW_CHUNK 16
#define ROW_LOOP(M, m, stmt)                                                  \
  do {                                                                        \
    int64_t row_at_ = 0;                                                      \
    for (; row_at_ + ROW_CHUNK <= (M); row_at_ += ROW_CHUNK)                  \
      for (int row_j_ = 0; row_j_ < ROW_CHUNK; row_j_++) {                    \
        int64_t m = row_at_ + row_j_;                                         \
        stmt;                                                                 \
      }                                                                       \
    for (int64_t m = row_at_; m < (M); m++)                                   \
      stmt;                                                                   \
  } while (0)

/* o[m] += w * row[m] over a row of M elements of dtype (f32 or bf16). */
static void row_axpy(float *restrict o, float w, const void *restrict row, int32_t dtype, int64_t M) {
  const uint16_t *h = row;
  const float *f = row;
  if (dtype == GSLRT_BF16)
    ROW_LOOP(M, m, o[m] += w * gslrt_bf16_widen(h[m]));
  else
    ROW_LOOP(M, m, o[m] += w * f[m]);
}

/* out[m] = w * row[m], rounded once into a bf16 out, over M elements. */
static void row_scale(void *restrict out, float w, const void *restrict row, int32_t dtype, int64_t M) {
  uint16_t *ho = out;
  float *fo = out;
  const uint16_t *h = row;
  const float *f = row;
  if (dtype == GSLRT_BF16)
    ROW_LOOP(M, m, ho[m] = gslrt_bf16_round(w * gslrt_bf16_widen(h[m])));
  else
    ROW_LOOP(M, m, fo[m] = w * f[m]);
}

void gslrt_dispatch(gslrt_ctx *ctx, void *out, const void *x, int32_t dtype, const int32_t *expert,
                    const int32_t *slot, const float *weight, int64_t E, int64_t G, int64_t C, int64_t M,
                    int64_t S, int64_t K) {
  check_dtype(ctx, "gslrt_dispatch", "x", dtype);
  size_t es = (size_t)gslrt_dtype_size(dtype);
  char *o = out;
  const char *in = x;
  memset(out, 0, es * (size_t)(E * G * C * M));
  for (int64_t g = 0; g < G; g++)
    for (int64_t s = 0; s < S; s++)
      for (int64_t k = 0; k < K; k++) {
        int64_t r = (g * S + s) * K + k, at = route(ctx, expert, slot, r, g, E, G, C, M);
        if (at == -2)
          return;
        if (at < 0)
          continue;
        const char *row = in + es * (size_t)((g * S + s) * M);
        if (!weight) {
          memcpy(o + es * (size_t)at, row, es * (size_t)M);
          continue;
        }
        row_scale(o + es * (size_t)at, weight[r], row, dtype, M);
      }
}

void gslrt_combine(gslrt_ctx *ctx, void *out, int32_t out_dtype, const void *y, int32_t y_dtype,
                   const int32_t *expert, const int32_t *slot, const float *weight, int64_t E, int64_t G,
                   int64_t C, int64_t M, int64_t S, int64_t K) {
  check_dtype(ctx, "gslrt_combine", "out", out_dtype);
  check_dtype(ctx, "gslrt_combine", "y", y_dtype);
  size_t eo = (size_t)gslrt_dtype_size(out_dtype), ey = (size_t)gslrt_dtype_size(y_dtype);
  /* the sums, in f32: out itself, or one row of scratch for a bf16 out */
  float *acc = out_dtype == GSLRT_F32 ? NULL : malloc(sizeof *acc * (size_t)(M > 0 ? M : 1));
  if (out_dtype != GSLRT_F32 && !acc)
    gslrt_fatal(ctx, "gslrt_combine: cannot allocate a row of %lld floats", (long long)M);
  for (int64_t g = 0; g < G; g++)
    for (int64_t s = 0; s < S; s++) {
      char *orow = (char *)out + eo * (size_t)((g * S + s) * M);
      float *o = acc ? acc : (float *)orow;
      memset(o, 0, sizeof *o * (size_t)M);
      for (int64_t k = 0; k < K; k++) {
        int64_t r = (g * S + s) * K + k, at = route(ctx, expert, slot, r, g, E, G, C, M);
        if (at == -2) {
          free(acc);
          return;
        }
        if (at < 0)
          continue;
        row_axpy(o, weight[r], (const char *)y + ey * (size_t)at, y_dtype, M);
      }
      if (acc)
        gslrt_bf16_round_n((uint16_t *)orow, acc, M);
    }
  free(acc);
}
