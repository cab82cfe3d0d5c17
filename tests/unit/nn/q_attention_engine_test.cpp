// Q-Attn in the CPU engine: the tiny model trains with attention.q_attn on (alone and with the NVFP4
// linears of TetraJet-v2), the switch really changes the attention numerics, and a head_dim that NVFP4
// blocks cannot cover is refused when the model is built.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>

#include "core/error.h"
#include "model/cpu_engine.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

Batch next_token_batch(const ModelConfig& cfg, int b, int t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_real - 1);
  Batch batch{b, t, {}, {}};
  for (int i = 0; i < b * t; ++i) batch.tokens.push_back(tok(rng));
  for (int r = 0; r < b; ++r)
    for (int i = 0; i < t; ++i) batch.targets.push_back(i + 1 < t ? batch.tokens[size_t(r * t + i + 1)] : -1);
  return batch;
}

std::vector<double> losses(const Recipe& recipe, uint32_t seed, int steps, int b, int t) {
  const ModelConfig cfg = model_preset("tiny");
  auto engine = make_cpu_engine(cfg, recipe, seed);
  const std::vector<Batch> mb = {next_token_batch(cfg, b, t, seed)};
  StepHyper hyper;
  hyper.lr = 3e-3f;
  std::vector<double> out;
  for (int step = 1; step <= steps; ++step) {
    const StepStats s = engine->train_step(mb, hyper);
    EXPECT_TRUE(std::isfinite(s.loss)) << recipe.name << " step " << step;
    out.push_back(s.loss);
  }
  return out;
}

TEST(QAttentionEngine, TinyModelTrainsWithQAttn) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // t not a multiple of 16 (the attention pads its reduction dims); block128 linears need b*t % 128 == 0.
  for (const auto& [base, b, t] : {std::tuple{"bf16", 4, 63}, std::tuple{"tetrajet-v2-base", 16, 40}}) {
    const auto l = losses(load_recipe(base, {"attention.q_attn=true"}), seed, 20, b, t);
    std::cout << base << " + q_attn: loss " << l.front() << " -> " << l.back() << "\n";
    EXPECT_LT(l.back(), l.front() - 1.0) << base;
  }
}

TEST(QAttentionEngine, TheSwitchChangesTheAttentionAndOffIsThePlainPath) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const auto plain = losses(load_recipe("bf16"), seed, 3, 4, 32);
  const auto off = losses(load_recipe("bf16", {"attention.q_attn=false"}), seed, 3, 4, 32);
  const auto on = losses(load_recipe("bf16", {"attention.q_attn=true"}), seed, 3, 4, 32);
  EXPECT_EQ(plain, off);
  EXPECT_NE(plain[2], on[2]);  // the second and third steps see NVFP4 scores and gradients
  EXPECT_LT(std::abs(plain[2] - on[2]), 0.05 * plain[2]);  // ... and still compute the same model
}

TEST(QAttentionEngine, HeadDimThatBlocksCannotCoverIsRefused) {
  ModelConfig cfg = model_preset("tiny");
  cfg.n_heads = 16;  // head_dim 8
  try {
    make_cpu_engine(cfg, load_recipe("bf16", {"attention.q_attn=true"}), 1);
    FAIL() << "no error for head_dim 8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention.q_attn needs head_dim (8) to be a multiple of 16"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fp4
