// Shared helpers of the numerics tests: fresh seeds that failures print (and FP4_TEST_SEED replays),
// independent slow reference roundings, and random tensors.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace fp4::test {

// A fresh seed per test run, or the value of FP4_TEST_SEED to replay a failure.
inline uint64_t test_seed() {
  if (const char* s = std::getenv("FP4_TEST_SEED")) return std::stoull(s);
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

inline std::string seed_note(uint64_t seed) {
  return "seed " + std::to_string(seed) + " (replay with FP4_TEST_SEED=" + std::to_string(seed) + ")";
}

// The 8 E2M1 magnitudes, written out (not derived from the library's bit formula).
inline constexpr float kE2m1Grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// Reference E2M1 round-to-nearest: the nearest magnitude, ties to the even index, saturating at 6.
inline int ref_e2m1_index(double a) {
  int best = 0;
  for (int i = 1; i < 8; ++i) {
    const double d = std::fabs(a - kE2m1Grid[i]), db = std::fabs(a - kE2m1Grid[best]);
    if (d < db || (d == db && i % 2 == 0)) best = i;
  }
  return best;
}

// Largest grid index whose magnitude is <= a (a in [0, 6]).
inline int ref_e2m1_floor_index(double a) {
  int i = 7;
  while (i > 0 && kE2m1Grid[i] > a) --i;
  return i;
}

// Value of an E4M3 code from the format definition, in double (NaN for 0x7F / 0xFF).
inline double ref_e4m3_value(int code) {
  const int exp = (code >> 3) & 0xF, man = code & 7;
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  if (exp == 15 && man == 7) return std::nan("");
  if (exp == 0) return sign * std::ldexp(man, -9);
  return sign * std::ldexp(8 + man, exp - 10);
}

// Reference E4M3 encoder: nearest of the finite magnitudes (enumerated), ties to the even mantissa,
// anything >= 448 (or inf) saturates to 448, NaN -> 0x7F; the sign bit of x is kept.
inline int ref_e4m3_encode(float x) {
  const int sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return sign | 0x7F;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 448.0) return sign | 0x7E;
  static const std::vector<double> values = [] {
    std::vector<double> v;
    for (int c = 0; c <= 0x7E; ++c) v.push_back(ref_e4m3_value(c));
    return v;
  }();
  int best = 0;
  double best_d = a;
  for (int c = 1; c <= 0x7E; ++c) {
    const double d = std::fabs(a - values[c]);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return sign | best;
}

// Standard normal matrix, row-major.
inline std::vector<float> gaussian(std::mt19937_64& g, int64_t n, float sigma = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& f : v) f = nd(g);
  return v;
}

inline std::vector<float> transpose(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> t(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

}  // namespace fp4::test

// Declares std::mt19937_64 `name` from a fresh seed and prints the seed with any failure in scope.
#define FP4_SEEDED_RNG(name)                             \
  const uint64_t name##_seed = ::fp4::test::test_seed(); \
  SCOPED_TRACE(::fp4::test::seed_note(name##_seed));     \
  std::mt19937_64 name(name##_seed)
