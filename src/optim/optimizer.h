// Optimizer: the interface the engines step through (AdamW, Q-AdamW, ROOT, Q-Root).
// An optimizer updates the FP32 master parameters of one range of the flat parameter buffer (its ZeRO-1
// shard: every element when alone) from the gradients in the ParameterSet, keeps its state for that range
// only, and exports/imports that state as named full tensors for checkpoints.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/index_range.h"
#include "core/state_index.h"
#include "core/state_tensor.h"
#include "core/step_types.h"
#include "nn/parameters.h"
#include "optim/adamw_state.h"       // the AdamW layout every optimizer's state builds on
#include "recipe/optimizer_names.h"  // is_known_optimizer, known_optimizers: the names make_optimizer takes

namespace fp4 {

// Where an optimizer runs. comm == nullptr: one process, shard = every element. Otherwise shards[q] is
// rank q's range (comm->rank() picks this one) and state export and some steps are collective.
struct OptimizerPlacement {
  Communicator* comm = nullptr;
  std::vector<IndexRange> shards;
  IndexRange shard(int64_t numel) const;  // this rank's range
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;  // the recipe's optimizer value
  virtual IndexRange shard() const = 0;

  // One update of the shard's elements; increments step_count() first (bias corrections use the
  // 1-based step). Collective when placed on several ranks.
  virtual void step(ParameterSet& params, const StepHyper& hyper) = 0;
  virtual int64_t step_count() const = 0;

  // The state of every element as named tensors (the shards gathered: collective with a communicator).
  virtual std::vector<StateTensor> save_state(const ParameterSet& params) const = 0;
  // Checks every tensor this optimizer needs before changing anything, then keeps this rank's shard.
  virtual void load_state(const StateIndex& index, const ParameterSet& params) = 0;

  virtual int64_t state_bytes() const = 0;  // memory of this rank's state (moments)

  // Zeroes the state of the elements in `ranges` (flat-buffer ranges; the parts in this rank's shard), as
  // LoRA-SVD's realignment does for its factors. Optimizers without it throw fp4::Error naming themselves.
  virtual void reset_moments(const std::vector<IndexRange>& ranges);
};

// "adamw", "q-adamw", "root" (ROOT, FP32 Newton-Schulz), "root-bf16" (BF16 NS operands, FP32 accumulation)
// or "q-root" (NVFP4 NS operands), each ROOT form also with "+q-adamw" (Q-AdamW, not AdamW, for the
// embedding, head and gains); throws fp4::Error naming the value and the known ones otherwise. `seed` is
// the run seed (stochastic rounding).
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const ParameterSet& params,
                                          const OptimizerPlacement& place, uint64_t seed);

}  // namespace fp4
