#include "train/trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <fstream>
#include <random>

#include "data/prepare.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/data_setup.h"
#include "train/file_io.h"
#include "train/sha256.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using ::testing::HasSubstr;
using testing::TempDir;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::prepare_corpus(tmp_.path()); }

  // A small run: 2 micro-batches of 4 x 32 per step, a fixed 12-step schedule.
  RunConfig config(const std::string& run, int64_t steps) const {
    RunConfig c = testing::small_run_config(tmp_.path(), run, steps, seed_, 4, 12);
    c.data.grad_accum = 2;
    c.train.eval_every = 4;
    c.train.eval_batches = 2;
    c.train.ckpt_every = 5;
    return c;
  }

  TrainerOptions quiet() const {
    TrainerOptions o;
    o.log = log_.get();
    return o;
  }

  TempDir tmp_;
  uint64_t seed_ = std::random_device{}();
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log_{std::tmpfile(), &std::fclose};
};

std::vector<nlohmann::json> records(const fs::path& run, const std::string& type) {
  std::vector<nlohmann::json> out;
  for (const auto& j : read_metrics(run / "metrics.jsonl"))
    if (j["type"] == type) out.push_back(j);
  return out;
}

TEST_F(TrainerTest, TrainsLogsEvaluatesAndCheckpoints) {
  Trainer t(config("run", 12), quiet());
  EXPECT_FALSE(t.resumed());
  const TrainResult r = t.run();
  EXPECT_EQ(r.step, 12);
  EXPECT_EQ(r.tokens, 12 * 2 * 4 * 32);
  const auto train = records(tmp_ / "run", "train");
  ASSERT_EQ(train.size(), 12u);
  for (size_t i = 0; i < train.size(); ++i) {
    EXPECT_EQ(train[i]["step"], i + 1);
    EXPECT_TRUE(std::isfinite(train[i]["loss"].get<double>()));
    EXPECT_GT(train[i]["tokens_per_s"].get<double>(), 0);
  }
  // Learning happens: the last steps' loss is well under the first one's (ln 257 = 5.55 at init).
  EXPECT_LT(train.back()["loss"].get<double>(), train.front()["loss"].get<double>() - 0.5);
  // Warm-up reaches the peak at step 2, the cosine ends at final_ratio * peak.
  EXPECT_FLOAT_EQ(train[1]["lr"].get<float>(), 3e-3f);
  EXPECT_NEAR(train.back()["lr"].get<double>(), 3e-3 * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 11 / 10))),
              1e-9);
  const auto eval = records(tmp_ / "run", "eval");
  ASSERT_EQ(eval.size(), 3u);  // steps 4 and 8, and the end
  EXPECT_EQ(eval[2]["step"], 12);
  EXPECT_DOUBLE_EQ(eval[2]["val_loss"].get<double>(), r.final_eval.loss);
  EXPECT_NEAR(eval[2]["val_ppl"].get<double>(), std::exp(r.final_eval.loss), 1e-9);
  // Checkpoints at 5, 10 and the end; config.json and recipe.toml in the run dir.
  const auto ckpts = list_checkpoints(tmp_ / "run");
  ASSERT_EQ(ckpts.size(), 3u);
  EXPECT_EQ(ckpts.back().filename(), "step_000012");
  EXPECT_EQ(r.last_checkpoint, ckpts.back());
  const auto cfg =
      run_config_from_json(nlohmann::json::parse(read_file(tmp_ / "run/config.json")), "config.json");
  EXPECT_EQ(config_hash(cfg), config_hash(t.config()));
  EXPECT_TRUE(fs::exists(tmp_ / "run/recipe.toml"));
  const auto trainer = load_checkpoint(ckpts.back(), false).trainer;
  EXPECT_EQ(trainer["tokens"], r.tokens);
  EXPECT_EQ(trainer["config_hash"], config_hash(t.config()));
  EXPECT_EQ(LoaderState::from_json(trainer["loader"]).position, 12 * 2 * 4);  // windows (rows) read
}

