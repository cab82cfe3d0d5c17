// train_bench: training throughput and device memory of the CUDA engine (BF16 recipe, AdamW).
//   train_bench [--config olmo2-30m] [--batch 16] [--seq 2048] [--micro 1] [--steps 20] [--warmup 3]
// Tokens are uniform over the real vocabulary (the speed does not depend on them). Prints one line:
// tokens/s over the timed steps, the mean step time, and the device memory the engine holds.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/cuda/cuda_engine.h"
#include "ops/cuda/cuda_check.h"

namespace fp4 {
namespace {

int run(int argc, char** argv) {
  std::string config = "olmo2-30m";
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
    else
      FP4_THROW("train_bench: unknown argument ", k);
  }
  FP4_CHECK(batch > 0 && seq > 0 && micro > 0 && steps > 0 && warmup >= 0,
            "train_bench: sizes must be positive");
  const ModelConfig cfg = model_preset(config);
  size_t free0 = 0, total = 0;
  FP4_CUDA_CHECK(cudaMemGetInfo(&free0, &total));
  auto engine = make_cuda_engine(cfg, Recipe{}, 1);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> tok(0, cfg.vocab_real - 1);
  std::vector<Batch> mbs(static_cast<size_t>(micro));
  for (auto& b : mbs) {
    b = Batch{batch, seq, std::vector<int32_t>(static_cast<size_t>(batch) * seq), {}};
    for (auto& x : b.tokens) x = tok(rng);
    b.targets.resize(b.tokens.size());
    for (auto& x : b.targets) x = tok(rng);
  }
  StepHyper h;
  h.lr = 1e-4f;
  for (int s = 0; s < warmup; ++s) engine->train_step(mbs, h);
  const auto t0 = std::chrono::steady_clock::now();
  double loss = 0;
  for (int s = 0; s < steps; ++s) loss = engine->train_step(mbs, h).loss;
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t free1 = 0;
  FP4_CUDA_CHECK(cudaMemGetInfo(&free1, &total));
  const double tokens = static_cast<double>(steps) * micro * batch * seq;
  std::cout << "train_bench: " << cfg.name << " B" << batch << " T" << seq << " x" << micro
            << " micro-batches on " << engine->device_name() << ": " << static_cast<int64_t>(tokens / dt)
            << " tokens/s, " << 1e3 * dt / steps << " ms/step, device memory "
            << static_cast<double>(free0 - free1) / (1 << 30) << " GiB, last loss " << loss << "\n";
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
