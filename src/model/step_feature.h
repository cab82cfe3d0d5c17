// StepFeature: the one way a recipe feature acts around an optimizer step (OutControl's calibration and
// freeze, LoRA-SVD's realignment, OsciReset). An engine holds the recipe's features as a list made by
// make_step_features (model/step_features.h) and calls every feature at the same three points of its
// step; the trainer reads their reports; their checkpoint tensors travel in the engine's state.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/state_tensor.h"

namespace fp4 {

// What the features of a run need from the run itself, known once the engine is placed (after
// set_data_parallel). An engine builds its features with StepContext{} at construction and again when the
// trainer gives it the run's context (TrainingEngine::set_step_context).
struct StepContext {
  // The run's optimizer steps; features that need the run's length (OsciReset's fractional start) are
  // built only once it is known.
  std::optional<int64_t> total_steps;
  bool data_parallel = false;  // every rank runs its own replica of each feature
};

// One metrics-file line of a feature (a JSON object with "type" and "step") and its line for the progress
// log.
struct StepReport {
  nlohmann::json line;
  std::string message;
};

class StepFeature {
 public:
  virtual ~StepFeature() = default;

  // The recipe section that enables it ("out_control", "lora_svd", "osci_reset"), for logs and errors.
  virtual std::string name() const = 0;
  // Every checkpoint tensor of the feature starts with it ("osci_reset.").
  virtual std::string state_prefix() const = 0;
  // A line for the run's log when the feature starts ("" : nothing to say).
  virtual std::string summary() const { return ""; }

  // Before the forwards of optimizer step `step` (1-based).
  virtual void begin_step(int64_t step) { (void)step; }
  // After the step's forwards and backwards (collective with data parallelism), before the step is counted;
  // reads what the step measured and leaves the weights alone.
  virtual void end_step(int64_t step) { (void)step; }
  // After the optimizer update, when every rank holds the new weights; may change weights and moments.
  virtual void after_update(int64_t step) { (void)step; }

  // The feature's checkpoint tensors (names under state_prefix()).
  virtual std::vector<StateTensor> save_state() const { return {}; }
  // Takes its own tensors from `state` (other names are ignored); called after the engine has loaded its
  // parameters and optimizer, in the list's order.
  virtual void load_state(const std::vector<StateTensor>& state) { (void)state; }

  // What the last step did worth a metrics line, once.
  virtual std::vector<StepReport> take_reports() { return {}; }
};

}  // namespace fp4
