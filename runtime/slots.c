/* slots.c — gslrt_sgemm_fill: a batched product over the filled capacity
 * slots of a moe block alone (gslc's slots.c says which products get it).
 *
 * Per batch entry, the rows of the product (or, with depth, its summed
 * index) are `blocks` blocks of `slots` consecutive entries, one block per
 * (expert, group); block j of entry i holds fill[i * blocks + j] filled
 * slots first, then empty ones. By rows: each block's filled rows are one
 * cblas_sgemm (through gslrt_sgemm) and its other rows of C are zeroed, so
 * a row computed is the same product as in the whole GEMM (a row of C is
 * its row of A against B, whatever the number of rows). By depth: C is the
 * sum over the blocks of their filled terms, each block's product added
 * to C (beta 1) after the first; C is zeroed when no block has any. A batch
 * entry whose blocks are all full is one product, the same call as
 * gslrt_sgemm's (so the same bits). A count outside [0, slots] is clamped
 * to it. gslrt_gemm_bf16_fill does the same for bf16 operands (through
 * gslrt_gemm_bf16, which has no beta: by depth, each block after the
 * first is multiplied into a scratch row block and added to C). */
#include "internal.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

void gslrt_sgemm_fill(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                      const float *a, int64_t lda, int64_t stride_a,
                      const float *b, int64_t ldb, int64_t stride_b,
                      float *c, int64_t ldc, int64_t stride_c,
                      const int32_t *fill, int64_t blocks, int64_t slots, int32_t depth) {
  if (blocks * slots != (depth ? k : m))
    gslrt_fatal(NULL, "gslrt_sgemm_fill: %lld blocks of %lld slots for %s %lld", (long long)blocks,
                (long long)slots, depth ? "a sum over" : "rows", (long long)(depth ? k : m));
  for (int64_t i = 0; i < batch; i++) {
    const float *ai = a + i * stride_a, *bi = b + i * stride_b;
    float *ci = c + i * stride_c;
    bool full = true;
    for (int64_t j = 0; j < blocks && full; j++)
      full = fill[i * blocks + j] >= slots;
    if (full) { /* every slot filled: the whole product, as gslrt_sgemm computes it */
      gslrt_sgemm(1, trans_a, trans_b, m, n, k, ai, lda, 0, bi, ldb, 0, ci, ldc, 0);
      continue;
    }
    bool first = true;
    for (int64_t j = 0; j < blocks; j++) {
      int64_t f = fill[i * blocks + j], r0 = j * slots;
      f = f < 0 ? 0 : f > slots ? slots : f;
      if (!depth) {
        if (f)
          gslrt_sgemm(1, trans_a, trans_b, f, n, k, trans_a ? ai + r0 : ai + r0 * lda, lda, 0, bi, ldb, 0,
                      ci + r0 * ldc, ldc, 0);
        for (int64_t r = r0 + f; r < r0 + slots; r++)
          memset(ci + r * ldc, 0, sizeof *ci * (size_t)n);
        continue;
      }
      if (!f)
        continue;
      if (first) /* through gslrt_sgemm: its checks and its one BLAS thread */
        gslrt_sgemm(1, trans_a, trans_b, m, n, f, trans_a ? ai + r0 * lda : ai + r0, lda, 0,
                    trans_b ? bi + r0 : bi + r0 * ldb, ldb, 0, ci, ldc, 0);
      else
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                    (int)m, (int)n, (int)f, 1.0f, trans_a ? ai + r0 * lda : ai + r0, (int)lda,
                    trans_b ? bi + r0 : bi + r0 * ldb, (int)ldb, 1.0f, ci, (int)ldc);
      first = false;
    }
    if (depth && first)
      for (int64_t r = 0; r < m; r++)
        memset(ci + r * ldc, 0, sizeof *ci * (size_t)n);
  }
}

void gslrt_gemm_bf16_fill(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                          const uint16_t *a, int64_t lda, int64_t stride_a,
                          const uint16_t *b, int64_t ldb, int64_t stride_b,
                          float *c, int64_t ldc, int64_t stride_c,
                          const int32_t *fill, int64_t blocks, int64_t slots, int32_t depth) {
  if (blocks * slots != (depth ? k : m))
    gslrt_fatal(NULL, "gslrt_gemm_bf16_fill: %lld blocks of %lld slots for %s %lld", (long long)blocks,
                (long long)slots, depth ? "a sum over" : "rows", (long long)(depth ? k : m));
  float *part = NULL; /* depth: one block's product, before it is added to C */
  for (int64_t i = 0; i < batch; i++) {
    const uint16_t *ai = a + i * stride_a, *bi = b + i * stride_b;
    float *ci = c + i * stride_c;
    bool full = true;
    for (int64_t j = 0; j < blocks && full; j++)
      full = fill[i * blocks + j] >= slots;
    if (full) {
      gslrt_gemm_bf16(1, trans_a, trans_b, m, n, k, ai, lda, 0, bi, ldb, 0, ci, GSLRT_F32, ldc, 0);
      continue;
    }
    bool first = true;
    for (int64_t j = 0; j < blocks; j++) {
      int64_t f = fill[i * blocks + j], r0 = j * slots;
      f = f < 0 ? 0 : f > slots ? slots : f;
      if (!depth) {
        if (f)
          gslrt_gemm_bf16(1, trans_a, trans_b, f, n, k, trans_a ? ai + r0 : ai + r0 * lda, lda, 0, bi, ldb, 0,
                          ci + r0 * ldc, GSLRT_F32, ldc, 0);
        for (int64_t r = r0 + f; r < r0 + slots; r++)
          memset(ci + r * ldc, 0, sizeof *ci * (size_t)n);
        continue;
      }
      if (!f)
        continue;
      const uint16_t *aj = trans_a ? ai + r0 * lda : ai + r0, *bj = trans_b ? bi + r0 : bi + r0 * ldb;
      if (first) {
        gslrt_gemm_bf16(1, trans_a, trans_b, m, n, f, aj, lda, 0, bj, ldb, 0, ci, GSLRT_F32, ldc, 0);
        first = false;
        continue;
      }
      if (!part && !(part = malloc(sizeof *part * (size_t)(m * n) + 1)))
        gslrt_fatal(NULL, "gslrt_gemm_bf16_fill: cannot allocate %lld floats", (long long)(m * n));
      gslrt_gemm_bf16(1, trans_a, trans_b, m, n, f, aj, lda, 0, bj, ldb, 0, part, GSLRT_F32, n, 0);
      for (int64_t r = 0; r < m; r++)
        for (int64_t q = 0; q < n; q++)
          ci[r * ldc + q] += part[r * n + q];
    }
    if (depth && first)
      for (int64_t r = 0; r < m; r++)
        memset(ci + r * ldc, 0, sizeof *ci * (size_t)n);
  }
  free(part);
}
