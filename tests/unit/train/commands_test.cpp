#include "train/commands.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "data/manifest.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/file_io.h"
#include "train/metrics.h"
#include "train/sha256.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using ::testing::HasSubstr;
using testing::TempDir;

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::prepare_corpus(tmp_.path()); }

  TrainArgs train_args(const std::string& out) const {
    TrainArgs a;
    a.out = (tmp_ / out).string();
    a.sets = {"model.n_layers=1",
              "model.d_model=32",
              "model.n_heads=2",
              "model.d_ff=64",
              "data.train_dir=" + (tmp_ / "shards").string(),
              "data.train_text=",
              "data.val_text=",
              "data.batch=4",
              "data.seq=32",
              "train.steps=6",
              "optim.warmup=2",
              "train.eval_every=0",
              "train.eval_batches=3",
              "train.log_every=2"};
    return a;
  }
  TempDir tmp_;
};

TEST_F(CommandsTest, TrainThenEvalAndSampleFromTheRunDir) {
  const TrainResult r = train_command(train_args("run"));
  EXPECT_EQ(r.step, 6);

  // eval over the same batches as the trainer's final evaluation gives the same loss, exactly.
  EvalArgs e;
  e.checkpoint = tmp_ / "run";
  e.batches = 3;
  EXPECT_EQ(eval_command(e).loss, r.final_eval.loss);
  e.checkpoint = r.last_checkpoint;
  EvalArgs whole;  // every window of the prepared split
  whole.checkpoint = r.last_checkpoint;
  whole.data = (tmp_ / "shards").string();
  const EvalResult all = eval_command(whole);
  EXPECT_GT(all.tokens, eval_command(e).tokens);

  SampleArgs s;
  s.checkpoint = tmp_ / "run";
  s.prompt = "the ";
  s.tokens = 12;
  s.seed = 5;
  const std::string text = sample_command(s);
  EXPECT_LE(text.size(), 12u);
  EXPECT_EQ(sample_command(s), text);
  s.temperature = 0;
  EXPECT_EQ(sample_command(s), sample_command(s));
}

TEST_F(CommandsTest, ArgumentsMapToConfigKeys) {
  TrainArgs a = train_args("x");
  a.recipe = "bf16";
  const RunConfig c = run_config_from_args(a);
  EXPECT_EQ(c.train.out_dir, (tmp_ / "x").string());
  EXPECT_EQ(c.recipe.name, "bf16");
  EXPECT_EQ(c.model.d_model, 32);
  // --set comes last, so it wins over --out.
  a.sets.push_back("train.out_dir=y");
  EXPECT_EQ(run_config_from_args(a).train.out_dir, "y");
  a.recipe = "nonexistent-recipe";
  EXPECT_THAT(error_of([&] { train_command(a); }), HasSubstr("nonexistent-recipe"));
}

TEST_F(CommandsTest, DeviceOverrideForEvalAndSample) {
  TrainArgs a = train_args("run");
  a.sets.push_back("train.steps=3");
  const TrainResult r = train_command(a);
  EXPECT_EQ(load_model(tmp_ / "run", "cpu").engine->device_name().substr(0, 3), "cpu");
  // A run recorded as trained on the GPU: without the CUDA engine the error says how to use the CPU.
  auto trainer = nlohmann::json::parse(read_file(r.last_checkpoint / "trainer.json"));
  trainer["config"]["train"]["device"] = "cuda";
  write_file_synced(r.last_checkpoint / "trainer.json", trainer.dump());
  auto manifest = nlohmann::json::parse(read_file(r.last_checkpoint / "manifest.json"));
  manifest["files"]["trainer.json"] = {{"bytes", fs::file_size(r.last_checkpoint / "trainer.json")},
                                       {"sha256", sha256_file(r.last_checkpoint / "trainer.json")}};
  write_file_synced(r.last_checkpoint / "manifest.json", manifest.dump());
  if (load_model(tmp_ / "run", "cpu").engine->device_name().substr(0, 3) == "cpu") {
    try {
      load_model(tmp_ / "run");
      SUCCEED() << "this build has a CUDA engine and a GPU";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("pass --device cpu"));
    }
  }
  EXPECT_THAT(error_of([&] { load_model(tmp_ / "run", "tpu"); }),
              HasSubstr("train.device must be cpu or cuda"));
}

TEST_F(CommandsTest, LoadModelNeedsACheckpoint) {
  fs::create_directories(tmp_ / "empty");
  EXPECT_THAT(error_of([&] { load_model(tmp_ / "empty"); }),
              HasSubstr("neither a checkpoint (no manifest.json) nor a run directory with checkpoints"));
}

// --batches x rows overflowed int64 before (UBSan); now a range error before any loading.
TEST_F(CommandsTest, EvalBatchesAreRangeChecked) {
  for (int64_t bad : {int64_t{-1}, (int64_t{1} << 40) + 1, int64_t{1} << 62}) {
    EvalArgs a;
    a.checkpoint = tmp_ / "absent";
    a.batches = bad;
    EXPECT_THAT(error_of([&] { eval_command(a); }), HasSubstr("eval --batches must be in [0, 1099511627776]"))
        << bad;
  }
}

TEST_F(CommandsTest, PrepareWritesShardsAndManifest) {
  PrepareArgs p;
  p.inputs = {tmp_ / "text/train"};
  p.val_inputs = {tmp_ / "text/val"};
  p.tokenizer = "bytes";
  p.out = tmp_ / "prepared";
  p.threads = 2;
  p.shard_tokens = 5000;
  prepare_command(p);
  const Manifest m = read_manifest(tmp_ / "prepared");
  EXPECT_EQ(m.vocab_size, 257);
  EXPECT_GT(m.train.shards.size(), 1u);
  EXPECT_EQ(m.train.tokens, read_manifest(tmp_ / "shards").train.tokens);
}

}  // namespace
}  // namespace fp4
