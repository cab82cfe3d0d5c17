#include <cstring>

#include "ops/ops.h"

namespace fp4::cpu {

void embedding_forward(float* out, const int32_t* tokens, const float* table, int n, int d) {
  for (int i = 0; i < n; ++i)
    std::memcpy(out + static_cast<int64_t>(i) * d, table + static_cast<int64_t>(tokens[i]) * d,
                sizeof(float) * static_cast<size_t>(d));
}

void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int n, int d) {
  for (int i = 0; i < n; ++i) {
    float* row = dtable + static_cast<int64_t>(tokens[i]) * d;
    const float* g = dout + static_cast<int64_t>(i) * d;
    for (int j = 0; j < d; ++j) row[j] += g[j];
  }
}

}  // namespace fp4::cpu
