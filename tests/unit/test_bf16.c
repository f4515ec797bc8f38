/* test_bf16.c — the runtime's bf16 pieces that need no MPI (issue 19):
 * rounding f32 to bf16 against bit patterns worked out by hand (ties to
 * even, overflow to infinity, NaN kept, subnormals), widening, .npy files
 * of bf16 arrays (written as float32 widened exactly: the bytes parsed
 * here, and read by numpy when /usr/bin/python3 has it; float32 files read
 * into bf16 tiles, rounded; int32 files refused), and moe routing
 * (gslrt_dispatch, gslrt_combine) on bf16 and mixed rows against plain
 * loops written here. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests.h"

static float f32_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* f32 bit pattern in, bf16 bit pattern out, each worked out by hand. */
static void test_round(void) {
  static const struct {
    uint32_t in;
    uint16_t out;
  } cases[] = {
      {0x3f800000, 0x3f80}, /* 1.0 */
      {0x3f808000, 0x3f80}, /* 1 + 2^-8: the tie between 1 and 1 + 2^-7, to the even 1 */
      {0x3f818000, 0x3f82}, /* 1 + 3 2^-8: the tie between 1 + 2^-7 and 1 + 2^-6, to the even 0x3f82 */
      {0x3f808001, 0x3f81}, /* just past the tie: up */
      {0x3f807fff, 0x3f80}, /* just below it: down */
      {0xbf818000, 0xbf82}, /* -(1 + 3 2^-8): the same, sign kept */
      {0x7f7fffff, 0x7f80}, /* the largest f32 rounds past bf16's largest: inf */
      {0x7f7f7fff, 0x7f7f}, /* below the tie with infinity: bf16's largest, 0x7f7f */
      {0x7f7f8000, 0x7f80}, /* the tie between 0x7f7f (odd) and infinity: infinity */
      {0x7f800000, 0x7f80}, /* inf */
      {0xff800000, 0xff80}, /* -inf */
      {0x00000000, 0x0000}, /* 0 */
      {0x80000000, 0x8000}, /* -0 */
      {0x00000001, 0x0000}, /* the smallest subnormal f32: 0 */
      {0x00008000, 0x0000}, /* subnormal, the tie between 0 and 0x0001: to the even 0 */
      {0x00018000, 0x0002}, /* subnormal, the tie between 0x0001 and 0x0002: to 0x0002 */
      {0x0000ffff, 0x0001}, /* subnormal, past the tie: up */
      {0x477fe000, 0x4780}, /* 65504 (f16's largest): between 65280 and 65536, nearer 65536 */
      {0x40200000, 0x4020}, /* 2.5: exact */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = gslrt_bf16_round(f32_of(cases[i].in));
    if (got != cases[i].out)
      fprintf(stderr, "\n  round(0x%08x) = 0x%04x, expected 0x%04x", cases[i].in, got, cases[i].out);
    CU_ASSERT_EQUAL(got, cases[i].out);
  }
  /* NaN stays NaN, quiet, sign kept: a quiet one, a signaling one whose
   * payload is all in the dropped bits, a negative one */
  static const uint32_t nans[] = {0x7fc00000, 0x7f800001, 0xff800001, 0x7fffffff};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
    uint16_t h = gslrt_bf16_round(f32_of(nans[i]));
    CU_ASSERT((h & 0x7f80) == 0x7f80 && (h & 0x0040) != 0);
    CU_ASSERT_EQUAL(h >> 15, nans[i] >> 31);
    CU_ASSERT(isnan(gslrt_bf16_widen(h)));
  }
}

/* Widening is exact, and every bf16 value rounds back to itself. */
static void test_widen(void) {
  CU_ASSERT_EQUAL(gslrt_bf16_widen(0x3f80), 1.0f);
  CU_ASSERT_EQUAL(gslrt_bf16_widen(0xc020), -2.5f);
  CU_ASSERT_EQUAL(gslrt_bf16_widen(0x0001), ldexpf(1.0f, -133)); /* the smallest bf16 subnormal */
  CU_ASSERT_EQUAL(gslrt_bf16_widen(0x7f7f), f32_of(0x7f7f0000));
  CU_ASSERT(isinf(gslrt_bf16_widen(0xff80)) && gslrt_bf16_widen(0xff80) < 0);
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = gslrt_bf16_widen((uint16_t)h);
    uint16_t back = gslrt_bf16_round(f);
    if (bits_of(f) != h << 16 || (!isnan(f) && back != h) || (isnan(f) && back != (h | 0x40)))
      bad++;
  }
  CU_ASSERT_EQUAL(bad, 0);
  uint16_t h[3] = {0x3f80, 0x3f81, 0xbf82}, r[3];
  float w[3];
  gslrt_bf16_widen_n(w, h, 3);
  gslrt_bf16_round_n(r, w, 3);
  CU_ASSERT(w[0] == 1.0f && w[1] == 1.0f + 0x1p-7f && w[2] == -(1.0f + 0x1p-6f));
  CU_ASSERT(!memcmp(r, h, sizeof h));
}

