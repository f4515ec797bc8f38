/* test_runtime.c — the runtime's pieces that need no MPI: Philox against
 * Random123's known answers, the draws of gslrt_rng_fill (recipe, tile
 * invariance, moments), .npy reading and writing (exact header bytes, tiles,
 * malformed files), gslrt_sgemm and gslrt_gemm_bf16 against a triple loop
 * (through oneDNN and through OpenBLAS, and the primitive cache), mesh tiles, block
 * indices, packing for the collectives and groups of one device,
 * generation's choice of a token, the option parser with each of its
 * usage errors, and the checkpoint directory's layout (ckdir.c: names,
 * entries, the newest, a manifest's run, on a directory made by hand).
 * Expected values are computed
 * independently of the code under test (published vectors, hand-written
 * bytes, naive loops). */
#include "internal.h"
#include "ckdir.h"

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests.h"

#define TWO_M24 (1.0 / 16777216.0)

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(fwrite(data, 1, n, f), n);
  fclose(f);
}

/* A v1.0 file with the given header text and n zero data bytes. */
static const char *npy_with_header(const char *name, const char *text, size_t n) {
  unsigned char buf[512] = {0};
  size_t len = strlen(text);
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (unsigned char)len, buf[9] = (unsigned char)(len >> 8);
  memcpy(buf + 10, text, len);
  const char *p = tests_tmp_path(name);
  write_bytes(p, buf, 10 + len + n);
  return p;
}

/* ---- Philox and the draws ------------------------------------------------ */

static void test_philox_kat(void) {
  /* Random123 tests/kat_vectors, "philox4x32 10" lines. */
  static const uint32_t v[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1},
  };
  for (int t = 0; t < 3; t++) {
    uint32_t out[4];
    gslrt_philox(v[t], v[t] + 4, out);
    for (int i = 0; i < 4; i++)
      CU_ASSERT_EQUAL(out[i], v[t][6 + i]);
  }
}

static void test_rng_recipe(void) {
  /* seed 0, stream 0, step 0, index 0: the counter and key are all zero, so
   * the words are the first known answer. */
  double u = gslrt_rng_uniform01(0, 0, 0, 0);
  CU_ASSERT_EQUAL(u, 0x6627e8 * TWO_M24);
  double z = gslrt_rng_normal01(0, 0, 0, 0);
  double u1 = (0x6627e8 + 1) * TWO_M24, u2 = 0xe169c5 * TWO_M24;
  CU_ASSERT_DOUBLE_EQUAL(z, sqrt(-2 * log(u1)) * cos(2 * 3.14159265358979323846 * u2), 1e-15);
  /* All ones: index 2^64-1, step -1 (the params' sentinel), stream and seed all ones. */
  CU_ASSERT_EQUAL(gslrt_rng_uniform01(UINT64_MAX, 0xffffffff, -1, UINT64_MAX), 0x408f27 * TWO_M24);
  /* Through gslrt_rng_fill: element 0 of uniform(-1, 3) and normal(std 2). */
  gslrt_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  int64_t shape[1] = {1};
  float f;
  gslrt_rng_fill(&ctx, &f, GSLRT_UNIFORM, -1, 3, 0, 0, 1, shape, NULL, shape);
  CU_ASSERT_EQUAL(f, (float)(-1 + 4 * (0x6627e8 * TWO_M24)));
  gslrt_rng_fill(&ctx, &f, GSLRT_NORMAL, 2, 0, 0, 0, 1, shape, NULL, shape);
  CU_ASSERT_EQUAL(f, (float)(2 * z));
  /* The counter layout: element i = 5 of stream 9 at step 4 with seed 2^32 + 3. */
  ctx.seed = (1ull << 32) + 3;
  int64_t big[2] = {2, 3}, off[2] = {1, 2}, one[2] = {1, 1};
  uint32_t ctr[4] = {5, 0, 4, 9}, key[2] = {3, 1}, out[4];
  gslrt_philox(ctr, key, out);
  gslrt_rng_fill(&ctx, &f, GSLRT_UNIFORM, 0, 1, 9, 4, 2, big, off, one);
  CU_ASSERT_EQUAL(f, (float)((out[0] >> 8) * TWO_M24));
}

/* gsl_eval's keys GSLRT_EVAL_KEY + j draw with counter word 3 = stream ^
 * 2^30 (the key's high word folded in), not as step j; steps below 2^32
 * and the params' -1 keep {lo32(i), hi32(i), (uint32_t)s, stream}. */
static void test_rng_eval_key(void) {
  uint32_t key[2] = {5, 0}, out[4];
  uint32_t eval_ctr[4] = {3, 0, 2, 7u ^ 0x40000000u}, step_ctr[4] = {3, 0, 2, 7};
  uint32_t param_ctr[4] = {3, 0, 0xffffffffu, 7};
  gslrt_philox(eval_ctr, key, out);
  CU_ASSERT_EQUAL(gslrt_rng_uniform01(5, 7, GSLRT_EVAL_KEY + 2, 3), (out[0] >> 8) * TWO_M24);
  gslrt_philox(step_ctr, key, out);
  CU_ASSERT_EQUAL(gslrt_rng_uniform01(5, 7, 2, 3), (out[0] >> 8) * TWO_M24);
  CU_ASSERT_NOT_EQUAL(gslrt_rng_uniform01(5, 7, GSLRT_EVAL_KEY + 2, 3), gslrt_rng_uniform01(5, 7, 2, 3));
  gslrt_philox(param_ctr, key, out);
  CU_ASSERT_EQUAL(gslrt_rng_uniform01(5, 7, -1, 3), (out[0] >> 8) * TWO_M24);
}

static void test_rng_tiles(void) {
  gslrt_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.seed = 42;
  int64_t g[3] = {4, 6, 5}, off[3] = {1, 2, 0}, loc[3] = {2, 3, 5}, off2[3] = {2, 0, 3},
          loc2[3] = {2, 6, 2};
  float whole[120], tile[30], tile2[24];
  for (int dist = 0; dist < 2; dist++) {
    gslrt_rng_fill(&ctx, whole, dist, 0.5, 2, 7, 3, 3, g, NULL, g);
    gslrt_rng_fill(&ctx, tile, dist, 0.5, 2, 7, 3, 3, g, off, loc);
    gslrt_rng_fill(&ctx, tile2, dist, 0.5, 2, 7, 3, 3, g, off2, loc2);
    int same = 1, e = 0;
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 3; j++)
        for (int k = 0; k < 5; k++)
          same &= tile[e++] == whole[((1 + i) * 6 + 2 + j) * 5 + k];
    e = 0;
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 6; j++)
        for (int k = 0; k < 2; k++)
          same &= tile2[e++] == whole[((2 + i) * 6 + j) * 5 + 3 + k];
    CU_ASSERT(same);
  }
  /* A padded tile (uneven cuts, gslrt.h): [4, 6, 5] cut 3 ways on dim 1
   * and 2 on dim 2 gives tiles of [4, 2, 3]; the last block, at offset
   * [0, 4, 3], holds 2 x 2 real elements a row and draws nothing in its
   * padding (k = 2 of each row), which is 0 */
  int64_t off3[3] = {0, 4, 3}, loc3[3] = {4, 2, 3};
  float tile3[24];
  for (int dist = 0; dist < 2; dist++) {
    gslrt_rng_fill(&ctx, whole, dist, 0.5, 2, 7, 3, 3, g, NULL, g);
    for (int i = 0; i < 24; i++)
      tile3[i] = 99;
    gslrt_rng_fill(&ctx, tile3, dist, 0.5, 2, 7, 3, 3, g, off3, loc3);
    int same = 1, e = 0;
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 2; j++)
        for (int k = 0; k < 3; k++, e++)
          same &= k < 2 ? tile3[e] == whole[(i * 6 + 4 + j) * 5 + 3 + k] : tile3[e] == 0.0f;
    CU_ASSERT(same);
  }
  /* A different step or stream gives different numbers. */
  float other[120];
  gslrt_rng_fill(&ctx, other, GSLRT_UNIFORM, 0, 1, 7, 4, 3, g, NULL, g);
  gslrt_rng_fill(&ctx, whole, GSLRT_UNIFORM, 0, 1, 7, 3, 3, g, NULL, g);
  CU_ASSERT(memcmp(other, whole, sizeof whole) != 0);
  gslrt_rng_fill(&ctx, other, GSLRT_UNIFORM, 0, 1, 8, 3, 3, g, NULL, g);
  CU_ASSERT(memcmp(other, whole, sizeof whole) != 0);
}

static void test_rng_moments(void) {
  enum { N = 100000 };
  gslrt_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.seed = 1234;
  float *v = malloc(N * sizeof *v);
  CU_ASSERT_PTR_NOT_NULL_FATAL(v);
  int64_t shape[1] = {N};
  gslrt_rng_fill(&ctx, v, GSLRT_UNIFORM, 0, 1, 1, 0, 1, shape, NULL, shape);
  double sum = 0, sq = 0;
  int in_range = 1;
  for (int i = 0; i < N; i++) {
    in_range &= v[i] >= 0 && v[i] < 1;
    sum += v[i];
  }
  CU_ASSERT(in_range);
  CU_ASSERT(fabs(sum / N - 0.5) < 0.01);
  gslrt_rng_fill(&ctx, v, GSLRT_UNIFORM, -2, 3, 1, 0, 1, shape, NULL, shape);
  in_range = 1;
  for (int i = 0; i < N; i++)
    in_range &= v[i] >= -2 && v[i] < 3;
  CU_ASSERT(in_range);
  gslrt_rng_fill(&ctx, v, GSLRT_NORMAL, 1, 0, 2, 0, 1, shape, NULL, shape);
  sum = 0;
  for (int i = 0; i < N; i++)
    sum += v[i], sq += (double)v[i] * v[i];
  double mean = sum / N, sd = sqrt(sq / N - mean * mean);
  CU_ASSERT(fabs(mean) < 0.02);
  CU_ASSERT(fabs(sd - 1) < 0.02);
  gslrt_rng_fill(&ctx, v, GSLRT_NORMAL, 0.02, 0, 2, 0, 1, shape, NULL, shape);
  sq = 0;
  for (int i = 0; i < N; i++)
    sq += (double)v[i] * v[i];
  CU_ASSERT(fabs(sqrt(sq / N) - 0.02) < 0.001);
  free(v);
}

