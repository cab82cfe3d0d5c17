// The MLP sublayer in full precision against a double-precision reference on random shapes: y = W_down
// (silu(g) * u) with [g; u] = W_gate_up x, and its backward (dx overwritten or accumulated, dW added).
#include "nn/mlp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "nn/parameters.h"
#include "nn/workspace.h"
#include "nn_test_util.h"
#include "recipe/recipe.h"

namespace fp4 {
namespace {

using fp4::testing::gaussian;

double silu(double g) {
  return g / (1 + std::exp(-g));
}

TEST(Mlp, ForwardAndBackwardMatchADoubleReference) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 8; ++trial) {
    ModelConfig cfg;
    cfg.d_model = 4 * (1 + static_cast<int>(rng() % 6));
    cfg.d_ff = 1 + static_cast<int>(rng() % 24);
    cfg.n_heads = 1;
    const int b = 1 + static_cast<int>(rng() % 3), t = 1 + static_cast<int>(rng() % 5), n = b * t;
    const int d = cfg.d_model, ff = cfg.d_ff;
    ParameterSet ps;
    Mlp mlp(ps, "blocks.0.mlp", cfg, Recipe{}, 0);
    ps.allocate();
    const int igu = ps.require("blocks.0.mlp.w_gate_up"), idn = ps.require("blocks.0.mlp.w_down");
    for (auto& v : ps.values()) v = std::normal_distribution<float>(0.0f, 0.3f)(rng);
    const auto wgu = ps.value(igu), wdn = ps.value(idn);
    const auto x = gaussian(static_cast<size_t>(n * d), rng, 1.0f),
               dy = gaussian(static_cast<size_t>(n * d), rng, 1.0f);
    mlp.resize(b, t);
    Workspace ws;
    ws.resize(cfg, b, t);
    std::vector<float> y(static_cast<size_t>(n * d));
    mlp.forward(x.data(), y.data());
    auto dx = gaussian(static_cast<size_t>(n * d), rng, 1.0f);
    const auto dx0 = dx;
    const bool accumulate = trial % 2 == 1;
    mlp.backward(dy.data(), dx.data(), accumulate, ws);

    std::vector<double> dgu_w(static_cast<size_t>(2 * ff * d), 0.0), ddn_w(static_cast<size_t>(d * ff), 0.0);
    for (int r = 0; r < n; ++r) {
      std::vector<double> gu(2 * ff, 0.0), act(ff), dact(ff, 0.0), dgu(2 * ff);
      for (int o = 0; o < 2 * ff; ++o)
        for (int i = 0; i < d; ++i) gu[o] += double(wgu[o * d + i]) * x[r * d + i];
      for (int j = 0; j < ff; ++j) act[j] = silu(gu[j]) * gu[ff + j];
      for (int o = 0; o < d; ++o) {
        double yo = 0;
        for (int j = 0; j < ff; ++j) yo += double(wdn[o * ff + j]) * act[j];
        ASSERT_NEAR(y[r * d + o], yo, 1e-4 * (1 + std::fabs(yo))) << "y[" << r << "," << o << "]";
        for (int j = 0; j < ff; ++j) {
          dact[j] += double(dy[r * d + o]) * wdn[o * ff + j];
          ddn_w[o * ff + j] += double(dy[r * d + o]) * act[j];
        }
      }
      for (int j = 0; j < ff; ++j) {
        const double g = gu[j], s = 1 / (1 + std::exp(-g));
        dgu[j] = dact[j] * gu[ff + j] * (s + g * s * (1 - s));  // d silu / dg
        dgu[ff + j] = dact[j] * silu(g);
      }
      for (int i = 0; i < d; ++i) {
        double dxi = accumulate ? dx0[r * d + i] : 0.0;
        for (int o = 0; o < 2 * ff; ++o) dxi += dgu[o] * wgu[o * d + i];
        ASSERT_NEAR(dx[r * d + i], dxi, 1e-4 * (1 + std::fabs(dxi))) << "dx[" << r << "," << i << "]";
      }
      for (int o = 0; o < 2 * ff; ++o)
        for (int i = 0; i < d; ++i) dgu_w[o * d + i] += dgu[o] * x[r * d + i];
    }
    const auto ggu = ps.grad(igu), gdn = ps.grad(idn);
    for (size_t k = 0; k < dgu_w.size(); ++k)
      ASSERT_NEAR(ggu[k], dgu_w[k], 1e-4 * (1 + std::fabs(dgu_w[k]))) << k;
    for (size_t k = 0; k < ddn_w.size(); ++k)
      ASSERT_NEAR(gdn[k], ddn_w[k], 1e-4 * (1 + std::fabs(ddn_w[k]))) << k;
  }
}

TEST(Mlp, RegistersItsTwoWeights) {
  ModelConfig cfg;
  ParameterSet ps;
  const Mlp mlp(ps, "blocks.3.mlp", cfg, Recipe{}, 3);
  ASSERT_EQ(ps.size(), 2);
  EXPECT_EQ(ps.at(0).info.name, "blocks.3.mlp.w_gate_up");
  EXPECT_EQ(ps.at(0).info.shape, (std::vector<int64_t>{2 * cfg.d_ff, cfg.d_model}));
  EXPECT_EQ(ps.at(1).info.name, "blocks.3.mlp.w_down");
  EXPECT_EQ(ps.at(1).info.shape, (std::vector<int64_t>{cfg.d_model, cfg.d_ff}));
}

}  // namespace
}  // namespace fp4
