// train_bench: training throughput and device memory of the CUDA engine (BF16 recipe, AdamW).
//   train_bench [--config olmo2-30m] [--batch 16] [--seq 2048] [--micro 1] [--steps 20] [--warmup 3]
//               [--recipes bf16,tetrajet-v2-base,...] [--json FILE]
// A recipe may carry overrides after colons: `bf16:attention.q_attn=true` (values without ',' or ':').
// Tokens are uniform over the real vocabulary (the speed does not depend on them). Prints one line:
// tokens/s over the timed steps, the mean step time, and the device memory the engine holds.
// --json FILE also writes one JSON object a recipe (bench/bench_json.h), the raw figures without ratios:
// scripts/bench_to_json.py computes those against the run's bf16 row when it merges
// docs/benchmarks/latest.json.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "bench_json.h"
#include "core/error.h"
#include "model/cuda/cuda_engine.h"
#include "ops/cuda/cuda_check.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

int run(int argc, char** argv) {
  std::string config = "olmo2-30m";
  std::string recipes = "bf16";
  std::string json_path;
  int batch = 16, seq = 2048, micro = 1, steps = 20, warmup = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    FP4_CHECK(i + 1 < argc, "train_bench: ", k, " needs a value");
    const std::string v = argv[++i];
    if (k == "--config")
      config = v;
    else if (k == "--batch")
      batch = std::stoi(v);
    else if (k == "--seq")
      seq = std::stoi(v);
    else if (k == "--micro")
      micro = std::stoi(v);
    else if (k == "--steps")
      steps = std::stoi(v);
    else if (k == "--warmup")
      warmup = std::stoi(v);
    else if (k == "--recipe" || k == "--recipes")
      recipes = v;
    else if (k == "--json")
      json_path = v;
    else
      FP4_THROW("train_bench: unknown argument ", k);
  }
  FP4_CHECK(batch > 0 && seq > 0 && micro > 0 && steps > 0 && warmup >= 0,
            "train_bench: sizes must be positive");
  const ModelConfig cfg = model_preset(config);
  std::vector<std::string> names;
  for (size_t p = 0; p <= recipes.size();) {
    const size_t q = std::min(recipes.find(',', p), recipes.size());
    if (q > p) names.push_back(recipes.substr(p, q - p));
    p = q + 1;
  }
  cudaDeviceProp prop{};
  FP4_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  bench::JsonRows json(json_path, "train_bench", prop.name, argc, argv);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> tok(0, cfg.vocab_real - 1);
  std::vector<Batch> mbs(static_cast<size_t>(micro));
  for (auto& b : mbs) {
    b = Batch{batch, seq, std::vector<int32_t>(static_cast<size_t>(batch) * seq), {}};
    for (auto& x : b.tokens) x = tok(rng);
    b.targets.resize(b.tokens.size());
    for (auto& x : b.targets) x = tok(rng);
  }
  double base_ms = 0, base_mem = 0;
  for (const std::string& name : names) {
    // NAME[:key=value]...: the preset with recipe overrides.
    std::vector<std::string> parts;
    for (size_t p = 0; p <= name.size();) {
      const size_t q = std::min(name.find(':', p), name.size());
      parts.push_back(name.substr(p, q - p));
      p = q + 1;
    }
    const Recipe recipe =
        load_recipe(parts.front(), std::vector<std::string>(parts.begin() + 1, parts.end()));
    // Every engine starts from an empty device: its memory is what it allocates (arena, weights, states,
    // quantization buffers) at its peak step, measured as the drop in free memory.
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    size_t free0 = 0, total = 0;
    FP4_CUDA_CHECK(cudaMemGetInfo(&free0, &total));
    double ms = 0, mem = 0, loss = 0;
    std::string device;
    {
      auto engine = make_cuda_engine(cfg, recipe, 1);
      device = engine->device_name();
      StepHyper h;
      h.lr = 1e-4f;
      for (int s = 0; s < warmup; ++s) engine->train_step(mbs, h);
      const auto t0 = std::chrono::steady_clock::now();
      for (int s = 0; s < steps; ++s) loss = engine->train_step(mbs, h).loss;
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ms = 1e3 * dt / steps;
      size_t free1 = 0;
      FP4_CUDA_CHECK(cudaMemGetInfo(&free1, &total));
      mem = static_cast<double>(free0 - free1) / (1 << 30);
    }
    if (name == names.front()) base_ms = ms, base_mem = mem;
    const double tokens = static_cast<double>(micro) * batch * seq;
    std::cout << "train_bench: " << cfg.name << " recipe " << name << " B" << batch << " T" << seq << " x"
              << micro << " micro-batches on " << device << ": " << static_cast<int64_t>(tokens / (ms / 1e3))
              << " tokens/s, " << ms << " ms/step, device memory " << mem << " GiB, last loss " << loss
              << ", step time vs " << names.front() << " " << ms / base_ms << "x, memory vs " << names.front()
              << " " << mem / base_mem << "x\n";
    json.write({{"config", cfg.name},
                {"recipe", name},
                {"batch", batch},
                {"seq", seq},
                {"micro", micro},
                {"steps", steps},
                {"warmup", warmup},
                {"tokens_s", tokens / (ms / 1e3)},
                {"ms_step", ms},
                {"memory_gib", mem},
                {"last_loss", loss}});
  }
  return 0;
}

}  // namespace
}  // namespace fp4

int main(int argc, char** argv) {
  try {
    return fp4::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "train_bench: " << e.what() << "\n";
    return 1;
  }
}
