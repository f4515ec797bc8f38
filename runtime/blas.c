/* blas.c — the runtime's matrix products: gslrt_sgemm (f32) and
 * gslrt_gemm_bf16 (bf16 inputs, f32 accumulation), batched and row-major,
 * each sent to the library that is fastest for its type on this CPU.
 *
 * oneDNN's matmul primitive reaches the core's vector peak where OpenBLAS
 * (0.3.21, Haswell kernels under OPENBLAS_CORETYPE=Haswell) does not: a
 * product goes to it as three 3-D memory descriptors with strides (batch
 * stride, leading dimension, 1; a transposed operand swaps the last two),
 * and its primitive is created once per distinct descriptor, the
 * (type, batch, m, n, k, trans, ld, strides) key, and kept in a small open
 * hash table for the rest of the run: later calls only set the data handles
 * and execute on one CPU stream. A shape oneDNN declines, or serves only
 * with its reference (scalar) kernel, is remembered as declined: f32 goes
 * to OpenBLAS; bf16 (on a CPU without AVX-512, oneDNN 2.6 has no bf16
 * product) is widened exactly to f32 in buffers kept for the run,
 * multiplied as an f32 product of its shape is (oneDNN or OpenBLAS), and
 * rounded back when C is bf16. Nothing here fails for want of a kernel.
 *
 * Which library runs an f32 product is decided per shape by what
 * bench/gemm_peak.c measured on this project's machine; see f32_by_onednn.
 *
 * GSL_GEMM=openblas in the environment sends every product to OpenBLAS, as
 * before oneDNN (for comparisons; gslrun(7)).
 *
 * One thread per process (the MPI ranks already fill the cores): OpenBLAS
 * is set to one thread, and so is OpenMP, the threading runtime of Debian's
 * oneDNN build, before the first primitive is created. Dimensions must fit
 * CBLAS's int for the OpenBLAS path. */
#include "internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#endif

void openblas_set_num_threads(int num_threads);

/* What the products have done since the start of the run (internal.h). */
static gslrt_gemm_counts counts;

void gslrt_gemm_get_counts(gslrt_gemm_counts *out) { *out = counts; }

/* 0: oneDNN is not used (gslrt_gemm_use_onednn, or GSL_GEMM=openblas in
 * the environment); -1: not decided yet. */
static int onednn_on = -1;

void gslrt_gemm_use_onednn(int on) { onednn_on = on; }

/* 1: every product goes to pinned.c's chains (gslc --same-bits) */
static int pinned_on;

void gslrt_gemm_pin(int on) { pinned_on = on; }

/* ---- OpenBLAS ---------------------------------------------------------------- */

static void blas_sgemm(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n,
                       int64_t k, const float *a, int64_t lda, int64_t stride_a, const float *b,
                       int64_t ldb, int64_t stride_b, float *c, int64_t ldc, int64_t stride_c) {
  static int threads_set;
  if (!threads_set) {
    openblas_set_num_threads(1);
    threads_set = 1;
  }
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
    gslrt_fatal(NULL, "gslrt_sgemm: dimensions m=%lld n=%lld k=%lld (lda %lld, ldb %lld, ldc %lld) "
                "out of CBLAS's range", (long long)m, (long long)n, (long long)k, (long long)lda,
                (long long)ldb, (long long)ldc);
  counts.blas_calls++;
  for (int64_t i = 0; i < batch; i++)
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, 1.0f,
                a + i * stride_a, (int)lda, b + i * stride_b, (int)ldb, 0.0f,
                c + i * stride_c, (int)ldc);
}

/* ---- oneDNN: the engine, the stream and the primitive cache ------------------- */

/* The operand types of a product: the first field of the key. */
enum gemm_type { GEMM_F32 = 0, GEMM_BF16_F32 = 1, GEMM_BF16_BF16 = 2 };

#define GEMM_KEY_LEN 13 /* type, batch, trans_a, trans_b, m, n, k, lda, ldb, ldc, 3 batch strides */

