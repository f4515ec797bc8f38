/* gemm_peak.c — how close the matrix-product libraries come to this CPU's
 * peak, one thread (bench/run.sh ONLY=gemm; see bench/README.md).
 *
 * First the peak, measured here, before and after the kernels (the better
 * counts): an unrolled loop of independent FMAs on the widest vectors the
 * CPU has (zmm with AVX-512F, and ymm beside it; ymm alone without), f32,
 * and with AVX512-BF16 the bf16 dot product vdpbf16ps (two multiply-adds
 * per f32 lane). Then every library kernel on the shapes GSL's examples
 * and benches multiply: OpenBLAS sgemm, oneDNN's f32 matmul, oneDNN's bf16
 * matmul (f32 out), the same two with M a runtime dimension (one primitive
 * for every row count: what oneDNN runs then, against the fixed primitive
 * the runtime makes for each bucket of a moe block's filled rows,
 * runtime/slots.c), OpenBLAS's sbgemm where the library exports it, and
 * the runtime's own gslrt_sgemm and gslrt_gemm_bf16 (which pick among
 * them), and gslc --same-bits' pinned products (runtime/pinned.c: each
 * element one chain of FMAs over k, whatever the shape). Then the runtime's products over a moe block's filled slots
 * alone (gslrt_sgemm_fill, gslrt_gemm_bf16_fill) on the examples' expert
 * shapes and fill counts, GFLOP/s counting the filled rows only. Each
 * kernel is set up once (a oneDNN primitive created once), run
 * GEMM_WARMUP times, then timed over GEMM_REPS repetitions of enough calls
 * to fill about GEMM_MS ms; the best repetition counts (on a loaded
 * machine, many short repetitions find the moments it had a core to
 * itself). The table gives GFLOP/s (2 m n k per product) and the fraction
 * of the measured peak of its type (f32: the FMA peak on the widest
 * vectors; bf16: the vdpbf16ps peak, or f32's without AVX512-BF16). The
 * inputs are bf16 values (exact in f32), so every kernel computes the same
 * sums; each result is checked against OpenBLAS's sgemm.
 *
 * Settings (environment): GEMM_PEAKS_ONLY (set: measure the peaks twice,
 * print them and stop: bench/run.sh's MFU), GEMM_REPS (default 5), GEMM_WARMUP (default 2),
 * GEMM_MS (default 50), GEMM_SHAPES ("b,m,n,k,ta,tb b,m,n,k,ta,tb ...",
 * default the list below). Build: bench/run.sh compiles it against
 * libgslrt.a and the runtime's libraries; run it with
 * OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1. */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>
#include <immintrin.h>
#include <oneapi/dnnl/dnnl.h>
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#endif

void openblas_set_num_threads(int num_threads);

static int reps, warmup;
/* Seconds of calls a repetition times (GEMM_MS). */
static double window;
static int failed;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v && atoi(v) > 0 ? atoi(v) : fallback;
}

/* ---- the peak: independent FMA chains ---------------------------------------- */

/* Loop trips of one repetition of a peak loop (16 vector FMAs each):
 * about window seconds at 250 GFLOP/s with zmm. */
static long peak_iters;

/* Best of reps of a loop of 16 independent zmm FMA chains: GFLOP/s. */
__attribute__((target("avx512f"))) static double peak_f32_zmm(void) {
  double best = 0;
  for (int r = 0; r < reps; r++) {
    __m512 acc[16], x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 16; i++)
      acc[i] = _mm512_set1_ps((float)i);
    double t = now();
    for (long it = 0; it < peak_iters; it++) {
      acc[0] = _mm512_fmadd_ps(acc[0], x, y), acc[1] = _mm512_fmadd_ps(acc[1], x, y);
      acc[2] = _mm512_fmadd_ps(acc[2], x, y), acc[3] = _mm512_fmadd_ps(acc[3], x, y);
      acc[4] = _mm512_fmadd_ps(acc[4], x, y), acc[5] = _mm512_fmadd_ps(acc[5], x, y);
      acc[6] = _mm512_fmadd_ps(acc[6], x, y), acc[7] = _mm512_fmadd_ps(acc[7], x, y);
      acc[8] = _mm512_fmadd_ps(acc[8], x, y), acc[9] = _mm512_fmadd_ps(acc[9], x, y);
      acc[10] = _mm512_fmadd_ps(acc[10], x, y), acc[11] = _mm512_fmadd_ps(acc[11], x, y);
      acc[12] = _mm512_fmadd_ps(acc[12], x, y), acc[13] = _mm512_fmadd_ps(acc[13], x, y);
      acc[14] = _mm512_fmadd_ps(acc[14], x, y), acc[15] = _mm512_fmadd_ps(acc[15], x, y);
    }
    t = now() - t;
    __m512 s = acc[0];
    for (int i = 1; i < 16; i++)
      s = _mm512_add_ps(s, acc[i]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    double g = 2.0 * 16 * 16 * peak_iters / t / 1e9;
    best = g > best ? g : best;
  }
  return best;
}

