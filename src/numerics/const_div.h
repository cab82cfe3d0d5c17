// Correctly rounded division by a constant without a divide: RN(x / y) = RN(x * zh + RN(x * zl)) with
// zh = RN(1 / y), zl = RN(1 / y - zh): one multiply and one fused multiply-add instead of the IEEE
// division's reciprocal, refinements and range check (Brisebarre, Muller and Raina's method for a divisor
// known in advance). It is exact only for divisors that pass an exhaustive check over all significands;
// tests/unit/numerics/const_div_test.cpp runs it for every divisor the quantizers use (the E4M3 bounds
// 448 and 256, the targets 6 and 96/17). Scaling x by a power of two scales every step exactly while
// x * zl stays normal, so one binade's check covers all x >= kConstDivMinExact (and x == 0).
#pragma once

#include "numerics/hd.h"

namespace fp4 {

struct ConstDivisor {
  float y = 1.0f, zh = 1.0f, zl = 0.0f;
};

// Dividends from here up to FLT_MAX (and 0) divide exactly: x * zl >= 2^-90 * 2^-35 stays normal.
inline constexpr float kConstDivMinExact = 8.0779356694631609e-28f;  // 2^-90

// The split reciprocal of y (finite, normal). zl is rounded from the long double difference; the
// exhaustive test, not this computation, is what makes a divisor trusted.
inline ConstDivisor make_const_divisor(float y) {
  const float zh = 1.0f / y;
  const long double rest = 1.0L / static_cast<long double>(y) - static_cast<long double>(zh);
  return ConstDivisor{y, zh, static_cast<float>(rest)};
}

// RN(x / d.y) for finite x == +0 or |x| >= kConstDivMinExact (-0 gives +0). Below that x * zl underflows
// and the result can miss the true quotient's rounding among the subnormals (3 * 2^-149 / 6, a tie that
// rounds to 0, gives 2^-149): const_div_or_ieee takes the IEEE division there.
FP4_HD float const_div_rn(float x, const ConstDivisor& d) {
  return fma_rn(x, d.zh, mul_rn(x, d.zl));
}

// RN(x / d.y) for every finite x (inf * zh + inf * zl would be NaN) and a positive divisor: the constant
// division where it is exact, the IEEE one below (a branch taken only for dividends under 2^-90), and
// zeros as they are (const_div_rn(-0) is +0).
FP4_HD float const_div_or_ieee(float x, const ConstDivisor& d) {
  if (x == 0.0f) return x;
  return abs_f(x) >= kConstDivMinExact ? const_div_rn(x, d) : x / d.y;
}

}  // namespace fp4
