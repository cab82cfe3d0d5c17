// The AdamW state layout both engines write and read, found and checked in a saved state.
#pragma once

#include <cstdint>
#include <vector>

#include "core/parameter_info.h"
#include "core/state_index.h"
#include "core/state_tensor.h"

namespace fp4 {

// The AdamW engine state: per parameter "<name>" (the value), "adamw.m.<name>" and "adamw.v.<name>"
// (F32, the parameter's shape), and "adamw.step" (I64 [1]). Both engines write and read this layout.
inline constexpr const char* kAdamMomentPrefix[2] = {"adamw.m.", "adamw.v."};
inline constexpr const char* kAdamStepName = "adamw.step";

struct AdamState {
  std::vector<const StateTensor*> values, m, v;  // in `params` order
  int64_t step = 0;
};

// Finds and checks every tensor of the layout above (missing, dtype, shape, a negative step) so that an
// engine can verify a whole state before changing anything.
AdamState find_adam_state(const StateIndex& index, const std::vector<ParameterInfo>& params);

// The "adamw.step" tensor.
StateTensor adam_step_tensor(int64_t step);

}  // namespace fp4
