// Attention sublayer of an OLMo-2 block: fused qkv linear, QK-norm (RMSNorm over the full d_model-wide
// q and k), RoPE, causal softmax attention, output linear. Its output is normed by the Block.
#pragma once

#include <memory>
#include <string>

#include "core/model_config.h"
#include "nn/linear.h"
#include "nn/parameters.h"
#include "nn/q_attention.h"
#include "nn/workspace.h"
#include "recipe/recipe.h"
#include "tensor/tensor.h"

namespace fp4 {

class Attention {
 public:
  // Registers prefix.wqkv [3d][d], prefix.q_norm [d], prefix.k_norm [d], prefix.wo [d][d].
  // quant_ctx: the model's quantization context, needed when the recipe quantizes these linears.
  Attention(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg, const Recipe& recipe,
            int layer, const QuantContext* quant_ctx = nullptr);

  void resize(int b, int t);
  // y [n][d] from x [n][d]; x must stay valid until backward.
  void forward(const float* x, float* y, const RopeTables& rope);
  // dx = d(y)/d(x)^T dy (overwritten or added to); parameter gradients accumulate.
  void backward(const float* dy, float* dx, bool accumulate_dx, const RopeTables& rope, Workspace& ws);

  const Tensor& probs() const { return probs_; }

 private:
  ParameterSet& params_;
  ModelConfig cfg_;
  std::unique_ptr<Linear> qkv_;
  int q_norm_, k_norm_;
  std::unique_ptr<Linear> out_;
  std::unique_ptr<QAttentionCpu> q_attn_;  // recipe attention.q_attn: the NVFP4 score products
  const QuantContext* quant_ctx_;
  int b_ = 0, t_ = 0;
  // saved for the backward
  Tensor qkv_out_;          // [n][3d] raw q | k | v
  Tensor rstd_q_, rstd_k_;  // [n]
  Tensor q_, k_;            // [n][d] normed and rotated
  Tensor probs_;            // [b][heads][t][t]
  Tensor att_;              // [n][d] attention output (input of wo)
};

}  // namespace fp4
