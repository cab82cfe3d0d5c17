// Q-Attn's fused kernels (RECIPES.md section 8.4, docs/Q_ATTN.md "Fused form"): the NVFP4 products of the
// attention backward inside one FlashAttention-style kernel, no T x T matrix in memory. The forward is the
// BF16 fused forward (attention_cuda.h, attention_forward_device_scale) on Q^'s and K^'s q * s_b values.
//
// Backward, per (batch, head) slice, two passes of the same tile loop (attention_bwd.cuh's mma.sync steps):
//   1. amax pass: S, P, dP and dS recomputed per tile, only max |dS| kept (the slice's NVFP4 tensor scale);
//   2. main pass: the same dS, quantized in registers twice with stochastic rounding, 1x16 blocks along
//      the queries (dS^T, for dK = s Q(dS^T) Q(Q^^T)) and along the keys (dS, for dQ = s Q(dS) Q(K^^T));
//      dV = P^T dO in BF16 as in the plain kernel. Scales, codes and random bits are those of the CPU
//      reference (nvfp4_block.h's functions, element index row * tp + column of the [t x tp] operands).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "numerics/philox.h"

namespace fp4::cuda {

struct QAttnBackwardArgs {
  int B = 0, T = 0, H = 0, D = 0;  // D: 64 or 128
  float scale = 0.f;               // the softmax scale 1/sqrt(D)
  // The forward's Q^ and K^ as q * s_b values (BF16, exact; no S_dec) and their re-quantizations along the
  // sequence Q^^T, K^^T (q_attention_requantize_along_sequence), head h at columns h*D, row stride ld_qk.
  const __nv_bfloat16 *q_bar = nullptr, *k_bar = nullptr, *qt_bar = nullptr, *kt_bar = nullptr;
  int ld_qk = 0;
  const float *sdec_qt = nullptr, *sdec_kt = nullptr;  // [B*H]: S_dec of Q^^T and K^^T per slice
  const float* scale_log2 =
      nullptr;  // device, one float: scale * S_dec(Q^) * S_dec(K^) * log2(e), the forward's
  const __nv_bfloat16* v = nullptr;
  int ld_v = 0;
  const __nv_bfloat16 *out = nullptr, *dout = nullptr;  // the forward's output and its gradient
  int ld_out = 0;
  const float* lse = nullptr;  // [B][H][T], the forward's (natural log of the scaled scores' sum)
  __nv_bfloat16 *dq = nullptr, *dk = nullptr, *dv = nullptr;  // overwritten
  int ld_dqkv = 0;
  RngStream ds_rows, ds_cols;  // SR streams of slice 0's dS and dS^T; slice s adds s << 32 (make_stream's id)
  void* workspace = nullptr;   // q_attention_backward_workspace_bytes, 16-byte aligned
  // Tests only: when set, [B*H][T][tp] arrays (tp = T rounded up to 16), zeroed by the caller, receive the
  // FP32 dS (row = query), the q * s_b values of Q(dS) (row = query) and of Q(dS^T) (row = key).
  float* debug_ds = nullptr;
  __nv_bfloat16 *debug_ds_rows = nullptr, *debug_ds_cols = nullptr;
};

size_t q_attention_backward_workspace_bytes(int B, int T, int H, int D);
// Checks the arguments (fp4::Error naming the one at fault), then queues Delta, the two passes and the dQ
// conversion on `stream`; no synchronization.
void q_attention_backward(const QAttnBackwardArgs& a, cudaStream_t stream);

// Q^^T (or K^^T) of every slice: the forward's view X^ = bar * S_dec (bar: q * s_b, row stride ld, head h at
// columns h*D; sdec: one float) re-quantized to NVFP4 with stochastic rounding in 1x16 blocks along the
// sequence, one tensor scale per (batch, head) slice (sr_headroom target), stream slice0 + (slice << 32),
// element index c * tp + token of the CPU reference's [D x tp] operand. Writes the q * s_b values to out_bar
// at X's positions (row stride ld) and each slice's S_dec to out_sdec [B*H]; amax [B*H] is scratch.
void q_attention_requantize_along_sequence(const __nv_bfloat16* bar, int ld, const float* sdec, int B, int T,
                                           int H, int D, RngStream slice0, __nv_bfloat16* out_bar,
                                           float* out_sdec, float* amax, cudaStream_t stream);

}  // namespace fp4::cuda
