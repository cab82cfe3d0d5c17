#include "train/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <future>
#include <map>
#include <set>

#include "core/error.h"
#include "train/file_io.h"
#include "train/safetensors.h"
#include "train/sha256.h"

namespace fp4 {
namespace fs = std::filesystem;

namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kStateFile = "state.safetensors";
constexpr const char* kTrainerFile = "trainer.json";
constexpr const char* kManifestFile = "manifest.json";
constexpr const char* kLatestFile = "latest";
constexpr const char* kTempPrefix = ".tmp-";

// step_NNNNNN -> NNNNNN, or -1 for any other name.
int64_t step_of(const std::string& name) {
  constexpr std::string_view kPrefix = "step_";
  if (name.rfind(kPrefix, 0) != 0 || name.size() == kPrefix.size()) return -1;
  if (name.size() - kPrefix.size() > 18) return -1;  // more digits than an int64 step holds
  int64_t v = 0;
  for (size_t i = kPrefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

// The index of the first non-finite value of F32 bytes, or -1.
int64_t first_non_finite(std::span<const uint8_t> bytes) {
  const size_t n = bytes.size() / sizeof(float);
  for (size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, bytes.data() + i * sizeof(float), sizeof v);
    if (!std::isfinite(v)) return static_cast<int64_t>(i);
  }
  return -1;
}

// A checkpoint is a run's last good state: one holding NaN or infinity could not be resumed.
void check_finite(const std::string& what, const std::string& name, std::span<const uint8_t> bytes) {
  const int64_t i = first_non_finite(bytes);
  FP4_CHECK(i < 0, what, " '", name, "' holds a non-finite value at element ", i,
            ": the training diverged; a checkpoint of this state would not be a good one");
}

// The state tensors that are byte-identical copies of a parameter (same name, F32, same shape, same
// bytes as the engine's parameter): version 2 keeps them in model.safetensors alone. Each parameter is
// read once; anything that differs stays in the state, so no data can be lost.
std::map<std::string, const StateTensor*> state_copies_of_parameters(const TrainingEngine& engine,
                                                                     std::span<const StateTensor> state) {
  std::map<std::string, const StateTensor*> by_name;
  for (const auto& t : state)
    FP4_CHECK(by_name.emplace(t.name, &t).second, kStateFile, ": duplicate tensor '", t.name, "'");
  std::map<std::string, const StateTensor*> copies;
  std::vector<float> buffer;
  for (const auto& p : engine.parameters()) {
    const auto it = by_name.find(p.name);
    if (it == by_name.end()) continue;
    const StateTensor& t = *it->second;
    const size_t bytes = static_cast<size_t>(p.numel()) * sizeof(float);
    if (t.dtype != "F32" || t.shape != p.shape || t.bytes.size() != bytes) continue;
    buffer.resize(static_cast<size_t>(p.numel()));
    engine.read_parameter(p.name, buffer);
    if (std::memcmp(buffer.data(), t.bytes.data(), bytes) == 0) copies.emplace(p.name, &t);
  }
  return copies;
}

// model.safetensors, streamed one parameter at a time through one buffer (the largest parameter's
// size) instead of a copy of them all, hashed as it is written. A parameter with a verified copy in
// `copies` is written from that copy, without reading the engine again.
FileDigest write_model_file(const fs::path& path, const TrainingEngine& engine,
                            const std::map<std::string, const StateTensor*>& copies,
                            const SafetensorsMetadata& meta) {
  const std::vector<ParameterInfo> params = engine.parameters();
  std::vector<SafetensorsEntry> entries;
  int64_t largest = 0;
  for (const auto& p : params) {
    entries.push_back({p.name, "F32", p.shape});
    if (!copies.contains(p.name)) largest = std::max(largest, p.numel());
  }
  const std::string head = safetensors_header(path, entries, meta);
  SyncedFileWriter out(path, /*hash=*/true);
  out.write({reinterpret_cast<const uint8_t*>(head.data()), head.size()});
  std::vector<float> buffer(static_cast<size_t>(largest));
  for (const auto& p : params) {
    if (const auto it = copies.find(p.name); it != copies.end()) {
      check_finite("parameter", p.name, it->second->bytes);
      out.write(it->second->bytes);
      continue;
    }
    const auto values = std::span(buffer).first(static_cast<size_t>(p.numel()));
    engine.read_parameter(p.name, values);
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(values.data()),
                                         values.size_bytes());
    check_finite("parameter", p.name, bytes);
    out.write(bytes);
  }
  return out.finish();
}

// Moves `from` to `to`; when `to` exists (the same step saved again) the two are swapped
// atomically and the old one is removed afterwards.
void move_into_place(const fs::path& from, const fs::path& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return;
  if (errno == EEXIST) {
    FP4_CHECK(::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0, to.string(),
              ": cannot replace the existing checkpoint: ", std::strerror(errno));
    fs::remove_all(from);
    return;
  }
  // Filesystems without renameat2 flags: a plain rename works when the target does not exist.
  FP4_CHECK(!fs::exists(to), to.string(), ": cannot replace the existing checkpoint on this filesystem");
  std::error_code ec;
  fs::rename(from, to, ec);
  FP4_CHECK(!ec, to.string(), ": cannot move the new checkpoint into place: ", ec.message());
}

void prune(const fs::path& run_dir, int keep_last, const fs::path& keep_always) {
  auto all = list_checkpoints(run_dir);
  const int excess = static_cast<int>(all.size()) - std::max(keep_last, 1);
  for (int i = 0; i < excess; ++i)
    if (all[static_cast<size_t>(i)] != keep_always) fs::remove_all(all[static_cast<size_t>(i)]);
}

nlohmann::json file_entry(const FileDigest& d) {
  return {{"bytes", d.bytes}, {"sha256", d.sha256}};
}

// Checks that the manifest lists the file and that it exists with the listed size.
void check_listed_and_sized(const fs::path& manifest_path, const nlohmann::json& manifest,
                            const fs::path& path) {
  const std::string f = path.filename().string();
  FP4_CHECK(manifest.at("files").contains(f), manifest_path.string(), ": does not list ", f);
  const auto expected_bytes = manifest.at("files").at(f).value("bytes", uint64_t{0});
  FP4_CHECK(fs::is_regular_file(path), path.string(), ": missing");
  const auto bytes = fs::file_size(path);
  FP4_CHECK(bytes >= expected_bytes, path.string(), ": truncated: ", bytes, " bytes, the manifest says ",
            expected_bytes);
  FP4_CHECK(bytes == expected_bytes, path.string(), ": ", bytes, " bytes, the manifest says ",
            expected_bytes);
}

void check_sha256(const fs::path& path, const std::string& sha, const nlohmann::json& entry) {
  FP4_CHECK(sha == entry.value("sha256", ""), path.string(), ": checksum mismatch (sha256 ", sha,
            ", the manifest says ", entry.value("sha256", "?"), ")");
}

// Reads a safetensors file once, hashing its bytes as they arrive, and checks size and SHA-256
// against the manifest entry. A file damaged so that its structure checks fail first is reported
// as a checksum mismatch when it is one (hashing it again), the clearer fault.
std::vector<StateTensor> read_verified_tensors(const fs::path& path, const nlohmann::json& entry) {
  HashedSafetensors read;
  try {
    read = read_safetensors_hashed(path);
  } catch (const Error&) {
    check_sha256(path, sha256_file(path), entry);
    throw;
  }
  const auto expected_bytes = entry.value("bytes", uint64_t{0});
  FP4_CHECK(read.digest.bytes == expected_bytes, path.string(), ": ", read.digest.bytes,
            " bytes read, the manifest says ", expected_bytes);
  check_sha256(path, read.digest.sha256, entry);
  return std::move(read.content.tensors);
}

// trainer.json's counters: whole numbers in range (1.5 or 2^64 tokens would be truncated or wrapped when
// read), and a finite elapsed time.
void check_trainer_fields(const fs::path& path, const nlohmann::json& trainer) {
  const auto whole = [&](const char* key) {
    FP4_CHECK(trainer.contains(key), path.string(), ": missing field \"", key, "\"");
    const auto& v = trainer[key];
    FP4_CHECK((v.is_number_unsigned() && v.get<uint64_t>() <= (uint64_t{1} << 62)) ||
                  (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() == 0),
              path.string(), ": \"", key, "\" must be an integer in [0, 2^62], got ", v.dump());
  };
  whole("step");
  if (trainer.contains("tokens")) whole("tokens");
  if (trainer.contains("elapsed")) {
    const auto& e = trainer["elapsed"];
    FP4_CHECK(e.is_number() && std::isfinite(e.get<double>()) && e.get<double>() >= 0, path.string(),
              ": \"elapsed\" must be a finite number of seconds >= 0, got ", e.dump());
  }
}

// A version-2 manifest's "state_from_model": [{"name", "index"}, ...], indices increasing.
struct FromModel {
  std::string name;
  size_t index = 0;
};
std::vector<FromModel> state_from_model(const fs::path& manifest_path, const nlohmann::json& manifest) {
  FP4_CHECK(manifest.contains("state_from_model") && manifest["state_from_model"].is_array(),
            manifest_path.string(), ": version 2 needs a \"state_from_model\" list");
  std::vector<FromModel> out;
  for (const auto& e : manifest["state_from_model"]) {
    FP4_CHECK(e.is_object() && e.contains("name") && e["name"].is_string() && e.contains("index") &&
                  e["index"].is_number_unsigned(),
              manifest_path.string(), ": \"state_from_model\" entry ", e.dump(),
              " needs a string \"name\" and a non-negative \"index\"");
    out.push_back({e["name"].get<std::string>(), e["index"].get<size_t>()});
    FP4_CHECK(out.size() == 1 || out[out.size() - 2].index < out.back().index, manifest_path.string(),
              ": \"state_from_model\" indices must increase (at '", out.back().name, "')");
  }
  return out;
}

// Puts the state tensors a version-2 checkpoint keeps only in model.safetensors back into their
// places, so the state is the list the engine saved. Copies: the model tensors stay for
// load_parameters.
std::vector<StateTensor> merge_state(const fs::path& dir, const std::vector<FromModel>& from_model,
                                     const std::vector<StateTensor>& model, std::vector<StateTensor> stored) {
  std::map<std::string, const StateTensor*> model_by_name;
  for (const auto& t : model) model_by_name.emplace(t.name, &t);
  std::set<std::string> taken;
  for (const auto& f : from_model)
    FP4_CHECK(taken.insert(f.name).second, (dir / kManifestFile).string(), ": lists state tensor '", f.name,
              "' twice");
  for (const auto& t : stored)
    FP4_CHECK(!taken.contains(t.name), (dir / kStateFile).string(), ": holds tensor '", t.name,
              "', which the manifest says is taken from ", kModelFile);
  for (const auto& f : from_model)
    FP4_CHECK(model_by_name.contains(f.name), dir.string(), ": the manifest takes state tensor '", f.name,
              "' from ", kModelFile, ", which lacks it");
  std::vector<StateTensor> state;
  state.reserve(stored.size() + from_model.size());
  auto next_stored = stored.begin();
  for (const auto& f : from_model) {
    while (state.size() < f.index && next_stored != stored.end()) state.push_back(std::move(*next_stored++));
    FP4_CHECK(state.size() == f.index, (dir / kManifestFile).string(), ": state tensor '", f.name,
              "' is placed at index ", f.index, " of a state of ", stored.size() + from_model.size(),
              " tensors");
    state.push_back(*model_by_name.at(f.name));
  }
  while (next_stored != stored.end()) state.push_back(std::move(*next_stored++));
  return state;
}

// Leftovers of saves that were killed: temp checkpoint dirs and `latest`'s temp files (never read, since
// neither is a step_NNNNNN name or `latest`, but they hold disk space).
void remove_interrupted_saves(const fs::path& root) {
  const std::string latest_tmp = std::string(kLatestFile) + ".tmp.";
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(kTempPrefix, 0) == 0 || n.rfind(latest_tmp, 0) == 0) fs::remove_all(e.path());
  }
}

