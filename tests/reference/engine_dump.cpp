// engine_dump: writes what tests/reference/check_torch_cpu.py compares against its own PyTorch
// OLMo-2: the initial weights, the batches, the loss and every gradient at the initial weights,
// and the weights after N AdamW steps (cosine schedule, clipping, two micro-batches per step).
// Output: <out>/dump.safetensors (tensors) and <out>/dump.json (config, hyper-parameters, per-step stats).
//   engine_dump --out DIR [--seed N] [--steps N]
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/cpu_engine.h"
#include "model/olmo2.h"
#include "optim/schedule.h"

namespace fp4 {
namespace {

struct Tensor8 {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

template <typename T>
Tensor8 make_tensor(std::string name, const char* dtype, std::vector<int64_t> shape,
                    const std::vector<T>& v) {
  Tensor8 t{std::move(name), dtype, std::move(shape), std::vector<uint8_t>(v.size() * sizeof(T))};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

// safetensors: 8-byte little-endian header size, JSON header, then the raw tensors.
void write_safetensors(const std::filesystem::path& path, const std::vector<Tensor8>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  std::ofstream out(path, std::ios::binary);
  FP4_CHECK(out.good(), "engine_dump: cannot write ", path.string());
  const uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& t : tensors)
    out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  FP4_CHECK(out.good(), "engine_dump: write to ", path.string(), " failed");
}

Batch random_batch(std::mt19937& rng, const ModelConfig& cfg, int b, int t) {
  std::uniform_int_distribution<int> tok(0, cfg.vocab_real - 1);
  std::bernoulli_distribution ignored(0.15);
  Batch batch{b, t, std::vector<int32_t>(static_cast<size_t>(b) * t),
              std::vector<int32_t>(static_cast<size_t>(b) * t)};
  for (auto& x : batch.tokens) x = tok(rng);
  for (auto& x : batch.targets) x = ignored(rng) ? -1 : tok(rng);
  return batch;
}

std::vector<float> read(const TrainingEngine& e, const ParameterInfo& p) {
  std::vector<float> v(static_cast<size_t>(p.numel()));
  e.read_parameter(p.name, v);
  return v;
}

int run(int argc, char** argv) {
  std::string out_dir;
  uint64_t seed = 1234;
  int steps = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    FP4_CHECK(i + 1 < argc, "engine_dump: ", a, " needs a value");
    if (a == "--out")
      out_dir = argv[++i];
    else if (a == "--seed")
      seed = std::stoull(argv[++i]);
    else if (a == "--steps")
      steps = std::stoi(argv[++i]);
    else
      FP4_THROW("engine_dump: unknown argument ", a,
                " (usage: engine_dump --out DIR [--seed N] [--steps N])");
  }
  FP4_CHECK(!out_dir.empty(), "engine_dump: --out DIR is required");
  FP4_CHECK(steps >= 1, "engine_dump: --steps must be >= 1");
  std::filesystem::create_directories(out_dir);

  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  // Two micro-batches of different shapes per step: exercises accumulation and buffer re-sizing.
  std::vector<std::vector<Batch>> batches(static_cast<size_t>(steps));
  for (auto& step : batches) step = {random_batch(rng, cfg, 2, 32), random_batch(rng, cfg, 1, 24)};

  std::vector<Tensor8> tensors;
  nlohmann::json meta;
  meta["seed"] = seed;
  meta["config"] = {{"n_layers", cfg.n_layers},     {"d_model", cfg.d_model},
                    {"n_heads", cfg.n_heads},       {"d_ff", cfg.d_ff},
                    {"vocab_size", cfg.vocab_size}, {"vocab_real", cfg.vocab_real},
                    {"rope_theta", cfg.rope_theta}, {"norm_eps", cfg.norm_eps},
                    {"z_loss", cfg.z_loss}};
  for (size_t s = 0; s < batches.size(); ++s)
    for (size_t m = 0; m < batches[s].size(); ++m) {
      const Batch& b = batches[s][m];
      const std::string id = std::to_string(s) + "." + std::to_string(m);
      tensors.push_back(make_tensor("tokens." + id, "I32", {b.batch, b.seq}, b.tokens));
      tensors.push_back(make_tensor("targets." + id, "I32", {b.batch, b.seq}, b.targets));
    }

