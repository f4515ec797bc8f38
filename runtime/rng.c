/* rng.c — counter-based random numbers: Philox-4x32-10 and gslrt_rng_fill.
 *
 * Generator: Philox-4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random
 * numbers: as easy as 1, 2, 3", SC 2011), as in Random123: a 128-bit
 * counter (four 32-bit words) and a 64-bit key (two words); each of the 10
 * rounds multiplies words 0 and 2 by 0xD2511F53 and 0xCD9E8D57 into 64-bit
 * products (hi, lo) and sets
 *   out = {hi(C1*x2) ^ x1 ^ k0, lo(C1*x2), hi(C0*x0) ^ x3 ^ k1, lo(C0*x0)}
 *   with C0 = 0xD2511F53 on x0 and C1 = 0xCD9E8D57 on x2,
 * and the key is bumped by the Weyl constants (0x9E3779B9, 0xBB67AE85)
 * between rounds. It matches Random123's known-answer vectors
 * (tests/kat_vectors, checked in the unit tests).
 *
 * Draws: element i of a tensor (its row-major index in the GLOBAL shape,
 * so the numbers do not depend on the mesh or the tile) at step s of
 * stream t with seed S takes
 *   counter = {lo32(i), hi32(i), lo32(s), t ^ hi32(s)},  key = {lo32(S), hi32(S)}
 * and out = Philox-4x32-10(counter, key). Params are drawn once with
 * s = -1, whose counter words 2 and 3 are 0xFFFFFFFF and t (hi32(s) is not
 * folded in for s < 0); inputs anew at every step s >= 0. Below 2^32 steps
 * hi32(s) is 0; it is what sets gsl_eval's keys GSLRT_EVAL_KEY + j (2^62 +
 * j: word 3 is t ^ 2^30) apart from step j's.
 *   uniform(a, b): u = (out[0] >> 8) * 2^-24 in [0, 1); a + (b - a) * u.
 *   normal(std a): Box-Muller on u1 = ((out[0] >> 8) + 1) * 2^-24 in (0, 1]
 *                  and u2 = (out[1] >> 8) * 2^-24;
 *                  z = sqrt(-2 ln u1) * cos(2 pi u2); a * z.
 * All arithmetic in double, the result rounded to float once. Text
 * generation's draws (generate.c) need finer steps than 2^-24: a token
 * of probability 1e-9 must come up about once in 1e9 draws, not never, so
 * gslrt_rng_uniform53 takes 53 bits of one draw,
 *   u = ((out[0] >> 5) * 2^26 + (out[1] >> 6)) * 2^-53 in [0, 1).
 * Compiled code draws too, inline (cg_fuse.c, dropout): the same counter
 * and key, the uniform's u compared with p, keyed by gslrt_rng_seed. */
#include "internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define TWO_M24 (1.0 / 16777216.0)
#define TWO_M53 (1.0 / 9007199254740992.0)

void gslrt_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t x0 = ctr[0], x1 = ctr[1], x2 = ctr[2], x3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * x0;
    uint64_t p1 = (uint64_t)PHILOX_M1 * x2;
    uint32_t y0 = (uint32_t)(p1 >> 32) ^ x1 ^ k0;
    uint32_t y1 = (uint32_t)p1;
    uint32_t y2 = (uint32_t)(p0 >> 32) ^ x3 ^ k1;
    uint32_t y3 = (uint32_t)p0;
    x0 = y0, x1 = y1, x2 = y2, x3 = y3;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  out[0] = x0, out[1] = x1, out[2] = x2, out[3] = x3;
}

static void draw(uint64_t seed, uint32_t stream, int64_t step, uint64_t i, uint32_t out[4]) {
  uint32_t hi = step < 0 ? 0 : (uint32_t)((uint64_t)step >> 32);
  uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)step, stream ^ hi};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  gslrt_philox(ctr, key, out);
}

double gslrt_rng_uniform01(uint64_t seed, uint32_t stream, int64_t step, uint64_t i) {
  uint32_t out[4];
  draw(seed, stream, step, i, out);
  return (double)(out[0] >> 8) * TWO_M24;
}

double gslrt_rng_uniform53(uint64_t seed, uint32_t stream, int64_t step, uint64_t i) {
  uint32_t out[4];
  draw(seed, stream, step, i, out);
  return ((double)(out[0] >> 5) * 67108864.0 + (double)(out[1] >> 6)) * TWO_M53;
}

double gslrt_rng_normal01(uint64_t seed, uint32_t stream, int64_t step, uint64_t i) {
  uint32_t out[4];
  draw(seed, stream, step, i, out);
  double u1 = ((double)(out[0] >> 8) + 1.0) * TWO_M24;
  double u2 = (double)(out[1] >> 8) * TWO_M24;
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t gslrt_rng_seed(gslrt_ctx *ctx) { return ctx ? ctx->seed : 0; }

/* Walks the tile in row-major order with an odometer over its index,
 * keeping the global row-major index of the current element. */
void gslrt_rng_fill(gslrt_ctx *ctx, float *out, int32_t dist, double a, double b,
                    uint32_t stream, int64_t step, int32_t rank, const int64_t *global_shape,
                    const int64_t *local_offset, const int64_t *local_shape) {
  int64_t idx[GSLRT_MAX_RANK] = {0};
  int64_t gstride[GSLRT_MAX_RANK];
  int64_t count = 1;
  uint64_t seed = ctx ? ctx->seed : 0;
  if (rank < 0 || rank > GSLRT_MAX_RANK)
    gslrt_fatal(ctx, "gslrt_rng_fill: rank %d out of range", (int)rank);
  for (int d = rank - 1; d >= 0; d--) {
    gstride[d] = d == rank - 1 ? 1 : gstride[d + 1] * global_shape[d + 1];
    count *= local_shape[d];
  }
  uint64_t g = 0;
  /* a padded tile (gslrt.h, beside gslrt_declare_tensor): its elements
   * past the global shape along any dim draw nothing and are 0; the
   * others draw exactly as in an even tile */
  bool padded = false;
  for (int d = 0; d < rank; d++) {
    g += (uint64_t)((local_offset ? local_offset[d] : 0) * gstride[d]);
    padded |= (local_offset ? local_offset[d] : 0) + local_shape[d] > global_shape[d];
  }
  for (int64_t e = 0; e < count; e++) {
    bool real = true;
    for (int d = 0; padded && d < rank; d++)
      real &= (local_offset ? local_offset[d] : 0) + idx[d] < global_shape[d];
    double v = !real ? 0.0
               : dist == GSLRT_NORMAL ? a * gslrt_rng_normal01(seed, stream, step, g)
                                      : a + (b - a) * gslrt_rng_uniform01(seed, stream, step, g);
    out[e] = (float)v;
    for (int d = rank - 1; d >= 0; d--) {
      g += (uint64_t)gstride[d];
      if (++idx[d] < local_shape[d])
        break;
      g -= (uint64_t)(idx[d] * gstride[d]);
      idx[d] = 0;
    }
  }
}
