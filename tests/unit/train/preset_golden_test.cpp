// Fixed-seed CPU runs of the recipe presets (and of feature overrides on them) through the trainer, compared
// bit for bit with losses recorded before the StepFeature / DeviceOptimizer restructuring (issue 17): the
// proof that moving OsciReset, OutControl and LoRA-SVD behind one interface changed no result.
// FP4_RECORD_GOLDEN=1 prints the table (tests/unit/train/preset_golden_values.h) instead of comparing.
#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "preset_golden_values.h"
#include "recipe/recipe_io.h"
#include "test_util.h"
#include "train/metrics.h"
#include "train/trainer.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSteps = 10;
constexpr uint64_t kSeed = 20261202;

// Every case of preset_golden_values.h: a preset and the overrides that make its features act within
// kSteps steps (OutControl calibrates over steps 2..4, OsciReset's first window opens at half the run,
// LoRA-SVD realigns every 3 steps). train.steps equals optim.total_steps, so a fractional start means the
// same step whichever of the two a version takes it of.
struct GoldenCase {
  const char* name;
  const char* preset;
  std::vector<std::pair<std::string, std::string>> overrides;
};

const std::vector<GoldenCase>& golden_cases() {
  static const std::vector<GoldenCase> cases = {
      {"bf16", "bf16", {}},
      {"nvidia_nvfp4", "nvidia-nvfp4", {}},
      {"nvidia_nvfp4_bf16_last", "nvidia-nvfp4", {{"bf16_layers", "[-1]"}}},
      {"tetrajet_v2_base", "tetrajet-v2-base", {}},
      {"tetrajet_v2_qadamw", "tetrajet-v2-qadamw", {}},
      {"tetrajet_v2_qroot", "tetrajet-v2-qroot", {}},
      {"tetrajet_v2_lorasvd", "tetrajet-v2-lorasvd", {{"lora_svd.realign_every", "3"}}},
      {"tetrajet_v2_base_q_attn", "tetrajet-v2-base", {{"attention.q_attn", "true"}}},
      {"tetrajet_v2_base_out_control_osci_reset",
       "tetrajet-v2-base",
       {{"out_control.enabled", "true"},
        {"out_control.calib_start", "2"},
        {"out_control.calib_steps", "3"},
        {"out_control.round_to", "16"},
        {"osci_reset.enabled", "true"},
        {"osci_reset.window", "2"},
        {"osci_reset.period", "3"},
        {"osci_reset.start", "0.5"},
        {"osci_reset.threshold", "1"}}},
      {"tetrajet_v2_base_osci_reset_memeff",
       "tetrajet-v2-base",
       {{"osci_reset.enabled", "true"},
        {"osci_reset.window", "2"},
        {"osci_reset.period", "3"},
        {"osci_reset.start", "3"},
        {"osci_reset.threshold", "1"},
        {"osci_reset.track_fraction", "0.1"}}},
  };
  return cases;
}

// A fixed corpus (the same bytes on every run) and its byte shards.
void prepare_fixed_corpus(const fs::path& root) {
  std::mt19937_64 rng(kSeed);
  testing::write_corpus(root / "text/train", rng, 6, 1500);
  testing::write_corpus(root / "text/val", rng, 1, 800);
  PrepareOptions o;
  o.inputs = {root / "text/train"};
  o.val_inputs = {root / "text/val"};
  o.tokenizer = "bytes";
  o.out_dir = root / "shards";
  o.threads = 1;
  prepare_shards(o);
}

// Two blocks of width 128 (block128 scales and OutControl's 16-channel rounding apply), 4 x 32 tokens a step.
RunConfig golden_config(const fs::path& tmp, const GoldenCase& c) {
  RunConfig cfg = testing::small_run_config(tmp, c.name, kSteps, kSeed, 4, kSteps);
  cfg.model.n_layers = 2;
  cfg.model.d_model = 128;
  cfg.model.d_ff = 256;
  cfg.train.eval_every = 0;
  cfg.train.eval_batches = 1;
  cfg.train.ckpt_every = 0;
  cfg.recipe.name = c.preset;
  cfg.recipe.overrides = c.overrides;
  return cfg;
}

// The losses of every step, then the final validation loss.
std::vector<double> run_losses(const fs::path& tmp, const GoldenCase& c) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log(std::tmpfile(), &std::fclose);
  TrainerOptions o;
  o.log = log.get();
  Trainer(golden_config(tmp, c), o).run();
  std::vector<double> out;
  for (const auto& j : read_metrics(tmp / c.name / "metrics.jsonl"))
    if (j["type"] == "train") out.push_back(j["loss"].get<double>());
  for (const auto& j : read_metrics(tmp / c.name / "metrics.jsonl"))
    if (j["type"] == "eval") out.push_back(j["val_loss"].get<double>());
  return out;
}

