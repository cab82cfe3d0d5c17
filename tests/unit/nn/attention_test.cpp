// The attention sublayer in full precision on random shapes: causal (an output row never moves when later
// inputs change; each probability row sums to 1 over positions <= its own), and its backward is the
// gradient of <y, r> (dx and every parameter, against central differences).
#include "nn/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "../ops/gradcheck.h"
#include "nn/parameters.h"
#include "nn/workspace.h"
#include "recipe/recipe.h"

namespace fp4 {
namespace {

struct AttnShapes {
  ModelConfig cfg;
  int b = 1, t = 1, n = 1;
};

// min_t 2 for the gradients: with one position the softmax is constant, so q and k get no gradient.
AttnShapes random_shapes(std::mt19937& rng, int min_t = 1) {
  AttnShapes s;
  s.cfg.n_heads = 1 + static_cast<int>(rng() % 3);
  s.cfg.d_model = s.cfg.n_heads * 2 * (1 + static_cast<int>(rng() % 4));
  s.cfg.rope_theta = 10000.0f;
  s.b = 1 + static_cast<int>(rng() % 2);
  s.t = min_t + static_cast<int>(rng() % 6);
  s.n = s.b * s.t;
  return s;
}

void randomize(ParameterSet& ps, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 0.4f);
  for (auto& v : ps.values()) v = d(rng);
}

TEST(Attention, IsCausalAndItsProbabilitiesAreRows) {
  std::mt19937 rng(test::fresh_seed());
  for (int trial = 0; trial < 20; ++trial) {
    const AttnShapes s = random_shapes(rng);
    const int d = s.cfg.d_model, t = s.t;
    ParameterSet ps;
    Attention att(ps, "blocks.0.attn", s.cfg, Recipe{}, 0);
    ps.allocate();
    randomize(ps, rng);
    att.resize(s.b, t);
    RopeTables rope;
    rope.resize(s.cfg, t);
    auto x = test::normal_vector(rng, static_cast<size_t>(s.n * d));
    std::vector<float> y(x.size()), y2(x.size());
    att.forward(x.data(), y.data(), rope);
    const Tensor& p = att.probs();
    ASSERT_EQ(p.numel(), int64_t{s.b} * s.cfg.n_heads * t * t);
    for (int64_t row = 0; row < p.numel() / t; ++row) {
      const int q = static_cast<int>(row % t);
      double sum = 0;
      for (int k = 0; k < t; ++k) {
        const float v = p.data()[row * t + k];
        if (k > q) ASSERT_EQ(v, 0.0f) << "row " << row << " attends to the future position " << k;
        ASSERT_GE(v, 0.0f);
        sum += v;
      }
      ASSERT_NEAR(sum, 1.0, 1e-5) << "row " << row;
    }
    // Change the last position of every sequence: only that position's output may move.
    for (int bi = 0; bi < s.b; ++bi)
      for (int i = 0; i < d; ++i) x[(bi * t + t - 1) * d + i] += 1.0f;
    att.forward(x.data(), y2.data(), rope);
    for (int bi = 0; bi < s.b; ++bi)
      for (int pos = 0; pos + 1 < t; ++pos)
        for (int i = 0; i < d; ++i) ASSERT_EQ(y2[(bi * t + pos) * d + i], y[(bi * t + pos) * d + i]);
  }
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  const uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 3; ++trial) {
    const AttnShapes s = random_shapes(rng, 2);
    const int d = s.cfg.d_model;
    ParameterSet ps;
    Attention att(ps, "blocks.0.attn", s.cfg, Recipe{}, 0);
    ps.allocate();
    randomize(ps, rng);
    att.resize(s.b, s.t);
    RopeTables rope;
    rope.resize(s.cfg, s.t);
    Workspace ws;
    ws.resize(s.cfg, s.b, s.t);
    auto x = test::normal_vector(rng, static_cast<size_t>(s.n * d));
    const auto r = test::normal_vector(rng, x.size());
    std::vector<float> y(x.size()), dx(x.size());
    auto loss = [&] {
      att.forward(x.data(), y.data(), rope);
      return test::project(y, r);
    };
    loss();
    att.backward(r.data(), dx.data(), false, rope, ws);
    const std::vector<float> grads(ps.grads().begin(), ps.grads().end());
    test::expect_gradient(x, dx, loss, rng, "dx");
    for (int i = 0; i < ps.size(); ++i) {
      const auto g = std::span<const float>(grads).subspan(static_cast<size_t>(ps.at(i).offset),
                                                           static_cast<size_t>(ps.at(i).info.numel()));
      test::expect_gradient(ps.value(i), g, loss, rng, ps.at(i).info.name);
    }
  }
}

}  // namespace
}  // namespace fp4