/* ---- .npy ---------------------------------------------------------------- */

static void check_header_bytes(const char *path, const char *dict, size_t datalen) {
  unsigned char buf[256];
  FILE *f = fopen(path, "rb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  CU_ASSERT_EQUAL_FATAL(n, 128 + datalen);
  CU_ASSERT(memcmp(buf, "\x93NUMPY\x01\x00\x76\x00", 10) == 0);
  CU_ASSERT(memcmp(buf + 10, dict, strlen(dict)) == 0);
  int pad = 1;
  for (size_t i = 10 + strlen(dict); i < 127; i++)
    pad &= buf[i] == ' ';
  CU_ASSERT(pad);
  CU_ASSERT_EQUAL(buf[127], '\n');
}

static void test_npy_roundtrip(void) {
  char err[GSLRT_ERRLEN];
  int64_t shape[2] = {2, 3}, off[2] = {0, 0};
  float f[6] = {1.5f, -2, 3e-7f, 4, 5, 6}, g[6];
  int32_t i[6] = {1, -2, 3, 2147483647, -2147483647 - 1, 0}, j[6];
  gslrt_npy h;
  const char *pf = tests_tmp_path("f.npy"), *pi = tests_tmp_path("i.npy");
  CU_ASSERT_EQUAL(gslrt_npy_write(pf, GSLRT_F32, 2, shape, f, err, sizeof err), 0);
  check_header_bytes(pf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
  CU_ASSERT_EQUAL(gslrt_npy_read_header(pf, &h, err, sizeof err), 0);
  CU_ASSERT_EQUAL(h.dtype, GSLRT_F32);
  CU_ASSERT_EQUAL(h.rank, 2);
  CU_ASSERT_EQUAL(h.shape[0], 2);
  CU_ASSERT_EQUAL(h.shape[1], 3);
  CU_ASSERT_EQUAL(h.data_offset, 128);
  CU_ASSERT_EQUAL(gslrt_npy_read_tile(pf, &h, off, shape, g, err, sizeof err), 0);
  CU_ASSERT(memcmp(f, g, sizeof f) == 0);
  CU_ASSERT_EQUAL(gslrt_npy_write(pi, GSLRT_I32, 2, shape, i, err, sizeof err), 0);
  check_header_bytes(pi, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", 24);
  CU_ASSERT_EQUAL(gslrt_npy_read_header(pi, &h, err, sizeof err), 0);
  CU_ASSERT_EQUAL(h.dtype, GSLRT_I32);
  CU_ASSERT_EQUAL(gslrt_npy_read_tile(pi, &h, off, shape, j, err, sizeof err), 0);
  CU_ASSERT(memcmp(i, j, sizeof i) == 0);
  /* One dimension writes "(3,)", a scalar "()". */
  int64_t three[1] = {3};
  CU_ASSERT_EQUAL(gslrt_npy_write(pf, GSLRT_F32, 1, three, f, err, sizeof err), 0);
  check_header_bytes(pf, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 12);
  CU_ASSERT_EQUAL(gslrt_npy_write(pf, GSLRT_F32, 0, three, f, err, sizeof err), 0);
  check_header_bytes(pf, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4);
  CU_ASSERT_EQUAL(gslrt_npy_read_header(pf, &h, err, sizeof err), 0);
  CU_ASSERT_EQUAL(h.rank, 0);
  /* A failed write leaves neither the file nor its .tmp. */
  CU_ASSERT_EQUAL(gslrt_npy_write("/nonexistent-dir/x.npy", GSLRT_F32, 1, three, f, err, sizeof err), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "/nonexistent-dir/x.npy.tmp"));
  CU_ASSERT_EQUAL(access(tests_tmp_path("f.npy.tmp"), F_OK), -1);
}

static void test_npy_tile(void) {
  char err[GSLRT_ERRLEN];
  int64_t shape[3] = {3, 4, 5};
  int32_t all[60], got[60];
  gslrt_npy h;
  for (int e = 0; e < 60; e++)
    all[e] = e * 7 - 3;
  const char *p = tests_tmp_path("t.npy");
  CU_ASSERT_EQUAL_FATAL(gslrt_npy_write(p, GSLRT_I32, 3, shape, all, err, sizeof err), 0);
  CU_ASSERT_EQUAL_FATAL(gslrt_npy_read_header(p, &h, err, sizeof err), 0);
  /* Whole rows (the last two dimensions merge into runs of 10). */
  int64_t off[3] = {1, 2, 0}, cnt[3] = {2, 2, 5};
  CU_ASSERT_EQUAL(gslrt_npy_read_tile(p, &h, off, cnt, got, err, sizeof err), 0);
  int ok = 1, e = 0;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 5; k++)
        ok &= got[e++] == all[((1 + i) * 4 + 2 + j) * 5 + k];
  CU_ASSERT(ok);
  /* Partial rows. */
  int64_t off2[3] = {0, 1, 2}, cnt2[3] = {3, 2, 2};
  CU_ASSERT_EQUAL(gslrt_npy_read_tile(p, &h, off2, cnt2, got, err, sizeof err), 0);
  ok = 1, e = 0;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 2; k++)
        ok &= got[e++] == all[(i * 4 + 1 + j) * 5 + 2 + k];
  CU_ASSERT(ok);
  /* One batch of a [B, ...] file. */
  int64_t off3[3] = {2, 0, 0}, cnt3[3] = {1, 4, 5};
  CU_ASSERT_EQUAL(gslrt_npy_read_tile(p, &h, off3, cnt3, got, err, sizeof err), 0);
  CU_ASSERT(memcmp(got, all + 40, 20 * 4) == 0);
  int64_t bad[3] = {2, 0, 1};
  CU_ASSERT_EQUAL(gslrt_npy_read_tile(p, &h, bad, cnt3, got, err, sizeof err), -1);
}

