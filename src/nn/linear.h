// Linear: Y = X W^T for the four block linears (fused qkv, attention output, fused gate+up, down).
// The layer owns its precision policy (recipe.h); make_linear picks the implementation. Only the
// full-precision (FP32) path exists on the CPU so far; NVFP4 layers plug in behind the same interface.
#pragma once

#include <memory>
#include <string>

#include "nn/parameters.h"
#include "nn/quant_linear.h"
#include "recipe/recipe.h"

namespace fp4 {

struct LinearSpec {
  std::string name;  // the weight's parameter name, e.g. "blocks.0.attn.wqkv"
  int in_features = 0;
  int out_features = 0;
  LinearPolicy policy;
  std::string recipe_name;                  // for error messages
  uint32_t layer_id = 0;                    // distinct per linear of a model: its random streams
  const QuantContext* quant_ctx = nullptr;  // the engine's seed and call counter (quantized layers)
};

class Linear {
 public:
  virtual ~Linear() = default;
  const LinearSpec& spec() const { return spec_; }

  // y [n][out] = x [n][in] W^T. The layer keeps what its backward needs (the FP32 layer keeps the
  // pointer x, which must stay valid and unchanged until backward).
  virtual void forward(const float* x, float* y, int n) = 0;
  // dx [n][in] = dy W (overwritten, or added to when accumulate_dx); dW += dy^T x.
  virtual void backward(const float* dy, float* dx, int n, bool accumulate_dx) = 0;

 protected:
  explicit Linear(LinearSpec spec) : spec_(std::move(spec)) {}
  LinearSpec spec_;
};

// The random-stream id of linear `kind` of block `layer`.
inline uint32_t linear_id(int layer, LinearKind kind) {
  return static_cast<uint32_t>(layer) * kNumLinearKinds + static_cast<uint32_t>(kind);
}

// Registers the weight [out][in] (weight decay, normal init) in `params` and returns the layer.
// A policy that quantizes any operand gives the NVFP4 layer (QuantLinearCpu), which needs quant_ctx.
std::unique_ptr<Linear> make_linear(ParameterSet& params, const LinearSpec& spec);

}  // namespace fp4
