#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <exception>

#include "core/error.h"
#include "dist/make_communicator.h"
#include "dist/shard_plan.h"
#include "model/cuda/cuda_engine.h"
#include "optim/root.h"
#include "recipe/optimizer_names.h"
#include "recipe/recipe_io.h"
#include "train/checkpoint.h"
#include "train/data_setup.h"
#include "train/engine_factory.h"
#include "train/file_io.h"
#include "train/init_from.h"
#include "train/stop_signal.h"
#include "train/token_blocks.h"

namespace fp4 {

namespace {

// After a step: each feature's metrics lines (an OutControl freeze, an OsciReset window) and log lines.
void write_feature_reports(TrainingEngine& engine, MetricsFile* metrics, Progress& progress) {
  for (const auto& feature : engine.features())
    for (const StepReport& r : feature->take_reports()) {
      if (metrics) metrics->write(r.line);
      progress.message(r.message);
    }
}

}  // namespace
namespace fs = std::filesystem;

Recipe load_run_recipe(const RecipeConfig& cfg) {
  std::vector<std::string> overrides;
  for (const auto& [k, v] : cfg.overrides) overrides.push_back(k + "=" + v);
  return load_recipe(cfg.name, overrides);
}

Trainer::Trainer(RunConfig cfg, TrainerOptions options)
    : cfg_(std::move(cfg)), options_(std::move(options)), run_dir_(cfg_.train.out_dir) {
  validate(cfg_);
  dist_ = options_.dist ? *options_.dist : dist_env_from_process();
  if (!lead()) {  // one voice: rank 0 logs and writes; the others only report errors (exceptions)
    quiet_log_.reset(std::fopen("/dev/null", "w"));
    FP4_CHECK(quiet_log_, "rank ", dist_.rank, ": cannot open /dev/null");
    options_.log = quiet_log_.get();
    options_.progress_bar = false;
    set_up();
    return;
  }
  fs::path created;  // the outermost directory of run_dir_ that does not exist yet
  for (fs::path p = fs::absolute(run_dir_); !fs::exists(p); p = p.parent_path()) created = p;
  fs::create_directories(run_dir_);
  lock_ = std::make_unique<RunLock>(run_dir_);
  try {
    set_up();
  } catch (...) {
    // A run that could not start leaves no empty run directory behind.
    lock_.reset();
    if (!created.empty()) fs::remove_all(created);
    throw;
  }
}

// The ZeRO-1 plan. 128-element alignment puts every shard boundary on a tile of the quantized optimizer
// states (q-adamw's 128-element tiles) as well as on AdamW's elements; ROOT's Newton-Schulz needs each matrix
// whole, so its shards are runs of whole tensors balanced by each tensor's step work.
ShardPlan Trainer::zero1_plan(const std::vector<ParameterInfo>& params, int world) const {
  if (!optimizer_needs_whole_tensors(recipe_.optimizer)) return make_shard_plan(params, world, 128);
  return make_tensor_shard_plan(params, world, root_step_costs(params, RootOptions{}.ns_steps));
}

void Trainer::set_up_data_parallel(int64_t resume_step) {
  comm_ = make_communicator(dist_, cfg_.train.device == "cuda", [this](const std::string& l) { log(l); });
  const int world = comm_->world_size();
  const ShardPlan plan = zero1_plan(engine_->parameters(), world);
  DataParallel dp;
  dp.comm = comm_.get();
  for (const auto& r : plan.ranks) dp.shards.push_back({r.begin, r.end});
  engine_->set_data_parallel(dp);
  auto* overlap = dynamic_cast<GradientOverlap*>(engine_.get());
  if (overlap) overlap->set_overlap(cfg_.dist.overlap);
  const std::string reduction = overlap && overlap->overlap() ? "gradient buckets reduced during the backward"
                                                              : "gradient buckets reduced after the backward";
  int64_t smallest = plan.total, largest = 0;
  for (const RankShard& r : plan.ranks)
    smallest = std::min(smallest, r.size()), largest = std::max(largest, r.size());
  // Every rank must resume from the same checkpoint (a shared run directory).
  double steps[2] = {static_cast<double>(resume_step), static_cast<double>(resume_step) * resume_step};
  comm_->host_all_reduce_sum(steps, 2, CommType::kF64);
  const double mean = steps[0] / world;
  FP4_CHECK(steps[1] == mean * mean * world, "rank ", dist_.rank, " found checkpoint step ", resume_step,
            " in ", run_dir_.string(),
            " but other ranks found others: the ranks must share the run directory");
  log("data parallel: " + std::to_string(world) + " rank(s) over " + comm_->backend() +
      ", ZeRO-1 shards of " + std::to_string(smallest) + ".." + std::to_string(largest) + " parameters" +
      (optimizer_needs_whole_tensors(recipe_.optimizer)
           ? " (whole tensors, for " + recipe_.optimizer + "'s Newton-Schulz), "
           : ", ") +
      std::to_string(cfg_.data.batch) + " rows per micro-batch split over the ranks, " + reduction);
}

Batch Trainer::next_micro_batch() {
  return comm_ ? train_->next_slice(comm_->rank(), comm_->world_size()) : train_->next();
}

int Trainer::agreed_stop_signal() {
  const int mine = StopSignalScope::received();
  if (!comm_) return mine;
  double v[2] = {mine ? 1.0 : 0.0, static_cast<double>(mine)};
  comm_->host_all_reduce_sum(v, 2, CommType::kF64);
  if (v[0] == 0) return 0;
  return mine ? mine : static_cast<int>(v[1] / v[0]);  // the signal the others received
}

void Trainer::set_up() {
  recipe_ = load_run_recipe(cfg_.recipe);
  recipe_toml_ = to_toml(recipe_);
  check_bf16_layers(recipe_, cfg_.model);
  check_micro_batch_tokens(recipe_, cfg_.data.batch, cfg_.data.seq, dist_.launched ? dist_.world_size : 1);
  schedule_ = make_lr_schedule(cfg_);

  // Before anything is written, so a job the launcher stops when a rank fails leaves no checkpoint folder.
  if (dist_.launched)
    FP4_CHECK(cfg_.data.batch >= dist_.world_size, "data.batch = ", cfg_.data.batch,
              " rows cannot be split over ", dist_.world_size,
              " processes: each rank needs at least one row of every micro-batch");
  if (lead()) prepare_checkpoint_root(run_dir_);  // unwritable: refused now, not at the first save
  std::optional<Checkpoint> ckpt;
  const auto latest = latest_checkpoint(run_dir_);
  const bool resumed_own = latest.has_value();
  if (latest) {
    ckpt = load_checkpoint(*latest);
    const fs::path trainer_file = *latest / "trainer.json";
    FP4_CHECK(ckpt->trainer.contains("config"), trainer_file.string(), ": no run config stored");
    const RunConfig before = run_config_from_json(ckpt->trainer["config"], trainer_file.string());
    const auto diffs = identity_differences(before, cfg_);
    if (!diffs.empty()) {
      std::string list;
      for (const auto& d : diffs) list += "\n  " + d;
      FP4_THROW("cannot resume ", run_dir_.string(), " from ", latest->filename().string(),
                ": the config differs from the checkpoint's in what it trains:", list,
                "\nrestore these values, or train into a new directory (--out)");
    }
    FP4_CHECK(ckpt->trainer.value("recipe_toml", "") == recipe_toml_, "cannot resume ", run_dir_.string(),
              " from ", latest->filename().string(), ": recipe '", cfg_.recipe.name,
              "' now resolves to a different recipe than the one the checkpoint was trained with (see ",
              trainer_file.string(), ", field recipe_toml)");
  } else {
    FP4_CHECK(!options_.require_resume, "--resume: ", checkpoint_root(run_dir_).string(),
              " holds no checkpoint to resume from");
    // A branch (train/init_from.h) starts from another run's checkpoint; once it has saved its own, it
    // resumes from those like any run.
    if (!options_.init_from.empty()) ckpt = load_branch_checkpoint(options_.init_from, cfg_);
  }

  // The engine first: a device this build lacks is reported before any data work.
  engine_ = make_engine(cfg_, recipe_, dist_.local_rank);
  if (dist_.launched) set_up_data_parallel(ckpt ? ckpt->step() : -1);
  if (recipe_.out_control.enabled) {
    // OutControl calibrates at fixed steps (the tetrajet-v2 preset: the authors' 501..550): say so when the
    // run ends before the freeze, instead of silently keeping every channel in NVFP4.
    const int64_t run_steps = schedule_.total_steps > 0 ? schedule_.total_steps : cfg_.train.steps;
    const int64_t freeze = int64_t{recipe_.out_control.calib_start} + recipe_.out_control.calib_steps - 1;
    if (freeze > run_steps)
      log("out_control: calibration ends at step " + std::to_string(freeze) + ", after this run's " +
          std::to_string(run_steps) +
          " steps: every input channel stays in NVFP4 (set out_control.calib_start " +
          "and calib_steps to calibrate earlier)");
  }
  // The recipe's step features, now that the engine knows whether it is data-parallel; OsciReset's
  // fractional start is a fraction of the schedule's length, which a resumed run shares (train.steps
  // may differ between the invocations).
  StepContext step_context;
  step_context.total_steps = cfg_.schedule_steps();
  step_context.data_parallel = comm_ != nullptr;
  engine_->set_step_context(step_context);
  for (const auto& feature : engine_->features())
    if (const std::string summary = feature->summary(); !summary.empty())
      log(feature->name() + ": " + summary);

  // Rank 0 prepares the data when needed; the others read it once it is there.
  const auto data_log = [this](const std::string& l) { log(l); };
  std::optional<Manifest> prepared;
  if (lead()) prepared = ensure_prepared_data(cfg_, data_log);
  if (comm_) comm_->barrier();
  if (!lead()) prepared = ensure_prepared_data(cfg_, data_log);
  const Manifest train_manifest = *prepared;
  check_data_fits(cfg_, train_manifest, cfg_.data.train_dir);
  const Manifest val_manifest =
      cfg_.val_dir() == cfg_.data.train_dir ? train_manifest : read_manifest(cfg_.val_dir());
  if (cfg_.val_dir() != cfg_.data.train_dir) check_data_fits(cfg_, val_manifest, cfg_.val_dir());
  FP4_CHECK(val_manifest.val.tokens > 0, cfg_.val_dir(),
            " has no validation split: prepare it with --val or ",
            "--val-fraction, or point data.val_dir at a prepared directory that has one");

  LoaderOptions lo;
  lo.data = cfg_.data.train_dir;
  lo.split = "train";
  lo.batch = cfg_.data.batch;
  lo.seq = cfg_.data.seq;
  lo.seed = cfg_.train.seed;
  train_ = std::make_unique<DataLoader>(lo);
  LoaderOptions vo = lo;
  vo.data = cfg_.val_dir();
  vo.split = "val";
  // eval_batches batches of windows spread over the whole split, the same ones at every evaluation.
  vo.max_windows = static_cast<int64_t>(cfg_.train.eval_batches) * cfg_.data.batch;
  val_ = std::make_unique<ValidationLoader>(vo);

  if (ckpt) {
    restore_engine(*engine_, *ckpt);  // the engine's state includes its features' (engine->features())
    const fs::path trainer_file = ckpt->dir / "trainer.json";
    try {
      train_->restore(LoaderState::from_json(ckpt->trainer.at("loader")));
      step_ = ckpt->trainer.at("step").get<int64_t>();
      tokens_ = ckpt->trainer.at("tokens").get<int64_t>();
      elapsed_before_ = ckpt->trainer.at("elapsed").get<double>();
    } catch (const nlohmann::json::exception& e) {
      FP4_THROW(trainer_file.string(), ": ", e.what());
    } catch (const Error& e) {
      FP4_THROW(trainer_file.string(), ": ", e.what());
    }
    resumed_from_ = ckpt->dir;
    if (resumed_own) last_checkpoint_ = ckpt->dir;  // a branch has saved nothing of its own yet
    log((resumed_own ? "resumed from " : "branched from ") + ckpt->dir.string() + " (step " +
        std::to_string(step_) + ")");
  }

  if (!lead()) return;
  write_file_atomically(run_dir_ / "config.json", to_json(cfg_).dump(2) + "\n");
  write_file_atomically(run_dir_ / "recipe.toml", recipe_toml_);
  if (ckpt && !resumed_own) start_branch_metrics(run_dir_ / "metrics.jsonl", *ckpt);
  metrics_ = std::make_unique<MetricsFile>(run_dir_ / "metrics.jsonl", step_);
}

Trainer::~Trainer() = default;

void Trainer::log(const std::string& line) {
  std::fprintf(options_.log, "%s\n", line.c_str());
  std::fflush(options_.log);
}

nlohmann::json Trainer::trainer_state() const {
  const double elapsed =
      elapsed_before_ +
      std::chrono::duration<double>(std::chrono::steady_clock::now() - session_start_).count();
  return {{"step", step_},
          {"tokens", tokens_},
          {"elapsed", elapsed},
          {"seed", cfg_.train.seed},
          {"loader", train_->state().to_json()},
          {"device", engine_->device_name()},
          {"config_hash", config_hash(cfg_)},
          {"config", to_json(cfg_)},
          {"recipe_toml", recipe_toml_}};
}

fs::path Trainer::save(Progress& progress) {
  SaveOptions so;
  so.keep_last = cfg_.train.keep_checkpoints;
  so.after_stage = options_.checkpoint_stage;
  std::vector<StateTensor> state = engine_->save_state();  // collective with data parallelism; features' too
  std::exception_ptr error;
  if (lead()) {
    try {
      last_checkpoint_ = save_checkpoint(run_dir_, step_, *engine_, trainer_state(), state, so);
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (comm_) {
    double failed = error ? 1 : 0;
    comm_->host_all_reduce_sum(&failed, 1, CommType::kF64);
    FP4_CHECK(failed == 0 || lead(), "rank 0 could not save the checkpoint of step ", step_,
              " (see its error)");
  }
  if (error) {
    // The run's record says why it stopped (a full disk, a diverged state), next to its last metrics.
    if (metrics_) {
      std::string why = "checkpoint of step " + std::to_string(step_) + " not saved";
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        why += std::string(": ") + e.what();
      } catch (...) {
      }
      try {
        metrics_->write({{"type", "error"}, {"step", step_}, {"message", why}});
      } catch (...) {  // the disk that refused the checkpoint may refuse this line too
      }
    }
    std::rethrow_exception(error);
  }
  if (!lead()) last_checkpoint_ = checkpoint_root(run_dir_) / checkpoint_name(step_);
  progress.message("saved checkpoint " + last_checkpoint_.string());
  return last_checkpoint_;
}

EvalResult Trainer::evaluate(Progress& progress) {
  const EvalResult r = evaluate_split(*engine_, *val_, 0, comm_.get());
  EvalRecord rec;
  rec.step = step_;
  rec.tokens = tokens_;
  rec.val_loss = r.loss;
  rec.val_ppl = r.perplexity;
  rec.val_tokens = r.tokens;
  rec.elapsed = elapsed_before_ +
                std::chrono::duration<double>(std::chrono::steady_clock::now() - session_start_).count();
  if (metrics_) metrics_->write(to_json(rec));
  progress.eval(rec);
  return r;
}

TrainResult Trainer::run() {
  const auto& t = cfg_.train;
  const int64_t target = t.steps;
  session_start_ = std::chrono::steady_clock::now();
  Progress progress(step_, target, options_.progress_bar, options_.log);
  if (step_ >= target)
    progress.message(run_dir_.string() + " is at step " + std::to_string(step_) +
                     " (train.steps = " + std::to_string(target) + "): nothing to train");
  else
    progress.message("training " + cfg_.model.name + " (" +
                     format_count(static_cast<double>(cfg_.model.parameter_count())) +
                     " parameters, recipe " + recipe_.name + ") on " + engine_->device_name() +
                     (comm_ ? " x " + std::to_string(comm_->world_size()) + " ranks" : std::string()) +
                     ": steps " + std::to_string(step_) + " -> " + std::to_string(target) + ", " +
                     std::to_string(cfg_.tokens_per_step()) + " tokens/step, run dir " + run_dir_.string());

  StepHyper hyper;
  hyper.beta1 = static_cast<float>(cfg_.optim.beta1);
  hyper.beta2 = static_cast<float>(cfg_.optim.beta2);
  hyper.eps = static_cast<float>(cfg_.optim.eps);
  hyper.weight_decay = static_cast<float>(cfg_.optim.weight_decay);
  hyper.grad_clip = static_cast<float>(cfg_.optim.grad_clip);

  const auto fail = [&](int64_t step, const std::string& why) {
    progress.finish();
    if (metrics_) metrics_->write({{"type", "error"}, {"step", step}, {"message", why}});
    FP4_THROW("training stopped at step ", step, ": ", why, "\n",
              last_checkpoint_.empty()
                  ? std::string("no checkpoint was written")
                  : "the last good checkpoint, " + last_checkpoint_.string() + ", is untouched");
  };

  int64_t last_saved = resumed_from_ ? step_ : -1;
  std::vector<Batch> micro(static_cast<size_t>(cfg_.data.grad_accum));
  double interval_seconds = 0;
  int64_t interval_tokens = 0;
  const StopSignalScope signals;
  int stop = 0;
  while (step_ < target && (stop = agreed_stop_signal()) == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& b : micro) b = next_micro_batch();
    hyper.lr = static_cast<float>(lr_at(schedule_, step_));
    StepStats s;
    try {
      s = engine_->train_step(micro, hyper);
    } catch (const Error& e) {
      fail(step_ + 1, e.what());
    }
    if (!std::isfinite(s.loss)) fail(step_ + 1, "the loss is " + std::to_string(s.loss));
    ++step_;
    tokens_ += cfg_.tokens_per_step();
    write_feature_reports(*engine_, metrics_.get(), progress);
    interval_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    interval_tokens += cfg_.tokens_per_step();

    const bool log_now = step_ % t.log_every == 0 || step_ == target;
    TrainRecord r;
    r.step = step_;
    r.tokens = tokens_;
    r.loss = s.loss;
    r.ce_loss = s.ce_loss;
    r.lr = hyper.lr;
    r.grad_norm = s.grad_norm;
    r.tokens_per_s = interval_seconds > 0 ? static_cast<double>(interval_tokens) / interval_seconds : 0;
    r.elapsed = elapsed_before_ +
                std::chrono::duration<double>(std::chrono::steady_clock::now() - session_start_).count();
    if (log_now) {
      if (metrics_) metrics_->write(to_json(r));
      interval_seconds = 0;
      interval_tokens = 0;
    }
    progress.step(r, log_now);
    if (t.eval_every > 0 && step_ % t.eval_every == 0 && step_ < target) evaluate(progress);
    if (t.ckpt_every > 0 && step_ % t.ckpt_every == 0 && step_ < target) {
      save(progress);
      last_saved = step_;
    }
  }

  TrainResult result;
  if (stop == 0) stop = agreed_stop_signal();  // a signal during the last step
  result.stop_signal = stop;
  if (result.stop_signal) {
    progress.finish();  // keep the bar's last state on its own line
    if (last_saved != step_) save(progress);
    progress.message("stopped by signal " + std::to_string(result.stop_signal) + " at step " +
                     std::to_string(step_) + ": run the same command to resume");
  } else {
    result.final_eval = evaluate(progress);
    if (last_saved != step_) save(progress);
  }
  progress.finish();
  result.step = step_;
  result.tokens = tokens_;
  result.run_dir = run_dir_;
  result.last_checkpoint = last_checkpoint_;
  return result;
}

}  // namespace fp4