/* One distinct product: its primitive, or the fact that oneDNN declined it. */
typedef struct gemm_entry {
  int64_t key[GEMM_KEY_LEN];     /* the descriptor (make_key) */
  int used;                      /* the slot holds an entry */
  dnnl_primitive_t prim;         /* the matmul; NULL: declined, OpenBLAS runs it */
  dnnl_memory_t mem[3];          /* A, B, C (src, weights, dst); their handles set per call */
} gemm_entry;

static struct {
  int tried;           /* the engine was attempted */
  dnnl_engine_t eng;   /* the CPU engine, NULL if oneDNN is unusable */
  dnnl_stream_t strm;  /* its one stream */
  gemm_entry *slots;   /* open addressing, linear probing; cap is a power of 2 */
  int64_t cap, n;      /* slots, and entries in them */
} dnn;

/* The engine and stream, made on first use with OpenMP set to one thread;
 * 0 if oneDNN cannot run here. */
static int dnn_ready(void) {
  if (!dnn.tried) {
    dnn.tried = 1;
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
    omp_set_num_threads(1);
#endif
    if (dnnl_engine_create(&dnn.eng, dnnl_cpu, 0) != dnnl_success)
      dnn.eng = NULL;
    else if (dnnl_stream_create(&dnn.strm, dnn.eng, dnnl_stream_default_flags) != dnnl_success) {
      dnnl_engine_destroy(dnn.eng);
      dnn.eng = NULL;
    }
  }
  return dnn.eng != NULL;
}

/* A multiply-xorshift mix of the key's words (a lookup is on every call:
 * byte-wise FNV-1a cost a third of a microsecond). */
static uint64_t key_hash(const int64_t *key) {
  uint64_t h = 0;
  for (int i = 0; i < GEMM_KEY_LEN; i++) {
    h = (h ^ (uint64_t)key[i]) * 0x9e3779b97f4a7c15u;
    h ^= h >> 29;
  }
  return h;
}

/* The slot of key: its entry, or the empty slot where it belongs. */
static gemm_entry *cache_slot(gemm_entry *slots, int64_t cap, const int64_t *key) {
  for (uint64_t i = key_hash(key) & (uint64_t)(cap - 1);; i = (i + 1) & (uint64_t)(cap - 1))
    if (!slots[i].used || !memcmp(slots[i].key, key, sizeof slots[i].key))
      return &slots[i];
}

/* Makes room for one more entry: the table doubles at half full. */
static void cache_grow(void) {
  if (2 * (dnn.n + 1) <= dnn.cap)
    return;
  int64_t cap = dnn.cap ? 2 * dnn.cap : 64;
  gemm_entry *slots = calloc((size_t)cap, sizeof *slots);
  if (!slots)
    gslrt_fatal(NULL, "gslrt_sgemm: cannot allocate the primitive cache (%lld slots)", (long long)cap);
  for (int64_t i = 0; i < dnn.cap; i++)
    if (dnn.slots[i].used)
      *cache_slot(slots, cap, dnn.slots[i].key) = dnn.slots[i];
  free(dnn.slots);
  dnn.slots = slots;
  dnn.cap = cap;
}

/* A plain row-major operand of rows x cols per batch entry, leading
 * dimension ld, batch stride stride, read transposed (as cols x rows) when
 * trans. An operand shared by every batch entry (stride 0) is described
 * with a batch of 1, which oneDNN broadcasts. */
static void operand_desc(dnnl_memory_desc_t *md, dnnl_data_type_t type, int64_t batch,
                         int32_t trans, int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
  dnnl_dims_t dims, strides;
  if (batch > 1 && stride == 0)
    batch = 1;
  dims[0] = batch;
  strides[0] = batch > 1 ? stride : rows * ld;
  if (!trans)
    dims[1] = rows, dims[2] = cols, strides[1] = ld, strides[2] = 1;
  else
    dims[1] = cols, dims[2] = rows, strides[1] = 1, strides[2] = ld;
  dnnl_memory_desc_init_by_strides(md, 3, dims, type, strides);
}

