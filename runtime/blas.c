/* blas.c — gslrt_sgemm: batched single-precision matrix products through
 * CBLAS (OpenBLAS), one cblas_sgemm per batch entry, row-major. Each MPI
 * process uses one BLAS thread (the ranks already fill the cores), set on
 * the first call. Dimensions must fit CBLAS's int. */
#include "internal.h"

#include <limits.h>

#include <cblas.h>

void openblas_set_num_threads(int num_threads);

void gslrt_sgemm(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                 const float *a, int64_t lda, int64_t stride_a,
                 const float *b, int64_t ldb, int64_t stride_b,
                 float *c, int64_t ldc, int64_t stride_c) {
  static int threads_set;
  if (!threads_set) {
    openblas_set_num_threads(1);
    threads_set = 1;
  }
  if (m < 0 || n < 0 || k < 0 || batch < 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX ||
      lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
    gslrt_fatal(NULL, "gslrt_sgemm: dimensions m=%lld n=%lld k=%lld (lda %lld, ldb %lld, ldc %lld) "
                "out of CBLAS's range", (long long)m, (long long)n, (long long)k, (long long)lda,
                (long long)ldb, (long long)ldc);
  for (int64_t i = 0; i < batch; i++)
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, 1.0f,
                a + i * stride_a, (int)lda, b + i * stride_b, (int)ldb, 0.0f,
                c + i * stride_c, (int)ldc);
}
