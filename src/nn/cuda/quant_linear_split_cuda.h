// OutControl's split form of the NVFP4 CUDA layer (quant_linear_split.cpp on the device), used by
// quant_linear_cuda.cu once the layer's channels are frozen:
//   Y = Q1(X[:, C4]) Q2(W[:, C4])^T + MX8(X[:, C8]) MX8(W[:, C8])^T   (one GEMM over both parts)
//   Q4 from W^ assembled in channel order from both parts; Q6 over X[:, C4]; MX8 of the FP8 X^T;
//   dW[:, C4] = Q5(dY^T) Q6^T and dW[:, C8] = MX8(dY^T) MX8(X^T)^T, scattered into W.grad.
// Columns are gathered into zero-padded matrices (X in BF16, the master in FP32), each source read once, and
// quantized by the device quantizers: Q1 and Q6 by the fused dual quantizer in one pass, the FP8 transposes
// by the transposed MXFP8 quantizer (no transposed copies), so every operand is byte-identical to the CPU
// layer's; GEMMs run on BF16 values as in the unsplit layer.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/cuda/quant_linear_cuda.h"
#include "nn/quant_linear.h"
#include "ops/cuda/quant/quantize_cuda.h"

namespace fp4::cuda {

class QuantLinearSplitCuda {
 public:
  QuantLinearSplitCuda(const LinearSpec& spec, const DeviceWeight& w, GemmRunner& gemm, cudaStream_t stream);

  // Transient bytes of one forward or backward over n rows with `ch`'s channel sets.
  size_t workspace_bytes(const OutChannels& ch, int n) const;
  // y [n x out] BF16 from x [n x in] BF16 and the FP32 master; keeps Q4, Q6 and the FP8 X^T.
  void forward(const OutChannels& ch, const bf16* x, bf16* y, int n, const QuantContext& ctx,
               uint8_t* workspace);
  // Q4 (W^T [in x out]) of the last forward, for the layer's dX GEMM.
  Nvfp4DeviceView q4();
  // W.grad += dW of the last forward: dy [n x out] BF16, dyt_q5 the Q5(dY^T) values [out x n] BF16.
  void backward_dw(const bf16* dy, const bf16* dyt_q5, int n, uint8_t* workspace);
  size_t kept_bytes() const;
  SplitOperands operands() const;

 private:
  struct Dims {
    int64_t n, in, out, k4, k8, p4, p8, pn;
  };
  Dims dims(const OutChannels& ch, int n) const;
  // The kept Q6 (X[:, C4]^T along n) as an operand of `rows` rows: p4 for the quantizer, which writes the
  // padding channels too; k4, the real channels, for its readers.
  Nvfp4DeviceView q6_view(int64_t rows);
  void sync_channels(const OutChannels& ch);

  LinearSpec spec_;
  DeviceWeight w_;
  GemmRunner& gemm_;
  cudaStream_t stream_;
  LinearPolicy p_;
  QuantContext ctx_;
  Dims d_{};                      // of the last forward
  std::vector<int32_t> c4_, c8_;  // host copies of the sets on the device
  DeviceBuffer<int32_t> idx_;     // C4 then C8
  DeviceBuffer<uint8_t> q4_codes_, q4_scales_, q6_codes_, q6_scales_, x8t_codes_, x8t_scales_;
  DeviceBuffer<float> q4_outer_, q6_outer_;
  uint8_t* fwd_ws_ = nullptr;  // the last forward's workspace (its operands, for tests)
};

}  // namespace fp4::cuda
