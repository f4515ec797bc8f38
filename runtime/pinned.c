/* pinned.c — the matrix products of a program compiled with gslc
 * --same-bits: each element of C is one chain of fused multiply-adds over
 * k in order, starting from zero,
 *
 *     c = 0;  for k = 0 .. K-1:  c = fma(a[i][k], b[k][j], c)
 *
 * whatever M, N and the batch are, wherever the element lies in C, and
 * whichever code path (vector width, edge tile) computes it: an FMA is
 * rounded once, so the chain's value is fixed by its terms and their
 * order. That is what a product on a device holding some rows or columns
 * must give for the same element on a device holding all of them; oneDNN's
 * and OpenBLAS's kernels do not (their blocking of K, their edge kernels
 * and their choice of kernel depend on the shape), so --same-bits products
 * come here, while every other program keeps them (blas.c).
 *
 * The method is GotoBLAS's, kept to what cannot change the chain: K is cut
 * into blocks of KC (a block continues the chain in C, an f32 store and
 * load being exact), B's block is packed into panels of NR columns and A's
 * rows into tiles of MR, both widened to f32 (bf16 is f32's upper half, so
 * exactly; where a term's values lie a stride apart, eight runs at a time
 * go through an 8 x 8 transpose of AVX2 registers: moves, so the same
 * bits), and a micro-kernel keeps an MR x NR tile of C in registers
 * (AVX-512: 6 x 64, 24 accumulators; a panel of fewer columns is packed
 * 16, 32 or 48 wide and has a kernel of its width). A CPU without AVX-512
 * but with AVX2 and FMA runs the panel in strips of 16 columns, a 6 x 16
 * tile in 12 ymm accumulators; one without either, the same chains with
 * scalar fmaf (about 0.5 GFLOP/s: the lm's --same-bits step took 57 times
 * the plain one that way on an AVX2 CPU). */
#include "internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PINNED_X86 1
#endif

#define MR 6   /* rows of a micro-tile */
#define NR 64  /* columns of a panel: four 16-float vectors */
#define KC 128 /* terms of a K block: a packed panel of B (KC x NR floats, 32 KiB) stays in L1 */
#define NC 512 /* columns of a B block */

static struct {
  float *a, *b, *c; /* packed A tile, packed B block, f32 C for a bf16 result */
  size_t na, nb, nc;
} pk;

static float *grow(float **p, size_t *have, size_t want) {
  if (*have < want) {
    free(*p);
    *p = aligned_alloc(64, (want * sizeof(float) + 63) / 64 * 64);
    if (!*p)
      gslrt_fatal(NULL, "the --same-bits products cannot allocate %zu bytes to pack their operands",
                  want * sizeof(float));
    *have = want;
  }
  return *p;
}

#ifdef PINNED_X86
/* dst[t * ld + r] = src[r][t] for r < 8 and t < 8 (a row past `rows`
 * gives zeros): eight rows of eight terms transposed into eight runs of
 * eight floats, each stored whole, in t's order. With ld < 8 each run
 * overwrites the previous one's tail, and the last writes 8 - ld floats
 * past dst[7 * ld + ld - 1]: the caller leaves room there. */
