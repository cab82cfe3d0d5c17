#include "model/state_index.h"

#include <cstring>

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
  const std::string d = dtype;
  FP4_CHECK(d == "U8" || d == "BF16" || d == "F32" || d == "I64", "load_state: tensor '", name,
            "' is requested as ", d, ", which StateIndex cannot size");
  const size_t elem = d == "I64" ? 8 : d == "F32" ? 4 : d == "BF16" ? 2 : 1;
  FP4_CHECK(t.bytes.size() == static_cast<size_t>(n) * elem, "load_state: tensor '", name, "' holds ",
            t.bytes.size(), " bytes, expected ", static_cast<size_t>(n) * elem);
  return t;
}

AdamState find_adam_state(const StateIndex& index, const std::vector<ParameterInfo>& params) {
  AdamState out;
  for (const auto& info : params) {
    out.values.push_back(&index.require(info.name, "F32", info.shape));
    out.m.push_back(&index.require(kAdamMomentPrefix[0] + info.name, "F32", info.shape));
    out.v.push_back(&index.require(kAdamMomentPrefix[1] + info.name, "F32", info.shape));
  }
  const StateTensor& step = index.require(kAdamStepName, "I64", {1});
  std::memcpy(&out.step, step.bytes.data(), sizeof(out.step));
  FP4_CHECK(out.step >= 0, "load_state: tensor '", kAdamStepName, "' holds a negative step ", out.step);
  return out;
}

StateTensor adam_step_tensor(int64_t step) {
  StateTensor t{kAdamStepName, "I64", {1}, std::vector<uint8_t>(sizeof(int64_t))};
  std::memcpy(t.bytes.data(), &step, sizeof(step));
  return t;
}

}  // namespace fp4
