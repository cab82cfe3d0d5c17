// The fused CPU AdamW step against a double-precision reference over several steps with bias correction
// and decoupled weight decay; ratio_bound clamps the normalized step and infinity leaves it untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gradcheck.h"
#include "ops/ops.h"

namespace fp4 {
namespace {

cpu::AdamWArgs args_for(int step, float lr, float b1, float b2, float eps, float wd) {
  return {lr, b1, b2, eps, wd, 1.0f - std::pow(b1, float(step)), 1.0f - std::pow(b2, float(step))};
}

TEST(AdamWUpdate, MatchesADoubleReferenceOverSteps) {
  const uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> lr(1e-4f, 1e-2f), wd(0.0f, 0.2f);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t n = trial == 0 ? 0 : 1 + static_cast<int64_t>(rng() % 500);
    const float a_lr = lr(rng), a_wd = trial % 4 == 0 ? 0.0f : wd(rng), b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    auto p = test::normal_vector(rng, n);
    std::vector<float> m(n, 0.0f), v(n, 0.0f);
    std::vector<double> rp(p.begin(), p.end()), rm(n, 0.0), rv(n, 0.0);
    for (int step = 1; step <= 10; ++step) {
      auto g = test::normal_vector(rng, n, 0.1f);
      if (n > 1) g[0] = 0.0f;  // a zero gradient: only decay and the moments' memory move it
      const cpu::AdamWArgs a = args_for(step, a_lr, b1, b2, eps, a_wd);
      cpu::adamw_update(p.data(), m.data(), v.data(), g.data(), n, a);
      const double bc1 = 1 - std::pow(double(b1), step), bc2 = 1 - std::pow(double(b2), step);
      for (int64_t i = 0; i < n; ++i) {
        rm[i] = b1 * rm[i] + (1 - double(b1)) * g[i];
        rv[i] = b2 * rv[i] + (1 - double(b2)) * double(g[i]) * g[i];
        rp[i] = rp[i] * (1 - double(a_lr) * a_wd) - a_lr / bc1 * rm[i] / (std::sqrt(rv[i] / bc2) + eps);
      }
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(m[i], rm[i], 1e-6 * (1 + std::fabs(rm[i]))) << "step " << step << " i " << i;
        ASSERT_NEAR(v[i], rv[i], 1e-6 * (1e-6 + std::fabs(rv[i]))) << "step " << step << " i " << i;
        ASSERT_NEAR(p[i], rp[i], 1e-5 * (1 + std::fabs(rp[i]))) << "step " << step << " i " << i;
      }
    }
  }
}

TEST(AdamWUpdate, RatioBoundClampsTheNormalizedStep) {
  std::mt19937 rng(test::fresh_seed());
  const int64_t n = 400;
  for (const float bound : {0.05f, 0.5f, 2.0f}) {
    const auto p0 = test::normal_vector(rng, n), g = test::normal_vector(rng, n);
    // Moments that disagree as decoded ones can: m large against sqrt(v).
    auto m0 = test::normal_vector(rng, n), v0 = test::uniform_vector(rng, n, 0.0f, 1e-4f);
    cpu::AdamWArgs a = args_for(3, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f);
    auto p = p0, m = m0, v = v0;
    a.ratio_bound = bound;
    cpu::adamw_update(p.data(), m.data(), v.data(), g.data(), n, a);
    auto pf = p0, mf = m0, vf = v0;
    a.ratio_bound = std::numeric_limits<float>::infinity();
    cpu::adamw_update(pf.data(), mf.data(), vf.data(), g.data(), n, a);
    EXPECT_EQ(m, mf);  // the moments do not depend on the bound
    EXPECT_EQ(v, vf);
    const float decay = 1.0f - a.lr * a.weight_decay, step = a.lr / a.bias_correction1;
    int clamped = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double r = m[i] / (std::sqrt(double(v[i])) / std::sqrt(double(a.bias_correction2)) + a.eps);
      const double moved = (double(p0[i]) * decay - p[i]) / step;  // the normalized step taken
      if (std::fabs(r) > bound * 1.0001) {
        ++clamped;
        EXPECT_NEAR(moved, r > 0 ? bound : -bound, 1e-3 * bound + 1e-5) << i;
      } else if (std::fabs(r) < bound * 0.9999) {
        EXPECT_EQ(p[i], pf[i]) << i;  // inside the bound: the unclamped arithmetic
      }
    }
    EXPECT_GT(clamped, 0) << "bound " << bound;
  }
  // A bound that never binds gives AdamW bit for bit.
  const auto p0 = test::normal_vector(rng, n), g = test::normal_vector(rng, n);
  cpu::AdamWArgs a = args_for(1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f);
  std::vector<float> p1 = p0, p2 = p0, m1(n, 0), m2(n, 0), v1(n, 0), v2(n, 0);
  cpu::adamw_update(p1.data(), m1.data(), v1.data(), g.data(), n, a);
  a.ratio_bound = 1e30f;
  cpu::adamw_update(p2.data(), m2.data(), v2.data(), g.data(), n, a);
  EXPECT_EQ(p1, p2);
}

}  // namespace
}  // namespace fp4