TEST(PresetGolden, LossesAreBitIdenticalToTheRecordedOnes) {
  // OpenBLAS picks its kernels by CPU (their summation order differs): the values are per kernel family.
  const std::string core = openblas_get_corename();
  const bool record = std::getenv("FP4_RECORD_GOLDEN") != nullptr;
  const GoldenTable* table = nullptr;
  for (const GoldenTable& t : kGoldenTables)
    if (core == t.openblas_core) table = &t;
  if (!record && !table)
    GTEST_SKIP() << "no recorded losses for OpenBLAS core " << core
                 << " (recorded: see preset_golden_values.h; set OPENBLAS_CORETYPE to one of them)";
  testing::TempDir tmp;
  prepare_fixed_corpus(tmp.path());
  if (record) std::printf("    {\"%s\",\n     {\n", core.c_str());
  for (const GoldenCase& c : golden_cases()) {
    SCOPED_TRACE(c.name);
    const std::vector<double> losses = run_losses(tmp.path(), c);
    ASSERT_EQ(losses.size(), static_cast<size_t>(kSteps + 1));
    if (record) {
      std::printf("         {\"%s\", {", c.name);
      for (size_t i = 0; i < losses.size(); ++i) std::printf("%s%a", i ? ", " : "", losses[i]);
      std::printf("}},\n");
      continue;
    }
    const GoldenLosses* golden = nullptr;
    for (const GoldenLosses& g : table->cases)
      if (g.name == std::string(c.name)) golden = &g;
    ASSERT_NE(golden, nullptr) << "no recorded losses for case " << c.name;
    ASSERT_EQ(golden->losses.size(), losses.size());
    for (size_t i = 0; i < losses.size(); ++i)
      EXPECT_EQ(losses[i], golden->losses[i])
          << (i < kSteps ? "step " + std::to_string(i + 1) : "final eval");
  }
  if (record) std::printf("     }},\n");
}

// The presets added with `extends` (no recorded losses: they did not exist before) train through the trainer
// with their features acting within the run, and the loss falls.
TEST(PresetGolden, NewPresetsTrainAndLowerTheLoss) {
  const std::vector<std::pair<std::string, std::string>> act_early = {
      {"out_control.calib_start", "2"}, {"out_control.calib_steps", "3"}, {"osci_reset.window", "2"},
      {"osci_reset.period", "3"},       {"osci_reset.threshold", "1"},    {"lora_svd.realign_every", "3"}};
  testing::TempDir tmp;
  prepare_fixed_corpus(tmp.path());
  for (const char* preset :
       {"tetrajet-v2", "tetrajet-v2-memeff", "nvidia-nvfp4-bf16tail", "fullstack-fp4", "fp4train-max"}) {
    SCOPED_TRACE(preset);
    const Recipe recipe = load_recipe(preset);
    GoldenCase c{preset, preset, {}};
    for (const auto& [key, value] : act_early) {
      const std::string section = key.substr(0, key.find('.'));
      if ((section == "out_control" && recipe.out_control.enabled) ||
          (section == "osci_reset" && recipe.osci_reset.enabled) ||
          (section == "lora_svd" && recipe.lora_svd.enabled))
        c.overrides.push_back({key, value});
    }
    const std::vector<double> losses = run_losses(tmp.path(), c);
    ASSERT_EQ(losses.size(), static_cast<size_t>(kSteps + 1));
    for (double l : losses) EXPECT_TRUE(std::isfinite(l));
    EXPECT_LT(losses[kSteps - 1], losses[0] - 1.0);
    int out_control = 0, osci_reset = 0;
    for (const auto& j : read_metrics(tmp.path() / preset / "metrics.jsonl")) {
      out_control += j["type"] == "out_control";
      osci_reset += j["type"] == "osci_reset";
    }
    EXPECT_EQ(out_control, recipe.out_control.enabled ? 1 : 0);  // frozen after step 4
    EXPECT_EQ(osci_reset, recipe.osci_reset.enabled ? 1 : 0);    // start 0.65 of 10: one window, steps 7-8
    std::cout << preset << ": loss " << losses[0] << " -> " << losses[kSteps - 1] << "\n";
  }
}

}  // namespace
}  // namespace fp4
