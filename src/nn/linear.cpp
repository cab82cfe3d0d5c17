#include "nn/linear.h"

#include "core/error.h"
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

std::string quantized_operands(const LinearPolicy& p) {
  static const char* kNames[kNumOperands] = {"Q1 X", "Q2 W", "Q3 dY", "Q4 W^T", "Q5 dY^T", "Q6 X^T"};
  std::string s;
  for (int i = 0; i < kNumOperands; ++i)
    if (p.q[static_cast<size_t>(i)].quantized()) s += (s.empty() ? "" : ", ") + std::string(kNames[i]);
  return s;
}

}  // namespace

std::unique_ptr<Linear> make_linear(ParameterSet& params, const LinearSpec& spec) {
  FP4_CHECK(spec.in_features > 0 && spec.out_features > 0, "linear ", spec.name, ": bad shape [",
            spec.out_features, ", ", spec.in_features, "]");
  if (spec.policy.quantized())
    FP4_THROW("linear ", spec.name, ": recipe ", spec.recipe_name, " needs the NVFP4 linear path (quantized ",
              quantized_operands(spec.policy), "), which this build does not provide");
  return std::make_unique<DenseLinear>(params, spec);
}

}  // namespace fp4
