// Checkpoint format version 2 (the state's copies of parameters live in model.safetensors alone) and
// reading version 1 checkpoints written the old way.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <set>

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

using testing::trained_cpu_engine;

nlohmann::json trainer_json(int64_t step) {
  return {{"step", step}, {"tokens", step * 16}};
}

nlohmann::json manifest_of(const fs::path& dir) {
  return nlohmann::json::parse(read_file(dir / "manifest.json"));
}

std::set<std::string> parameter_names(const TrainingEngine& engine) {
  std::set<std::string> out;
  for (const auto& p : engine.parameters()) out.insert(p.name);
  return out;
}

void expect_same_tensors(const std::vector<StateTensor>& got, const std::vector<StateTensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].name) << i;
    EXPECT_EQ(got[i].dtype, want[i].dtype) << want[i].name;
    EXPECT_EQ(got[i].shape, want[i].shape) << want[i].name;
    EXPECT_EQ(got[i].bytes, want[i].bytes) << want[i].name;
  }
}

// The engine's parameters as model.safetensors holds them.
std::vector<StateTensor> parameter_tensors(const TrainingEngine& engine) {
  std::vector<StateTensor> out;
  for (const auto& p : engine.parameters()) {
    std::vector<float> v(static_cast<size_t>(p.numel()));
    engine.read_parameter(p.name, v);
    out.push_back(make_f32_tensor(p.name, p.shape, v));
  }
  return out;
}

nlohmann::json digest_of(const fs::path& path) {
  return {{"bytes", fs::file_size(path)}, {"sha256", sha256_file(path)}};
}

// A version-1 checkpoint as the previous build wrote it: the whole state, parameters included.
fs::path write_version1(const fs::path& run, int64_t step, const TrainingEngine& engine) {
  const fs::path dir = checkpoint_root(run) / checkpoint_name(step);
  fs::create_directories(dir);
  write_safetensors(dir / "model.safetensors", parameter_tensors(engine), {{"format", "pt"}});
  write_safetensors(dir / "state.safetensors", engine.save_state());
  write_file_synced(dir / "trainer.json", trainer_json(step).dump(2));
  nlohmann::json manifest = {{"format", kCheckpointFormat}, {"version", 1}, {"step", step}};
  for (const char* f : {"model.safetensors", "state.safetensors", "trainer.json"})
    manifest["files"][f] = digest_of(dir / f);
  write_file_synced(dir / "manifest.json", manifest.dump(2));
  write_file_atomically(checkpoint_root(run) / "latest", checkpoint_name(step) + "\n");
  return dir;
}

// Both engines take the same next steps and end with the same state, bit for bit.
void expect_same_continuation(TrainingEngine& a, TrainingEngine& b, uint64_t seed) {
  std::mt19937_64 r1(seed), r2(seed);
  for (int i = 0; i < 2; ++i) {
    const std::vector<Batch> m1 = {testing::random_batch(r1, 2, 8, 257)},
                             m2 = {testing::random_batch(r2, 2, 8, 257)};
    const auto la = a.train_step(m1, StepHyper{}).loss;
    const auto lb = b.train_step(m2, StepHyper{}).loss;
    EXPECT_EQ(la, lb) << "step " << i;
  }
  expect_same_tensors(b.save_state(), a.save_state());
}

