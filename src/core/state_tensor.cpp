#include "core/state_tensor.h"

#include <cstring>

namespace fp4 {

StateTensor f32_state_tensor(std::string name, const std::vector<int64_t>& shape,
                             std::span<const float> data) {
  StateTensor t{std::move(name), "F32", shape, std::vector<uint8_t>(data.size_bytes())};
  // An empty span may hold a null pointer, which memcpy must not be given even for 0 bytes.
  if (!data.empty()) std::memcpy(t.bytes.data(), data.data(), data.size_bytes());
  return t;
}

}  // namespace fp4
