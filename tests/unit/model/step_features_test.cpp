// The step-feature factory and list: the features a recipe enables, in the order they act; OsciReset only
// with the run's length; its form from the context; refusals naming the feature; the prefix check of the
// features' checkpoint tensors; the engine's context switch.
#include "model/step_features.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "core/error.h"
#include "model/cpu_engine.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

// Every step feature on the tiny model: OutControl over steps 2..3, LoRA-SVD every 2 steps, OsciReset from
// step 2.
Recipe all_features_recipe() {
  return load_recipe("tetrajet-v2-lorasvd",
                     {"out_control.enabled=true", "out_control.round_to=16", "out_control.calib_start=2",
                      "out_control.calib_steps=2", "lora_svd.realign_every=2", "osci_reset.enabled=true",
                      "osci_reset.start=2", "osci_reset.window=2", "osci_reset.period=3"});
}

std::vector<std::string> names(std::span<const std::unique_ptr<StepFeature>> features) {
  std::vector<std::string> out;
  for (const auto& f : features) out.push_back(f->name());
  return out;
}

Batch random_batch(const ModelConfig& cfg, int b, int t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_real - 1);
  Batch batch{b, t, {}, {}};
  for (int i = 0; i < b * t; ++i) {
    batch.tokens.push_back(tok(rng));
    batch.targets.push_back(tok(rng));
  }
  return batch;
}

TEST(StepFeatures, TheRecipesFeaturesInStepOrderOsciResetOnceTheRunLengthIsKnown) {
  const ModelConfig cfg = model_preset("tiny");
  auto engine = make_cpu_engine(cfg, all_features_recipe(), 7);
  EXPECT_EQ(names(engine->features()), (std::vector<std::string>{"out_control", "lora_svd"}));
  StepContext ctx;
  ctx.total_steps = 10;
  engine->set_step_context(ctx);
  ASSERT_EQ(names(engine->features()), (std::vector<std::string>{"out_control", "lora_svd", "osci_reset"}));
  EXPECT_EQ(engine->features()[2]->summary(), "the host form tracks the weights");
  EXPECT_EQ(engine->features()[0]->summary(), "");
  for (const auto& f : engine->features()) EXPECT_EQ(f->state_prefix(), f->name() + ".");

  // A recipe without features gets none, whatever the context.
  auto plain = make_cpu_engine(cfg, load_recipe("tetrajet-v2-base", {}), 7);
  plain->set_step_context(ctx);
  EXPECT_TRUE(plain->features().empty());
}

TEST(StepFeatures, ReportsAndStateComeThroughTheEngineOsciResetTakesTheFrozenColumns) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig cfg = model_preset("tiny");
  // OutControl freezes after step 3; OsciReset snapshots at 2, closes that window at 4 and opens one at 5.
  const Recipe recipe = load_recipe(
      "tetrajet-v2-base", {"out_control.enabled=true", "out_control.round_to=16", "out_control.calib_start=2",
                           "out_control.calib_steps=2", "osci_reset.enabled=true", "osci_reset.start=2",
                           "osci_reset.window=2", "osci_reset.period=3", "osci_reset.track_fraction=1"});
  auto engine = make_cpu_engine(cfg, recipe, seed);
  StepContext ctx;
  ctx.total_steps = 10;
  engine->set_step_context(ctx);
  const std::vector<Batch> mb = {random_batch(cfg, 4, 32, seed)};
  StepHyper hyper;
  hyper.lr = 1e-3f;
  std::vector<std::string> lines;  // "type@step" of every report, in the order the trainer writes them
  for (int step = 1; step <= 5; ++step) {
    engine->train_step(mb, hyper);
    for (const auto& f : engine->features())
      for (const StepReport& r : f->take_reports()) {
        EXPECT_EQ(r.line.at("step").get<int64_t>(), step);
        EXPECT_FALSE(r.message.empty());
        lines.push_back(r.line.at("type").get<std::string>() + "@" + std::to_string(step));
      }
    for (const auto& f : engine->features())
      EXPECT_TRUE(f->take_reports().empty()) << "reports are taken once";
  }
  EXPECT_EQ(lines, (std::vector<std::string>{"out_control@3", "osci_reset@4"}));

  // The window opened at step 5 (after the freeze) tracks exactly each weight's FP4 columns.
  std::map<std::string, const StateTensor*> by_name;
  const std::vector<StateTensor> state = engine->save_state();
  for (const StateTensor& t : state) by_name[t.name] = &t;
  ASSERT_TRUE(by_name.count("osci_reset.window"));
  int64_t window = 0;
  std::memcpy(&window, by_name["osci_reset.window"]->bytes.data(), sizeof window);
  EXPECT_EQ(window, 5);
  int checked = 0;
  for (const ParameterInfo& p : engine->parameters()) {
    const auto c8 = by_name.find("out_control." + p.name + ".c8");
    if (c8 == by_name.end()) continue;
    const auto prev_w = by_name.find("osci_reset." + p.name + ".prev_w");
    ASSERT_NE(prev_w, by_name.end()) << p.name;
    const int64_t kept = static_cast<int64_t>(c8->second->bytes.size() / sizeof(int64_t));
    ASSERT_GT(kept, 0) << p.name;
    EXPECT_EQ(static_cast<int64_t>(prev_w->second->bytes.size() / sizeof(float)),
              p.shape[0] * (p.shape[1] - kept))
        << p.name;
    ++checked;
  }
  EXPECT_EQ(checked, 4 * cfg.n_layers);
  EXPECT_THROW(engine->set_step_context(ctx), Error) << "the context comes before the first step";
}

