// Row-major FP32 GEMMs on cuBLASLt for the optimizer's Newton-Schulz iteration: FP32 operands, FP32
// accumulation (CUBLAS_COMPUTE_32F: never TF32), C = alpha op(A) op(B) + beta C_in. The results differ
// from the CPU's OpenBLAS sgemm only by the order of the FP32 sums. Plans are cached per shape.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <tuple>

#include "ops/cuda/gemm_cublaslt.h"

namespace fp4::cuda {

class GemmF32Runner {
 public:
  explicit GemmF32Runner(size_t workspace_bytes = size_t{32} << 20);
  ~GemmF32Runner();
  GemmF32Runner(const GemmF32Runner&) = delete;
  GemmF32Runner& operator=(const GemmF32Runner&) = delete;

  // As cpu::gemm: op(A) is [m,k], op(B) is [k,n], C is [m,n] with row stride ldc. C_in (the beta term)
  // has C's stride; nullptr means C itself. Throws fp4::Error on bad sizes or cuBLASLt failures.
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc, cudaStream_t stream,
            const float* c_in = nullptr);

 private:
  struct Plan;
  // trans_a, trans_b, m, n, k, lda, ldb, ldc
  using Key = std::tuple<bool, bool, int, int, int, int, int, int>;
  const Plan& plan(const Key& key);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<uint8_t> workspace_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace fp4::cuda
