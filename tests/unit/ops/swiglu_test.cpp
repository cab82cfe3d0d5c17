#include <gtest/gtest.h>

#include "gradcheck.h"
#include "ops/ops.h"

namespace fp4 {
namespace {

TEST(SwiGlu, ForwardMatchesDefinition) {
  std::mt19937 rng(test::fresh_seed());
  const int n = 6, f = 10;
  auto gu = test::normal_vector(rng, static_cast<size_t>(n) * 2 * f, 3.0f);
  gu[0] = 0.0f;    // silu(0) = 0
  gu[1] = -40.0f;  // saturated negative gate
  gu[2] = 40.0f;   // saturated positive gate: silu(g) ~ g
  std::vector<float> out(static_cast<size_t>(n) * f);
  cpu::swiglu_forward(out.data(), gu.data(), n, f);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < f; ++j) {
      const double g = gu[i * 2 * f + j], u = gu[i * 2 * f + f + j];
      const double want = g / (1.0 + std::exp(-g)) * u;
      EXPECT_NEAR(out[i * f + j], want, 1e-5 * (1 + std::fabs(want)));
    }
}

TEST(SwiGlu, BackwardMatchesFiniteDifferences) {
  const uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (const auto& [n, f] : {std::pair{1, 3}, std::pair{7, 16}}) {
    auto gu = test::normal_vector(rng, static_cast<size_t>(n) * 2 * f, 2.0f);
    const auto r = test::uniform_vector(rng, static_cast<size_t>(n) * f);
    std::vector<float> dgu(gu.size());
    cpu::swiglu_backward(dgu.data(), r.data(), gu.data(), n, f);
    auto loss = [&] {
      std::vector<float> out(static_cast<size_t>(n) * f);
      cpu::swiglu_forward(out.data(), gu.data(), n, f);
      return test::project(out, r);
    };
    test::expect_gradient(gu, dgu, loss, rng, "swiglu dgu n=" + std::to_string(n), {.max_coords = 100});
  }
}

}  // namespace
}  // namespace fp4