/* The primitive of a product, from the cache or made now (NULL: declined,
 * also remembered). Kept to the end of the run. */
static gemm_entry *primitive_for(const int64_t *key) {
  gemm_entry *e = dnn.slots ? cache_slot(dnn.slots, dnn.cap, key) : NULL;
  if (e && e->used) {
    counts.hits++;
    return e;
  }
  cache_grow();
  e = cache_slot(dnn.slots, dnn.cap, key);
  memset(e, 0, sizeof *e);
  memcpy(e->key, key, sizeof e->key);
  e->used = 1;
  dnn.n++;

  int64_t type = key[0], batch = key[1], m = key[4], n = key[5], k = key[6];
  int32_t ta = (int32_t)key[2], tb = (int32_t)key[3];
  dnnl_data_type_t in = type == GEMM_F32 ? dnnl_f32 : dnnl_bf16;
  dnnl_data_type_t out = type == GEMM_BF16_BF16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t md[3];
  dnnl_matmul_desc_t op;
  dnnl_primitive_desc_t pd = NULL;
  const char *impl = NULL;
  operand_desc(&md[0], in, batch, ta, ta ? k : m, ta ? m : k, key[7], key[10]);
  operand_desc(&md[1], in, batch, tb, tb ? n : k, tb ? k : n, key[8], key[11]);
  operand_desc(&md[2], out, batch, 0, m, n, key[9], key[12]);
  /* The reference kernel (impl "ref:...") is scalar code, slower than
   * OpenBLAS by far: declined like a shape oneDNN cannot do. */
  if (dnnl_matmul_desc_init(&op, &md[0], &md[1], NULL, &md[2]) == dnnl_success &&
      dnnl_primitive_desc_create(&pd, &op, NULL, dnn.eng, NULL) == dnnl_success &&
      dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
      strncmp(impl, "ref", 3) != 0 && dnnl_primitive_create(&e->prim, pd) == dnnl_success) {
    for (int i = 0; i < 3 && e->prim; i++)
      if (dnnl_memory_create(&e->mem[i], &md[i], dnn.eng, DNNL_MEMORY_NONE) != dnnl_success) {
        while (i-- > 0)
          dnnl_memory_destroy(e->mem[i]);
        dnnl_primitive_destroy(e->prim);
        e->prim = NULL;
      }
  } else
    e->prim = NULL;
  if (pd)
    dnnl_primitive_desc_destroy(pd);
  if (e->prim)
    counts.created++;
  else
    counts.declined++;
  return e;
}

/* Runs the product of key on a, b, c through oneDNN; 0 if it declined. */
static int onednn_gemm(const int64_t *key, const void *a, const void *b, void *c) {
  if (onednn_on < 0) {
    const char *v = getenv("GSL_GEMM");
    onednn_on = !(v && !strcmp(v, "openblas"));
  }
  if (!onednn_on || !dnn_ready())
    return 0;
  gemm_entry *e = primitive_for(key);
  if (!e->prim)
    return 0;
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, e->mem[0]}, {DNNL_ARG_WEIGHTS, e->mem[1]},
                             {DNNL_ARG_DST, e->mem[2]}};
  if (dnnl_memory_set_data_handle(e->mem[0], (void *)a) != dnnl_success ||
      dnnl_memory_set_data_handle(e->mem[1], (void *)b) != dnnl_success ||
      dnnl_memory_set_data_handle(e->mem[2], c) != dnnl_success ||
      dnnl_primitive_execute(e->prim, dnn.strm, 3, args) != dnnl_success ||
      dnnl_stream_wait(dnn.strm) != dnnl_success)
    gslrt_fatal(NULL, "gslrt_sgemm: oneDNN's matmul failed to run (batch %lld, m=%lld n=%lld k=%lld)",
                (long long)key[1], (long long)key[4], (long long)key[5], (long long)key[6]);
  counts.onednn_calls++;
  return 1;
}