/* The same with 12 ymm chains (AVX2 has 16 ymm registers). */
__attribute__((target("avx2,fma"))) static double peak_f32_ymm(void) {
  double best = 0;
  for (int r = 0; r < reps; r++) {
    __m256 acc[12], x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++)
      acc[i] = _mm256_set1_ps((float)i);
    double t = now();
    for (long it = 0; it < peak_iters; it++) {
      acc[0] = _mm256_fmadd_ps(acc[0], x, y), acc[1] = _mm256_fmadd_ps(acc[1], x, y);
      acc[2] = _mm256_fmadd_ps(acc[2], x, y), acc[3] = _mm256_fmadd_ps(acc[3], x, y);
      acc[4] = _mm256_fmadd_ps(acc[4], x, y), acc[5] = _mm256_fmadd_ps(acc[5], x, y);
      acc[6] = _mm256_fmadd_ps(acc[6], x, y), acc[7] = _mm256_fmadd_ps(acc[7], x, y);
      acc[8] = _mm256_fmadd_ps(acc[8], x, y), acc[9] = _mm256_fmadd_ps(acc[9], x, y);
      acc[10] = _mm256_fmadd_ps(acc[10], x, y), acc[11] = _mm256_fmadd_ps(acc[11], x, y);
    }
    t = now() - t;
    __m256 s = acc[0];
    for (int i = 1; i < 12; i++)
      s = _mm256_add_ps(s, acc[i]);
    float v[8];
    _mm256_storeu_ps(v, s);
    volatile float sink = v[0];
    (void)sink;
    double g = 2.0 * 8 * 12 * peak_iters / t / 1e9;
    best = g > best ? g : best;
  }
  return best;
}

/* 16 independent vdpbf16ps chains: 16 lanes x 2 multiply-adds each. */
__attribute__((target("avx512f,avx512bf16"))) static double peak_bf16_zmm(void) {
  double best = 0;
  for (int r = 0; r < reps; r++) {
    __m512 acc[16];
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3380);
    for (int i = 0; i < 16; i++)
      acc[i] = _mm512_set1_ps((float)i);
    double t = now();
    for (long it = 0; it < peak_iters; it++) {
      acc[0] = _mm512_dpbf16_ps(acc[0], x, y), acc[1] = _mm512_dpbf16_ps(acc[1], x, y);
      acc[2] = _mm512_dpbf16_ps(acc[2], x, y), acc[3] = _mm512_dpbf16_ps(acc[3], x, y);
      acc[4] = _mm512_dpbf16_ps(acc[4], x, y), acc[5] = _mm512_dpbf16_ps(acc[5], x, y);
      acc[6] = _mm512_dpbf16_ps(acc[6], x, y), acc[7] = _mm512_dpbf16_ps(acc[7], x, y);
      acc[8] = _mm512_dpbf16_ps(acc[8], x, y), acc[9] = _mm512_dpbf16_ps(acc[9], x, y);
      acc[10] = _mm512_dpbf16_ps(acc[10], x, y), acc[11] = _mm512_dpbf16_ps(acc[11], x, y);
      acc[12] = _mm512_dpbf16_ps(acc[12], x, y), acc[13] = _mm512_dpbf16_ps(acc[13], x, y);
      acc[14] = _mm512_dpbf16_ps(acc[14], x, y), acc[15] = _mm512_dpbf16_ps(acc[15], x, y);
    }
    t = now() - t;
    __m512 s = acc[0];
    for (int i = 1; i < 16; i++)
      s = _mm512_add_ps(s, acc[i]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    double g = 4.0 * 16 * 16 * peak_iters / t / 1e9;
    best = g > best ? g : best;
  }
  return best;
}

/* ---- the kernels ------------------------------------------------------------------ */

/* One product: batch x op(A)[m, k] op(B)[k, n], dense operands (ld = the
 * stored row, batch strides = the stored matrix). */
typedef struct shape {
  int64_t batch, m, n, k;
  int ta, tb;
} shape;