/* Expects the header of path to be rejected with a message containing want. */
static void expect_bad(const char *path, const char *want) {
  char err[GSLRT_ERRLEN] = "";
  gslrt_npy h;
  CU_ASSERT_EQUAL(gslrt_npy_read_header(path, &h, err, sizeof err), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
  CU_ASSERT_PTR_NOT_NULL(strstr(err, path));
}

static void test_npy_malformed(void) {
  const char *good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n";
  char err[GSLRT_ERRLEN];
  gslrt_npy h;
  CU_ASSERT_EQUAL(gslrt_npy_read_header(npy_with_header("ok.npy", good, 24), &h, err, sizeof err), 0);
  expect_bad(npy_with_header("short.npy", good, 23), "needs 24 bytes");
  const char *p = tests_tmp_path("trunc.npy");
  write_bytes(p, "\x93NUMPY\x01", 7);
  expect_bad(p, "truncated");
  p = tests_tmp_path("trunc2.npy");
  write_bytes(p, "\x93NUMPY\x01\x00\x40\x00{'descr'", 18);
  expect_bad(p, "truncated");
  p = tests_tmp_path("magic.npy");
  write_bytes(p, "\x93NUMPZ\x01\x00\x02\x00{}", 12);
  expect_bad(p, "bad magic");
  p = tests_tmp_path("version.npy");
  write_bytes(p, "\x93NUMPY\x04\x00\x02\x00{}", 12);
  expect_bad(p, "version 4.0");
  expect_bad(npy_with_header("fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24),
             "fortran_order True");
  expect_bad(npy_with_header("be.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24),
             "unsupported dtype '>f4'");
  expect_bad(npy_with_header("f8.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 48),
             "unsupported dtype '<f8'");
  expect_bad(npy_with_header("nokey.npy", "{'descr': '<f4', 'shape': (2, 3), }", 24),
             "missing 'fortran_order'");
  expect_bad(npy_with_header("extra.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8),
             "unexpected or repeated key 'x'");
  expect_bad(npy_with_header("twice.npy", "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}", 4),
             "unexpected or repeated key 'descr'");
  expect_bad(npy_with_header("shape.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", 24),
             "bad 'shape'");
  /* text of the file in a message is escaped: the message stays one line */
  expect_bad(npy_with_header("ctl.npy", "{'descr': '<f\n4\x1b', 'fortran_order': False, 'shape': (2, 3), }", 24),
             "unsupported dtype '<f\\x0a4\\x1b'");
  expect_bad(npy_with_header("ctlkey.npy", "{'descr': '<f4', 'sh\xff" "ape\r': (2, 3), }", 24),
             "unexpected or repeated key 'sh\\xffape\\x0d'");
  expect_bad(npy_with_header("garbage.npy", "\x01\x02garbage", 0), "expected '{'");
  expect_bad(npy_with_header("unclosed.npy", "{'descr': '<f4", 0), "malformed");
  expect_bad(npy_with_header("huge.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999, 99999999999), }", 0),
             "too large");
  expect_bad(tests_tmp_path("missing.npy"), "cannot open");
  /* Version 2.0 with a 4-byte length and double quotes is fine. */
  unsigned char v2[80] = "\x93NUMPY\x02\x00";
  const char *dq = "{\"descr\": \"<i4\", \"fortran_order\": False, \"shape\": (1,)}\n";
  size_t len = strlen(dq);
  v2[8] = (unsigned char)len;
  memcpy(v2 + 12, dq, len);
  p = tests_tmp_path("v2.npy");
  write_bytes(p, v2, 12 + len + 4);
  CU_ASSERT_EQUAL(gslrt_npy_read_header(p, &h, err, sizeof err), 0);
  CU_ASSERT_EQUAL(h.dtype, GSLRT_I32);
  CU_ASSERT_EQUAL(h.data_offset, (int64_t)(12 + len));
}

/* ---- sgemm and gemm_bf16 ------------------------------------------------- */

/* Operand values: multiples of 1/8 in [-1/2, 1/2], exact in bf16. Every
 * product is a multiple of 1/64 of magnitude at most 1/4, so every partial
 * sum (k <= 129 terms: |sum| <= 33) is a multiple of 1/64 below 2^6 and
 * exact in f32: any summation order gives the same f32 sum, and the
 * comparisons below are exact, for bf16 C too (one rounding of that sum). */
static float gemm_value(int64_t i, int salt) {
  return (float)((i * (salt ? 53 : 37) + salt) % 9 - 4) / 8.0f;
}

/* One product through gslrt_sgemm (bf16 0) or gslrt_gemm_bf16 (bf16 1, C
 * of dtype c_dtype) with leading dimensions padded by pad and batch
 * entries gap elements further apart than needed (stride_a 0 when
 * shared_a: every batch entry multiplies the same A), against a triple loop
 * over the same values; 1 if every element of C matches and the padding
 * of C is untouched. */
static int check_gemm(int bf16, int32_t c_dtype, int64_t batch, int ta, int tb, int64_t m, int64_t n,
                      int64_t k, int64_t pad, int64_t gap, int shared_a) {
  int64_t ra = ta ? k : m, ca = ta ? m : k, rb = tb ? n : k, cb = tb ? k : n;
  int64_t lda = ca + pad, ldb = cb + pad, ldc = n + pad;
  int64_t sa = shared_a ? 0 : ra * lda + gap, sb = rb * ldb + gap, sc = m * ldc + gap;
  int64_t na = (shared_a ? 1 : batch) * (ra * lda + gap), nb = batch * sb, nc = batch * sc;
  float *a = malloc((size_t)na * 4), *b = malloc((size_t)nb * 4), *c = malloc((size_t)nc * 4);
  uint16_t *ha = malloc((size_t)na * 2), *hb = malloc((size_t)nb * 2), *hc = malloc((size_t)nc * 2);
  CU_ASSERT_FATAL(a && b && c && ha && hb && hc);
  for (int64_t i = 0; i < na; i++)
    a[i] = gemm_value(i, 0), ha[i] = gslrt_bf16_round(a[i]);
  for (int64_t i = 0; i < nb; i++)
    b[i] = gemm_value(i, 5), hb[i] = gslrt_bf16_round(b[i]);
  for (int64_t i = 0; i < nc; i++)
    c[i] = -999, hc[i] = 0xdead;
  if (!bf16)
    gslrt_sgemm(batch, ta, tb, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc);
  else
    gslrt_gemm_bf16(batch, ta, tb, m, n, k, ha, lda, sa, hb, ldb, sb,
                    c_dtype == GSLRT_BF16 ? (void *)hc : (void *)c, c_dtype, ldc, sc);
  int ok = 1;
  for (int64_t e = 0; e < batch; e++)
    for (int64_t i = 0; i < m; i++) {
      for (int64_t j = 0; j < n; j++) {
        float want = 0;
        for (int64_t p = 0; p < k; p++)
          want += a[e * sa + (ta ? p * lda + i : i * lda + p)] * b[e * sb + (tb ? j * ldb + p : p * ldb + j)];
        int64_t at = e * sc + i * ldc + j;
        ok &= c_dtype == GSLRT_BF16 ? hc[at] == gslrt_bf16_round(want) : c[at] == want;
      }
      for (int64_t j = n; j < ldc; j++) /* the padding of each row */
        ok &= c_dtype == GSLRT_BF16 ? hc[e * sc + i * ldc + j] == 0xdead : c[e * sc + i * ldc + j] == -999;
    }
  free(a), free(b), free(c), free(ha), free(hb), free(hc);
  return ok;
}

/* Every kind of product, through whatever the runtime picks (oneDNN or
 * OpenBLAS) and through OpenBLAS alone (bf16: widened, then rounded). */
static void check_gemm_shapes(int bf16, int32_t c_dtype) {
  /* (131 x 129 x 67 is past the size up to which gslrt_sgemm sends one
   * f32 matrix to OpenBLAS) */
  static const int64_t sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {37, 129, 65}, {64, 48, 32}, {131, 129, 67}};
  for (int via = 1; via >= 0; via--) {
    gslrt_gemm_counts before, after;
    gslrt_gemm_get_counts(&before);
    gslrt_gemm_use_onednn(via);
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++)
      for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
          int64_t m = sizes[z][0], n = sizes[z][1], k = sizes[z][2];
          CU_ASSERT(check_gemm(bf16, c_dtype, 1, ta, tb, m, n, k, 0, 0, 0));
          CU_ASSERT(check_gemm(bf16, c_dtype, 1, ta, tb, m, n, k, 3, 0, 0));
          CU_ASSERT(check_gemm(bf16, c_dtype, 3, ta, tb, m, n, k, 0, 0, 0));
          CU_ASSERT(check_gemm(bf16, c_dtype, 3, ta, tb, m, n, k, 5, 11, 0));
          CU_ASSERT(check_gemm(bf16, c_dtype, 2, ta, tb, m, n, k, 2, 0, 1));
        }
    CU_ASSERT(check_gemm(bf16, c_dtype, 2, 0, 0, 4, 6, 0, 1, 0, 0)); /* k = 0: zeros */
    gslrt_gemm_get_counts(&after);
    if (via) { /* oneDNN was asked (it ran them, or declined some here) */
      CU_ASSERT(after.onednn_calls > before.onednn_calls || after.declined > before.declined);
    } else {
      CU_ASSERT_EQUAL(after.onednn_calls, before.onednn_calls);
    }
  }
  gslrt_gemm_use_onednn(1);
}

static void test_sgemm(void) { check_gemm_shapes(0, GSLRT_F32); }
static void test_gemm_bf16_f32(void) { check_gemm_shapes(1, GSLRT_F32); }
static void test_gemm_bf16_bf16(void) { check_gemm_shapes(1, GSLRT_BF16); }

/* A bf16 sum that bf16 cannot hold is rounded once, to nearest even:
 * 256 + 1 (a tie) to 256, 256 + 3 to 260 (ties to the even 260), 256 - 1 is
 * exact. */
static void test_gemm_bf16_rounding(void) {
  uint16_t a[3] = {gslrt_bf16_round(256), gslrt_bf16_round(1), gslrt_bf16_round(3)};
  uint16_t b[3] = {gslrt_bf16_round(1), gslrt_bf16_round(1), gslrt_bf16_round(1)}, c = 0;
  float want[3] = {256, 260, 256};
  for (int via = 1; via >= 0; via--) {
    gslrt_gemm_use_onednn(via);
    /* [1, 2] x [2, 1]: 256 * 1 + x * 1 for x = 1, 3 */
    uint16_t a1[2] = {a[0], a[1]}, a3[2] = {a[0], a[2]};
    gslrt_gemm_bf16(1, 0, 0, 1, 1, 2, a1, 2, 0, b, 1, 0, &c, GSLRT_BF16, 1, 0);
    CU_ASSERT_EQUAL(gslrt_bf16_widen(c), want[0]);
    gslrt_gemm_bf16(1, 0, 0, 1, 1, 2, a3, 2, 0, b, 1, 0, &c, GSLRT_BF16, 1, 0);
    CU_ASSERT_EQUAL(gslrt_bf16_widen(c), want[1]);
  }
  gslrt_gemm_use_onednn(1);
}

/* gslrt_sgemm_fill and gslrt_gemm_bf16_fill against a plain loop over the
 * filled slots: by rows (rows past a block's count zero) and by depth (the
 * sum over each block's first terms only), both transposes of A, with
 * values that are multiples of 1/8 (exact in bf16, every sum exact in f32:
 * the comparison is exact). 3 blocks of 4 slots: counts 4, 0, 2 (and a
 * batch entry all full), and every block of both entries full (one
 * batched product); and 3 blocks of 40: counts 7, 0, 26, whose 33 packed
 * rows (terms) are padded with zeros to 48 of the 120 (buckets of 16). */
static void check_fill(int bf, int depth, int ta, int64_t SL, const int32_t *fill) {
  enum { BL = 3, N = 5, O = 6 };
  int64_t m = depth ? O : BL * SL, k = depth ? BL * SL : O, na = BL * SL * O, nb = BL * SL * N;
  float *a = calloc(1, sizeof *a * (size_t)(2 * na)), *b = calloc(1, sizeof *b * (size_t)(2 * nb));
  float *c = calloc(1, sizeof *c * (size_t)(2 * nb)), *want = calloc(1, sizeof *want * (size_t)(2 * nb));
  uint16_t *ha = calloc(1, sizeof *ha * (size_t)(2 * na)), *hb = calloc(1, sizeof *hb * (size_t)(2 * nb));
  for (int e = 0; e < 2; e++) {
    for (int64_t i = 0; i < na; i++) {
      a[e * na + i] = (float)(((i * 7 + e * 3) % 17) - 8) / 8.0f;
      ha[e * na + i] = gslrt_bf16_round(a[e * na + i]);
    }
    for (int64_t i = 0; i < nb; i++) {
      b[e * nb + i] = (float)(((i * 5 + e) % 13) - 6) / 8.0f;
      hb[e * nb + i] = gslrt_bf16_round(b[e * nb + i]);
    }
  }
  /* A is m x k (ta: stored k x m); B is k x N */
  int64_t lda = ta ? m : k;
  for (int e = 0; e < 2; e++)
    for (int64_t r = 0; r < m; r++)
      for (int q = 0; q < N; q++) {
        double acc = 0;
        for (int64_t t = 0; t < k; t++) {
          int64_t slot = depth ? t : r, blk = slot / SL;
          if (slot % SL >= fill[e * BL + blk])
            continue;
          acc += (double)a[e * na + (ta ? t * lda + r : r * lda + t)] * b[e * nb + t * N + q];
        }
        want[e * nb + r * N + q] = (float)acc;
        c[e * nb + r * N + q] = 99.0f; /* every element must be written */
      }
  if (bf)
    gslrt_gemm_bf16_fill(2, ta, 0, m, N, k, ha, lda, na, hb, N, nb, c, N, nb, fill, BL, SL, depth);
  else
    gslrt_sgemm_fill(2, ta, 0, m, N, k, a, lda, na, b, N, nb, c, N, nb, fill, BL, SL, depth);
  int bad = 0;
  for (int e = 0; e < 2; e++)
    for (int64_t i = 0; i < m * N; i++)
      if (c[e * nb + i] != want[e * nb + i] && bad++ < 3)
        fprintf(stderr, "fill bf %d depth %d ta %d slots %d: entry %d [%d] = %g, want %g\n", bf, depth, ta, (int)SL,
                e, (int)i, c[e * nb + i], want[e * nb + i]);
  CU_ASSERT_EQUAL(bad, 0);
  free(a);
  free(b);
  free(c);
  free(want);
  free(ha);
  free(hb);
}

static void test_gemm_fill(void) {
  static const int32_t small[6] = {4, 0, 2, 4, 4, 4}, full[6] = {4, 4, 4, 4, 4, 4}, large[6] = {7, 0, 26, 40, 3, 40};
  for (int bf = 0; bf < 2; bf++)
    for (int depth = 0; depth < 2; depth++)
      for (int ta = 0; ta < 2; ta++) {
        check_fill(bf, depth, ta, 4, small);
        check_fill(bf, depth, ta, 4, full);
        check_fill(bf, depth, ta, 40, large);
      }
}

/* A product over filled slots is set up once per bucket of rows, not once
 * per count: every count of 1 to 128 filled rows (8 blocks of 16 slots)
 * makes at most the descriptors of the 8 buckets of 16 rows. */
static void test_gemm_fill_buckets(void) {
  enum { BL = 8, SL = 16, M = BL * SL, N = 32, K = 32 };
  static uint16_t a[M * K], b[K * N];
  static float c[M * N];
  for (int i = 0; i < M * K; i++)
    a[i] = gslrt_bf16_round(gemm_value(i, 1));
  for (int i = 0; i < K * N; i++)
    b[i] = gslrt_bf16_round(gemm_value(i, 2));
  gslrt_gemm_counts c0, c1;
  gslrt_gemm_get_counts(&c0);
  for (int kept = 1; kept <= M; kept++) {
    int32_t fill[BL];
    for (int j = 0; j < BL; j++)
      fill[j] = kept / BL + (j < kept % BL);
    gslrt_gemm_bf16_fill(1, 0, 0, M, N, K, a, K, 0, b, N, 0, c, N, 0, fill, BL, SL, 0);
  }
  gslrt_gemm_get_counts(&c1);
  CU_ASSERT((c1.created + c1.declined) - (c0.created + c0.declined) <= 8);
}

/* A product is set up once per distinct descriptor: the same call again
 * finds its primitive (or the fact that oneDNN declined it) in the cache. */
static void test_gemm_cache(void) {
  enum { M = 19, N = 23, K = 29 };
  uint16_t a[M * K], b[K * N];
  float c[M * N];
  for (int i = 0; i < M * K; i++)
    a[i] = gslrt_bf16_round(gemm_value(i, 1));
  for (int i = 0; i < K * N; i++)
    b[i] = gslrt_bf16_round(gemm_value(i, 2));
  gslrt_gemm_counts c0, c1, c2, c3;
  gslrt_gemm_get_counts(&c0);
  gslrt_gemm_bf16(1, 0, 1, M, N, K, a, K, 0, b, K, 0, c, GSLRT_F32, N, 0);
  gslrt_gemm_get_counts(&c1);
  CU_ASSERT_EQUAL((c1.created + c1.declined) - (c0.created + c0.declined), 1);
  CU_ASSERT_EQUAL(c1.hits, c0.hits);
  for (int r = 0; r < 5; r++)
    gslrt_gemm_bf16(1, 0, 1, M, N, K, a, K, 0, b, K, 0, c, GSLRT_F32, N, 0);
  gslrt_gemm_get_counts(&c2);
  CU_ASSERT_EQUAL(c2.created, c1.created);
  CU_ASSERT_EQUAL(c2.declined, c1.declined);
  CU_ASSERT_EQUAL(c2.hits - c1.hits, 5);
  CU_ASSERT_EQUAL((c2.onednn_calls + c2.blas_calls) - (c1.onednn_calls + c1.blas_calls), 5);
  /* another ld is another descriptor; the batch strides of a batch of one are not */
  gslrt_gemm_bf16(1, 0, 1, M, N - 1, K, a, K, 0, b, K, 0, c, GSLRT_F32, N, 7);
  gslrt_gemm_bf16(1, 0, 1, M, N - 1, K, a, K, 5, b, K, 9, c, GSLRT_F32, N, 0);
  gslrt_gemm_get_counts(&c3);
  CU_ASSERT_EQUAL((c3.created + c3.declined) - (c2.created + c2.declined), 1);
  CU_ASSERT_EQUAL(c3.hits - c2.hits, 1);
}

/* gslc --same-bits' products (pinned.c, through gslrt_sgemm and
 * gslrt_gemm_bf16 once gslrt_gemm_pin(1)): every element of C is the
 * chain c = fmaf(a, b, c) over k in order from 0, computed here by a plain
 * loop, bit for bit, on values whose sums round (unlike gemm_value's), for
 * shapes past every tile and block edge (MR 6, NR 64, KC 256, NC 512), each
 * transpose, batches and padded leading dimensions; and the rows i0..i1 of
 * a product alone give the bits of those rows of the whole one. */
static float pin_value(int64_t i, int salt) { return sinf((float)(i * 7 + salt * 13) * 0.37f) * 1.3f; }

static int check_pinned(int bf16, int32_t c_dtype, int64_t batch, int ta, int tb, int64_t m, int64_t n, int64_t k,
                        int64_t pad) {
  int64_t ra = ta ? k : m, ca = ta ? m : k, rb = tb ? n : k, cb = tb ? k : n;
  int64_t lda = ca + pad, ldb = cb + pad, ldc = n + pad;
  int64_t sa = ra * lda, sb = rb * ldb, sc = m * ldc;
  float *a = malloc((size_t)(batch * sa) * 4 + 4), *b = malloc((size_t)(batch * sb) * 4 + 4);
  float *c = malloc((size_t)(batch * sc) * 4 + 4);
  uint16_t *ha = malloc((size_t)(batch * sa) * 2 + 2), *hb = malloc((size_t)(batch * sb) * 2 + 2);
  uint16_t *hc = malloc((size_t)(batch * sc) * 2 + 2);
  CU_ASSERT_FATAL(a && b && c && ha && hb && hc);
  for (int64_t i = 0; i < batch * sa; i++) {
    ha[i] = gslrt_bf16_round(pin_value(i, 1));
    a[i] = bf16 ? gslrt_bf16_widen(ha[i]) : pin_value(i, 1);
  }
  for (int64_t i = 0; i < batch * sb; i++) {
    hb[i] = gslrt_bf16_round(pin_value(i, 2));
    b[i] = bf16 ? gslrt_bf16_widen(hb[i]) : pin_value(i, 2);
  }
  for (int64_t i = 0; i < batch * sc; i++)
    c[i] = -999, hc[i] = 0xdead;
  if (!bf16)
    gslrt_sgemm(batch, ta, tb, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc);
  else
    gslrt_gemm_bf16(batch, ta, tb, m, n, k, ha, lda, sa, hb, ldb, sb, c_dtype == GSLRT_BF16 ? (void *)hc : (void *)c,
                    c_dtype, ldc, sc);
  int ok = 1;
  for (int64_t e = 0; e < batch; e++)
    for (int64_t i = 0; i < m; i++) {
      for (int64_t j = 0; j < n; j++) {
        float want = 0;
        for (int64_t p = 0; p < k; p++)
          want = fmaf(a[e * sa + (ta ? p * lda + i : i * lda + p)], b[e * sb + (tb ? j * ldb + p : p * ldb + j)], want);
        int64_t at = e * sc + i * ldc + j;
        uint32_t got_bits, want_bits;
        memcpy(&got_bits, &c[at], 4);
        memcpy(&want_bits, &want, 4);
        ok &= c_dtype == GSLRT_BF16 ? hc[at] == gslrt_bf16_round(want) : got_bits == want_bits;
      }
      for (int64_t j = n; j < ldc; j++)
        ok &= c_dtype == GSLRT_BF16 ? hc[e * sc + i * ldc + j] == 0xdead : c[e * sc + i * ldc + j] == -999;
    }
  free(a), free(b), free(c), free(ha), free(hb), free(hc);
  return ok;
}

static void test_gemm_pinned(void) {
  static const int64_t sizes[][3] = {{1, 1, 1}, {5, 63, 3}, {7, 65, 257}, {13, 130, 300}, {2, 600, 40}, {64, 48, 32},
                                     {6, 24, 5}, {11, 9, 17}};
  gslrt_gemm_pin(1);
  /* each kind of tile this CPU has (AVX-512, AVX2 with FMA, scalar), the widest last */
  int widest = gslrt_pinned_tiles(-1);
  for (int tiles = 0; tiles <= widest; tiles++) {
    CU_ASSERT_EQUAL(gslrt_pinned_tiles(tiles), tiles);
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++)
      for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
          int64_t m = sizes[z][0], n = sizes[z][1], k = sizes[z][2];
          CU_ASSERT(check_pinned(0, GSLRT_F32, 1, ta, tb, m, n, k, 0));
          CU_ASSERT(check_pinned(0, GSLRT_F32, 2, ta, tb, m, n, k, 3));
          CU_ASSERT(check_pinned(1, GSLRT_F32, 2, ta, tb, m, n, k, 1));
          CU_ASSERT(check_pinned(1, GSLRT_BF16, 1, ta, tb, m, n, k, 2));
        }
  }
  /* rows 5..21 of a 40-row product alone: the same bits as in the whole */
  enum { M = 40, N = 70, K = 90 };
  float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
  float *whole = malloc(sizeof(float) * M * N), *part = malloc(sizeof(float) * M * N);
  CU_ASSERT_FATAL(a && b && whole && part);
  for (int i = 0; i < M * K; i++)
    a[i] = pin_value(i, 3);
  for (int i = 0; i < K * N; i++)
    b[i] = pin_value(i, 4);
  gslrt_sgemm(1, 0, 0, M, N, K, a, K, 0, b, N, 0, whole, N, 0);
  gslrt_sgemm(1, 0, 0, 17, N - 9, K, a + 5 * K, K, 0, b + 9, N, 0, part, N, 0);
  int same = 1;
  for (int i = 0; i < 17; i++)
    same &= memcmp(part + i * N, whole + (5 + i) * N + 9, sizeof(float) * (N - 9)) == 0;
  CU_ASSERT(same);
  free(a), free(b), free(whole), free(part);
  gslrt_gemm_pin(0);
}