/* The runs' conversions (eight at a time, the rest one by one) give each
 * element as the scalar ones above do: every bf16 widened, and for every
 * bf16 bit pattern the f32s just below, at and just past its rounding ties
 * (NaNs, infinities and subnormals among them) rounded, in runs whose
 * lengths and starts leave a tail of every length. */
static void test_runs(void) {
  enum { N = 0x10000, LOWS = 6 };
  static const uint16_t lows[LOWS] = {0x0000, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1234};
  uint16_t *h = malloc(N * sizeof *h), *r = malloc(LOWS * N * sizeof *r);
  float *w = malloc(N * sizeof *w), *f = malloc(LOWS * N * sizeof *f);
  CU_ASSERT_FATAL(h && r && w && f);
  for (uint32_t i = 0; i < N; i++)
    h[i] = (uint16_t)i;
  int bad = 0;
  for (int64_t start = 0; start < 9; start++) {
    memset(w, 0xff, N * sizeof *w);
    gslrt_bf16_widen_n(w + start, h + start, N - 2 * start);
    for (int64_t i = start; i < N - start; i++)
      bad += bits_of(w[i]) != (uint32_t)h[i] << 16;
  }
  CU_ASSERT_EQUAL(bad, 0);
  for (uint32_t i = 0; i < N; i++)
    for (int j = 0; j < LOWS; j++)
      f[i * LOWS + j] = f32_of(i << 16 | lows[j]);
  for (int64_t start = 0; start < 9; start++) {
    memset(r, 0xab, LOWS * N * sizeof *r);
    gslrt_bf16_round_n(r + start, f + start, LOWS * N - 2 * start);
    for (int64_t i = start; i < LOWS * N - start; i++)
      bad += r[i] != gslrt_bf16_round(f[i]);
  }
  CU_ASSERT_EQUAL(bad, 0);
  free(h);
  free(r);
  free(w);
  free(f);
}

/* A matrix widened into its transpose, and an f32 one transposed: every
 * (i, j) of shapes whose rows and columns leave every edge (0-7 past a
 * block of 8) and leading dimensions wider than the matrix, each
 * element's bits the bf16's shifted (the f32's own), and nothing written
 * outside the transpose (the gaps keep their filler). */
static void test_widen_t(void) {
  enum { MAXD = 27, LDS = 31, LDD = 29 };
  static uint16_t src[MAXD * LDS];
  static float src32[MAXD * LDS], dst[MAXD * LDD];
  int bad = 0;
  for (int i = 0; i < MAXD * LDS; i++) {
    src[i] = (uint16_t)(i * 2654435761u >> 13);
    src32[i] = f32_of(i * 2654435761u);
  }
  for (int rows = 1; rows <= MAXD; rows++)
    for (int cols = 1; cols <= MAXD; cols++) {
      memset(dst, 0xff, sizeof dst);
      gslrt_bf16_widen_t(dst, LDD, src, LDS, rows, cols);
      for (int j = 0; j < MAXD; j++)
        for (int i = 0; i < LDD; i++) {
          uint32_t want = j < cols && i < rows ? (uint32_t)src[i * LDS + j] << 16 : 0xffffffffu;
          bad += bits_of(dst[j * LDD + i]) != want;
        }
      memset(dst, 0xff, sizeof dst);
      gslrt_f32_transpose(dst, LDD, src32, LDS, rows, cols);
      for (int j = 0; j < MAXD; j++)
        for (int i = 0; i < LDD; i++) {
          uint32_t want = j < cols && i < rows ? bits_of(src32[i * LDS + j]) : 0xffffffffu;
          bad += bits_of(dst[j * LDD + i]) != want;
        }
    }
  CU_ASSERT_EQUAL(bad, 0);
}

/* A bf16 [2, 3] array written by gslrt_npy_write: a '<f4' file whose data
 * are the widened values, bit for bit; numpy reads it as float32. */