/* The operands: f32 and bf16 copies of the same (bf16-exact) values, and a
 * result buffer per output type. */
typedef struct operands {
  shape s;
  int64_t lda, ldb, sa, sb;
  float *a, *b, *c, *ref;
  uint16_t *ha, *hb;
} operands;

enum kernel { K_SGEMM, K_DNNL_F32, K_DNNL_BF16, K_DNNL_F32_RTM, K_DNNL_BF16_RTM, K_SBGEMM, K_GSLRT_F32,
              K_GSLRT_BF16, K_PINNED_F32, K_PINNED_BF16, NKERNELS };
static const char *kernel_name[NKERNELS] = {"openblas sgemm", "onednn f32", "onednn bf16", "onednn f32 rt-M",
                                            "onednn bf16 rt-M", "openblas sbgemm", "gslrt_sgemm",
                                            "gslrt_gemm_bf16", "pinned f32", "pinned bf16"};
static const int kernel_bf16[NKERNELS] = {0, 0, 1, 0, 1, 1, 0, 1, 0, 1};
/* The oneDNN kernels: bf16 operands, and M (with the strides it sets) a
 * runtime dimension (DNNL_RUNTIME_DIM_VAL), one primitive for every row
 * count, as a product over a moe block's filled slots could use. */
static const int kernel_dnn_bf16[NKERNELS] = {[K_DNNL_BF16] = 1, [K_DNNL_BF16_RTM] = 1};
static const int kernel_dnn_rtm[NKERNELS] = {[K_DNNL_F32_RTM] = 1, [K_DNNL_BF16_RTM] = 1};
#define IS_DNN(k) ((k) == K_DNNL_F32 || (k) == K_DNNL_BF16 || (k) == K_DNNL_F32_RTM || (k) == K_DNNL_BF16_RTM)

/* cblas_sbgemm, if the OpenBLAS loaded exports it (Debian's 0.3.21 does not). */
typedef void (*sbgemm_fn)(int, int, int, int, int, int, float, const uint16_t *, int,
                          const uint16_t *, int, float, float *, int);
static sbgemm_fn sbgemm;

static dnnl_engine_t eng;
static dnnl_stream_t strm;

/* A oneDNN matmul set up for o: primitive and memories, made once. */
typedef struct dnn_gemm {
  dnnl_primitive_t prim;
  dnnl_memory_t mem[3];
  char impl[64];
} dnn_gemm;

/* A dense operand stored rows x cols per batch entry, read transposed
 * when trans; m_rows / m_cols: the stored rows / columns are M, made a
 * runtime dimension when rtm (with every stride that depends on it). */
static void md3(dnnl_memory_desc_t *md, dnnl_data_type_t t, int64_t batch, int trans, int64_t rows,
                int64_t cols, int rtm, int m_rows, int m_cols) {
  int64_t r = rtm && m_rows ? DNNL_RUNTIME_DIM_VAL : rows, c = rtm && m_cols ? DNNL_RUNTIME_DIM_VAL : cols;
  int64_t size = rtm && (m_rows || m_cols) ? DNNL_RUNTIME_DIM_VAL : rows * cols;
  dnnl_dims_t dims = {batch, trans ? c : r, trans ? r : c};
  dnnl_dims_t strides = {size, trans ? 1 : c, trans ? c : 1};
  dnnl_memory_desc_init_by_strides(md, 3, dims, t, strides);
}

static int dnn_setup(dnn_gemm *g, const operands *o, int bf16, int rtm) {
  const shape *s = &o->s;
  dnnl_data_type_t t = bf16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t md[3], pmd[3];
  dnnl_matmul_desc_t op;
  dnnl_primitive_desc_t pd;
  const char *impl = "?";
  for (int v = 0; v < 2; v++) { /* the primitive's descriptors (M runtime if rtm), then the memories' */
    dnnl_memory_desc_t *d = v ? md : pmd;
    int r = v ? 0 : rtm;
    md3(&d[0], t, s->batch, s->ta, s->ta ? s->k : s->m, s->ta ? s->m : s->k, r, !s->ta, s->ta);
    md3(&d[1], t, s->batch, s->tb, s->tb ? s->n : s->k, s->tb ? s->k : s->n, 0, 0, 0);
    md3(&d[2], dnnl_f32, s->batch, 0, s->m, s->n, r, 1, 0);
  }
  if (dnnl_matmul_desc_init(&op, &pmd[0], &pmd[1], NULL, &pmd[2]) != dnnl_success ||
      dnnl_primitive_desc_create(&pd, &op, NULL, eng, NULL) != dnnl_success)
    return 0;
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  snprintf(g->impl, sizeof g->impl, "%s", impl);
  int ok = dnnl_primitive_create(&g->prim, pd) == dnnl_success;
  dnnl_primitive_desc_destroy(pd);
  void *h[3] = {bf16 ? (void *)o->ha : o->a, bf16 ? (void *)o->hb : o->b, o->c};
  for (int i = 0; i < 3 && ok; i++)
    ok = dnnl_memory_create(&g->mem[i], &md[i], eng, h[i]) == dnnl_success;
  return ok;
}

