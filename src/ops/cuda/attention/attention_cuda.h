// Fused causal self-attention on CUDA (FlashAttention-2 style): BF16 inputs and outputs, FP32 softmax
// statistics, head size 64 or 128, the backward recomputes the probabilities from the saved log-sum-exp.
// Algorithm, layouts and numerics: docs/ATTENTION.md.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace fp4::cuda {

// Causal self-attention over B sequences of T tokens, H heads of size D (64 or 128).
// q, k, v point at element [token 0][head 0][0] of row-major matrices with row stride ld_qkv elements
// (the engine passes the fused QKV buffer [B*T][3*H*D] with q = cols [0, HD), k = [HD, 2HD), v = [2HD, 3HD),
// head h at cols h*D .. h*D+D-1 of each). out: [B*T][ld_out], head h at cols h*D.. . lse: [B][H][T] FP32
// (log-sum-exp of the scaled scores, saved for the backward). scale = 1/sqrt(D).
// Requirements (checked, fp4::Error otherwise): every pointer 16-byte aligned, ld_qkv and ld_out multiples
// of 8 and at least H*D.
void attention_forward(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, int ld_qkv,
                       __nv_bfloat16* out, int ld_out, float* lse, int B, int T, int H, int D, float scale,
                       cudaStream_t stream);

// attention_forward with scale * log2(e) read from the device (scale_log2_device: one float, positive and
// finite) when the kernel starts, for scores whose scale is only known there (Q-Attn: the softmax scale times
// the NVFP4 tensor scales of Q and K; nn/cuda/q_attention_cuda.h). The LSE is of the scores so scaled.
void attention_forward_device_scale(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                    int ld_qkv, __nv_bfloat16* out, int ld_out, float* lse, int B, int T,
                                    int H, int D, const float* scale_log2_device, cudaStream_t stream);

// Gradients into dq, dk, dv with row stride ld_dqkv (the engine passes the fused dQKV buffer). dout has
// row stride ld_out like out. workspace: at least attention_backward_workspace_bytes(B, T, H, D) bytes
// (e.g. FP32 dq accumulator and the rowsum(dO*O) vector), owned by the caller, reused across calls.
// Same requirements as the forward, plus ld_dqkv a multiple of 8 and at least H*D, workspace 16-byte
// aligned. dq, dk, dv are overwritten (not accumulated into). On an sm_90 device the backward runs the
// pipelined wgmma kernel (attention_bwd_wgmma_pipe.cuh); FP4_ATTENTION_BWD=mma in the environment selects
// the mma.sync kernel instead (the fallback, and the kernel used on other devices); any other non-empty
// value of FP4_ATTENTION_BWD is an error.
size_t attention_backward_workspace_bytes(int B, int T, int H, int D);
void attention_backward(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, int ld_qkv,
                        const __nv_bfloat16* out, const __nv_bfloat16* dout, int ld_out, const float* lse,
                        __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, int ld_dqkv, int B, int T,
                        int H, int D, float scale, void* workspace, cudaStream_t stream);

}  // namespace fp4::cuda
