// A plain causal scaled-dot-product attention for head sizes the fused FlashAttention-style kernels
// (attention_cuda.h: head size 64 or 128) do not take, e.g. the `tiny` model's 32. Same layouts and
// contract as attention_forward / attention_backward; one warp per query (forward, dQ) or per key
// (dK, dV), online softmax in FP32, no atomics (deterministic). O(T^2 D) work with no tiling: meant for
// small models and tests, not for speed.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace fp4::cuda {

// Head sizes this fallback takes: even, up to kSdpaMaxHeadDim.
constexpr int kSdpaMaxHeadDim = 256;

// q, k, v [B*T rows][ld_qkv], head h at columns h*D; out [B*T][ld_out]; lse [B][H][T] of the scaled scores.
void causal_sdpa_forward(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, int ld_qkv,
                         __nv_bfloat16* out, int ld_out, float* lse, int B, int T, int H, int D, float scale,
                         cudaStream_t stream);

size_t causal_sdpa_backward_workspace_bytes(int B, int T, int H, int D);
// dq, dk, dv (row stride ld_dqkv) are overwritten.
void causal_sdpa_backward(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, int ld_qkv,
                          const __nv_bfloat16* out, const __nv_bfloat16* dout, int ld_out, const float* lse,
                          __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, int ld_dqkv, int B, int T,
                          int H, int D, float scale, void* workspace, cudaStream_t stream);

}  // namespace fp4::cuda
