// The quantized linear layer of RECIPES.md section 4 on the CPU (the reference for the CUDA path):
// Y = Q1(X) Q2(W)^T; dX = Q3(dY) Q4(W^T)^T; dW = Q5(dY^T) Q6(X^T)^T, each Qi per the layer's policy.
// The forward produces the backward operands (Q4, Q6) and keeps only them, packed.
#pragma once

#include <cstdint>

#include "nn/out_control.h"
#include "nn/quant_operand.h"
#include "recipe/recipe.h"

namespace fp4 {

class LoraSvd;

// What a model forward is for: training (the layers keep their backward operands) or inference
// (evaluation, generation: they keep none, see QuantContext::inference).
enum class ForwardMode { kTraining, kInference };

// Where a layer's random bits come from: the run seed, the layer's id and a call counter that the engine
// advances once per forward (per micro-batch), so a resumed run draws the same bits.
struct QuantContext {
  uint64_t seed = 0;
  uint64_t call = 0;
  OutControl* out_control = nullptr;  // the model's OutControl registry, when the recipe enables it
  LoraSvd* lora_svd = nullptr;        // the model's LoRA-SVD registry, when the recipe enables it
  // The forward serves evaluation or generation: layers build no backward operands (Q4, Q6 and the split's
  // MXFP8 X^T, whose quantization along tokens needs whole blocks of rows), so any sequence length runs;
  // a backward after such a forward is refused.
  bool inference = false;
};

// RNG purposes inside one call of one layer.
enum class QuantPurpose : uint32_t { kSrQ1 = 1, kSrQ2, kSrQ3, kSrQ4, kSrQ5, kSrQ6, kRhtDx, kRhtDw };

// The SR stream and RHT signs of quantizer `sr` (whose GEMM uses the RHT signs of purpose `rht`) in call
// ctx.call of layer `layer_id`. The CPU and CUDA layers both use this, so their operands are bit-identical.
QuantRandomness quant_randomness(const LinearPolicy& policy, const QuantContext& ctx, uint32_t layer_id,
                                 QuantPurpose sr, QuantPurpose rht, int rht_n);

class QuantLinearCpu {
 public:
  QuantLinearCpu(const LinearPolicy& policy, int in_features, int out_features, uint32_t layer_id,
                 std::string name);

  // y [n x out] = Q1(x) Q2(w)^T with w [out x in]. Saves the backward operands unless ctx.inference.
  void forward(const float* x, const float* w, float* y, int n, const QuantContext& ctx);
  // dx [n x in] (= or += when accumulate_dx), dw [out x in] += ... for the last forward.
  void backward(const float* dy, float* dx, float* dw, int n, bool accumulate_dx);

  // Bytes the forward kept for the backward (packed operands), for the memory accounting.
  int64_t saved_bytes() const {
    const auto x8 = split_ ? static_cast<int64_t>(x8t_.codes.size() + x8t_.scales.size()) : 0;
    return q4_.stored_bytes() + q6_.stored_bytes() + x8;
  }
  // Tests: keep the forward operands' values X^ = Q1(X), W^ = Q2(W) of the last call (off by default,
  // since the layer must not keep high-precision copies).
  void keep_forward_values(bool on) { keep_forward_values_ = on; }
  const std::vector<float>& last_x_hat() const { return x_hat_; }
  const std::vector<float>& last_w_hat() const { return w_hat_; }
  uint64_t nonfinite_inputs() const { return nonfinite_; }
  // Tests: the operands the last forward kept for the backward (Q4, Q6; after a split forward also the
  // MXFP8 X^T of the C8 channels), to compare other implementations with byte for byte.
  const QuantOperand& saved_q4() const { return q4_; }
  const QuantOperand& saved_q6() const { return q6_; }
  const Mxfp8Tensor& saved_x8t() const { return x8t_; }

  // OutControl: this layer's channel state (owned by the model's OutControl). While it calibrates the
  // forward measures X; once frozen the forward splits X and W into NVFP4 (C4) and MXFP8 (C8) channels.
  void set_out_channels(OutChannels* channels) { channels_ = channels; }

 private:
  QuantRandomness randomness(const QuantContext& ctx, QuantPurpose sr, QuantPurpose rht, int rht_n) const {
    return quant_randomness(policy_, ctx, layer_id_, sr, rht, rht_n);
  }

  // The OutControl layer (quant_linear_split.cpp): forward over C4 in NVFP4 and C8 in MXFP8, dX from the
  // assembled W^, dW per channel set.
  void forward_split(const float* x, const float* w, float* y, int n, const QuantContext& ctx);
  void backward_split_dw(const float* dy, float* dw, int n);
  // The split forward's backward operands: Q4 of the assembled W^, Q6 over C4, the MXFP8 X^T over C8.
  void build_split_backward_operands(const std::vector<float>& x4, const std::vector<float>& x4_hat,
                                     const std::vector<float>& x8_hat, const std::vector<float>& w_hat,
                                     const float* w, int n, const QuantContext& ctx);
  // After an inference forward: frees the previous training forward's operands and refuses backward().
  void drop_backward_operands();

  LinearPolicy policy_;
  int in_, out_;
  uint32_t layer_id_;
  std::string name_;
  // Saved by forward for backward.
  QuantOperand q4_;  // W^T [in x out] along out; with source = reuse: Q2(W) [out x in] itself
  QuantOperand q6_;  // X^T [in x n] along n;    with source = reuse: Q1(X) [n x in] itself
  bool keep_forward_values_ = false;
  std::vector<float> x_hat_, w_hat_;
  QuantContext ctx_;
  int saved_n_ = -1;
  uint64_t nonfinite_ = 0;
  OutChannels* channels_ = nullptr;
  bool split_ = false;  // the last forward was the OutControl split
  Mxfp8Tensor x8t_;     // split: MX8 along n of dequant(MX8(X[:, C8]))^T, [|C8| x n padded to 32]
};

}  // namespace fp4