static void dnn_run(const dnn_gemm *g) {
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, g->mem[0]}, {DNNL_ARG_WEIGHTS, g->mem[1]},
                             {DNNL_ARG_DST, g->mem[2]}};
  dnnl_primitive_execute(g->prim, strm, 3, args);
  dnnl_stream_wait(strm);
}

/* One call of kernel k on o (dnn: its primitive for the oneDNN kernels). */
static void run(int k, const operands *o, const dnn_gemm *dnn) {
  const shape *s = &o->s;
  int64_t sc = s->m * s->n;
  switch (k) {
  case K_SGEMM:
    for (int64_t e = 0; e < s->batch; e++)
      cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans,
                  (int)s->m, (int)s->n, (int)s->k, 1.0f, o->a + e * o->sa, (int)o->lda,
                  o->b + e * o->sb, (int)o->ldb, 0.0f, o->c + e * sc, (int)s->n);
    break;
  case K_SBGEMM:
    for (int64_t e = 0; e < s->batch; e++)
      sbgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans,
             (int)s->m, (int)s->n, (int)s->k, 1.0f, o->ha + e * o->sa, (int)o->lda, o->hb + e * o->sb,
             (int)o->ldb, 0.0f, o->c + e * sc, (int)s->n);
    break;
  case K_DNNL_F32:
  case K_DNNL_BF16:
  case K_DNNL_F32_RTM:
  case K_DNNL_BF16_RTM:
    dnn_run(dnn);
    break;
  case K_GSLRT_F32:
    gslrt_sgemm(s->batch, s->ta, s->tb, s->m, s->n, s->k, o->a, o->lda, o->sa, o->b, o->ldb, o->sb,
                o->c, s->n, sc);
    break;
  case K_GSLRT_BF16:
    gslrt_gemm_bf16(s->batch, s->ta, s->tb, s->m, s->n, s->k, o->ha, o->lda, o->sa, o->hb, o->ldb,
                    o->sb, o->c, GSLRT_F32, s->n, sc);
    break;
  case K_PINNED_F32: /* gslc --same-bits' products (runtime/pinned.c) */
    gslrt_sgemm_pinned(s->batch, s->ta, s->tb, s->m, s->n, s->k, o->a, o->lda, o->sa, o->b, o->ldb, o->sb,
                       o->c, s->n, sc);
    break;
  case K_PINNED_BF16:
    gslrt_gemm_bf16_pinned(s->batch, s->ta, s->tb, s->m, s->n, s->k, o->ha, o->lda, o->sa, o->hb, o->ldb,
                           o->sb, o->c, GSLRT_F32, s->n, sc);
    break;
  }
}

/* Best GFLOP/s of kernel k on o over reps; -1 if it cannot run. */
static double time_kernel(int k, const operands *o, char *note, size_t len) {
  const shape *s = &o->s;
  dnn_gemm dnn = {0};
  note[0] = 0;
  if (k == K_SBGEMM && !sbgemm)
    return -1;
  if (IS_DNN(k) && !dnn_setup(&dnn, o, kernel_dnn_bf16[k], kernel_dnn_rtm[k])) {
    snprintf(note, len, "no primitive");
    return -1;
  }
  if (IS_DNN(k))
    snprintf(note, len, "%s", dnn.impl);
  double flops = 2.0 * (double)s->batch * (double)s->m * (double)s->n * (double)s->k;
  memset(o->c, 0, (size_t)(s->batch * s->m * s->n) * sizeof *o->c);
  double t = now();
  for (int w = 0; w < warmup; w++)
    run(k, o, &dnn);
  t = (now() - t) / (warmup > 0 ? warmup : 1);
  int calls = t > 0 ? (int)(window / t) : 1;
  calls = calls < 1 ? 1 : calls > 10000 ? 10000 : calls;
  double best = 0;
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    for (int i = 0; i < calls; i++)
      run(k, o, &dnn);
    double g = flops * calls / (now() - t0) / 1e9;
    best = g > best ? g : best;
  }
  /* the same sums as OpenBLAS's sgemm on the same (bf16-exact) values */
  double err = 0, scale = 0;
  for (int64_t i = 0; i < s->batch * s->m * s->n; i++) {
    err = fmax(err, fabs((double)o->c[i] - (double)o->ref[i]));
    scale = fmax(scale, fabs((double)o->ref[i]));
  }
  if (!(err <= 1e-5 * scale)) {
    size_t used = strlen(note);
    snprintf(note + used, len - used, "%sWRONG: max error %.3g of %.3g", used ? "; " : "", err, scale);
    failed = 1;
  }
  if (dnn.prim) {
    for (int i = 0; i < 3; i++)
      dnnl_memory_destroy(dnn.mem[i]);
    dnnl_primitive_destroy(dnn.prim);
  }
  return best;
}

