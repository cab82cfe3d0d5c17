#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "core/error.h"
#include "model/cuda/cuda_olmo2.h"
#include "nn/cuda/quant_linear_cuda.h"
#include "nn/lora_svd_linear.h"
#include "ops/cuda/attention/attention_cuda.h"
#include "ops/cuda/attention/causal_sdpa_cuda.h"
#include "ops/cuda/cross_entropy_cuda.h"
#include "ops/cuda/elementwise_cuda.h"
#include "ops/cuda/embedding_cuda.h"
#include "ops/cuda/rmsnorm_cuda.h"
#include "ops/cuda/rope_cuda.h"
#include "ops/cuda/swiglu_cuda.h"
#include "ops/ops.h"
#include "tensor/tensor.h"

namespace fp4::cuda {

namespace {

void check_shape(const DeviceParams& ps, int i, const std::vector<int64_t>& shape) {
  const auto& info = ps.at(i).info;
  FP4_CHECK(info.shape == shape, "CUDA model: parameter ", info.name, " has shape ", shape_string(info.shape),
            ", expected ", shape_string(shape));
}

// Host copy of a device buffer, for the (error-path) non-finite scan.
template <typename T>
std::vector<T> fetch(const T* p, size_t count, cudaStream_t stream) {
  std::vector<T> v(count);
  copy_to_host(v.data(), p, count * sizeof(T), stream);
  return v;
}

bool has_nonfinite(const bf16* p, size_t count, cudaStream_t stream) {
  const auto v = fetch(reinterpret_cast<const uint16_t*>(p), count, stream);
  for (uint16_t bits : v)
    if ((bits & 0x7f80u) == 0x7f80u) return true;  // exponent all ones: Inf or NaN
  return false;
}

bool has_nonfinite(const float* p, size_t count, cudaStream_t stream) {
  for (float x : fetch(p, count, stream))
    if (!std::isfinite(x)) return true;
  return false;
}

}  // namespace

bool CudaOlmo2::fused_attention_supports(int head_dim) {
  return head_dim == 64 || head_dim == 128;
}

CudaOlmo2::CudaOlmo2(const ModelConfig& cfg, const Recipe& recipe, DeviceParams& params, GemmRunner& gemm,
                     cudaStream_t stream)
    : cfg_(cfg), params_(params), gemm_(gemm), stream_(stream) {
  validate(cfg_);
  const int64_t d = cfg_.d_model, ff = cfg_.d_ff, v = cfg_.vocab_size, hd = cfg_.head_dim();
  const std::string where = "CUDA engine, model '" + cfg_.name + "': ";
  FP4_CHECK(d <= kNormMaxWidth, where, "d_model ", d, " exceeds the norm kernels' limit ", kNormMaxWidth);
  FP4_CHECK(ff % 2 == 0, where, "d_ff ", ff, " must be even");
  FP4_CHECK(fused_attention_supports(static_cast<int>(hd)) || hd <= kSdpaMaxHeadDim, where, "head_dim ", hd,
            " is above the attention fallback's limit ", kSdpaMaxHeadDim);
  embed_ = params_.require("embed");
  final_norm_ = params_.require("final_norm");
  lm_head_ = params_.require("lm_head");
  if (recipe.out_control.enabled) {  // before the linears, which register with it
    out_control_ = std::make_unique<OutControl>(recipe.out_control);
    quant_ctx_.out_control = out_control_.get();
  }
  if (recipe.lora_svd.enabled)  // one wgrad buffer for the largest linear: w_gate_up or wqkv
    lora_svd_ = std::make_unique<LoraSvdCudaShared>(static_cast<size_t>(std::max(3 * d * d, 2 * ff * d)));
  check_shape(params_, embed_, {v, d});
  check_shape(params_, final_norm_, {d});
  check_shape(params_, lm_head_, {v, d});
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const std::string pre = "blocks." + std::to_string(l) + ".";
    auto norm = [&](const std::string& name) {
      const int i = params_.require(pre + name);
      check_shape(params_, i, {d});
      return i;
    };
    auto linear = [&](const std::string& name, int64_t in, int64_t out, LinearKind kind) {
      const int i = params_.require(pre + name);
      check_shape(params_, i, {out, in});
      // The CPU model's layer ids, so quantized layers draw the same random streams.
      const LinearSpec spec{pre + name,
                            static_cast<int>(in),
                            static_cast<int>(out),
                            recipe.policy_for(l, cfg_.n_layers, kind),
                            recipe.name,
                            linear_id(l, kind),
                            &quant_ctx_};
      if (lora_svd_ && spec.policy.quantized()) {  // W_res, then its factors, as the CPU model registers them
        const int r = recipe.lora_svd.rank;
        const int l1 = params_.require(lora_l1_name(spec.name)),
                  l2 = params_.require(lora_l2_name(spec.name));
        check_shape(params_, l1, {r, in});
        check_shape(params_, l2, {out, r});
        const LoraSvdFactors f{weight(l1), weight(l2), r, static_cast<float>(recipe.lora_svd.beta)};
        return make_lora_svd_linear_cuda(spec, weight(i), f, *lora_svd_, gemm_, stream_);
      }
      return make_linear_cuda(spec, weight(i), gemm_, stream_);
    };
    BlockParams bp;
    bp.qkv = linear("attn.wqkv", d, 3 * d, LinearKind::kQkv);
    bp.q_norm = norm("attn.q_norm");
    bp.k_norm = norm("attn.k_norm");
    bp.wo = linear("attn.wo", d, d, LinearKind::kAttnOut);
    bp.attn_norm = norm("attn_norm");
    bp.gate_up = linear("mlp.w_gate_up", d, 2 * ff, LinearKind::kGateUp);
    bp.down = linear("mlp.w_down", ff, d, LinearKind::kDown);
    bp.mlp_norm = norm("mlp_norm");
    blocks_.push_back(std::move(bp));
    if (recipe.attention.q_attn) q_attn_.push_back(std::make_unique<QAttentionCuda>(l));
  }
  if (recipe.attention.q_attn) {
    FP4_CHECK(hd % 16 == 0, where, "attention.q_attn needs head_dim (", hd,
              ") to be a multiple of 16: an NVFP4 1x16 block must not straddle two heads");
    q_attn_ws_ = std::make_unique<QAttnWorkspace>();
  }
  // A linear input is saved per layer only when that linear's backward reads it (BF16 layers); the
  // quantized layers keep their own packed X^T, so their inputs share one transient buffer.
  std::vector<SavedInputs> saved;
  for (const auto& bp : blocks_)
    saved.push_back(SavedInputs{bp.qkv->backward_reads_input(), bp.gate_up->backward_reads_input(),
                                bp.down->backward_reads_input()});
  arena_ = std::make_unique<ActivationArena>(cfg_, std::move(saved));
  // The CPU model's tables (computed in double), for every position up to max_seq_len.
  const size_t table = static_cast<size_t>(cfg_.max_seq_len) * static_cast<size_t>(hd / 2);
  std::vector<float> cos_t(table), sin_t(table);
  cpu::rope_tables(cos_t.data(), sin_t.data(), cfg_.max_seq_len, static_cast<int>(hd), cfg_.rope_theta);
  rope_cos_ = DeviceBuffer<float>(table);
  rope_sin_ = DeviceBuffer<float>(table);
  copy_to_device(rope_cos_.data(), cos_t.data(), table * sizeof(float), stream_);
  copy_to_device(rope_sin_.data(), sin_t.data(), table * sizeof(float), stream_);
}

