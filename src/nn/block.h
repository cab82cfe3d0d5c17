// One OLMo-2 block with post-sublayer norms (no norm on the sublayer input):
//   h   = x + RMSNorm_attn(Attention(x))
//   out = h + RMSNorm_mlp(MLP(h))
#pragma once

#include <string>

#include "core/model_config.h"
#include "nn/attention.h"
#include "nn/mlp.h"
#include "nn/parameters.h"
#include "nn/workspace.h"
#include "recipe/recipe.h"
#include "tensor/tensor.h"

namespace fp4 {

class Block {
 public:
  // Parameters in registration order: attn.{wqkv, q_norm, k_norm, wo}, attn_norm, mlp.{w_gate_up, w_down},
  // mlp_norm, all under "blocks.<layer>.".
  Block(ParameterSet& params, const ModelConfig& cfg, const Recipe& recipe, int layer,
        const QuantContext* quant_ctx = nullptr);

  void resize(int b, int t);
  // out [n][d] from x [n][d]; x must stay valid until backward. out must not alias x.
  void forward(const float* x, float* out, const RopeTables& rope);
  // dx (overwritten) from dout; dx must not alias dout or the workspace.
  void backward(const float* dout, float* dx, const RopeTables& rope, Workspace& ws);

  const std::string& name() const { return name_; }
  // Saved intermediate tensors, for diagnostics (first non-finite activation).
  const Tensor& attn_output() const { return y_attn_; }
  const Tensor& mid() const { return h_; }
  const Tensor& mlp_output() const { return y_mlp_; }

 private:
  ParameterSet& params_;
  ModelConfig cfg_;
  std::string name_;
  Attention attn_;
  int attn_norm_;
  Mlp mlp_;
  int mlp_norm_;
  int n_ = 0;
  Tensor y_attn_, rstd_attn_;  // attention output before its norm, and the norm's 1/rms
  Tensor h_;                   // mid-block residual stream
  Tensor y_mlp_, rstd_mlp_;
};

}  // namespace fp4
