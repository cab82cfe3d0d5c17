// The subcommands of the fp4train program, as functions (apps/fp4train.cpp only parses arguments).
// Each prints human output on stderr, results on stdout, and throws fp4::Error on failure.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/engine.h"
#include "recipe/recipe.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace fp4 {

struct TrainArgs {
  std::vector<std::filesystem::path> configs;  // later files override earlier ones
  std::string recipe;                          // recipe.name, when given
  std::string out;                             // train.out_dir, when given
  std::vector<std::string> sets;               // section.key=value, applied last
  bool resume = false;
  std::filesystem::path init_from;  // --init-from: branch from this checkpoint or run directory
};
// The run config the arguments describe (--recipe and --out before the --set overrides).
RunConfig run_config_from_args(const TrainArgs& args);
TrainResult train_command(const TrainArgs& args);

struct PrepareArgs {
  std::vector<std::filesystem::path> inputs;
  std::vector<std::filesystem::path> val_inputs;
  double val_fraction = 0;
  double val_sample = 0;
  int64_t val_piece_bytes = int64_t{1} << 18;
  std::string tokenizer;
  std::filesystem::path out;
  int threads = 0;
  int64_t shard_tokens = int64_t{1} << 24;
};
void prepare_command(const PrepareArgs& args);

// A model restored from a checkpoint for inference: its run config, recipe and engine.
struct LoadedModel {
  std::filesystem::path checkpoint;
  RunConfig config;
  Recipe recipe;
  std::unique_ptr<TrainingEngine> engine;
};
// `path` is a checkpoint directory or a run directory (its latest checkpoint). device: "" keeps the
// device the run was trained on.
LoadedModel load_model(const std::filesystem::path& path, const std::string& device = "");

struct EvalArgs {
  std::filesystem::path checkpoint;
  std::string data;     // prepared directory; empty: the run's validation directory
  int64_t batches = 0;  // batches of windows spread evenly over the split; 0: every window
  std::string device;
  // The suite from the held-out text (train/eval_suite.h): windows per source (0: all), zero-shot items
  // per source and task (0: no zero-shot tasks), and where eval.json goes (empty: the run directory).
  int64_t source_windows = 16;
  int zero_shot_items = 20;
  std::filesystem::path json_out;
};
EvalResult eval_command(const EvalArgs& args);

struct SampleArgs {
  std::filesystem::path checkpoint;
  std::string prompt;
  int tokens = 200;
  float temperature = 0.8f;
  int top_k = 40;
  uint64_t seed = 1;
  std::string device;
  std::string tokenizer;          // empty: the run's tokenizer (data.tokenizer, else its data manifest's)
  std::filesystem::path ids_out;  // when set: {"prompt": [ids], "generated": [ids]} written there as JSON
};
// Prints the prompt and the generated text on stdout as it is produced; returns the generated text.
std::string sample_command(const SampleArgs& args);

}  // namespace fp4
