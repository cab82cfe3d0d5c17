// Every parameter of a training engine read back: the FP32 values, concatenated in parameters() order (the
// flat buffer's layout). Shared by the CPU tests and the CUDA tests.
#pragma once

#include <vector>

#include "model/engine.h"

namespace fp4::testing {

inline std::vector<float> all_parameters(const TrainingEngine& e) {
  std::vector<float> out;
  for (const auto& p : e.parameters()) {
    std::vector<float> v(static_cast<size_t>(p.numel()));
    e.read_parameter(p.name, v);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

}  // namespace fp4::testing