  // Gradients at the initial weights, from the model itself (the engine does not expose them).
  Olmo2Model model(cfg, recipe);
  model.init_parameters(seed);
  auto& ps = model.params();
  int64_t total = 0;
  for (const Batch& b : batches[0])
    for (int32_t t : b.targets) total += t >= 0;
  ps.zero_grads();
  double loss_sum = 0, ce_sum = 0;
  for (const Batch& b : batches[0]) {
    model.forward(b.tokens.data(), b.batch, b.seq);
    const auto s = model.loss(b.targets.data(), true, static_cast<float>(1.0 / static_cast<double>(total)));
    loss_sum += s.loss;
    ce_sum += s.ce;
    model.backward();
  }
  meta["initial"] = {{"loss", loss_sum / total}, {"ce_loss", ce_sum / total}, {"tokens", total}};
  for (int i = 0; i < ps.size(); ++i) {
    const auto& info = ps.at(i).info;
    const auto g = ps.grad(i);
    tensors.push_back(
        make_tensor("grad." + info.name, "F32", info.shape, std::vector<float>(g.begin(), g.end())));
  }

  auto engine = make_cpu_engine(cfg, recipe, seed);
  for (const auto& p : engine->parameters())
    tensors.push_back(make_tensor("init." + p.name, "F32", p.shape, read(*engine, p)));
  LrSchedule sched;
  sched.kind = ScheduleKind::kCosine;
  sched.peak_lr = 5e-3;
  sched.warmup_steps = 2;
  sched.total_steps = steps;
  sched.final_ratio = 0.1;
  StepHyper hyper;         // AdamW (0.9, 0.95), eps 1e-8, wd 0.1
  hyper.grad_clip = 3.0f;  // between the gradient norms seen (2.4 .. 6.3): some steps clip, some do not
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
  // The engine's whole state (weights, AdamW moments, step) before each step and after the last, so
  // the reference can also take each step from exactly the engine's state.
  auto dump_state = [&](int k) {
    for (auto& t : engine->save_state())
      tensors.push_back({"state." + std::to_string(k) + "." + t.name, t.dtype, t.shape, std::move(t.bytes)});
  };
  for (int s = 0; s < steps; ++s) {
    dump_state(s);
    hyper.lr = static_cast<float>(lr_at(sched, s));
    const StepStats st = engine->train_step(batches[static_cast<size_t>(s)], hyper);
    meta["steps"].push_back({{"lr", hyper.lr},
                             {"loss", st.loss},
                             {"ce_loss", st.ce_loss},
                             {"grad_norm", st.grad_norm},
                             {"tokens", st.tokens}});
  }
  dump_state(steps);
  for (const auto& p : engine->parameters())
    tensors.push_back(make_tensor("final." + p.name, "F32", p.shape, read(*engine, p)));
  meta["parameters"] = nlohmann::json::array();
  for (const auto& p : engine->parameters())
    meta["parameters"].push_back({{"name", p.name}, {"shape", p.shape}, {"weight_decay", p.weight_decay}});

  write_safetensors(std::filesystem::path(out_dir) / "dump.safetensors", tensors);
  std::ofstream(std::filesystem::path(out_dir) / "dump.json") << meta.dump(1) << "\n";
  std::cerr << "engine_dump: " << tensors.size() << " tensors, " << steps << " steps -> " << out_dir << "\n";
  return 0;
}

}  // namespace
}  // namespace fp4

int main(int argc, char** argv) {
  try {
    return fp4::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "engine_dump: " << e.what() << "\n";
    return 1;
  }
}
