// Small elementwise kernels of the CUDA engine: FP32 -> BF16 copies (the weights' BF16 copy), the
// gather of each sequence's last position, and the -inf mask of padded vocabulary ids.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fp4::cuda {

using bf16 = __nv_bfloat16;

// out[i] = bf16(in[i]) (round to nearest even), n elements.
void f32_to_bf16(const float* in, bf16* out, int64_t n, cudaStream_t stream);

// out [b][d] = x [b*t][d] at rows s*t + t - 1 (the last position of each sequence).
void gather_last_positions(const bf16* x, bf16* out, int b, int t, int d, cudaStream_t stream);

// logits [rows][v]: columns >= v_real become -inf.
void mask_padded_logits(float* logits, int rows, int v, int v_real, cudaStream_t stream);

}  // namespace fp4::cuda
