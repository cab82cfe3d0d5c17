// Mixed-precision causal attention Q-Attn (RECIPES.md section 8.4) on the CPU, the reference for a
// future CUDA kernel. Per (batch, head), with s = 1/sqrt(head_dim):
//   forward   S = s Q^ K^^T with Q^ = Q4(Q), K^ = Q4(K) (NVFP4 1x16 along head_dim, RTN);
//             P = causal softmax(S); O = P V (high precision).
//   backward  dP = dO V^T, dV = P^T dO (high precision); dS = P * (dP - rowsum(P * dP));
//             dQ = s Q4sr(dS) Q4sr(K^^T)^T  (both along keys),
//             dK = s Q4sr(dS^T) Q4sr(Q^^T)^T (both along queries).
// The backward re-quantizes the forward's Q^ and K^ (the `aligned` idea of section 4), with stochastic
// rounding, so E[dQ] = s dS K^ and E[dK] = s dS^T Q^: the exact gradient of the quantized forward.
// Scales: `tensor` outer scale everywhere (block128 needs 128-wide reduction blocks; head_dim is 64 in the
// OLMo-2 configs). Q and K use one amax each over the whole [n x d] tensor; the backward operands one amax
// per (batch, head) matrix. "High precision" is FP32 here, as for every BF16 operand of the CPU reference.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/quant_linear.h"

namespace fp4 {

// Stream purposes of the four backward quantizers (distinct from the linear layers' 1..8 and other users').
enum class QAttnPurpose : uint32_t { kSrDsRows = 0x30, kSrKt = 0x31, kSrDsCols = 0x32, kSrQt = 0x33 };

// The NVFP4 spec of every Q-Attn operand: 1x16, tensor outer scale; SR operands with sr_headroom.
QuantSpec q_attn_spec(Rounding rounding);
// The SR bits of one backward quantizer of (batch, head) `slice` (batch * heads + head) in call ctx.call of
// block `layer`; the CUDA path (nn/cuda/q_attention_cuda.h) draws the same.
QuantRandomness q_attn_randomness(const QuantContext& ctx, int layer, int slice, QAttnPurpose purpose);

// Shapes of one attention call: q, k, v, out [b*t rows][heads*head_dim].
struct AttnShape {
  int b = 0, t = 0, heads = 0, head_dim = 0;
  int64_t rows() const { return static_cast<int64_t>(b) * t; }
  int width() const { return heads * head_dim; }
};

class QAttentionCpu {
 public:
  // layer: the block index, which separates this layer's random streams from other layers'.
  explicit QAttentionCpu(int layer);

  // q, k contiguous [n x d] (normed and rotated); v, out with row strides; probs [b][heads][t][t] is
  // saved by the caller for the backward. Keeps Q^ and K^ for the backward.
  void forward(float* out, int ldo, float* probs, const float* q, const float* k, const float* v, int ldv,
               const AttnShape& shape, const QuantContext& ctx);
  // dq, dk contiguous [n x d], dv with row stride lddv: overwritten. probs and v as given to forward.
  void backward(float* dq, float* dk, float* dv, int lddv, const float* dout, int lddo, const float* probs,
                const float* v, int ldv, const AttnShape& shape);

  // The forward's quantized views Q^, K^ [n x d] (dequantized FP32).
  const std::vector<float>& q_hat() const { return q_hat_; }
  const std::vector<float>& k_hat() const { return k_hat_; }
  uint64_t nonfinite_inputs() const { return nonfinite_; }

 private:
  int layer_;
  AttnShape shape_;
  QuantContext ctx_;
  bool have_forward_ = false;
  std::vector<float> q_hat_, k_hat_;
  uint64_t nonfinite_ = 0;
};

}  // namespace fp4
