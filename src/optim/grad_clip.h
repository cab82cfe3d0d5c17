// Global-norm gradient clipping (PyTorch clip_grad_norm_ semantics).
#pragma once

#include "nn/parameters.h"

namespace fp4 {

// L2 norm over every gradient of the set, accumulated in double.
double global_grad_norm(const ParameterSet& params);

// Scales all gradients by max_norm / (norm + 1e-6) when that is below 1; max_norm <= 0 disables.
// Returns the scale applied (1 when none).
float clip_grad_norm(ParameterSet& params, double norm, float max_norm);

}  // namespace fp4
