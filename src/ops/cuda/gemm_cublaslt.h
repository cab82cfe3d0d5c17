// Row-major BF16 GEMMs with FP32 accumulation on cuBLASLt: C = alpha op(A) op(B) + beta C_in, with
// BF16 or FP32 C. One cached workspace; descriptors and the heuristic's algorithm are cached per shape,
// so a training step after the first does no cuBLASLt set-up work.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "ops/cuda/cuda_check.h"

// Throws fp4::Error naming the call, its file:line and cuBLAS's own status string.
#define FP4_CUBLAS_CHECK(expr)                                                \
  do {                                                                        \
    const cublasStatus_t fp4_cublas_status_ = (expr);                         \
    if (fp4_cublas_status_ != CUBLAS_STATUS_SUCCESS)                          \
      FP4_THROW(__FILE__, ":", __LINE__, ": ", #expr,                         \
                " failed: ", cublasLtGetStatusName(fp4_cublas_status_), " (", \
                cublasLtGetStatusString(fp4_cublas_status_), ")");            \
  } while (0)

namespace fp4::cuda {

using bf16 = __nv_bfloat16;

enum class GemmOutType : uint8_t { kBF16, kF32 };

class GemmRunner {
 public:
  explicit GemmRunner(size_t workspace_bytes = size_t{32} << 20);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  // Row-major, as cpu::gemm: op(A) is [m,k], op(B) is [k,n], C is [m,n] with row stride ldc.
  // C_in (the beta term) has C's type and stride; it may alias C, nullptr means C itself.
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a, int lda,
            const bf16* b, int ldb, float beta, bf16* c, int ldc, cudaStream_t stream,
            const bf16* c_in = nullptr);
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a, int lda,
            const bf16* b, int ldb, float beta, float* c, int ldc, cudaStream_t stream,
            const float* c_in = nullptr);

  size_t cached_plans() const { return plans_.size(); }

 private:
  struct Plan;
  // trans_a, trans_b, m, n, k, lda, ldb, ldc, out type, pointer alignments (A, B, C_in, D)
  using Key = std::tuple<bool, bool, int, int, int, int, int, int, int, int, int, int, int>;

  void run(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a, int lda,
           const bf16* b, int ldb, float beta, const void* c_in, void* c, int ldc, GemmOutType out,
           cudaStream_t stream);
  const Plan& plan(const Key& key);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<uint8_t> workspace_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace fp4::cuda
