// Helpers shared by the OsciReset tests: the Q2 (weight) quantizer specs and a bitwise comparison.
#pragma once

#include <cstring>
#include <vector>

#include "numerics/quant_spec.h"

namespace fp4::testing {

inline QuantSpec q2_spec(bool tensor_16x16) {
  QuantSpec s;
  s.format = QuantFormat::kNvfp4;
  s.block = tensor_16x16 ? BlockShape::k16x16 : BlockShape::k1x16;
  s.outer = tensor_16x16 ? OuterScale::kTensor : OuterScale::kBlock128;
  return s;
}

inline bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace fp4::testing
