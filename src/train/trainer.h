// Trainer: the training loop around a TrainingEngine: data, LR schedule, gradient accumulation,
// periodic validation, checkpoints, resume, metrics.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "data/loader.h"
#include "dist/communicator.h"
#include "dist/dist_env.h"
#include "dist/shard_plan.h"
#include "model/engine.h"
#include "recipe/recipe.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/run_config.h"
#include "train/run_lock.h"

namespace fp4 {

struct TrainerOptions {
  bool require_resume = false;  // --resume: fail when the run dir has no checkpoint
  bool progress_bar = false;    // a live bar (terminal) instead of plain lines
  std::FILE* log = stderr;      // human output
  // Test hook passed to every checkpoint save (see SaveOptions::after_stage).
  std::function<void(const std::string& stage)> checkpoint_stage;
  // This process's place in a data-parallel job; unset: read from the environment (RANK, WORLD_SIZE,
  // ...). A launched job (DistEnv::launched) trains data-parallel, even with one process.
  std::optional<DistEnv> dist;
  // --init-from: a checkpoint or run directory to branch from when the run dir has no checkpoint of its
  // own (train/init_from.h).
  std::filesystem::path init_from;
};

struct TrainResult {
  int64_t step = 0;
  int64_t tokens = 0;
  EvalResult final_eval;
  std::filesystem::path run_dir;
  std::filesystem::path last_checkpoint;  // empty if none was written or found
  int stop_signal = 0;  // SIGINT/SIGTERM that stopped the run early (checkpoint saved, no final eval), or 0
};

// The recipe of a run config: the preset or TOML file recipe.name with recipe.overrides applied.
Recipe load_run_recipe(const RecipeConfig& cfg);

// Data parallelism: every rank runs a Trainer with the same config and run dir (a shared file system).
// The config's batch is the job's: rank r trains on rows r, r + world, ... of each micro-batch, so
// a run gives the same steps on any number of ranks (up to summation order) and resumes on another
// number. Rank 0 alone writes the run dir (config, metrics, checkpoints) and logs; the other ranks
// only read checkpoints. Collective decisions (stop signals, failed saves, evaluation sums) are agreed
// over the communicator so no rank waits for one that stopped.
class Trainer {
 public:
  // Sets everything up: the run dir (config.json, recipe.toml), data (preparing the default corpus
  // when needed), the engine, and, when the run dir has a checkpoint, resumes from it after checking
  // that the config still describes the same training (identity_differences).
  Trainer(RunConfig cfg, TrainerOptions options = {});
  ~Trainer();

  // Trains up to cfg.train.steps, evaluating and checkpointing as configured, then evaluates the
  // validation split and saves a final checkpoint. A non-finite loss throws fp4::Error naming the
  // step; checkpoints already written are left as they are. A first SIGINT/SIGTERM stops after the
  // current step with a checkpoint (TrainResult::stop_signal); a second one ends the process.
  TrainResult run();

  TrainingEngine& engine() { return *engine_; }
  int64_t step() const { return step_; }
  bool resumed() const { return resumed_from_.has_value(); }
  const RunConfig& config() const { return cfg_; }
  const std::filesystem::path& run_dir() const { return run_dir_; }
  const DistEnv& dist() const { return dist_; }

 private:
  bool lead() const { return dist_.rank == 0; }
  void set_up_data_parallel(int64_t resume_step);
  ShardPlan zero1_plan(const std::vector<ParameterInfo>& params, int world) const;
  Batch next_micro_batch();
  int agreed_stop_signal();  // collective with data parallelism
  void set_up();             // everything after the run dir is locked
  void log(const std::string& line);
  nlohmann::json trainer_state() const;
  std::filesystem::path save(Progress& progress);
  EvalResult evaluate(Progress& progress);

  RunConfig cfg_;
  TrainerOptions options_;
  DistEnv dist_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> quiet_log_{nullptr, &std::fclose};  // ranks > 0
  std::unique_ptr<Communicator> comm_;
  std::filesystem::path run_dir_;
  std::unique_ptr<RunLock> lock_;
  Recipe recipe_;
  std::string recipe_toml_;
  LrSchedule schedule_;
  std::unique_ptr<TrainingEngine> engine_;
  std::unique_ptr<DataLoader> train_;
  std::unique_ptr<ValidationLoader> val_;
  std::optional<std::filesystem::path> resumed_from_;
  std::filesystem::path last_checkpoint_;
  int64_t step_ = 0;
  int64_t tokens_ = 0;
  double elapsed_before_ = 0;  // seconds spent in earlier sessions of this run
  std::chrono::steady_clock::time_point session_start_;
  std::unique_ptr<MetricsFile> metrics_;  // rank 0 only
};

}  // namespace fp4
