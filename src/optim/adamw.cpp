#include "optim/adamw.h"

#include <cmath>

#include "core/error.h"
#include "ops/ops.h"

namespace fp4 {

AdamW::AdamW(const ParameterSet& params)
    : m_(static_cast<size_t>(params.numel()), 0.0f), v_(static_cast<size_t>(params.numel()), 0.0f) {}

void AdamW::set_step_count(int64_t step) {
  FP4_CHECK(step >= 0, "AdamW: negative step count ", step);
  step_ = step;
}

void AdamW::step(ParameterSet& params, const StepHyper& h) {
  FP4_CHECK(static_cast<int64_t>(m_.size()) == params.numel(), "AdamW: state sized for ", m_.size(),
            " elements, parameters hold ", params.numel());
  FP4_CHECK(std::isfinite(h.lr) && h.lr >= 0.0f, "AdamW: learning rate must be finite and >= 0, got ", h.lr);
  FP4_CHECK(h.beta1 >= 0.0f && h.beta1 < 1.0f, "AdamW: beta1 must be in [0, 1), got ", h.beta1);
  FP4_CHECK(h.beta2 >= 0.0f && h.beta2 < 1.0f, "AdamW: beta2 must be in [0, 1), got ", h.beta2);
  FP4_CHECK(h.eps > 0.0f, "AdamW: eps must be positive, got ", h.eps);
  FP4_CHECK(std::isfinite(h.weight_decay) && h.weight_decay >= 0.0f, "AdamW: weight_decay must be >= 0, got ",
            h.weight_decay);
  ++step_;
  cpu::AdamWArgs args{};
  args.lr = h.lr;
  args.beta1 = h.beta1;
  args.beta2 = h.beta2;
  args.eps = h.eps;
  args.bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta1), step_));
  args.bias_correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta2), step_));
  for (int i = 0; i < params.size(); ++i) {
    const auto& p = params.at(i);
    args.weight_decay = p.info.weight_decay ? h.weight_decay : 0.0f;
    const auto off = static_cast<size_t>(p.offset);
    cpu::adamw_update(params.value(i).data(), m_.data() + off, v_.data() + off, params.grad(i).data(),
                      p.info.numel(), args);
  }
}

}  // namespace fp4