// Train 12 steps in one go; train 6, stop, resume to 12: the same losses, bit for bit.
TEST_F(TrainerTest, ResumedRunReproducesTheUninterruptedOneBitForBit) {
  Trainer(config("full", 12), quiet()).run();
  {
    Trainer first_half(config("split", 6), quiet());
    first_half.run();
  }
  Trainer second_half(config("split", 12), quiet());
  EXPECT_TRUE(second_half.resumed());
  EXPECT_EQ(second_half.step(), 6);
  second_half.run();

  const auto full = read_metrics(tmp_ / "full/metrics.jsonl");
  const auto split = read_metrics(tmp_ / "split/metrics.jsonl");
  const auto pick = [](const std::vector<nlohmann::json>& recs, const std::string& type, const char* key) {
    std::vector<std::pair<int64_t, double>> out;
    for (const auto& j : recs)
      if (j["type"] == type) out.emplace_back(j["step"].get<int64_t>(), j[key].get<double>());
    return out;
  };
  ASSERT_EQ(pick(full, "train", "loss").size(), 12u);
  EXPECT_EQ(pick(split, "train", "loss"), pick(full, "train", "loss"));
  EXPECT_EQ(pick(split, "train", "grad_norm"), pick(full, "train", "grad_norm"));
  EXPECT_EQ(pick(split, "train", "lr"), pick(full, "train", "lr"));
  // The split run also evaluated at its stop (step 6); every step both evaluated agrees exactly.
  const auto ef = pick(full, "eval", "val_loss"), es = pick(split, "eval", "val_loss");
  for (const auto& [step, loss] : ef) {
    const auto it = std::find_if(es.begin(), es.end(), [&](auto& p) { return p.first == step; });
    ASSERT_NE(it, es.end()) << step;
    EXPECT_EQ(it->second, loss) << step;
  }
  // The final weights are the same bytes.
  EXPECT_EQ(sha256_file(tmp_ / "full/checkpoints/step_000012/model.safetensors"),
            sha256_file(tmp_ / "split/checkpoints/step_000012/model.safetensors"));
}

// NVIDIA NVFP4 with OsciReset (its 16x16 tensor-scaled weights; the block128 recipe needs widths of 128),
// windows of 3 steps every 4 from step 2 (resets after steps 5 and 9), threshold 1 so that some weights
// do reset: the resets are logged, and a run stopped mid-window (step 7) and resumed ends with the same
// bytes.
TEST_F(TrainerTest, OsciResetIsLoggedAndResumesMidWindowBitForBit) {
  const auto osci = [this](const std::string& run, int64_t steps) {
    RunConfig c = config(run, steps);
    c.recipe.name = "nvidia-nvfp4";
    c.recipe.overrides = {{"osci_reset.enabled", "true"},
                          {"osci_reset.window", "3"},
                          {"osci_reset.period", "4"},
                          {"osci_reset.start", "2"},
                          {"osci_reset.threshold", "1"}};
    c.train.ckpt_every = 100;
    return c;
  };
  Trainer(osci("full", 12), quiet()).run();
  const auto events = records(tmp_ / "full", "osci_reset");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["step"], 5);
  EXPECT_EQ(events[1]["step"], 9);
  for (const auto& e : events) {
    EXPECT_GT(e["tracked"].get<int64_t>(), 0);
    EXPECT_GT(e["reset"].get<int64_t>(), 0);
    EXPECT_LT(e["reset"].get<int64_t>(), e["tracked"].get<int64_t>());
    EXPECT_EQ(e["layers"].size(), 4u * static_cast<size_t>(testing::small_model().n_layers));
  }
  Trainer(osci("split", 7), quiet()).run();
  Trainer rest(osci("split", 12), quiet());
  ASSERT_TRUE(rest.resumed());
  rest.run();
  const auto split_events = records(tmp_ / "split", "osci_reset");
  ASSERT_EQ(split_events.size(), 2u);
  EXPECT_EQ(sha256_file(tmp_ / "full/checkpoints/step_000012/model.safetensors"),
            sha256_file(tmp_ / "split/checkpoints/step_000012/model.safetensors"));
  // Flips: each line's total is its layers' sum, the rates are flips per tracked element and step (3 steps
  // a window), and the window the checkpoint cut (6..9) counts the same flips as the uninterrupted one.
  for (size_t w = 0; w < 2; ++w) {
    const auto &e = events[w], &f = split_events[w];
    int64_t flips = 0;
    for (size_t i = 0; i < e["layers"].size(); ++i) {
      const auto &l = e["layers"][i], &m = f["layers"][i];
      ASSERT_TRUE(l.contains("flips") && l.contains("flip_rate")) << l.dump();
      const auto n = l["flips"].get<int64_t>();
      flips += n;
      EXPECT_EQ(l["flip_rate"].get<double>(),
                static_cast<double>(n) / (3.0 * static_cast<double>(l["tracked"].get<int64_t>())));
      EXPECT_EQ(m["name"], l["name"]);
      EXPECT_EQ(m["flips"], l["flips"]) << l["name"] << " in the window closed at step " << e["step"];
      EXPECT_EQ(m["flip_rate"], l["flip_rate"]);
      EXPECT_EQ(m["mean_risk"], l["mean_risk"]);
    }
    EXPECT_GT(flips, 0);
    EXPECT_EQ(e["flips"].get<int64_t>(), flips);
    EXPECT_EQ(f["flips"], e["flips"]);
    EXPECT_EQ(e["flip_rate"].get<double>(),
              static_cast<double>(flips) / (3.0 * static_cast<double>(e["tracked"].get<int64_t>())));
    EXPECT_LE(e["flip_rate"].get<double>(), 1.0);
  }
}

