// ROOT / Q-Root behind the Optimizer interface (RECIPES.md section 8.3, docs/OPTIMIZERS_ROOT.md).
// Every root_eligible parameter (2-D, not the embedding nor the head) is one RootMatrix stepped with
// lr = hyper.lr and decoupled weight decay hyper.weight_decay (0 for parameters not flagged for decay);
// every other parameter is updated by the existing AdamW, with the same StepHyper, through a compact
// ParameterSet of those parameters alone (so AdamW keeps moments for them only), or, with RootOptions::rest
// = kQAdamW (the "+q-adamw" names, Full-Stack FP4's choice), by Q-AdamW owning just those tensors of the
// full ParameterSet (its SR keys and data parallelism are then Q-AdamW's own).
//
// Checkpoint (the same for root, root-bf16 and q-root): "root.m.<name>" (F32, the matrix's shape) per ROOT
// matrix, "root.step" (I64 [1]), and the other parameters' state in their optimizer's own layout: AdamW's
// ("adamw.m.<name>", "adamw.v.<name>" for those parameters only, "adamw.step") or Q-AdamW's ("qadamw.*" of
// those parameters only, "qadamw.step", "qadamw.seed").
//
// Data parallelism (ZeRO-1): NS needs each matrix's whole gradient, so every rank's shard must hold whole
// tensors (dist/shard_plan.h's make_tensor_shard_plan; optimizer_needs_whole_tensors says which optimizers
// need it). Each rank steps and keeps the state of its own tensors only; save_state gathers every rank's.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "optim/adamw_optimizer.h"
#include "optim/optimizer.h"
#include "optim/q_adamw.h"
#include "optim/root.h"

namespace fp4 {

inline constexpr const char* kRootMomentPrefix = "root.m.";
inline constexpr const char* kRootStepName = "root.step";

// Whether a saved state's embedding, head and gains were stepped by the optimizer `rest` of this ROOT form
// (Q-AdamW's "qadamw.step" or AdamW's "adamw.step" present); throws fp4::Error naming both and the recipe
// field otherwise. `name`: this optimizer's name. RootOptimizer and the CUDA DeviceRoot both check it.
void check_root_rest_state(const StateIndex& index, RootRest rest, const std::string& name);

class RootOptimizer final : public Optimizer {
 public:
  // precision kFp32: "root"; kBf16: "root-bf16" (BF16 Newton-Schulz operands, Q-Root's fair baseline);
  // kNvfp4: "q-root" (NVFP4 Newton-Schulz operands). `opt.precision` is overwritten by `precision`. Throws
  // fp4::Error when this rank's shard cuts a parameter or when the options are out of range.
  RootOptimizer(const ParameterSet& params, const OptimizerPlacement& place, uint64_t seed,
                NsPrecision precision, RootOptions opt = {});

  std::string name() const override;
  IndexRange shard() const override { return shard_; }
  void step(ParameterSet& params, const StepHyper& hyper) override;
  int64_t step_count() const override { return step_; }
  std::vector<StateTensor> save_state(const ParameterSet& params) const override;
  void load_state(const StateIndex& index, const ParameterSet& params) override;
  int64_t state_bytes() const override;
  // Zeroes the momentum of ROOT matrices and the AdamW moments of the other parameters inside `ranges`;
  // with Q-AdamW for the other parameters, a range that touches one of them is refused (fp4::Error).
  void reset_moments(const std::vector<IndexRange>& ranges) override;

  const RootOptions& options() const { return opt_; }
  // Names of the parameters ROOT updates, and of the others (AdamW's or Q-AdamW's), in ParameterSet order
  // (this rank's).
  std::vector<std::string> root_parameters() const;
  std::vector<std::string> adamw_parameters() const;
  // The last step's clipping statistics per ROOT matrix (in root_parameters() order).
  const std::vector<RootStepInfo>& last_step_info() const { return last_info_; }

 private:
  void check_layout(const ParameterSet& params, const char* what) const;

  RootOptions opt_;
  OptimizerPlacement place_;
  IndexRange shard_;
  std::vector<ParameterInfo> all_infos_;  // every rank's parameters, in ParameterSet order
  int64_t step_ = 0;
  std::vector<int> root_index_;       // ParameterSet index of each ROOT matrix
  std::vector<int64_t> root_offset_;  // flat-buffer offset of each ROOT matrix
  std::vector<RootMatrix> roots_;
  std::vector<int> adam_index_;       // ParameterSet index of each AdamW parameter
  std::vector<int64_t> adam_offset_;  // its flat-buffer offset in the full ParameterSet
  // The other parameters' optimizer: AdamW on copies of them (values and gradients), or Q-AdamW in place.
  ParameterSet adam_params_;
  std::unique_ptr<AdamWOptimizer> adam_;
  std::unique_ptr<QAdamW> qadam_;
  std::vector<RootStepInfo> last_info_;
};

}  // namespace fp4
