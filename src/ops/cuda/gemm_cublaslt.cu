#include <algorithm>

#include "ops/cuda/gemm_cublaslt.h"

namespace fp4::cuda {

namespace {

int alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  if (v == 0) return 256;
  return static_cast<int>(std::min<uintptr_t>(v & (~v + 1), 256));
}

}  // namespace

// cuBLASLt is column-major: the row-major product C = op(A) op(B) is computed as the column-major
// C^T = op(B)^T op(A)^T, i.e. with the operands swapped and m, n exchanged (no data is transposed).
struct GemmRunner::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};

  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

GemmRunner::GemmRunner(size_t workspace_bytes) : workspace_(workspace_bytes) {
  FP4_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

GemmRunner::~GemmRunner() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

const GemmRunner::Plan& GemmRunner::plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  const auto [ta, tb, m, n, k, lda, ldb, ldc, out, al_a, al_b, al_c, al_d] = key;
  auto p = std::make_unique<Plan>();
  const cudaDataType_t ctype = out == static_cast<int>(GemmOutType::kF32) ? CUDA_R_32F : CUDA_R_16BF;
  FP4_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Column-major operand 1 is the row-major B, operand 2 the row-major A.
  const cublasOperation_t op1 = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op2 = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  FP4_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof(op1)));
  FP4_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof(op2)));
  // Stored shapes (rows x cols, column-major) of the two operands and of C.
  FP4_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, tb ? k : n, tb ? n : k, ldb));
  FP4_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, ta ? m : k, ta ? k : m, lda));
  FP4_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, ctype, n, m, ldc));

  cublasLtMatmulPreference_t pref = nullptr;
  FP4_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_.bytes();
  const uint32_t align[4] = {static_cast<uint32_t>(al_b), static_cast<uint32_t>(al_a),
                             static_cast<uint32_t>(al_c), static_cast<uint32_t>(al_d)};
  cublasStatus_t st =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  const cublasLtMatmulPreferenceAttributes_t kAlignAttr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; ++i)
    st = cublasLtMatmulPreferenceSetAttribute(pref, kAlignAttr[i], &align[i], sizeof(align[i]));
  // A split-K reduction in BF16 (in place or in output type) would round every partial sum: BF16 outputs
  // only reduce in FP32.
  if (out == static_cast<int>(GemmOutType::kBF16) && st == CUBLAS_STATUS_SUCCESS) {
    const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask,
                                              sizeof(mask));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(handle_, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  FP4_CUBLAS_CHECK(st);
  FP4_CHECK(found > 0, "cuBLASLt has no BF16 algorithm for the row-major GEMM m=", m, " n=", n, " k=", k,
            " trans_a=", ta, " trans_b=", tb, " lda=", lda, " ldb=", ldb, " ldc=", ldc,
            (out == static_cast<int>(GemmOutType::kF32) ? " (FP32 out)" : " (BF16 out)"));
  p->algo = result.algo;
  return *plans_.emplace(key, std::move(p)).first->second;
}

void GemmRunner::run(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a, int lda,
                     const bf16* b, int ldb, float beta, const void* c_in, void* c, int ldc, GemmOutType out,
                     cudaStream_t stream) {
  FP4_CHECK(m >= 0 && n >= 0 && k > 0, "gemm: bad sizes m=", m, " n=", n, " k=", k);
  FP4_CHECK(lda >= std::max(1, trans_a ? m : k), "gemm: lda ", lda, " is smaller than the row of A (",
            trans_a ? m : k, ")");
  FP4_CHECK(ldb >= std::max(1, trans_b ? k : n), "gemm: ldb ", ldb, " is smaller than the row of B (",
            trans_b ? k : n, ")");
  FP4_CHECK(ldc >= std::max(1, n), "gemm: ldc ", ldc, " is smaller than the row of C (", n, ")");
  if (m == 0 || n == 0) return;
  if (c_in == nullptr) c_in = c;
  const Key key{trans_a,
                trans_b,
                m,
                n,
                k,
                lda,
                ldb,
                ldc,
                static_cast<int>(out),
                alignment_of(a),
                alignment_of(b),
                alignment_of(c_in),
                alignment_of(c)};
  const Plan& p = plan(key);
  FP4_CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, b, p.a, a, p.b, &beta, c_in, p.c, c, p.c, &p.algo,
                                  workspace_.data(), workspace_.bytes(), stream));
}

void GemmRunner::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a, int lda,
                      const bf16* b, int ldb, float beta, bf16* c, int ldc, cudaStream_t stream,
                      const bf16* c_in) {
  run(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c_in, c, ldc, GemmOutType::kBF16, stream);
}

void GemmRunner::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a, int lda,
                      const bf16* b, int ldb, float beta, float* c, int ldc, cudaStream_t stream,
                      const float* c_in) {
  run(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c_in, c, ldc, GemmOutType::kF32, stream);
}

}  // namespace fp4::cuda
