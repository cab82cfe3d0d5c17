#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/ops.h"

namespace fp4 {

void check_adamw_hyper(const StepHyper& h) {
  FP4_CHECK(std::isfinite(h.lr) && h.lr >= 0.0f, "AdamW: learning rate must be finite and >= 0, got ", h.lr);
  FP4_CHECK(h.beta1 >= 0.0f && h.beta1 < 1.0f, "AdamW: beta1 must be in [0, 1), got ", h.beta1);
  FP4_CHECK(h.beta2 >= 0.0f && h.beta2 < 1.0f, "AdamW: beta2 must be in [0, 1), got ", h.beta2);
  FP4_CHECK(h.eps > 0.0f, "AdamW: eps must be positive, got ", h.eps);
  FP4_CHECK(std::isfinite(h.weight_decay) && h.weight_decay >= 0.0f, "AdamW: weight_decay must be >= 0, got ",
            h.weight_decay);
}

AdamW::AdamW(const ParameterSet& params) : AdamW(params, IndexRange{0, params.numel()}) {}

AdamW::AdamW(const ParameterSet& params, IndexRange shard)
    : shard_(shard), m_(static_cast<size_t>(std::max<int64_t>(shard.size(), 0)), 0.0f), v_(m_.size(), 0.0f) {
  FP4_CHECK(shard.begin >= 0 && shard.begin <= shard.end && shard.end <= params.numel(), "AdamW: shard [",
            shard.begin, ", ", shard.end, ") is outside the ", params.numel(), " parameters");
}

cpu::AdamWArgs adamw_args(const StepHyper& h, int64_t step) {
  cpu::AdamWArgs args{};
  args.lr = h.lr;
  args.beta1 = h.beta1;
  args.beta2 = h.beta2;
  args.eps = h.eps;
  args.weight_decay = h.weight_decay;
  args.bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta1), step));
  args.bias_correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta2), step));
  return args;
}

void AdamW::set_step_count(int64_t step) {
  FP4_CHECK(step >= 0, "AdamW: negative step count ", step);
  step_ = step;
}

void AdamW::step(ParameterSet& params, const StepHyper& h) {
  FP4_CHECK(shard_.end <= params.numel(), "AdamW: state for elements up to ", shard_.end,
            ", parameters hold ", params.numel());
  check_adamw_hyper(h);
  ++step_;
  cpu::AdamWArgs args = adamw_args(h, step_);
  auto values = params.values();
  auto grads = params.grads();
  for (int i = 0; i < params.size(); ++i) {
    const auto& p = params.at(i);
    // The part of parameter i inside the shard.
    const int64_t lo = std::max(p.offset, shard_.begin);
    const int64_t hi = std::min(p.offset + p.info.numel(), shard_.end);
    if (lo >= hi) continue;
    args.weight_decay = p.info.weight_decay ? h.weight_decay : 0.0f;
    const auto s = static_cast<size_t>(lo - shard_.begin);
    cpu::adamw_update(values.data() + lo, m_.data() + s, v_.data() + s, grads.data() + lo, hi - lo, args);
  }
}

}  // namespace fp4