/* ---- mesh tiles ------------------------------------------------------------ */

static void test_tiles(void) {
  gslrt_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.naxes = 2;
  ctx.axis_size[0] = 2, ctx.axis_size[1] = 3;
  int32_t axes[2 * GSLRT_MAX_AXES];
  for (int i = 0; i < 2 * GSLRT_MAX_AXES; i++)
    axes[i] = -1;
  axes[0] = 0, axes[1] = 1;         /* dimension 0 over (a, b) */
  axes[GSLRT_MAX_AXES] = 1;         /* dimension 1 over b */
  int64_t g[2] = {12, 9}, shape[2], off[2];
  gslrt_tile(&ctx, 4, "t", 2, g, axes, shape, off); /* rank 4 = (1, 1) */
  CU_ASSERT_EQUAL(shape[0], 2);
  CU_ASSERT_EQUAL(off[0], 8);
  CU_ASSERT_EQUAL(shape[1], 3);
  CU_ASSERT_EQUAL(off[1], 3);
  gslrt_tile(&ctx, 2, "t", 2, g, axes, shape, off); /* rank 2 = (0, 2) */
  CU_ASSERT_EQUAL(off[0], 4);
  CU_ASSERT_EQUAL(off[1], 6);
  axes[0] = 1, axes[1] = 0; /* (b, a): index = c_b * 2 + c_a */
  gslrt_tile(&ctx, 4, "t", 2, g, axes, shape, off);
  CU_ASSERT_EQUAL(off[0], 6);
  gslrt_tile(&ctx, 5, "t", 2, g, NULL, shape, off); /* replicated */
  CU_ASSERT_EQUAL(shape[0], 12);
  CU_ASSERT_EQUAL(off[0], 0);
  CU_ASSERT_EQUAL(shape[1], 9);
}

