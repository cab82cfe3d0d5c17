// Every recipe preset trains the tiny model on the CPU: the loss on a repeated batch goes down, and the
// quantized recipes stay close to BF16 at the start (same init, same data).
#include <gtest/gtest.h>

#include <random>

#include "model/cpu_engine.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

Batch random_batch(const ModelConfig& cfg, int b, int t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_real - 1);
  Batch batch{b, t, {}, {}};
  std::vector<int32_t> seq(static_cast<size_t>(b) * (t + 1));
  for (auto& s : seq) s = tok(rng);
  for (int r = 0; r < b; ++r)
    for (int i = 0; i < t; ++i) {
      batch.tokens.push_back(seq[static_cast<size_t>(r * (t + 1) + i)]);
      batch.targets.push_back(seq[static_cast<size_t>(r * (t + 1) + i + 1)]);
    }
  return batch;
}

class RecipeTraining : public ::testing::TestWithParam<const char*> {};

TEST_P(RecipeTraining, TinyLossDecreases) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = load_recipe(GetParam());
  auto engine = make_cpu_engine(cfg, recipe, seed);
  const Batch batch = random_batch(cfg, 4, 64, seed);  // 256 tokens: block128 along tokens applies
  StepHyper hyper;
  hyper.lr = 3e-3f;
  std::vector<Batch> mb = {batch};
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    const StepStats s = engine->train_step(mb, hyper);
    ASSERT_TRUE(std::isfinite(s.loss)) << "step " << step;
    if (step == 0) first = s.loss;
    last = s.loss;
  }
  std::cout << GetParam() << ": loss " << first << " -> " << last << "\n";
  EXPECT_LT(last, first - 1.0);
}

INSTANTIATE_TEST_SUITE_P(Presets, RecipeTraining,
                         ::testing::Values("bf16", "nvidia-nvfp4", "tetrajet-v2-base"), [](const auto& info) {
                           std::string n = info.param;
                           for (auto& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(RecipeTraining, QuantizedForwardStaysCloseToBf16AtInit) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig cfg = model_preset("tiny");
  const Batch batch = random_batch(cfg, 2, 64, seed);
  const double ref = make_cpu_engine(cfg, load_recipe("bf16"), seed)->evaluate(batch).loss;
  for (const char* r : {"nvidia-nvfp4", "tetrajet-v2-base"}) {
    const double q = make_cpu_engine(cfg, load_recipe(r), seed)->evaluate(batch).loss;
    EXPECT_NEAR(q, ref, 0.02 * ref) << r;
    EXPECT_NE(q, ref) << r << ": the quantized forward should differ from BF16 at all";
  }
}

}  // namespace
}  // namespace fp4
