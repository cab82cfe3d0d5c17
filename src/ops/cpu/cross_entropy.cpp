#include <cmath>
#include <cstring>

#include "core/error.h"
#include "ops/ops.h"

namespace fp4::cpu {

LossSums cross_entropy(float* dlogits, const float* logits, const int32_t* targets, int n, int v, int v_real,
                       float z_loss, float grad_scale) {
  LossSums sums;
  for (int i = 0; i < n; ++i) {
    const float* li = logits + static_cast<int64_t>(i) * v;
    float* di = dlogits ? dlogits + static_cast<int64_t>(i) * v : nullptr;
    const int32_t y = targets[i];
    if (y < 0) {
      if (di) std::memset(di, 0, sizeof(float) * static_cast<size_t>(v));
      continue;
    }
    FP4_CHECK(y < v_real, "cross_entropy: target ", y, " at row ", i, " is outside the vocabulary (", v_real,
              " ids)");
    float mx = li[0];
    for (int j = 1; j < v_real; ++j) mx = std::fmax(mx, li[j]);
    double sum = 0;
    for (int j = 0; j < v_real; ++j) sum += std::exp(static_cast<double>(li[j]) - mx);
    const double lse = mx + std::log(sum);
    const double ce = lse - li[y];
    sums.ce += ce;
    sums.loss += ce + static_cast<double>(z_loss) * lse * lse;
    sums.tokens += 1;
    if (di) {
      // d/dl_j of (lse - l_y + z lse^2) = p_j (1 + 2 z lse) - [j == y]
      const double k = 1.0 + 2.0 * static_cast<double>(z_loss) * lse;
      for (int j = 0; j < v_real; ++j)
        di[j] = static_cast<float>(grad_scale * (std::exp(static_cast<double>(li[j]) - lse) * k));
      di[y] -= grad_scale;
      std::memset(di + v_real, 0, sizeof(float) * static_cast<size_t>(v - v_real));
    }
  }
  return sums;
}

}  // namespace fp4::cpu
