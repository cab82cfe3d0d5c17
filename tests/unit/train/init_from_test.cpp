// --init-from: a WSD decay branched from a stable run's checkpoint is the run that decays there
// uninterrupted, bit for bit, with or without a recipe feature switched on at the branch; changes that
// would make it another training are refused by name.
#include "train/init_from.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
#include "train/metrics.h"
#include "train/sha256.h"
#include "train/trainer.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

class InitFrom : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { testing::prepare_corpus(tmp_.path()); }

  // WSD over `total` steps, the last 20% decaying; block128-friendly widths (checkpoint_resume_test).
  RunConfig config(const std::string& run, int64_t steps, int64_t total) const {
    RunConfig c = testing::small_run_config(tmp_.path(), run, steps, seed_, 4, total);
    c.model.d_model = 128;
    c.model.d_ff = 256;
    c.recipe.name = GetParam();
    c.optim.schedule = "wsd";
    c.optim.decay_fraction = 0.2;
    c.train.eval_every = 0;
    c.train.ckpt_every = 4;
    c.train.keep_checkpoints = 5;
    return c;
  }

  TrainerOptions quiet(const fs::path& init_from = {}) const {
    TrainerOptions o;
    o.log = log_.get();
    o.init_from = init_from;
    return o;
  }

  std::vector<std::pair<int64_t, double>> losses(const std::string& run) const {
    std::vector<std::pair<int64_t, double>> out;
    for (const auto& j : read_metrics(tmp_ / run / "metrics.jsonl"))
      if (j["type"] == "train") out.emplace_back(j["step"].get<int64_t>(), j["loss"].get<double>());
    return out;
  }

  TempDir tmp_;
  uint64_t seed_ = std::random_device{}();
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log_{std::tmpfile(), &std::fclose};
};

TEST_P(InitFrom, DecayBranchedFromTheStableCheckpointIsTheUninterruptedRun) {
  // Stable run: a schedule of 100 steps, so its LR stays at the peak through step 8.
  Trainer(config("stable", 8, 100), quiet()).run();
  // The reference: WSD over 10 steps decays from step 8 on, the same peak before.
  Trainer(config("full", 10, 10), quiet()).run();
  {
    Trainer branch(config("branch", 10, 10), quiet(tmp_ / "stable/checkpoints/step_000008"));
    EXPECT_EQ(branch.step(), 8);
    branch.run();
  }

  const auto full = losses("full"), got = losses("branch");
  ASSERT_EQ(full.size(), 10u);
  EXPECT_EQ(got, full);  // steps 1..8 copied from the stable run, 9..10 trained by the branch
  for (const char* f : {"model.safetensors", "state.safetensors"})
    EXPECT_EQ(sha256_file(tmp_ / "branch/checkpoints/step_000010" / f),
              sha256_file(tmp_ / "full/checkpoints/step_000010" / f))
        << f;
  const auto records = read_metrics(tmp_ / "branch/metrics.jsonl");
  const auto it =
      std::find_if(records.begin(), records.end(), [](const auto& j) { return j["type"] == "init_from"; });
  ASSERT_NE(it, records.end());
  EXPECT_EQ((*it)["step"], 8);
  // A second start resumes from the branch's own checkpoint, not from the source.
  RunConfig more = config("branch", 10, 10);
  Trainer again(more, quiet(tmp_ / "stable/checkpoints/step_000004"));
  EXPECT_EQ(again.step(), 10);
}

TEST_P(InitFrom, ARunDirectoryBranchesFromItsLatestCheckpoint) {
  Trainer(config("stable", 8, 100), quiet()).run();
  Trainer branch(config("branch", 10, 10), quiet(tmp_ / "stable"));
  EXPECT_EQ(branch.step(), 8);
}

