#include <cmath>

#include "ops/ops.h"

namespace fp4::cpu {

void rmsnorm_forward(float* out, int ldo, float* rstd, const float* x, int ldx, const float* w, int n, int c,
                     float eps) {
  for (int i = 0; i < n; ++i) {
    const float* xi = x + static_cast<int64_t>(i) * ldx;
    float* oi = out + static_cast<int64_t>(i) * ldo;
    double ss = 0;
    for (int j = 0; j < c; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    const float r = static_cast<float>(1.0 / std::sqrt(ss / c + static_cast<double>(eps)));
    rstd[i] = r;
    for (int j = 0; j < c; ++j) oi[j] = (xi[j] * r) * w[j];
  }
}

void rmsnorm_backward(float* dx, int lddx, float* dw, const float* dout, int lddo, const float* x, int ldx,
                      const float* w, const float* rstd, int n, int c, bool accumulate_dx) {
  for (int i = 0; i < n; ++i) {
    const float* xi = x + static_cast<int64_t>(i) * ldx;
    const float* gi = dout + static_cast<int64_t>(i) * lddo;
    float* dxi = dx + static_cast<int64_t>(i) * lddx;
    const float r = rstd[i];
    // d/dx of x*r: r*g - x * r^3 * mean(g*x), with g = dout*w.
    double gx = 0;
    for (int j = 0; j < c; ++j) gx += static_cast<double>(gi[j]) * w[j] * xi[j];
    const float k = static_cast<float>(gx / c * r * r * r);
    for (int j = 0; j < c; ++j) {
      const float d = gi[j] * w[j] * r - xi[j] * k;
      dxi[j] = accumulate_dx ? dxi[j] + d : d;
      dw[j] += gi[j] * (xi[j] * r);
    }
  }
}

}  // namespace fp4::cpu
