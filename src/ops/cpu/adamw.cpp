#include <cmath>

#include "ops/ops.h"

namespace fp4::cpu {

void adamw_update(float* p, float* m, float* v, const float* g, int64_t n, const AdamWArgs& a) {
  const float decay = 1.0f - a.lr * a.weight_decay;
  const float step_size = a.lr / a.bias_correction1;
  const float bc2_sqrt = std::sqrt(a.bias_correction2);
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    m[i] = m[i] * a.beta1 + gi * (1.0f - a.beta1);
    v[i] = v[i] * a.beta2 + (gi * gi) * (1.0f - a.beta2);
    const float denom = std::sqrt(v[i]) / bc2_sqrt + a.eps;
    const float r = m[i] / denom;
    p[i] = p[i] * decay - step_size * (r < -a.ratio_bound  ? -a.ratio_bound
                                       : r > a.ratio_bound ? a.ratio_bound
                                                           : r);
  }
}

}  // namespace fp4::cpu
