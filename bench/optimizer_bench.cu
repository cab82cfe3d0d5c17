// optimizer_bench: the optimizer step alone on the GPU, as the CUDA engine runs it (queue_step, the step's
// one host wait in read_control, commit_step), for several optimizers over the same parameters and gradients.
//   optimizer_bench [--config olmo2-70m] [--layout tetrajet-v2-base] [--optimizers adamw,root-bf16,q-root]
//                   [--steps 20] [--warmup 3]
// --layout names the recipe whose parameter layout is stepped: a LoRA-SVD preset (fullstack-fp4) adds every
// quantized linear's two factors, as the engine does. Prints, per optimizer, the mean step time and the
// device memory its state and workspaces take, each with its ratio to the first optimizer of the list: the
// step-to-step comparison that train_bench can only give as a difference of two whole training steps
// (issue 18's "Q-Root's optimizer step no slower than root-bf16": --optimizers root-bf16,q-root).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/olmo2.h"
#include "nn/cuda/device_params.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_stream.h"
#include "optim/cuda/device_optimizer.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  for (size_t p = 0; p <= s.size();) {
    const size_t q = std::min(s.find(',', p), s.size());
    if (q > p) out.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

double free_gib() {
  size_t free = 0, total = 0;
  FP4_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<double>(free) / (1 << 30);
}

int run(int argc, char** argv) {
  std::string config = "olmo2-70m", layout_name = "tetrajet-v2-base", list = "adamw,root-bf16,q-root";
  int steps = 20, warmup = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    FP4_CHECK(i + 1 < argc, k, " needs a value");
    const std::string v = argv[++i];
    if (k == "--config")
      config = v;
    else if (k == "--layout")
      layout_name = v;
    else if (k == "--optimizers")
      list = v;
    else if (k == "--steps")
      steps = std::stoi(v);
    else if (k == "--warmup")
      warmup = std::stoi(v);
    else
      FP4_THROW("unknown argument ", k);
  }
  FP4_CHECK(steps > 0 && warmup >= 0, "--steps must be positive and --warmup not negative");
  const std::vector<std::string> names = split_list(list);
  FP4_CHECK(!names.empty(), "--optimizers is empty");
  for (const std::string& n : names)
    FP4_CHECK(cuda::is_device_optimizer(n), "unknown optimizer \"", n, "\"; the CUDA engine's are ",
              cuda::device_optimizers());

  // The engine's parameter layout and initial values: the recipe parts that decide them (LoRA-SVD's factors
  // and their initial realignment), as the CUDA engine builds its host model.
  const ModelConfig cfg = model_preset(config);
  Olmo2Model host(cfg, parameter_layout_recipe(load_recipe(layout_name, {})));
  host.init_parameters(1);
  const std::vector<float> initial(host.params().values().begin(), host.params().values().end());
  // Gradients of a plausible size (a clipped step's elements are of order 1e-3), fixed for every step.
  std::vector<float> grads(initial.size());
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  for (float& g : grads) g = normal(rng);

  cuda::Stream stream;
  cudaDeviceProp prop{};
  FP4_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  cuda::DeviceParams params(host.params(), stream.get());
  FP4_CUDA_CHECK(
      cudaMemcpy(params.grads(), grads.data(), grads.size() * sizeof(float), cudaMemcpyHostToDevice));
  DeviceBuffer<double> loss_sums(2);
  const double sums[2] = {1.0, 1.0};  // a finite loss: the step is not skipped
  loss_sums.upload(sums, 2);
  int64_t matrices = 0;
  for (int i = 0; i < params.size(); ++i) matrices += params.at(i).info.shape.size() == 2;

  double base_ms = 0, base_gib = 0;
  for (const std::string& name : names) {
    params.write_all_values(initial);  // every optimizer starts from the same weights
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    const double free0 = free_gib();
    double ms = 0, gib = 0, grad_norm = 0;
    {
      auto opt = cuda::make_device_optimizer(name, params, stream.get(), 1);
      StepHyper hyper;
      std::vector<double> sumsq;
      auto step = [&] {
        opt->queue_step(params, hyper, loss_sums.data());
        const cuda::StepControl ctl = opt->read_control(sumsq);
        FP4_CHECK(!ctl.skip, name, " skipped its step (non-finite gradient or state)");
        grad_norm = ctl.grad_norm;
        opt->commit_step();
      };
      for (int s = 0; s < warmup; ++s) step();
      const auto t0 = std::chrono::steady_clock::now();
      for (int s = 0; s < steps; ++s) step();
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ms = 1e3 * dt / steps;
      gib = free0 - free_gib();
    }
    if (name == names.front()) base_ms = ms, base_gib = gib;
    std::cout << "optimizer_bench: " << cfg.name << " layout " << layout_name << " (" << params.size()
              << " tensors, " << matrices << " matrices, " << params.numel() << " elements) optimizer "
              << name << " on " << prop.name << ": " << ms << " ms/step, state and workspaces " << gib
              << " GiB, gradient norm " << grad_norm << ", step time vs " << names.front() << " "
              << ms / base_ms << "x, memory vs " << names.front() << " "
              << (base_gib > 0 ? gib / base_gib : 0.0) << "x\n";
  }
  return 0;
}

}  // namespace
}  // namespace fp4

int main(int argc, char** argv) {
  try {
    return fp4::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "optimizer_bench: " << e.what() << "\n";
    return 1;
  }
}
