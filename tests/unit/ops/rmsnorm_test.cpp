#include <gtest/gtest.h>

#include "gradcheck.h"
#include "ops/ops.h"

namespace fp4 {
namespace {

using test::expect_gradient;

// rows n, width c, input row stride ldx >= c, output row stride ldo >= c
struct Case {
  int n, c, ldx, ldo;
  float eps, x_std;
};

class RmsNormTest : public ::testing::TestWithParam<Case> {};

TEST_P(RmsNormTest, ForwardMatchesDefinitionAndBackwardMatchesFiniteDifferences) {
  const Case cs = GetParam();
  const uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto x = test::normal_vector(rng, static_cast<size_t>(cs.n) * cs.ldx, cs.x_std);
  auto w = test::normal_vector(rng, static_cast<size_t>(cs.c), 0.3f, 1.0f);
  const auto r = test::uniform_vector(rng, static_cast<size_t>(cs.n) * cs.ldo);
  std::vector<float> out(static_cast<size_t>(cs.n) * cs.ldo, 0.0f), rstd(static_cast<size_t>(cs.n));

  auto run = [&] {
    cpu::rmsnorm_forward(out.data(), cs.ldo, rstd.data(), x.data(), cs.ldx, w.data(), cs.n, cs.c, cs.eps);
    double s = 0;  // only the c used columns count
    for (int i = 0; i < cs.n; ++i)
      for (int j = 0; j < cs.c; ++j) s += static_cast<double>(out[i * cs.ldo + j]) * r[i * cs.ldo + j];
    return s;
  };
  run();
  for (int i = 0; i < cs.n; ++i) {
    double ms = 0;
    for (int j = 0; j < cs.c; ++j) ms += static_cast<double>(x[i * cs.ldx + j]) * x[i * cs.ldx + j];
    const double rs = 1.0 / std::sqrt(ms / cs.c + cs.eps);
    EXPECT_NEAR(rstd[i], rs, 1e-6 * rs);
    for (int j = 0; j < cs.c; ++j)
      EXPECT_NEAR(out[i * cs.ldo + j], x[i * cs.ldx + j] * rs * w[j],
                  1e-5 * (1 + std::fabs(x[i * cs.ldx + j] * rs)));
  }

  // dx lands in a buffer with stride ldx; columns beyond c must stay untouched.
  const float kSentinel = 12345.0f;
  std::vector<float> dx(x.size(), kSentinel), dw(w.size(), 0.0f);
  cpu::rmsnorm_backward(dx.data(), cs.ldx, dw.data(), r.data(), cs.ldo, x.data(), cs.ldx, w.data(),
                        rstd.data(), cs.n, cs.c, false);
  for (int i = 0; i < cs.n; ++i)
    for (int j = cs.c; j < cs.ldx; ++j) EXPECT_EQ(dx[i * cs.ldx + j], kSentinel);
  // The check perturbs x through a compact copy of the used columns.
  std::vector<float> xc, dxc;
  for (int i = 0; i < cs.n; ++i)
    for (int j = 0; j < cs.c; ++j) {
      xc.push_back(x[i * cs.ldx + j]);
      dxc.push_back(dx[i * cs.ldx + j]);
    }
  auto loss_xc = [&] {
    for (int i = 0; i < cs.n; ++i)
      for (int j = 0; j < cs.c; ++j) x[i * cs.ldx + j] = xc[i * cs.c + j];
    return run();
  };
  expect_gradient(xc, dxc, loss_xc, rng, "rmsnorm dx");
  loss_xc();
  expect_gradient(w, dw, run, rng, "rmsnorm dw");

  // accumulate_dx adds, dw always accumulates.
  std::vector<float> dx2(x.size(), 1.0f), dw2(w.size(), 2.0f);
  cpu::rmsnorm_backward(dx2.data(), cs.ldx, dw2.data(), r.data(), cs.ldo, x.data(), cs.ldx, w.data(),
                        rstd.data(), cs.n, cs.c, true);
  for (int i = 0; i < cs.n; ++i)
    for (int j = 0; j < cs.c; ++j) EXPECT_FLOAT_EQ(dx2[i * cs.ldx + j], dx[i * cs.ldx + j] + 1.0f);
  for (int j = 0; j < cs.c; ++j) EXPECT_NEAR(dw2[j], dw[j] + 2.0f, 1e-5);  // summed from 2, not 0
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormTest,
                         ::testing::Values(Case{1, 8, 8, 8, 1e-6f, 1.0f}, Case{5, 24, 40, 24, 1e-6f, 1.0f},
                                           Case{7, 16, 16, 48, 1e-6f, 3.0f},
                                           // tiny inputs: eps dominates the mean square
                                           Case{4, 12, 12, 12, 1e-2f, 0.05f}));

}  // namespace
}  // namespace fp4
