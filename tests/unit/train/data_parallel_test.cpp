// Data-parallel training as several processes on loopback: the test binary starts copies of itself
// through launch_local, each running DataParallelChild.RunsOneRank with the torchrun variables.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>

#include "../model/engine_parameters.h"
#include "dist/launcher.h"
#include "test_util.h"
#include "train/file_io.h"
#include "train/metrics.h"
#include "train/sha256.h"
#include "train/trainer.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

constexpr const char* kConfigVar = "FP4_DP_TEST_CONFIG";
constexpr const char* kDumpVar = "FP4_DP_TEST_DUMP";  // a folder: each rank writes its final weights there

// Entry point of the rank processes; skipped when the test binary runs normally.
TEST(DataParallelChild, RunsOneRank) {
  const char* path = std::getenv(kConfigVar);
  if (!path) GTEST_SKIP() << "runs only as a rank started by the DataParallel tests";
  const RunConfig cfg = run_config_from_json(nlohmann::json::parse(read_file(path)), path);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log{std::tmpfile(), &std::fclose};
  TrainerOptions o;
  o.log = log.get();
  Trainer t(cfg, o);
  ASSERT_TRUE(t.dist().launched);
  const TrainResult r = t.run();
  EXPECT_EQ(r.step, cfg.train.steps);
  if (const char* dump = std::getenv(kDumpVar)) {
    const std::vector<float> w = testing::all_parameters(t.engine());
    write_file_atomically(fs::path(dump) / ("rank" + std::to_string(t.dist().rank) + ".f32"),
                          std::string(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float)));
  }
}

class DataParallelTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::prepare_corpus(tmp_.path()); }

  RunConfig config(const std::string& run, int64_t steps) const {
    RunConfig c = testing::small_run_config(tmp_.path(), run, steps, seed_, 6, 10);
    c.model.n_layers = 2;  // several gradient buckets
    c.data.grad_accum = 2;
    c.train.eval_every = 0;
    c.train.eval_batches = 2;
    c.train.ckpt_every = 2;
    return c;
  }

  // Trains cfg in this process, without data parallelism.
  void train_single(const RunConfig& cfg) const {
    TrainerOptions o;
    o.log = log_.get();
    o.dist = DistEnv{};
    Trainer(cfg, o).run();
  }

  // Trains cfg as `ranks` processes; returns the launcher's exit code.
  int train_launched(const RunConfig& cfg, int ranks) const {
    const fs::path file = tmp_ / ("config-" + std::to_string(++launches_) + ".json");
    write_file_atomically(file, to_json(cfg).dump());
    ::setenv(kConfigVar, file.c_str(), 1);
    LaunchOptions lo;
    lo.nprocs = ranks;
    lo.command = {"/proc/self/exe", "--gtest_filter=DataParallelChild.RunsOneRank"};
    const int code = launch_local(lo);
    ::unsetenv(kConfigVar);
    return code;
  }

  static std::vector<nlohmann::json> records(const fs::path& run, const std::string& type) {
    std::vector<nlohmann::json> out;
    for (const auto& j : read_metrics(run / "metrics.jsonl"))
      if (j["type"] == type) out.push_back(j);
    return out;
  }

  // The runs' train records agree step by step: loss and gradient norm within rel (the ranks sum in
  // another order than one process does).
  static void expect_same_curve(const fs::path& a, const fs::path& b, size_t steps, double rel) {
    const auto ra = records(a, "train"), rb = records(b, "train");
    ASSERT_EQ(ra.size(), steps);
    ASSERT_EQ(rb.size(), steps);
    for (size_t i = 0; i < steps; ++i) {
      EXPECT_EQ(ra[i]["step"], rb[i]["step"]);
      EXPECT_EQ(ra[i]["tokens"], rb[i]["tokens"]);
      for (const char* key : {"loss", "grad_norm"}) {
        const double x = ra[i][key].get<double>(), y = rb[i][key].get<double>();
        EXPECT_NEAR(x, y, rel * std::fabs(x)) << key << " at step " << i + 1;
      }
    }
  }

  TempDir tmp_;
  uint64_t seed_ = std::random_device{}();
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log_{std::tmpfile(), &std::fclose};
  mutable int launches_ = 0;
};

