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
 * route (routing computed elsewhere than stdlib/moe.gsl): a fatal error. */
#include "internal.h"

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

void gslrt_dispatch(gslrt_ctx *ctx, float *out, const float *x, const int32_t *expert, const int32_t *slot,
                    const float *weight, int64_t E, int64_t G, int64_t C, int64_t M, int64_t S, int64_t K) {
  memset(out, 0, sizeof *out * (size_t)(E * G * C * M));
  for (int64_t g = 0; g < G; g++)
    for (int64_t s = 0; s < S; s++)
      for (int64_t k = 0; k < K; k++) {
        int64_t r = (g * S + s) * K + k, at = route(ctx, expert, slot, r, g, E, G, C, M);
        if (at == -2)
          return;
        if (at < 0)
          continue;
        if (!weight) {
          memcpy(out + at, x + (g * S + s) * M, sizeof *out * (size_t)M);
          continue;
        }
        const float w = weight[r], *row = x + (g * S + s) * M;
        for (int64_t m = 0; m < M; m++)
          out[at + m] = w * row[m];
      }
}

void gslrt_combine(gslrt_ctx *ctx, float *out, const float *y, const int32_t *expert, const int32_t *slot,
                   const float *weight, int64_t E, int64_t G, int64_t C, int64_t M, int64_t S, int64_t K) {
  for (int64_t g = 0; g < G; g++)
    for (int64_t s = 0; s < S; s++) {
      float *o = out + (g * S + s) * M;
      memset(o, 0, sizeof *o * (size_t)M);
      for (int64_t k = 0; k < K; k++) {
        int64_t r = (g * S + s) * K + k, at = route(ctx, expert, slot, r, g, E, G, C, M);
        if (at == -2)
          return;
        if (at < 0)
          continue;
        const float w = weight[r], *row = y + at;
        for (int64_t m = 0; m < M; m++)
          o[m] += w * row[m];
      }
    }
}