TEST(CheckpointV2, StateFileLacksTheParametersAndLoadsAsSaved) {
  TempDir run;
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t seed = rng();
  const int steps = 1 + static_cast<int>(rng() % 3);
  auto engine = trained_cpu_engine(seed, steps);
  const auto state = engine->save_state();
  const auto dir = save_checkpoint(run.path(), steps, *engine, trainer_json(steps), state);

  const auto manifest = manifest_of(dir);
  EXPECT_EQ(manifest["version"], 2);
  const auto params = parameter_names(*engine);
  std::set<std::string> listed;
  for (const auto& e : manifest["state_from_model"]) {
    const auto i = e["index"].get<size_t>();
    ASSERT_LT(i, state.size());
    EXPECT_EQ(e["name"], state[i].name);
    listed.insert(e["name"].get<std::string>());
  }
  EXPECT_EQ(listed, params);  // the CPU engine's state holds every parameter as its F32 master
  const auto stored = read_safetensors(dir / "state.safetensors").tensors;
  EXPECT_EQ(stored.size(), state.size() - params.size());
  for (const auto& t : stored) EXPECT_FALSE(params.contains(t.name)) << t.name;
  EXPECT_LT(fs::file_size(dir / "state.safetensors"), fs::file_size(dir / "model.safetensors") * 3);

  const Checkpoint ckpt = load_checkpoint(dir);
  expect_same_tensors(ckpt.state, state);
  expect_same_tensors(ckpt.model, parameter_tensors(*engine));
  const Checkpoint no_state = load_checkpoint(dir, /*with_state=*/false);
  EXPECT_TRUE(no_state.state.empty());
  expect_same_tensors(no_state.model, ckpt.model);

  auto restored = make_cpu_engine(testing::small_model(), Recipe{}, seed + 1);
  restore_engine(*restored, ckpt);
  expect_same_continuation(*engine, *restored, seed ^ 0x5a);
}

TEST(CheckpointV2, Version1StillLoadsAndResumesBitForBit) {
  TempDir v1_run, v2_run;
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t seed = rng();
  auto engine = trained_cpu_engine(seed, 2);
  const auto dir = write_version1(v1_run.path(), 2, *engine);
  ASSERT_EQ(latest_checkpoint(v1_run.path()), dir);
  const Checkpoint v1 = load_checkpoint(dir);
  expect_same_tensors(v1.state, engine->save_state());
  // The same engine saved as version 2 reads back as the same Checkpoint.
  const Checkpoint v2 = load_checkpoint(save_checkpoint(v2_run.path(), 2, *engine, trainer_json(2)));
  expect_same_tensors(v2.state, v1.state);
  expect_same_tensors(v2.model, v1.model);

  auto restored = make_cpu_engine(testing::small_model(), Recipe{}, seed + 1);
  restore_engine(*restored, v1);
  expect_same_continuation(*engine, *restored, seed ^ 0xa5);
}

// A state tensor named as a parameter but not byte for byte equal to it (one mantissa bit of one element, or
// another dtype) is kept in the state file, and loads as it was saved.
TEST(CheckpointV2, StateTensorDifferingFromItsParameterIsKept) {
  TempDir run;
  std::mt19937_64 rng(std::random_device{}());
  auto engine = trained_cpu_engine(rng(), 1);
  auto state = engine->save_state();
  const auto params = parameter_names(*engine);
  std::vector<size_t> param_at;
  for (size_t i = 0; i < state.size(); ++i)
    if (params.contains(state[i].name)) param_at.push_back(i);
  ASSERT_GE(param_at.size(), 2u);
  std::shuffle(param_at.begin(), param_at.end(), rng);
  StateTensor& flipped = state[param_at[0]];
  ASSERT_EQ(flipped.dtype, "F32") << flipped.name;
  // A bit of the low two (mantissa-only, little-endian) bytes of one element, so the value stays finite:
  // an exponent bit could make it Inf or NaN, which save_checkpoint rightly refuses.
  const size_t byte = 4 * (rng() % (flipped.bytes.size() / 4)) + rng() % 2;
  flipped.bytes[byte] = static_cast<uint8_t>(flipped.bytes[byte] ^ (1u << (rng() % 8)));
  StateTensor& retyped = state[param_at[1]];
  retyped.dtype = "U8";
  retyped.shape = {static_cast<int64_t>(retyped.bytes.size())};

  const auto dir = save_checkpoint(run.path(), 1, *engine, trainer_json(1), state);
  const auto manifest = manifest_of(dir);
  std::set<std::string> listed;
  for (const auto& e : manifest["state_from_model"]) listed.insert(e["name"].get<std::string>());
  EXPECT_EQ(listed.size(), params.size() - 2);
  EXPECT_FALSE(listed.contains(flipped.name));
  EXPECT_FALSE(listed.contains(retyped.name));
  const auto stored = read_safetensors(dir / "state.safetensors");
  EXPECT_EQ(stored.get(flipped.name, "state").bytes, flipped.bytes);
  EXPECT_EQ(stored.get(retyped.name, "state").dtype, "U8");
  expect_same_tensors(load_checkpoint(dir).state, state);
}

