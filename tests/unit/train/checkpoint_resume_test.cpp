// Resuming through version-2 checkpoints (parameters stored once, in model.safetensors) reproduces
// the uninterrupted run bit for bit, for recipes whose engine state differs: plain AdamW (bf16,
// tetrajet-v2-base), Q-AdamW's quantized moments and LoRA-SVD's factors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
#include "train/checkpoint.h"
#include "train/file_io.h"
#include "train/metrics.h"
#include "train/sha256.h"
#include "train/trainer.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

class CheckpointResume : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { testing::prepare_corpus(tmp_.path()); }

  // Widths and micro-batches (4 x 32 tokens) of 128, which the block128 scales of the TetraJet recipes need.
  RunConfig config(const std::string& run, int64_t steps) const {
    RunConfig c = testing::small_run_config(tmp_.path(), run, steps, seed_, 4, 8);
    c.model.d_model = 128;
    c.model.d_ff = 256;
    c.recipe.name = GetParam();
    c.train.eval_every = 0;
    c.train.ckpt_every = 100;
    return c;
  }

  TrainerOptions quiet() const {
    TrainerOptions o;
    o.log = log_.get();
    return o;
  }

  std::vector<double> losses(const std::string& run) const {
    std::vector<double> out;
    for (const auto& j : read_metrics(tmp_ / run / "metrics.jsonl"))
      if (j["type"] == "train") out.push_back(j["loss"].get<double>());
    return out;
  }

  TempDir tmp_;
  uint64_t seed_ = std::random_device{}();
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log_{std::tmpfile(), &std::fclose};
};

TEST_P(CheckpointResume, ThroughVersion2IsBitForBit) {
  Trainer(config("full", 8), quiet()).run();
  Trainer(config("split", 4), quiet()).run();
  const auto middle = tmp_ / "split/checkpoints/step_000004";
  const auto manifest = nlohmann::json::parse(read_file(middle / "manifest.json"));
  EXPECT_EQ(manifest["version"], 2);
  EXPECT_FALSE(manifest["state_from_model"].empty());
  Trainer rest(config("split", 8), quiet());
  ASSERT_TRUE(rest.resumed());
  EXPECT_EQ(rest.step(), 4);
  rest.run();

  ASSERT_EQ(losses("full").size(), 8u);
  EXPECT_EQ(losses("split"), losses("full"));
  for (const char* f : {"model.safetensors", "state.safetensors"})
    EXPECT_EQ(sha256_file(tmp_ / "split/checkpoints/step_000008" / f),
              sha256_file(tmp_ / "full/checkpoints/step_000008" / f))
        << f;
}

INSTANTIATE_TEST_SUITE_P(Recipes, CheckpointResume,
                         ::testing::Values("bf16", "tetrajet-v2-base", "tetrajet-v2-qadamw",
                                           "tetrajet-v2-lorasvd"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace fp4
