// The paired intervals against hand computations (closed-form t quantiles for 1 and 2 degrees of freedom)
// and their defining property on random data: each bound is where the paired t test turns.
#include "report/paired_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"

namespace fp4 {
namespace {

const double kT975Df2 = 0.95 / std::sqrt(2 * 0.975 * 0.025);  // (2p - 1) / sqrt(2p(1 - p))
const double kT975Df1 = std::tan(M_PI * 0.475);               // tan(pi (p - 1/2))

TEST(StudentT, QuantilesMatchClosedFormsAndTables) {
  EXPECT_NEAR(student_t_quantile(0.975, 1), kT975Df1, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 2), kT975Df2, 1e-12);
  EXPECT_NEAR(student_t_quantile(0.9, 2), 0.8 / std::sqrt(2 * 0.9 * 0.1), 1e-12);
  EXPECT_NEAR(student_t_quantile(0.975, 10), 2.228138851986, 1e-9);  // printed tables
  EXPECT_NEAR(student_t_quantile(0.975, 30), 2.042272456301, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 1e7), 1.959963984540, 1e-6);  // the normal limit
  EXPECT_NEAR(student_t_quantile(0.025, 4), -student_t_quantile(0.975, 4), 1e-12);
  EXPECT_EQ(student_t_quantile(0.5, 3), 0.0);
  EXPECT_THROW(student_t_quantile(1.0, 3), Error);
  EXPECT_THROW(student_t_quantile(0.9, 0), Error);
}

TEST(PairedStats, MeanIntervalByHand) {
  // gaps 0.030, 0.035, 0.025: mean 0.03, sd 0.005, half width t(0.975, 2) 0.005 / sqrt(3)
  const PairedInterval g = paired_mean_interval({0.030, 0.035, 0.025});
  EXPECT_EQ(g.n, 3);
  EXPECT_NEAR(g.mean, 0.03, 1e-15);
  EXPECT_NEAR(g.sd, 0.005, 1e-15);
  EXPECT_NEAR(g.lo, 0.017579311441248344, 1e-12);
  EXPECT_NEAR(g.hi, 0.042420688558751654, 1e-12);
  // two seeds: t(0.975, 1) = 12.706..., sd = |a - b| / sqrt 2
  const PairedInterval two = paired_mean_interval({0.030, 0.035});
  EXPECT_NEAR(two.lo, 0.000734488159563236, 1e-11);
  EXPECT_NEAR(two.hi, 0.06426551184043677, 1e-11);
  const PairedInterval one = paired_mean_interval({0.02});
  EXPECT_EQ(one.mean, 0.02);
  EXPECT_TRUE(std::isnan(one.lo) && std::isnan(one.hi));
  EXPECT_TRUE(std::isnan(paired_mean_interval({}).mean));
}

TEST(PairedStats, FiellerShareByHand) {
  // x: a recipe's gaps, y: the reference's, in seeds 1..3. share = 1 - 0.030 / 0.051; the bounds are where
  // the paired t statistic of x - theta y equals t(0.975, 2), found by bisection outside this code.
  const ShareInterval s = share_closed_interval({0.030, 0.035, 0.025}, {0.050, 0.048, 0.055});
  EXPECT_TRUE(s.bounded);
  EXPECT_NEAR(s.share, 0.4117647058823529, 1e-15);
  EXPECT_NEAR(s.lo, -0.005328057246618556, 1e-10);
  EXPECT_NEAR(s.hi, 0.7057359492620393, 1e-10);
  // A reference gap indistinguishable from 0: the set of ratios is unbounded.
  const ShareInterval u = share_closed_interval({0.01, 0.02, 0.015}, {0.01, -0.008, 0.002});
  EXPECT_FALSE(u.bounded);
  EXPECT_TRUE(std::isnan(u.lo));
  EXPECT_THROW(share_closed_interval({0.1}, {0.1, 0.2}), Error);
}

// At each bound the paired t statistic equals the t quantile: the intervals are the inverted tests.
TEST(PairedStats, BoundsAreWhereThePairedTestTurnsOnRandomData) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 6);
    std::normal_distribution<double> ref(0.05, 0.01), noise(0, 0.004);
    std::uniform_real_distribution<double> frac(-0.5, 1.2);
    const double f = frac(rng);
    std::vector<double> x, y;
    for (int i = 0; i < n; ++i) {
      y.push_back(ref(rng));
      x.push_back(f * y.back() + noise(rng));
    }
    const double t = student_t_quantile(0.975, n - 1);
    auto t_stat = [&](double theta) {
      double m = 0, ss = 0;
      for (int i = 0; i < n; ++i) m += x[i] - theta * y[i];
      m /= n;
      for (int i = 0; i < n; ++i) ss += std::pow(x[i] - theta * y[i] - m, 2);
      return std::fabs(m) / std::sqrt(ss / (n - 1) / n);
    };
    const PairedInterval g = paired_mean_interval(x);
    EXPECT_NEAR((g.mean - g.lo) / (g.sd / std::sqrt(n)), t, 1e-9);  // the t interval: the same inversion
    EXPECT_LE(g.lo, g.mean);
    const ShareInterval s = share_closed_interval(x, y);
    if (!s.bounded) continue;
    EXPECT_LE(s.lo, s.share);
    EXPECT_GE(s.hi, s.share);
    EXPECT_NEAR(t_stat(1 - s.lo), t, 1e-6 * t) << "trial " << trial;
    EXPECT_NEAR(t_stat(1 - s.hi), t, 1e-6 * t) << "trial " << trial;
    EXPECT_LT(t_stat(1 - s.share), 1e-9);
  }
}

}  // namespace
}  // namespace fp4