/* ---- groups and collectives without MPI ----------------------------------- */

/* Block indices: major first, -1 entries skipped, the same numbering as tiles. */
static void test_block_index(void) {
  gslrt_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.naxes = 3;
  ctx.axis_size[0] = 2, ctx.axis_size[1] = 3, ctx.axis_size[2] = 4;
  int64_t c[3], blocks = 0;
  gslrt_mesh_coords(&ctx, 17, c); /* 17 = (1 * 3 + 1) * 4 + 1 */
  CU_ASSERT(c[0] == 1 && c[1] == 1 && c[2] == 1);
  gslrt_mesh_coords(&ctx, 23, c);
  CU_ASSERT(c[0] == 1 && c[1] == 2 && c[2] == 3);
  int32_t ab[2] = {0, 1}, ba[2] = {1, 0}, cpad[3] = {-1, 2, -1};
  CU_ASSERT_EQUAL(gslrt_block_index(&ctx, c, 2, ab, &blocks), 1 * 3 + 2);
  CU_ASSERT_EQUAL(blocks, 6);
  CU_ASSERT_EQUAL(gslrt_block_index(&ctx, c, 2, ba, NULL), 2 * 2 + 1);
  CU_ASSERT_EQUAL(gslrt_block_index(&ctx, c, 3, cpad, &blocks), 3);
  CU_ASSERT_EQUAL(blocks, 4);
  CU_ASSERT_EQUAL(gslrt_block_index(&ctx, c, 0, NULL, &blocks), 0);
  CU_ASSERT_EQUAL(blocks, 1);
  /* a dimension tiled over (c, a) starts at its block index times the extent */
  int32_t dim_axes[GSLRT_MAX_AXES];
  for (int i = 0; i < GSLRT_MAX_AXES; i++)
    dim_axes[i] = -1;
  dim_axes[0] = 2, dim_axes[1] = 0;
  int32_t ca[2] = {2, 0};
  int64_t g[1] = {40}, shape[1], off[1];
  for (int r = 0; r < 24; r++) {
    gslrt_mesh_coords(&ctx, r, c);
    gslrt_tile(&ctx, r, "t", 1, g, dim_axes, shape, off);
    CU_ASSERT_EQUAL(shape[0], 5);
    CU_ASSERT_EQUAL(off[0], 5 * gslrt_block_index(&ctx, c, 2, ca, NULL));
    CU_ASSERT_EQUAL(off[0], 5 * (c[2] * 2 + c[0]));
  }
}

/* Pack and unpack against index loops, on 4-byte elements. */
static void test_pack_blocks(void) {
  enum { OUTER = 3, G = 4, D = 2, INNER = 5, N = OUTER * G * D * INNER };
  int32_t src[N], packed[N], back[N];
  for (int i = 0; i < N; i++)
    src[i] = i * 3 + 1;
  gslrt_pack_blocks(packed, src, OUTER, G, D, INNER, 4);
  int ok = 1;
  for (int o = 0; o < OUTER; o++)
    for (int j = 0; j < G; j++)
      for (int k = 0; k < D; k++)
        for (int i = 0; i < INNER; i++)
          ok &= packed[((j * OUTER + o) * D + k) * INNER + i] == src[(o * G * D + j * D + k) * INNER + i];
  CU_ASSERT(ok);
  memset(back, 0, sizeof back);
  gslrt_unpack_blocks(back, packed, OUTER, G, D, INNER, 4);
  CU_ASSERT_EQUAL(memcmp(back, src, sizeof src), 0);
  gslrt_pack_blocks(packed, src, 1, G, D * OUTER, INNER, 4); /* outer 1: a copy */
  CU_ASSERT_EQUAL(memcmp(packed, src, sizeof src), 0);
}

/* Declarations deduplicated; groups of one device need no MPI: their
 * collectives are copies. */
static void test_groups_of_one(void) {
  gslrt_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.naxes = 2;
  ctx.axis_size[0] = 1, ctx.axis_size[1] = 1;
  ctx.mesh_checked = 1;
  int32_t ab[2] = {0, 1}, ba[2] = {1, 0};
  int32_t g0 = gslrt_declare_group(&ctx, 0, NULL);
  int32_t gab = gslrt_declare_group(&ctx, 2, ab);
  CU_ASSERT_EQUAL(gslrt_declare_group(&ctx, 2, ab), gab);
  CU_ASSERT_NOT_EQUAL(gslrt_declare_group(&ctx, 2, ba), gab);
  CU_ASSERT_EQUAL(gslrt_declare_group(&ctx, 0, ab), g0);
  CU_ASSERT_EQUAL(ctx.ngroups, 3);
  gslrt_build_groups(&ctx);
  CU_ASSERT_EQUAL(gslrt_group_size(&ctx, gab), 1);
  CU_ASSERT_EQUAL(gslrt_group_index(&ctx, gab), 0);
  CU_ASSERT_EQUAL(gslrt_group_size(&ctx, g0), 1);
  float in[2 * 3 * 4], out[2 * 3 * 4];
  int64_t shape[3] = {2, 3, 4};
  for (int i = 0; i < 24; i++)
    in[i] = (float)i - 7.5f;
  memset(out, 0, sizeof out);
  gslrt_all_gather(&ctx, gab, GSLRT_F32, in, out, 3, shape, 1, 3);
  CU_ASSERT_EQUAL(memcmp(in, out, sizeof in), 0);
  memset(out, 0, sizeof out);
  gslrt_reduce_scatter(&ctx, g0, GSLRT_F32, in, out, 3, shape, 2);
  CU_ASSERT_EQUAL(memcmp(in, out, sizeof in), 0);
  memset(out, 0, sizeof out);
  gslrt_all_to_all(&ctx, gab, GSLRT_I32, in, out, 3, shape, 0, 2, 4);
  CU_ASSERT_EQUAL(memcmp(in, out, sizeof in), 0);
  memcpy(out, in, sizeof in);
  gslrt_all_reduce(&ctx, g0, GSLRT_F32, GSLRT_MAX, out, 24);
  CU_ASSERT_EQUAL(memcmp(in, out, sizeof in), 0);
  gslrt_free_groups(&ctx);
  CU_ASSERT_EQUAL(ctx.ngroups, 0);
}

/* Generation's 53-bit draw: ((out[0] >> 5) * 2^26 + (out[1] >> 6)) *
 * 2^-53 of the usual counter; Random123's all-zero answer is {0x6627e8d5,
 * 0xe169c58d, ...}; byte j's draw is step j of stream 0xFFFFFFFF. */
static void test_rng_uniform53(void) {
  double want = ((double)(0x6627e8d5u >> 5) * 67108864.0 + (double)(0xe169c58du >> 6)) / 9007199254740992.0;
  CU_ASSERT_EQUAL(gslrt_rng_uniform53(0, 0, 0, 0), want);
  uint32_t ctr[4] = {0, 0, 6, GSLRT_GEN_STREAM}, key[2] = {9, 0}, out[4];
  gslrt_philox(ctr, key, out);
  want = ((double)(out[0] >> 5) * 67108864.0 + (double)(out[1] >> 6)) / 9007199254740992.0;
  CU_ASSERT_EQUAL(gslrt_rng_uniform53(9, GSLRT_GEN_STREAM, 6, 0), want);
  CU_ASSERT(want >= 0 && want < 1);
}

/* The choice of a token (man/gslrun.7, GENERATION): the argmax with the
 * lowest token on a tie for temperature 0 or top-k 1; otherwise the top
 * k (ties to the lower token), weights exp((z - max) / T) in token
 * order, the first whose running sum exceeds u times the total. */
