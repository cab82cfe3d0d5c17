#include "nn/lora_svd_linear.h"

#include <algorithm>

#include "core/error.h"
#include "core/parallel_for.h"
#include "nn/lora_svd.h"
#include "nn/quant_linear.h"
#include "ops/ops.h"

namespace fp4 {
namespace {

constexpr uint32_t kSketchPurpose = 0x4C;  // stream purpose tag of the realignment's Gaussian sketch

class LoraSvdLinear final : public Linear {
 public:
  LoraSvdLinear(ParameterSet& params, LinearSpec spec, LoraSvd& registry)
      : Linear(std::move(spec)),
        params_(params),
        rank_(registry.config().rank),
        beta_(static_cast<float>(registry.config().beta)),
        impl_(spec_.policy, spec_.in_features, spec_.out_features, spec_.layer_id, spec_.name) {
    const int in = spec_.in_features, out = spec_.out_features;
    LoraSvd::Layer layer{spec_.name, in, out, spec_.layer_id, -1, -1, -1};
    w_res_ = layer.w_res = params.add(spec_.name, {out, in}, true, ParamInit::kNormal);
    l1_ = layer.l1 = params.add(lora_l1_name(spec_.name), {rank_, in}, true, ParamInit::kNormal);
    l2_ = layer.l2 = params.add(lora_l2_name(spec_.name), {out, rank_}, true, ParamInit::kNormal);
    registry.add(layer);
    if (OutControl* oc = spec_.quant_ctx->out_control) impl_.set_out_channels(oc->add(spec_.name, in));
  }

  void forward(const float* x, float* y, int n) override {
    const int in = spec_.in_features, out = spec_.out_features;
    impl_.forward(x, params_.value(w_res_).data(), y, n, *spec_.quant_ctx);
    std::vector<float> xl1(static_cast<size_t>(n) * rank_);
    cpu::gemm(false, true, n, rank_, in, 1.0f, x, in, params_.value(l1_).data(), in, 0.0f, xl1.data(), rank_);
    cpu::gemm(false, true, n, out, rank_, beta_, xl1.data(), rank_, params_.value(l2_).data(), rank_, 1.0f, y,
              out);
  }

  void backward(const float* dy, float* dx, int n, bool accumulate_dx) override {
    const int in = spec_.in_features, out = spec_.out_features;
    const float* l1 = params_.value(l1_).data();
    const float* l2 = params_.value(l2_).data();
    // The recipe's dX through W_res and its full wgrad dW of this micro-batch.
    std::vector<float> dw(static_cast<size_t>(out) * in, 0.0f);
    impl_.backward(dy, dx, dw.data(), n, accumulate_dx);
    // dX += beta (dY L2) L1.
    std::vector<float> dyl2(static_cast<size_t>(n) * rank_);
    cpu::gemm(false, false, n, rank_, out, 1.0f, dy, out, l2, rank_, 0.0f, dyl2.data(), rank_);
    cpu::gemm(false, false, n, in, rank_, beta_, dyl2.data(), rank_, l1, in, 1.0f, dx, in);
    // The part of dW in col(L2) drives the factors, the rest W_res. Projection is linear, so projecting
    // each micro-batch's dW and summing equals projecting the step's accumulated gradient.
    const std::vector<float> u = cholesky_qr2(l2, out, rank_);
    std::vector<float> p(dw.size());
    project_onto_columns(u.data(), out, rank_, dw.data(), in, p.data());
    cpu::gemm(false, true, out, rank_, in, beta_, p.data(), in, l1, in, 1.0f, params_.grad(l2_).data(),
              rank_);
    cpu::gemm(true, false, rank_, in, out, beta_, l2, rank_, p.data(), in, 1.0f, params_.grad(l1_).data(),
              in);
    float* gw = params_.grad(w_res_).data();
    for (size_t i = 0; i < dw.size(); ++i) gw[i] += dw[i] - p[i];
  }

 private:
  ParameterSet& params_;
  int rank_;
  float beta_;
  int w_res_ = -1, l1_ = -1, l2_ = -1;
  QuantLinearCpu impl_;
};

}  // namespace

void LoraSvd::add(const Layer& layer) {
  FP4_CHECK(cfg_.rank >= 1 && cfg_.rank < std::min(layer.in, layer.out), "lora_svd.rank ", cfg_.rank,
            " does not fit linear ", layer.name, " [", layer.out, " x ", layer.in,
            "]: it must be at least 1 and below min(in, out) = ", std::min(layer.in, layer.out));
  for (const Layer& l : layers_)
    FP4_CHECK(l.name != layer.name, "lora_svd: linear ", layer.name, " added twice");
  layers_.push_back(layer);
}

void LoraSvd::realign(ParameterSet& params, uint64_t seed, int64_t index) const {
  // The layers are independent and each one's result depends only on its own tensors and sketch stream, so
  // every host thread may take one: the same bits as one loop, a fraction of the wait (olmo2-370m's take
  // minutes on one thread, docs/LORA_SVD.md).
  parallel_for(layers_.size(), host_threads(), [&](size_t k) {
    const Layer& l = layers_[k];
    realign_layer(l, params.value(l.w_res).data(), params.value(l.l1).data(), params.value(l.l2).data(), seed,
                  index);
  });
}

void LoraSvd::realign_layer(const Layer& l, float* w_res, float* l1, float* l2, uint64_t seed,
                            int64_t index) const {
  const RngStream sketch{seed, make_stream(l.layer_id, static_cast<uint32_t>(index), kSketchPurpose)};
  realign_low_rank(w_res, l1, l2, l.out, l.in, cfg_.rank, cfg_.beta, sketch);
}

void LoraSvd::initialize(ParameterSet& params, uint64_t seed) const {
  for (const Layer& l : layers_) {
    std::ranges::fill(params.value(l.l1), 0.0f);
    std::ranges::fill(params.value(l.l2), 0.0f);
  }
  realign(params, seed, 0);
}

std::vector<IndexRange> LoraSvd::factor_ranges(const ParameterSet& params) const {
  std::vector<IndexRange> out;
  for (const Layer& l : layers_)
    for (int i : {l.l1, l.l2})
      out.push_back({params.at(i).offset, params.at(i).offset + params.at(i).info.numel()});
  return out;
}

std::unique_ptr<Linear> make_lora_svd_linear(ParameterSet& params, const LinearSpec& spec,
                                             LoraSvd& registry) {
  FP4_CHECK(spec.quant_ctx != nullptr, "linear ", spec.name,
            ": lora_svd needs the model's quantization context");
  return std::make_unique<LoraSvdLinear>(params, spec, registry);
}

}  // namespace fp4
