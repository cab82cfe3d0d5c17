// SwiGLU on the GPU (cpu::swiglu_forward / swiglu_backward) on BF16 rows, computed in FP32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace fp4::cuda {

using bf16 = __nv_bfloat16;

// out [n][f] = silu(gate) * up, gu [n][2f] holding gate (columns 0..f) then up (f..2f). f must be even.
void swiglu_forward(const bf16* gu, bf16* out, int n, int f, cudaStream_t stream);
// dgu [n][2f] (overwritten) from dout [n][f].
void swiglu_backward(const bf16* dout, const bf16* gu, bf16* dgu, int n, int f, cudaStream_t stream);

}  // namespace fp4::cuda