// A fractional osci_reset.start is a fraction of the schedule (optim.total_steps = 12 here), not of
// train.steps: a run stopped with train.steps = 7 and resumed with 12 (docs/CLI.md's way to stop and
// continue) starts its windows at the same step (0.25 x 12 = 3: resets after steps 6 and 10) and ends with
// the bytes of the uninterrupted run.
TEST_F(TrainerTest, OsciResetFractionalStartIsOfTheScheduleAndResumesBitForBit) {
  const auto osci = [this](const std::string& run, int64_t steps) {
    RunConfig c = config(run, steps);
    c.recipe.name = "nvidia-nvfp4";
    c.recipe.overrides = {{"osci_reset.enabled", "true"},
                          {"osci_reset.window", "3"},
                          {"osci_reset.period", "4"},
                          {"osci_reset.start", "0.25"},
                          {"osci_reset.threshold", "1"}};
    c.train.ckpt_every = 100;
    return c;
  };
  Trainer(osci("full", 12), quiet()).run();
  const auto events = records(tmp_ / "full", "osci_reset");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["step"], 6);
  EXPECT_EQ(events[1]["step"], 10);
  Trainer(osci("split", 7), quiet()).run();
  Trainer rest(osci("split", 12), quiet());
  ASSERT_TRUE(rest.resumed());
  rest.run();
  const auto split_events = records(tmp_ / "split", "osci_reset");
  ASSERT_EQ(split_events.size(), 2u);
  EXPECT_EQ(split_events[0]["step"], 6);
  EXPECT_EQ(split_events[1]["step"], 10);
  EXPECT_EQ(sha256_file(tmp_ / "full/checkpoints/step_000012/model.safetensors"),
            sha256_file(tmp_ / "split/checkpoints/step_000012/model.safetensors"));
}

// optim.lr = 3.4e38 turns the weights non-finite after a step whose loss was still finite: the save of
// that step is refused (the old code wrote an all-NaN checkpoint and called it the last good one), no
// partial directory stays, and metrics.jsonl records why the run stopped.
TEST_F(TrainerTest, DivergedStateIsNotSavedAsAGoodCheckpoint) {
  RunConfig c = config("diverged", 6);
  c.optim.lr = 3.4e38;
  c.optim.warmup = 0;
  c.train.ckpt_every = 1;
  const std::string msg = error_of([&] { Trainer(c, quiet()).run(); });
  EXPECT_THAT(msg, HasSubstr("holds a non-finite value"));
  EXPECT_THAT(msg, ::testing::Not(HasSubstr("last good checkpoint")));
  EXPECT_TRUE(list_checkpoints(tmp_ / "diverged").empty());
  for (const auto& e : fs::directory_iterator(checkpoint_root(tmp_ / "diverged")))
    EXPECT_EQ(e.path().filename().string().rfind(".tmp-", 0), std::string::npos) << e.path();
  const auto errors = records(tmp_ / "diverged", "error");
  ASSERT_FALSE(errors.empty());
  EXPECT_THAT(errors.front()["message"].get<std::string>(), HasSubstr("non-finite"));
}

