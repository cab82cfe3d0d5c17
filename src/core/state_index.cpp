#include "core/state_index.h"

#include "core/error.h"
#include "core/shape_string.h"

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
  FP4_CHECK(t.shape == shape, "load_state: tensor '", name, "' has shape ", shape_string(t.shape),
            ", expected ", shape_string(shape));
  int64_t n = 1;
  for (auto d : shape) n *= d;
  const std::string d = dtype;
  FP4_CHECK(d == "U8" || d == "BF16" || d == "F32" || d == "I64", "load_state: tensor '", name,
            "' is requested as ", d, ", which StateIndex cannot size");
  const size_t elem = d == "I64" ? 8 : d == "F32" ? 4 : d == "BF16" ? 2 : 1;
  FP4_CHECK(t.bytes.size() == static_cast<size_t>(n) * elem, "load_state: tensor '", name, "' holds ",
            t.bytes.size(), " bytes, expected ", static_cast<size_t>(n) * elem);
  return t;
}

}  // namespace fp4