static void test_choose_token(void) {
  char err[GSLRT_ERRLEN];
  const float z[5] = {1, 3, 3, 0, -INFINITY};
  double e2 = exp(-2.0), e3 = exp(-3.0);
  CU_ASSERT_EQUAL(gslrt_choose_token(z, 5, 0, 0, 0.99, err, sizeof err), 1);
  CU_ASSERT_EQUAL(gslrt_choose_token(z, 5, 1, 1, 0.99, err, sizeof err), 1);
  /* top 2: tokens 1 and 2, even */
  CU_ASSERT_EQUAL(gslrt_choose_token(z, 5, 1, 2, 0.49, err, sizeof err), 1);
  CU_ASSERT_EQUAL(gslrt_choose_token(z, 5, 1, 2, 0.5, err, sizeof err), 2);
  CU_ASSERT_EQUAL(gslrt_choose_token(z, 5, 1, 2, 0.999, err, sizeof err), 2);
  /* top 3: token 0 (e^-2) comes first in token order */
  CU_ASSERT_EQUAL(gslrt_choose_token(z, 5, 1, 3, 0.0, err, sizeof err), 0);
  CU_ASSERT_EQUAL(gslrt_choose_token(z, 5, 1, 3, 0.99 * e2 / (2 + e2), err, sizeof err), 0);
  CU_ASSERT_EQUAL(gslrt_choose_token(z, 5, 1, 3, 1.01 * e2 / (2 + e2), err, sizeof err), 1);
  CU_ASSERT_EQUAL(gslrt_choose_token(z, 5, 1, 3, 1 - 1e-12, err, sizeof err), 2);
  /* every token: 3 (e^-3) is last with a weight; -inf never comes up */
  CU_ASSERT_EQUAL(gslrt_choose_token(z, 5, 1, 0, 1 - 0.5 * e3 / (2 + e2 + e3), err, sizeof err), 3);
  CU_ASSERT_EQUAL(gslrt_choose_token(z, 5, 1, 0, 1 - 1e-15, err, sizeof err), 3);
  /* temperature 2: token 0 weighs e^-1 */
  CU_ASSERT_EQUAL(gslrt_choose_token(z, 5, 2, 3, 0.99 * exp(-1.0) / (2 + exp(-1.0)), err, sizeof err), 0);
  CU_ASSERT_EQUAL(gslrt_choose_token(z, 5, 2, 3, 1.01 * exp(-1.0) / (2 + exp(-1.0)), err, sizeof err), 1);
  /* a tie at the k-th score keeps the lower token */
  const float tie[4] = {2, 1, 1, 1};
  CU_ASSERT_EQUAL(gslrt_choose_token(tie, 4, 1, 2, 0.999, err, sizeof err), 1);
  CU_ASSERT_EQUAL(gslrt_choose_token(tie, 4, 0, 0, 0.999, err, sizeof err), 0);
  const float bad[3] = {0, NAN, 1}, inf[2] = {0, INFINITY}, none[2] = {-INFINITY, -INFINITY};
  CU_ASSERT_EQUAL(gslrt_choose_token(bad, 3, 1, 0, 0.5, err, sizeof err), -1);
  CU_ASSERT_STRING_EQUAL(err, "the score of token 1 is nan");
  CU_ASSERT_EQUAL(gslrt_choose_token(inf, 2, 0, 0, 0.5, err, sizeof err), -1);
  CU_ASSERT_STRING_EQUAL(err, "the score of token 1 is inf");
  CU_ASSERT_EQUAL(gslrt_choose_token(none, 2, 1, 0, 0.5, err, sizeof err), -1);
  CU_ASSERT_STRING_EQUAL(err, "every score is -inf");
}

/* ---- options --------------------------------------------------------------- */

static int parse(char *line, gslrt_options *o, char *err) {
  char *argv[32];
  int argc = 0;
  argv[argc++] = "prog";
  for (char *w = strtok(line, " "); w && argc < 31; w = strtok(NULL, " "))
    argv[argc++] = w;
  argv[argc] = NULL;
  return gslrt_parse_options(argc, argv, o, err, GSLRT_ERRLEN);
}

static void test_options(void) {
  gslrt_options o;
  char err[GSLRT_ERRLEN];
  char l0[] = "";
  CU_ASSERT_EQUAL(parse(l0, &o, err), 0);
  CU_ASSERT_EQUAL(o.steps, 1);
  CU_ASSERT_EQUAL(o.seed, 0);
  CU_ASSERT_EQUAL(o.log_every, 0);
  CU_ASSERT(!o.quiet && !o.help && !o.version && !o.resume && !o.checkpoint && !o.ninputs);
  CU_ASSERT_PTR_NULL(o.metrics);
  gslrt_free_options(&o);
  char l1[] = "--steps 10 --seed=18446744073709551615 --input x=a.npy --input=y=dir/b=c.npy "
              "--output z=o.npy --log-every=3 --quiet --checkpoint ck --checkpoint-every 5 --resume";
  CU_ASSERT_EQUAL_FATAL(parse(l1, &o, err), 0);
  CU_ASSERT_EQUAL(o.steps, 10);
  CU_ASSERT_EQUAL(o.seed, UINT64_MAX);
  CU_ASSERT_EQUAL(o.ninputs, 2);
  CU_ASSERT_STRING_EQUAL(o.inputs[0].name, "x");
  CU_ASSERT_STRING_EQUAL(o.inputs[0].file, "a.npy");
  CU_ASSERT_STRING_EQUAL(o.inputs[1].name, "y");
  CU_ASSERT_STRING_EQUAL(o.inputs[1].file, "dir/b=c.npy");
  CU_ASSERT_EQUAL(o.noutputs, 1);
  CU_ASSERT_STRING_EQUAL(o.outputs[0].name, "z");
  CU_ASSERT_EQUAL(o.log_every, 3);
  CU_ASSERT(o.quiet);
  CU_ASSERT_STRING_EQUAL(o.checkpoint, "ck");
  CU_ASSERT_EQUAL(o.checkpoint_every, 5);
  CU_ASSERT(o.resume);
  gslrt_free_options(&o);
  char l2[] = "--help --version";
  CU_ASSERT_EQUAL(parse(l2, &o, err), 0);
  CU_ASSERT(o.help && o.version);
  gslrt_free_options(&o);
  char l3[] = "--steps 1 --output x=a.npy --input x=b.npy";
  CU_ASSERT_EQUAL(parse(l3, &o, err), 0); /* the same name as input and output is fine */
  CU_ASSERT_EQUAL(o.steps, 1);
  gslrt_free_options(&o);
  char l4[] = "--metrics run/m.jsonl --quiet";
  CU_ASSERT_EQUAL_FATAL(parse(l4, &o, err), 0);
  CU_ASSERT_STRING_EQUAL(o.metrics, "run/m.jsonl");
  CU_ASSERT(o.quiet);
  gslrt_free_options(&o);
  char l5[] = "--metrics=a=b.jsonl --steps 2";
  CU_ASSERT_EQUAL_FATAL(parse(l5, &o, err), 0);
  CU_ASSERT_STRING_EQUAL(o.metrics, "a=b.jsonl");
  CU_ASSERT_EQUAL(o.steps, 2);
  CU_ASSERT(!o.neval_inputs && !o.eval_every);
  gslrt_free_options(&o);
  char l6[] = "--eval-input x=held.npy --input x=train.npy --eval-input=y=h=y.npy --eval-every=50";
  CU_ASSERT_EQUAL_FATAL(parse(l6, &o, err), 0);
  CU_ASSERT_EQUAL_FATAL(o.neval_inputs, 2);
  CU_ASSERT_STRING_EQUAL(o.eval_inputs[0].name, "x");
  CU_ASSERT_STRING_EQUAL(o.eval_inputs[0].file, "held.npy");
  CU_ASSERT_STRING_EQUAL(o.eval_inputs[1].name, "y");
  CU_ASSERT_STRING_EQUAL(o.eval_inputs[1].file, "h=y.npy");
  CU_ASSERT_EQUAL(o.ninputs, 1); /* the same name in --input and --eval-input is the point */
  CU_ASSERT_STRING_EQUAL(o.inputs[0].file, "train.npy");
  CU_ASSERT_EQUAL(o.eval_every, 50);
  gslrt_free_options(&o);
  char l7[] = "--generate 200 --prompt=The --temperature 0.8 --top-k=40 --seed 3 --checkpoint ck --resume";
  CU_ASSERT_EQUAL_FATAL(parse(l7, &o, err), 0);
  CU_ASSERT_EQUAL(o.generate, 200);
  CU_ASSERT_STRING_EQUAL(o.prompt, "The");
  CU_ASSERT_PTR_NULL(o.prompt_file);
  CU_ASSERT_EQUAL(o.temperature, 0.8);
  CU_ASSERT_EQUAL(o.top_k, 40);
  gslrt_free_options(&o);
  char l8[] = "--generate 1 --prompt-file p.txt --temperature 0";
  CU_ASSERT_EQUAL_FATAL(parse(l8, &o, err), 0);
  CU_ASSERT_STRING_EQUAL(o.prompt_file, "p.txt");
  CU_ASSERT_EQUAL(o.temperature, 0);
  CU_ASSERT_EQUAL(o.top_k, 0);
  gslrt_free_options(&o);
  /* the ends of each range are in it */
  char l9[] = "--generate 2305843009213693951 --prompt a --temperature 1e-6";
  CU_ASSERT_EQUAL_FATAL(parse(l9, &o, err), 0);
  CU_ASSERT(o.generate == INT64_MAX - ((int64_t)3 << 61) && o.temperature == 1e-6);
  gslrt_free_options(&o);
  char l10[] = "--generate 1 --prompt a --temperature 1e6 --top-k 9223372036854775807";
  CU_ASSERT_EQUAL_FATAL(parse(l10, &o, err), 0);
  CU_ASSERT(o.temperature == 1e6 && o.top_k == INT64_MAX);
  gslrt_free_options(&o);
  char l11[] = "--steps 999999999999999999 --keep 2147483647 --max-time 0.001 --log-every 9223372036854775807";
  CU_ASSERT_EQUAL_FATAL(parse(l11, &o, err), 0);
  CU_ASSERT(o.steps == 999999999999999999LL && o.keep == 2147483647 && o.max_time == 0.001);
  gslrt_free_options(&o);
  char l12[] = "--max-time 1e9";
  CU_ASSERT_EQUAL_FATAL(parse(l12, &o, err), 0);
  CU_ASSERT(o.max_time == 1e9);
  gslrt_free_options(&o);
  CU_ASSERT_EQUAL_FATAL(parse(l0, &o, err), 0);
  CU_ASSERT(o.generate == 0 && o.temperature == 1 && !o.prompt);
  gslrt_free_options(&o);
  static const struct {
    const char *line, *want;
  } bad[] = {
      {"--bogus", "unknown option '--bogus'"},
      {"--steps", "option '--steps' requires a value"},
      {"--steps abc", "invalid value 'abc' for --steps"},
      {"--steps -1", "invalid value '-1' for --steps"},
      {"--steps 0", "invalid value '0' for --steps (expected an integer from 1 to 999999999999999999)"}, /* no step: no outputs to write */
      {"--steps 1x", "invalid value '1x'"},
      {"--steps 99999999999999999999", "invalid value"},
      /* a step past 18 digits would name a checkpoint no resume reads back */
      {"--steps 18446744073709551615", "invalid value '18446744073709551615' for --steps (expected an integer from 1 to 999999999999999999)"},
      {"--steps 1000000000000000000", "(expected an integer from 1 to 999999999999999999)"},
      {"--keep 99999999999999999999", "invalid value '99999999999999999999' for --keep (expected an integer from 1 to 2147483647)"},
      {"--keep 4294967296", "for --keep (expected an integer from 1 to 2147483647)"}, /* not 0 as an int */
      {"--log-every 9223372036854775808", "for --log-every (expected an integer from 1 to 9223372036854775807)"},
      {"--max-time 0", "invalid value '0' for --max-time (expected a number from 0.001 to 1e9)"},
      {"--max-time 1e308", "invalid value '1e308' for --max-time (expected a number from 0.001 to 1e9)"},
      {"--max-time -1", "invalid value '-1' for --max-time (expected a number from 0.001 to 1e9)"},
      {"--steps=", "invalid value ''"},
      {"--seed -3", "invalid value '-3' for --seed"},
      {"--seed 18446744073709551616", "invalid value"},
      {"--log-every 0", "invalid value '0' for --log-every"},
      {"--checkpoint-every 0", "invalid value '0' for --checkpoint-every"},
      {"--checkpoint=", "requires a non-empty value"},
      {"--input x.npy", "--input x.npy: expected NAME=FILE"},
      {"--input =x.npy", "expected NAME=FILE"},
      {"--output y=", "--output y=: expected NAME=FILE"},
      {"--input x=a --input x=b", "--input x given twice"},
      {"--output x=a --output=x=b", "--output x given twice"},
      {"--quiet=yes", "option '--quiet' takes no value"},
      {"stray", "unexpected argument 'stray'"},
      {"--steps=3=4", "invalid value '3=4'"},
      {"--metrics", "option '--metrics' requires a value"},
      {"--metrics=", "option '--metrics' requires a non-empty value"},
      {"--metric m.jsonl", "unknown option '--metric'"},
      {"--eval-every 0", "invalid value '0' for --eval-every (expected an integer from 1 to 9223372036854775807)"},
      {"--eval-every -5", "invalid value '-5' for --eval-every"},
      {"--eval-every 2k", "invalid value '2k' for --eval-every"},
      {"--eval-every", "option '--eval-every' requires a value"},
      {"--eval-input", "option '--eval-input' requires a value"},
      {"--eval-input held.npy", "--eval-input held.npy: expected NAME=FILE"},
      {"--eval-input x=", "--eval-input x=: expected NAME=FILE"},
      {"--eval-input x=a --eval-input=x=b", "--eval-input x given twice"},
      {"--eval x=a", "unknown option '--eval'"},
      {"--generate 0 --prompt a", "invalid value '0' for --generate (expected an integer from 1 to 2305843009213693951)"},
      {"--generate 3", "--generate needs a prompt: --prompt TEXT or --prompt-file FILE"},
      {"--generate 3 --prompt a --prompt-file f", "--prompt and --prompt-file are two prompts: give one"},
      {"--prompt a", "--prompt needs --generate N"},
      {"--top-k 3", "--top-k needs --generate N"},
      {"--temperature 1", "--temperature needs --generate N"},
      {"--generate 3 --prompt a --top-k 0", "invalid value '0' for --top-k (expected an integer from 1 to 9223372036854775807)"},
      {"--generate 3 --prompt a --temperature -1", "invalid value '-1' for --temperature (expected 0 or a number from 1e-6 to 1e6)"},
      {"--generate 3 --prompt a --temperature 1e308", "invalid value '1e308' for --temperature (expected 0 or a number from 1e-6 to 1e6)"},
      {"--generate 3 --prompt a --temperature 1e-320", "invalid value '1e-320' for --temperature (expected 0 or a number from 1e-6 to 1e6)"},
      {"--generate 3 --prompt a --temperature 1e-7", "(expected 0 or a number from 1e-6 to 1e6)"},
      {"--generate 3 --prompt a --temperature 1000001", "(expected 0 or a number from 1e-6 to 1e6)"},
      {"--generate 3 --prompt a --temperature inf", "invalid value 'inf' for --temperature"},
      {"--generate 3 --prompt a --temperature 1e999", "invalid value '1e999' for --temperature"},
      {"--generate 3 --prompt a --temperature 0.5x", "invalid value '0.5x' for --temperature"},
      {"--generate 3 --prompt a --steps 1", "--steps does not go with --generate"},
      {"--generate 3 --prompt a --metrics m", "--metrics does not go with --generate"},
      {"--generate 3 --prompt a --output x=f", "--output does not go with --generate"},
      {"--generate 3 --prompt-file=", "option '--prompt-file' requires a non-empty value"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char line[128];
    strcpy(line, bad[i].line);
    err[0] = 0;
    CU_ASSERT_EQUAL(parse(line, &o, err), -1);
    if (!strstr(err, bad[i].want))
      fprintf(stderr, "\n  %s: got '%s', want '%s'", bad[i].line, err, bad[i].want);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, bad[i].want));
    gslrt_free_options(&o);
  }
}