// A run whose checkpoints cannot be written is refused before its first step (not at its first save),
// and what killed saves left in checkpoints/ is removed at the start.
TEST_F(TrainerTest, CheckpointDirectoryIsCheckedAndCleanedAtTheStart) {
  const fs::path run = tmp_ / "blocked";
  fs::create_directories(run);
  write_file_synced(run / "checkpoints", "a file where the directory should be\n");
  EXPECT_THAT(error_of([&] { Trainer t(config("blocked", 3), quiet()); }),
              HasSubstr("cannot create the checkpoint directory"));
  EXPECT_FALSE(fs::exists(run / "metrics.jsonl"));

  const fs::path root = tmp_ / "left/checkpoints";
  fs::create_directories(root / ".tmp-step_000003-4242");
  write_file_synced(root / ".tmp-step_000003-4242/model.safetensors", "partial");
  write_file_synced(root / "latest.tmp.4242", "step_000003\n");
  Trainer t(config("left", 3), quiet());
  EXPECT_FALSE(fs::exists(root / ".tmp-step_000003-4242"));
  EXPECT_FALSE(fs::exists(root / "latest.tmp.4242"));
  EXPECT_FALSE(t.resumed());
}

TEST_F(TrainerTest, ResumeRefusesADifferentTraining) {
  Trainer(config("run", 3), quiet()).run();
  auto changed = config("run", 6);
  changed.optim.beta2 = 0.99;
  changed.data.batch = 2;
  const std::string msg = error_of([&] { Trainer t(changed, quiet()); });
  EXPECT_THAT(msg, HasSubstr("cannot resume"));
  EXPECT_THAT(msg, HasSubstr("optim.beta2: 0.95"));
  EXPECT_THAT(msg, HasSubstr("data.batch: 4 -> 2"));
  // Cadence and length may change.
  auto longer = config("run", 6);
  longer.train.log_every = 3;
  Trainer t(longer, quiet());
  EXPECT_TRUE(t.resumed());
}

TEST_F(TrainerTest, ResumeFlagNeedsACheckpoint) {
  auto opts = quiet();
  opts.require_resume = true;
  EXPECT_THAT(error_of([&] { Trainer t(config("fresh", 3), opts); }),
              HasSubstr("holds no checkpoint to resume from"));
}

TEST_F(TrainerTest, RunAtItsEndOnlyEvaluates) {
  Trainer(config("run", 3), quiet()).run();
  const auto before = sha256_file(tmp_ / "run/checkpoints/step_000003/model.safetensors");
  Trainer again(config("run", 3), quiet());
  const auto r = again.run();
  EXPECT_EQ(r.step, 3);
  EXPECT_EQ(records(tmp_ / "run", "train").size(), 3u);
  EXPECT_EQ(sha256_file(tmp_ / "run/checkpoints/step_000003/model.safetensors"), before);
}

