/* slots.c — gslrt_sgemm_fill: a batched product over the filled capacity
 * slots of a moe block alone (gslc's slots.c says which products get it).
 *
 * Per batch entry, the rows of the product (or, with depth, its summed
 * index) are `blocks` blocks of `slots` consecutive entries, one block per
 * (expert, group); block j of entry i holds fill[i * blocks + j] filled
 * slots first, then empty ones. By rows: the filled rows of op(A) of all
 * blocks are packed one after another and multiplied by B in one product
 * (a row of C is its row of A against B, whatever the rows beside it),
 * whose rows go back to their slots; the empty slots' rows of C are
 * zeroed. By depth: C is the
 * sum over the blocks of their filled terms: those terms (columns of
 * op(A), rows of op(B)) are packed side by side into scratch and summed
 * by one product over all of them; C is zeroed when no block has any. A
 * batch entry whose blocks are all full is one product, the same call as
 * gslrt_sgemm's (so the same bits). A count outside [0, slots] is clamped
 * to it. The packed rows (terms) are padded with zeros to a multiple of
 * FILL_BUCKET (at most all of them): the product's shape is then one of a
 * few, where each count of filled slots made a shape of its own, and
 * oneDNN keeps a primitive, its JIT code and scratch, per shape (a 48-layer
 * MoE LM held some 280 MB of them after three steps, more each step). The
 * padding's rows of C are dropped, and its terms add zeros. gslrt_gemm_bf16_fill does the same for bf16 operands (through
 * gslrt_gemm_bf16). */
#include "internal.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>


#define FILL_BUCKET 64 /* the packed rows or terms of a product: a multiple of this (or all) */

/* One product of the loop below: C (f32, ldc) = op(A) op(B) over m x n x k,
 * A and B in the element type of the caller. */
typedef void FillGemm(int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k, const void *a,
                      int64_t lda, const void *b, int64_t ldb, float *c, int64_t ldc);

static void f32_gemm(int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                     const void *b, int64_t ldb, float *c, int64_t ldc) {
  gslrt_sgemm(1, trans_a, trans_b, m, n, k, a, lda, 0, b, ldb, 0, c, ldc, 0);
}

static void bf16_gemm(int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                      const void *b, int64_t ldb, float *c, int64_t ldc) {
  gslrt_gemm_bf16(1, trans_a, trans_b, m, n, k, a, lda, 0, b, ldb, 0, c, GSLRT_F32, ldc, 0);
}

/* Term t of a depth product's operand (a row of `len` elements of x
 * stored with leading dimension ld: row t when the term runs along the
 * rows, column t when across them) copied to out, contiguous. */
static void term(char *out, const char *x, int64_t t, int64_t len, int64_t ld, bool row, int esize) {
  if (row) {
    memcpy(out, x + t * ld * esize, (size_t)(len * esize));
    return;
  }
  for (int64_t i = 0; i < len; i++)
    memcpy(out + i * esize, x + (i * ld + t) * esize, (size_t)esize);
}

