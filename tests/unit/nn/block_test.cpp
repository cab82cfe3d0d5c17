// One OLMo-2 block in full precision: its parameters in the documented order and shapes, and its backward
// is the gradient of <out, r> (dx and every parameter, against central differences) on random shapes.
#include "nn/block.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "../ops/gradcheck.h"
#include "nn/parameters.h"
#include "nn/workspace.h"
#include "recipe/recipe.h"

namespace fp4 {
namespace {

// A step of 3e-3: the two post-sublayer RMSNorms make <out, r> strongly curved at the default 1e-2, while
// much smaller steps let the float forward's rounding swamp the small gradients of the QK norms (hence the
// looser tolerances: a wrong gradient is off by far more).
const test::GradCheckOptions kCheck{48, 3e-3, 3e-2, 8e-2};

TEST(Block, RegistersItsParametersInOrder) {
  ModelConfig cfg;
  ParameterSet ps;
  const Block block(ps, cfg, Recipe{}, 5);
  EXPECT_EQ(block.name(), "blocks.5");
  const int64_t d = cfg.d_model, ff = cfg.d_ff;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> want = {
      {"attn.wqkv", {3 * d, d}}, {"attn.q_norm", {d}},           {"attn.k_norm", {d}},    {"attn.wo", {d, d}},
      {"attn_norm", {d}},        {"mlp.w_gate_up", {2 * ff, d}}, {"mlp.w_down", {d, ff}}, {"mlp_norm", {d}}};
  ASSERT_EQ(ps.size(), static_cast<int>(want.size()));
  for (int i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(ps.at(i).info.name, "blocks.5." + want[i].first);
    EXPECT_EQ(ps.at(i).info.shape, want[i].second) << want[i].first;
  }
}

TEST(Block, BackwardMatchesFiniteDifferences) {
  const uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 2; ++trial) {
    ModelConfig cfg;
    cfg.n_heads = 1 + static_cast<int>(rng() % 2);
    cfg.d_model = cfg.n_heads * 4;
    cfg.d_ff = 3 + static_cast<int>(rng() % 6);
    cfg.rope_theta = 10000.0f;
    const int b = 1 + static_cast<int>(rng() % 2), t = 2 + static_cast<int>(rng() % 4), n = b * t;
    ParameterSet ps;
    Block block(ps, cfg, Recipe{}, 0);
    ps.allocate();
    std::normal_distribution<float> w(0.0f, 1.0f);  // sublayer outputs far from 0, where the norms bend least
    for (int i = 0; i < ps.size(); ++i)
      for (auto& v : ps.value(i)) v = ps.at(i).info.shape.size() == 1 ? 1.0f + 0.1f * w(rng) : w(rng);
    block.resize(b, t);
    RopeTables rope;
    rope.resize(cfg, t);
    Workspace ws;
    ws.resize(cfg, b, t);
    auto x = test::normal_vector(rng, static_cast<size_t>(n * cfg.d_model));
    const auto r = test::normal_vector(rng, x.size());
    std::vector<float> out(x.size()), dx(x.size());
    auto loss = [&] {
      block.forward(x.data(), out.data(), rope);
      return test::project(out, r);
    };
    loss();
    block.backward(r.data(), dx.data(), rope, ws);
    const std::vector<float> grads(ps.grads().begin(), ps.grads().end());
    test::expect_gradient(x, dx, loss, rng, "dx", kCheck);
    for (int i = 0; i < ps.size(); ++i) {
      const auto g = std::span<const float>(grads).subspan(static_cast<size_t>(ps.at(i).offset),
                                                           static_cast<size_t>(ps.at(i).info.numel()));
      test::expect_gradient(ps.value(i), g, loss, rng, ps.at(i).info.name, kCheck);
    }
  }
}

}  // namespace
}  // namespace fp4
