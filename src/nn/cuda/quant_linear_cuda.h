// QuantLinearCuda: the NVFP4 linear layer of RECIPES.md section 4 on Hopper. Fused quantization kernels
// (src/ops/cuda/quant/quantize_cuda.h) produce packed operands; the GEMMs run on BF16 tensor cores over the
// dequantized values (q * s * S_dec or q * s * s_out rounded to BF16: relative error <= 2^-8 per element,
// far under FP4 noise), with FP32 accumulation. The forward keeps only the packed backward operands
// (Q6 = X^T, and Q4 = W^T or, for NVIDIA's 16x16 re-use, Q2 itself); its transients live in a workspace
// the engine lends it (LinearCuda::lend_workspace).
//
// Every random bit comes from quant_randomness (nn/quant_linear.h), as in the CPU layer: for the same
// context the packed operands are bit-identical to QuantLinearCpu's.
#pragma once

#include "nn/cuda/linear_cuda.h"
#include "nn/out_control.h"
#include "numerics/quantize.h"

namespace fp4::cuda {

// Throws fp4::Error naming the layer when the policy is one this CUDA layer does not run (the CPU
// engine runs every valid policy): Q1..Q6 must all be NVFP4, Q4 aligned or reuse, Q6 aligned or original.
//
// With OutControl on (spec.quant_ctx->out_control set), the layer registers itself there under spec.name,
// as the CPU layer does, measures its inputs while the registry calibrates and runs the split form of
// quant_linear_split.cpp once its channels are frozen (docs/OUT_CONTROL.md).
std::unique_ptr<LinearCuda> make_quant_linear_cuda(const LinearSpec& spec, const DeviceWeight& weight,
                                                   GemmRunner& gemm, cudaStream_t stream);

// Host copies of the split layer's quantized operands, byte for byte as QuantLinearCpu forms them
// (quant_linear_split.cpp): for tests.
struct SplitOperands {
  Nvfp4Tensor q1, q2;  // X[:, C4] [n x p4], W[:, C4] [out x p4] (p4: |C4| rounded up to 128)
  Mxfp8Tensor x8, w8;  // X[:, C8] [n x p8], W[:, C8] [out x p8] (p8: |C8| rounded up to 32)
  Nvfp4Tensor q4;      // W^T [in x out] from the assembled W^
  Nvfp4Tensor q6;      // X[:, C4]^T [|C4| x n]
  Mxfp8Tensor x8t;     // dequant(MX8(X[:, C8]))^T along n [|C8| x n rounded up to 32]
};

// OutControl's entry points of the NVFP4 layer: dynamic_cast<OutControlLinear*>(linear).
class OutControlLinear {
 public:
  virtual ~OutControlLinear() = default;
  // The layer's channel state in the model's OutControl, or null when OutControl is off.
  virtual OutChannels* out_channels() = 0;
  // Adds the FP64 sums of the forwards measured since the last call to out_channels()->step_sums()
  // (waits for the layer's stream); a no-op when none was measured.
  virtual void collect_out_control_sums() = 0;
  // The last split forward's operands (waits for the stream). Q1, Q2 and the MXFP8 X, W are transients:
  // valid only until the next forward or backward of any layer sharing the workspace.
  virtual SplitOperands split_operands() const = 0;
};

}  // namespace fp4::cuda
