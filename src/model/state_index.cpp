#include "model/state_index.h"

#include "core/error.h"
#include "tensor/tensor.h"

namespace fp4 {

StateIndex::StateIndex(const std::vector<StateTensor>& state) {
  for (const auto& t : state) by_name_[t.name] = &t;
}

const StateTensor& StateIndex::require(const std::string& name, const char* dtype,
                                       const std::vector<int64_t>& shape) const {
  const auto it = by_name_.find(name);
  FP4_CHECK(it != by_name_.end(), "load_state: tensor '", name, "' is missing");
  const StateTensor& t = *it->second;
  FP4_CHECK(t.dtype == dtype, "load_state: tensor '", name, "' has dtype ", t.dtype, ", expected ", dtype);
  FP4_CHECK(t.shape == shape, "load_state: tensor '", name, "' has shape ", shape_string(t.shape), ", expected ",
            shape_string(shape));
  int64_t n = 1;
  for (auto d : shape) n *= d;
  const size_t elem = std::string(dtype) == "I64" ? 8 : 4;
  FP4_CHECK(t.bytes.size() == static_cast<size_t>(n) * elem, "load_state: tensor '", name, "' holds ",
            t.bytes.size(), " bytes, expected ", static_cast<size_t>(n) * elem);
  return t;
}

}  // namespace fp4
