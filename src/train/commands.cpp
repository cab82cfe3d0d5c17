#include "train/commands.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/loader.h"
#include "data/manifest.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "dist/dist_env.h"
#include "recipe/recipe_io.h"
#include "train/checkpoint.h"
#include "train/engine_factory.h"
#include "train/eval_suite.h"
#include "train/evaluate.h"
#include "train/file_io.h"
#include "train/metrics.h"
#include "train/sample.h"

namespace fp4 {
namespace fs = std::filesystem;

RunConfig run_config_from_args(const TrainArgs& args) {
  std::vector<std::string> overrides;
  if (!args.recipe.empty()) overrides.push_back("recipe.name=" + args.recipe);
  if (!args.out.empty()) overrides.push_back("train.out_dir=" + args.out);
  for (const auto& s : args.sets) overrides.push_back(expand_recipe_shorthand(s));
  return load_run_config(args.configs, overrides);
}

TrainResult train_command(const TrainArgs& args) {
  TrainerOptions opts;
  opts.require_resume = args.resume;
  opts.init_from = args.init_from;
  opts.progress_bar = stderr_is_tty();
  opts.dist = dist_env_from_process();  // RANK, WORLD_SIZE, ... when a launcher started this process
  Trainer trainer(run_config_from_args(args), opts);
  const TrainResult r = trainer.run();
  if (trainer.dist().rank != 0) return r;  // rank 0 reports for the job
  if (r.stop_signal) {
    std::printf("stopped at step %lld | checkpoint %s\n", static_cast<long long>(r.step),
                r.last_checkpoint.string().c_str());
    return r;
  }
  std::printf("step %lld | val loss %.4f | val ppl %.3f | run dir %s\n", static_cast<long long>(r.step),
              r.final_eval.loss, r.final_eval.perplexity, r.run_dir.string().c_str());
  return r;
}

void prepare_command(const PrepareArgs& args) {
  PrepareOptions o;
  o.inputs = args.inputs;
  o.val_inputs = args.val_inputs;
  o.val_fraction = args.val_fraction;
  o.val_sample = args.val_sample;
  o.val_piece_bytes = args.val_piece_bytes;
  o.tokenizer = args.tokenizer;
  o.out_dir = args.out;
  o.threads = args.threads;
  o.shard_tokens = args.shard_tokens;
  const bool tty = stderr_is_tty();
  o.progress = [tty](int64_t done, int64_t total) {
    if (tty)
      std::fprintf(stderr, "\r\033[2Kprepare: %lld/%lld documents", static_cast<long long>(done),
                   static_cast<long long>(total));
    else if (done == total)
      std::fprintf(stderr, "prepare: %lld documents\n", static_cast<long long>(total));
  };
  const Manifest m = prepare_shards(o);
  if (tty) std::fputs("\n", stderr);
  std::printf(
      "prepared %s: tokenizer %s (vocab %d), train %lld tokens in %zu shards, val %lld tokens in %zu "
      "shards\n",
      args.out.string().c_str(), m.tokenizer_name.c_str(), m.vocab_size,
      static_cast<long long>(m.train.tokens), m.train.shards.size(), static_cast<long long>(m.val.tokens),
      m.val.shards.size());
}

LoadedModel load_model(const fs::path& path, const std::string& device) {
  fs::path dir = path;
  if (!fs::exists(path / "manifest.json")) {
    const auto latest = latest_checkpoint(path);
    FP4_CHECK(latest, path.string(),
              ": neither a checkpoint (no manifest.json) nor a run directory with checkpoints");
    dir = *latest;
  }
  const Checkpoint ckpt = load_checkpoint(dir, /*with_state=*/false);
  const std::string trainer_file = (dir / "trainer.json").string();
  FP4_CHECK(ckpt.trainer.contains("config") && ckpt.trainer.contains("recipe_toml"), trainer_file,
            ": missing the run config or the recipe");
  LoadedModel m;
  m.checkpoint = dir;
  m.config = run_config_from_json(ckpt.trainer["config"], trainer_file);
  if (!device.empty()) apply_overrides(m.config, {"train.device=" + device});
  m.recipe = parse_recipe(ckpt.trainer["recipe_toml"].get<std::string>(), trainer_file + " (recipe_toml)");
  check_bf16_layers(m.recipe, m.config.model);
  try {
    m.engine = make_engine(m.config, m.recipe);
  } catch (const Error& e) {
    if (!device.empty() || m.config.train.device == "cpu") throw;
    FP4_THROW(e.what(), "\n(", dir.string(), " was trained on ", m.config.train.device,
              "; pass --device cpu to use the CPU engine)");
  }
  load_parameters(*m.engine, ckpt);
  return m;
}

namespace {

// Per-source losses and the zero-shot tasks from the manifest's held-out files, printed and written as
// eval.json (the run directory's unless --json names another file).
void eval_suite(LoadedModel& m, const Manifest& manifest, const EvalArgs& args, const EvalResult& pooled) {
  std::vector<std::string> missing;
  const auto sources = read_held_out_sources(manifest.val_inputs, &missing);
  for (const auto& f : missing)
    std::fprintf(stderr, "note: held-out file %s is not here: no per-source result for it\n", f.c_str());
  const auto tok = load_tokenizer(manifest.tokenizer);
  const int seq = m.config.data.seq;
  const auto per_source =
      per_source_loss(*m.engine, *tok, sources, m.config.data.batch, seq, args.source_windows);
  for (const auto& s : per_source)
    std::printf("  source %-32s loss %.4f | ppl %9.3f | %lld tokens\n", s.name.c_str(), s.loss, s.perplexity,
                static_cast<long long>(s.tokens));
  std::vector<ZeroShotResult> tasks;
  if (args.zero_shot_items > 0)
    for (const auto& task : build_zero_shot_tasks(*tok, sources, args.zero_shot_items, seq * 3 / 4, seq)) {
      tasks.push_back(score_zero_shot(*m.engine, task));
      std::printf("  zero-shot %-14s %4lld items | accuracy %.3f\n", task.name.c_str(),
                  static_cast<long long>(tasks.back().items), tasks.back().accuracy());
    }
  fs::path out = args.json_out;
  if (out.empty()) out = m.checkpoint.parent_path().parent_path() / "eval.json";  // <run>/checkpoints/step_N
  write_file_synced(out, eval_suite_json(m.checkpoint.string(), pooled.loss, pooled.perplexity, pooled.tokens,
                                         per_source, tasks)
                                 .dump(2) +
                             "\n");
  std::fprintf(stderr, "wrote %s\n", out.string().c_str());
}

}  // namespace

EvalResult eval_command(const EvalArgs& args) {
  constexpr int64_t kMaxBatches = int64_t{1} << 40;  // batches x rows must not overflow
  FP4_CHECK(args.batches >= 0 && args.batches <= kMaxBatches, "eval --batches must be in [0, ", kMaxBatches,
            "] (0: every window), got ", args.batches);
  LoadedModel m = load_model(args.checkpoint, args.device);
  LoaderOptions o;
  o.data = args.data.empty() ? m.config.val_dir() : args.data;
  o.split = "val";
  o.batch = m.config.data.batch;
  o.seq = m.config.data.seq;
  o.max_windows = args.batches * o.batch;  // spread over the split, as the trainer's evaluations
  const Manifest manifest = read_manifest(o.data);
  FP4_CHECK(manifest.vocab_size <= m.config.model.vocab_real, o.data.string(), ": vocabulary ",
            manifest.vocab_size, " does not fit the model's ", m.config.model.vocab_real);
  ValidationLoader loader(o);
  std::fprintf(stderr, "evaluating %s on %s (split val, %lld batches of %d x %d)\n",
               m.checkpoint.string().c_str(), o.data.string().c_str(),
               static_cast<long long>(loader.batches()), o.batch, o.seq);
  const EvalResult r = evaluate_split(*m.engine, loader, 0);
  std::printf("val loss %.4f | val ppl %.3f | %lld tokens\n", r.loss, r.perplexity,
              static_cast<long long>(r.tokens));
  eval_suite(m, manifest, args, r);
  return r;
}

std::string sample_command(const SampleArgs& args) {
  LoadedModel m = load_model(args.checkpoint, args.device);
  std::string spec = args.tokenizer.empty() ? m.config.data.tokenizer : args.tokenizer;
  if (spec.empty()) spec = read_manifest(m.config.data.train_dir).tokenizer;
  const auto tok = load_tokenizer(spec);
  FP4_CHECK(tok->vocab_size() <= m.config.model.vocab_real, "tokenizer ", spec, " has ", tok->vocab_size(),
            " ids but the model only ", m.config.model.vocab_real);
  std::vector<int32_t> prompt = tok->encode(args.prompt);
  // An empty prompt starts a fresh document, as after an end-of-text in training.
  if (prompt.empty()) prompt.push_back(tok->eot_id());
  SampleOptions o;
  o.max_new_tokens = args.tokens;
  o.temperature = args.temperature;
  o.top_k = args.top_k;
  o.seed = args.seed;
  o.context = m.config.data.seq;
  o.stop_id = tok->eot_id();
  std::fwrite(args.prompt.data(), 1, args.prompt.size(), stdout);
  std::fflush(stdout);
  const auto ids = generate(*m.engine, prompt, o, [&](int32_t id) {
    if (id == tok->eot_id()) return;
    const std::string bytes = tok->token_bytes(id);
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    std::fflush(stdout);
  });
  std::fputs("\n", stdout);
  if (!args.ids_out.empty())  // for comparisons with other implementations (check_export_transformers.py)
    write_file_synced(args.ids_out, nlohmann::json{{"prompt", prompt}, {"generated", ids}}.dump() + "\n");
  std::vector<int32_t> text_ids;
  for (int32_t id : ids)
    if (id != tok->eot_id()) text_ids.push_back(id);
  return tok->decode(text_ids);
}

}  // namespace fp4