// Writes the checkpoint's files into `tmp`, moves it into place as root/name, updates `latest` and prunes.
fs::path write_and_publish(const fs::path& root, const fs::path& tmp, const std::string& name, int64_t step,
                           const TrainingEngine& engine, const nlohmann::json& trainer,
                           const std::vector<StateTensor>& state, const SaveOptions& options) {
  const auto stage = [&](const char* stage_name) {
    if (options.after_stage) options.after_stage(stage_name);
  };

  // Version 2: the state's copies of parameters are not written to the state file; the manifest lists
  // them with their places in the state, and loading takes them from model.safetensors.
  const auto copies = state_copies_of_parameters(engine, state);
  std::vector<const StateTensor*> kept;
  nlohmann::json from_model = nlohmann::json::array();
  for (size_t i = 0; i < state.size(); ++i) {
    const auto it = copies.find(state[i].name);
    if (it != copies.end() && it->second == &state[i])
      from_model.push_back({{"name", state[i].name}, {"index", i}});
    else
      kept.push_back(&state[i]);
  }

  // The state file (the larger) is written and hashed on a second thread while this one streams the
  // parameters into the model file. On a throw here the future's destructor waits for that thread;
  // the temp dir is removed by the next save, as after a crash.
  auto state_written = std::async(std::launch::async, [&] {
    return write_safetensors_hashed(tmp / kStateFile, std::span<const StateTensor* const>(kept),
                                    {{"step", std::to_string(step)}});
  });
  const SafetensorsMetadata meta = {
      {"format", "pt"}, {"step", std::to_string(step)}, {"model", engine.config().name}};
  const FileDigest model_file = write_model_file(tmp / kModelFile, engine, copies, meta);
  const FileDigest state_file = state_written.get();
  stage("model");
  stage("state");
  const FileDigest trainer_file = write_file_synced_hashed(tmp / kTrainerFile, trainer.dump(2) + "\n");
  stage("trainer");
  nlohmann::json manifest = {{"format", kCheckpointFormat}, {"version", kCheckpointVersion}, {"step", step}};
  manifest["files"][kModelFile] = file_entry(model_file);
  manifest["files"][kStateFile] = file_entry(state_file);
  manifest["files"][kTrainerFile] = file_entry(trainer_file);
  manifest["state_from_model"] = std::move(from_model);
  write_file_synced(tmp / kManifestFile, manifest.dump(2) + "\n");
  fsync_directory(tmp);
  stage("manifest");

  const fs::path final_dir = root / name;
  move_into_place(tmp, final_dir);
  fsync_directory(root);
  stage("renamed");
  write_file_atomically(root / kLatestFile, name + "\n");
  stage("latest");
  prune(root.parent_path(), options.keep_last, final_dir);
  return final_dir;
}

}  // namespace