/* ---- products over a moe block's filled slots ---------------------------------- */

/* gslrt_sgemm_fill and gslrt_gemm_bf16_fill as the examples call them: a
 * batch of experts whose rows (by depth: whose summed index) are `blocks`
 * blocks of slots, each block's count of filled slots drawn from [lo, hi]
 * (a fixed LCG: 16 patterns, cycled from call to call). The counts are
 * what the examples meet: examples/lm.gsl's experts 1 to 127 of 128 rows,
 * about 85 on average; bench/moe_train.gsl's 227 to 293 of 512. */
typedef struct fill_shape {
  int64_t batch, m, n, k; /* the product as written, every slot counted */
  int ta, depth;          /* A transposed; the slots are the summed index (else the rows) */
  int64_t blocks;         /* (expert, group) blocks of slots per entry */
  int lo, hi;             /* the range of a block's filled slots */
} fill_shape;

static const fill_shape fill_shapes[] = {
    {8, 128, 512, 128, 0, 0, 8, 5, 16}, /* lm: t @ wi[e] */
    {8, 512, 128, 128, 1, 1, 8, 5, 16}, /* lm: wo[e]'s gradient, summed over the slots */
    {8, 512, 256, 64, 0, 0, 4, 50, 80}, /* moe_train: t @ wi[e] */
    {8, 256, 64, 512, 1, 1, 4, 50, 80}, /* moe_train: wo[e]'s gradient */
};

/* Best GFLOP/s of one filled-slots product, counting the filled rows
 * (terms) alone: 2 n k a filled row, 2 m n a filled term; the first
 * pattern's result checked against OpenBLAS's sgemm on A with its empty
 * slots zeroed. */