// Rewrites a checkpoint file and its manifest entry, so that the checksums pass and the later checks speak.
void replace_file(const fs::path& dir, const std::string& file, const std::function<void()>& write) {
  write();
  auto manifest = manifest_of(dir);
  manifest["files"][file] = digest_of(dir / file);
  write_file_synced(dir / "manifest.json", manifest.dump());
}

TEST(CheckpointV2, ListedTensorMissingFromTheModelIsRefused) {
  TempDir run;
  std::mt19937_64 rng(std::random_device{}());
  auto engine = trained_cpu_engine(rng(), 1);
  const auto dir = save_checkpoint(run.path(), 1, *engine, trainer_json(1));
  const auto listed = manifest_of(dir)["state_from_model"];
  ASSERT_FALSE(listed.empty());
  const std::string dropped = listed[rng() % listed.size()]["name"];
  auto model = read_safetensors(dir / "model.safetensors").tensors;
  std::erase_if(model, [&](const StateTensor& t) { return t.name == dropped; });
  replace_file(dir, "model.safetensors", [&] { write_safetensors(dir / "model.safetensors", model); });
  const std::string msg = error_of([&] { load_checkpoint(dir); });
  EXPECT_THAT(msg, HasSubstr(dir.string() + ": the manifest takes state tensor '" + dropped + "'"));
  EXPECT_THAT(msg, HasSubstr("model.safetensors, which lacks it"));
}

TEST(CheckpointV2, ManifestFaultsAreNamed) {
  TempDir run;
  auto engine = trained_cpu_engine(7, 1);
  const auto dir = save_checkpoint(run.path(), 1, *engine, trainer_json(1));
  const auto good = manifest_of(dir);
  const auto edited = [&](const std::function<void(nlohmann::json&)>& edit) {
    auto m = good;
    edit(m);
    write_file_synced(dir / "manifest.json", m.dump());
  };
  const auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    edited(edit);
    return error_of([&] { load_checkpoint(dir); });
  };
  for (const nlohmann::json& v : {nlohmann::json(3), nlohmann::json(0), nlohmann::json("2")})
    EXPECT_THAT(with([&](auto& m) { m["version"] = v; }),
                HasSubstr("unsupported version " + v.dump() + " (this build reads versions 1 and 2)"));
  EXPECT_THAT(with([](auto& m) { m.erase("state_from_model"); }),
              HasSubstr("version 2 needs a \"state_from_model\" list"));
  // A version-1 reading of a version-2 state: the parameters are simply absent, so the engine refuses.
  auto v1 = make_cpu_engine(testing::small_model(), Recipe{}, 1);
  edited([](auto& m) { m["version"] = 1; });
  EXPECT_THAT(error_of([&] { restore_engine(*v1, load_checkpoint(dir)); }), HasSubstr("state.safetensors: "));
  EXPECT_THAT(with([](auto& m) { std::swap(m["state_from_model"][0], m["state_from_model"][1]); }),
              HasSubstr("indices must increase"));
  EXPECT_THAT(with([](auto& m) { m["state_from_model"][0]["index"] = -1; }),
              HasSubstr("non-negative \"index\""));
  EXPECT_THAT(with([](auto& m) { m["state_from_model"].back()["index"] = 100000; }),
              HasSubstr("is placed at index 100000"));
  // A listed tensor the state file also holds.
  const auto stored = read_safetensors(dir / "state.safetensors").tensors;
  EXPECT_THAT(with([&](auto& m) { m["state_from_model"][0]["name"] = stored.front().name; }),
              HasSubstr("state.safetensors: holds tensor '" + stored.front().name + "'"));
  write_file_synced(dir / "manifest.json", good.dump());
  EXPECT_EQ(load_checkpoint(dir).state.size(), stored.size() + good["state_from_model"].size());
}

}  // namespace
}  // namespace fp4