static void make_key(int64_t *key, int64_t type, int64_t batch, int32_t trans_a, int32_t trans_b,
                     int64_t m, int64_t n, int64_t k, int64_t lda, int64_t stride_a, int64_t ldb,
                     int64_t stride_b, int64_t ldc, int64_t stride_c) {
  int64_t v[GEMM_KEY_LEN] = {type, batch, trans_a != 0, trans_b != 0, m, n, k, lda, ldb, ldc,
                                 batch > 1 ? stride_a : 0, batch > 1 ? stride_b : 0,
                                 batch > 1 ? stride_c : 0};
  memcpy(key, v, sizeof v);
}

/* ---- f32 ----------------------------------------------------------------------- */

/* Whether oneDNN (rather than OpenBLAS) runs an f32 product of this shape,
 * by what bench/gemm_peak.c measured on this project's 2-core Zen 5 (one
 * thread, OpenBLAS 0.3.21 with its Cooperlake kernels, best of 20-40 short
 * repetitions on a loaded machine; GFLOP/s OpenBLAS vs oneDNN through
 * gslrt_sgemm):
 * - every shape of GSL's examples and benches goes to oneDNN: [512,128] x
 *   [128,512] 101 vs 113, [2048,256] x [256,64]^T 100 vs 115, 32 x [64,32]
 *   x [32,64]^T 78 vs 101, 8 x [256,256] x [256,1024] 37 vs 61, as do
 *   thin ones ([8,512] x [512,512] 57 vs 74, [512,8] x [8,512] 65 vs 92);
 * - a product of one matrix with at most 2^20 multiply-adds goes to
 *   OpenBLAS, whose call costs less: 16^3 87 vs 13, 32^3 108 vs 68, 64^3
 *   115 vs 105, 96^3 115 vs 113, [16,128] x [128,128] 115 vs 107; 128^3 is
 *   already oneDNN's (99 vs 115);
 * - batched, OpenBLAS only below 2^15 multiply-adds an entry (8 x [16,32]
 *   x [32,64]^T 54 vs 78: OpenBLAS pays its call per entry);
 * - a matrix times a column (n = 1) goes to OpenBLAS's gemv: [4096,1024] x
 *   [1024,1] 6.6 vs 3.2.
 * With OPENBLAS_CORETYPE=Haswell OpenBLAS only loses more (bench/README.md). */
static int f32_by_onednn(int64_t batch, int64_t m, int64_t n, int64_t k) {
  double volume = (double)m * (double)n * (double)k;
  if (n == 1)
    return 0;
  return batch == 1 ? volume > 1048576.0 : volume >= 32768.0;
}

/* ---- GSL_GEMM_PROFILE: each product shape's calls and time ---------------------- */

/* With GSL_GEMM_PROFILE=FILE in the environment, every product is timed
 * and, at exit, rank 0 writes one JSON line per distinct (dtype, batch,
 * m, n, k, transposes) to FILE: its calls after the first (which makes
 * oneDNN's primitive, and is not timed), their seconds and GFLOP/s (2 m n
 * k batch per call), and how many of them oneDNN ran. bench/run.sh compares
 * those with bench/gemm_peak.c's measured peaks. */
typedef struct prof_entry {
  int64_t key[7]; /* dtype (0 f32, 1 bf16 -> f32, 2 bf16 -> bf16), batch, m, n, k, trans_a, trans_b */
  int64_t calls, onednn;
  double seconds;
} prof_entry;
static struct {
  int on; /* -1: not looked at yet */
  const char *path;
  int rank;
  prof_entry *e;
  int n, cap;
} prof = {-1, NULL, 0, NULL, 0, 0};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void prof_write(void) {
  if (prof.rank != 0 || !prof.n)
    return;
  FILE *f = fopen(prof.path, "w");
  if (!f) {
    fprintf(stderr, "gslrt: GSL_GEMM_PROFILE: cannot write %s\n", prof.path);
    return;
  }
  static const char *const type[] = {"f32", "bf16", "bf16"}, *const out[] = {"f32", "f32", "bf16"};
  for (int i = 0; i < prof.n; i++) {
    const prof_entry *e = &prof.e[i];
    double flop = 2.0 * (double)e->key[1] * (double)e->key[2] * (double)e->key[3] * (double)e->key[4];
    fprintf(f, "{\"type\": \"%s\", \"out\": \"%s\", \"batch\": %lld, \"m\": %lld, \"n\": %lld, \"k\": %lld, "
               "\"trans_a\": %lld, \"trans_b\": %lld, \"calls\": %lld, \"onednn_calls\": %lld, "
               "\"seconds\": %.6f, \"gflops\": %.2f}\n",
            type[e->key[0]], out[e->key[0]], (long long)e->key[1], (long long)e->key[2], (long long)e->key[3],
            (long long)e->key[4], (long long)e->key[5], (long long)e->key[6], (long long)e->calls,
            (long long)e->onednn, e->seconds, e->seconds > 0 ? flop * (double)e->calls / e->seconds * 1e-9 : 0.0);
  }
  fclose(f);
}

