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
 * zeroed. By depth: C is the sum over the blocks of their filled terms:
 * those terms (columns of op(A), rows of op(B)) are packed side by side
 * into scratch and summed by one product over all of them; C is zeroed
 * when no block has any. When every block of every entry is full the
 * whole batch is one product, the same call as gslrt_sgemm's (so the same
 * bits). A count outside [0, slots] is clamped to it.
 *
 * The packed rows (terms) are padded with zeros to a bucket: a multiple of
 * a granule, FILL_GRANULE rows, doubled until a product has at most
 * FILL_BUCKETS of them (and never past all of its rows). oneDNN keeps a
 * primitive, its JIT code, per shape, and making one takes about a
 * millisecond: each count of filled slots making a shape of its own cost a
 * MoE LM 663 primitives and 4.5 % of its step, and a 48-layer one some
 * 280 MB. A runtime row count (DNNL_RUNTIME_DIM_VAL, one primitive for
 * every count) is served by oneDNN 2.6's gemm:jit instead of brgemm, and
 * bench/gemm_peak.c measured it 3-12 % slower than a fixed primitive on
 * these shapes ([M,64]x[64,256], [M,128]x[128,512], f32 and bf16) and
 * 13-35 % slower with B transposed ([M,256]x[256,64]^T): fixed primitives
 * on buckets, whose zero rows cost under one granule, are faster. The
 * padding's rows of C are dropped, and its terms add zeros.
 *
 * The experts of a block are the batch entries, each with its own count
 * and B: one batched product over them would run every expert on the most
 * filled one's rows. The counts the examples meet differ too much for it
 * to pay (examples/lm.gsl: 1 to 127 of 128 rows an expert, about 85 on
 * average; bench/moe_train.gsl: 227 to 293 of 512), so each entry is one
 * product of its own. The packing buffers are kept from call to call,
 * grown as needed. gslrt_gemm_bf16_fill does the same for bf16 operands
 * (through gslrt_gemm_bf16). */
#include "internal.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define FILL_GRANULE 16 /* the smallest step between the packed rows (terms) of two buckets */
#define FILL_BUCKETS 32 /* the most buckets a product of `all` rows (terms) is run on */

/* The rows (terms) a product runs on when `kept` of its `all` are filled:
 * kept rounded up to the granule of all, at most all. */
static int64_t bucket(int64_t kept, int64_t all) {
  int64_t g = FILL_GRANULE;
  while (g * FILL_BUCKETS < all)
    g *= 2;
  int64_t padded = (kept + g - 1) / g * g;
  return padded < all ? padded : all;
}

/* The packing buffers, kept for the next call (the runtime multiplies on
 * one thread). */
static struct {
  char *buf[3]; /* packed op(A), op(B) (by depth) and C (by rows) */
  size_t len[3];
} scratch;

/* Buffer i of scratch with room for len bytes. */
static char *scratch_get(const char *name, int i, size_t len) {
  if (scratch.len[i] < len) {
    char *p = realloc(scratch.buf[i], len);
    if (!p)
      gslrt_fatal(NULL, "%s: cannot allocate %zu bytes to pack the filled slots", name, len);
    scratch.buf[i] = p;
    scratch.len[i] = len;
  }
  return scratch.buf[i];
}

/* One product of the loop below: C (f32) = op(A) op(B), batched as
 * gslrt_sgemm's, A and B in the element type of the caller. */
typedef void FillGemm(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                      const void *a, int64_t lda, int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b,
                      float *c, int64_t ldc, int64_t stride_c);

static void f32_gemm(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                     const void *a, int64_t lda, int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b,
                     float *c, int64_t ldc, int64_t stride_c) {
  gslrt_sgemm(batch, trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c);
}

static void bf16_gemm(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                      const void *a, int64_t lda, int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b,
                      float *c, int64_t ldc, int64_t stride_c) {
  gslrt_gemm_bf16(batch, trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, GSLRT_F32, ldc,
                  stride_c);
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
  bool all_full = true;
  for (int64_t j = 0; j < batch * blocks && all_full; j++)
    all_full = fill[j] >= slots;
  if (all_full) { /* every slot filled: the whole product, as the padded path computes it */
    gemm(batch, trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c);
    return;
  }
  /* the filled rows of op(A) (by rows: m x k) and their product rows (m x
   * n), or the filled terms of op(A) and op(B) (by depth: k x m, k x n),
   * packed side by side */
  char *pa = scratch_get(name, 0, (size_t)(m * k * esize) + 1);
  char *pb = depth ? scratch_get(name, 1, (size_t)(k * n * esize) + 1) : NULL;
  float *pc = depth ? NULL : (float *)scratch_get(name, 2, sizeof(float) * (size_t)(m * n) + 1);
  for (int64_t i = 0; i < batch; i++) {
    const char *ai = a + i * stride_a * esize, *bi = b + i * stride_b * esize;
    float *ci = c + i * stride_c;
    bool full = true;
    for (int64_t j = 0; j < blocks && full; j++)
      full = fill[i * blocks + j] >= slots;
    if (full) { /* every slot of this entry filled: its whole product */
      gemm(1, trans_a, trans_b, m, n, k, ai, lda, 0, bi, ldb, 0, ci, ldc, 0);
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
    int64_t padded = bucket(kept, depth ? k : m);
    if (depth) { /* op(A) = pa^T (padded x m stored), op(B) = pb (padded x n) */
      memset(pa + kept * m * esize, 0, (size_t)((padded - kept) * m * esize));
      memset(pb + kept * n * esize, 0, (size_t)((padded - kept) * n * esize));
      gemm(1, 1, 0, m, n, padded, pa, m, 0, pb, n, 0, ci, ldc, 0);
      continue;
    }
    memset(pa + kept * k * esize, 0, (size_t)((padded - kept) * k * esize));
    gemm(1, 0, trans_b, padded, n, k, pa, k, 0, bi, ldb, 0, pc, n, 0); /* every filled row at once */
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
