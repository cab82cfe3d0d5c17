#include "nn/attention.h"

#include "core/error.h"
#include "ops/ops.h"

namespace fp4 {

Attention::Attention(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg,
                     const Recipe& recipe, int layer, const QuantContext* quant_ctx)
    : params_(params), cfg_(cfg), quant_ctx_(quant_ctx) {
  const int d = cfg.d_model;
  qkv_ = make_linear(params,
                     {prefix + ".wqkv", d, 3 * d, recipe.policy_for(layer, cfg.n_layers, LinearKind::kQkv),
                      recipe.name, linear_id(layer, LinearKind::kQkv), quant_ctx});
  q_norm_ = params.add(prefix + ".q_norm", {d}, false, ParamInit::kOnes);
  k_norm_ = params.add(prefix + ".k_norm", {d}, false, ParamInit::kOnes);
  out_ =
      make_linear(params, {prefix + ".wo", d, d, recipe.policy_for(layer, cfg.n_layers, LinearKind::kAttnOut),
                           recipe.name, linear_id(layer, LinearKind::kAttnOut), quant_ctx});
  if (recipe.attention.q_attn) {
    FP4_CHECK(quant_ctx, prefix, ": recipe ", recipe.name, " sets attention.q_attn, which needs the model's ",
              "quantization context");
    FP4_CHECK(cfg.head_dim() % 16 == 0, prefix, ": attention.q_attn needs head_dim (", cfg.head_dim(),
              ") to be a multiple of 16");
    q_attn_ = std::make_unique<QAttentionCpu>(layer);
  }
}

void Attention::resize(int b, int t) {
  b_ = b;
  t_ = t;
  const int64_t n = static_cast<int64_t>(b) * t, d = cfg_.d_model;
  qkv_out_.resize({n, 3 * d});
  rstd_q_.resize({n});
  rstd_k_.resize({n});
  q_.resize({n, d});
  k_.resize({n, d});
  probs_.resize({b, cfg_.n_heads, t, t});
  att_.resize({n, d});
}

void Attention::forward(const float* x, float* y, const RopeTables& rope) {
  const int n = b_ * t_, d = cfg_.d_model, h = cfg_.n_heads, hd = cfg_.head_dim();
  float* qkv = qkv_out_.data();
  qkv_->forward(x, qkv, n);
  cpu::rmsnorm_forward(q_.data(), d, rstd_q_.data(), qkv, 3 * d, params_.value(q_norm_).data(), n, d,
                       cfg_.norm_eps);
  cpu::rmsnorm_forward(k_.data(), d, rstd_k_.data(), qkv + d, 3 * d, params_.value(k_norm_).data(), n, d,
                       cfg_.norm_eps);
  cpu::rope_forward(q_.data(), d, rope.cos.data(), rope.sin.data(), b_, t_, h, hd);
  cpu::rope_forward(k_.data(), d, rope.cos.data(), rope.sin.data(), b_, t_, h, hd);
  if (q_attn_)
    q_attn_->forward(att_.data(), d, probs_.data(), q_.data(), k_.data(), qkv + 2 * d, 3 * d, {b_, t_, h, hd},
                     *quant_ctx_);
  else
    cpu::attention_forward(att_.data(), d, probs_.data(), q_.data(), d, k_.data(), d, qkv + 2 * d, 3 * d, b_,
                           t_, h, hd);
  out_->forward(att_.data(), y, n);
}

void Attention::backward(const float* dy, float* dx, bool accumulate_dx, const RopeTables& rope,
                         Workspace& ws) {
  const int n = b_ * t_, d = cfg_.d_model, h = cfg_.n_heads, hd = cfg_.head_dim();
  const float* qkv = qkv_out_.data();
  float* dqkv = ws.dqkv.data();
  out_->backward(dy, ws.datt.data(), n, false);
  if (q_attn_)
    q_attn_->backward(ws.dq.data(), ws.dk.data(), dqkv + 2 * d, 3 * d, ws.datt.data(), d, probs_.data(),
                      qkv + 2 * d, 3 * d, {b_, t_, h, hd});
  else
    cpu::attention_backward(ws.dq.data(), d, ws.dk.data(), d, dqkv + 2 * d, 3 * d, ws.dprobs.data(),
                            ws.datt.data(), d, probs_.data(), q_.data(), d, k_.data(), d, qkv + 2 * d, 3 * d,
                            b_, t_, h, hd);
  cpu::rope_backward(ws.dq.data(), d, rope.cos.data(), rope.sin.data(), b_, t_, h, hd);
  cpu::rope_backward(ws.dk.data(), d, rope.cos.data(), rope.sin.data(), b_, t_, h, hd);
  cpu::rmsnorm_backward(dqkv, 3 * d, params_.grad(q_norm_).data(), ws.dq.data(), d, qkv, 3 * d,
                        params_.value(q_norm_).data(), rstd_q_.data(), n, d, false);
  cpu::rmsnorm_backward(dqkv + d, 3 * d, params_.grad(k_norm_).data(), ws.dk.data(), d, qkv + d, 3 * d,
                        params_.value(k_norm_).data(), rstd_k_.data(), n, d, false);
  qkv_->backward(dqkv, dx, n, accumulate_dx);
}

}  // namespace fp4
