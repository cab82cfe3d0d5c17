// LoraSvdLinearCuda: the LoRA-SVD linear of nn/lora_svd_linear.h (RECIPES.md section 8.1, docs/LORA_SVD.md)
// on the GPU. W = W_res + beta L2 L1 with W_res through the NVFP4 layer (quant_linear_cuda.h) and the
// low-rank path in BF16 (BF16 operands, FP32 accumulation, the intermediate [n x r] rounded to BF16):
//   Y  = Q1(X) Q2(W_res)^T + beta (X L1^T) L2^T,
//   dX = the NVFP4 layer's dX + beta (dY L2) L1,
//   dW = the NVFP4 layer's wgrad of the micro-batch, split by lora_svd_split_gradient (U from the CPU's
//        cholesky_qr2 of the FP32 L2): dL2 += beta P L1^T, dL1 += beta L2^T P, dW_res += dW - P.
// The quantized operands are the CPU layer's bit for bit (same quant_randomness); Y and dX differ from the
// CPU's FP32 low-rank path by the BF16 rounding of the intermediate and of the output.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "nn/cuda/linear_cuda.h"
#include "nn/cuda/lora_svd_split_cuda.h"
#include "ops/cuda/gemm_f32_cublaslt.h"

namespace fp4::cuda {

// What a model's LoRA-SVD layers share (they run one after another on one stream): the FP32 wgrad of one
// micro-batch, the [n x r] BF16 intermediate, the split's workspace and its FP32 GEMM runner.
class LoraSvdCudaShared {
 public:
  // max_weight_elements: the largest out * in of the layers that will use it (the wgrad buffer is fixed,
  // since each NVFP4 layer is built pointing at it).
  explicit LoraSvdCudaShared(size_t max_weight_elements) : dw_(max_weight_elements) {}
  float* dw() { return dw_.data(); }
  size_t dw_capacity() const { return dw_.size(); }
  bf16* low_rank(size_t count);  // grows on demand (the first step of a shape)
  LoraSvdSplitWorkspace& split() { return split_; }
  LoraSvdBases& bases() { return bases_; }
  GemmF32Runner& gemm_f32() { return gemm_f32_; }
  size_t bytes() const {
    return dw_.bytes() + low_.bytes() + split_.u.bytes() + split_.c.bytes() + split_.p.bytes() +
           bases_.bytes();
  }

 private:
  DeviceBuffer<float> dw_;
  DeviceBuffer<bf16> low_;
  LoraSvdSplitWorkspace split_;
  LoraSvdBases bases_;
  GemmF32Runner gemm_f32_;
};

// The factors of one layer: L1 [rank x in], L2 [out x rank] as DeviceWeights (FP32 master, BF16 copy,
// FP32 gradient), and the path's scale.
struct LoraSvdFactors {
  DeviceWeight l1, l2;
  int rank = 0;
  float beta = 1.0f;
};

// spec.policy must be a quantized policy the NVFP4 layer runs (it names what it refuses); throws fp4::Error
// naming the layer when rank is not in [1, min(in, out)) or `shared` is too small for the layer.
std::unique_ptr<LinearCuda> make_lora_svd_linear_cuda(const LinearSpec& spec, const DeviceWeight& w_res,
                                                      const LoraSvdFactors& factors,
                                                      LoraSvdCudaShared& shared, GemmRunner& gemm,
                                                      cudaStream_t stream);

}  // namespace fp4::cuda