void CudaOlmo2::collect_out_control_sums() {
  if (!out_control_) return;
  for (const auto& bp : blocks_)
    for (LinearCuda* lin : bp.linears())
      if (auto* oc = dynamic_cast<OutControlLinear*>(lin)) oc->collect_out_control_sums();
}

DeviceWeight CudaOlmo2::weight(int i) {
  return DeviceWeight{params_.value(i), params_.value_bf16(i), params_.grad(i)};
}

size_t CudaOlmo2::attention_workspace_bytes(int b, int t) const {
  const int h = cfg_.n_heads, hd = cfg_.head_dim();
  return fused_attention_supports(hd) ? cuda::attention_backward_workspace_bytes(b, t, h, hd)
                                      : causal_sdpa_backward_workspace_bytes(b, t, h, hd);
}

size_t CudaOlmo2::linear_workspace_bytes(int n) const {
  size_t bytes = 0;
  for (const auto& bp : blocks_)
    for (const LinearCuda* lin : bp.linears()) bytes = std::max(bytes, lin->workspace_bytes(n));
  return bytes;
}

void CudaOlmo2::run_attention_forward(int l, const LayerActivations& la) {
  const int d = cfg_.d_model, h = cfg_.n_heads, hd = cfg_.head_dim();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const bf16* q = la.qkv_rot;
  if (!q_attn_.empty())  // NVFP4 score-side products (docs/Q_ATTN.md); the fused form saves the LSE
    q_attn_[static_cast<size_t>(l)]->forward(q, q + d, q + 2 * d, 3 * d, la.att, d, la.lse,
                                             {acts_->b, acts_->t, h, hd}, quant_ctx_, *q_attn_ws_, gemm_,
                                             stream_);
  else if (fused_attention_supports(hd))
    cuda::attention_forward(q, q + d, q + 2 * d, 3 * d, la.att, d, la.lse, acts_->b, acts_->t, h, hd, scale,
                            stream_);
  else
    causal_sdpa_forward(q, q + d, q + 2 * d, 3 * d, la.att, d, la.lse, acts_->b, acts_->t, h, hd, scale,
                        stream_);
}

