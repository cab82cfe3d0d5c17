// RunConfig: everything one training run needs, read from a TOML file plus `--set section.key=value`
// overrides, checked against a schema (unknown keys and wrong types are errors naming the file and line).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "optim/schedule.h"
#include "recipe/recipe.h"

namespace fp4 {

struct DataConfig {
  std::string train_dir = "data/shards-bytes";  // prepared directory (manifest.json), split "train"
  std::string val_dir;                          // prepared directory for split "val"; empty: train_dir
  std::string tokenizer = "bytes";              // load_tokenizer spec; empty: whatever the manifest says
  // Text to prepare train_dir from when it has no manifest.json yet (files or folders, comma-separated);
  // empty: never prepare. The default is the corpus's prose (its C code is for the GPU experiments).
  std::string train_text = "data/corpus/train/gcide,data/corpus/train/linux-doc,data/corpus/train/gutenberg";
  std::string val_text = "data/corpus/val";
  int batch = 16;      // rows per micro-batch
  int seq = 128;       // tokens per row
  int grad_accum = 1;  // micro-batches per optimizer step
};

struct OptimConfig {
  double lr = 2e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  std::string schedule = "cosine";  // cosine | wsd | constant
  int64_t warmup = 20;              // steps of linear warm-up
  int64_t total_steps = 0;          // schedule length; 0: from total_tokens, else train.steps
  int64_t total_tokens = 0;
  double final_ratio = 0.1;            // final LR / peak LR (cosine, wsd)
  double decay_fraction = 0.2;         // wsd: the share of the schedule spent decaying
  std::string decay_shape = "linear";  // wsd: linear | 1-sqrt
};

struct TrainConfig {
  uint64_t seed = 1;
  int64_t steps = 400;  // train up to this step, then stop (the schedule may be longer)
  int log_every = 10;
  int eval_every = 100;      // 0: only at the end
  int eval_batches = 16;     // batches of windows spread over the validation split; 0: all of it
  int ckpt_every = 200;      // 0: only at the end
  int keep_checkpoints = 3;  // the newest K are kept
  std::string out_dir = "runs/tiny";
  std::string device = "cpu";  // cpu | cuda
};

struct DistConfig {
  // CUDA engine with NCCL: reduce each gradient bucket while the backward goes on (docs/DIST.md);
  // false reduces after the backward. The same bits either way; the CPU engine always reduces after.
  bool overlap = true;
};

struct RecipeConfig {
  std::string name = "bf16";                                   // preset name or recipe TOML path
  std::vector<std::pair<std::string, std::string>> overrides;  // key -> value in TOML syntax, in order
};

struct RunConfig {
  std::string model_preset = "tiny";
  ModelConfig model;  // the preset with the explicit [model] fields applied
  DataConfig data;
  OptimConfig optim;
  TrainConfig train;
  DistConfig dist;
  RecipeConfig recipe;

  int64_t tokens_per_step() const { return static_cast<int64_t>(data.batch) * data.seq * data.grad_accum; }
  // The schedule's length in steps (optim.total_steps, else total_tokens rounded up, else train.steps).
  int64_t schedule_steps() const;
  std::string val_dir() const { return data.val_dir.empty() ? data.train_dir : data.val_dir; }
};

// The sizes validate() accepts: beyond them a config is refused naming the field, before any integer
// arithmetic on them could overflow or an allocation could fail.
inline constexpr int kMaxLayers = 1024;                            // model.n_layers
inline constexpr int kMaxWidth = 1 << 18;                          // model.d_model, model.d_ff
inline constexpr int kMaxVocab = 1 << 24;                          // model.vocab_size
inline constexpr int kMaxSeqLen = 1 << 20;                         // model.max_seq_len
inline constexpr int64_t kMaxParameters = int64_t{1} << 36;        // model parameter count
inline constexpr int kMaxRows = 1 << 20;                           // data.batch, data.grad_accum
inline constexpr int64_t kMaxMicroBatchTokens = int64_t{1} << 26;  // data.batch x data.seq
inline constexpr int64_t kMaxSteps = 1'000'000'000'000;  // train.steps, optim.warmup, optim.total_steps
inline constexpr int64_t kMaxTokens = int64_t{1} << 62;  // optim.total_tokens, train.steps x tokens per step

// The built-in defaults: the `tiny` CPU run (configs/runs/tiny.toml holds the same values).
RunConfig default_run_config();

// Reads the files in order over the defaults (a later file overrides an earlier one; a model preset
// named anywhere is applied first and explicit [model] fields refine it), then applies each
// "section.key=value" override. Throws fp4::Error naming the file and line (or the --set argument)
// of an unknown key (with the closest known key), a wrong type or an invalid value.
RunConfig load_run_config(const std::vector<std::filesystem::path>& files,
                          const std::vector<std::string>& overrides = {});

// Recipe keys given on the command line without their "recipe.overrides." prefix
// (`--set linear.q2.block=16x16`, `--set bf16_layers=[0,-1]`) get it; other assignments are unchanged.
std::string expand_recipe_shorthand(const std::string& assignment);

// Applies overrides to an existing config (same rules as load_run_config).
void apply_overrides(RunConfig& cfg, const std::vector<std::string>& overrides);

// Throws fp4::Error naming the field when a value is out of range or inconsistent.
void validate(const RunConfig& cfg);

// Throws fp4::Error naming the recipe when its bf16_layers name a block the model does not have (an index
// i must satisfy -n_layers <= i < n_layers; negative ones count from the last block).
void check_bf16_layers(const Recipe& recipe, const ModelConfig& model);

// The LR schedule of a run config (peak optim.lr over cfg.schedule_steps()); throws fp4::Error when
// the [optim] keys do not make a valid schedule.
LrSchedule make_lr_schedule(const RunConfig& cfg);

// Every key with its value, by section; run_config_from_json reads it back (origin names the file).
nlohmann::json to_json(const RunConfig& cfg);
RunConfig run_config_from_json(const nlohmann::json& j, const std::string& origin);

// The keys that decide what a resumed run computes (model, data, optimizer, schedule length, recipe,
// seed), flattened "section.key" -> value; logging, eval, checkpoint cadence and paths are left out.
nlohmann::json training_identity(const RunConfig& cfg);
std::string config_hash(const RunConfig& cfg);  // SHA-256 of training_identity
// "optim.lr: 0.001 -> 0.0003" for each key whose identity value differs.
std::vector<std::string> identity_differences(const RunConfig& before, const RunConfig& now);

// All schema keys ("optim.lr", ...), for documentation and suggestions.
std::vector<std::string> run_config_keys();

}  // namespace fp4
