// The recipe's step features (model/step_feature.h) and the one factory that builds them. Each feature is
// the engine-independent part (when to act, state, reports); what differs per engine is given to it as a
// backend in StepFeatureBackends, as OsciReset's host and device forms are.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "model/engine.h"
#include "model/step_feature.h"
#include "nn/lora_svd_linear.h"
#include "nn/out_control.h"
#include "optim/osci_reset_backend.h"
#include "recipe/recipe.h"

namespace fp4 {

using StepFeatures = std::vector<std::unique_ptr<StepFeature>>;

// What an engine gives the features of its recipe.
struct StepFeatureBackends {
  // The engine's FP32 masters (OsciReset's host form reads and writes them through read/write_parameter)
  // and its parameter list.
  TrainingEngine* engine = nullptr;

  // The model's OutControl registry (null: the recipe leaves OutControl off) and the engine's part of its
  // end of step: the step's channel sums made final in the registry (device sums copied to it, ranks summed).
  OutControl* out_control = nullptr;
  std::function<void()> out_control_sums;

  // The model's LoRA-SVD registry (null: off) and the engine's realignment number `index` of every layer,
  // its factors' optimizer moments reset.
  const LoraSvd* lora_svd = nullptr;
  std::function<void(int64_t index)> lora_svd_realign;

  // OsciReset's per-element work on the engine's device (null, or returning nullptr: the host form).
  std::function<std::unique_ptr<OsciBackend>()> osci_device_backend;
};

// The features `recipe` enables, in the order they act within a step: OutControl (its freeze before the
// update), LoRA-SVD (realignment after the update), OsciReset (last: it takes OutControl's frozen columns).
// OsciReset joins once ctx.total_steps is known; a data-parallel run keeps its host form. Throws fp4::Error
// naming the feature when the engine gives no backend for it (engines refuse such recipes earlier, in
// their recipe check) or when OsciReset's targets are invalid.
StepFeatures make_step_features(const Recipe& recipe, const StepContext& ctx,
                                const StepFeatureBackends& backends);

// Appends every feature's checkpoint tensors to `state`; throws naming the feature when a name is outside
// its prefix.
void append_feature_state(std::span<const std::unique_ptr<StepFeature>> features,
                          std::vector<StateTensor>& state);

}  // namespace fp4