/* The loop of both: A and B of esize-byte elements, multiplied by gemm. */
static void fill_product(const char *name, FillGemm *gemm, int esize, int64_t batch, int32_t trans_a, int32_t trans_b,
                         int64_t m, int64_t n, int64_t k, const char *a, int64_t lda, int64_t stride_a, const char *b,
                         int64_t ldb, int64_t stride_b, float *c, int64_t ldc, int64_t stride_c, const int32_t *fill,
                         int64_t blocks, int64_t slots, int32_t depth) {
  if (blocks * slots != (depth ? k : m))
    gslrt_fatal(NULL, "%s: %lld blocks of %lld slots for %s %lld", name, (long long)blocks, (long long)slots,
                depth ? "a sum over" : "rows", (long long)(depth ? k : m));
  /* the filled rows of op(A) (by rows: m x k) and their product rows (m x
   * n), or the filled terms of op(A) and op(B) (by depth: k x m, k x n),
   * packed side by side */
  char *pa = malloc((size_t)(m * k * esize) + 1), *pb = depth ? malloc((size_t)(k * n * esize) + 1) : NULL;
  float *pc = depth ? NULL : malloc(sizeof *pc * (size_t)(m * n) + 1);
  if (!pa || (depth ? !pb : !pc))
    gslrt_fatal(NULL, "%s: cannot allocate room to pack the filled slots (m %lld, n %lld, k %lld)", name,
                (long long)m, (long long)n, (long long)k);
  for (int64_t i = 0; i < batch; i++) {
    const char *ai = a + i * stride_a * esize, *bi = b + i * stride_b * esize;
    float *ci = c + i * stride_c;
    bool full = true;
    for (int64_t j = 0; j < blocks && full; j++)
      full = fill[i * blocks + j] >= slots;
    if (full) { /* every slot filled: the whole product, as the padded path computes it */
      gemm(trans_a, trans_b, m, n, k, ai, lda, bi, ldb, ci, ldc);
      continue;
    }
    int64_t kept = 0; /* rows or terms packed */
    for (int64_t j = 0; j < blocks; j++) {
      int64_t f = fill[i * blocks + j], r0 = j * slots;
      f = f < 0 ? 0 : f > slots ? slots : f;
      for (int64_t t = r0; t < r0 + f; t++, kept++)
        if (depth) { /* op(A)'s column t, op(B)'s row t */
          term(pa + kept * m * esize, ai, t, m, lda, trans_a, esize);
          term(pb + kept * n * esize, bi, t, n, ldb, !trans_b, esize);
        } else { /* op(A)'s row t */
          term(pa + kept * k * esize, ai, t, k, lda, !trans_a, esize);
        }
    }
    if (!kept) {
      for (int64_t r = 0; r < m; r++)
        memset(ci + r * ldc, 0, sizeof *ci * (size_t)n);
      continue;
    }
    int64_t all = depth ? k : m, padded = (kept + FILL_BUCKET - 1) / FILL_BUCKET * FILL_BUCKET;
    padded = padded < all ? padded : all;
    if (depth) { /* op(A) = pa^T (padded x m stored), op(B) = pb (padded x n) */
      memset(pa + kept * m * esize, 0, (size_t)((padded - kept) * m * esize));
      memset(pb + kept * n * esize, 0, (size_t)((padded - kept) * n * esize));
      gemm(1, 0, m, n, padded, pa, m, pb, n, ci, ldc);
      continue;
    }
    memset(pa + kept * k * esize, 0, (size_t)((padded - kept) * k * esize));
    gemm(0, trans_b, padded, n, k, pa, k, bi, ldb, pc, n); /* every filled row at once */
    kept = 0;
    for (int64_t j = 0; j < blocks; j++) { /* back to their slots; the empty ones zero */
      int64_t f = fill[i * blocks + j], r0 = j * slots;
      f = f < 0 ? 0 : f > slots ? slots : f;
      for (int64_t r = r0; r < r0 + slots; r++)
        if (r < r0 + f)
          memcpy(ci + r * ldc, pc + kept++ * n, sizeof *ci * (size_t)n);
        else
          memset(ci + r * ldc, 0, sizeof *ci * (size_t)n);
    }
  }
  free(pa);
  free(pb);
  free(pc);
}

void gslrt_sgemm_fill(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                      const float *a, int64_t lda, int64_t stride_a,
                      const float *b, int64_t ldb, int64_t stride_b,
                      float *c, int64_t ldc, int64_t stride_c,
                      const int32_t *fill, int64_t blocks, int64_t slots, int32_t depth) {
  fill_product("gslrt_sgemm_fill", f32_gemm, 4, batch, trans_a, trans_b, m, n, k, (const char *)a, lda, stride_a,
               (const char *)b, ldb, stride_b, c, ldc, stride_c, fill, blocks, slots, depth);
}

void gslrt_gemm_bf16_fill(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                          const uint16_t *a, int64_t lda, int64_t stride_a,
                          const uint16_t *b, int64_t ldb, int64_t stride_b,
                          float *c, int64_t ldc, int64_t stride_c,
                          const int32_t *fill, int64_t blocks, int64_t slots, int32_t depth) {
  fill_product("gslrt_gemm_bf16_fill", bf16_gemm, 2, batch, trans_a, trans_b, m, n, k, (const char *)a, lda,
               stride_a, (const char *)b, ldb, stride_b, c, ldc, stride_c, fill, blocks, slots, depth);
}