TEST_F(TrainerTest, NanLossStopsNamingTheStepAndKeepsTheLastCheckpoint) {
  Trainer(config("run", 5), quiet()).run();
  const auto ckpt = tmp_ / "run/checkpoints/step_000005";
  std::map<std::string, std::string> before;
  for (const auto& e : fs::directory_iterator(ckpt)) before[e.path().string()] = sha256_file(e.path());
  const std::string latest = read_file(tmp_ / "run/checkpoints/latest");

  std::string msg;
  {
    Trainer t(config("run", 12), quiet());
    ASSERT_EQ(t.step(), 5);
    const auto p = t.engine().parameters().front();
    std::vector<float> poison(static_cast<size_t>(p.numel()), std::nanf(""));
    t.engine().write_parameter(p.name, poison);
    msg = error_of([&] { t.run(); });
  }
  EXPECT_THAT(msg, HasSubstr("training stopped at step 6"));
  EXPECT_THAT(msg, HasSubstr("step_000005, is untouched"));
  for (const auto& [path, sha] : before) EXPECT_EQ(sha256_file(path), sha) << path;
  EXPECT_EQ(read_file(tmp_ / "run/checkpoints/latest"), latest);
  EXPECT_EQ(list_checkpoints(tmp_ / "run").size(), 1u);
  const auto errors = records(tmp_ / "run", "error");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0]["step"], 6);
  // The run resumes from the intact checkpoint.
  Trainer again(config("run", 6), quiet());
  EXPECT_EQ(again.step(), 5);
  EXPECT_EQ(again.run().step, 6);
}

TEST_F(TrainerTest, NanOnAFreshRunSaysNoCheckpointWasWritten) {
  Trainer t(config("run", 4), quiet());
  const auto p = t.engine().parameters().back();
  std::vector<float> poison(static_cast<size_t>(p.numel()), std::numeric_limits<float>::infinity());
  t.engine().write_parameter(p.name, poison);
  const std::string msg = error_of([&] { t.run(); });
  EXPECT_THAT(msg, HasSubstr("training stopped at step 1"));
  EXPECT_THAT(msg, HasSubstr("no checkpoint was written"));
  EXPECT_FALSE(latest_checkpoint(tmp_ / "run"));
}

TEST_F(TrainerTest, OneTrainerPerRunDirectory) {
  Trainer first(config("run", 2), quiet());
  EXPECT_THAT(error_of([&] { Trainer second(config("run", 2), quiet()); }),
              HasSubstr("another fp4train (pid " + std::to_string(::getpid()) + ") is training in"));
  Trainer elsewhere(config("other", 2), quiet());
  EXPECT_EQ(elsewhere.run().step, 2);
}

