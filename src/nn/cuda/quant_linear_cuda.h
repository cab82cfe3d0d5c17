// QuantLinearCuda: the NVFP4 linear layer of RECIPES.md section 4 on Hopper. Fused quantization kernels
// (src/ops/cuda/quantize_cuda.h) produce packed operands; the GEMMs run on BF16 tensor cores over the
// dequantized values (q * s * S_dec or q * s * s_out rounded to BF16: relative error <= 2^-8 per element,
// far under FP4 noise), with FP32 accumulation. The forward keeps only the packed backward operands
// (Q6 = X^T, and Q4 = W^T or, for NVIDIA's 16x16 re-use, Q2 itself); its transients live in a workspace
// the engine lends it (LinearCuda::lend_workspace).
//
// Every random bit comes from quant_randomness (nn/quant_linear.h), as in the CPU layer: for the same
// context the packed operands are bit-identical to QuantLinearCpu's.
#pragma once

#include "nn/cuda/linear_cuda.h"

namespace fp4::cuda {

// Throws fp4::Error naming the layer when the policy is one this CUDA layer does not run (the CPU
// engine runs every valid policy): Q1..Q6 must all be NVFP4, Q4 aligned or reuse, Q6 aligned or original.
std::unique_ptr<LinearCuda> make_quant_linear_cuda(const LinearSpec& spec, const DeviceWeight& weight,
                                                   GemmRunner& gemm, cudaStream_t stream);

}  // namespace fp4::cuda