TEST_P(InitFrom, ChangesOutsideTheScheduleAndRecipeAreRefusedByName) {
  Trainer(config("stable", 8, 100), quiet()).run();
  const fs::path from = tmp_ / "stable/checkpoints/step_000008";
  RunConfig lr = config("b1", 10, 10);
  lr.optim.lr *= 2;
  EXPECT_THAT([&] { Trainer t(lr, quiet(from)); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("optim.lr")));
  RunConfig seed = config("b2", 10, 10);
  seed.train.seed += 1;
  EXPECT_THAT([&] { Trainer t(seed, quiet(from)); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("train.seed")));
  RunConfig width = config("b3", 10, 10);
  width.model.d_ff = 384;
  EXPECT_THAT([&] { Trainer t(width, quiet(from)); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("model.d_ff")));
  RunConfig done = config("b4", 8, 10);
  EXPECT_THAT([&] { Trainer t(done, quiet(from)); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("nothing left to train")));
  EXPECT_THAT([&] { Trainer t(config("b5", 10, 10), quiet(tmp_ / "nowhere")); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("nowhere")));
  for (const char* run : {"b1", "b2", "b3", "b4"}) EXPECT_FALSE(fs::exists(tmp_ / run)) << run;
}

TEST(InitFromKeys, OnlyTheScheduleDecayAndRecipeMayChange) {
  for (const char* k :
       {"optim.schedule_steps", "optim.decay_fraction", "optim.decay_shape", "optim.final_ratio",
        "optim.schedule", "recipe.name", "recipe.overrides.osci_reset.enabled"})
    EXPECT_TRUE(branch_may_change(k)) << k;
  for (const char* k : {"optim.lr", "optim.warmup", "optim.beta2", "train.seed", "data.batch", "data.seq",
                        "model.n_layers", "recipe", "recipe.overrides"})
    EXPECT_FALSE(branch_may_change(k)) << k;
}

INSTANTIATE_TEST_SUITE_P(Recipes, InitFrom, ::testing::Values("bf16", "tetrajet-v2-base"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// A feature switched on at the branch: OsciReset from the branch step on, against the same recipe run
// uninterrupted (its tracker idle before that step).
TEST(InitFromOsciReset, SwitchedOnAtTheBranchIsTheUninterruptedRunWithIt) {
  TempDir tmp;
  testing::prepare_corpus(tmp.path());
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log{std::tmpfile(), &std::fclose};
  const uint64_t seed = std::random_device{}();
  auto config = [&](const std::string& run, int64_t steps, int64_t total, bool osci) {
    RunConfig c = testing::small_run_config(tmp.path(), run, steps, seed, 4, total);
    c.model.d_model = 128;
    c.model.d_ff = 256;
    c.recipe.name = "tetrajet-v2-base";
    if (osci)
      c.recipe.overrides = {{"osci_reset.enabled", "true"},
                            {"osci_reset.start", "9"},
                            {"osci_reset.window", "1"},
                            {"osci_reset.period", "2"},
                            {"osci_reset.threshold", "0.5"}};
    c.optim.schedule = "wsd";
    c.train.eval_every = 0;
    c.train.ckpt_every = 4;
    c.train.keep_checkpoints = 5;
    return c;
  };
  TrainerOptions o;
  o.log = log.get();
  Trainer(config("stable", 8, 100, false), o).run();
  Trainer(config("full", 12, 12, true), o).run();
  o.init_from = tmp / "stable/checkpoints/step_000008";
  Trainer(config("branch", 12, 12, true), o).run();
  std::vector<nlohmann::json> full, branch;
  for (const auto& j : read_metrics(tmp / "full/metrics.jsonl"))
    if (j["type"] != "init_from") full.push_back(j);
  for (const auto& j : read_metrics(tmp / "branch/metrics.jsonl"))
    if (j["type"] != "init_from") branch.push_back(j);
  // Wall-clock fields differ between runs; the stable run's final evaluation (step 8) is copied into the
  // branch, where the uninterrupted run made none.
  auto strip = [](std::vector<nlohmann::json>& v) {
    std::erase_if(v, [](const auto& j) { return j["type"] == "eval" && j["step"] == 8; });
    for (auto& j : v) j.erase("elapsed"), j.erase("tokens_per_s");
  };
  strip(full), strip(branch);
  const auto windows =
      std::count_if(full.begin(), full.end(), [](const auto& j) { return j["type"] == "osci_reset"; });
  EXPECT_EQ(windows, 2);  // windows opened after steps 9 and 11, closed after 10 and 12
  EXPECT_EQ(branch, full);
  EXPECT_EQ(sha256_file(tmp / "branch/checkpoints/step_000012/model.safetensors"),
            sha256_file(tmp / "full/checkpoints/step_000012/model.safetensors"));
}

}  // namespace
}  // namespace fp4
