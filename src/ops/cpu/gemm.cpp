#include <cblas.h>

#include "ops/ops.h"

namespace fp4::cpu {

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace fp4::cpu
