// OutControl in the CPU engine: a tiny model trains through calibration and the split layers, the
// freeze happens at the configured step with the expected counts, evaluation does not calibrate, and
// resuming from a checkpoint before, during or after calibration repeats the run bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "../model/engine_training_util.h"
#include "core/error.h"
#include "model/cpu_engine.h"
#include "nn/out_control.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

Batch random_batch(const ModelConfig& cfg, int b, int t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_real - 1);
  Batch batch{b, t, {}, {}};
  for (int i = 0; i < b * t; ++i) {
    batch.tokens.push_back(tok(rng));
    batch.targets.push_back(tok(rng));
  }
  // Next-token structure: a learnable target (the token after) for the loss to fall on.
  for (int r = 0; r < b; ++r)
    for (int i = 0; i + 1 < t; ++i) batch.targets[size_t(r * t + i)] = batch.tokens[size_t(r * t + i + 1)];
  return batch;
}

Recipe out_control_recipe(int start, int steps) {
  return load_recipe("tetrajet-v2-base", {"out_control.enabled=true", "out_control.round_to=16",
                                          "out_control.calib_start=" + std::to_string(start),
                                          "out_control.calib_steps=" + std::to_string(steps)});
}

OutControl& out_control_of(TrainingEngine& e) {
  auto* src = dynamic_cast<OutControlSource*>(&e);
  EXPECT_NE(src, nullptr);
  EXPECT_NE(src->out_control(), nullptr);
  return *src->out_control();
}

TEST(OutControlEngine, TinyModelTrainsThroughCalibrationAndTheSplitLayers) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig cfg = model_preset("tiny");
  auto engine = make_cpu_engine(cfg, out_control_recipe(3, 4), seed);
  OutControl& oc = out_control_of(*engine);
  ASSERT_EQ(oc.layers().size(), size_t(4 * cfg.n_layers));
  const Batch batch = random_batch(cfg, 4, 64, seed);
  std::vector<Batch> mb = {batch};
  StepHyper hyper;
  hyper.lr = 3e-3f;
  double first = 0, last = 0;
  for (int step = 1; step <= 30; ++step) {
    const StepStats s = engine->train_step(mb, hyper);
    ASSERT_TRUE(std::isfinite(s.loss)) << "step " << step;
    if (step == 1) first = s.loss;
    last = s.loss;
    if (step == 4) engine->evaluate(random_batch(cfg, 4, 64, seed + 1));  // must not count
    const auto report = oc.take_report();
    ASSERT_EQ(report.has_value(), step == 6) << "step " << step;
    for (const OutChannels* l : oc.layers())
      ASSERT_EQ(l->frozen(), step >= 6) << l->name() << " step " << step;
    if (report) {
      for (const auto& l : report->layers) {
        EXPECT_EQ(l.channels, l.in_features == 128 ? 16 : 48) << l.name;  // 12.8 -> 16, 38.4 -> 48
        EXPECT_GT(l.share, 0.0);
        EXPECT_LT(l.share, 1.0);
      }
    }
  }
  std::cout << "tetrajet-v2-base + out_control: loss " << first << " -> " << last << "\n";
  EXPECT_LT(last, first - 1.0);
}

TEST(OutControlEngine, ResumeIsBitExactBeforeDuringAndAfterCalibration) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = out_control_recipe(3, 3);  // measures steps 3..5, freezes after 5
  std::vector<std::vector<Batch>> data;
  for (int s = 0; s < 8; ++s) data.push_back({random_batch(cfg, 2, 128, seed + uint32_t(s))});
  StepHyper hyper;
  hyper.lr = 2e-3f;
  // Cuts before, inside (after its first and second step), at and after the end of the calibration; the
  // frozen channel sets must agree too.
  testing::expect_resume_bit_exact(cfg, recipe, seed, data, hyper, {1, 3, 4, 5, 6},
                                   [](TrainingEngine& whole, TrainingEngine& resumed, int cut) {
                                     OutControl& a = out_control_of(whole);
                                     OutControl& b = out_control_of(resumed);
                                     for (size_t l = 0; l < a.layers().size(); ++l) {
                                       EXPECT_EQ(a.layers()[l]->c8(), b.layers()[l]->c8()) << "cut " << cut;
                                       EXPECT_EQ(a.layers()[l]->share(), b.layers()[l]->share())
                                           << "cut " << cut;
                                     }
                                   });
}

TEST(OutControlEngine, AWidthWithNoValidCountIsNamed) {
  const ModelConfig cfg = model_preset("tiny");  // d_model 128: no multiple of 128 below it
  const Recipe r = load_recipe("tetrajet-v2-base", {"out_control.enabled=true", "out_control.round_to=128"});
  try {
    make_cpu_engine(cfg, r, 1);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blocks.0.attn.wqkv"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("round_to"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4
