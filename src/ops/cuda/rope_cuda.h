// OLMo-2 QK-norm fused with RoPE on the GPU: q and k are RMS-normed over their full d-wide rows
// (cpu::rmsnorm_forward) and then rotated per head (cpu::rope_forward: rotate-half pairs
// (i, i + head_dim/2), position = row % t), in one pass over the fused qkv projection.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace fp4::cuda {

using bf16 = __nv_bfloat16;

// qkv [n][3d] raw projections q | k | v. Writes out [n][3d]: normed and rotated q and k, v copied (the
// layout the attention kernels read). rstd_q, rstd_k [n] are saved for the backward. cos_table and
// sin_table are [>= t][head_dim/2] (cpu::rope_tables). One warp per row.
void qk_norm_rope_forward(const bf16* qkv, bf16* out, const float* w_q, const float* w_k,
                          const float* cos_table, const float* sin_table, float* rstd_q, float* rstd_k, int n,
                          int t, int d, int head_dim, float eps, cudaStream_t stream);

// dqkv [n][3d] holds on entry the gradients with respect to `out` of the forward; its q and k parts are
// replaced in place by the gradients with respect to the raw projections (v is left as it is).
// dw_q, dw_k accumulate, deterministically through `scratch` of norm_backward_scratch_floats(n, 2 d) floats.
void qk_norm_rope_backward(bf16* dqkv, const bf16* qkv, const float* w_q, const float* w_k,
                           const float* cos_table, const float* sin_table, const float* rstd_q,
                           const float* rstd_k, float* dw_q, float* dw_k, float* scratch, int n, int t, int d,
                           int head_dim, cudaStream_t stream);

}  // namespace fp4::cuda
