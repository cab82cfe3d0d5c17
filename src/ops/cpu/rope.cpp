#include <cmath>

#include "ops/ops.h"

namespace fp4::cpu {

void rope_tables(float* cos_table, float* sin_table, int t, int head_dim, float theta) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double inv_freq = 1.0 / std::pow(static_cast<double>(theta), 2.0 * i / head_dim);
    for (int pos = 0; pos < t; ++pos) {
      const double angle = pos * inv_freq;
      cos_table[pos * half + i] = static_cast<float>(std::cos(angle));
      sin_table[pos * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

namespace {

// Rotates each (x[i], x[i+half]) pair by +angle (sign = 1) or -angle (sign = -1).
void rotate(float* x, int ld, const float* cos_table, const float* sin_table, int b, int t, int n_heads,
            int head_dim, float sign) {
  const int half = head_dim / 2;
  for (int row = 0; row < b * t; ++row) {
    const int pos = row % t;
    const float* c = cos_table + pos * half;
    const float* s = sin_table + pos * half;
    for (int h = 0; h < n_heads; ++h) {
      float* xh = x + static_cast<int64_t>(row) * ld + h * head_dim;
      for (int i = 0; i < half; ++i) {
        const float a = xh[i], bb = xh[i + half];
        const float si = sign * s[i];
        xh[i] = a * c[i] - bb * si;
        xh[i + half] = bb * c[i] + a * si;
      }
    }
  }
}

}  // namespace

void rope_forward(float* x, int ld, const float* cos_table, const float* sin_table, int b, int t, int n_heads,
                  int head_dim) {
  rotate(x, ld, cos_table, sin_table, b, t, n_heads, head_dim, 1.0f);
}

void rope_backward(float* dx, int ld, const float* cos_table, const float* sin_table, int b, int t,
                   int n_heads, int head_dim) {
  rotate(dx, ld, cos_table, sin_table, b, t, n_heads, head_dim, -1.0f);
}

}  // namespace fp4::cpu