static int prof_enabled(void) {
  if (prof.on < 0) {
    prof.path = getenv("GSL_GEMM_PROFILE");
    prof.on = prof.path && *prof.path;
    if (prof.on) {
      int init = 0;
      MPI_Initialized(&init);
      if (init)
        MPI_Comm_rank(MPI_COMM_WORLD, &prof.rank);
      atexit(prof_write);
    }
  }
  return prof.on;
}

static void prof_add(int64_t type, int64_t batch, int64_t m, int64_t n, int64_t k, int32_t ta, int32_t tb,
                     double seconds, int64_t onednn) {
  int64_t key[7] = {type, batch, m, n, k, ta, tb};
  for (int i = 0; i < prof.n; i++)
    if (!memcmp(prof.e[i].key, key, sizeof key)) {
      prof.e[i].calls++;
      prof.e[i].onednn += onednn;
      prof.e[i].seconds += seconds;
      return;
    }
  if (prof.n == prof.cap) {
    int cap = prof.cap ? 2 * prof.cap : 32;
    prof_entry *e = realloc(prof.e, sizeof *e * (size_t)cap);
    if (!e)
      return; /* a profile is not worth failing a run for */
    prof.e = e;
    prof.cap = cap;
  }
  prof_entry *e = &prof.e[prof.n++]; /* the first call (it makes the primitive) is not timed */
  memcpy(e->key, key, sizeof key);
  e->calls = 0;
  e->onednn = 0;
  e->seconds = 0;
  (void)seconds, (void)onednn;
}

static void sgemm_run(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                      const float *a, int64_t lda, int64_t stride_a, const float *b, int64_t ldb,
                      int64_t stride_b, float *c, int64_t ldc, int64_t stride_c);
static void bf16_run(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                     const uint16_t *a, int64_t lda, int64_t stride_a, const uint16_t *b, int64_t ldb,
                     int64_t stride_b, void *c, int32_t c_dtype, int64_t ldc, int64_t stride_c);

void gslrt_sgemm(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                 const float *a, int64_t lda, int64_t stride_a,
                 const float *b, int64_t ldb, int64_t stride_b,
                 float *c, int64_t ldc, int64_t stride_c) {
  if (!prof_enabled()) {
    sgemm_run(batch, trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c);
    return;
  }
  int64_t before = counts.onednn_calls;
  double t = now();
  sgemm_run(batch, trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c);
  prof_add(0, batch, m, n, k, trans_a, trans_b, now() - t, counts.onednn_calls - before);
}

void gslrt_gemm_bf16(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                     const uint16_t *a, int64_t lda, int64_t stride_a,
                     const uint16_t *b, int64_t ldb, int64_t stride_b,
                     void *c, int32_t c_dtype, int64_t ldc, int64_t stride_c) {
  if (!prof_enabled()) {
    bf16_run(batch, trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, c_dtype, ldc, stride_c);
    return;
  }
  int64_t before = counts.onednn_calls;
  double t = now();
  bf16_run(batch, trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, c_dtype, ldc, stride_c);
  prof_add(c_dtype == GSLRT_BF16 ? 2 : 1, batch, m, n, k, trans_a, trans_b, now() - t,
           counts.onednn_calls - before);
}

