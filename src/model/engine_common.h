// Helpers every TrainingEngine implementation shares: batch validation, target counting (state tensors:
// core/state_tensor.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/model_config.h"
#include "core/state_tensor.h"  // f32_state_tensor, which engines use with these
#include "model/engine.h"

namespace fp4 {

// Throws fp4::Error naming `what` when the batch's shape, token ids (the embedding rows) or, with
// check_targets, its targets (the real vocabulary; negative = ignored) do not fit the model.
void check_batch(const Batch& b, const ModelConfig& cfg, const std::string& what, bool check_targets = true);

// Targets that count in the loss (>= 0).
int64_t count_targets(const Batch& b);

}  // namespace fp4
