// TrainingEngine: the contract between the trainer (data, schedule, logging, checkpoints) and a
// compute backend (the CPU reference engine, the CUDA engine). The trainer never touches layers.
// The types it speaks in (Batch, StepHyper, StepStats, ParameterInfo, StateTensor, DataParallel) are in
// core/.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/batch.h"
#include "core/data_parallel.h"
#include "core/error.h"
#include "core/model_config.h"
#include "core/parameter_info.h"
#include "core/state_tensor.h"
#include "core/step_types.h"
#include "model/step_feature.h"

namespace fp4 {

class TrainingEngine {
 public:
  virtual ~TrainingEngine() = default;

  virtual const ModelConfig& config() const = 0;
  virtual std::string device_name() const = 0;  // "cpu", "cuda:0 (NVIDIA H200)", ...

  // One optimizer step over the micro-batches (gradient accumulation): forward, backward, global
  // norm clipping, AdamW. Throws fp4::Error naming the layer if the loss or a gradient is not finite.
  virtual StepStats train_step(std::span<const Batch> micro_batches, const StepHyper& hyper) = 0;

  // Mean loss (cross-entropy, no z-loss) and token count over a batch, no gradients.
  virtual StepStats evaluate(const Batch& batch) = 0;

  // Logits of the last position of each row of tokens [batch][seq]: out is [batch][vocab_size].
  // Padded ids (>= vocab_real) are never predicted: their logits are -inf, as the loss treats them.
  virtual void last_logits(const Batch& batch, std::span<float> out) = 0;

  virtual std::vector<ParameterInfo> parameters() const = 0;
  virtual void read_parameter(const std::string& name, std::span<float> out) const = 0;
  virtual void write_parameter(const std::string& name, std::span<const float> in) = 0;

  // Everything needed to resume bit for bit: parameters, optimizer state, step counters.
  virtual std::vector<StateTensor> save_state() const = 0;
  // Throws fp4::Error naming the tensor when a name is missing or a shape/dtype disagrees.
  virtual void load_state(const std::vector<StateTensor>& state) = 0;

  // Makes this engine rank comm->rank() of a data-parallel job, before its first step or load_state.
  // Then train_step takes this rank's slice of every micro-batch: the loss is normalised by the
  // target count of all ranks together, gradients are summed over ranks bucket by bucket
  // (reduce-scatter to the owners), the clipping norm covers every rank's shard, each rank updates its
  // own shard (optimizer state for it alone) and the parameters are all-gathered; the returned
  // statistics are the job's, equal on every rank. save_state() and load_state() stay world-size free
  // (full tensors): saving gathers the shards and is collective, loading keeps this rank's range.
  // evaluate() and last_logits() stay local. Engines without data parallelism throw fp4::Error.
  virtual void set_data_parallel(const DataParallel& dp) {
    (void)dp;
    FP4_THROW("engine ", device_name(), " does not support data-parallel training");
  }

  // The recipe's step features (model/step_feature.h) in the order they act within train_step; their
  // checkpoint tensors are part of save_state()/load_state(). The trainer writes their reports after each
  // step. Engines without features have none.
  virtual std::span<const std::unique_ptr<StepFeature>> features() { return {}; }
  // Rebuilds the features for a run (model/step_features.h): call after set_data_parallel, before
  // load_state and the first step. Until then an engine runs the features built with StepContext{}.
  virtual void set_step_context(const StepContext& ctx) { (void)ctx; }
};

}  // namespace fp4