TEST_F(DataParallelTest, TwoAndFourRanksMatchOneProcessWithTheSameGlobalBatch) {
  const RunConfig one = config("one", 6);
  train_single(one);
  for (int ranks : {2, 4}) {  // 6 rows: 3 + 3, and 2 + 2 + 1 + 1
    const RunConfig many = config("ranks" + std::to_string(ranks), 6);
    ASSERT_EQ(train_launched(many, ranks), 0) << ranks << " ranks";
    expect_same_curve(one.train.out_dir, many.train.out_dir, 6, 1e-5);
    const auto ea = records(one.train.out_dir, "eval"), eb = records(many.train.out_dir, "eval");
    ASSERT_EQ(ea.size(), 1u);
    ASSERT_EQ(eb.size(), 1u);
    EXPECT_EQ(ea[0]["val_tokens"], eb[0]["val_tokens"]);
    EXPECT_NEAR(ea[0]["val_loss"].get<double>(), eb[0]["val_loss"].get<double>(),
                1e-5 * ea[0]["val_loss"].get<double>());
    // The checkpoint is the one a single process writes: same tensors, full shapes.
    EXPECT_TRUE(fs::exists(fs::path(many.train.out_dir) / "checkpoints/step_000006/state.safetensors"));
  }
}

TEST_F(DataParallelTest, CheckpointOfTwoRanksResumesOnThreeAndOnOne) {
  const RunConfig whole = config("whole", 8);
  train_single(whole);
  for (int resume_ranks : {3, 1}) {
    const std::string name = "resume" + std::to_string(resume_ranks);
    ASSERT_EQ(train_launched(config(name, 4), 2), 0);
    if (resume_ranks == 1)
      train_single(config(name, 8));  // a plain process resumes a data-parallel checkpoint
    else
      ASSERT_EQ(train_launched(config(name, 8), resume_ranks), 0);
    expect_same_curve(whole.train.out_dir, config(name, 8).train.out_dir, 8, 1e-5);
  }
}

// ROOT's ZeRO-1 shards hold whole tensors (the trainer's plan): 2 ranks train as one process (the ranks sum
// gradients in another order, so within float noise), and a 2-rank checkpoint resumes on 3 ranks and on 1.
// root-bf16 and q-root run the same RootOptimizer code, but their rounded Newton-Schulz operands turn the
// ~1e-7 summation-order differences into flipped BF16 / FP4 roundings and the curves drift apart chaotically
// (measured over 6 steps: gradient norms by up to 5e-4 relative with BF16, 1.5% with NVFP4), so a bound loose
// enough would test little; their ranks are checked bit for bit with exact sums instead
// (RootEngine.WholeTensorShardsMatchOneRank, RootOptimizer.WholeTensorShardsMatchOneRankAndResume...).
TEST_F(DataParallelTest, RootOnWholeTensorShardsMatchesOneProcessAndResumesOnOtherRankCounts) {
  const auto root = [&](const std::string& run, int64_t steps) {
    RunConfig c = config("root-" + run, steps);
    c.recipe.overrides = {{"optimizer", "root"}};
    return c;
  };
  const RunConfig one = root("one", 6);
  train_single(one);
  const RunConfig two = root("two", 6);
  ASSERT_EQ(train_launched(two, 2), 0);
  expect_same_curve(one.train.out_dir, two.train.out_dir, 6, 1e-4);
  for (int resume_ranks : {3, 1}) {
    const std::string name = "resume" + std::to_string(resume_ranks);
    ASSERT_EQ(train_launched(root(name, 4), 2), 0);
    if (resume_ranks == 1)
      train_single(root(name, 6));
    else
      ASSERT_EQ(train_launched(root(name, 6), resume_ranks), 0);
    expect_same_curve(one.train.out_dir, root(name, 6).train.out_dir, 6, 1e-4);
  }
}

