// What a checkpoint must hold to be loaded or saved: finite values (a diverged state is never kept as the
// last good one), exactly the model's tensors, optimizer state that belongs to the checkpoint's step, and
// trainer.json counters in range; `latest` that is not a regular file is refused, not waited on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <random>

#include "model/cpu_engine.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/file_io.h"
#include "train/safetensors.h"
#include "train/sha256.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using ::testing::HasSubstr;
using testing::TempDir;

std::vector<StateTensor> parameter_tensors(const TrainingEngine& engine) {
  std::vector<StateTensor> out;
  for (const auto& p : engine.parameters()) {
    std::vector<float> v(static_cast<size_t>(p.numel()));
    engine.read_parameter(p.name, v);
    out.push_back(make_f32_tensor(p.name, p.shape, v));
  }
  return out;
}

// A (version 1) checkpoint of exactly these contents with a consistent manifest, so that only the
// semantic checks can refuse it.
fs::path write_checkpoint(const fs::path& run, int64_t step, const std::vector<StateTensor>& model,
                          const std::vector<StateTensor>& state, const nlohmann::json& trainer) {
  const fs::path dir = checkpoint_root(run) / checkpoint_name(step);
  fs::create_directories(dir);
  write_safetensors(dir / "model.safetensors", model, {{"format", "pt"}});
  write_safetensors(dir / "state.safetensors", state);
  write_file_synced(dir / "trainer.json", trainer.dump(2));
  nlohmann::json manifest = {{"format", kCheckpointFormat}, {"version", 1}, {"step", step}};
  for (const char* f : {"model.safetensors", "state.safetensors", "trainer.json"})
    manifest["files"][f] = {{"bytes", fs::file_size(dir / f)}, {"sha256", sha256_file(dir / f)}};
  write_file_synced(dir / "manifest.json", manifest.dump(2));
  return dir;
}

StateTensor* find(std::vector<StateTensor>& ts, const std::string& name) {
  for (auto& t : ts)
    if (t.name == name) return &t;
  return nullptr;
}

class CheckpointIntegrity : public ::testing::Test {
 protected:
  void SetUp() override {
    steps_ = 1 + static_cast<int>(rng_() % 3);
    engine_ = testing::trained_cpu_engine(rng_(), steps_);
    model_ = parameter_tensors(*engine_);
    state_ = engine_->save_state();
  }
  nlohmann::json trainer(int64_t step) const {
    return {{"step", step}, {"tokens", step * 16}, {"elapsed", 1.5}};
  }
  std::string restore_error(const std::vector<StateTensor>& model, const std::vector<StateTensor>& state,
                            const nlohmann::json& t) {
    const fs::path dir = write_checkpoint(run_.path() / std::to_string(n_++), steps_, model, state, t);
    return error_of([&] {
      auto fresh = make_cpu_engine(testing::small_model(), Recipe{}, 7);
      restore_engine(*fresh, load_checkpoint(dir));
    });
  }

  std::mt19937_64 rng_{std::random_device{}()};
  int steps_ = 1;
  std::unique_ptr<TrainingEngine> engine_;
  std::vector<StateTensor> model_, state_;
  TempDir run_;
  int n_ = 0;
};

TEST_F(CheckpointIntegrity, ConsistentCheckpointRestores) {
  const fs::path dir = write_checkpoint(run_.path(), steps_, model_, state_, trainer(steps_));
  auto fresh = make_cpu_engine(testing::small_model(), Recipe{}, 7);
  restore_engine(*fresh, load_checkpoint(dir));
  EXPECT_EQ(fresh->save_state().size(), state_.size());
}

TEST_F(CheckpointIntegrity, UnknownTensorsAreErrors) {
  for (const std::string extra : {"foo", "blocks.2.attn.wo", "blocks.1.attn.wo"}) {
    auto model = model_;
    const std::vector<float> values = {1, 2, 3, 4};
    model.push_back(make_f32_tensor(extra, {2, 2}, values));
    EXPECT_THAT(restore_error(model, state_, trainer(steps_)),
                HasSubstr("tensor '" + extra + "' is not a parameter of model"))
        << extra;
  }
  // A [2^32, 2^32] tensor of 0 bytes is refused as the header is read (its size overflowed before).
  auto model = model_;
  model.push_back({"huge", "F32", {int64_t{1} << 32, int64_t{1} << 32}, {}});
  EXPECT_THAT(error_of([&] { write_safetensors(run_ / "x.safetensors", model); }),
              HasSubstr("more than 2^56 elements"));
}