static void test_log_every(void) {
  static const int64_t cases[][2] = {{1, 1},     {100, 1},    {101, 2},    {200, 2},
                                     {201, 5},   {500, 5},    {501, 10},   {1000, 10},
                                     {1001, 20}, {5000, 50},  {100000, 1000}};
  gslrt_options o;
  memset(&o, 0, sizeof o);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    o.steps = cases[i][0];
    CU_ASSERT_EQUAL(gslrt_log_every(&o), cases[i][1]);
  }
  o.log_every = 7;
  CU_ASSERT_EQUAL(gslrt_log_every(&o), 7);
}

/* Tokens per step: of the first input, rows (all dims but the last) if it
 * is f32, every element (token ids) if it is i32; params do not count. */
static void test_tokens_per_step(void) {
  gslrt_tensor t[3];
  gslrt_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  memset(t, 0, sizeof t);
  t[0].kind = GSLRT_PARAM, t[0].dtype = GSLRT_F32, t[0].rank = 2, t[0].global_shape[0] = 7;
  t[0].global_shape[1] = 9;
  t[1].kind = GSLRT_INPUT, t[1].dtype = GSLRT_I32, t[1].rank = 2, t[1].global_shape[0] = 4;
  t[1].global_shape[1] = 65; /* a language model's [B, T + 1] */
  t[2].kind = GSLRT_INPUT, t[2].dtype = GSLRT_F32, t[2].rank = 3, t[2].global_shape[0] = 2;
  t[2].global_shape[1] = 3, t[2].global_shape[2] = 5;
  ctx.tensors = t;
  CU_ASSERT_EQUAL(gslrt_tokens_per_step(&ctx), 1); /* no tensor */
  ctx.ntensors = 3;
  CU_ASSERT_EQUAL(gslrt_tokens_per_step(&ctx), 4 * 65);
  ctx.tensors = t + 2, ctx.ntensors = 1;
  CU_ASSERT_EQUAL(gslrt_tokens_per_step(&ctx), 2 * 3);
  t[2].rank = 0;
  CU_ASSERT_EQUAL(gslrt_tokens_per_step(&ctx), 1); /* a scalar input */
  t[1].rank = 0, ctx.tensors = t + 1;
  CU_ASSERT_EQUAL(gslrt_tokens_per_step(&ctx), 1);
}

/* ---- the checkpoint directory's layout (ckdir.c) -------------------------- */

/* A checkpoint's names: a step read back from 1 to 18 digits only (the
 * runtime and gslrun alike), the names made, the lock file's line. */
