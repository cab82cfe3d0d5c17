// Parameter initialisation from the counter-based RNG: each element is a pure function of
// (seed, parameter index, element index), so the same seed gives the same model on CPU and GPU.
#pragma once

#include <cstdint>
#include <span>

namespace fp4 {

// out[i] = std * z_i with z_i standard normal truncated to [-3, 3] (redrawn until inside).
void init_truncated_normal(std::span<float> out, float std, uint64_t seed, uint32_t param_index);

}  // namespace fp4
