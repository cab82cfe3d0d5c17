// Parameter initialisation: every element is a pure function of (seed, parameter, element) — a prefix or a
// shorter buffer gives the same values — inside [-3 std, 3 std], with the truncated normal's moments.
#include "nn/init.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace fp4 {
namespace {

TEST(Init, ElementsArePureFunctionsOfSeedParameterAndIndex) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 20; ++trial) {
    const uint64_t seed = rng();
    const auto param = static_cast<uint32_t>(rng() % 1000);
    const size_t n = 1 + rng() % 5000, prefix = rng() % n;
    std::vector<float> a(n), b(prefix), other_param(n), other_seed(n);
    init_truncated_normal(a, 0.02f, seed, param);
    init_truncated_normal(b, 0.02f, seed, param);
    for (size_t i = 0; i < prefix; ++i) ASSERT_EQ(a[i], b[i]) << i;
    init_truncated_normal(other_param, 0.02f, seed, param + 1);
    init_truncated_normal(other_seed, 0.02f, seed + 1, param);
    size_t same_p = 0, same_s = 0;
    for (size_t i = 0; i < n; ++i) same_p += a[i] == other_param[i], same_s += a[i] == other_seed[i];
    EXPECT_LT(same_p, 1 + n / 100);
    EXPECT_LT(same_s, 1 + n / 100);
    // std scales the same draws.
    std::vector<float> scaled(n);
    init_truncated_normal(scaled, 0.5f, seed, param);
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(scaled[i], a[i] * 25.0f, 1e-6f * (1 + std::fabs(scaled[i])));
  }
  init_truncated_normal({}, 1.0f, 1, 1);  // an empty parameter draws nothing
}

// 200k draws: all inside 3 std, mean 0, variance of the normal truncated at 3 (1 - 6 phi(3) / (2 Phi(3) - 1)
// = 0.97334), and the share beyond 2 std as the truncated normal has it (0.04292).
TEST(Init, DrawsFollowTheNormalTruncatedAtThreeSigma) {
  std::mt19937_64 rng(std::random_device{}());
  const float std = 0.02f;
  std::vector<float> x(200000);
  init_truncated_normal(x, std, rng(), static_cast<uint32_t>(rng() % 100));
  double s = 0, ss = 0;
  size_t beyond2 = 0;
  for (const float v : x) {
    ASSERT_LE(std::fabs(v), 3 * std * (1 + 1e-6f));
    s += v / std;
    ss += double(v / std) * (v / std);
    beyond2 += std::fabs(v) > 2 * std;
  }
  const double n = static_cast<double>(x.size()), mean = s / n, var = ss / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 5 * std::sqrt(1.0 / n));
  EXPECT_NEAR(var, 0.97334, 0.01);
  EXPECT_NEAR(beyond2 / n, 0.04292, 0.003);
}

}  // namespace
}  // namespace fp4
