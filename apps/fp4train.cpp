// fp4train: the command-line program. Argument parsing only; the work is in src/train/commands.h.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <tuple>

#include "core/error.h"
#include "dist/launcher.h"
#include "nn/q_attention_error.h"
#include "ops/ops.h"
#include "optim/ns_fit.h"
#include "optim/q_adamw_error.h"
#include "optim/q_root_error.h"
#include "report/eval_table.h"
#include "report/paired_stats.h"
#include "report/report.h"
#include "report/seeds.h"
#include "train/checkpoint.h"
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
const CLI::Validator kNonEmpty(
    [](std::string& s) { return s.empty() ? std::string("must not be empty") : std::string(); }, "TEXT");

void add_train(CLI::App& app, fp4::TrainArgs& a) {
  auto* cmd =
      app.add_subcommand("train", "train a model (no options: the tiny model on the CPU, default corpus)");
  cmd->add_option("--config", a.configs, "run config TOML file; repeat to layer files (later ones win)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--recipe", a.recipe, "recipe preset name or recipe TOML file (sets recipe.name)")
      ->check(kNonEmpty);
  cmd->add_option("--set", a.sets, "override one config key: section.key=value (repeatable)");
  cmd->add_flag("--resume", a.resume,
                "resume from the run directory's latest checkpoint (an error if it has none)");
  cmd->add_option("--out", a.out, "run directory (sets train.out_dir)")->check(kNonEmpty);
  cmd->add_option(
         "--init-from", a.init_from,
         "branch from this checkpoint (or run directory's latest): its weights, optimizer state, data "
         "position and step; the LR schedule's length/decay and the recipe may differ")
      ->check(CLI::ExistingDirectory);
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
  auto* cmd = app.add_subcommand(
      "eval", "validation loss and perplexity of a checkpoint, per held-out source, and zero-shot tasks");
  cmd->option_defaults()->always_capture_default();  // show defaults in --help
  cmd->add_option("--checkpoint", a.checkpoint, "checkpoint directory, or a run directory (its latest)")
      ->required();
  cmd->add_option("--data", a.data, "prepared data directory (default: the run's validation data)");
  cmd->add_option("--batches", a.batches,
                  "N batches of windows spread evenly over the split (0: every window)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", a.device, "cpu or cuda (default: the device the run trained on)");
  cmd->add_option("--source-windows", a.source_windows,
                  "windows of data.seq tokens scored per held-out source (0: all of it)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--zero-shot-items", a.zero_shot_items,
                  "items per held-out source of each zero-shot task (0: no zero-shot tasks)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--json", a.json_out, "where to write eval.json (default: the run directory)");
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
  cmd->add_option("--ids-out", a.ids_out, "also write the prompt's and the generated token ids there (JSON)");
}

void add_export(CLI::App& app, fp4::ExportArgs& a) {
  auto* cmd =
      app.add_subcommand("export", "write a checkpoint as a Hugging Face model directory (docs/EXPORT.md)");
  cmd->option_defaults()->always_capture_default();  // show defaults in --help
  cmd->add_option("--checkpoint", a.checkpoint, "checkpoint directory, or a run directory (its latest)")
      ->required();
  cmd->add_option("--out", a.out, "output directory (must be empty or absent unless --force)")->required();
  cmd->add_option("--format", a.format, "output format (hf: transformers' Olmo2ForCausalLM)");
  cmd->add_option("--dtype", a.dtype,
                  "weight dtype in model.safetensors: f32 or bf16 (round to nearest even)");
  cmd->add_option("--tokenizer", a.tokenizer, "tokenizer spec (default: the run's)");
  cmd->add_flag("--force", a.force, "replace a non-empty --out directory");
}