TEST_F(CheckpointIntegrity, OptimizerStateMustBeFiniteAndOfTheCheckpointsStep) {
  auto nan_state = state_;
  StateTensor* m = nullptr;
  for (auto& t : nan_state)
    if (t.name.rfind("adamw.m.", 0) == 0) m = &t;
  ASSERT_NE(m, nullptr);
  const float nan = std::nanf("");
  std::memcpy(m->bytes.data() + 4 * (rng_() % (m->bytes.size() / 4)), &nan, 4);
  EXPECT_THAT(restore_error(model_, nan_state, trainer(steps_)), HasSubstr("holds a non-finite value"));
  for (int64_t wrong : {int64_t{0}, int64_t{steps_ + 2}, int64_t{1} << 62}) {
    auto st = state_;
    StateTensor* step = find(st, "adamw.step");
    ASSERT_NE(step, nullptr);
    std::memcpy(step->bytes.data(), &wrong, 8);
    EXPECT_THAT(restore_error(model_, st, trainer(steps_)),
                HasSubstr("'adamw.step' counts " + std::to_string(wrong) + " optimizer steps"))
        << wrong;
  }
}

TEST_F(CheckpointIntegrity, TrainerCountersMustBeWholeAndInRange) {
  for (const nlohmann::json& tokens : {nlohmann::json(-5), nlohmann::json(1.5),
                                       nlohmann::json(18446744073709551615ull), nlohmann::json("3")}) {
    auto t = trainer(steps_);
    t["tokens"] = tokens;
    EXPECT_THAT(restore_error(model_, state_, t), HasSubstr("\"tokens\" must be an integer in [0, 2^62]"))
        << tokens.dump();
  }
  auto t = trainer(steps_);
  t["elapsed"] = -1;
  EXPECT_THAT(restore_error(model_, state_, t), HasSubstr("\"elapsed\" must be a finite number"));
}

TEST_F(CheckpointIntegrity, NonFiniteStateIsNeverSavedAndTheLastGoodOneStays) {
  const fs::path good = save_checkpoint(run_.path(), steps_, *engine_, trainer(steps_));
  std::vector<float> w(static_cast<size_t>(engine_->parameters()[1].numel()));
  const std::string name = engine_->parameters()[1].name;
  engine_->read_parameter(name, w);
  w[rng_() % w.size()] = (rng_() % 2) ? INFINITY : std::nanf("");
  engine_->write_parameter(name, w);
  EXPECT_THAT(error_of([&] { save_checkpoint(run_.path(), steps_ + 1, *engine_, trainer(steps_ + 1)); }),
              HasSubstr("'" + name + "' holds a non-finite value"));
  EXPECT_EQ(latest_checkpoint(run_.path()), good);
  for (const auto& e : fs::directory_iterator(checkpoint_root(run_.path())))
    EXPECT_EQ(e.path().filename().string().rfind(".tmp-", 0), std::string::npos) << e.path();
  EXPECT_EQ(list_checkpoints(run_.path()).size(), 1u);
}

TEST_F(CheckpointIntegrity, LatestThatIsNotARegularFileIsRefusedWithoutBlocking) {
  save_checkpoint(run_.path(), steps_, *engine_, trainer(steps_));
  const fs::path latest = checkpoint_root(run_.path()) / "latest";
  fs::remove(latest);
  ASSERT_EQ(::mkfifo(latest.c_str(), 0600), 0);
  EXPECT_THAT(error_of([&] { latest_checkpoint(run_.path()); }), HasSubstr("latest: not a regular file"));
  // A step number with more digits than an int64 holds names no checkpoint.
  fs::remove(latest);
  write_file_atomically(latest, "step_" + std::string(30, '9') + "\n");
  EXPECT_THAT(error_of([&] { latest_checkpoint(run_.path()); }), HasSubstr("does not name a checkpoint"));
}

}  // namespace
}  // namespace fp4
