// MLP sublayer of an OLMo-2 block: fused gate+up linear [2 ff][d], SwiGLU silu(gate) * up, down
// linear [d][ff]. Its output is normed by the Block.
#pragma once

#include <memory>
#include <string>

#include "core/model_config.h"
#include "nn/linear.h"
#include "nn/parameters.h"
#include "nn/workspace.h"
#include "recipe/recipe.h"
#include "tensor/tensor.h"

namespace fp4 {

class Mlp {
 public:
  // Registers prefix.w_gate_up [2 ff][d] (rows 0..ff gate, ff..2ff up) and prefix.w_down [d][ff].
  Mlp(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg, const Recipe& recipe,
      int layer, const QuantContext* quant_ctx = nullptr);

  void resize(int b, int t);
  // y [n][d] from x [n][d]; x must stay valid until backward.
  void forward(const float* x, float* y);
  void backward(const float* dy, float* dx, bool accumulate_dx, Workspace& ws);

 private:
  ModelConfig cfg_;
  std::unique_ptr<Linear> gate_up_;
  std::unique_ptr<Linear> down_;
  int n_ = 0;
  Tensor gu_;   // [n][2 ff]
  Tensor act_;  // [n][ff]
};

}  // namespace fp4
