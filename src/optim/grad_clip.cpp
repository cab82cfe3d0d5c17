#include "optim/grad_clip.h"

#include <cmath>

#include "ops/ops.h"

namespace fp4 {

double global_grad_norm(const ParameterSet& params) {
  double ss = 0;
  for (int i = 0; i < params.size(); ++i) {
    const auto g = params.grad(i);
    ss += cpu::sum_squares(g.data(), static_cast<int64_t>(g.size()));
  }
  return std::sqrt(ss);
}

float clip_grad_norm(ParameterSet& params, double norm, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return 1.0f;
  const auto c = static_cast<float>(coef);
  auto g = params.grads();
  cpu::scale(g.data(), static_cast<int64_t>(g.size()), c);
  return c;
}

}  // namespace fp4
