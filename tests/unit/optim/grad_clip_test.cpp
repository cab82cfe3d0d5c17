#include "optim/grad_clip.h"

#include <gtest/gtest.h>

#include "../ops/gradcheck.h"

namespace fp4 {
namespace {

ParameterSet two_tensors(std::mt19937& rng, float scale) {
  ParameterSet ps;
  ps.add("a", {3, 5}, true, ParamInit::kNormal);
  ps.add("b", {7}, false, ParamInit::kOnes);
  ps.allocate();
  const auto g = test::normal_vector(rng, static_cast<size_t>(ps.numel()), scale);
  std::copy(g.begin(), g.end(), ps.grads().begin());
  return ps;
}

TEST(GradClip, NormCoversEveryTensor) {
  std::mt19937 rng(test::fresh_seed());
  auto ps = two_tensors(rng, 1.0f);
  double ss = 0;
  for (float g : ps.grads()) ss += static_cast<double>(g) * g;
  EXPECT_NEAR(global_grad_norm(ps), std::sqrt(ss), 1e-12 * std::sqrt(ss));
}

TEST(GradClip, ScalesDownToMaxNormOnlyWhenAbove) {
  std::mt19937 rng(test::fresh_seed());
  auto ps = two_tensors(rng, 10.0f);
  const std::vector<float> g0(ps.grads().begin(), ps.grads().end());
  const double norm = global_grad_norm(ps);
  ASSERT_GT(norm, 1.0);
  const float c = clip_grad_norm(ps, norm, 1.0f);
  EXPECT_NEAR(c, 1.0 / (norm + 1e-6), 1e-7);
  EXPECT_NEAR(global_grad_norm(ps), 1.0, 1e-5);
  for (size_t i = 0; i < g0.size(); ++i) EXPECT_FLOAT_EQ(ps.grads()[i], g0[i] * c);

  // Below the limit, and with clipping disabled, nothing changes.
  const std::vector<float> g1(ps.grads().begin(), ps.grads().end());
  EXPECT_EQ(clip_grad_norm(ps, global_grad_norm(ps), 2.0f), 1.0f);
  EXPECT_EQ(clip_grad_norm(ps, 1e9, 0.0f), 1.0f);
  EXPECT_TRUE(std::equal(g1.begin(), g1.end(), ps.grads().begin()));
}

}  // namespace
}  // namespace fp4