fs::path checkpoint_root(const fs::path& run_dir) {
  return run_dir / "checkpoints";
}

std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%06lld", static_cast<long long>(step));
  return buf;
}

fs::path save_checkpoint(const fs::path& run_dir, int64_t step, const TrainingEngine& engine,
                         const nlohmann::json& trainer, const SaveOptions& options) {
  return save_checkpoint(run_dir, step, engine, trainer, engine.save_state(), options);
}

fs::path save_checkpoint(const fs::path& run_dir, int64_t step, const TrainingEngine& engine,
                         const nlohmann::json& trainer, const std::vector<StateTensor>& state,
                         const SaveOptions& options) {
  FP4_CHECK(step >= 0, "save_checkpoint: negative step ", step);
  FP4_CHECK(trainer.is_object() && trainer.contains("step") && trainer["step"] == step,
            "save_checkpoint: trainer state must carry \"step\": ", step);
  const fs::path root = checkpoint_root(run_dir);
  fs::create_directories(root);
  remove_interrupted_saves(root);

  for (const auto& t : state)
    if (t.dtype == "F32") check_finite("state tensor", t.name, t.bytes);

  const std::string name = checkpoint_name(step);
  const fs::path tmp = root / (kTempPrefix + name + "-" + std::to_string(::getpid()));
  fs::create_directory(tmp);
  try {
    return write_and_publish(root, tmp, name, step, engine, trainer, state, options);
  } catch (...) {
    // A failed save (a full disk, a non-finite parameter) leaves no partial directory behind.
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

void prepare_checkpoint_root(const fs::path& run_dir) {
  const fs::path root = checkpoint_root(run_dir);
  std::error_code ec;
  fs::create_directories(root, ec);
  FP4_CHECK(!ec && fs::is_directory(root), root.string(),
            ": cannot create the checkpoint directory: ", ec ? ec.message() : "not a directory");
  remove_interrupted_saves(root);
  const fs::path probe = root / (std::string(kTempPrefix) + "probe-" + std::to_string(::getpid()));
  try {
    write_file_synced(probe, "probe\n");
  } catch (const Error& e) {
    fs::remove(probe, ec);
    FP4_THROW(root.string(), ": not writable, so no checkpoint could be saved (", e.what(), ")");
  }
  fs::remove(probe, ec);
}

std::vector<fs::path> list_checkpoints(const fs::path& run_dir) {
  const fs::path root = checkpoint_root(run_dir);
  std::vector<std::pair<int64_t, fs::path>> found;
  if (!fs::is_directory(root)) return {};
  for (const auto& e : fs::directory_iterator(root)) {
    const int64_t s = step_of(e.path().filename().string());
    if (s >= 0 && e.is_directory() && fs::exists(e.path() / kManifestFile)) found.emplace_back(s, e.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [s, p] : found) out.push_back(std::move(p));
  return out;
}

std::optional<fs::path> latest_checkpoint(const fs::path& run_dir) {
  const fs::path root = checkpoint_root(run_dir);
  const fs::path pointer = root / kLatestFile;
  if (!fs::exists(pointer)) {
    // A crash between moving a checkpoint into place and writing the first `latest`.
    const auto all = list_checkpoints(run_dir);
    if (all.empty()) return std::nullopt;
    return all.back();
  }
  std::string name = read_file(pointer);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  FP4_CHECK(step_of(name) >= 0, pointer.string(), ": does not name a checkpoint (\"", name, "\")");
  const fs::path dir = root / name;
  FP4_CHECK(fs::is_directory(dir), pointer.string(), ": names ", name, " but ", dir.string(), " is missing");
  return dir;
}

Checkpoint load_checkpoint(const fs::path& dir, bool with_state) {
  FP4_CHECK(fs::is_directory(dir), dir.string(), ": checkpoint directory not found");
  const fs::path manifest_path = dir / kManifestFile;
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_file(manifest_path));
  } catch (const nlohmann::json::exception& e) {
    FP4_THROW(manifest_path.string(), ": not valid JSON: ", e.what());
  }
  FP4_CHECK(manifest.is_object() && manifest.value("format", "") == kCheckpointFormat, manifest_path.string(),
            ": not an fp4train checkpoint manifest");
  const nlohmann::json version_field = manifest.value("version", nlohmann::json());
  const int version = version_field.is_number_integer() ? version_field.get<int>() : 0;
  FP4_CHECK(version == 1 || version == kCheckpointVersion, manifest_path.string(), ": unsupported version ",
            version_field.dump(), " (this build reads versions 1 and ", kCheckpointVersion, ")");
  const std::vector<FromModel> from_model =
      version >= 2 ? state_from_model(manifest_path, manifest) : std::vector<FromModel>{};
  FP4_CHECK(manifest.contains("files") && manifest["files"].is_object(), manifest_path.string(),
            ": no \"files\" entry");
  // Cheap checks of all files first, so a missing or truncated file is reported before any hashing.
  for (const char* f : {kModelFile, kStateFile, kTrainerFile})
    check_listed_and_sized(manifest_path, manifest, dir / f);
  const nlohmann::json& files = manifest.at("files");

  // The two large files are read and verified concurrently; errors are reported model first.
  auto state_read = std::async(std::launch::async, [&] {
    const fs::path path = dir / kStateFile;
    if (with_state) return read_verified_tensors(path, files.at(kStateFile));
    check_sha256(path, sha256_file(path), files.at(kStateFile));
    return std::vector<StateTensor>{};
  });
  Checkpoint ckpt;
  std::exception_ptr model_error;
  try {
    ckpt.model = read_verified_tensors(dir / kModelFile, files.at(kModelFile));
  } catch (...) {
    model_error = std::current_exception();
  }
  try {
    ckpt.state = state_read.get();
  } catch (...) {
    if (!model_error) throw;
  }
  if (model_error) std::rethrow_exception(model_error);
  if (with_state && !from_model.empty())
    ckpt.state = merge_state(dir, from_model, ckpt.model, std::move(ckpt.state));
  const fs::path trainer_path = dir / kTrainerFile;
  const std::string trainer_text = read_file(trainer_path);
  check_sha256(trainer_path, sha256_hex(trainer_text), files.at(kTrainerFile));

  ckpt.dir = dir;
  try {
    ckpt.trainer = nlohmann::json::parse(trainer_text);
  } catch (const nlohmann::json::exception& e) {
    FP4_THROW(trainer_path.string(), ": not valid JSON: ", e.what());
  }
  FP4_CHECK(
      ckpt.trainer.is_object() && ckpt.trainer.contains("step") && ckpt.trainer["step"].is_number_integer(),
      trainer_path.string(), ": missing integer field \"step\"");
  FP4_CHECK(ckpt.trainer["step"] == manifest.value("step", int64_t{-1}), trainer_path.string(), ": step ",
            ckpt.trainer["step"].dump(), " disagrees with the manifest's ",
            manifest.value("step", int64_t{-1}));
  check_trainer_fields(trainer_path, ckpt.trainer);
  return ckpt;
}

void load_parameters(TrainingEngine& engine, const Checkpoint& ckpt) {
  const std::string file = (ckpt.dir / kModelFile).string();
  const std::vector<ParameterInfo> params = engine.parameters();
  // A tensor the model lacks (a third block's weights on a 2-layer model) means the checkpoint is of
  // another model: loading the rest would use a cut of it.
  std::set<std::string> known;
  for (const auto& p : params) known.insert(p.name);
  for (const auto& t : ckpt.model)
    FP4_CHECK(known.contains(t.name), file, ": tensor '", t.name, "' is not a parameter of model '",
              engine.config().name, "' (", engine.config().n_layers,
              " blocks): the checkpoint is of another model");
  for (const auto& p : params) {
    const auto it = std::find_if(ckpt.model.begin(), ckpt.model.end(),
                                 [&](const StateTensor& t) { return t.name == p.name; });
    FP4_CHECK(it != ckpt.model.end(), file, ": tensor '", p.name, "' is missing");
    FP4_CHECK(it->shape == p.shape, file, ": tensor '", p.name, "' has shape ",
              nlohmann::json(it->shape).dump(), ", the model expects ", nlohmann::json(p.shape).dump());
    FP4_CHECK(it->dtype == "F32", file, ": tensor '", p.name, "' has dtype ", it->dtype, ", expected F32");
    engine.write_parameter(p.name, f32_values(*it));
  }
}

void check_optimizer_state(const Checkpoint& ckpt) {
  const std::string file = (ckpt.dir / kStateFile).string();
  for (const auto& t : ckpt.state) {
    if (t.dtype == "F32") check_finite(file + ": state tensor", t.name, t.bytes);
    const bool step_count = t.name == "adamw.step" || t.name == "qadamw.step";
    if (!step_count) continue;
    FP4_CHECK(t.dtype == "I64" && t.bytes.size() == sizeof(int64_t), file, ": '", t.name,
              "' must be one I64 value, got ", t.dtype, " of ", t.bytes.size(), " bytes");
    int64_t count = 0;
    std::memcpy(&count, t.bytes.data(), sizeof count);
    FP4_CHECK(count == ckpt.step(), file, ": '", t.name, "' counts ", count, " optimizer steps, but ",
              kTrainerFile, " is at step ", ckpt.step(), ": the state does not belong to this checkpoint");
  }
}

void restore_engine(TrainingEngine& engine, const Checkpoint& ckpt) {
  FP4_CHECK(!ckpt.state.empty(), (ckpt.dir / kStateFile).string(), ": no state loaded");
  check_optimizer_state(ckpt);
  load_parameters(engine, ckpt);
  try {
    engine.load_state(ckpt.state);
  } catch (const Error& e) {
    FP4_THROW((ckpt.dir / kStateFile).string(), ": ", e.what());
  }
}

}  // namespace fp4
