// ParameterInfo: the name, shape and weight-decay flag of one trained tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp4 {

struct ParameterInfo {
  std::string name;  // e.g. "blocks.0.attn.wqkv"
  std::vector<int64_t> shape;
  bool weight_decay = true;
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

}  // namespace fp4
