// The subspace-constrained weight-gradient split of a LoRA-SVD layer (RECIPES.md section 8.1,
// nn/lora_svd_linear.h) on the device: the first brick of LoRA-SVD on the CUDA engine (not wired into the
// engine yet, which still refuses lora_svd). After the recipe's wgrad dW [out x in] of one micro-batch:
//   U = cholesky_qr2(L2)        on the host from a copy of L2 (the CPU function: U is the CPU's bit for bit);
//   P = U (U^T dW)              FP32 GEMMs, as project_onto_columns;
//   grad_L2 += beta P L1^T, grad_L1 += beta L2^T P, grad_W_res += dW - P.
// The GEMMs are those of the CPU layer (same operands, FP32 accumulation, no TF32); results differ from the
// CPU only by the order of the FP32 sums. The L2 download and the U upload synchronize the stream; the GEMMs
// are left queued.
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/gemm_f32_cublaslt.h"

namespace fp4::cuda {

// U [out x r], U^T dW [r x in] and P [out x in], sized on demand.
struct LoraSvdSplitWorkspace {
  int out = 0, in = 0, r = 0;
  DeviceBuffer<float> u, c, p;
  void ensure(int out, int in, int r);
};

// Device pointers, row-major FP32: dw [out x in], l1 [r x in], l2 [out x r]; the three gradients are added
// to (not overwritten). Throws fp4::Error when r is not in [1, min(out, in)).
void lora_svd_split_gradient(const float* dw, const float* l1, const float* l2, int out, int in, int r,
                             float beta, float* grad_w_res, float* grad_l1, float* grad_l2,
                             LoraSvdSplitWorkspace& ws, GemmF32Runner& gemm, cudaStream_t stream);

}  // namespace fp4::cuda