static double time_fill(const fill_shape *f, int bf16, char *note, size_t len) {
  int64_t b = f->batch, m = f->m, n = f->n, k = f->k, all = f->depth ? k : m, slots = all / f->blocks;
  int64_t lda = f->ta ? m : k, na = b * m * k, nb = b * k * n, nc = b * m * n;
  float *a = malloc((size_t)na * 4), *bm = malloc((size_t)nb * 4), *c = malloc((size_t)nc * 4),
        *ref = malloc((size_t)nc * 4), *za = malloc((size_t)na * 4);
  uint16_t *ha = malloc((size_t)na * 2), *hb = malloc((size_t)nb * 2);
  int32_t *fill = malloc(sizeof *fill * (size_t)(16 * b * f->blocks));
  if (!a || !bm || !c || !ref || !za || !ha || !hb || !fill) {
    fprintf(stderr, "gemm_peak: out of memory for a filled-slots product\n");
    exit(1);
  }
  uint32_t x = 12345;
  for (int64_t i = 0; i < na + nb; i++) {
    x = x * 1664525u + 1013904223u;
    float v = (float)((int)(x >> 24) - 128) / 128.0f;
    if (i < na)
      a[i] = v, ha[i] = gslrt_bf16_round(v);
    else
      bm[i - na] = v, hb[i - na] = gslrt_bf16_round(v);
  }
  double filled = 0;
  for (int64_t i = 0; i < 16 * b * f->blocks; i++) {
    x = x * 1664525u + 1013904223u;
    fill[i] = f->lo + (int32_t)((x >> 16) % (uint32_t)(f->hi - f->lo + 1));
    filled += fill[i];
  }
  double flop = 2.0 * filled / 16 * (double)(f->depth ? m * n : n * k); /* a call, on average */
  /* the reference: the whole product with the first pattern's empty slots of A zeroed */
  memcpy(za, a, (size_t)na * 4);
  for (int64_t e = 0; e < b; e++)
    for (int64_t s = 0; s < all; s++)
      if (s % slots >= fill[e * f->blocks + s / slots]) /* slot s of entry e is empty: its row (term) of op(A) */
        for (int64_t t = 0; t < (f->depth ? m : k); t++)
          za[e * m * k + (f->depth == f->ta ? s * lda + t : t * lda + s)] = 0;
  for (int64_t e = 0; e < b; e++)
    cblas_sgemm(CblasRowMajor, f->ta ? CblasTrans : CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f,
                za + e * m * k, (int)lda, bm + e * k * n, (int)n, 0.0f, ref + e * m * n, (int)n);
  int calls = 0;
  double best = 0;
  for (int r = -1; r < reps; r++) { /* r = -1: the warm-up, which also sizes a repetition */
    int count = r < 0 ? 16 * warmup + 16 : calls;
    double t0 = now();
    for (int i = 0; i < count; i++) {
      const int32_t *fi = fill + (i % 16) * b * f->blocks;
      if (bf16)
        gslrt_gemm_bf16_fill(b, f->ta, 0, m, n, k, ha, lda, m * k, hb, n, k * n, c, n, m * n, fi, f->blocks,
                             slots, f->depth);
      else
        gslrt_sgemm_fill(b, f->ta, 0, m, n, k, a, lda, m * k, bm, n, k * n, c, n, m * n, fi, f->blocks, slots,
                         f->depth);
    }
    double t = now() - t0;
    if (r < 0)
      calls = (int)(window / (t / count)) < 16 ? 16 : (int)(window / (t / count));
    else
      best = fmax(best, flop * count / t / 1e9);
  }
  if (bf16)
    gslrt_gemm_bf16_fill(b, f->ta, 0, m, n, k, ha, lda, m * k, hb, n, k * n, c, n, m * n, fill, f->blocks, slots,
                         f->depth);
  else
    gslrt_sgemm_fill(b, f->ta, 0, m, n, k, a, lda, m * k, bm, n, k * n, c, n, m * n, fill, f->blocks, slots,
                     f->depth);
  double err = 0, scale = 0;
  for (int64_t i = 0; i < nc; i++) {
    err = fmax(err, fabs((double)c[i] - (double)ref[i]));
    scale = fmax(scale, fabs((double)ref[i]));
  }
  note[0] = 0;
  if (!(err <= 1e-5 * scale)) {
    snprintf(note, len, "WRONG: max error %.3g of %.3g", err, scale);
    failed = 1;
  }
  free(a), free(bm), free(c), free(ref), free(za), free(ha), free(hb), free(fill);
  return best;
}

static const char *default_shapes =
    "1,512,512,128,0,0 1,520,256,128,0,0 1,2048,256,64,0,0 1,2048,64,256,0,0 "
    "1,1024,1024,1024,0,0 1,8192,1024,256,0,0 "
    "1,64,256,2048,1,0 1,2048,64,256,0,1 1,256,1024,8192,1,0 1,8192,256,1024,0,1 "
    "8,256,1024,256,0,0 32,64,64,32,0,1 32,64,32,64,0,0 "
    "1,96,512,128,0,0 1,272,256,64,0,0 1,272,64,256,0,1 "
    "1,512,128,64,1,0 1,512,128,128,1,0"; /* the lm's weight gradients: A transposed, m >= k (blas.c's flip_a) */

/* The peaks of this run: the better of the measurements before and after
 * the kernels (f32: on the widest vectors; bf16: vdpbf16ps, else f32's). */
static double peak_f32, peak_bf16;

static void peaks(int zmm, int ymm, int bf16, const char *when) {
  double z = zmm ? peak_f32_zmm() : 0, y = ymm ? peak_f32_ymm() : 0, b = bf16 ? peak_bf16_zmm() : 0;
  printf("peak, %s: f32 FMA zmm (16 chains) ", when);
  printf(zmm ? "%.1f" : "-", z);
  printf(", ymm (12 chains) ");
  printf(ymm ? "%.1f" : "-", y);
  printf(", bf16 vdpbf16ps zmm (16 chains) ");
  printf(bf16 ? "%.1f" : "-", b);
  printf(" GFLOP/s\n");
  double f = zmm ? z : y;
  peak_f32 = f > peak_f32 ? f : peak_f32;
  b = bf16 ? b : peak_f32;
  peak_bf16 = b > peak_bf16 ? b : peak_bf16;
}