/* The products' f32 copies (the bf16 fallback's two operands and its C
 * when C is bf16; an f32 A transposed), each grown to the largest product
 * met and kept for the run: one thread a process runs the products, one
 * at a time. */
static struct {
  float *p;
  int64_t n;
} wide[3];

static float *wide_buffer(int which, int64_t count) {
  if (count > wide[which].n) {
    free(wide[which].p);
    wide[which].p = malloc((size_t)count * sizeof(float) + 1);
    if (!wide[which].p)
      gslrt_fatal(NULL, "the matrix products cannot allocate %lld floats to lay out an operand",
                  (long long)count);
    wide[which].n = count;
  }
  return wide[which].p;
}

/* An f32 product on the library that runs its shape faster here
 * (f32_by_onednn), OpenBLAS where oneDNN declines it. */
static void f32_product(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                        const float *a, int64_t lda, int64_t stride_a, const float *b, int64_t ldb,
                        int64_t stride_b, float *c, int64_t ldc, int64_t stride_c) {
  if (k > 0 && f32_by_onednn(batch, m, n, k)) {
    int64_t key[GEMM_KEY_LEN];
    make_key(key, GEMM_F32, batch, trans_a, trans_b, m, n, k, lda, stride_a, ldb, stride_b, ldc,
             stride_c);
    if (onednn_gemm(key, a, b, c))
      return;
  }
  blas_sgemm(batch, trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c);
}

/* Whether a transposed A is laid out m x k before its product (into a
 * copy, or as it is widened): one matrix (not a batch) with m >= k, as a
 * weight gradient's activations are, k the tokens or an expert's slots.
 * oneDNN's f32 product ran those shapes at 58-72 GFLOP/s with A
 * transposed and 81-86 with A plain ([512, k]^T x [k, 128], k 64 and 112,
 * warm; on an AVX2 Zen whose peak is 95), and in the lm's bf16 step the
 * fallback's went from 44-53 to 60-72 (GSL_GEMM_PROFILE, three runs each).
 * Where m < k (k 512) or batched (the attention's), left transposed they
 * ran faster than laid out first (68 against 63 and 48 against 37 GFLOP/s;
 * bench/README.md). */
static int flip_a(int64_t batch, int32_t trans_a, int64_t m, int64_t k) { return trans_a && batch == 1 && m >= k; }

static void sgemm_run(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                      const float *a, int64_t lda, int64_t stride_a, const float *b, int64_t ldb,
                      int64_t stride_b, float *c, int64_t ldc, int64_t stride_c) {
  if (m < 0 || n < 0 || k < 0 || batch < 0)
    gslrt_fatal(NULL, "gslrt_sgemm: negative dimension (batch %lld, m=%lld n=%lld k=%lld)",
                (long long)batch, (long long)m, (long long)n, (long long)k);
  if (batch == 0 || m == 0 || n == 0)
    return;
  if (pinned_on) {
    gslrt_sgemm_pinned(batch, trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c);
    return;
  }
  if (flip_a(batch, trans_a, m, k) && f32_by_onednn(batch, m, n, k)) { /* A laid out m x k first */
    float *t = wide_buffer(0, m * k);
    gslrt_f32_transpose(t, k, a, lda, k, m);
    f32_product(1, 0, trans_b, m, n, k, t, k, 0, b, ldb, stride_b, c, ldc, stride_c);
    return;
  }
  f32_product(batch, trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c);
}

/* ---- bf16 ---------------------------------------------------------------------- */

/* A bf16 operand (rows x cols per batch entry as stored) widened into a
 * dense f32 copy (wide[which]), batch entries rows * cols apart, or with
 * `transpose` into its transpose (cols x rows); *stride becomes the
 * copy's. An operand shared by every batch entry (stride 0) is widened
 * once. */
