#include <cmath>

#include "ops/ops.h"

namespace fp4::cpu {

namespace {
float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
}  // namespace

void swiglu_forward(float* out, const float* gu, int n, int f) {
  for (int i = 0; i < n; ++i) {
    const float* g = gu + static_cast<int64_t>(i) * 2 * f;
    const float* u = g + f;
    float* o = out + static_cast<int64_t>(i) * f;
    for (int j = 0; j < f; ++j) o[j] = (g[j] * sigmoid(g[j])) * u[j];
  }
}

void swiglu_backward(float* dgu, const float* dout, const float* gu, int n, int f) {
  for (int i = 0; i < n; ++i) {
    const float* g = gu + static_cast<int64_t>(i) * 2 * f;
    const float* u = g + f;
    const float* d = dout + static_cast<int64_t>(i) * f;
    float* dg = dgu + static_cast<int64_t>(i) * 2 * f;
    float* du = dg + f;
    for (int j = 0; j < f; ++j) {
      const float s = sigmoid(g[j]);
      // silu'(g) = s * (1 + g * (1 - s))
      dg[j] = d[j] * u[j] * (s * (1.0f + g[j] * (1.0f - s)));
      du[j] = d[j] * (g[j] * s);
    }
  }
}

}  // namespace fp4::cpu
