#include "nn/block.h"

#include "ops/ops.h"

namespace fp4 {

Block::Block(ParameterSet& params, const ModelConfig& cfg, const Recipe& recipe, int layer,
             const QuantContext* quant_ctx)
    : params_(params),
      cfg_(cfg),
      name_("blocks." + std::to_string(layer)),
      attn_(params, name_ + ".attn", cfg, recipe, layer, quant_ctx),
      attn_norm_(params.add(name_ + ".attn_norm", {cfg.d_model}, false, ParamInit::kOnes)),
      mlp_(params, name_ + ".mlp", cfg, recipe, layer, quant_ctx),
      mlp_norm_(params.add(name_ + ".mlp_norm", {cfg.d_model}, false, ParamInit::kOnes)) {}

void Block::resize(int b, int t) {
  n_ = b * t;
  attn_.resize(b, t);
  mlp_.resize(b, t);
  const int64_t d = cfg_.d_model;
  y_attn_.resize({n_, d});
  rstd_attn_.resize({n_});
  h_.resize({n_, d});
  y_mlp_.resize({n_, d});
  rstd_mlp_.resize({n_});
}

void Block::forward(const float* x, float* out, const RopeTables& rope) {
  const int d = cfg_.d_model;
  const int64_t nd = static_cast<int64_t>(n_) * d;
  attn_.forward(x, y_attn_.data(), rope);
  cpu::rmsnorm_forward(h_.data(), d, rstd_attn_.data(), y_attn_.data(), d, params_.value(attn_norm_).data(),
                       n_, d, cfg_.norm_eps);
  cpu::add(h_.data(), h_.data(), x, nd);
  mlp_.forward(h_.data(), y_mlp_.data());
  cpu::rmsnorm_forward(out, d, rstd_mlp_.data(), y_mlp_.data(), d, params_.value(mlp_norm_).data(), n_, d,
                       cfg_.norm_eps);
  cpu::add(out, out, h_.data(), nd);
}

void Block::backward(const float* dout, float* dx, const RopeTables& rope, Workspace& ws) {
  const int d = cfg_.d_model;
  const int64_t nd = static_cast<int64_t>(n_) * d;
  // MLP branch, then the residual: dh = dout + d(mlp branch)/dh.
  cpu::rmsnorm_backward(ws.dy.data(), d, params_.grad(mlp_norm_).data(), dout, d, y_mlp_.data(), d,
                        params_.value(mlp_norm_).data(), rstd_mlp_.data(), n_, d, false);
  mlp_.backward(ws.dy.data(), ws.dh.data(), false, ws);
  cpu::add(ws.dh.data(), ws.dh.data(), dout, nd);
  // Attention branch, then the residual: dx = dh + d(attn branch)/dx.
  cpu::rmsnorm_backward(ws.dy.data(), d, params_.grad(attn_norm_).data(), ws.dh.data(), d, y_attn_.data(), d,
                        params_.value(attn_norm_).data(), rstd_attn_.data(), n_, d, false);
  attn_.backward(ws.dy.data(), dx, false, rope, ws);
  cpu::add(dx, dx, ws.dh.data(), nd);
}

}  // namespace fp4