// OsciReset runs as a replica on every rank (model/step_features.cpp says why). NVFP4 weights only (16x16
// blocks, tensor scale, RTN) and BF16 elsewhere, so that 1 and N ranks differ only by the gradient summation
// order; windows of 3 steps every 4 from step 2 (resets after steps 5 and 9), threshold 1 so that
// weights do reset. Checked: the ranks hold the same weights bit for bit right after a reset (the run
// ends on one, before any all-gather could hide a difference), which are the checkpoint's; the resets
// happen at the same steps and on about the same elements as in one process; a 2-rank run stopped
// mid-window resumes on 2 ranks bit for bit, and on 3 ranks and in one process within 2e-3 (see below).
TEST_F(DataParallelTest, OsciResetRunsOnEveryRankAndResumesOnOtherRankCounts) {
  const auto osci = [this](const std::string& run, int64_t steps) {
    RunConfig c = config(run, steps);
    c.recipe.name = "nvidia-nvfp4";
    c.recipe.overrides = {
        {"linear.q1.format", "bf16"},   {"linear.q3.format", "bf16"}, {"linear.q5.format", "bf16"},
        {"linear.q6.format", "bf16"},   {"linear.q5.rht", "0"},       {"linear.q6.rht", "0"},
        {"osci_reset.enabled", "true"}, {"osci_reset.window", "3"},   {"osci_reset.period", "4"},
        {"osci_reset.start", "2"},      {"osci_reset.threshold", "1"}};
    c.train.ckpt_every = 100;
    return c;
  };
  const RunConfig one = osci("one", 9);
  train_single(one);
  const fs::path dump = tmp_ / "dump";
  fs::create_directories(dump);
  ::setenv(kDumpVar, dump.c_str(), 1);
  const RunConfig two = osci("two", 9);
  const int code = train_launched(two, 2);
  ::unsetenv(kDumpVar);
  ASSERT_EQ(code, 0);
  const std::string w0 = read_file(dump / "rank0.f32"), w1 = read_file(dump / "rank1.f32");
  ASSERT_FALSE(w0.empty());
  EXPECT_TRUE(w0 == w1) << "the ranks' weights differ after the reset of step 9";
  {
    TrainerOptions o;
    o.log = log_.get();
    o.dist = DistEnv{};
    Trainer reloaded(two, o);  // resumes at step 9: nothing left to train, the checkpoint's weights
    ASSERT_TRUE(reloaded.resumed());
    const std::vector<float> w = testing::all_parameters(reloaded.engine());
    EXPECT_TRUE(std::string(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float)) == w0);
  }
  // Another summation order moves weights by ~1e-7, enough to flip a borderline element across the reset
  // threshold of 1: after the first reset the curves agree to ~3e-4, not to float noise (seen in CI).
  constexpr double kAfterResets = 2e-3;
  expect_same_curve(one.train.out_dir, two.train.out_dir, 9, kAfterResets);
  const auto ea = records(one.train.out_dir, "osci_reset"), eb = records(two.train.out_dir, "osci_reset");
  ASSERT_EQ(ea.size(), 2u);
  ASSERT_EQ(eb.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(ea[i]["step"], eb[i]["step"]);
    EXPECT_EQ(ea[i]["tracked"], eb[i]["tracked"]);
    const int64_t ra = ea[i]["reset"].get<int64_t>(), rb = eb[i]["reset"].get<int64_t>();
    EXPECT_GT(rb, 0);
    EXPECT_LT(rb, eb[i]["tracked"].get<int64_t>());
    EXPECT_LE(std::abs(ra - rb), 2 + ra / 100) << "resets at step " << ea[i]["step"];
  }
  // Stopped at step 7 (a window open since step 6), resumed on 2 and 3 ranks and in one process.
  for (int resume_ranks : {2, 3, 1}) {
    const std::string name = "osci-resume" + std::to_string(resume_ranks);
    ASSERT_EQ(train_launched(osci(name, 7), 2), 0);
    if (resume_ranks == 1)
      train_single(osci(name, 9));
    else
      ASSERT_EQ(train_launched(osci(name, 9), resume_ranks), 0);
    EXPECT_EQ(records(tmp_ / name, "osci_reset").size(), 2u);
    if (resume_ranks == 2) {
      EXPECT_EQ(sha256_file(tmp_ / name / "checkpoints/step_000009/model.safetensors"),
                sha256_file(tmp_ / "two/checkpoints/step_000009/model.safetensors"));
    } else {
      expect_same_curve(two.train.out_dir, tmp_ / name, 9, kAfterResets);
    }
  }
}

TEST_F(DataParallelTest, TooFewRowsForTheRanksFailsEveryRank) {
  RunConfig c = config("small", 2);
  c.data.batch = 2;
  EXPECT_NE(train_launched(c, 3), 0);
  EXPECT_FALSE(fs::exists(fs::path(c.train.out_dir) / "checkpoints"));
}

}  // namespace
}  // namespace fp4