__attribute__((target("avx2"))) static inline void transpose8(float *dst, int64_t ld, const float *const src[8],
                                                               int rows) {
  __m256 r[8];
  for (int i = 0; i < 8; i++)
    r[i] = i < rows ? _mm256_loadu_ps(src[i]) : _mm256_setzero_ps();
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  _mm256_storeu_ps(dst + 0 * ld, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + 1 * ld, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * ld, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * ld, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * ld, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * ld, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * ld, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * ld, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* pa[t * MR + r] = widen(a[(k0 + t) * lda + i0 + r]) for r < 8, t < kc:
 * a transposed bf16 A's terms, eight values of each term's row read and
 * widened at once, each run of 8 floats stored whole in t's order (the
 * next one overwrites its tail; the last writes 8 - MR floats past the
 * tile: pack_a's room). The caller knows 8 values lie in each row. */
__attribute__((target("avx2"))) static void widen_runs8(float *pa, const uint16_t *a, int64_t lda, int64_t kc) {
  for (int64_t t = 0; t < kc; t++) {
    __m128i h = _mm_loadu_si128((const __m128i *)(a + t * lda));
    __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(pa + t * MR, _mm256_castsi256_ps(w));
  }
}

static bool can_transpose8(void) {
  static int have = -1;
  if (have < 0)
    have = __builtin_cpu_supports("avx2");
  return have;
}
#endif

/* Runs of kc terms, run r at x + r * ld (elements of esize bytes), for
 * r < n (at most 8): src[r] where run r is read as f32, in place (f32),
 * or widened into this one buffer (bf16), eight values at a time. Its
 * users (pack_b's transposed columns, then A's rows) take turns. */
static float wide[8][KC];
static void runs(const float *src[8], const void *x, int esize, int64_t ld, int n, int64_t kc) {
  for (int r = 0; r < n; r++)
    if (esize == 4) {
      src[r] = (const float *)x + r * ld;
    } else {
      gslrt_bf16_widen_n(wide[r], (const uint16_t *)x + r * ld, kc);
      src[r] = wide[r];
    }
}

/* The element `at` of an array of esize-byte elements. */
static const void *elem(const void *x, int esize, int64_t at) { return (const char *)x + at * esize; }

/* dst[t * ld + r] = src[r][t] for r < rows (at most 8) and t < kc: up to
 * eight runs of terms laid out term by term, eight terms at a time where
 * the CPU has AVX2. That path stores whole runs of 8 floats, zeros past
 * `rows`: dst[t * ld + rows .. t * ld + 8) may be written (with zeros, or
 * overwritten by the next term's run when ld < 8), so the caller leaves
 * 8 floats of room past dst[(kc - 1) * ld] and fills those past `rows`
 * after. */
static void lay_out(float *dst, int64_t ld, const float *const src[8], int rows, int64_t kc) {
  int64_t t = 0;
#ifdef PINNED_X86
  if (can_transpose8() && rows > 1) {
    const float *at[8];
    for (; t + 8 <= kc; t += 8) {
      for (int r = 0; r < rows; r++)
        at[r] = src[r] + t;
      transpose8(dst + t * ld, ld, at, rows);
    }
  }
#endif
  for (; t < kc; t++)
    for (int r = 0; r < rows; r++)
      dst[t * ld + r] = src[r][t];
}

/* A's rows i0 .. i0+rows-1, terms k0 .. k0+kc-1, packed term by term:
 * pa[t * MR + r] (rows past `rows` zero). op(A)[r][t] is a[r * lda + t],
 * or a[t * lda + r] transposed; each loop reads along memory. */
static void pack_a(float *pa, const void *a, int esize, int32_t ta, int64_t lda, int64_t i0, int rows, int64_t k0,
                   int64_t kc, int64_t m) {
#ifdef PINNED_X86
  if (ta && esize == 2 && i0 + 8 <= m && can_transpose8()) { /* 8 of op(A)'s m rows from i0: rows is MR */
    widen_runs8(pa, (const uint16_t *)a + k0 * lda + i0, lda, kc);
    return;
  }
#endif
  if (ta) { /* term t's rows lie side by side in A: copied, or widened, as a run */
    for (int64_t t = 0; t < kc; t++) {
      int64_t base = (k0 + t) * lda + i0;
      if (esize == 4)
        memcpy(pa + t * MR, (const float *)a + base, sizeof *pa * (size_t)rows);
      else
        for (int r = 0; r < rows; r++)
          pa[t * MR + r] = gslrt_bf16_widen(((const uint16_t *)a)[base + r]);
    }
  } else { /* each row's terms (widened eight at a time first, bf16) laid out eight terms at a time */
    const float *src[8];
    runs(src, elem(a, esize, i0 * lda + k0), esize, lda, rows, kc);
    lay_out(pa, MR, src, rows, kc);
  }
  if (rows < MR) /* after: lay_out's runs may cover them */
    for (int64_t t = 0; t < kc; t++)
      for (int r = rows; r < MR; r++)
        pa[t * MR + r] = 0.0f;
}

/* The width of the panel of B that holds `cols` columns (at most NR):
 * whole vectors of 16, so that a narrow product computes no more than
 * the vectors its columns fill. */
static int64_t panel_width(int64_t cols) { return cols >= NR ? NR : (cols + 15) / 16 * 16; }

/* B's terms k0 .. k0+kc-1, columns j0 .. j0+nc-1, as panels of NR columns:
 * panel p at pb + p * kc * NR, w = panel_width(its columns) floats a term,
 * pb[t * w + c] (columns past n zero). op(B)[t][j] is b[t * ldb + j], or
 * b[j * ldb + t] transposed. */
static void pack_b(float *pb, const void *b, int esize, int32_t tb, int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                   int64_t nc) {
  for (int64_t p = 0; p * NR < nc; p++) {
    float *q = pb + p * kc * NR;
    int64_t cols = nc - p * NR < NR ? nc - p * NR : NR, jp = j0 + p * NR, w = panel_width(cols);
    if (cols < w)
      for (int64_t t = 0; t < kc; t++)
        for (int64_t c = cols; c < w; c++)
          q[t * w + c] = 0.0f;
    if (tb) { /* eight columns' terms at a time (widened eight at a time first, bf16) laid out; a run of
               * fewer writes zeros past its columns, within the panel, where they are zero */
      for (int64_t c0 = 0; c0 < cols; c0 += 8) {
        int n8 = cols - c0 < 8 ? (int)(cols - c0) : 8;
        const float *src[8];
        runs(src, elem(b, esize, (jp + c0) * ldb + k0), esize, ldb, n8, kc);
        lay_out(q + c0, w, src, n8, kc);
      }
      continue;
    }
    for (int64_t t = 0; t < kc; t++) {
      int64_t base = (k0 + t) * ldb + jp;
      if (esize == 4)
        memcpy(q + t * w, (const float *)b + base, sizeof *q * (size_t)cols);
      else
        gslrt_bf16_widen_n(q + t * w, (const uint16_t *)b + base, cols);
    }
  }
}

/* The chains of an MR x w tile over kc terms (w: the panel's width),
 * continued from C (first false) or from zero: C's rows x cols corner
 * written. A's term t of row r is pa[t * ts + r * rs]: packed (ts MR, rs
 * 1), or read where it lies (see product). Scalar: any CPU. */
static void tile_scalar(const float *pa, int64_t rs, int64_t ts, const float *pb, int64_t w, int64_t kc, float *c,
                        int64_t ldc, int rows, int cols, bool first) {
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < cols; j++) {
      float acc = first ? 0.0f : c[r * ldc + j];
      for (int64_t t = 0; t < kc; t++)
        acc = fmaf(pa[t * ts + r * rs], pb[t * w + j], acc);
      c[r * ldc + j] = acc;
    }
}

#ifdef PINNED_X86
/* Row r of the tile: NV accumulators of 16 columns, named so that they
 * stay in registers (at most 24 of the 32 zmm); NV is a constant in each
 * kernel below, so the unused ones fold away. */
#define ROW_DECL(r) __m512 c##r##0, c##r##1, c##r##2, c##r##3
#define ROW_LOAD(r)                                                                        \
  do {                                                                                     \
    bool z = first || (r) >= rows;                                                         \
    c##r##0 = z ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, c + (r) * ldc);          \
    if (NV > 1)                                                                            \
      c##r##1 = z ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, c + (r) * ldc + 16);   \
    if (NV > 2)                                                                            \
      c##r##2 = z ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m2, c + (r) * ldc + 32);   \
    if (NV > 3)                                                                            \
      c##r##3 = z ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m3, c + (r) * ldc + 48);   \
  } while (0)
#define ROW_FMA(r)                                                                         \
  do {                                                                                     \
    __m512 a = _mm512_set1_ps(q[(r) * rs]);                                                \
    c##r##0 = _mm512_fmadd_ps(a, b0, c##r##0);                                             \
    if (NV > 1)                                                                            \
      c##r##1 = _mm512_fmadd_ps(a, b1, c##r##1);                                           \
    if (NV > 2)                                                                            \
      c##r##2 = _mm512_fmadd_ps(a, b2, c##r##2);                                           \
    if (NV > 3)                                                                            \
      c##r##3 = _mm512_fmadd_ps(a, b3, c##r##3);                                           \
  } while (0)
#define ROW_STORE(r)                                                                       \
  do {                                                                                     \
    if ((r) < rows) {                                                                      \
      _mm512_mask_storeu_ps(c + (r) * ldc, m0, c##r##0);                                   \
      if (NV > 1)                                                                          \
        _mm512_mask_storeu_ps(c + (r) * ldc + 16, m1, c##r##1);                            \
      if (NV > 2)                                                                          \
        _mm512_mask_storeu_ps(c + (r) * ldc + 32, m2, c##r##2);                            \
      if (NV > 3)                                                                          \
        _mm512_mask_storeu_ps(c + (r) * ldc + 48, m3, c##r##3);                            \
    }                                                                                      \
  } while (0)
#define ROWS(X) X(0); X(1); X(2); X(3); X(4); X(5)

/* The AVX-512 tile of NV vectors of 16 columns (w = 16 NV). */
#define TILE_AVX512(NAME, NVEC)                                                                                 \
  __attribute__((target("avx512f"))) static void NAME(const float *pa, int64_t rs, int64_t ts, const float *pb,  \
                                                      int64_t w, int64_t kc, float *c, int64_t ldc, int rows,   \
                                                      int cols, bool first) {                                   \
    (void)w;                                                                                                    \
    enum { NV = NVEC };                                                                                         \
    __mmask16 m[4];                                                                                             \
    for (int v = 0; v < 4; v++) {                                                                               \
      int left = cols - 16 * v;                                                                                 \
      m[v] = left >= 16 ? (__mmask16)0xffff : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);        \
    }                                                                                                           \
    __mmask16 m0 = m[0], m1 = m[1], m2 = m[2], m3 = m[3];                                                       \
    (void)m1, (void)m2, (void)m3;                                                                               \
    ROWS(ROW_DECL);                                                                                             \
    ROWS(ROW_LOAD);                                                                                             \
    for (int64_t t = 0; t < kc; t++) {                                                                          \
      const float *q = pa + t * ts, *p = pb + t * 16 * (NV);                                                    \
      __m512 b0 = _mm512_load_ps(p), b1, b2, b3;                                                                \
      if (NV > 1)                                                                                               \
        b1 = _mm512_load_ps(p + 16);                                                                            \
      if (NV > 2)                                                                                               \
        b2 = _mm512_load_ps(p + 32);                                                                            \
      if (NV > 3)                                                                                               \
        b3 = _mm512_load_ps(p + 48);                                                                            \
      ROWS(ROW_FMA);                                                                                            \
    }                                                                                                           \
    ROWS(ROW_STORE);                                                                                            \
  }

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wunused-variable"
TILE_AVX512(tile_avx512_1, 1)
TILE_AVX512(tile_avx512_2, 2)
TILE_AVX512(tile_avx512_3, 3)
TILE_AVX512(tile_avx512_4, 4)
#pragma GCC diagnostic pop
#endif

#ifdef PINNED_X86
/* The AVX2 tile (a CPU with FMA but not AVX-512): the panel in strips of
 * 16 columns, each an MR x 16 tile in 12 ymm accumulators (two vectors of
 * 8 a row), A's six terms broadcast again for each strip. Every element
 * is the same chain of single-rounding FMAs as the scalar and AVX-512
 * tiles give it. */
#define ROW2_DECL(r) __m256 c##r##0, c##r##1
#define ROW2_LOAD(r)                                                                       \
  do {                                                                                     \
    bool z = first || (r) >= rows;                                                         \
    c##r##0 = z ? _mm256_setzero_ps()                                                      \
                : whole ? _mm256_loadu_ps(cs + (r) * ldc) : _mm256_maskload_ps(cs + (r) * ldc, m0); \
    c##r##1 = z ? _mm256_setzero_ps()                                                      \
                : whole ? _mm256_loadu_ps(cs + (r) * ldc + 8)                              \
                        : _mm256_maskload_ps(cs + (r) * ldc + 8, m1);                      \
  } while (0)
#define ROW2_FMA(r)                                                                        \
  do {                                                                                     \
    __m256 a = _mm256_broadcast_ss(a##r + t * ts);                                         \
    c##r##0 = _mm256_fmadd_ps(a, b0, c##r##0);                                             \
    c##r##1 = _mm256_fmadd_ps(a, b1, c##r##1);                                             \
  } while (0)
#define ROW2_STORE(r)                                                                      \
  do {                                                                                     \
    if ((r) < rows && whole) {                                                             \
      _mm256_storeu_ps(cs + (r) * ldc, c##r##0);                                           \
      _mm256_storeu_ps(cs + (r) * ldc + 8, c##r##1);                                       \
    } else if ((r) < rows) {                                                               \
      _mm256_maskstore_ps(cs + (r) * ldc, m0, c##r##0);                                    \
      _mm256_maskstore_ps(cs + (r) * ldc + 8, m1, c##r##1);                                \
    }                                                                                      \
  } while (0)

__attribute__((target("avx2,fma"))) static void tile_avx2(const float *pa, int64_t rs, int64_t ts, const float *pb,
                                                          int64_t w, int64_t kc, float *c, int64_t ldc, int rows,
                                                          int cols, bool first) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const float *a0 = pa, *a1 = pa + rs, *a2 = pa + 2 * rs, *a3 = pa + 3 * rs, *a4 = pa + 4 * rs, *a5 = pa + 5 * rs;
  for (int64_t s = 0; s * 16 < w && s * 16 < cols; s++) {
    int left = cols - (int)s * 16;
    __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), lane);
    __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(left - 8), lane);
    float *cs = c + s * 16;
    bool whole = left >= 16; /* masked moves only at the edge: they are slow on some CPUs (AMD's) */
    ROWS(ROW2_DECL);
    ROWS(ROW2_LOAD);
    for (int64_t t = 0; t < kc; t++) {
      const float *p = pb + t * w + s * 16;
      __m256 b0 = _mm256_load_ps(p), b1 = _mm256_load_ps(p + 8);
      ROWS(ROW2_FMA);
    }
    ROWS(ROW2_STORE);
  }
}
#endif

typedef void Tile(const float *, int64_t, int64_t, const float *, int64_t, int64_t, float *, int64_t, int, int, bool);

/* The tiles the products run: 2 AVX-512, 1 AVX2 with FMA, 0 scalar; -1
 * until the first product looks. */
static int tiles = -1;

int gslrt_pinned_tiles(int at_most) {
  static int widest = -1; /* what this CPU can run */
  if (widest < 0) {
    widest = 0;
#ifdef PINNED_X86
    widest = __builtin_cpu_supports("avx512f")                                   ? 2
             : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1
                                                                                : 0;
#endif
  }
  tiles = at_most >= 0 && at_most < widest ? at_most : widest;
  return tiles;
}

/* The kernel for a panel w floats wide (16 to NR). */
static Tile *tile_kernel(int64_t w) {
  if (tiles < 0)
    gslrt_pinned_tiles(-1);
#ifdef PINNED_X86
  if (tiles == 2) {
    static Tile *const by_vectors[4] = {tile_avx512_1, tile_avx512_2, tile_avx512_3, tile_avx512_4};
    return by_vectors[w / 16 - 1];
  }
  if (tiles == 1)
    return tile_avx2;
#endif
  (void)w;
  return tile_scalar;
}

/* One product: C (f32, m x n, ldc) = op(A) op(B). */
static void product(const void *a, const void *b, int esize, int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k,
                    int64_t lda, int64_t ldb, float *c, int64_t ldc) {
  if (k == 0) {
    for (int64_t i = 0; i < m; i++)
      memset(c + i * ldc, 0, sizeof *c * (size_t)n);
    return;
  }
  float *pa = grow(&pk.a, &pk.na, (size_t)MR * KC + 8); /* lay_out's room */
  if (tiles < 0)
    gslrt_pinned_tiles(-1);
  float *pb = grow(&pk.b, &pk.nb, (size_t)KC * ((NC + NR - 1) / NR * NR));
  for (int64_t j0 = 0; j0 < n; j0 += NC) {
    int64_t nc = n - j0 < NC ? n - j0 : NC;
    for (int64_t k0 = 0; k0 < k; k0 += KC) {
      int64_t kc = k - k0 < KC ? k - k0 : KC;
      pack_b(pb, b, esize, tb, ldb, k0, kc, j0, nc);
      for (int64_t i0 = 0; i0 < m; i0 += MR) {
        int rows = m - i0 < MR ? (int)(m - i0) : MR;
        /* A's six rows read where they lie by the AVX2 and scalar tiles:
         * f32 rows in place, bf16 rows widened each as a run; else
         * packed (a transposed A, the AVX-512 tiles, the edge rows).
         * The chains are the same. */
        const float *qa = pa;
        int64_t rs = 1, ts = MR;
        if (tiles < 2 && rows == MR && !ta) {
          const float *src[8];
          runs(src, elem(a, esize, i0 * lda + k0), esize, lda, MR, kc);
          qa = src[0], rs = esize == 4 ? lda : KC, ts = 1;
        } else
          pack_a(pa, a, esize, ta, lda, i0, rows, k0, kc, m);
        for (int64_t p = 0; p * NR < nc; p++) {
          int cols = nc - p * NR < NR ? (int)(nc - p * NR) : NR;
          int64_t w = panel_width(cols);
          tile_kernel(w)(qa, rs, ts, pb + p * kc * NR, w, kc, c + i0 * ldc + j0 + p * NR, ldc, rows, cols, k0 == 0);
        }
      }
    }
  }
}

void gslrt_sgemm_pinned(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                        const float *a, int64_t lda, int64_t stride_a, const float *b, int64_t ldb, int64_t stride_b,
                        float *c, int64_t ldc, int64_t stride_c) {
  for (int64_t i = 0; i < batch; i++)
    product(a + i * stride_a, b + i * stride_b, 4, trans_a, trans_b, m, n, k, lda, ldb, c + i * stride_c, ldc);
}

void gslrt_gemm_bf16_pinned(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                            const uint16_t *a, int64_t lda, int64_t stride_a, const uint16_t *b, int64_t ldb,
                            int64_t stride_b, void *c, int32_t c_dtype, int64_t ldc, int64_t stride_c) {
  for (int64_t i = 0; i < batch; i++) {
    if (c_dtype == GSLRT_F32) {
      product(a + i * stride_a, b + i * stride_b, 2, trans_a, trans_b, m, n, k, lda, ldb,
              (float *)c + i * stride_c, ldc);
      continue;
    }
    /* a bf16 result: each element rounded once from its f32 chain */
    float *t = grow(&pk.c, &pk.nc, (size_t)(m * n) + 1);
    product(a + i * stride_a, b + i * stride_b, 2, trans_a, trans_b, m, n, k, lda, ldb, t, n);
    uint16_t *ci = (uint16_t *)c + i * stride_c;
    for (int64_t r = 0; r < m; r++)
      gslrt_bf16_round_n(ci + r * ldc, t + r * n, n);
  }
}
