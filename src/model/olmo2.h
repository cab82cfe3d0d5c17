// Olmo2Model: embedding, blocks, final RMSNorm, untied LM head and the cross-entropy + z-loss, with a
// hand-written backward (llm.c style: every activation the backward needs is an explicit buffer,
// sized once per (batch, seq) and reused).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "nn/block.h"
#include "nn/lora_svd_linear.h"
#include "nn/parameters.h"
#include "nn/workspace.h"
#include "ops/ops.h"
#include "recipe/recipe.h"
#include "tensor/tensor.h"

namespace fp4 {

// The parts of `recipe` that decide a model's parameter layout and initial values (LoRA-SVD's factors and
// the linears its initial realignment goes through); a recipe without LoRA-SVD gives the plain layout.
// Engines that run the layers themselves build their host model from it (the CUDA engine, its benches).
Recipe parameter_layout_recipe(const Recipe& recipe);

class Olmo2Model {
 public:
  // Parameters in order: embed, blocks.0.* .. blocks.{L-1}.*, final_norm, lm_head.
  Olmo2Model(const ModelConfig& cfg, const Recipe& recipe);

  const ModelConfig& config() const { return cfg_; }
  ParameterSet& params() { return params_; }
  const ParameterSet& params() const { return params_; }

  // Truncated normal (std cfg.init_std) for matrices, ones for norm weights; parameter i draws from
  // the RNG stream of (seed, i). With LoRA-SVD the factors then take each weight's top-r part.
  void init_parameters(uint64_t seed);

  // The quantized linears' random streams: the run seed and a per-forward call index, which the engine
  // sets before each forward (a pure function of step and micro-batch, so resumed runs repeat it).
  QuantContext& quant_context() { return quant_ctx_; }
  // OutControl's registry of the quantized linears, when the recipe enables it (else nullptr).
  OutControl* out_control() { return out_control_.get(); }
  const OutControl* out_control() const { return out_control_.get(); }
  // LoRA-SVD's registry of the quantized linears, when the recipe enables it (else nullptr).
  LoraSvd* lora_svd() { return lora_svd_.get(); }

  // Forward through the final norm for tokens [b][t] (checked against the vocabulary and max_seq_len).
  // An inference forward (evaluation, generation) builds no backward operands, so backward() is refused
  // after it and any t runs with any recipe; its outputs equal a training forward's.
  void forward(const int32_t* tokens, int b, int t, ForwardMode mode = ForwardMode::kTraining);

  // LM head + cross-entropy over the forward's positions. With backward, the LM head's gradient and
  // the gradient at the final norm's output are computed on the way (chunk by chunk, so the logits
  // of all positions never exist at once), scaled by grad_scale, ready for backward().
  cpu::LossSums loss(const int32_t* targets, bool backward, float grad_scale);

  // Backward from the final norm to the embedding; parameter gradients accumulate.
  void backward();

  // Logits of the last position of each sequence: out [b][vocab_size]; padded ids (>= vocab_real) get -inf.
  void last_logits(float* out);

  // Names the first forward tensor holding a NaN/Inf ("embedding output", "blocks.1.attn output", ...),
  // or returns "" when all are finite. For error messages.
  std::string first_nonfinite_activation() const;

 private:
  void resize(int b, int t);

  ModelConfig cfg_;
  QuantContext quant_ctx_;
  std::unique_ptr<OutControl> out_control_;
  std::unique_ptr<LoraSvd> lora_svd_;
  ParameterSet params_;
  int embed_ = -1;
  std::vector<std::unique_ptr<Block>> blocks_;
  int final_norm_ = -1;
  int lm_head_ = -1;

  int b_ = 0, t_ = 0;
  std::vector<int32_t> tokens_;
  std::vector<Tensor> residual_;  // [L+1] x [n][d]: residual_[0] embedding, residual_[l+1] block l output
  Tensor xf_, rstd_f_;            // final norm output [n][d] and its 1/rms [n]
  Tensor dxf_;                    // gradient at the final norm output
  Tensor dres_[2];                // ping-pong gradients along the residual stream
  Tensor logits_;                 // [rows per chunk][vocab]
  RopeTables rope_;
  Workspace ws_;
};

}  // namespace fp4
