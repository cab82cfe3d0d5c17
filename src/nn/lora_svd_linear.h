// A quantized linear with LoRA-SVD projections (RECIPES.md section 8.1, docs/LORA_SVD.md), on the CPU:
//   W = W_res + beta L2 L1, W_res [out x in] (the parameter "<name>"), L1 [r x in] ("<name>.lora_l1"),
//   L2 [out x r] ("<name>.lora_l2");
//   Y  = Q1(X) Q2(W_res)^T (the recipe's layer, QuantLinearCpu) + beta (X L1^T) L2^T (FP32);
//   dX = the recipe's quantized dX through W_res + beta (dY L2) L1 (FP32);
//   dW = the recipe's quantized wgrad; U = cholesky_qr2(L2); P = U U^T dW;
//   dL2 += beta P L1^T, dL1 += beta L2^T P, dW_res += dW - P.
// LoraSvd is the model-wide registry the engine drives: the one-time initial realignment and the periodic
// ones, and the element ranges of the factors whose optimizer moments those reset.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "nn/linear.h"
#include "nn/parameters.h"
#include "recipe/recipe.h"

namespace fp4 {

// The parameter names of a LoRA-SVD layer whose weight (W_res) is `weight`.
inline std::string lora_l1_name(const std::string& weight) {
  return weight + ".lora_l1";
}
inline std::string lora_l2_name(const std::string& weight) {
  return weight + ".lora_l2";
}

class LoraSvd {
 public:
  explicit LoraSvd(const LoraSvdConfig& cfg) : cfg_(cfg) {}
  const LoraSvdConfig& config() const { return cfg_; }

  struct Layer {
    std::string name;  // the weight W_res
    int in = 0, out = 0;
    uint32_t layer_id = 0;             // the linear's random-stream id
    int w_res = -1, l1 = -1, l2 = -1;  // parameter indices
  };
  // Throws naming the layer when rank >= min(in, out).
  void add(const Layer& layer);
  const std::vector<Layer>& layers() const { return layers_; }

  // Realignment number `index` of every layer (the sketch's stream: layer id, index, a LoRA-SVD purpose),
  // the layers on all host threads (parallel_for: the same bits as one after the other).
  void realign(ParameterSet& params, uint64_t seed, int64_t index) const;
  // Realignment number `index` of one layer on host copies of its W_res [out x in], L1 [r x in] and
  // L2 [out x r] (what realign() does for each layer; the CUDA engine calls it on downloaded factors).
  void realign_layer(const Layer& layer, float* w_res, float* l1, float* l2, uint64_t seed,
                     int64_t index) const;
  // At step 0: L1 = L2 = 0, then realignment 0, so W_res starts as the initial W minus its top-r part.
  void initialize(ParameterSet& params, uint64_t seed) const;
  // After optimizer step `step` (1-based): is this a realignment step?
  bool realigns_after(int64_t step) const { return step > 0 && step % cfg_.realign_every == 0; }
  // Flat-buffer ranges of every L1 and L2 (their optimizer moments reset at a realignment).
  std::vector<IndexRange> factor_ranges(const ParameterSet& params) const;

 private:
  LoraSvdConfig cfg_;
  std::vector<Layer> layers_;
};

// The LoRA-SVD layer on `policy` (any policy: with every operand unquantized it is exact FP32, which the
// tests use). Registers W_res, L1, L2 in that order and adds itself to `registry`. OutControl, when the
// context has it, splits the W_res product as in QuantizedLinear.
std::unique_ptr<Linear> make_lora_svd_linear(ParameterSet& params, const LinearSpec& spec, LoraSvd& registry);

}  // namespace fp4
