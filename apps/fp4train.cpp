// fp4train: the command-line program. Argument parsing only; the work is in src/train/commands.h.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "core/error.h"
#include "dist/launcher.h"
#include "ops/ops.h"
#include "report/report.h"
#include "report/seeds.h"
#include "train/commands.h"
#include "train/engine_factory.h"
#include "train/export_hf.h"
#ifdef FP4_HAVE_CUDA
#include "model/cuda/cuda_engine.h"
#endif

namespace {

// CLI11 reads "-1" into an unsigned option as 2^64 - 1: a seed must be written as the digits it is.
const CLI::Validator kUnsignedInteger(
    [](std::string& s) {
      if (s.empty() || s.size() > 20 || s.find_first_not_of("0123456789") != std::string::npos ||
          (s.size() == 20 && s > "18446744073709551615"))
        return std::string("expected an integer in [0, 2^64 - 1], got '") + s + "'";
      return std::string();
    },
    "UINT64");
const CLI::Validator kNonEmpty([](std::string& s) { return s.empty() ? std::string("must not be empty") : std::string(); },
                               "TEXT");


void add_train(CLI::App& app, fp4::TrainArgs& a) {
  auto* cmd =
      app.add_subcommand("train", "train a model (no options: the tiny model on the CPU, default corpus)");
  cmd->add_option("--config", a.configs, "run config TOML file; repeat to layer files (later ones win)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--recipe", a.recipe, "recipe preset name or recipe TOML file (sets recipe.name)")->check(kNonEmpty);
  cmd->add_option("--set", a.sets, "override one config key: section.key=value (repeatable)");
  cmd->add_flag("--resume", a.resume,
                "resume from the run directory's latest checkpoint (an error if it has none)");
  cmd->add_option("--out", a.out, "run directory (sets train.out_dir)")->check(kNonEmpty);
}

void add_prepare(CLI::App& app, fp4::PrepareArgs& a) {
  auto* cmd = app.add_subcommand("prepare", "tokenize text files into token shards");
  cmd->option_defaults()->always_capture_default();  // show defaults in --help
  cmd->add_option("--input", a.inputs, "text files or directories (.txt, .xz) for the train split")
      ->required();
  cmd->add_option("--val", a.val_inputs, "text files or directories for the validation split");
  cmd->add_option("--val-fraction", a.val_fraction,
                  "without --val: the share of input documents held out for validation")
      ->check(CLI::Range(0.0, 0.99));
  cmd->add_option("--val-sample", a.val_sample,
                  "also hold out this share of ~--val-piece-bytes pieces of every training document "
                  "(validation then follows the training mix)")
      ->check(CLI::Range(0.0, 0.99));
  cmd->add_option("--val-piece-bytes", a.val_piece_bytes, "piece size for --val-sample")
      ->check(CLI::PositiveNumber);
  cmd->add_option(
         "--tokenizer", a.tokenizer,
         "tokenizer spec: bytes, a GPT-2 BPE directory (encoder.json + vocab.bpe), or a tokenizer.json")
      ->required();
  cmd->add_option("--out", a.out, "output directory (shards + manifest.json)")->required();
  cmd->add_option("--threads", a.threads, "tokenizer threads (0: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--shard-tokens", a.shard_tokens, "tokens per shard file")->check(CLI::PositiveNumber);
}

void add_eval(CLI::App& app, fp4::EvalArgs& a) {
  auto* cmd = app.add_subcommand("eval", "validation loss and perplexity of a checkpoint");
  cmd->option_defaults()->always_capture_default();  // show defaults in --help
  cmd->add_option("--checkpoint", a.checkpoint, "checkpoint directory, or a run directory (its latest)")
      ->required();
  cmd->add_option("--data", a.data, "prepared data directory (default: the run's validation data)");
  cmd->add_option("--batches", a.batches,
                  "N batches of windows spread evenly over the split (0: every window)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", a.device, "cpu or cuda (default: the device the run trained on)");
}

void add_sample(CLI::App& app, fp4::SampleArgs& a) {
  auto* cmd = app.add_subcommand("sample", "generate text from a checkpoint");
  cmd->option_defaults()->always_capture_default();  // show defaults in --help
  cmd->add_option("--checkpoint", a.checkpoint, "checkpoint directory, or a run directory (its latest)")
      ->required();
  cmd->add_option("--prompt", a.prompt, "text to continue")->required();
  cmd->add_option("--tokens", a.tokens, "new tokens to generate (stops early at end-of-text)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", a.temperature, "softmax temperature (0: greedy)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", a.top_k, "sample among the k most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", a.seed, "random seed of the sampler")->check(kUnsignedInteger);
  cmd->add_option("--device", a.device, "cpu or cuda (default: the device the run trained on)");
  cmd->add_option("--tokenizer", a.tokenizer, "tokenizer spec (default: the run's)");
}

void add_export(CLI::App& app, fp4::ExportArgs& a) {
  auto* cmd = app.add_subcommand("export", "write a checkpoint as a Hugging Face model directory (docs/EXPORT.md)");
  cmd->option_defaults()->always_capture_default();  // show defaults in --help
  cmd->add_option("--checkpoint", a.checkpoint, "checkpoint directory, or a run directory (its latest)")
      ->required();
  cmd->add_option("--out", a.out, "output directory (must be empty or absent unless --force)")->required();
  cmd->add_option("--format", a.format, "output format (hf: transformers' Olmo2ForCausalLM)");
  cmd->add_option("--dtype", a.dtype, "weight dtype in model.safetensors: f32 or bf16 (round to nearest even)");
  cmd->add_option("--tokenizer", a.tokenizer, "tokenizer spec (default: the run's)");
  cmd->add_flag("--force", a.force, "replace a non-empty --out directory");
}

void run_export(const fp4::ExportArgs& a) {
  const auto r = fp4::export_command(a);
  for (const auto& note : r.notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  std::string files;
  for (const auto& f : r.files) files += (files.empty() ? "" : ", ") + f;
  std::printf("exported %s -> %s (%s)\n", r.checkpoint.string().c_str(), r.out.string().c_str(), files.c_str());
}

struct ReportArgs {
  std::vector<std::string> runs;
  fp4::ReportOptions options;
  std::string svg = "loss_curves.svg";
};

void add_report(CLI::App& app, ReportArgs& a) {
  auto* cmd = app.add_subcommand(
      "report", "compare runs: loss curves as an SVG picture and a Markdown table (seed by seed when several)");
  cmd->add_option("runs", a.runs,
                  "run directories (each with metrics.jsonl; recipe.toml names the recipe, config.json the seed)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--svg", a.svg, "where to write the picture")->capture_default_str();
  cmd->add_option("--baseline", a.options.baseline, "recipe the gaps are measured against (the run of the same seed)")
      ->capture_default_str();
  cmd->add_option("--reference", a.options.reference, "recipe whose gap the others are compared with")
      ->capture_default_str();
  cmd->add_option("--title", a.options.title, "picture title")->capture_default_str();
}

void report_command(ReportArgs& a) {
  std::vector<fp4::RunSummary> runs;
  for (const auto& r : a.runs) runs.push_back(fp4::summarize_run(r));
  a.options.svg_path = a.svg;
  std::fputs(fp4::write_report(runs, a.options).c_str(), stdout);
  for (const auto& note : fp4::seed_notes(runs)) std::fprintf(stderr, "note: %s\n", note.c_str());
  std::fprintf(stderr, "loss curves written to %s (gaps to %s: %s)\n", a.svg.c_str(), a.options.baseline.c_str(),
               fp4::gap_svg_path(a.svg).string().c_str());
}

void add_launch(CLI::App& app, fp4::LaunchOptions& a) {
  auto* cmd = app.add_subcommand(
      "launch",
      "run N copies of a command on this host as one job: fp4train launch --gpus N -- <command...>");
  cmd->add_option("--gpus", a.nprocs, "processes to start, one per GPU (rank i uses device i)")
      ->required()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--master-addr", a.master_addr, "MASTER_ADDR given to every rank")->capture_default_str();
  cmd->add_option("--master-port", a.master_port, "MASTER_PORT (0: a free loopback port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("command", a.command, "the command each rank runs, after --")->required();
}

}  // namespace

namespace {

// OpenBLAS picks its kernels when the process loads it, so a CPU it does not recognise (a virtual "Intel Xeon
// Processor") gets the generic SSE3 ones. Start again once with the better core type in the environment; a
// core type the user set is left alone, and if the restart fails the run goes on as it is.
void restart_with_better_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const std::string better = fp4::cpu::blas_better_coretype();
  if (better.empty()) return;
  if (::setenv("OPENBLAS_CORETYPE", better.c_str(), 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  ::unsetenv("OPENBLAS_CORETYPE");  // still here: the restart failed
}

}  // namespace

int main(int argc, char** argv) {
  restart_with_better_blas_kernels(argv);
#ifdef FP4_HAVE_CUDA
  fp4::register_cuda_engine(&fp4::make_cuda_engine);
#endif
  CLI::App app{
      "fp4train: fully quantized NVFP4 LLM pretraining (OLMo-2 models).\n"
      "Without a subcommand, trains the tiny model on the CPU (same as `fp4train train`)."};
  app.require_subcommand(0, 1);
  fp4::TrainArgs train;
  fp4::PrepareArgs prepare;
  fp4::EvalArgs eval;
  fp4::SampleArgs sample;
  add_train(app, train);
  add_prepare(app, prepare);
  add_eval(app, eval);
  add_sample(app, sample);
  fp4::ExportArgs export_args;
  add_export(app, export_args);
  ReportArgs report;
  add_report(app, report);
  fp4::LaunchOptions launch;
  add_launch(app, launch);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (app.got_subcommand("prepare"))
      fp4::prepare_command(prepare);
    else if (app.got_subcommand("eval"))
      fp4::eval_command(eval);
    else if (app.got_subcommand("sample"))
      fp4::sample_command(sample);
    else if (app.got_subcommand("export"))
      run_export(export_args);
    else if (app.got_subcommand("report"))
      report_command(report);
    else if (app.got_subcommand("launch"))
      return fp4::launch_local(launch);
    else if (const auto r = fp4::train_command(train); r.stop_signal != 0)
      return 128 + r.stop_signal;  // the shell convention for "ended by signal N"
  } catch (const fp4::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
