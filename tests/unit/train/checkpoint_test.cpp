#include "train/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>

#include "model/cpu_engine.h"
#include "test_util.h"
#include "train/file_io.h"
#include "train/safetensors.h"
#include "train/sha256.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using ::testing::HasSubstr;
using testing::TempDir;

using testing::trained_cpu_engine;

nlohmann::json trainer_json(int64_t step) {
  return {{"step", step}, {"tokens", step * 16}, {"note", "test"}};
}

std::string latest_name(const fs::path& run) {
  return read_file(checkpoint_root(run) / "latest");
}

// SHA-256 of every file of a checkpoint dir, to show it was not touched.
std::map<std::string, std::string> fingerprint(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename().string()] = sha256_file(e.path());
  return out;
}

TEST(Checkpoint, RoundTripRestoresTheExactState) {
  TempDir run;
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t seed = rng();
  auto a = trained_cpu_engine(seed, 3);
  const auto dir = save_checkpoint(run.path(), 3, *a, trainer_json(3));
  EXPECT_EQ(dir, checkpoint_root(run.path()) / "step_000003");
  EXPECT_EQ(latest_checkpoint(run.path()), dir);

  const Checkpoint ckpt = load_checkpoint(dir);
  EXPECT_EQ(ckpt.step(), 3);
  EXPECT_EQ(ckpt.trainer["note"], "test");
  auto b = make_cpu_engine(testing::small_model(), Recipe{}, seed + 1);
  restore_engine(*b, ckpt);
  const auto sa = a->save_state(), sb = b->save_state();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].name, sb[i].name);
    EXPECT_EQ(sa[i].bytes, sb[i].bytes) << sa[i].name;
  }
  // Both continue identically.
  std::mt19937_64 r1(seed ^ 7), r2(seed ^ 7);
  const std::vector<Batch> m1 = {testing::random_batch(r1, 2, 8, 257)},
                           m2 = {testing::random_batch(r2, 2, 8, 257)};
  EXPECT_EQ(a->train_step(m1, StepHyper{}).loss, b->train_step(m2, StepHyper{}).loss);
  // model.safetensors holds every parameter as F32 with its shape.
  for (const auto& p : a->parameters()) {
    const auto it =
        std::find_if(ckpt.model.begin(), ckpt.model.end(), [&](auto& t) { return t.name == p.name; });
    ASSERT_NE(it, ckpt.model.end()) << p.name;
    EXPECT_EQ(it->shape, p.shape);
    EXPECT_EQ(it->dtype, "F32");
  }
}

// A crash at any stage of a save leaves the previous checkpoint and `latest` as they were.
TEST(Checkpoint, InterruptedSaveNeverDamagesThePreviousOne) {
  for (const std::string stage : {"model", "state", "trainer", "manifest", "renamed"}) {
    TempDir run;
    auto engine = trained_cpu_engine(11, 1);
    const auto first = save_checkpoint(run.path(), 1, *engine, trainer_json(1));
    const auto before = fingerprint(first);
    auto engine2 = trained_cpu_engine(11, 2);
    SaveOptions crash;
    crash.after_stage = [&](const std::string& s) {
      if (s == stage) throw std::runtime_error("simulated crash after " + s);
    };
    EXPECT_THROW(save_checkpoint(run.path(), 2, *engine2, trainer_json(2), crash), std::runtime_error)
        << stage;
    EXPECT_EQ(latest_name(run.path()), "step_000001\n") << stage;
    EXPECT_EQ(fingerprint(first), before) << stage;
    const auto latest = latest_checkpoint(run.path());
    ASSERT_TRUE(latest);
    EXPECT_EQ(load_checkpoint(*latest).step(), 1) << stage;
    // The next save cleans up what the crash left and succeeds.
    save_checkpoint(run.path(), 3, *engine2, trainer_json(3));
    EXPECT_EQ(latest_name(run.path()), "step_000003\n");
    for (const auto& e : fs::directory_iterator(checkpoint_root(run.path())))
      EXPECT_NE(e.path().filename().string().rfind(".tmp-", 0), 0u) << e.path();
  }
}

TEST(Checkpoint, SavingTheSameStepAgainReplacesIt) {
  TempDir run;
  auto a = trained_cpu_engine(5, 2), b = trained_cpu_engine(6, 2);  // the step is the optimizer's
  save_checkpoint(run.path(), 2, *a, trainer_json(2));
  auto j = trainer_json(2);
  j["note"] = "second";
  const auto dir = save_checkpoint(run.path(), 2, *b, j);
  const auto ckpt = load_checkpoint(dir);
  EXPECT_EQ(ckpt.trainer["note"], "second");
  auto c = make_cpu_engine(testing::small_model(), Recipe{}, 99);
  restore_engine(*c, ckpt);
  EXPECT_EQ(c->save_state()[0].bytes, b->save_state()[0].bytes);
  EXPECT_EQ(list_checkpoints(run.path()).size(), 1u);
}

