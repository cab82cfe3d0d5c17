#include <algorithm>

#include "ops/cuda/gemm_f32_cublaslt.h"

namespace fp4::cuda {

// Row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T: the operands swap, m and n swap.
struct GemmF32Runner::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};

  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (second) cublasLtMatrixLayoutDestroy(second);
    if (first) cublasLtMatrixLayoutDestroy(first);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

GemmF32Runner::GemmF32Runner(size_t workspace_bytes) : workspace_(workspace_bytes) {
  FP4_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

GemmF32Runner::~GemmF32Runner() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

const GemmF32Runner::Plan& GemmF32Runner::plan(const Key& key) {
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;
  const auto [ta, tb, m, n, k, lda, ldb, ldc] = key;
  auto p = std::make_unique<Plan>();
  // CUBLAS_COMPUTE_32F with FP32 data: full FP32 products and sums (the _FAST_TF32 type would round inputs).
  FP4_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op1 = tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // the row-major B goes first
  const cublasOperation_t op2 = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  FP4_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof(op1)));
  FP4_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof(op2)));
  FP4_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->first, CUDA_R_32F, tb ? k : n, tb ? n : k, ldb));
  FP4_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->second, CUDA_R_32F, ta ? m : k, ta ? k : m, lda));
  FP4_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, n, m, ldc));

  cublasLtMatmulPreference_t pref = nullptr;
  FP4_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_.bytes();
  cublasStatus_t st =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(handle_, p->desc, p->first, p->second, p->c, p->c, pref, 1, &result,
                                        &found);
  cublasLtMatmulPreferenceDestroy(pref);
  FP4_CUBLAS_CHECK(st);
  FP4_CHECK(found > 0, "cuBLASLt has no FP32 algorithm for the row-major GEMM m=", m, " n=", n, " k=", k,
            " trans_a=", ta, " trans_b=", tb);
  p->algo = result.algo;
  return *plans_.emplace(key, std::move(p)).first->second;
}

void GemmF32Runner::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                         int lda, const float* b, int ldb, float beta, float* c, int ldc, cudaStream_t stream,
                         const float* c_in) {
  FP4_CHECK(m >= 0 && n >= 0 && k > 0, "gemm (FP32): bad sizes m=", m, " n=", n, " k=", k);
  FP4_CHECK(
      lda >= std::max(1, trans_a ? m : k) && ldb >= std::max(1, trans_b ? k : n) && ldc >= std::max(1, n),
      "gemm (FP32): leading dimensions lda=", lda, " ldb=", ldb, " ldc=", ldc, " are too small for m=", m,
      " n=", n, " k=", k);
  if (m == 0 || n == 0) return;
  const Plan& p = plan(Key{trans_a, trans_b, m, n, k, lda, ldb, ldc});
  FP4_CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, b, p.first, a, p.second, &beta, c_in ? c_in : c,
                                  p.c, c, p.c, &p.algo, workspace_.data(), workspace_.bytes(), stream));
}

}  // namespace fp4::cuda
