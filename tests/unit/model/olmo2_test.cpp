#include "model/olmo2.h"

#include <gtest/gtest.h>

#include "../ops/gradcheck.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

ModelConfig small_config() {
  ModelConfig cfg;
  cfg.name = "gradcheck";
  cfg.n_layers = 2;
  cfg.d_model = 16;
  cfg.n_heads = 2;
  cfg.d_ff = 24;
  cfg.vocab_size = 40;
  cfg.vocab_real = 37;
  cfg.max_seq_len = 8;
  cfg.init_std = 0.3f;  // large weights: every path of the model carries a visible gradient
  cfg.z_loss = 1e-2f;   // large enough for its gradient to show in the finite differences
  return cfg;
}

// The whole model's gradient (every parameter tensor, a few random coordinates each) against
// central differences of the summed loss.
TEST(Olmo2Model, GradientMatchesFiniteDifferences) {
  const uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = small_config();
  Olmo2Model model(cfg, Recipe{});
  model.init_parameters(seed);
  auto& ps = model.params();
  // Norm weights away from 1, so their gradients are not a special case.
  for (int i = 0; i < ps.size(); ++i)
    if (ps.at(i).init == ParamInit::kOnes) {
      const auto w = test::normal_vector(rng, ps.value(i).size(), 0.2f, 1.0f);
      std::copy(w.begin(), w.end(), ps.value(i).begin());
    }
  const int b = 2, t = 6;
  std::uniform_int_distribution<int> tok(0, cfg.vocab_real - 1);
  std::vector<int32_t> tokens(b * t), targets(b * t);
  for (auto& x : tokens) x = tok(rng);
  for (auto& x : targets) x = tok(rng);
  targets[4] = -1;

  auto loss = [&] {
    model.forward(tokens.data(), b, t);
    return model.loss(targets.data(), false, 0.0f).loss;
  };
  ps.zero_grads();
  model.forward(tokens.data(), b, t);
  model.loss(targets.data(), true, 1.0f);
  model.backward();
  const std::vector<float> grads(ps.grads().begin(), ps.grads().end());
  for (int i = 0; i < ps.size(); ++i) {
    const auto& p = ps.at(i);
    const std::span<const float> g(grads.data() + p.offset, static_cast<size_t>(p.info.numel()));
    test::expect_gradient(ps.value(i), g, loss, rng, p.info.name,
                          {.max_coords = 8, .step = 3e-3, .norm_tol = 2e-2});
  }
}

TEST(Olmo2Model, ParameterOrderAndWeightDecayFlags) {
  const ModelConfig cfg = small_config();
  Olmo2Model model(cfg, Recipe{});
  const auto& ps = model.params();
  std::vector<std::string> names;
  for (int i = 0; i < ps.size(); ++i) names.push_back(ps.at(i).info.name);
  const std::vector<std::string> want_block = {"attn.wqkv", "attn.q_norm",   "attn.k_norm", "attn.wo",
                                               "attn_norm", "mlp.w_gate_up", "mlp.w_down",  "mlp_norm"};
  ASSERT_EQ(names.size(), 1 + 2 * want_block.size() + 2);
  EXPECT_EQ(names.front(), "embed");
  for (int l = 0; l < 2; ++l)
    for (size_t j = 0; j < want_block.size(); ++j)
      EXPECT_EQ(names[1 + l * want_block.size() + j], "blocks." + std::to_string(l) + "." + want_block[j]);
  EXPECT_EQ(names[names.size() - 2], "final_norm");
  EXPECT_EQ(names.back(), "lm_head");
  EXPECT_EQ(ps.numel(), cfg.parameter_count());
  for (int i = 0; i < ps.size(); ++i) {
    const auto& info = ps.at(i).info;
    const bool matrix = info.shape.size() == 2;
    EXPECT_EQ(info.weight_decay, matrix && info.name != "embed") << info.name;
    EXPECT_EQ(ps.at(i).init == ParamInit::kOnes, !matrix) << info.name;
  }
}

TEST(Olmo2Model, InitIsTruncatedNormalAndDependsOnTheSeed) {
  ModelConfig cfg = small_config();
  cfg.init_std = 0.02f;
  Olmo2Model a(cfg, Recipe{}), b(cfg, Recipe{}), c(cfg, Recipe{});
  a.init_parameters(7);
  b.init_parameters(7);
  c.init_parameters(8);
  const auto va = a.params().values(), vb = b.params().values(), vc = c.params().values();
  EXPECT_TRUE(std::equal(va.begin(), va.end(), vb.begin()));
  EXPECT_FALSE(std::equal(va.begin(), va.end(), vc.begin()));
  const int wqkv = a.params().require("blocks.0.attn.wqkv");
  const int emb = a.params().require("embed");
  // Different tensors draw different streams.
  EXPECT_NE(a.params().value(wqkv)[0], a.params().value(emb)[0]);
  double s = 0, s2 = 0, amax = 0;
  int64_t n = 0;
  for (int i = 0; i < a.params().size(); ++i) {
    if (a.params().at(i).init == ParamInit::kOnes) {
      for (float x : a.params().value(i)) EXPECT_EQ(x, 1.0f);
      continue;
    }
    for (float x : a.params().value(i)) {
      s += x;
      s2 += static_cast<double>(x) * x;
      amax = std::max(amax, std::fabs(static_cast<double>(x)));
      ++n;
    }
  }
  const double mean = s / n, sd = std::sqrt(s2 / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 5e-4);
  // A normal truncated at 3 sigma has std 0.9866 sigma.
  EXPECT_NEAR(sd, 0.02 * 0.9866, 0.02 * 0.03);
  EXPECT_LE(amax, 3 * 0.02 + 1e-7);
  EXPECT_GT(amax, 2.5 * 0.02);
}

// parameter_layout_recipe keeps what decides the layout and initial values: with LoRA-SVD the model built
// from it has the full recipe's tensors (the factors included) and the same initial bits (the initial
// realignment runs through the same linears); without LoRA-SVD it is the plain layout.
TEST(Olmo2Model, LayoutRecipeGivesTheFullRecipesParametersAndInitialValues) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig cfg = model_preset("tiny");
  const std::vector<std::pair<Recipe, bool>> cases = {
      {load_recipe("tetrajet-v2-lorasvd", {"lora_svd.rank=4"}), true},
      {load_recipe("tetrajet-v2", {}), false}};
  for (const auto& [full, factors] : cases) {
    SCOPED_TRACE(full.name);
    Olmo2Model a(cfg, full), b(cfg, parameter_layout_recipe(full));
    a.init_parameters(seed);
    b.init_parameters(seed);
    ASSERT_EQ(a.params().size(), b.params().size());
    bool has_factors = false;
    for (int i = 0; i < a.params().size(); ++i) {
      EXPECT_EQ(a.params().at(i).info.name, b.params().at(i).info.name);
      EXPECT_EQ(a.params().at(i).info.shape, b.params().at(i).info.shape);
      has_factors |= a.params().at(i).info.name.find(".lora_l1") != std::string::npos;
    }
    EXPECT_EQ(has_factors, factors);
    const auto va = a.params().values(), vb = b.params().values();
    EXPECT_TRUE(std::equal(va.begin(), va.end(), vb.begin(), vb.end()));
  }
}

}  // namespace
}  // namespace fp4