void CudaOlmo2::run_attention_backward(int l, const LayerActivations& la) {
  const int d = cfg_.d_model, h = cfg_.n_heads, hd = cfg_.head_dim();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const bf16* q = la.qkv_rot;
  bf16* dq = acts_->dqkv;
  if (!q_attn_.empty())
    q_attn_[static_cast<size_t>(l)]->backward(q + 2 * d, 3 * d, la.att, la.lse, acts_->datt, d, dq, dq + d,
                                              dq + 2 * d, 3 * d, {acts_->b, acts_->t, h, hd}, *q_attn_ws_,
                                              gemm_, stream_);
  else if (fused_attention_supports(hd))
    cuda::attention_backward(q, q + d, q + 2 * d, 3 * d, la.att, acts_->datt, d, la.lse, dq, dq + d,
                             dq + 2 * d, 3 * d, acts_->b, acts_->t, h, hd, scale, acts_->attn_workspace,
                             stream_);
  else
    causal_sdpa_backward(q, q + d, q + 2 * d, 3 * d, la.att, acts_->datt, d, la.lse, dq, dq + d, dq + 2 * d,
                         3 * d, acts_->b, acts_->t, h, hd, scale, acts_->attn_workspace, stream_);
}

void CudaOlmo2::forward(const DeviceBatch& batch, ForwardMode mode) {
  FP4_CHECK(batch.t <= cfg_.max_seq_len, "forward: sequence length ", batch.t, " exceeds max_seq_len ",
            cfg_.max_seq_len, " of model ", cfg_.name);
  const ArenaNeeds needs{attention_workspace_bytes(batch.b, batch.t),
                         linear_workspace_bytes(batch.b * batch.t)};
  acts_ = &arena_->ensure(batch.b, batch.t, needs);
  // The arena may have moved: every linear gets the current workspace (used only inside its calls).
  for (auto& bp : blocks_)
    for (LinearCuda* lin : bp.linears())
      lin->lend_workspace(acts_->linear_workspace, acts_->linear_workspace_bytes);
  quant_ctx_.inference = mode == ForwardMode::kInference;
  const int n = acts_->n, d = cfg_.d_model;
  embedding_forward(batch.tokens, params_.value(embed_), acts_->res, acts_->layers[0].x, n, d, stream_);
  for (int l = 0; l < cfg_.n_layers; ++l) block_forward(l);
  rmsnorm_forward(acts_->res, params_.value(final_norm_), nullptr, nullptr, acts_->xf, acts_->rstd_f, n, d,
                  cfg_.norm_eps, stream_);
}

void CudaOlmo2::block_forward(int l) {
  const int n = acts_->n, t = acts_->t, d = cfg_.d_model, ff = cfg_.d_ff;
  const LayerActivations& la = acts_->layers[static_cast<size_t>(l)];
  BlockParams& bp = blocks_[static_cast<size_t>(l)];
  const float eps = cfg_.norm_eps;
  bp.qkv->forward(la.x, la.qkv, n);
  qk_norm_rope_forward(la.qkv, la.qkv_rot, params_.value(bp.q_norm), params_.value(bp.k_norm),
                       rope_cos_.data(), rope_sin_.data(), la.rstd_q, la.rstd_k, n, t, d, cfg_.head_dim(),
                       eps, stream_);
  run_attention_forward(l, la);
  bp.wo->forward(la.att, la.y_attn, n);
  // h = x + RMSNorm(y_attn): FP32 into mid, BF16 copy for the MLP's GEMM.
  rmsnorm_forward(la.y_attn, params_.value(bp.attn_norm), acts_->res, acts_->mid, la.h, la.rstd_attn, n, d,
                  eps, stream_);
  bp.gate_up->forward(la.h, la.gu, n);
  swiglu_forward(la.gu, la.act, n, ff, stream_);
  bp.down->forward(la.act, la.y_mlp, n);
  // out = h + RMSNorm(y_mlp): FP32 into res (in place), BF16 copy as the next block's input.
  bf16* next_x = l + 1 < cfg_.n_layers ? acts_->layers[static_cast<size_t>(l) + 1].x : nullptr;
  rmsnorm_forward(la.y_mlp, params_.value(bp.mlp_norm), acts_->mid, acts_->res, next_x, la.rstd_mlp, n, d,
                  eps, stream_);
}

