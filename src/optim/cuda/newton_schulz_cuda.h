// Newton-Schulz orthogonalization on the GPU (optim/newton_schulz.h, RECIPES.md section 8.3): the CPU
// algorithm step for step, on device pointers, queued on a stream without waiting for the host.
//  - kFp32: every product an FP32 cuBLASLt GEMM (no TF32); the result differs from the CPU's only by
//    the order of the FP32 sums inside the GEMMs (and of the double sum of squares of the normalization).
//  - kBf16 ("root-bf16"): each product's operands rounded to BF16 (nearest even, f32_to_bf16) and
//    multiplied on BF16 tensor cores with FP32 accumulation and output (GemmRunner), the wide iterate
//    zero-padded to multiples of 8 (aligned BF16 rows; no effect on the result); the a X term, the
//    polynomial and the normalization are kFp32's kernels. The CPU's kBf16 rounds the same operands to the
//    same values, so the results again differ only by the order of the FP32 sums.
//  - kNvfp4 (Q-Root): each product's operands quantized by the device quantizers
//    (ops/cuda/quant/quantize_cuda.h, byte-identical to quantize_nvfp4) with the CPU's specs, tiles, zero
//    padding and Philox streams (operand o of step s draws stream sr.stream * 64 + 4 s + o); each operand's
//    amax comes from the kernel that wrote it. The products run on BF16 tensor cores over the operands'
//    exact values without their tensor scales, which multiply the FP32 result.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <vector>

#include "numerics/quantize.h"
#include "ops/cuda/gemm_cublaslt.h"
#include "ops/cuda/gemm_f32_cublaslt.h"
#include "ops/cuda/quant/quantize_cuda.h"
#include "optim/newton_schulz.h"

namespace fp4::cuda {

// What run() found, on the device: the input's sum of squares (not finite: the CPU's "non-finite values"
// error) and the output's squared Frobenius norm, both in double.
struct NsDeviceResult {
  double input_sumsq = 0;
  double output_fro2 = 0;
};

// Every quantized operand of a Q-Root NS run, copied to the host when asked (tests): per step s the FP32
// matrices that were quantized (X_s [r x c], A_s [r x r], P_s [r x r], X_s^T [c x r], in the padded wide
// orientation) and their NVFP4 forms, then the final iterate [r x c]. With it a test checks each
// operand's bytes and each product's FP32 arithmetic on the device's own values.
struct NsTrace {
  int64_t r = 0, c = 0;
  std::vector<std::array<std::vector<float>, 4>> inputs;
  std::vector<std::array<Nvfp4Tensor, 4>> operands;
  std::vector<float> result;
};

class NewtonSchulzCuda {
 public:
  // The workspace grows on the first run() of a larger shape (that run waits for the device once).
  explicit NewtonSchulzCuda(NsPrecision precision);
  NsPrecision precision() const { return precision_; }

  // out[rows x cols] = NS(b) (device, row-major; out may equal b); *result (device) receives the sums.
  // When trace is not null (kNvfp4 only) the stream is synchronized to fill it. Throws fp4::Error on
  // empty or too large shapes, a precision other than the constructor's, or steps outside [0, 16].
  void run(const float* b, int64_t rows, int64_t cols, const NsOptions& opt, float* out,
           NsDeviceResult* result, cudaStream_t stream, NsTrace* trace = nullptr);

 private:
  // Quantizes operand `slot` of NS step `step`: x [rows x cols] along cols (Philox sub-stream
  // 4 step + slot) with x's finite amax (device, written by the kernel that wrote x), its values without
  // the tensor scale (E2M1 code x E4M3 block scale, exact in BF16) into bar and its tensor scale into
  // outer_[slot]; with a trace, also copies x and the operand.
  void quantize(const float* x, int64_t rows, int64_t cols, BlockShape block, const NsOptions& opt, int step,
                int slot, const float* amax, bf16* bar, cudaStream_t stream, NsTrace* trace);

  void reserve(int64_t wide, int64_t gram);  // element capacities of the [rp x cp] and [rp x rp] buffers

  NsPrecision precision_;
  GemmF32Runner gemm_;    // kFp32: FP32 operands
  GemmRunner bf16_gemm_;  // kNvfp4, kBf16: BF16 operands, FP32 accumulation and output
  int64_t wide_cap_ = 0, gram_cap_ = 0;
  // The wide iterate, its successor (first holding kNvfp4's P^ X^), A, the last Gram product (X X^T, then
  // A A), P; kNvfp4: X^T.
  DeviceBuffer<float> x_, next_, a_, a2_, poly_, xt_;
  // kNvfp4: the operands' values without their tensor scales (outer_[slot] holds those): the products run
  // on BF16 tensor cores and the two tensor scales multiply the FP32 result. kBf16: xq_, aq_ and pq_ hold
  // bf16(X), bf16(A) and bf16(P).
  DeviceBuffer<bf16> xq_, aq_, pq_, xtq_;
  DeviceBuffer<uint8_t> codes_, scales_;  // one NVFP4 operand at a time (kNvfp4)
  // kNvfp4: the finite amax of X_s (X_s^T's too), A_s and P_s at 3 s, 3 s + 1, 3 s + 2 (s <= 16).
  static constexpr int kAmaxSlots = 3 * 17;
  DeviceBuffer<float> outer_, amax_, inv_;
  DeviceBuffer<double> partials_;
};

}  // namespace fp4::cuda