static float *widen(int which, const uint16_t *x, int64_t batch, int64_t rows, int64_t cols, int64_t ld,
                    int64_t *stride, int transpose) {
  int64_t entries = batch > 1 && *stride == 0 ? 1 : batch;
  float *w = wide_buffer(which, entries * rows * cols);
  for (int64_t e = 0; e < entries; e++) {
    if (transpose)
      gslrt_bf16_widen_t(w + e * rows * cols, rows, x + e * *stride, ld, rows, cols);
    else if (ld == cols)
      gslrt_bf16_widen_n(w + e * rows * cols, x + e * *stride, rows * cols);
    else
      for (int64_t i = 0; i < rows; i++)
        gslrt_bf16_widen_n(w + (e * rows + i) * cols, x + e * *stride + i * ld, cols);
  }
  *stride = entries == 1 ? 0 : rows * cols;
  return w;
}

static void bf16_run(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                     const uint16_t *a, int64_t lda, int64_t stride_a, const uint16_t *b, int64_t ldb,
                     int64_t stride_b, void *c, int32_t c_dtype, int64_t ldc, int64_t stride_c) {
  if (m < 0 || n < 0 || k < 0 || batch < 0)
    gslrt_fatal(NULL, "gslrt_gemm_bf16: negative dimension (batch %lld, m=%lld n=%lld k=%lld)",
                (long long)batch, (long long)m, (long long)n, (long long)k);
  if (c_dtype != GSLRT_F32 && c_dtype != GSLRT_BF16)
    gslrt_fatal(NULL, "gslrt_gemm_bf16: C's dtype %d is neither f32 nor bf16", (int)c_dtype);
  if (batch == 0 || m == 0 || n == 0)
    return;
  if (pinned_on) {
    gslrt_gemm_bf16_pinned(batch, trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, c_dtype, ldc,
                           stride_c);
    return;
  }
  if (k == 0) { /* an empty sum: zeros, in either dtype */
    for (int64_t e = 0; e < batch; e++)
      for (int64_t i = 0; i < m; i++)
        memset((char *)c + (e * stride_c + i * ldc) * gslrt_dtype_size(c_dtype), 0,
               (size_t)(n * gslrt_dtype_size(c_dtype)));
    return;
  }
  {
    int64_t key[GEMM_KEY_LEN];
    make_key(key, c_dtype == GSLRT_BF16 ? GEMM_BF16_BF16 : GEMM_BF16_F32, batch, trans_a, trans_b,
             m, n, k, lda, stride_a, ldb, stride_b, ldc, stride_c);
    if (onednn_gemm(key, a, b, c))
      return;
  }
  /* The fallback (no bf16 product here: a CPU without AVX-512): the
   * operands widened (exactly) to f32, multiplied as an f32 product is,
   * each sum rounded once to bf16 if C is bf16; A widened into its
   * transpose where flip_a says. */
  int flip = flip_a(batch, trans_a, m, k), tw = trans_a && !flip;
  int64_t ra = trans_a ? k : m, ca = trans_a ? m : k, rb = trans_b ? n : k, cb = trans_b ? k : n;
  int64_t sa = stride_a, sb = stride_b;
  float *wa = widen(0, a, batch, ra, ca, lda, &sa, flip), *wb = widen(1, b, batch, rb, cb, ldb, &sb, 0);
  int64_t lwa = tw ? m : k;
  if (c_dtype == GSLRT_F32) {
    f32_product(batch, tw, trans_b, m, n, k, wa, lwa, sa, wb, cb, sb, c, ldc, stride_c);
    return;
  }
  float *wc = wide_buffer(2, batch * m * n);
  f32_product(batch, tw, trans_b, m, n, k, wa, lwa, sa, wb, cb, sb, wc, n, m * n);
  uint16_t *hc = c;
  for (int64_t e = 0; e < batch; e++) {
    if (ldc == n && stride_c == m * n)
      gslrt_bf16_round_n(hc + e * stride_c, wc + e * m * n, m * n);
    else
      for (int64_t i = 0; i < m; i++)
        gslrt_bf16_round_n(hc + e * stride_c + i * ldc, wc + (e * m + i) * n, n);
  }
}