/* One line of the table, printed once the peaks are known. */
typedef struct row {
  char shape[64]; /* the product, as describe writes it */
  int kernel;     /* enum kernel */
  double gflops;  /* best GFLOP/s; -1: the kernel could not run it */
  char note[160]; /* oneDNN's kernel, or why not, or WRONG */
} row;

#define MAX_ROWS 512
static row rows[MAX_ROWS];
static int nrows;

static void describe(const shape *s, char *buf, size_t len) {
  char b[24] = "";
  if (s->batch > 1)
    snprintf(b, sizeof b, "%lld x ", (long long)s->batch);
  snprintf(buf, len, "%s[%lld,%lld]%sx[%lld,%lld]%s", b, (long long)s->m, (long long)s->k,
           s->ta ? "^T" : "", (long long)s->k, (long long)s->n, s->tb ? "^T" : "");
}

int main(void) {
  reps = env_int("GEMM_REPS", 5);
  warmup = env_int("GEMM_WARMUP", 2);
  window = env_int("GEMM_MS", 50) / 1000.0;
  peak_iters = (long)(window * 250e9 / 512);
  openblas_set_num_threads(1);
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
  omp_set_num_threads(1);
#endif
  sbgemm = (sbgemm_fn)dlsym(RTLD_DEFAULT, "cblas_sbgemm");
  if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&strm, eng, dnnl_stream_default_flags) != dnnl_success) {
    fprintf(stderr, "gemm_peak: cannot create oneDNN's CPU engine\n");
    return 1;
  }
  __builtin_cpu_init();
  int zmm = __builtin_cpu_supports("avx512f"), ymm = __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma"), bf16 = zmm && __builtin_cpu_supports("avx512bf16");

  printf("GSL gemm benchmark: the FMA peak and the library kernels, one thread\n");
  printf("  best of %d repetitions (each about %g ms of calls after %d warm-up calls)\n", reps,
         window * 1000, warmup);
  printf("  OpenBLAS %s (core %s%s%s), oneDNN %d.%d.%d, sbgemm %s\n", openblas_get_config(),
         openblas_get_corename(), getenv("OPENBLAS_CORETYPE") ? ", OPENBLAS_CORETYPE=" : "",
         getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "",
         (int)dnnl_version()->major, (int)dnnl_version()->minor, (int)dnnl_version()->patch,
         sbgemm ? "exported" : "not exported by this OpenBLAS");
  peaks(zmm, ymm, bf16, "before the kernels");
  if (getenv("GEMM_PEAKS_ONLY")) { /* bench/run.sh's MFU: the peaks alone, measured twice */
    peaks(zmm, ymm, bf16, "again");
    printf("peaks used: f32 %.1f, bf16 %.1f GFLOP/s (the better of the two measurements)\n", peak_f32,
           peak_bf16);
    return 0;
  }

  const char *list = getenv("GEMM_SHAPES") ? getenv("GEMM_SHAPES") : default_shapes;
  char *copy = strdup(list), *save = NULL;
  for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
    operands o = {0};
    shape *s = &o.s;
    long long v[6];
    if (sscanf(tok, "%lld,%lld,%lld,%lld,%lld,%lld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6 ||
        v[0] < 1 || v[1] < 1 || v[2] < 1 || v[3] < 1) {
      fprintf(stderr, "gemm_peak: GEMM_SHAPES: bad entry '%s' (want b,m,n,k,ta,tb)\n", tok);
      return 2;
    }
    *s = (shape){v[0], v[1], v[2], v[3], v[4] != 0, v[5] != 0};
    o.lda = s->ta ? s->m : s->k, o.ldb = s->tb ? s->k : s->n;
    o.sa = s->m * s->k, o.sb = s->k * s->n;
    size_t na = (size_t)(s->batch * o.sa), nb = (size_t)(s->batch * o.sb),
           nc = (size_t)(s->batch * s->m * s->n);
    o.a = malloc(na * 4), o.b = malloc(nb * 4), o.c = malloc(nc * 4), o.ref = malloc(nc * 4);
    o.ha = malloc(na * 2), o.hb = malloc(nb * 2);
    if (!o.a || !o.b || !o.c || !o.ref || !o.ha || !o.hb) {
      fprintf(stderr, "gemm_peak: out of memory for %s\n", tok);
      return 1;
    }
    /* values in [-1, 1) with 8 significant bits: exact in bf16 */
    uint32_t x = 12345;
    for (size_t i = 0; i < na + nb; i++) {
      x = x * 1664525u + 1013904223u;
      float f = (float)((int)(x >> 24) - 128) / 128.0f;
      if (i < na)
        o.a[i] = f, o.ha[i] = gslrt_bf16_round(f);
      else
        o.b[i - na] = f, o.hb[i - na] = gslrt_bf16_round(f);
    }
    run(K_SGEMM, &o, NULL);
    memcpy(o.ref, o.c, nc * 4);
    char name[64], note[160];
    describe(s, name, sizeof name);
    for (int k = 0; k < NKERNELS; k++) {
      double g = time_kernel(k, &o, note, sizeof note);
      if (g < 0 && k == K_SBGEMM)
        continue;
      if (nrows == MAX_ROWS) {
        fprintf(stderr, "gemm_peak: more than %d rows\n", MAX_ROWS);
        return 2;
      }
      row *r = &rows[nrows++];
      snprintf(r->shape, sizeof r->shape, "%s", name);
      snprintf(r->note, sizeof r->note, "%s", note);
      r->kernel = k, r->gflops = g;
    }
    free(o.a), free(o.b), free(o.c), free(o.ref), free(o.ha), free(o.hb);
  }
  free(copy);
  double fill_gflops[2 * sizeof fill_shapes / sizeof fill_shapes[0]];
  char fill_note[2 * sizeof fill_shapes / sizeof fill_shapes[0]][96];
  for (size_t i = 0; i < 2 * sizeof fill_shapes / sizeof fill_shapes[0]; i++)
    fill_gflops[i] = time_fill(&fill_shapes[i / 2], (int)(i % 2), fill_note[i], sizeof fill_note[i]);
  peaks(zmm, ymm, bf16, "after them");
  printf("peaks used: f32 %.1f, bf16 %.1f GFLOP/s (the better of the two measurements)\n", peak_f32,
         peak_bf16);
  printf("\n%-28s %-16s %9s %8s   %s\n", "shape", "kernel", "GFLOP/s", "of peak", "oneDNN kernel / note");
  for (int i = 0; i < nrows; i++) {
    const row *r = &rows[i];
    double p = kernel_bf16[r->kernel] ? peak_bf16 : peak_f32;
    if (r->gflops < 0)
      printf("%-28s %-16s %9s %8s   %s\n", r->shape, kernel_name[r->kernel], "-", "-", r->note);
    else if (p <= 0)
      printf("%-28s %-16s %9.1f %8s   %s\n", r->shape, kernel_name[r->kernel], r->gflops, "-", r->note);
    else
      printf("%-28s %-16s %9.1f %7.0f%%   %s\n", r->shape, kernel_name[r->kernel], r->gflops,
             100 * r->gflops / p, r->note);
  }
  printf("\nover a moe block's filled slots (runtime/slots.c), GFLOP/s of the filled rows (terms) alone:\n");
  printf("%-28s %-10s %-22s %9s %8s   %s\n", "product", "slots", "kernel", "GFLOP/s", "of peak", "note");
  for (size_t i = 0; i < 2 * sizeof fill_shapes / sizeof fill_shapes[0]; i++) {
    const fill_shape *f = &fill_shapes[i / 2];
    shape s = {f->batch, f->m, f->n, f->k, f->ta, 0};
    char name[64], slots[32];
    describe(&s, name, sizeof name);
    snprintf(slots, sizeof slots, "%s %d-%d/%lld", f->depth ? "sum" : "rows", f->lo, f->hi,
             (long long)((f->depth ? f->k : f->m) / f->blocks));
    double p = i % 2 ? peak_bf16 : peak_f32;
    printf("%-28s %-10s %-22s %9.1f %7.0f%%   %s\n", name, slots, i % 2 ? "gslrt_gemm_bf16_fill" : "gslrt_sgemm_fill",
           fill_gflops[i], p > 0 ? 100 * fill_gflops[i] / p : 0.0, fill_note[i]);
  }
  gslrt_gemm_counts n;
  gslrt_gemm_get_counts(&n);
  printf("(of peak: f32 kernels against the f32 FMA peak, bf16 kernels against the bf16 peak;\n"
         " gslrt_*: the runtime's choice, %lld oneDNN primitives made, %lld declined, %lld cache hits)\n",
         (long long)n.created, (long long)n.declined, (long long)n.hits);
  if (failed)
    printf("FAILED: some kernel's result differs from OpenBLAS's sgemm\n");
  return failed;
}
