// The elementwise CPU ops on random lengths (0 included): add (also in place), scale, sum_squares
// accumulated in double, and the index of the first NaN or infinity.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gradcheck.h"
#include "ops/ops.h"

namespace fp4 {
namespace {

TEST(Elementwise, AddAndScaleOnRandomLengthsAndInPlace) {
  const uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t n = trial == 0 ? 0 : static_cast<int64_t>(rng() % 1000);
    const auto a = test::normal_vector(rng, n), b = test::normal_vector(rng, n);
    std::vector<float> out(n, std::numeric_limits<float>::quiet_NaN());
    cpu::add(out.data(), a.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]);
    auto in_a = a;
    cpu::add(in_a.data(), in_a.data(), b.data(), n);  // out aliases a
    EXPECT_EQ(in_a, out);
    auto in_b = b;
    cpu::add(in_b.data(), a.data(), in_b.data(), n);  // out aliases b
    EXPECT_EQ(in_b, out);
    const float s = std::uniform_real_distribution<float>(-3, 3)(rng);
    auto x = a;
    cpu::scale(x.data(), n, s);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], a[i] * s);
  }
}

TEST(Elementwise, SumSquaresAccumulatesInDouble) {
  std::mt19937 rng(test::fresh_seed());
  EXPECT_EQ(cpu::sum_squares(nullptr, 0), 0.0);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 5000);
    const auto x = test::normal_vector(rng, n, 10.0f);
    double want = 0;
    for (const float v : x) want += double(v) * v;
    EXPECT_NEAR(cpu::sum_squares(x.data(), n), want, 1e-12 * want);
  }
  // 4096 squared (2^24) then 2^24 ones: a float sum would stall at 2^24, the double one does not.
  std::vector<float> big(1 << 24 | 1, 1.0f);
  big[0] = 4096.0f;
  EXPECT_EQ(cpu::sum_squares(big.data(), static_cast<int64_t>(big.size())), 4096.0 * 4096.0 + (1 << 24));
}

TEST(Elementwise, FirstNonfiniteFindsTheFirstNanOrInfinity) {
  std::mt19937 rng(test::fresh_seed());
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  EXPECT_EQ(cpu::first_nonfinite(nullptr, 0), -1);
  for (int trial = 0; trial < 100; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 300);
    auto x = test::normal_vector(rng, n, 1e30f);  // large but finite, near float's maximum
    x[rng() % n] = std::numeric_limits<float>::max();
    ASSERT_EQ(cpu::first_nonfinite(x.data(), n), -1);
    const int64_t at = static_cast<int64_t>(rng() % n);
    x[at] = bad[rng() % 3];
    if (at + 1 < n) x[at + 1 + rng() % (n - at - 1)] = bad[rng() % 3];  // a later one does not count
    EXPECT_EQ(cpu::first_nonfinite(x.data(), n), at);
    EXPECT_EQ(cpu::first_nonfinite(x.data(), at), -1);  // the prefix before it is clean
  }
}

}  // namespace
}  // namespace fp4
