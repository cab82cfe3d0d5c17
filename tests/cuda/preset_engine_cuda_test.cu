// Every recipe preset of RECIPES.md section 4b on the CUDA engine (issue 18, item 6): the tiny model trains
// 50 steps with the preset as shipped, except that OutControl's calibration and OsciReset's windows are
// moved inside those 50 steps so that every module of the preset acts; the loss falls; the state written on
// the GPU loads into the CPU engine, which writes the same bytes, and into a fresh CUDA engine, which takes
// the same next step.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/cpu_engine.h"
#include "model/cuda/cuda_engine.h"
#include "optimizer_test_util.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

constexpr int kSteps = 50;

// The preset with its modules scheduled inside kSteps: OutControl calibrates over steps 5..9 and freezes,
// OsciReset's windows of 10 steps open from 65% of the run every 10 steps, LoRA-SVD realigns every 20.
Recipe preset_within_the_test(const std::string& name) {
  const Recipe shipped = load_recipe(name);
  std::vector<std::string> overrides;
  if (shipped.out_control.enabled)
    overrides.insert(overrides.end(), {"out_control.calib_start=5", "out_control.calib_steps=5"});
  if (shipped.osci_reset.enabled)
    overrides.insert(overrides.end(), {"osci_reset.window=10", "osci_reset.period=10"});
  if (shipped.lora_svd.enabled) overrides.push_back("lora_svd.realign_every=20");
  return load_recipe(name, overrides);
}

class CudaPresetEngine : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaPresetEngine, TrainsFiftyStepsAndItsStateMovesToTheCpuAndBack) {
  const uint32_t seed = testing::fresh_seed();
  const std::string name = GetParam();
  SCOPED_TRACE(name + " seed " + std::to_string(seed));
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = preset_within_the_test(name);
  StepContext ctx;
  ctx.total_steps = kSteps;
  auto gpu = make_cuda_engine(cfg, recipe, seed);
  gpu->set_step_context(ctx);
  const Batch batch =
      testing::next_token_batch(cfg, 4, 64, seed);  // 256 rows: block128 operands are whole blocks
  StepHyper h;
  h.lr = 3e-3f;
  std::vector<double> losses;
  for (int step = 1; step <= kSteps; ++step) {
    const StepStats s = gpu->train_step({&batch, 1}, h);
    ASSERT_TRUE(std::isfinite(s.loss)) << "step " << step;
    losses.push_back(s.loss);
  }
  std::cout << "[" << name << ", cuda] loss " << losses.front() << " -> " << losses[kSteps / 2 - 1]
            << " (step " << kSteps / 2 << ") -> " << losses.back() << "\n";
  EXPECT_LT(losses.back(), losses.front() - 1.0);
  EXPECT_LT(losses.back(), losses[kSteps / 2 - 1]);

  // GPU -> CPU -> GPU, with the features' state (OutControl's frozen channels, OsciReset's tracker,
  // LoRA-SVD's factors) included.
  const std::vector<StateTensor> saved = gpu->save_state();
  auto cpu = make_cpu_engine(cfg, recipe, seed);
  cpu->set_step_context(ctx);
  cpu->load_state(saved);
  const std::vector<StateTensor> via_cpu = cpu->save_state();
  testing::expect_same_state(saved, via_cpu, "CUDA -> CPU -> save");
  auto back = make_cuda_engine(cfg, recipe, seed);
  back->set_step_context(ctx);
  back->load_state(via_cpu);
  testing::expect_same_state(saved, back->save_state(), "CPU -> CUDA -> save");
  const StepStats s1 = gpu->train_step({&batch, 1}, h), s2 = back->train_step({&batch, 1}, h);
  EXPECT_EQ(s1.loss, s2.loss);
  testing::expect_same_state(gpu->save_state(), back->save_state(), "one step after the reload");
}

INSTANTIATE_TEST_SUITE_P(Presets, CudaPresetEngine,
                         ::testing::Values("nvidia-nvfp4-bf16tail", "tetrajet-v2", "tetrajet-v2-memeff",
                                           "fullstack-fp4", "fp4train-max"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace fp4
