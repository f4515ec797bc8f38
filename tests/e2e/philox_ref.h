/* tests/e2e/philox_ref.h — the runtime's counter-based draw (runtime/rng.c),
 * written again independently of it for the checks that predict a draw:
 * Philox-4x32-10 of (i lo, i hi, step, stream) under the seed, word 0's top
 * 24 bits as a uniform in [0, 1). Included by moe_ref.h and dropout_check.c. */
#ifndef PHILOX_REF_H
#define PHILOX_REF_H
#include <stdint.h>

static void philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t x0 = ctr[0], x1 = ctr[1], x2 = ctr[2], x3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * x0;
    uint64_t p1 = (uint64_t)0xCD9E8D57u * x2;
    uint32_t y0 = (uint32_t)(p1 >> 32) ^ x1 ^ k0;
    uint32_t y1 = (uint32_t)p1;
    uint32_t y2 = (uint32_t)(p0 >> 32) ^ x3 ^ k1;
    uint32_t y3 = (uint32_t)p0;
    x0 = y0, x1 = y1, x2 = y2, x3 = y3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = x0, out[1] = x1, out[2] = x2, out[3] = x3;
}

/* uniform [0, 1) of element i at step `step` of stream `stream` */
static double uniform01(uint64_t seed, uint32_t stream, int64_t step, uint64_t i) {
  uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)step, stream};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t out[4];
  philox(ctr, key, out);
  return (double)(out[0] >> 8) * (1.0 / 16777216.0);
}

#endif