TEST(Checkpoint, KeepsTheLastK) {
  TempDir run;
  auto engine = trained_cpu_engine(3, 1);
  SaveOptions keep;
  keep.keep_last = 2;
  for (int s : {10, 20, 30, 40, 50}) save_checkpoint(run.path(), s, *engine, trainer_json(s), keep);
  const auto all = list_checkpoints(run.path());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].filename(), "step_000040");
  EXPECT_EQ(all[1].filename(), "step_000050");
}

TEST(Checkpoint, NoCheckpointAndBrokenPointers) {
  TempDir run;
  EXPECT_FALSE(latest_checkpoint(run.path()));
  auto engine = trained_cpu_engine(3, 1);
  save_checkpoint(run.path(), 7, *engine, trainer_json(7));
  write_file_atomically(checkpoint_root(run.path()) / "latest", "step_000008\n");
  EXPECT_THAT(error_of([&] { latest_checkpoint(run.path()); }), HasSubstr("names step_000008 but"));
  write_file_atomically(checkpoint_root(run.path()) / "latest", "garbage\n");
  EXPECT_THAT(error_of([&] { latest_checkpoint(run.path()); }), HasSubstr("does not name a checkpoint"));
  // Without a pointer (a crash before the first one was written) the newest complete dir is used.
  fs::remove(checkpoint_root(run.path()) / "latest");
  EXPECT_EQ(latest_checkpoint(run.path())->filename(), "step_000007");
  EXPECT_THROW(save_checkpoint(run.path(), 9, *engine, trainer_json(8)), Error);
}

// The manifest's sha256 of each file, computed from memory while writing, is the SHA-256 of the
// file on disk: the portable hasher and coreutils' sha256sum agree.
TEST(Checkpoint, ManifestHashesMatchTheFilesOnDisk) {
  TempDir run;
  std::mt19937_64 rng(std::random_device{}());
  auto engine = trained_cpu_engine(rng(), 2);
  const auto dir = save_checkpoint(run.path(), 2, *engine, trainer_json(2));
  const auto manifest = nlohmann::json::parse(read_file(dir / "manifest.json"));
  ASSERT_EQ(manifest["files"].size(), 3u);
  for (const auto& [name, entry] : manifest["files"].items()) {
    const fs::path path = dir / name;
    EXPECT_EQ(entry["bytes"].get<uint64_t>(), fs::file_size(path)) << name;
    EXPECT_EQ(entry["sha256"], sha256_file(path, Sha256Impl::kPortable)) << name;
    std::FILE* p = ::popen(("sha256sum '" + path.string() + "'").c_str(), "r");
    ASSERT_NE(p, nullptr);
    char out[65] = {};
    ASSERT_EQ(std::fread(out, 1, 64, p), 64u);
    ::pclose(p);
    EXPECT_EQ(entry["sha256"], std::string(out)) << name;
  }
  // The files hold what the engine had: parameters and state read back equal a fresh copy.
  const auto ckpt = load_checkpoint(dir);
  const auto state = engine->save_state();
  ASSERT_EQ(ckpt.state.size(), state.size());
  for (size_t i = 0; i < state.size(); ++i) EXPECT_EQ(ckpt.state[i].bytes, state[i].bytes) << state[i].name;
  for (const auto& t : ckpt.model) {
    std::vector<float> w(t.bytes.size() / 4);
    engine->read_parameter(t.name, w);
    EXPECT_EQ(f32_values(t), w) << t.name;
  }
}

// A write that fails on the state thread is reported with the file and tensor at fault, the
// previous checkpoint stays the latest, and the next save succeeds.
TEST(Checkpoint, FailedStateWriteIsReportedAndHarmless) {
  TempDir run;
  auto engine = trained_cpu_engine(13, 1);
  const auto first = save_checkpoint(run.path(), 1, *engine, trainer_json(1));
  const auto before = fingerprint(first);
  auto state = engine->save_state();
  state.push_back(StateTensor{"bad", "F32", {3}, std::vector<uint8_t>(5)});
  const std::string msg = error_of([&] { save_checkpoint(run.path(), 2, *engine, trainer_json(2), state); });
  EXPECT_THAT(msg, HasSubstr("state.safetensors: tensor 'bad'"));
  EXPECT_EQ(latest_name(run.path()), "step_000001\n");
  EXPECT_EQ(fingerprint(first), before);
  EXPECT_EQ(list_checkpoints(run.path()).size(), 1u);
  save_checkpoint(run.path(), 2, *engine, trainer_json(2));
  EXPECT_EQ(load_checkpoint(*latest_checkpoint(run.path())).step(), 2);
  for (const auto& e : fs::directory_iterator(checkpoint_root(run.path())))
    EXPECT_NE(e.path().filename().string().rfind(".tmp-", 0), 0u) << e.path();
}

class CorruptCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = trained_cpu_engine(21, 1);
    dir_ = save_checkpoint(run_.path(), 1, *engine_, trainer_json(1));
  }
  TempDir run_;
  std::unique_ptr<TrainingEngine> engine_;
  fs::path dir_;
};

void flip_random_bit(const fs::path& path, std::mt19937_64& rng) {
  std::string raw = read_file(path);
  const size_t at = rng() % raw.size();
  raw[at] = static_cast<char>(raw[at] ^ (1 << (rng() % 8)));
  write_file_synced(path, raw);
}

// Also without reading the state: its checksum is still verified.
TEST_F(CorruptCheckpoint, FlippedByteIsAChecksumMismatch) {
  std::mt19937_64 rng(std::random_device{}());
  for (const bool with_state : {true, false}) {
    for (const char* f : {"model.safetensors", "state.safetensors", "trainer.json"}) {
      const auto path = dir_ / f;
      flip_random_bit(path, rng);
      const std::string msg = error_of([&] { load_checkpoint(dir_, with_state); });
      EXPECT_THAT(msg, HasSubstr(path.string() + ": checksum mismatch")) << f << " with_state " << with_state;
      SetUp();  // a fresh, intact checkpoint for the next file
    }
  }
}

// Model and state are verified concurrently; with both damaged the model is reported, every time.
TEST_F(CorruptCheckpoint, BothLargeFilesDamagedReportsTheModel) {
  std::mt19937_64 rng(std::random_device{}());
  flip_random_bit(dir_ / "model.safetensors", rng);
  flip_random_bit(dir_ / "state.safetensors", rng);
  for (int i = 0; i < 5; ++i)
    EXPECT_THAT(error_of([&] { load_checkpoint(dir_); }),
                HasSubstr((dir_ / "model.safetensors").string() + ": checksum mismatch"));
}

TEST_F(CorruptCheckpoint, TruncatedMissingAndManifestProblems) {
  const auto state = dir_ / "state.safetensors";
  const std::string raw = read_file(state);
  write_file_synced(state, std::string_view(raw).substr(0, raw.size() / 2));
  EXPECT_THAT(error_of([&] { load_checkpoint(dir_); }), HasSubstr(state.string() + ": truncated"));
  fs::remove(state);
  EXPECT_THAT(error_of([&] { load_checkpoint(dir_); }), HasSubstr(state.string() + ": missing"));
  fs::remove(dir_ / "manifest.json");
  EXPECT_THAT(error_of([&] { load_checkpoint(dir_); }), HasSubstr("manifest.json: missing"));
  write_file_synced(dir_ / "manifest.json", "{not json");
  EXPECT_THAT(error_of([&] { load_checkpoint(dir_); }), HasSubstr("manifest.json: not valid JSON"));
  EXPECT_THAT(error_of([&] { load_checkpoint(run_ / "nowhere"); }),
              HasSubstr("checkpoint directory not found"));
}

// Rewrites model.safetensors (and its manifest entry, so the checksum passes) to test the checks
// that come after it.
void rewrite_model(const fs::path& dir, std::vector<StateTensor> tensors) {
  write_safetensors(dir / "model.safetensors", tensors);
  auto manifest = nlohmann::json::parse(read_file(dir / "manifest.json"));
  manifest["files"]["model.safetensors"] = {{"bytes", fs::file_size(dir / "model.safetensors")},
                                            {"sha256", sha256_file(dir / "model.safetensors")}};
  write_file_synced(dir / "manifest.json", manifest.dump());
}

TEST_F(CorruptCheckpoint, MissingTensorAndShapeMismatchNameTheTensor) {
  auto tensors = load_checkpoint(dir_).model;
  const std::string dropped = tensors.back().name;
  tensors.pop_back();
  rewrite_model(dir_, tensors);
  auto other = make_cpu_engine(testing::small_model(), Recipe{}, 1);
  // Without the state (which takes that tensor from the model) the parameters' own check speaks.
  EXPECT_THAT(error_of([&] { load_parameters(*other, load_checkpoint(dir_, /*with_state=*/false)); }),
              HasSubstr("model.safetensors: tensor '" + dropped + "' is missing"));
  // A checkpoint of a wider model does not fit.
  ModelConfig wide = testing::small_model();
  wide.d_model = 64;
  auto big = make_cpu_engine(wide, Recipe{}, 1);
  SetUp();
  const std::string msg = error_of([&] { load_parameters(*big, load_checkpoint(dir_)); });
  EXPECT_THAT(msg, HasSubstr("model.safetensors: tensor '"));
  EXPECT_THAT(msg, HasSubstr("has shape"));
}

}  // namespace
}  // namespace fp4