// A first SIGINT finishes the step, saves a checkpoint and returns; the run resumes from it.
TEST_F(TrainerTest, SignalStopsAfterTheStepWithACheckpoint) {
  auto opts = quiet();
  opts.checkpoint_stage = [](const std::string& stage) {
    if (stage == "latest") std::raise(SIGINT);  // during the step-5 save
  };
  TrainResult r;
  {
    Trainer t(config("run", 12), opts);
    r = t.run();
  }
  EXPECT_EQ(r.stop_signal, SIGINT);
  EXPECT_EQ(r.step, 5);
  EXPECT_EQ(r.last_checkpoint.filename(), "step_000005");
  EXPECT_TRUE(records(tmp_ / "run", "eval").size() == 1u);  // the step-4 evaluation only
  // The handler is gone after run(): the default action is back.
  struct sigaction now {};
  sigaction(SIGINT, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
  Trainer again(config("run", 12), quiet());
  EXPECT_EQ(again.step(), 5);
  EXPECT_EQ(again.run().stop_signal, 0);
}

TEST_F(TrainerTest, PreparesTextOnFirstUse) {
  auto c = config("run", 2);
  c.data.train_dir = (tmp_ / "auto-shards").string();
  c.data.train_text = (tmp_ / "text/train").string();
  c.data.val_text = (tmp_ / "text/val").string();
  Trainer t(c, quiet());
  EXPECT_TRUE(fs::exists(tmp_ / "auto-shards/manifest.json"));
  EXPECT_EQ(t.run().step, 2);
}

TEST_F(TrainerTest, TextListsPrepareEveryListedFolder) {
  EXPECT_EQ(text_paths("a,b/c,,d"), (std::vector<fs::path>{"a", "b/c", "d"}));
  EXPECT_TRUE(text_paths("").empty());
  fs::create_directories(tmp_ / "text/extra");
  std::ofstream(tmp_ / "text/extra/more.txt") << "A second training folder, listed after the first.\n";
  auto c = config("run", 2);
  c.data.train_dir = (tmp_ / "list-shards").string();
  c.data.train_text = (tmp_ / "text/train").string() + "," + (tmp_ / "text/extra").string();
  c.data.val_text = (tmp_ / "text/val").string();
  Trainer t(c, quiet());
  const Manifest m = read_manifest(tmp_ / "list-shards");
  EXPECT_EQ(m.inputs.size(), expand_inputs({tmp_ / "text/train"}).size() + 1);
  EXPECT_EQ(fs::path(m.inputs.back()).filename(), "more.txt");
  auto d = config("run-missing", 2);  // another run directory: `t` still holds the lock of "run"
  d.data.train_dir = (tmp_ / "list-missing").string();
  d.data.train_text = (tmp_ / "text/train").string() + "," + (tmp_ / "nowhere").string();
  EXPECT_THAT(error_of([&] { Trainer u(d, quiet()); }), HasSubstr("nowhere is missing"));
}

TEST_F(TrainerTest, MissingDataNamesWhatToRun) {
  auto c = config("run/nested", 2);
  c.data.train_dir = (tmp_ / "no-shards").string();
  c.data.train_text = (tmp_ / "no-corpus").string();
  EXPECT_THAT(error_of([&] { Trainer t(c, quiet()); }), HasSubstr("scripts/fetch_corpus.sh"));
  EXPECT_FALSE(fs::exists(tmp_ / "run"));  // a run that cannot start leaves nothing behind
  c.data.train_text = "";
  EXPECT_THAT(error_of([&] { Trainer t(c, quiet()); }), HasSubstr("fp4train prepare"));
  c.data.train_text = (tmp_ / "text/train").string();
  c.data.val_text = (tmp_ / "no-val").string();
  EXPECT_THAT(error_of([&] { Trainer t(c, quiet()); }), HasSubstr("no-val is missing"));
  PrepareOptions o;
  o.inputs = {tmp_ / "text/train"};
  o.tokenizer = "bytes";
  o.out_dir = tmp_ / "train-only";
  prepare_shards(o);
  c.data.train_dir = o.out_dir.string();
  EXPECT_THAT(error_of([&] { Trainer t(c, quiet()); }), HasSubstr("train-only has no validation split"));
}

TEST_F(TrainerTest, VocabularyMustFitTheModel) {
  auto c = config("run", 2);
  c.model.vocab_real = 200;
  c.model.vocab_size = 256;
  EXPECT_THAT(error_of([&] { Trainer t(c, quiet()); }),
              HasSubstr("the tokenizer's vocabulary (257) does not fit model.vocab_real 200"));
}

TEST(LrSchedule, FollowsTheConfig) {
  RunConfig c = default_run_config();
  c.optim.lr = 1e-3;
  c.optim.warmup = 10;
  c.train.steps = 100;
  c.optim.final_ratio = 0.1;
  const auto cosine = make_lr_schedule(c);
  EXPECT_DOUBLE_EQ(lr_at(cosine, 9), 1e-3);
  EXPECT_NEAR(lr_at(cosine, 100), 1e-4, 1e-12);
  c.optim.schedule = "wsd";
  c.optim.decay_fraction = 0.2;
  const auto wsd = make_lr_schedule(c);
  EXPECT_EQ(wsd.decay_steps, 20);
  EXPECT_DOUBLE_EQ(lr_at(wsd, 80), 1e-3);
  EXPECT_NEAR(lr_at(wsd, 100), 1e-4, 1e-12);
  c.optim.schedule = "constant";
  EXPECT_DOUBLE_EQ(lr_at(make_lr_schedule(c), 99), 1e-3);
  c.optim.total_steps = 1000;
  c.optim.schedule = "cosine";
  EXPECT_EQ(make_lr_schedule(c).total_steps, 1000);
}

TEST(RunRecipe, NamesKnownRecipesOnError) {
  RecipeConfig r;
  r.name = "bf16";
  EXPECT_EQ(load_run_recipe(r).name, "bf16");
  r.name = "no-such-recipe";
  EXPECT_THAT(error_of([&] { load_run_recipe(r); }), HasSubstr("no-such-recipe"));
}

}  // namespace
}  // namespace fp4