void CudaOlmo2::loss(const DeviceBatch& batch, bool backward, float grad_scale, double* sums) {
  FP4_CHECK(acts_ != nullptr && batch.b == acts_->b && batch.t == acts_->t, "loss: no matching forward");
  FP4_CHECK(batch.targets != nullptr, "loss: the batch's targets were not uploaded");
  const int n = acts_->n, d = cfg_.d_model, v = cfg_.vocab_size;
  const bf16* w = params_.value_bf16(lm_head_);
  gemm_.gemm(false, true, n, v, d, 1.0f, acts_->xf, d, w, d, 0.0f, acts_->logits, v, stream_);
  cross_entropy(acts_->logits, batch.targets, acts_->row_loss, acts_->row_ce, n, v, cfg_.vocab_real,
                cfg_.z_loss, grad_scale, backward, stream_);
  accumulate_loss_sums(acts_->row_loss, acts_->row_ce, n, sums, stream_);
  if (!backward) return;
  // The logits now hold their gradient: dxf = dlogits W (FP32), dW += dlogits^T xf.
  gemm_.gemm(false, false, n, d, v, 1.0f, acts_->logits, v, w, d, 0.0f, acts_->dres[1], d, stream_);
  gemm_.gemm(true, false, v, d, n, 1.0f, acts_->logits, v, acts_->xf, d, 1.0f, params_.grad(lm_head_), d,
             stream_);
}

void CudaOlmo2::backward(const DeviceBatch& batch) {
  FP4_CHECK(acts_ != nullptr && batch.b == acts_->b && batch.t == acts_->t, "backward: no matching forward");
  FP4_CHECK(batch.group_ids != nullptr, "backward: the batch's token groups were not uploaded");
  const int n = acts_->n, d = cfg_.d_model;
  float* cur = acts_->dres[0];
  float* next = acts_->dres[1];
  rmsnorm_backward(acts_->dres[1], acts_->res, params_.value(final_norm_), acts_->rstd_f, cur,
                   params_.grad(final_norm_), acts_->norm_scratch, n, d, stream_);
  if (on_gradients_queued) on_gradients_queued(-1);
  for (int l = cfg_.n_layers - 1; l >= 0; --l) {
    block_backward(l, cur, next);
    std::swap(cur, next);
    if (on_gradients_queued) on_gradients_queued(l);
  }
  embedding_backward(cur, batch.group_ids, batch.group_offsets, batch.group_positions, batch.groups,
                     params_.grad(embed_), d, stream_);
  if (on_gradients_queued) on_gradients_queued(cfg_.n_layers);
}

void CudaOlmo2::block_backward(int l, const float* dout, float* dx) {
  const int n = acts_->n, t = acts_->t, d = cfg_.d_model, ff = cfg_.d_ff;
  const LayerActivations& la = acts_->layers[static_cast<size_t>(l)];
  BlockParams& bp = blocks_[static_cast<size_t>(l)];
  const Activations& a = *acts_;
  // MLP branch; the residual's gradient is added by the gate_up dX GEMM: dmid = dgu W + dout.
  rmsnorm_backward(dout, la.y_mlp, params_.value(bp.mlp_norm), la.rstd_mlp, a.dy, params_.grad(bp.mlp_norm),
                   a.norm_scratch, n, d, stream_);
  bp.down->backward(a.dy, LinearGradOut{a.dact, nullptr, nullptr}, n);
  swiglu_backward(a.dact, la.gu, a.dgu, n, ff, stream_);
  bp.gate_up->backward(a.dgu, LinearGradOut{nullptr, a.dmid, dout}, n);
  // Attention branch; dx = dqkv W + dmid.
  rmsnorm_backward(a.dmid, la.y_attn, params_.value(bp.attn_norm), la.rstd_attn, a.dy,
                   params_.grad(bp.attn_norm), a.norm_scratch, n, d, stream_);
  bp.wo->backward(a.dy, LinearGradOut{a.datt, nullptr, nullptr}, n);
  run_attention_backward(l, la);
  qk_norm_rope_backward(a.dqkv, la.qkv, params_.value(bp.q_norm), params_.value(bp.k_norm), rope_cos_.data(),
                        rope_sin_.data(), la.rstd_q, la.rstd_k, params_.grad(bp.q_norm),
                        params_.grad(bp.k_norm), a.norm_scratch, n, t, d, cfg_.head_dim(), stream_);
  bp.qkv->backward(a.dqkv, LinearGradOut{nullptr, dx, a.dmid}, n);
}

