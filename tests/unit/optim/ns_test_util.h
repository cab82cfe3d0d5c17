// Helpers shared by the Newton-Schulz tests: a fresh printed seed, and options of a given precision.
#pragma once

#include <cstdint>
#include <cstdio>
#include <random>

#include "optim/newton_schulz.h"

namespace fp4::testing {

// A seed that differs on every run, printed so a failure can be replayed.
inline uint64_t fresh_seed() {
  static std::random_device rd;
  const uint64_t s = (static_cast<uint64_t>(rd()) << 32) | rd();
  std::printf("[ seed ] %llu\n", static_cast<unsigned long long>(s));
  return s;
}

inline NsOptions fp32_with(NsCoefficients coef) {
  NsOptions o;
  o.coef = coef;
  return o;
}

inline NsOptions nvfp4_with(NsCoefficients coef) {
  NsOptions o = fp32_with(coef);
  o.precision = NsPrecision::kNvfp4;
  return o;
}

}  // namespace fp4::testing
