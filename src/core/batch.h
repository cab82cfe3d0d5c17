// Batch: one micro-batch of token ids, what the data loader makes and every engine consumes.
#pragma once

#include <cstdint>
#include <vector>

namespace fp4 {

// One micro-batch: tokens and next-token targets, both [batch][seq] row-major. A target < 0 is ignored.
struct Batch {
  int batch = 0;
  int seq = 0;
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;
};

}  // namespace fp4
