#include <cblas.h>

#include <string>

#include "ops/ops.h"

namespace fp4::cpu {

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

std::string blas_description() {
  return std::string("OpenBLAS ") + openblas_get_corename() + ", " +
         std::to_string(openblas_get_num_threads()) +
         (openblas_get_num_threads() == 1 ? " thread" : " threads");
}

std::string blas_better_coretype() {
#if defined(__x86_64__) || defined(__i386__)
  const std::string core = openblas_get_corename();
  if (core != "Prescott" && core != "Core2" && core != "Nehalem") return "";
  if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
  if (__builtin_cpu_supports("avx2")) return "Haswell";
#endif
  return "";
}

std::string blas_advice() {
  const std::string better = blas_better_coretype();
  if (better.empty()) return "";
  return "OpenBLAS uses its generic " + std::string(openblas_get_corename()) +
         " kernels on this CPU: set OPENBLAS_CORETYPE=" + better +
         " before starting for faster CPU GEMMs (~2.5x)";
}

}  // namespace fp4::cpu
