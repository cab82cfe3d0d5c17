// Evaluation and generation run every recipe at every sequence length: the inference forward builds no
// backward operands (Q6 and the split's X^T run along tokens and would need whole blocks of 16 or 32 rows).
// Where a training forward runs too, the inference forward's loss equals it bit for bit; a backward after an
// inference forward is refused with fp4::Error.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>

#include "core/error.h"
#include "model/cpu_engine.h"
#include "model/olmo2.h"
#include "recipe/recipe_io.h"
#include "train/sample.h"

namespace fp4 {
namespace {

struct Case {
  const char* name;
  const char* preset;
  std::vector<std::string> overrides;
};

std::vector<Case> cases() {
  return {{"bf16", "bf16", {}},
          {"nvidia_nvfp4", "nvidia-nvfp4", {}},
          {"tetrajet_v2_base", "tetrajet-v2-base", {}},
          {"tetrajet_v2_lorasvd", "tetrajet-v2-lorasvd", {}},
          {"tetrajet_v2_qadamw", "tetrajet-v2-qadamw", {}},
          {"tetrajet_v2_qroot", "tetrajet-v2-qroot", {}},
          {"tetrajet_v2_base_q_attn", "tetrajet-v2-base", {"attention.q_attn=true"}},
          // Calibrates in step 1 and runs the split layers (NVFP4 + MXFP8 channels) from step 2.
          {"tetrajet_v2_base_out_control",
           "tetrajet-v2-base",
           {"out_control.enabled=true", "out_control.round_to=16", "out_control.calib_start=1",
            "out_control.calib_steps=1"}}};
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

Batch random_batch(const ModelConfig& cfg, int b, int t, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_real - 1);
  Batch batch{b, t, {}, {}};
  for (int i = 0; i < b * t; ++i) {
    batch.tokens.push_back(tok(rng));
    batch.targets.push_back(tok(rng));
  }
  return batch;
}

class InferenceForward : public ::testing::TestWithParam<Case> {};

// Two training steps first (so OutControl's channels are frozen and every optimizer has state), then
// evaluate, last_logits and greedy generation at 1 ... 40 tokens.
TEST_P(InferenceForward, EveryPromptLengthFrom1To40) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = load_recipe(GetParam().preset, GetParam().overrides);
  auto engine = make_cpu_engine(cfg, recipe, seed);
  StepHyper hyper;
  hyper.lr = 1e-3f;
  const std::vector<Batch> mb = {random_batch(cfg, 2, 64, rng)};  // 128 tokens: block128 along tokens
  for (int step = 1; step <= 2; ++step) ASSERT_TRUE(std::isfinite(engine->train_step(mb, hyper).loss));

  std::vector<float> logits(static_cast<size_t>(2 * cfg.vocab_size));
  for (int t = 1; t <= 40; ++t) {
    SCOPED_TRACE("t = " + std::to_string(t));
    const Batch batch = random_batch(cfg, 2, t, rng);
    const StepStats s = engine->evaluate(batch);
    EXPECT_TRUE(std::isfinite(s.loss));
    EXPECT_EQ(s.tokens, 2 * t);
    ASSERT_NO_THROW(engine->last_logits(batch, logits));
    for (int r = 0; r < 2; ++r)
      for (int v = 0; v < cfg.vocab_real; ++v)
        ASSERT_TRUE(std::isfinite(logits[static_cast<size_t>(r * cfg.vocab_size + v)])) << r << " " << v;
  }
  // Greedy generation grows the context from 1 token through 40.
  SampleOptions opt;
  opt.max_new_tokens = 39;
  opt.temperature = 0.0f;
  opt.context = 64;
  const std::vector<int32_t> out = generate(*engine, {static_cast<int32_t>(rng() % cfg.vocab_real)}, opt);
  EXPECT_EQ(out.size(), 39u);
  // Training still works after inference forwards.
  EXPECT_TRUE(std::isfinite(engine->train_step(mb, hyper).loss));
}

INSTANTIATE_TEST_SUITE_P(Recipes, InferenceForward, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return std::string(info.param.name); });

// The inference forward computes what the training forward computes (same quantizers, same random bits),
// at lengths where both run; a backward after it is refused (it kept no operands).
TEST(InferenceForwardModel, LossEqualsTrainingForwardAndBackwardIsRefused) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = model_preset("tiny");
  for (const char* preset : {"bf16", "nvidia-nvfp4", "tetrajet-v2-base"}) {
    SCOPED_TRACE(preset);
    Olmo2Model model(cfg, load_recipe(preset));
    model.init_parameters(seed);
    model.quant_context().seed = seed;
    model.quant_context().call = rng() & 0xFFFF;
    // Token counts that are whole 128-blocks (block128 outer scales of Q6 along tokens).
    for (const auto& [b, t] : {std::pair{2, 64}, std::pair{4, 32}, std::pair{1, 128}}) {
      const Batch batch = random_batch(cfg, b, t, rng);
      model.forward(batch.tokens.data(), b, t, ForwardMode::kTraining);
      const cpu::LossSums train = model.loss(batch.targets.data(), false, 0.0f);
      model.forward(batch.tokens.data(), b, t, ForwardMode::kInference);
      const cpu::LossSums infer = model.loss(batch.targets.data(), false, 0.0f);
      EXPECT_EQ(train.loss, infer.loss) << "t = " << t;
      EXPECT_EQ(train.ce, infer.ce) << "t = " << t;
      if (std::string(preset) != "bf16") {
        model.loss(batch.targets.data(), true, 1.0f / static_cast<float>(b * t));
        EXPECT_THROW(model.backward(), Error) << "t = " << t;
      }
      // A training forward again makes the backward possible.
      model.forward(batch.tokens.data(), b, t, ForwardMode::kTraining);
      model.loss(batch.targets.data(), true, 1.0f / static_cast<float>(b * t));
      EXPECT_NO_THROW(model.backward()) << "t = " << t;
    }
  }
}

// Before this mode existed a 4-token prompt failed in Q6 (X^T along tokens); a training forward still does,
// with the error naming the layer, so the inference path is what makes short prompts work.
TEST(InferenceForwardModel, TrainingForwardAtFourTokensStillNeedsWholeBlocks) {
  const ModelConfig cfg = model_preset("tiny");
  Olmo2Model model(cfg, load_recipe("tetrajet-v2-base"));
  model.init_parameters(7);
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  EXPECT_THROW(model.forward(tokens.data(), 1, 4, ForwardMode::kTraining), Error);
  EXPECT_NO_THROW(model.forward(tokens.data(), 1, 4, ForwardMode::kInference));
}

}  // namespace
}  // namespace fp4
