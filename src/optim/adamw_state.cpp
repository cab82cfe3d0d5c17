#include "optim/adamw_state.h"

#include <cstring>

#include "core/error.h"

namespace fp4 {

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
