#include "optim/adamw.h"

#include <gtest/gtest.h>

#include "../ops/gradcheck.h"
#include "core/error.h"

namespace fp4 {
namespace {

// Three AdamW steps on two tensors (one decayed, one not) against the update written out in double.
TEST(AdamW, StepsMatchHandComputedUpdates) {
  std::mt19937 rng(test::fresh_seed());
  ParameterSet ps;
  ps.add("w", {3, 4}, true, ParamInit::kNormal);
  ps.add("norm", {5}, false, ParamInit::kOnes);
  ps.allocate();
  const auto p0 = test::normal_vector(rng, static_cast<size_t>(ps.numel()));
  std::copy(p0.begin(), p0.end(), ps.values().begin());
  AdamW opt(ps);
  StepHyper h;
  h.lr = 0.01f;
  h.beta1 = 0.9f;
  h.beta2 = 0.95f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;

  const size_t n = static_cast<size_t>(ps.numel());
  std::vector<double> p(p0.begin(), p0.end()), m(n, 0.0), v(n, 0.0);
  for (int step = 1; step <= 3; ++step) {
    const auto g = test::normal_vector(rng, n, step == 2 ? 1e-3f : 1.0f);  // tiny gradients too
    std::copy(g.begin(), g.end(), ps.grads().begin());
    opt.step(ps, h);
    EXPECT_EQ(opt.step_count(), step);
    for (size_t i = 0; i < n; ++i) {
      const double wd = i < 12 ? h.weight_decay : 0.0;
      p[i] *= 1.0 - h.lr * wd;
      m[i] = h.beta1 * m[i] + (1 - h.beta1) * g[i];
      v[i] = h.beta2 * v[i] + (1 - h.beta2) * static_cast<double>(g[i]) * g[i];
      const double mhat = m[i] / (1 - std::pow(h.beta1, step));
      const double vhat = v[i] / (1 - std::pow(h.beta2, step));
      p[i] -= h.lr * mhat / (std::sqrt(vhat) + h.eps);
      EXPECT_NEAR(ps.values()[i], p[i], 2e-6 * (1 + std::fabs(p[i]))) << "step " << step << " element " << i;
      EXPECT_NEAR(opt.first_moment()[i], m[i], 1e-6 * (1 + std::fabs(m[i])));
      EXPECT_NEAR(opt.second_moment()[i], v[i], 1e-6 * (1 + std::fabs(v[i])));
    }
  }
}

TEST(AdamW, FirstStepMovesEveryWeightByAboutLr) {
  // With bias correction the first update is lr * g / (|g| + eps): a sign step of size lr.
  ParameterSet ps;
  ps.add("x", {64}, false, ParamInit::kNormal);
  ps.allocate();
  std::mt19937 rng(test::fresh_seed());
  auto g = test::uniform_vector(rng, 64, 1e-3f, 10.0f);  // |g| >> eps
  for (size_t i = 0; i < g.size(); i += 2) g[i] = -g[i];
  std::copy(g.begin(), g.end(), ps.grads().begin());
  AdamW opt(ps);
  StepHyper h;
  h.lr = 0.5f;
  opt.step(ps, h);
  for (size_t i = 0; i < 64; ++i) EXPECT_NEAR(ps.values()[i], g[i] > 0 ? -0.5f : 0.5f, 1e-5) << i;
}

TEST(AdamW, RejectsBadHyperParameters) {
  ParameterSet ps;
  ps.add("x", {4}, true, ParamInit::kNormal);
  ps.allocate();
  AdamW opt(ps);
  StepHyper h;
  h.beta2 = 1.0f;
  EXPECT_THROW(opt.step(ps, h), Error);
  h = StepHyper{};
  h.lr = std::nanf("");
  EXPECT_THROW(opt.step(ps, h), Error);
  h = StepHyper{};
  h.eps = 0.0f;
  EXPECT_THROW(opt.step(ps, h), Error);
  EXPECT_EQ(opt.step_count(), 0);
  EXPECT_THROW(opt.set_step_count(-1), Error);
}

}  // namespace
}  // namespace fp4
