#include <cmath>
#include <cstring>

#include "ops/ops.h"

namespace fp4::cpu {

// Per (batch, head): S = scale Q K^T (one sgemm over the full t x t square; the upper triangle is
// discarded), P = causal softmax(S), O = P V. P is kept for the backward.
void attention_forward(float* out, int ldo, float* probs, const float* q, int ldq, const float* k, int ldk,
                       const float* v, int ldv, int b, int t, int n_heads, int head_dim) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (int bi = 0; bi < b; ++bi) {
    for (int h = 0; h < n_heads; ++h) {
      const int64_t row0 = static_cast<int64_t>(bi) * t;
      const float* qh = q + row0 * ldq + h * head_dim;
      const float* kh = k + row0 * ldk + h * head_dim;
      const float* vh = v + row0 * ldv + h * head_dim;
      float* oh = out + row0 * ldo + h * head_dim;
      float* p = probs + (static_cast<int64_t>(bi) * n_heads + h) * t * t;
      gemm(false, true, t, t, head_dim, scale, qh, ldq, kh, ldk, 0.0f, p, t);
      for (int i = 0; i < t; ++i) {
        float* pi = p + static_cast<int64_t>(i) * t;
        float mx = pi[0];
        for (int j = 1; j <= i; ++j) mx = std::fmax(mx, pi[j]);
        double sum = 0;
        for (int j = 0; j <= i; ++j) {
          pi[j] = std::exp(pi[j] - mx);
          sum += pi[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int j = 0; j <= i; ++j) pi[j] *= inv;
        std::memset(pi + i + 1, 0, sizeof(float) * static_cast<size_t>(t - i - 1));
      }
      gemm(false, false, t, head_dim, t, 1.0f, p, t, vh, ldv, 0.0f, oh, ldo);
    }
  }
}

// dP = dO V^T; dS = P * (dP - rowsum(P * dP)); dQ = scale dS K; dK = scale dS^T Q; dV = P^T dO.
void attention_backward(float* dq, int lddq, float* dk, int lddk, float* dv, int lddv, float* scratch,
                        const float* dout, int lddo, const float* probs, const float* q, int ldq,
                        const float* k, int ldk, const float* v, int ldv, int b, int t, int n_heads,
                        int head_dim) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (int bi = 0; bi < b; ++bi) {
    for (int h = 0; h < n_heads; ++h) {
      const int64_t row0 = static_cast<int64_t>(bi) * t;
      const int64_t col = h * head_dim;
      const float* qh = q + row0 * ldq + col;
      const float* kh = k + row0 * ldk + col;
      const float* vh = v + row0 * ldv + col;
      const float* doh = dout + row0 * lddo + col;
      const float* p = probs + (static_cast<int64_t>(bi) * n_heads + h) * t * t;
      float* ds = scratch;
      gemm(false, true, t, t, head_dim, 1.0f, doh, lddo, vh, ldv, 0.0f, ds, t);
      for (int i = 0; i < t; ++i) {
        const float* pi = p + static_cast<int64_t>(i) * t;
        float* di = ds + static_cast<int64_t>(i) * t;
        double dot = 0;
        for (int j = 0; j <= i; ++j) dot += static_cast<double>(pi[j]) * di[j];
        const float fdot = static_cast<float>(dot);
        for (int j = 0; j <= i; ++j) di[j] = pi[j] * (di[j] - fdot);
        std::memset(di + i + 1, 0, sizeof(float) * static_cast<size_t>(t - i - 1));
      }
      gemm(false, false, t, head_dim, t, scale, ds, t, kh, ldk, 0.0f, dq + row0 * lddq + col, lddq);
      gemm(true, false, t, head_dim, t, scale, ds, t, qh, ldq, 0.0f, dk + row0 * lddk + col, lddk);
      gemm(true, false, t, head_dim, t, 1.0f, p, t, doh, lddo, 0.0f, dv + row0 * lddv + col, lddv);
    }
  }
}

}  // namespace fp4::cpu