TEST(StepFeatures, FactoryRefusesMissingBackendsNamingTheFeature) {
  const ModelConfig cfg = model_preset("tiny");
  auto engine = make_cpu_engine(cfg, load_recipe("tetrajet-v2-base", {}), 3);
  StepFeatureBackends b;
  b.engine = engine.get();
  const auto message = [&](const Recipe& r) {
    try {
      make_step_features(r, StepContext{}, b);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string lora = message(load_recipe("tetrajet-v2-lorasvd", {}));
  EXPECT_NE(lora.find("lora_svd"), std::string::npos) << lora;
  EXPECT_NE(lora.find(engine->device_name()), std::string::npos) << lora;
  OutControl oc(all_features_recipe().out_control);
  b.out_control = &oc;  // a registry without the engine's step sums
  const std::string out_control = message(load_recipe("tetrajet-v2-base", {"out_control.enabled=true"}));
  EXPECT_NE(out_control.find("out_control"), std::string::npos) << out_control;
}

TEST(StepFeatures, OsciResetFormFollowsTheContext) {
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = load_recipe("tetrajet-v2-base", {"osci_reset.enabled=true"});
  auto engine = make_cpu_engine(cfg, recipe, 3);
  int asked = 0;
  StepFeatureBackends b;
  b.engine = engine.get();
  b.osci_device_backend = [&]() -> std::unique_ptr<OsciBackend> {
    ++asked;
    return nullptr;  // this engine has no device form: the host form stays
  };
  EXPECT_TRUE(make_step_features(recipe, StepContext{}, b).empty()) << "no run length: no OsciReset";
  StepContext ctx;
  ctx.total_steps = 100;
  ctx.data_parallel = true;
  StepFeatures dp = make_step_features(recipe, ctx, b);
  ASSERT_EQ(dp.size(), 1u);
  EXPECT_EQ(asked, 0) << "a data-parallel run keeps the host form";
  EXPECT_EQ(dp[0]->summary(), "the host form tracks the weights");
  ctx.data_parallel = false;
  StepFeatures single = make_step_features(recipe, ctx, b);
  ASSERT_EQ(single.size(), 1u);
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(single[0]->summary(), "the host form tracks the weights");
}

// A feature writing a tensor outside its prefix.
class StrayFeature final : public StepFeature {
 public:
  std::string name() const override { return "stray"; }
  std::string state_prefix() const override { return "stray."; }
  std::vector<StateTensor> save_state() const override {
    return {StateTensor{"stray.ok", "F32", {1}, std::vector<uint8_t>(4)},
            StateTensor{"other.x", "F32", {1}, std::vector<uint8_t>(4)}};
  }
};

TEST(StepFeatures, StateOutsideTheFeaturesPrefixIsRefused) {
  StepFeatures features;
  features.push_back(std::make_unique<StrayFeature>());
  std::vector<StateTensor> state;
  try {
    append_feature_state(features, state);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("stray"), std::string::npos) << m;
    EXPECT_NE(m.find("other.x"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace fp4
