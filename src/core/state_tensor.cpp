#include "core/state_tensor.h"

#include <cstring>

namespace fp4 {

StateTensor f32_state_tensor(std::string name, const std::vector<int64_t>& shape,
                             std::span<const float> data) {
  StateTensor t{std::move(name), "F32", shape, std::vector<uint8_t>(data.size_bytes())};
  std::memcpy(t.bytes.data(), data.data(), data.size_bytes());
  return t;
}

}  // namespace fp4
