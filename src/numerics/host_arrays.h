// Small host-side helpers over whole arrays that the measurement code (optim/ns_fit, optim/q_root_error,
// nn/q_attention_error) and the Newton-Schulz reference share.
#pragma once

#include <cmath>
#include <vector>

#include "numerics/formats.h"

namespace fp4 {

// ||a - ref||_F / ||ref||_F, accumulated in double; a and ref may hold float or double.
template <typename A, typename R>
double relative_frobenius_error(const std::vector<A>& a, const std::vector<R>& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  return std::sqrt(num / den);
}

// x with every element rounded to BF16 (nearest even) and back.
inline std::vector<float> bf16_rounded(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = round_to_bf16(x[i]);
  return out;
}

}  // namespace fp4
