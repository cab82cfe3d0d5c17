// engine_dump_cuda: what tests/reference/check_torch_cuda.py compares with PyTorch on the GPU.
// Builds the CUDA engine (model preset, seed), writes its initial weights and its loss and gradients at
// those weights for the first step's micro-batches, then trains on the token file and records every step.
//   engine_dump_cuda --out DIR --data FILE --config NAME --steps N --micro M --batch B --seq T
//                    [--seed S] [--lr PEAK] [--warmup W] [--clip C]
// FILE: little-endian int32 token ids [steps][micro][batch][seq + 1]; tokens = [:seq], targets = [1:].
// Output: DIR/dump.safetensors (init.<param>, grad.<param>) and DIR/dump.json (config, hyper-parameters,
// initial loss and gradient norm, per-step lr/loss/grad_norm, tokens per second).
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/cuda/cuda_engine.h"
#include "optim/schedule.h"
#include "train/safetensors.h"

namespace fp4 {
namespace {

struct Args {
  std::string out, data, config = "olmo2-30m";
  int steps = 0, micro = 1, batch = 0, seq = 0, warmup = 0;
  uint64_t seed = 1234;
  double lr = 1e-3;
  float clip = 1.0f;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    FP4_CHECK(i + 1 < argc, "engine_dump_cuda: ", k, " needs a value");
    const std::string v = argv[++i];
    if (k == "--out")
      a.out = v;
    else if (k == "--data")
      a.data = v;
    else if (k == "--config")
      a.config = v;
    else if (k == "--steps")
      a.steps = std::stoi(v);
    else if (k == "--micro")
      a.micro = std::stoi(v);
    else if (k == "--batch")
      a.batch = std::stoi(v);
    else if (k == "--seq")
      a.seq = std::stoi(v);
    else if (k == "--seed")
      a.seed = std::stoull(v);
    else if (k == "--lr")
      a.lr = std::stod(v);
    else if (k == "--warmup")
      a.warmup = std::stoi(v);
    else if (k == "--clip")
      a.clip = std::stof(v);
    else
      FP4_THROW("engine_dump_cuda: unknown argument ", k);
  }
  FP4_CHECK(!a.out.empty() && !a.data.empty(), "engine_dump_cuda: --out and --data are required");
  FP4_CHECK(a.steps > 0 && a.micro > 0 && a.batch > 0 && a.seq > 0,
            "engine_dump_cuda: --steps, --micro, --batch and --seq must be positive");
  return a;
}

// Every step's micro-batches from the token file.
std::vector<std::vector<Batch>> read_batches(const Args& a) {
  const size_t row = static_cast<size_t>(a.seq) + 1;
  const size_t per_batch = static_cast<size_t>(a.batch) * row;
  const size_t want = static_cast<size_t>(a.steps) * a.micro * per_batch;
  std::ifstream in(a.data, std::ios::binary);
  FP4_CHECK(in.good(), "engine_dump_cuda: cannot open ", a.data);
  std::vector<int32_t> ids(want);
  in.read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(want * sizeof(int32_t)));
  FP4_CHECK(static_cast<size_t>(in.gcount()) == want * sizeof(int32_t), "engine_dump_cuda: ", a.data,
            " holds ", in.gcount(), " bytes, need ", want * sizeof(int32_t), " for ", a.steps, " x ", a.micro,
            " x ", a.batch, " x ", row, " tokens");
  std::vector<std::vector<Batch>> steps(static_cast<size_t>(a.steps));
  size_t at = 0;
  for (auto& step : steps) {
    for (int m = 0; m < a.micro; ++m) {
      Batch b{a.batch, a.seq, {}, {}};
      for (int r = 0; r < a.batch; ++r, at += row) {
        b.tokens.insert(b.tokens.end(), ids.begin() + static_cast<int64_t>(at),
                        ids.begin() + static_cast<int64_t>(at + row - 1));
        b.targets.insert(b.targets.end(), ids.begin() + static_cast<int64_t>(at + 1),
                         ids.begin() + static_cast<int64_t>(at + row));
      }
      step.push_back(std::move(b));
    }
  }
  return steps;
}

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  std::filesystem::create_directories(a.out);
  const ModelConfig cfg = model_preset(a.config);
  const auto steps = read_batches(a);
  auto engine = make_cuda_engine(cfg, Recipe{}, a.seed);
  auto* probe = dynamic_cast<GradientProbe*>(engine.get());
  FP4_CHECK(probe != nullptr, "engine_dump_cuda: the CUDA engine has no gradient probe");

  nlohmann::json meta;
  meta["device"] = engine->device_name();
  meta["seed"] = a.seed;
  meta["config"] = {{"name", cfg.name},
                    {"n_layers", cfg.n_layers},
                    {"d_model", cfg.d_model},
                    {"n_heads", cfg.n_heads},
                    {"d_ff", cfg.d_ff},
                    {"vocab_size", cfg.vocab_size},
                    {"vocab_real", cfg.vocab_real},
                    {"rope_theta", cfg.rope_theta},
                    {"norm_eps", cfg.norm_eps},
                    {"z_loss", cfg.z_loss}};
  std::vector<StateTensor> tensors;
  meta["parameters"] = nlohmann::json::array();
  for (const auto& p : engine->parameters()) {
    std::vector<float> v(static_cast<size_t>(p.numel()));
    engine->read_parameter(p.name, v);
    tensors.push_back(make_f32_tensor("init." + p.name, p.shape, v));
    meta["parameters"].push_back({{"name", p.name}, {"shape", p.shape}, {"weight_decay", p.weight_decay}});
  }
  const StepStats g = probe->compute_gradients(steps[0]);
  meta["initial"] = {
      {"loss", g.loss}, {"ce_loss", g.ce_loss}, {"grad_norm", g.grad_norm}, {"tokens", g.tokens}};
  for (const auto& p : engine->parameters()) {
    std::vector<float> v(static_cast<size_t>(p.numel()));
    probe->read_gradient(p.name, v);
    tensors.push_back(make_f32_tensor("grad." + p.name, p.shape, v));
  }
  write_safetensors(std::filesystem::path(a.out) / "dump.safetensors", tensors);

  LrSchedule sched;
  sched.kind = ScheduleKind::kCosine;
  sched.peak_lr = a.lr;
  sched.warmup_steps = a.warmup;
  sched.total_steps = a.steps;
  sched.final_ratio = 0.1;
  validate(sched);
  StepHyper hyper;
  hyper.grad_clip = a.clip;
  meta["hyper"] = {{"beta1", hyper.beta1},
                   {"beta2", hyper.beta2},
                   {"eps", hyper.eps},
                   {"weight_decay", hyper.weight_decay},
                   {"grad_clip", hyper.grad_clip}};
  meta["schedule"] = {{"peak_lr", sched.peak_lr},
                      {"warmup_steps", sched.warmup_steps},
                      {"total_steps", sched.total_steps},
                      {"final_ratio", sched.final_ratio}};
  meta["steps"] = nlohmann::json::array();
  using Clock = std::chrono::steady_clock;
  double timed_s = 0;
  int64_t timed_tokens = 0;
  for (int s = 0; s < a.steps; ++s) {
    hyper.lr = static_cast<float>(lr_at(sched, s));
    const auto t0 = Clock::now();
    const StepStats st = engine->train_step(steps[static_cast<size_t>(s)], hyper);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s >= 3) {  // after the arena, the GEMM plans and the first kernels are set up
      timed_s += dt;
      timed_tokens += static_cast<int64_t>(a.micro) * a.batch * a.seq;
    }
    meta["steps"].push_back({{"lr", hyper.lr},
                             {"loss", st.loss},
                             {"ce_loss", st.ce_loss},
                             {"grad_norm", st.grad_norm},
                             {"tokens", st.tokens},
                             {"seconds", dt}});
  }
  meta["tokens_per_second"] = timed_s > 0 ? static_cast<double>(timed_tokens) / timed_s : 0.0;
  std::ofstream(std::filesystem::path(a.out) / "dump.json") << meta.dump(1) << "\n";
  std::cerr << "engine_dump_cuda: " << cfg.name << " on " << engine->device_name() << ", " << a.steps
            << " steps, " << meta["tokens_per_second"].get<double>() << " tokens/s -> " << a.out << "\n";
  return 0;
}

}  // namespace
}  // namespace fp4

int main(int argc, char** argv) {
  try {
    return fp4::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "engine_dump_cuda: " << e.what() << "\n";
    return 1;
  }
}
