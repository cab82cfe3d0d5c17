#include "nn/linear.h"

#include "core/error.h"
#include "nn/lora_svd_linear.h"
#include "ops/ops.h"

namespace fp4 {

namespace {

// The FP32 reference: two sgemms in the backward, one in the forward.
class DenseLinear final : public Linear {
 public:
  DenseLinear(ParameterSet& params, LinearSpec spec)
      : Linear(std::move(spec)),
        params_(params),
        weight_(params.add(spec_.name, {spec_.out_features, spec_.in_features}, true, ParamInit::kNormal)) {}

  void forward(const float* x, float* y, int n) override {
    saved_x_ = x;
    saved_n_ = n;
    cpu::gemm(false, true, n, spec_.out_features, spec_.in_features, 1.0f, x, spec_.in_features,
              params_.value(weight_).data(), spec_.in_features, 0.0f, y, spec_.out_features);
  }

  void backward(const float* dy, float* dx, int n, bool accumulate_dx) override {
    FP4_CHECK(saved_x_ != nullptr && saved_n_ == n, "linear ", spec_.name, ": backward over ", n,
              " rows without a matching forward");
    const int in = spec_.in_features, out = spec_.out_features;
    cpu::gemm(false, false, n, in, out, 1.0f, dy, out, params_.value(weight_).data(), in,
              accumulate_dx ? 1.0f : 0.0f, dx, in);
    cpu::gemm(true, false, out, in, n, 1.0f, dy, out, saved_x_, in, 1.0f, params_.grad(weight_).data(), in);
  }

 private:
  ParameterSet& params_;
  int weight_;
  const float* saved_x_ = nullptr;
  int saved_n_ = 0;
};

// The NVFP4 layer: QuantLinearCpu on this layer's weight; it keeps only packed backward operands.
class QuantizedLinear final : public Linear {
 public:
  QuantizedLinear(ParameterSet& params, LinearSpec spec)
      : Linear(std::move(spec)),
        params_(params),
        weight_(params.add(spec_.name, {spec_.out_features, spec_.in_features}, true, ParamInit::kNormal)),
        impl_(spec_.policy, spec_.in_features, spec_.out_features, spec_.layer_id, spec_.name) {
    if (OutControl* oc = spec_.quant_ctx->out_control)  // registers the layer for calibration
      impl_.set_out_channels(oc->add(spec_.name, spec_.in_features));
  }

  void forward(const float* x, float* y, int n) override {
    impl_.forward(x, params_.value(weight_).data(), y, n, *spec_.quant_ctx);
  }

  void backward(const float* dy, float* dx, int n, bool accumulate_dx) override {
    impl_.backward(dy, dx, params_.grad(weight_).data(), n, accumulate_dx);
  }

 private:
  ParameterSet& params_;
  int weight_;
  QuantLinearCpu impl_;
};

}  // namespace

std::unique_ptr<Linear> make_linear(ParameterSet& params, const LinearSpec& spec) {
  FP4_CHECK(spec.in_features > 0 && spec.out_features > 0, "linear ", spec.name, ": bad shape [",
            spec.out_features, ", ", spec.in_features, "]");
  if (spec.policy.quantized()) {
    FP4_CHECK(spec.quant_ctx != nullptr, "linear ", spec.name, ": recipe ", spec.recipe_name,
              " quantizes it but the model gave it no quantization context");
    if (spec.quant_ctx->lora_svd) return make_lora_svd_linear(params, spec, *spec.quant_ctx->lora_svd);
    return std::make_unique<QuantizedLinear>(params, spec);
  }
  return std::make_unique<DenseLinear>(params, spec);
}

}  // namespace fp4
