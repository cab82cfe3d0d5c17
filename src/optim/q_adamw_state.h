// Q-AdamW's checkpoint tensors (layout: q_adamw_state.cpp): their names and the checks that both the CPU
// QAdamW and its device form (optim/cuda/device_q_adamw.cu) make before they load anything.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/state_index.h"
#include "core/state_tensor.h"

namespace fp4 {

// Per parameter: m codes, m scales, m scale, v codes, v scales, v scale, v mean.
inline constexpr int kQAdamStateRegions = 7;

using QAdamStateTensors = std::array<const StateTensor*, kQAdamStateRegions>;

// "qadamw.<region>.<param>".
std::string q_adamw_tensor_name(int region, const std::string& param);

// 128-element tiles of a parameter of `numel` elements.
int64_t q_adamw_tiles(int64_t numel);

// The seven tensors of `param` with `tiles` tiles: each present with its dtype and shape, and the scale
// tensors' S_dec and amax finite and >= 0; throws fp4::Error naming the tensor otherwise.
QAdamStateTensors require_q_adamw_tensors(const StateIndex& index, const std::string& param, int64_t tiles);

// The saved step count (>= 0) and the run seed the SR keys derive from.
struct QAdamSavedCounters {
  int64_t step = 0;
  uint64_t seed = 0;
};
QAdamSavedCounters require_q_adamw_counters(const StateIndex& index);

}  // namespace fp4