static void test_npy_write(void) {
  static const uint16_t h[6] = {0x3f80, 0x3f81, 0xc020, 0x7f7f, 0x0001, 0xff80};
  static const int64_t shape[2] = {2, 3};
  char err[GSLRT_ERRLEN], head[128];
  const char *p = tests_tmp_path("b.npy");
  CU_ASSERT_EQUAL_FATAL(gslrt_npy_write(p, GSLRT_BF16, 2, shape, h, err, sizeof err), 0);
  gslrt_npy hd;
  CU_ASSERT_EQUAL_FATAL(gslrt_npy_read_header(p, &hd, err, sizeof err), 0);
  CU_ASSERT_EQUAL(hd.dtype, GSLRT_F32);
  CU_ASSERT(hd.rank == 2 && hd.shape[0] == 2 && hd.shape[1] == 3);
  CU_ASSERT_EQUAL(hd.data_offset % 64, 0);
  FILE *f = fopen(p, "rb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  unsigned char all[256 + 1];
  size_t n = fread(all, 1, sizeof all, f);
  fclose(f);
  CU_ASSERT_FATAL(hd.data_offset < 256 - 24);
  CU_ASSERT_EQUAL(n, (size_t)hd.data_offset + 24); /* 6 elements of 4 bytes after the header */
  memcpy(head, all + 10, sizeof head - 1);
  head[sizeof head - 1] = 0;
  CU_ASSERT_PTR_NOT_NULL(strstr(head, "'descr': '<f4'"));
  for (int i = 0; i < 6; i++) {
    const unsigned char *b = all + hd.data_offset + 4 * i;
    uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    CU_ASSERT_EQUAL(u, (uint32_t)h[i] << 16);
  }
  /* numpy, when this machine's python has it: the values as float32 */
  if (access("/usr/bin/python3", X_OK) == 0 && system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") == 0) {
    char cmd[512];
    const char *py = tests_tmp_path("check.py");
    FILE *s = fopen(py, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    fputs("import sys, numpy as np\n"
          "a = np.load(sys.argv[1])\n"
          "want = np.array([[0x3f80, 0x3f81, 0xc020], [0x7f7f, 0x0001, 0xff80]], np.uint32) << 16\n"
          "sys.exit(0 if a.dtype == np.float32 and a.shape == (2, 3) and (a.view(np.uint32) == want).all() else 1)\n",
          s);
    fclose(s);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s", py, p);
    CU_ASSERT_EQUAL(system(cmd), 0);
  }
}

/* A float32 file read into bf16 tiles, each element rounded; an int32 file
 * refused. */
static void test_npy_read(void) {
  static const uint32_t in[8] = {0x3f800000, 0x3f808000, 0x3f818000, 0x7f7fffff,
                                 0xc0200000, 0x00018000, 0x477fe000, 0x3f808001};
  static const uint16_t want[8] = {0x3f80, 0x3f80, 0x3f82, 0x7f80, 0xc020, 0x0002, 0x4780, 0x3f81};
  static const int64_t shape[2] = {2, 4};
  char err[GSLRT_ERRLEN];
  const char *p = tests_tmp_path("f.npy");
  CU_ASSERT_EQUAL_FATAL(gslrt_npy_write(p, GSLRT_F32, 2, shape, in, err, sizeof err), 0);
  gslrt_npy h;
  CU_ASSERT_EQUAL_FATAL(gslrt_npy_read_header(p, &h, err, sizeof err), 0);
  uint16_t out[8];
  int64_t off[2] = {0, 0};
  memset(out, 0xff, sizeof out);
  CU_ASSERT_EQUAL(gslrt_npy_read_tile_as(p, &h, off, shape, out, GSLRT_BF16, err, sizeof err), 0);
  CU_ASSERT(!memcmp(out, want, sizeof want));
  /* a tile: column 1..3 of row 1 */
  int64_t toff[2] = {1, 1}, tcnt[2] = {1, 3};
  memset(out, 0xff, sizeof out);
  CU_ASSERT_EQUAL(gslrt_npy_read_tile_as(p, &h, toff, tcnt, out, GSLRT_BF16, err, sizeof err), 0);
  CU_ASSERT(out[0] == want[5] && out[1] == want[6] && out[2] == want[7] && out[3] == 0xffff);
  /* float32 into f32 stays as it is */
  float f[8];
  CU_ASSERT_EQUAL(gslrt_npy_read_tile_as(p, &h, off, shape, f, GSLRT_F32, err, sizeof err), 0);
  CU_ASSERT(!memcmp(f, in, sizeof f));
  /* int32 into bf16, float32 into i32: refused, naming both */
  static const int32_t ints[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const char *q = tests_tmp_path("i.npy");
  CU_ASSERT_EQUAL_FATAL(gslrt_npy_write(q, GSLRT_I32, 2, shape, ints, err, sizeof err), 0);
  gslrt_npy hi;
  CU_ASSERT_EQUAL_FATAL(gslrt_npy_read_header(q, &hi, err, sizeof err), 0);
  CU_ASSERT_EQUAL(gslrt_npy_read_tile_as(q, &hi, off, shape, out, GSLRT_BF16, err, sizeof err), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "holds int32, which cannot be read as bf16"));
  CU_ASSERT_EQUAL(gslrt_npy_read_tile_as(p, &h, off, shape, out, GSLRT_I32, err, sizeof err), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "holds float32, which cannot be read as i32"));
}

/* moe routing on bf16: E = 3 experts, G = 2 groups, C = 2 slots, M = 5,
 * S = 3 tokens, K = 2 choices, some dropped (slot -1 or C). */
#define E 3
#define G 2
#define C 2
#define M 5
#define S 3
#define K 2

static const int32_t expert[G * S * K] = {0, 1, 2, 0, 1, 2, /* group 0 */ 2, 2, 0, 1, 1, 0};
static const int32_t slot[G * S * K] = {0, 0, 0, 1, 1, 2, /* group 0 */ 0, 1, 0, -1, 0, 1};

static float value(int i, int salt) { return (float)((i * 37 + salt * 11) % 23 - 11) / 7.0f; }

static void test_routing(void) {
  gslrt_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  uint16_t x[G * S * M], out[E * G * C * M], want[E * G * C * M], y[E * G * C * M], comb[G * S * M];
  float weight[G * S * K], yf[E * G * C * M], combf[G * S * M];
  for (int i = 0; i < G * S * M; i++)
    x[i] = gslrt_bf16_round(value(i, 1));
  for (int i = 0; i < G * S * K; i++)
    weight[i] = value(i, 2) / 3.0f;
  for (int i = 0; i < E * G * C * M; i++)
    y[i] = gslrt_bf16_round(value(i, 3)), yf[i] = value(i, 4);
  for (int weighted = 0; weighted < 2; weighted++) {
    /* the reference: every row zero, then each kept choice's row copied, or w * x rounded */
    memset(want, 0, sizeof want);
    for (int g = 0; g < G; g++)
      for (int s = 0; s < S; s++)
        for (int k = 0; k < K; k++) {
          int r = (g * S + s) * K + k, e = expert[r], c = slot[r];
          if (c < 0 || c >= C)
            continue;
          for (int m = 0; m < M; m++) {
            uint16_t xv = x[(g * S + s) * M + m];
            want[((e * G + g) * C + c) * M + m] =
                weighted ? gslrt_bf16_round(weight[r] * gslrt_bf16_widen(xv)) : xv;
          }
        }
    memset(out, 0xaa, sizeof out);
    gslrt_dispatch(&ctx, out, x, GSLRT_BF16, expert, slot, weighted ? weight : NULL, E, G, C, M, S, K);
    CU_ASSERT(!memcmp(out, want, sizeof want));
  }
  /* combine, y bf16 or f32 into out bf16 or f32: the sum in f32 in choice
   * order, rounded once for a bf16 out */
  for (int yd = 0; yd < 2; yd++)
    for (int od = 0; od < 2; od++) {
      int bad = 0;
      memset(comb, 0xaa, sizeof comb);
      memset(combf, 0xaa, sizeof combf);
      gslrt_combine(&ctx, od ? (void *)comb : (void *)combf, od ? GSLRT_BF16 : GSLRT_F32,
                    yd ? (void *)y : (void *)yf, yd ? GSLRT_BF16 : GSLRT_F32, expert, slot, weight, E, G, C, M, S,
                    K);
      for (int g = 0; g < G; g++)
        for (int s = 0; s < S; s++)
          for (int m = 0; m < M; m++) {
            float sum = 0;
            for (int k = 0; k < K; k++) {
              int r = (g * S + s) * K + k, e = expert[r], c = slot[r];
              if (c < 0 || c >= C)
                continue;
              int at = ((e * G + g) * C + c) * M + m;
              sum += weight[r] * (yd ? gslrt_bf16_widen(y[at]) : yf[at]);
            }
            int at = (g * S + s) * M + m;
            bad += od ? comb[at] != gslrt_bf16_round(sum) : bits_of(combf[at]) != bits_of(sum);
          }
      CU_ASSERT_EQUAL(bad, 0);
    }
}

void add_bf16_tests(void) {
  CU_pSuite s = tests_suite("bf16");
  tests_add(s, "rounding to bf16", test_round);
  tests_add(s, "widening", test_widen);
  tests_add(s, "runs widened and rounded as one by one", test_runs);
  tests_add(s, "a matrix widened into its transpose, and an f32 one transposed", test_widen_t);
  tests_add(s, "npy write of bf16", test_npy_write);
  tests_add(s, "npy read into bf16", test_npy_read);
  tests_add(s, "moe routing on bf16", test_routing);
}
