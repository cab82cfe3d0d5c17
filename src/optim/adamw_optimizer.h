// AdamW (optim/adamw.h) behind the Optimizer interface: the same arithmetic, checkpoints in the
// "adamw.m.<name>" / "adamw.v.<name>" / "adamw.step" layout (model/state_index.h).
#pragma once

#include "optim/adamw.h"
#include "optim/optimizer.h"

namespace fp4 {

class AdamWOptimizer final : public Optimizer {
 public:
  AdamWOptimizer(const ParameterSet& params, const OptimizerPlacement& place);

  std::string name() const override { return "adamw"; }
  IndexRange shard() const override { return adam_.shard(); }
  void step(ParameterSet& params, const StepHyper& hyper) override { adam_.step(params, hyper); }
  int64_t step_count() const override { return adam_.step_count(); }
  std::vector<StateTensor> save_state(const ParameterSet& params) const override;
  void load_state(const StateIndex& index, const ParameterSet& params) override;
  int64_t state_bytes() const override;
  void reset_moments(const std::vector<IndexRange>& ranges) override;
  const AdamW& state() const { return adam_; }  // this rank's moments and step count

 private:
  std::vector<float> full_moment(std::span<const float> shard_state, int64_t numel) const;

  OptimizerPlacement place_;
  AdamW adam_;
};

}  // namespace fp4
