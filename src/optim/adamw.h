// AdamW over a ParameterSet: FP32 moments, bias correction, decoupled weight decay applied only to
// parameters flagged for it (matrices except the embedding; never norms). PyTorch semantics.
// The state may cover one range of the flat parameter buffer only: a ZeRO-1 rank keeps and updates
// the moments of its shard, and the moments of element i are at i - shard().begin.
#pragma once

#include <cstdint>
#include <span>

#include "core/communicator.h"
#include "core/index_range.h"
#include "core/step_types.h"
#include "nn/parameters.h"
#include "ops/ops.h"

namespace fp4 {

// Throws fp4::Error unless the hyper-parameters are usable: finite lr >= 0, betas in [0, 1), eps > 0,
// finite weight_decay >= 0. Every AdamW (CPU or device) checks them the same way.
void check_adamw_hyper(const StepHyper& h);

// The update's arguments for step `step` (1-based): lr, betas, eps, bias corrections from h, weight decay
// h.weight_decay (callers zero it for parameters not flagged for decay).
cpu::AdamWArgs adamw_args(const StepHyper& h, int64_t step);

class AdamW {
 public:
  explicit AdamW(const ParameterSet& params);  // every element
  // Elements [shard.begin, shard.end) of the flat buffer; throws fp4::Error when outside it.
  AdamW(const ParameterSet& params, IndexRange shard);

  // One update of the shard's elements with the gradients in `params`; increments step_count() first
  // (bias correction uses the 1-based step). Hyper-parameters are checked (finite lr >= 0, betas in
  // [0, 1), eps > 0).
  void step(ParameterSet& params, const StepHyper& hyper);

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t step);
  IndexRange shard() const { return shard_; }
  std::span<float> first_moment() { return m_; }
  std::span<const float> first_moment() const { return m_; }
  std::span<float> second_moment() { return v_; }
  std::span<const float> second_moment() const { return v_; }

 private:
  IndexRange shard_;
  std::vector<float> m_, v_;
  int64_t step_ = 0;
};

}  // namespace fp4
