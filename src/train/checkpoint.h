// Checkpoints: <run dir>/checkpoints/step_NNNNNN/ holding
//   model.safetensors   the parameters (F32), for eval, sampling and export
//   state.safetensors   TrainingEngine::save_state(): everything needed to resume bit for bit, less
//                       the tensors that are byte for byte a parameter in model.safetensors
//   trainer.json        step, tokens, loader state, seed, elapsed time, config hash, the run config
//   manifest.json       byte size and SHA-256 of each file above, checked at load, and
//                       "state_from_model": the state tensors taken from model.safetensors, with
//                       their indices in the state
// and <run dir>/checkpoints/latest naming the newest complete one. A save writes into a temp dir,
// fsyncs, renames it into place, then replaces `latest` atomically: an interrupted save never
// damages the previous checkpoint. Version 1 (no "state_from_model", the parameters also in the
// state) is still read; load_checkpoint gives the same Checkpoint for both.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/engine.h"

namespace fp4 {

inline constexpr const char* kCheckpointFormat = "fp4train-checkpoint";
inline constexpr int kCheckpointVersion = 2;  // the version written; 1 and 2 are read

std::filesystem::path checkpoint_root(const std::filesystem::path& run_dir);  // <run dir>/checkpoints
std::string checkpoint_name(int64_t step);                                    // "step_000120"

struct SaveOptions {
  int keep_last = 3;  // complete checkpoints kept after this save (the newest ones)
  // Test hook: called after each stage of a save ("model", "state", "trainer", "manifest", "renamed",
  // "latest"); a throw from it simulates a crash at that point.
  std::function<void(const std::string& stage)> after_stage;
};

// Saves the engine's parameters and state with `trainer` as trainer.json (its "step" must equal
// `step`); returns the checkpoint directory.
// Refuses (fp4::Error naming the tensor) a parameter or F32 state tensor holding NaN or infinity; a
// failed save removes its temporary directory.
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, int64_t step,
                                      const TrainingEngine& engine, const nlohmann::json& trainer,
                                      const SaveOptions& options = {});
// The same with the engine state already taken: data-parallel ranks gather it together (a collective
// save_state()) and rank 0 alone writes the checkpoint, which is the one a single process writes.
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, int64_t step,
                                      const TrainingEngine& engine, const nlohmann::json& trainer,
                                      const std::vector<StateTensor>& state, const SaveOptions& options = {});

// At the start of a run: creates <run dir>/checkpoints, removes what killed saves left there and checks
// that a file can be written into it, so an unwritable directory is an error before any training.
void prepare_checkpoint_root(const std::filesystem::path& run_dir);

// The checkpoint `latest` names; nullopt when the run dir has none. Throws fp4::Error when
// `latest` names a directory that does not exist.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& run_dir);

// The complete checkpoints of a run dir (those with a manifest), oldest first.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& run_dir);

struct Checkpoint {
  std::filesystem::path dir;
  nlohmann::json trainer;
  std::vector<StateTensor> model;  // parameters, F32
  std::vector<StateTensor> state;  // engine state
  int64_t step() const { return trainer.at("step").get<int64_t>(); }
};

// Reads and verifies a checkpoint: manifest, sizes, SHA-256 of every file, safetensors structure,
// trainer.json fields. `with_state = false` skips reading state.safetensors (its checksum is still
// checked). With the state, version 2's "state_from_model" tensors are copied from the model into their
// places in it, so `state` is the list the engine saved. Throws fp4::Error naming the file and the fault
// (missing, truncated, checksum mismatch, a listed tensor the model lacks, ...).
Checkpoint load_checkpoint(const std::filesystem::path& dir, bool with_state = true);

// Writes the checkpoint's parameters into the engine, checking that every engine parameter is
// present with the same shape and that the checkpoint holds no other tensor (errors name the checkpoint
// file and the tensor).
void load_parameters(TrainingEngine& engine, const Checkpoint& ckpt);
// Throws fp4::Error naming state.safetensors when a state tensor holds a non-finite F32 value or an
// optimizer step count ("adamw.step", "qadamw.step") differs from the checkpoint's step.
void check_optimizer_state(const Checkpoint& ckpt);
// Restores parameters and the full engine state (check_optimizer_state, load_parameters, load_state).
void restore_engine(TrainingEngine& engine, const Checkpoint& ckpt);

}  // namespace fp4
