#include "model/olmo2.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "nn/init.h"

namespace fp4 {

namespace {
constexpr int64_t kLogitChunkElements = int64_t{1} << 22;  // 16 MiB of FP32 logits at a time
}

Recipe parameter_layout_recipe(const Recipe& recipe) {
  Recipe layout;
  if (recipe.lora_svd.enabled) {
    layout.name = recipe.name;
    layout.linear = recipe.linear;
    layout.bf16_layers = recipe.bf16_layers;
    layout.lora_svd = recipe.lora_svd;
  }
  return layout;
}

Olmo2Model::Olmo2Model(const ModelConfig& cfg, const Recipe& recipe) : cfg_(cfg) {
  validate(cfg_);
  const int64_t d = cfg_.d_model, v = cfg_.vocab_size;
  if (recipe.out_control.enabled) {
    out_control_ = std::make_unique<OutControl>(recipe.out_control);
    quant_ctx_.out_control = out_control_.get();
  }
  if (recipe.lora_svd.enabled) {
    lora_svd_ = std::make_unique<LoraSvd>(recipe.lora_svd);
    quant_ctx_.lora_svd = lora_svd_.get();
  }
  embed_ = params_.add("embed", {v, d}, false, ParamInit::kNormal);
  for (int l = 0; l < cfg_.n_layers; ++l)
    blocks_.push_back(std::make_unique<Block>(params_, cfg_, recipe, l, &quant_ctx_));
  final_norm_ = params_.add("final_norm", {d}, false, ParamInit::kOnes);
  lm_head_ = params_.add("lm_head", {v, d}, true, ParamInit::kNormal);
  params_.allocate();
}

void Olmo2Model::init_parameters(uint64_t seed) {
  for (int i = 0; i < params_.size(); ++i) {
    auto w = params_.value(i);
    if (params_.at(i).init == ParamInit::kOnes)
      std::fill(w.begin(), w.end(), 1.0f);
    else
      init_truncated_normal(w, cfg_.init_std, seed, static_cast<uint32_t>(i));
  }
  if (lora_svd_) lora_svd_->initialize(params_, seed);  // W_res = W minus its top-r part
}

void Olmo2Model::resize(int b, int t) {
  if (b == b_ && t == t_) return;
  b_ = b;
  t_ = t;
  const int64_t n = static_cast<int64_t>(b) * t, d = cfg_.d_model;
  tokens_.resize(static_cast<size_t>(n));
  residual_.resize(static_cast<size_t>(cfg_.n_layers) + 1);
  for (auto& r : residual_) r.resize({n, d});
  xf_.resize({n, d});
  rstd_f_.resize({n});
  dxf_.resize({n, d});
  dres_[0].resize({n, d});
  dres_[1].resize({n, d});
  const int64_t rows = std::clamp<int64_t>(kLogitChunkElements / cfg_.vocab_size, 1, n);
  logits_.resize({rows, cfg_.vocab_size});
  for (auto& blk : blocks_) blk->resize(b, t);
  rope_.resize(cfg_, t);
  ws_.resize(cfg_, b, t);
}

void Olmo2Model::forward(const int32_t* tokens, int b, int t, ForwardMode mode) {
  FP4_CHECK(b > 0 && t > 0, "forward: empty batch ", b, " x ", t);
  FP4_CHECK(t <= cfg_.max_seq_len, "forward: sequence length ", t, " exceeds max_seq_len ", cfg_.max_seq_len,
            " of model ", cfg_.name);
  const int n = b * t;
  for (int i = 0; i < n; ++i)
    FP4_CHECK(tokens[i] >= 0 && tokens[i] < cfg_.vocab_size, "forward: token ", tokens[i], " at position ", i,
              " is outside the embedding table (", cfg_.vocab_size, " rows)");
  resize(b, t);
  quant_ctx_.inference = mode == ForwardMode::kInference;
  std::copy(tokens, tokens + n, tokens_.begin());
  const int d = cfg_.d_model;
  cpu::embedding_forward(residual_[0].data(), tokens_.data(), params_.value(embed_).data(), n, d);
  for (size_t l = 0; l < blocks_.size(); ++l)
    blocks_[l]->forward(residual_[l].data(), residual_[l + 1].data(), rope_);
  cpu::rmsnorm_forward(xf_.data(), d, rstd_f_.data(), residual_.back().data(), d,
                       params_.value(final_norm_).data(), n, d, cfg_.norm_eps);
}

cpu::LossSums Olmo2Model::loss(const int32_t* targets, bool backward, float grad_scale) {
  const int n = b_ * t_, d = cfg_.d_model, v = cfg_.vocab_size;
  const int rows = static_cast<int>(logits_.dim(0));
  const float* w = params_.value(lm_head_).data();
  float* dw = params_.grad(lm_head_).data();
  cpu::LossSums total;
  for (int r0 = 0; r0 < n; r0 += rows) {
    const int m = std::min(rows, n - r0);
    const float* x = xf_.data() + static_cast<int64_t>(r0) * d;
    float* logits = logits_.data();
    cpu::gemm(false, true, m, v, d, 1.0f, x, d, w, d, 0.0f, logits, v);
    const auto s = cpu::cross_entropy(backward ? logits : nullptr, logits, targets + r0, m, v,
                                      cfg_.vocab_real, cfg_.z_loss, grad_scale);
    total.loss += s.loss;
    total.ce += s.ce;
    total.tokens += s.tokens;
    if (backward) {
      // logits now hold dlogits: dx = dlogits W, dW += dlogits^T x.
      cpu::gemm(false, false, m, d, v, 1.0f, logits, v, w, d, 0.0f,
                dxf_.data() + static_cast<int64_t>(r0) * d, d);
      cpu::gemm(true, false, v, d, m, 1.0f, logits, v, x, d, 1.0f, dw, d);
    }
  }
  return total;
}

void Olmo2Model::backward() {
  const int n = b_ * t_, d = cfg_.d_model;
  float* cur = dres_[0].data();
  float* next = dres_[1].data();
  cpu::rmsnorm_backward(cur, d, params_.grad(final_norm_).data(), dxf_.data(), d, residual_.back().data(), d,
                        params_.value(final_norm_).data(), rstd_f_.data(), n, d, false);
  for (size_t l = blocks_.size(); l-- > 0;) {
    blocks_[l]->backward(cur, next, rope_, ws_);
    std::swap(cur, next);
  }
  cpu::embedding_backward(params_.grad(embed_).data(), cur, tokens_.data(), n, d);
}

void Olmo2Model::last_logits(float* out) {
  const int d = cfg_.d_model, v = cfg_.vocab_size;
  const float* w = params_.value(lm_head_).data();
  for (int bi = 0; bi < b_; ++bi) {
    const float* x = xf_.data() + (static_cast<int64_t>(bi) * t_ + t_ - 1) * d;
    float* o = out + static_cast<int64_t>(bi) * v;
    cpu::gemm(false, true, 1, v, d, 1.0f, x, d, w, d, 0.0f, o, v);
    // Padded ids are outside the model's distribution (the loss excludes them too).
    std::fill(o + cfg_.vocab_real, o + v, -std::numeric_limits<float>::infinity());
  }
}

std::string Olmo2Model::first_nonfinite_activation() const {
  auto bad = [](const Tensor& t) { return cpu::first_nonfinite(t.data(), t.numel()) >= 0; };
  if (b_ == 0) return "";
  if (bad(residual_[0])) return "embedding output";
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const auto& blk = *blocks_[l];
    if (bad(blk.attn_output())) return blk.name() + ".attn output";
    if (bad(blk.mid())) return blk.name() + " mid-block residual";
    if (bad(blk.mlp_output())) return blk.name() + ".mlp output";
    if (bad(residual_[l + 1])) return blk.name() + " output";
  }
  if (bad(xf_)) return "final_norm output";
  return "";
}

}  // namespace fp4