void run_export(const fp4::ExportArgs& a) {
  const auto r = fp4::export_command(a);
  for (const auto& note : r.notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  std::string files;
  for (const auto& f : r.files) files += (files.empty() ? "" : ", ") + f;
  std::printf("exported %s -> %s (%s)\n", r.checkpoint.string().c_str(), r.out.string().c_str(),
              files.c_str());
}

struct ReportArgs {
  std::vector<std::string> runs;
  fp4::ReportOptions options;
  std::string svg = "loss_curves.svg";
};

void add_report(CLI::App& app, ReportArgs& a) {
  auto* cmd = app.add_subcommand(
      "report",
      "compare runs: loss curves as an SVG picture and a Markdown table (seed by seed when several)");
  cmd->add_option(
         "runs", a.runs,
         "run directories (each with metrics.jsonl; recipe.toml names the recipe, config.json the seed)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--svg", a.svg, "where to write the picture")->capture_default_str();
  cmd->add_option("--baseline", a.options.baseline,
                  "recipe the gaps are measured against (the run of the same seed)")
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
  std::vector<std::string> labels;
  for (const auto& r : runs) labels.push_back(r.label);
  std::fputs(fp4::eval_suite_table(a.runs, labels).c_str(), stdout);  // runs with an eval.json
  for (const auto& note : fp4::seed_notes(runs)) std::fprintf(stderr, "note: %s\n", note.c_str());
  std::fprintf(stderr, "loss curves written to %s (gaps to %s: %s)\n", a.svg.c_str(),
               a.options.baseline.c_str(), fp4::gap_svg_path(a.svg).string().c_str());
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

// The default job (no subcommand): the tiny model of configs/runs/tiny.toml trained twice on the CPU, in
// BF16 and with an NVFP4 recipe, then the comparison table and the loss picture, so a first run shows what
// fp4train is for. A second call resumes the finished runs (nothing to train) and reports again.
constexpr const char* kDefaultJobDir = "runs/first";
constexpr std::array<const char*, 2> kDefaultJobRecipes = {"bf16", "tetrajet-v2-base"};
// Shorter than tiny.toml's 400 steps: the NVFP4 recipe is emulated in FP32 on the CPU (about 7x BF16's step).
const std::vector<std::string> kDefaultJobSets = {"train.steps=120", "optim.warmup=12", "train.eval_every=40",
                                                  "train.ckpt_every=120"};

int run_default_job() {
  ReportArgs report;
  for (const char* recipe : kDefaultJobRecipes) {
    fp4::TrainArgs args;
    args.recipe = recipe;
    args.sets = kDefaultJobSets;
    args.out = std::string(kDefaultJobDir) + "/" + recipe;
    std::fprintf(stderr, "default job: the tiny model with recipe %s -> %s\n", recipe, args.out.c_str());
    std::fflush(stdout);
    if (const auto r = fp4::train_command(args); r.stop_signal != 0) return 128 + r.stop_signal;
    report.runs.push_back(args.out);
  }
  report.svg = std::string(kDefaultJobDir) + "/loss_curves.svg";
  report.options.title = "fp4train default job: tiny model, BF16 vs NVFP4 (CPU)";
  std::printf("\n");
  report_command(report);
  return 0;
}

// "128x384" -> (128, 384); an error naming the option otherwise.
std::pair<int64_t, int64_t> parse_shape(const std::string& s, const char* option) {
  const auto x = s.find('x');
  try {
    if (x != std::string::npos && x > 0 && x + 1 < s.size()) {
      size_t a = 0, b = 0;
      const int64_t r = std::stoll(s.substr(0, x), &a), c = std::stoll(s.substr(x + 1), &b);
      if (a == x && b == s.size() - x - 1 && r > 0 && c > 0) return {r, c};
    }
  } catch (const std::exception&) {
  }
  FP4_THROW(option, " '", s, "': expected ROWSxCOLS with positive integers, e.g. 128x384");
}

struct FitNsArgs {
  std::vector<std::string> shapes;
  int samples = 4, evals = 160;
  uint64_t seed = 1;
  bool fp32 = false;
};

void add_fit_ns(CLI::App& app, FitNsArgs& a) {
  auto* cmd = app.add_subcommand(
      "fit-ns",
      "fit Newton-Schulz coefficients (a, b, c) per matrix shape on normal sample matrices (Q-Root)");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--shape", a.shapes, "ROWSxCOLS (repeatable)")->required();
  cmd->add_option("--samples", a.samples, "sample matrices per shape")->check(CLI::PositiveNumber);
  cmd->add_option("--evals", a.evals, "objective evaluations of the Nelder-Mead search")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", a.seed, "sample seed");
  cmd->add_flag("--fp32", a.fp32, "fit the FP32 iteration instead of NVFP4 operands");
}

void fit_ns_command(const FitNsArgs& a) {
  std::printf(
      "| shape | coefficients (a, b, c) | clipping | fit objective | e_q per step | e_q (end) | FP32 polar "
      "error |\n|---|---|---|---|---|---|---|\n");
  for (const auto& s : a.shapes) {
    const auto [rows, cols] = parse_shape(s, "--shape");
    fp4::NsFitSettings fs;
    fs.max_evals = a.evals;
    const fp4::NsCoefficients start = a.fp32 ? fp4::kMuonNsCoefficients : fp4::kQRootNsCoefficients;
    const fp4::NsFitResult r = fp4::fit_ns_coefficients(rows, cols, a.samples, a.seed, !a.fp32, fs);
    // Measured on fresh normal samples (seed + 1), not the fitting ones; RTN operands.
    for (const auto& [name, coef, obj] :
         {std::tuple{"default", start, r.start_error}, std::tuple{"fitted", r.coef, r.error}})
      for (double q : {1.0, 0.99}) {
        const fp4::NsStepErrors e =
            fp4::ns_step_errors(rows, cols, coef, fs.steps, q, "normal", a.samples, a.seed + 1);
        std::string steps;
        for (double v : e.e_q) steps += (steps.empty() ? "" : ", ") + std::to_string(v).substr(0, 6);
        std::printf("| %lld x %lld | %s (%.4f, %.4f, %.4f) | %s | %.4f | %s | %.4f | %.4f |\n",
                    static_cast<long long>(rows), static_cast<long long>(cols), name, coef.a, coef.b, coef.c,
                    q < 1 ? "p99" : "none", obj, steps.c_str(), e.e_q.back(), e.fp32_polar_error);
      }
  }
  std::fprintf(stderr,
               "fit objective: mean %s over %d normal fitting samples; e_q and polar error on %d fresh "
               "samples (seed + 1)\n",
               a.fp32 ? "FP32 polar error" : "e_q (NVFP4 RTN vs FP32)", a.samples, a.samples);
}

struct QAttnErrorArgs {
  int t = 512, head_dim = 64, samples = 2;
  std::vector<std::string> kinds = {"normal", "outliers"};
  std::vector<double> scales = {1, 4, 8};
  uint64_t seed = 1;
};

void add_qattn_error(CLI::App& app, QAttnErrorArgs& a) {
  auto* cmd =
      app.add_subcommand("qattn-error",
                         "Q-Attn's error on the attention scores against BF16 attention and FP64, and what "
                         "it does to the softmax and the output (CPU, docs/RESULTS.md)");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--t", a.t, "sequence length (causal)")->check(CLI::PositiveNumber);
  cmd->add_option("--head-dim", a.head_dim, "head size (a multiple of 16)")->check(CLI::PositiveNumber);
  cmd->add_option("--kind", a.kinds,
                  "inputs: normal (QK-normed Gaussian rows), outliers (4 channels at 10x)");
  cmd->add_option("--logit-scale", a.scales, "Q times this after the norm (sharper attention above 1)");
  cmd->add_option("--samples", a.samples, "samples of 4 heads each")->check(CLI::PositiveNumber);
  cmd->add_option("--seed", a.seed, "sample seed");
}

// Mean over the sample heads with its 95% t interval half-width.
std::string mean_pm(const std::vector<double>& v, const char* fmt) {
  const fp4::PairedInterval i = fp4::paired_mean_interval(v);
  char b[64];
  std::snprintf(b, sizeof b, fmt, i.mean, (i.hi - i.lo) / 2);
  return b;
}

void qattn_error_command(const QAttnErrorArgs& a) {
  std::printf(
      "## Q-Attn: scores S = QK^T / sqrt(%d) from NVFP4 Q^, K^ (1x16 along head_dim, tensor scale, RTN) and "
      "from "
      "BF16 operands, T = %d causal; mean over %d x 4 heads +- the 95%% t interval's half-width\n\n"
      "| input | logit scale | scores: NVFP4 vs FP64 | BF16 vs FP64 | NVFP4 vs BF16 | softmax TV: NVFP4 | "
      "BF16 | "
      "output: NVFP4 | BF16 |\n|---|---|---|---|---|---|---|---|---|\n",
      a.head_dim, a.t, a.samples);
  for (const std::string& kind : a.kinds)
    for (double scale : a.scales) {
      fp4::QAttnErrorOptions o;
      o.t = a.t;
      o.head_dim = a.head_dim;
      o.kind = kind;
      o.logit_scale = scale;
      o.samples = a.samples;
      o.seed = a.seed;
      const fp4::QAttnErrors e = fp4::q_attn_errors(o);
      std::printf(
          "| %s | %g | %s | %s | %s | %s | %s | %s | %s |\n", kind.c_str(), scale,
          mean_pm(e.scores_fp4, "%.4f +- %.4f").c_str(), mean_pm(e.scores_bf16, "%.5f +- %.5f").c_str(),
          mean_pm(e.scores_fp4_vs_bf16, "%.4f +- %.4f").c_str(),
          mean_pm(e.probs_tv_fp4, "%.4f +- %.4f").c_str(), mean_pm(e.probs_tv_bf16, "%.5f +- %.5f").c_str(),
          mean_pm(e.out_fp4, "%.4f +- %.4f").c_str(), mean_pm(e.out_bf16, "%.5f +- %.5f").c_str());
    }
}

struct OptimClaimsArgs {
  std::string part = "all";
  std::vector<std::string> shapes = {"128x128", "128x384", "128x768", "384x384", "384x1024", "384x1152"};
  int samples = 4;
  uint64_t seed = 1;
  std::string checkpoint;
};

void add_optim_claims(CLI::App& app, OptimClaimsArgs& a) {
  auto* cmd =
      app.add_subcommand("optim-claims",
                         "Full-Stack FP4's optimizer claims on the CPU: Q-Root's e_q per NS step, Q-AdamW's "
                         "second-moment error and optimizer-state memory (docs/RESULTS.md)");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--part", a.part, "q-root, q-adamw, memory or all")
      ->check(CLI::IsMember({"q-root", "q-adamw", "memory", "all"}));
  cmd->add_option("--shape", a.shapes, "Q-Root matrix shapes ROWSxCOLS");
  cmd->add_option("--samples", a.samples, "sample matrices per shape and input kind")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", a.seed, "sample seed");
  cmd->add_option("--checkpoint", a.checkpoint,
                  "Q-AdamW: also measure the second moments (adamw.v.*) of this AdamW checkpoint")
      ->check(CLI::ExistingDirectory);
}

void optim_claims_command(const OptimClaimsArgs& a) {
  if (a.part == "q-root" || a.part == "all") {
    fp4::QRootTableOptions o;
    for (const auto& s : a.shapes) o.shapes.push_back(parse_shape(s, "--shape"));
    o.samples = a.samples;
    o.seed = a.seed;
    std::printf(
        "## Q-Root: e_q = ||NS_fp4(X) - NS_fp32(X)||_F / ||NS_fp32(X)||_F after each NS step (mean of %d "
        "samples)\n\n%s\n",
        a.samples, fp4::q_root_error_table(o).c_str());
  }
  if (a.part == "q-adamw" || a.part == "all") {
    std::printf(
        "## Q-AdamW: second-moment reconstruction, codec vs plain NVFP4 storage of v\n\n"
        "| tensor | elements | rel. L2 error: codec | plain NVFP4 | codec vs plain | step-size error: codec "
        "| plain | v > 0 flushed to 0: codec | plain |\n|---|---|---|---|---|---|---|---|---|\n");
    auto row = [](const std::string& name, const std::vector<float>& v) {
      const fp4::SecondMomentErrors e = fp4::second_moment_errors(v, 1e-8f, 7);
      std::printf("| %s | %lld | %.4f | %.4f | %+.1f%% | %.4f | %.4f | %.2f%% | %.2f%% |\n", name.c_str(),
                  static_cast<long long>(e.size), e.codec_rel_l2, e.plain_rel_l2,
                  100 * (e.codec_rel_l2 / e.plain_rel_l2 - 1), e.codec_step_err, e.plain_step_err,
                  100 * e.codec_flushed, 100 * e.plain_flushed);
    };
    for (auto [r, c] : {std::pair<int64_t, int64_t>{384, 128}, {1152, 384}})
      row("synthetic " + std::to_string(r) + " x " + std::to_string(c) + " (seed " + std::to_string(a.seed) +
              ")",
          fp4::synthetic_second_moment(r, c, a.seed));
    if (!a.checkpoint.empty()) {
      const fp4::Checkpoint ck = fp4::load_checkpoint(a.checkpoint);
      for (const auto& t : ck.state) {
        if (t.name.rfind("adamw.v.", 0) != 0 || t.dtype != "F32" || t.shape.size() != 2) continue;
        std::vector<float> v(t.bytes.size() / 4);
        std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
        row(t.name + " (step " + std::to_string(ck.step()) + ")", v);
      }
    }
    std::printf("\n");
  }
  if (a.part == "memory" || a.part == "all") {
    std::vector<fp4::ModelConfig> models;
    fp4::ModelConfig m1 = fp4::model_preset("tiny");
    m1.name = "olmo2-1m-bytes", m1.n_layers = 4, m1.d_model = 128, m1.n_heads = 2, m1.d_ff = 384,
    m1.vocab_size = 384;
    models.push_back(m1);
    for (const char* p : {"olmo2-30m", "olmo2-70m", "olmo2-150m", "olmo2-370m", "olmo2-1b"})
      models.push_back(fp4::model_preset(p));
    std::printf(
        "## Optimizer-state memory (bytes as allocated by the CPU codec; every parameter on the "
        "optimizer)\n\n%s",
        fp4::optimizer_memory_table(models).c_str());
  }
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
      "Without a subcommand, runs the default job: the tiny model trained on the CPU in BF16 and with NVFP4\n"
      "(tetrajet-v2-base) into runs/first/, then the comparison table and runs/first/loss_curves.svg."};
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
  FitNsArgs fit_ns;
  add_fit_ns(app, fit_ns);
  OptimClaimsArgs optim_claims;
  add_optim_claims(app, optim_claims);
  QAttnErrorArgs qattn_error;
  add_qattn_error(app, qattn_error);
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
    else if (app.got_subcommand("fit-ns"))
      fit_ns_command(fit_ns);
    else if (app.got_subcommand("optim-claims"))
      optim_claims_command(optim_claims);
    else if (app.got_subcommand("qattn-error"))
      qattn_error_command(qattn_error);
    else if (app.got_subcommand("launch"))
      return fp4::launch_local(launch);
    else if (!app.got_subcommand("train"))
      return run_default_job();
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
