// StateTensor: a named piece of checkpointed state (parameters, optimizer moments, counters).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fp4 {

// dtype is a safetensors dtype string ("F32", "BF16", "U8", "I64"), so quantized optimizer states fit too.
struct StateTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// An F32 state tensor holding a copy of data.
StateTensor f32_state_tensor(std::string name, const std::vector<int64_t>& shape,
                             std::span<const float> data);

}  // namespace fp4
