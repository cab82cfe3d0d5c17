#include <gtest/gtest.h>

#include "core/error.h"
#include "gradcheck.h"
#include "ops/ops.h"

namespace fp4 {
namespace {

struct Case {
  int n, v, v_real;
  float z_loss;
};

class CrossEntropyTest : public ::testing::TestWithParam<Case> {};

std::vector<int32_t> random_targets(std::mt19937& rng, int n, int v_real) {
  std::uniform_int_distribution<int> pick(0, v_real - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = pick(rng);
  if (n > 2) t[1] = -1;  // ignored
  if (n > 3) t[3] = -100;
  return t;
}

TEST_P(CrossEntropyTest, LossMatchesDefinitionOverTheRealVocabulary) {
  const Case c = GetParam();
  std::mt19937 rng(test::fresh_seed());
  const auto logits = test::normal_vector(rng, static_cast<size_t>(c.n) * c.v, 3.0f);
  const auto targets = random_targets(rng, c.n, c.v_real);
  const auto s =
      cpu::cross_entropy(nullptr, logits.data(), targets.data(), c.n, c.v, c.v_real, c.z_loss, 1.0f);
  double loss = 0, ce = 0;
  int64_t tokens = 0;
  for (int i = 0; i < c.n; ++i) {
    if (targets[i] < 0) continue;
    double sum = 0;
    for (int j = 0; j < c.v_real; ++j) sum += std::exp(static_cast<double>(logits[i * c.v + j]));
    const double lse = std::log(sum);
    ce += lse - logits[i * c.v + targets[i]];
    loss += lse - logits[i * c.v + targets[i]] + c.z_loss * lse * lse;
    ++tokens;
  }
  EXPECT_EQ(s.tokens, tokens);
  EXPECT_NEAR(s.ce, ce, 1e-9 * (1 + std::fabs(ce)));
  EXPECT_NEAR(s.loss, loss, 1e-9 * (1 + std::fabs(loss)));
}

TEST_P(CrossEntropyTest, GradientMatchesFiniteDifferencesAndIgnoresPaddingAndMaskedRows) {
  const Case c = GetParam();
  const uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto logits = test::normal_vector(rng, static_cast<size_t>(c.n) * c.v, 2.0f);
  const auto targets = random_targets(rng, c.n, c.v_real);
  const float grad_scale = 0.75f;
  std::vector<float> dlogits(logits.size(), 5.0f);
  cpu::cross_entropy(dlogits.data(), logits.data(), targets.data(), c.n, c.v, c.v_real, c.z_loss, grad_scale);
  for (int i = 0; i < c.n; ++i)
    for (int j = 0; j < c.v; ++j) {
      if (targets[i] < 0 || j >= c.v_real) {
        EXPECT_EQ(dlogits[i * c.v + j], 0.0f) << i << "," << j;
      }
    }
  auto loss = [&] {
    return grad_scale *
           cpu::cross_entropy(nullptr, logits.data(), targets.data(), c.n, c.v, c.v_real, c.z_loss, 1.0f)
               .loss;
  };
  test::expect_gradient(logits, dlogits, loss, rng, "cross_entropy dlogits", {.max_coords = 200});

  // In place (dlogits aliasing logits) gives the same gradient.
  auto inplace = logits;
  cpu::cross_entropy(inplace.data(), inplace.data(), targets.data(), c.n, c.v, c.v_real, c.z_loss,
                     grad_scale);
  for (size_t i = 0; i < inplace.size(); ++i) EXPECT_EQ(inplace[i], dlogits[i]);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CrossEntropyTest,
                         ::testing::Values(Case{1, 4, 4, 0.0f}, Case{6, 11, 11, 1e-5f},
                                           Case{7, 20, 13, 0.05f}, Case{5, 64, 57, 1e-2f}));

TEST(CrossEntropy, LargeLogitsStayFinite) {
  std::vector<float> logits = {1000.0f, -1000.0f, 999.0f, 0.0f};
  std::vector<int32_t> targets = {2};
  std::vector<float> d(4);
  const auto s = cpu::cross_entropy(d.data(), logits.data(), targets.data(), 1, 4, 4, 0.0f, 1.0f);
  EXPECT_NEAR(s.ce, std::log1p(std::exp(1.0)), 1e-6);
  for (float x : d) EXPECT_TRUE(std::isfinite(x));
}

TEST(CrossEntropy, TargetOutsideTheRealVocabularyThrows) {
  std::vector<float> logits(2 * 8, 0.0f);
  std::vector<int32_t> targets = {1, 6};
  try {
    cpu::cross_entropy(nullptr, logits.data(), targets.data(), 2, 8, 6, 0.0f, 1.0f);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target 6 at row 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4
