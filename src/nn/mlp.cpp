#include "nn/mlp.h"

#include <limits>

#include "core/error.h"
#include "ops/ops.h"

namespace fp4 {

Mlp::Mlp(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg, const Recipe& recipe,
         int layer, const QuantContext* quant_ctx)
    : cfg_(cfg) {
  // The fused gate+up projection has 2 x d_ff outputs, an int (the run config bounds d_ff far below this).
  FP4_CHECK(cfg.d_ff > 0 && cfg.d_ff <= std::numeric_limits<int>::max() / 2, prefix, ": d_ff ", cfg.d_ff,
            " is out of range (1 .. ", std::numeric_limits<int>::max() / 2, ")");
  gate_up_ = make_linear(params, {prefix + ".w_gate_up", cfg.d_model, 2 * cfg.d_ff,
                                  recipe.policy_for(layer, cfg.n_layers, LinearKind::kGateUp), recipe.name,
                                  linear_id(layer, LinearKind::kGateUp), quant_ctx});
  down_ = make_linear(params, {prefix + ".w_down", cfg.d_ff, cfg.d_model,
                               recipe.policy_for(layer, cfg.n_layers, LinearKind::kDown), recipe.name,
                               linear_id(layer, LinearKind::kDown), quant_ctx});
}

void Mlp::resize(int b, int t) {
  n_ = b * t;
  gu_.resize({n_, 2 * static_cast<int64_t>(cfg_.d_ff)});
  act_.resize({n_, cfg_.d_ff});
}

void Mlp::forward(const float* x, float* y) {
  gate_up_->forward(x, gu_.data(), n_);
  cpu::swiglu_forward(act_.data(), gu_.data(), n_, cfg_.d_ff);
  down_->forward(act_.data(), y, n_);
}

void Mlp::backward(const float* dy, float* dx, bool accumulate_dx, Workspace& ws) {
  down_->backward(dy, ws.dact.data(), n_, false);
  cpu::swiglu_backward(ws.dgu.data(), ws.dact.data(), gu_.data(), n_, cfg_.d_ff);
  gate_up_->backward(ws.dgu.data(), dx, n_, accumulate_dx);
}

}  // namespace fp4
