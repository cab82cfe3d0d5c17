// RMSNorm on the GPU (the semantics of cpu::rmsnorm_forward / rmsnorm_backward) for contiguous rows of
// even width c: the OLMo-2 post-sublayer norms fused with the residual add, and the final norm.
// The weight w and its gradient are FP32 (master precision); rows are BF16 or FP32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace fp4::cuda {

using bf16 = __nv_bfloat16;

// out = x * rstd * w (+ residual), rstd = 1/sqrt(mean(x^2) + eps); one warp per row.
// Writes out_f32 and/or out_bf16 (either may be null); residual may be null or alias out_f32.
void rmsnorm_forward(const bf16* x, const float* w, const float* residual, float* out_f32, bf16* out_bf16,
                     float* rstd, int n, int c, float eps, cudaStream_t stream);
void rmsnorm_forward(const float* x, const float* w, const float* residual, float* out_f32, bf16* out_bf16,
                     float* rstd, int n, int c, float eps, cudaStream_t stream);

// dx = rstd * (g - x rstd^2 mean(g x)) with g = dout * w (overwritten); dw += sum_rows dout * x * rstd,
// summed in a fixed order (deterministic) through `scratch` of norm_backward_scratch_floats(n, c) floats.
void rmsnorm_backward(const float* dout, const bf16* x, const float* w, const float* rstd, bf16* dx,
                      float* dw, float* scratch, int n, int c, cudaStream_t stream);
void rmsnorm_backward(const float* dout, const float* x, const float* w, const float* rstd, float* dx,
                      float* dw, float* scratch, int n, int c, cudaStream_t stream);

// Row tiling of the norm backward kernels (shared with the QK-norm backward): blocks of
// rows_per_block rows, each block leaving one partial weight gradient row.
struct NormTiling {
  int rows_per_block = 1;
  int blocks = 1;
};
NormTiling norm_backward_tiling(int n);
size_t norm_backward_scratch_floats(int n, int width);

// dw_a[j] += sum_b partials[b][j] for j < split, dw_b[j - split] += ... for split <= j < width.
void reduce_norm_partials(const float* partials, int blocks, int width, int split, float* dw_a, float* dw_b,
                          cudaStream_t stream);

// Launch shape of the norm backward kernels (RMSNorm, QK-norm): a block of kNormThreads threads walks
// rows_per_block rows, each thread holding the weight-gradient sums of up to kNormPairsPerThread column
// pairs in registers; about kNormTargetBlocks blocks (several per SM, so the per-row block
// reductions of different blocks overlap).
constexpr int kNormThreads = 256;
constexpr int kNormPairsPerThread = 8;
constexpr int kNormTargetBlocks = 1024;
constexpr int kNormMaxWidth = 2 * kNormThreads * kNormPairsPerThread;  // 4096

}  // namespace fp4::cuda