void CudaOlmo2::last_logits(std::span<float> out) {
  FP4_CHECK(acts_ != nullptr, "last_logits: no forward");
  const int b = acts_->b, d = cfg_.d_model, v = cfg_.vocab_size;
  FP4_CHECK(out.size() == static_cast<size_t>(b) * static_cast<size_t>(v), "last_logits: output holds ",
            out.size(), " floats, need ", static_cast<size_t>(b) * v);
  gather_last_positions(acts_->xf, acts_->last_x, b, acts_->t, d, stream_);
  gemm_.gemm(false, true, b, v, d, 1.0f, acts_->last_x, d, params_.value_bf16(lm_head_), d, 0.0f,
             acts_->last_logits, v, stream_);
  mask_padded_logits(acts_->last_logits, b, v, cfg_.vocab_real, stream_);
  copy_to_host(out.data(), acts_->last_logits, out.size_bytes(), stream_);
}

std::string CudaOlmo2::first_nonfinite_activation() const {
  if (acts_ == nullptr) return "";
  const size_t n = static_cast<size_t>(acts_->n), d = cfg_.d_model, ff = cfg_.d_ff, nd = n * d;
  // Block l's input x and mid-block residual h: their saved BF16 copies, or, where a quantized linear
  // made them transient, the saved output of that linear (wqkv, w_gate_up), non-finite whenever its
  // input is (the engine asks only after finding every weight finite); the name then says so.
  auto judged = [](size_t l, const char* linear) {
    return " (not kept: judged by blocks." + std::to_string(l) + "." + linear + "'s output)";
  };
  auto input_bad = [&](size_t l, std::string& note) {
    const auto& la = acts_->layers[l];
    if (la.saved.x) return has_nonfinite(la.x, nd, stream_);
    note = judged(l, "attn.wqkv");
    return has_nonfinite(la.qkv, 3 * nd, stream_);
  };
  std::string note;
  if (input_bad(0, note)) return "embedding output" + note;
  for (size_t l = 0; l < acts_->layers.size(); ++l) {
    const auto& la = acts_->layers[l];
    const std::string name = "blocks." + std::to_string(l);
    if (has_nonfinite(la.y_attn, nd, stream_)) return name + ".attn output";
    const bool bad_mid =
        la.saved.h ? has_nonfinite(la.h, nd, stream_) : has_nonfinite(la.gu, n * 2 * ff, stream_);
    if (bad_mid) return name + " mid-block residual" + (la.saved.h ? "" : judged(l, "mlp.w_gate_up"));
    if (has_nonfinite(la.y_mlp, nd, stream_)) return name + ".mlp output";
    note.clear();
    const bool bad_out =
        l + 1 < acts_->layers.size() ? input_bad(l + 1, note) : has_nonfinite(acts_->res, nd, stream_);
    if (bad_out) return name + " output" + note;
  }
  if (has_nonfinite(acts_->xf, nd, stream_)) return "final_norm output";
  return "";
}

CudaOlmo2::MemoryReport CudaOlmo2::memory_report() const {
  MemoryReport r;
  r.arena_bytes = arena_->capacity_bytes();
  if (acts_ != nullptr) {
    r.saved_input_bytes = acts_->saved_input_bytes;
    r.linear_workspace_bytes = acts_->linear_workspace_bytes;
  }
  for (const auto& bp : blocks_)
    for (const LinearCuda* lin : bp.linears()) r.linear_kept_bytes += lin->kept_bytes();
  for (const auto& qa : q_attn_) r.q_attn_bytes += qa->kept_bytes();
  if (q_attn_ws_) r.q_attn_bytes += q_attn_ws_->bytes();
  if (lora_svd_) r.lora_svd_bytes = lora_svd_->bytes();
  return r;
}

std::string CudaOlmo2::memory_summary() const {
  const MemoryReport r = memory_report();
  auto gib = [](size_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.3f GiB", static_cast<double>(bytes) / (1 << 30));
    return std::string(buf);
  };
  return "activation arena " + gib(r.arena_bytes) + " (saved linear inputs " + gib(r.saved_input_bytes) +
         ", quantized-linear workspace " + gib(r.linear_workspace_bytes) +
         " over the logits), packed operands kept by quantized linears " + gib(r.linear_kept_bytes) +
         (q_attn_.empty() ? std::string() : ", Q-Attn " + gib(r.q_attn_bytes)) +
         (lora_svd_ ? ", LoRA-SVD " + gib(r.lora_svd_bytes) : std::string());
}

}  // namespace fp4::cuda
