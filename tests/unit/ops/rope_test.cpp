#include <gtest/gtest.h>

#include "gradcheck.h"
#include "ops/ops.h"

namespace fp4 {
namespace {

struct Rope {
  int b, t, heads, hd, ld;
  float theta;
};

std::vector<float> tables(const Rope& p, bool want_sin) {
  std::vector<float> c(static_cast<size_t>(p.t) * p.hd / 2), s(c.size());
  cpu::rope_tables(c.data(), s.data(), p.t, p.hd, p.theta);
  return want_sin ? s : c;
}

TEST(Rope, ForwardMatchesRotateHalfDefinition) {
  const Rope p{2, 7, 3, 8, 30, 500000.0f};
  std::mt19937 rng(test::fresh_seed());
  auto x = test::normal_vector(rng, static_cast<size_t>(p.b) * p.t * p.ld);
  const auto x0 = x;
  const auto c = tables(p, false), s = tables(p, true);
  cpu::rope_forward(x.data(), p.ld, c.data(), s.data(), p.b, p.t, p.heads, p.hd);
  const int half = p.hd / 2;
  for (int row = 0; row < p.b * p.t; ++row) {
    const int pos = row % p.t;
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < half; ++i) {
        const double ang = pos * std::pow(static_cast<double>(p.theta), -2.0 * i / p.hd);
        const double a = x0[row * p.ld + h * p.hd + i], bb = x0[row * p.ld + h * p.hd + i + half];
        EXPECT_NEAR(x[row * p.ld + h * p.hd + i], a * std::cos(ang) - bb * std::sin(ang), 1e-5);
        EXPECT_NEAR(x[row * p.ld + h * p.hd + i + half], bb * std::cos(ang) + a * std::sin(ang), 1e-5);
      }
    for (int j = p.heads * p.hd; j < p.ld; ++j)
      EXPECT_EQ(x[row * p.ld + j], x0[row * p.ld + j]);  // untouched
  }
}

TEST(Rope, DotProductDependsOnlyOnRelativePosition) {
  const Rope p{1, 12, 1, 16, 16, 10000.0f};  // a small theta makes every frequency pair matter
  std::mt19937 rng(test::fresh_seed());
  const auto q = test::normal_vector(rng, 16), k = test::normal_vector(rng, 16);
  const auto c = tables(p, false), s = tables(p, true);
  auto rotated_at = [&](const std::vector<float>& v, int pos) {
    std::vector<float> buf(12 * 16, 0.0f);
    std::copy(v.begin(), v.end(), buf.begin() + pos * 16);
    cpu::rope_forward(buf.data(), 16, c.data(), s.data(), 1, 12, 1, 16);
    return std::vector<float>(buf.begin() + pos * 16, buf.begin() + pos * 16 + 16);
  };
  auto dot = [](const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d += static_cast<double>(a[i]) * b[i];
    return d;
  };
  const double d1 = dot(rotated_at(q, 5), rotated_at(k, 2));
  const double d2 = dot(rotated_at(q, 11), rotated_at(k, 8));
  const double d0 = dot(q, k);
  EXPECT_NEAR(d1, d2, 1e-4);
  EXPECT_GT(std::fabs(d1 - d0), 1e-3);  // a shift of 3 positions does rotate the pair
  EXPECT_NEAR(dot(rotated_at(q, 0), rotated_at(k, 0)), d0, 1e-5);  // position 0 is the identity
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  const uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const Rope p{2, 5, 2, 6, 26, 500000.0f};
  const auto c = tables(p, false), s = tables(p, true);
  auto x = test::normal_vector(rng, static_cast<size_t>(p.b) * p.t * p.ld);
  const auto r = test::uniform_vector(rng, x.size());
  auto loss = [&] {
    auto y = x;
    cpu::rope_forward(y.data(), p.ld, c.data(), s.data(), p.b, p.t, p.heads, p.hd);
    return test::project(y, r);
  };
  auto dx = r;
  cpu::rope_backward(dx.data(), p.ld, c.data(), s.data(), p.b, p.t, p.heads, p.hd);
  // Columns outside the heads pass the gradient through unchanged (identity there).
  test::expect_gradient(x, dx, loss, rng, "rope dx", {.max_coords = 260});
}

}  // namespace
}  // namespace fp4