static void test_ckdir_names(void) {
  static const char *const not_steps[] = {"step-", "step-12a", "step--1", "step-+1", "step- 1", "Step-1", "step1",
                                          "step-00000004.tmp.9", "step-1.5", "", ".lock",
                                          "step-0000000000000000007", /* 19 digits */
                                          "step-9223372036854775808", /* past an int64 */
                                          "step-99999999999999999999"};
  char buf[64], host[256];
  long pid = 0;
  CU_ASSERT_EQUAL(gslrt_ckdir_step_of("step-00000004"), 4);
  CU_ASSERT_EQUAL(gslrt_ckdir_step_of("step-4"), 4);
  CU_ASSERT_EQUAL(gslrt_ckdir_step_of("step-0"), 0);
  CU_ASSERT_EQUAL(gslrt_ckdir_step_of("step-123456789"), 123456789);
  CU_ASSERT_EQUAL(gslrt_ckdir_step_of("step-000000000000000007"), 7);
  CU_ASSERT_EQUAL(gslrt_ckdir_step_of("step-999999999999999999"), 999999999999999999LL);
  for (size_t i = 0; i < sizeof not_steps / sizeof *not_steps; i++)
    CU_ASSERT_EQUAL(gslrt_ckdir_step_of(not_steps[i]), -1);
  CU_ASSERT_TRUE(gslrt_ckdir_is_temp("step-00000004.tmp.9"));
  CU_ASSERT_TRUE(gslrt_ckdir_is_temp("step-00000004.tmp.old.9"));
  CU_ASSERT_FALSE(gslrt_ckdir_is_temp("step-00000004"));
  CU_ASSERT_FALSE(gslrt_ckdir_is_temp("x.tmp.1"));
  CU_ASSERT_FALSE(gslrt_ckdir_is_temp(".lock"));
  CU_ASSERT_EQUAL(gslrt_ckdir_step_name(buf, sizeof buf, 4), 13);
  CU_ASSERT_STRING_EQUAL(buf, "step-00000004");
  gslrt_ckdir_step_name(buf, sizeof buf, 123456789);
  CU_ASSERT_STRING_EQUAL(buf, "step-123456789");
  gslrt_ckdir_step_name(buf, sizeof buf, 999999999999999999LL); /* --steps' greatest */
  CU_ASSERT_EQUAL(gslrt_ckdir_step_of(buf), 999999999999999999LL);
  gslrt_ckdir_temp_name(buf, sizeof buf, 4, 77);
  CU_ASSERT_STRING_EQUAL(buf, "step-00000004.tmp.77");
  CU_ASSERT_TRUE(gslrt_ckdir_is_temp(buf));
  CU_ASSERT_EQUAL(gslrt_ckdir_step_of(buf), -1);
  gslrt_ckdir_aside_name(buf, sizeof buf, "step-00000004", 77);
  CU_ASSERT_STRING_EQUAL(buf, "step-00000004.tmp.old.77");
  CU_ASSERT_TRUE(gslrt_ckdir_is_temp(buf));
  gslrt_ckdir_lock_line(buf, sizeof buf, 42, "n1");
  CU_ASSERT_STRING_EQUAL(buf, "pid 42 host n1\n");
  CU_ASSERT_TRUE(gslrt_ckdir_lock_holder(buf, &pid, host));
  CU_ASSERT_EQUAL(pid, 42);
  CU_ASSERT_STRING_EQUAL(host, "n1");
  CU_ASSERT_FALSE(gslrt_ckdir_lock_holder("pid 42", &pid, host));
  CU_ASSERT_FALSE(gslrt_ckdir_lock_holder("", &pid, host));
}

/* DIR/rel made: a directory if text is NULL, else a file holding text. */
static void ckdir_make(const char *dir, const char *rel, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, rel);
  if (!text) {
    CU_ASSERT_EQUAL_FATAL(mkdir(path, 0777), 0);
    return;
  }
  write_bytes(path, text, strlen(text));
}

/* Entries of a directory made by hand: their kinds, the newest complete
 * checkpoint (not the 19-digit name, the link, the bare directories, the
 * file or the temporary above it), and the run in a manifest (none in a
 * manifest with "run" twice or of 31 digits). */
static void test_ckdir_newest(void) {
  static const char *const made[] = {"step-00000002", "step-00000002/manifest.json",
                                     "step-0000000000000000009", "step-0000000000000000009/manifest.json",
                                     "step-00000007", "step-00000008", "step-00000008/manifest.json",
                                     "step-00000005.tmp.3", "step-00000005.tmp.3/manifest.json",
                                     "step-00000001", "step-00000001/manifest.json",
                                     "step-00000000", "step-00000000/manifest.json",
                                     "step-00000004", "step-00000006"};
  const char *run = "0123456789abcdef0123456789abcdef";
  char dir[256], path[512], found[CKDIR_NAME] = "", got[CKDIR_RUN] = "", err[256] = "";
  struct timespec mtime = {0, 0};
  size_t len = 0;
  snprintf(dir, sizeof dir, "%s", tests_tmp_path("ckdir"));
  CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0777), 0);
  int dfd = open(dir, O_RDONLY | O_DIRECTORY);
  CU_ASSERT_FATAL(dfd >= 0);
  CU_ASSERT_EQUAL(gslrt_ckdir_newest(dfd, found, sizeof found), -1); /* empty */
  ckdir_make(dir, made[0], NULL);
  ckdir_make(dir, made[1], "{\"run\": \"0123456789abcdef0123456789abcdef\", \"step\": 2}");
  ckdir_make(dir, made[2], NULL);
  ckdir_make(dir, made[3], "{\"run\": \"ffffffffffffffffffffffffffffffff\", \"step\": 9}");
  ckdir_make(dir, made[4], NULL); /* no manifest */
  ckdir_make(dir, made[5], NULL);
  ckdir_make(dir, made[6], NULL); /* a manifest that is a directory */
  ckdir_make(dir, made[7], NULL);
  ckdir_make(dir, made[8], "{\"run\": \"0123456789abcdef0123456789abcdef\", \"step\": 5}");
  ckdir_make(dir, made[9], NULL);
  ckdir_make(dir, made[10], "{\"run\": \"0123456789abcdef0123456789abcdef\", "
                            "\"run\": \"0123456789abcdef0123456789abcdef\"}");
  ckdir_make(dir, made[11], NULL);
  ckdir_make(dir, made[12], "{\"run\": \"0123456789abcdef0123456789abcde\"}");
  ckdir_make(dir, made[13], "not a directory");
  snprintf(path, sizeof path, "%s/%s", dir, made[14]);
  CU_ASSERT_EQUAL_FATAL(symlink("step-00000002", path), 0); /* a link to a complete checkpoint */
  CU_ASSERT_EQUAL(gslrt_ckdir_entry_kind(dfd, "step-00000002"), CKDIR_COMPLETE);
  CU_ASSERT_EQUAL(gslrt_ckdir_entry_kind(dfd, "step-0000000000000000009"), CKDIR_COMPLETE);
  CU_ASSERT_EQUAL(gslrt_ckdir_entry_kind(dfd, "step-00000007"), CKDIR_BARE_DIR);
  CU_ASSERT_EQUAL(gslrt_ckdir_entry_kind(dfd, "step-00000008"), CKDIR_BARE_DIR);
  CU_ASSERT_EQUAL(gslrt_ckdir_entry_kind(dfd, "step-00000004"), CKDIR_FILE);
  CU_ASSERT_EQUAL(gslrt_ckdir_entry_kind(dfd, "step-00000006"), CKDIR_LINK);
  CU_ASSERT_EQUAL(gslrt_ckdir_entry_kind(dfd, "step-00000003"), CKDIR_NONE);
  CU_ASSERT_EQUAL(gslrt_ckdir_newest(dfd, found, sizeof found), 2);
  CU_ASSERT_STRING_EQUAL(found, "step-00000002");
  CU_ASSERT_EQUAL(gslrt_ckdir_run_of(dfd, "step-00000002", got, &mtime), 0);
  CU_ASSERT_STRING_EQUAL(got, run);
  CU_ASSERT_TRUE(mtime.tv_sec > 0);
  CU_ASSERT_EQUAL(gslrt_ckdir_run_of(dfd, "step-00000002", got, NULL), 0);
  CU_ASSERT_EQUAL(gslrt_ckdir_run_of(dfd, "step-00000001", got, NULL), -1); /* "run" twice */
  CU_ASSERT_EQUAL(gslrt_ckdir_run_of(dfd, "step-00000000", got, NULL), -1); /* 31 digits */
  CU_ASSERT_EQUAL(gslrt_ckdir_run_of(dfd, "step-00000007", got, NULL), -1); /* no manifest */
  CU_ASSERT_EQUAL(gslrt_ckdir_run_of(dfd, "step-00000008", got, NULL), -1); /* not a regular file */
  char *text = gslrt_ckdir_read_manifest(dfd, "step-00000008", &len, err, sizeof err);
  CU_ASSERT_PTR_NULL(text);
  CU_ASSERT_STRING_EQUAL(err, "step-00000008/manifest.json: not a regular file");
  text = gslrt_ckdir_read_manifest(dfd, "step-00000002", &len, err, sizeof err);
  CU_ASSERT_PTR_NOT_NULL(text);
  CU_ASSERT_EQUAL(len, strlen("{\"run\": \"0123456789abcdef0123456789abcdef\", \"step\": 2}"));
  free(text);
  close(dfd);
  CU_ASSERT_EQUAL(gslrt_ckdir_newest(dfd, found, sizeof found), -2); /* DIR not open */
  for (int i = (int)(sizeof made / sizeof *made) - 1; i >= 0; i--) {
    snprintf(path, sizeof path, "%s/%s", dir, made[i]);
    if (remove(path) != 0)
      CU_FAIL("a scratch entry could not be removed");
  }
  CU_ASSERT_EQUAL(rmdir(dir), 0);
}

void add_runtime_tests(void) {
  CU_pSuite s = tests_suite("runtime");
  tests_add(s, "philox known answers", test_philox_kat);
  tests_add(s, "rng recipe", test_rng_recipe);
  tests_add(s, "rng eval keys", test_rng_eval_key);
  tests_add(s, "rng 53-bit uniform", test_rng_uniform53);
  tests_add(s, "choose a token", test_choose_token);
  tests_add(s, "rng tile invariance", test_rng_tiles);
  tests_add(s, "rng moments", test_rng_moments);
  tests_add(s, "npy round trip", test_npy_roundtrip);
  tests_add(s, "npy tiles", test_npy_tile);
  tests_add(s, "npy malformed", test_npy_malformed);
  tests_add(s, "sgemm", test_sgemm);
  tests_add(s, "gemm bf16, f32 out", test_gemm_bf16_f32);
  tests_add(s, "gemm bf16, bf16 out", test_gemm_bf16_bf16);
  tests_add(s, "gemm bf16 rounding", test_gemm_bf16_rounding);
  tests_add(s, "gemm primitive cache", test_gemm_cache);
  tests_add(s, "gemm pinned (--same-bits): chains of fmaf, any shape", test_gemm_pinned);
  tests_add(s, "gemm over filled slots", test_gemm_fill);
  tests_add(s, "gemm over filled slots: a primitive per bucket", test_gemm_fill_buckets);
  tests_add(s, "mesh tiles", test_tiles);
  tests_add(s, "block indices", test_block_index);
  tests_add(s, "pack blocks", test_pack_blocks);
  tests_add(s, "groups of one device", test_groups_of_one);
  tests_add(s, "options", test_options);
  tests_add(s, "log every", test_log_every);
  tests_add(s, "tokens per step", test_tokens_per_step);
  tests_add(s, "checkpoint directory: names", test_ckdir_names);
  tests_add(s, "checkpoint directory: entries, the newest, a run", test_ckdir_newest);
}
