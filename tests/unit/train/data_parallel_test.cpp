// Data-parallel training as several processes on loopback: the test binary starts copies of itself
// through launch_local, each running DataParallelChild.RunsOneRank with the torchrun variables.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>

#include "dist/launcher.h"
#include "test_util.h"
#include "train/file_io.h"
#include "train/metrics.h"
#include "train/trainer.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

constexpr const char* kConfigVar = "FP4_DP_TEST_CONFIG";

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
}

class DataParallelTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::prepare_corpus(tmp_.path()); }

  RunConfig config(const std::string& run, int64_t steps) const {
    RunConfig c = default_run_config();
    c.model = testing::small_model();
    c.model.n_layers = 2;  // several gradient buckets
    c.data.train_dir = (tmp_ / "shards").string();
    c.data.train_text = "";
    c.data.val_text = "";
    c.data.batch = 6;
    c.data.seq = 32;
    c.data.grad_accum = 2;
    c.optim.lr = 3e-3;
    c.optim.warmup = 2;
    c.optim.total_steps = 10;
    c.train.steps = steps;
    c.train.log_every = 1;
    c.train.eval_every = 0;
    c.train.eval_batches = 2;
    c.train.ckpt_every = 2;
    c.train.out_dir = (tmp_ / run).string();
    c.train.seed = seed_;
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

TEST_F(DataParallelTest, TooFewRowsForTheRanksFailsEveryRank) {
  RunConfig c = config("small", 2);
  c.data.batch = 2;
  EXPECT_NE(train_launched(c, 3), 0);
  EXPECT_FALSE(fs::exists(fs::path(c.train.out_dir) / "checkpoints"));
}

}  // namespace
}  // namespace fp4
