// Q-AdamW on the GPU (optim/cuda/device_q_adamw.h) against the CPU QAdamW (optim/q_adamw.h): the same
// parameters and gradients give the same parameters and the same state bytes, step after step; a
// non-finite gradient skips the update and an overflowing moment is refused as the CPU refuses it; the
// CUDA engine trains with tetrajet-v2-qadamw and its checkpoint loads into the CPU engine's QAdamW and back.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/cpu_engine.h"
#include "model/cuda/cuda_engine.h"
#include "model/state_index.h"
#include "nn/cuda/device_params.h"
#include "optim/cuda/device_q_adamw.h"
#include "optim/q_adamw.h"
#include "optimizer_test_util.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

using testing::error_of;
using testing::expect_same_floats;
using testing::expect_same_state;
using testing::fresh_seed;
using testing::random_batch;
using testing::small64_config;

// Sizes off the tiles (910, 3, 1000), a whole number of tiles (256, 4096), tensors without weight decay.
ParameterSet make_params(std::mt19937& rng) {
  ParameterSet ps;
  ps.add("a", {7, 130}, true, ParamInit::kNormal);
  ps.add("norm", {256}, false, ParamInit::kOnes);
  ps.add("tiny", {3}, true, ParamInit::kNormal);
  ps.add("e", {64, 64}, true, ParamInit::kNormal);
  ps.add("zero_grad", {1000}, false, ParamInit::kNormal);
  ps.allocate();
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (auto& x : ps.values()) x = n(rng);
  return ps;
}

// Fresh gradients: Gaussian at a different scale per tensor, a tensor of zeros, scattered zeros, a huge
// (1e15: g^2 still finite), a tiny (1e-30: g^2 underflows to 0) and a subnormal value.
void fill_grads(ParameterSet& ps, std::mt19937& rng) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 99);
  for (int i = 0; i < ps.size(); ++i) {
    auto g = ps.grad(i);
    const float s = std::pow(10.0f, static_cast<float>(i) - 2.0f);
    for (auto& x : g) x = ps.at(i).info.name == "zero_grad" || pick(rng) < 5 ? 0.0f : s * n(rng);
  }
  auto a = ps.grad(ps.require("a"));
  a[5] = 1e15f;
  a[6] = -1e-30f;
  a[700] = 1e-40f;
  a[909] = -3e12f;
}

StepHyper hyper() {
  StepHyper h;
  h.lr = 0.01f;
  h.weight_decay = 0.1f;
  h.grad_clip = 0.0f;  // the CPU engine, not QAdamW, clips: compare the optimizers on the raw gradients
  return h;
}

std::vector<float> device_values(const cuda::DeviceParams& dp) {
  std::vector<float> out;
  for (int i = 0; i < dp.size(); ++i) {
    std::vector<float> v(static_cast<size_t>(dp.at(i).info.numel()));
    dp.read_value(i, v);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(CudaQAdamW, FiveStepsAreBitIdenticalToTheCpuQAdamW) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  ParameterSet ps = make_params(rng);
  cuda::DeviceParams dp(ps, nullptr);
  QAdamW cpu(ps, OptimizerPlacement{}, seed);
  cuda::DeviceQAdamW gpu(dp, nullptr, seed);
  expect_same_state(cpu.save_state(ps), gpu.save_state(dp), "the zero state");
  const StepHyper h = hyper();
  for (int step = 1; step <= 5; ++step) {
    const std::string where = "step " + std::to_string(step);
    fill_grads(ps, rng);
    cuda::copy_to_device(dp.grads(), ps.grads().data(), ps.grads().size() * sizeof(float), nullptr);
    cpu.step(ps, h);
    gpu.queue_step(dp, h, nullptr);
    std::vector<double> sumsq;
    const cuda::StepControl ctl = gpu.read_control(sumsq);
    ASSERT_EQ(ctl.skip, 0) << where;
    gpu.commit_step();
    ASSERT_EQ(gpu.step_count(), cpu.step_count());
    const std::vector<float> want(ps.values().begin(), ps.values().end());
    expect_same_floats(want, device_values(dp), where + " parameters");
    expect_same_state(cpu.save_state(ps), gpu.save_state(dp), where);
    // The BF16 copy the GEMMs read follows the master weights.
    const int e = ps.require("e");
    std::vector<__nv_bfloat16> b16(static_cast<size_t>(ps.at(e).info.numel()));
    cuda::copy_to_host(b16.data(), dp.value_bf16(e), b16.size() * sizeof(__nv_bfloat16), nullptr);
    const auto ve = ps.value(e);
    for (size_t i = 0; i < b16.size(); ++i)
      if (__bfloat162float(b16[i]) != __bfloat162float(__float2bfloat16_rn(ve[i]))) {
        ADD_FAILURE() << where << ": BF16 copy of e[" << i << "] is stale";
        break;
      }
  }
  double norm = 0;  // the moments moved away from zero
  for (float x : cpu.decoded_first_moment()) norm += static_cast<double>(x) * x;
  EXPECT_GT(norm, 0.0);

  // The CPU state loads into a device optimizer built from another seed, which then takes the CPU's
  // sixth step bit for bit (the seed and the step come with the state).
  const std::vector<StateTensor> state = cpu.save_state(ps);
  cuda::DeviceParams dp2(ps, nullptr);
  cuda::DeviceQAdamW other(dp2, nullptr, seed + 9);
  other.load_state(StateIndex(state), dp2);
  expect_same_state(state, other.save_state(dp2), "CPU state loaded on the device");
  fill_grads(ps, rng);
  cuda::copy_to_device(dp2.grads(), ps.grads().data(), ps.grads().size() * sizeof(float), nullptr);
  cpu.step(ps, h);
  other.queue_step(dp2, h, nullptr);
  std::vector<double> sumsq;
  other.read_control(sumsq);
  other.commit_step();
  const std::vector<float> want(ps.values().begin(), ps.values().end());
  expect_same_floats(want, device_values(dp2), "step 6 after the load");
  expect_same_state(cpu.save_state(ps), other.save_state(dp2), "step 6 after the load");
}

TEST(CudaQAdamW, NonFiniteGradientSkipsAndOverflowIsRefusedLikeTheCpu) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  ParameterSet ps = make_params(rng);
  cuda::DeviceParams dp(ps, nullptr);
  QAdamW cpu(ps, OptimizerPlacement{}, seed);
  cuda::DeviceQAdamW gpu(dp, nullptr, seed);
  const StepHyper h = hyper();
  fill_grads(ps, rng);
  cuda::copy_to_device(dp.grads(), ps.grads().data(), ps.grads().size() * sizeof(float), nullptr);
  cpu.step(ps, h);
  gpu.queue_step(dp, h, nullptr);
  std::vector<double> sumsq;
  gpu.read_control(sumsq);
  gpu.commit_step();
  const std::vector<StateTensor> before = gpu.save_state(dp);
  const std::vector<float> values = device_values(dp);

  // A NaN gradient: the device skips the update (the engine throws naming it).
  fill_grads(ps, rng);
  std::vector<float> g(ps.grads().begin(), ps.grads().end());
  g[static_cast<size_t>(ps.at(ps.require("e")).offset) + 17] = std::nanf("");
  cuda::copy_to_device(dp.grads(), g.data(), g.size() * sizeof(float), nullptr);
  gpu.queue_step(dp, h, nullptr);
  EXPECT_EQ(gpu.read_control(sumsq).skip, 1);
  expect_same_floats(values, device_values(dp), "after a NaN gradient");
  expect_same_state(before, gpu.save_state(dp), "after a NaN gradient");

  // A finite gradient whose square overflows: the CPU QAdamW refuses the second moment, the device too,
  // naming the parameter, and nothing changes.
  g.assign(g.size(), 0.5f);
  const int a = ps.require("a");
  g[static_cast<size_t>(ps.at(a).offset) + 3] = 2e20f;
  std::copy(g.begin(), g.end(), ps.grads().begin());
  EXPECT_NE(error_of([&] { cpu.step(ps, h); }).find("second moment"), std::string::npos);
  cuda::copy_to_device(dp.grads(), g.data(), g.size() * sizeof(float), nullptr);
  gpu.queue_step(dp, h, nullptr);
  const std::string msg = error_of([&] { gpu.read_control(sumsq); });
  EXPECT_NE(msg.find("second moment of parameter a "), std::string::npos) << msg;
  expect_same_floats(values, device_values(dp), "after an overflow");
  expect_same_state(before, gpu.save_state(dp), "after an overflow");
  EXPECT_EQ(gpu.step_count(), 1);
}

TEST(CudaQAdamWEngine, TrainsAndItsStateMovesToTheCpuQAdamWAndBack) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = small64_config();
  const Recipe recipe = load_recipe("tetrajet-v2-qadamw");
  ASSERT_EQ(recipe.optimizer, "q-adamw");
  auto gpu = make_cuda_engine(cfg, recipe, seed);
  const std::vector<Batch> pool = {random_batch(rng, cfg, 2, 64), random_batch(rng, cfg, 2, 64)};
  StepHyper h;
  h.lr = 3e-3f;
  std::vector<double> losses;
  for (int step = 0; step < 20; ++step) {
    const StepStats s = gpu->train_step({&pool[static_cast<size_t>(step) % 2], 1}, h);
    std::cout << "[tetrajet-v2-qadamw, cuda] step " << step << " loss " << s.loss << " grad norm "
              << s.grad_norm << "\n";
    ASSERT_TRUE(std::isfinite(s.loss)) << "step " << step;
    losses.push_back(s.loss);
  }
  EXPECT_LT(losses.back(), losses.front() - 0.5);

  // The state has the CPU engine's tensors (names, dtypes, shapes, in order) ...
  const std::vector<StateTensor> saved = gpu->save_state();
  auto cpu = make_cpu_engine(cfg, recipe, seed + 1);
  const std::vector<StateTensor> fresh = cpu->save_state();
  ASSERT_EQ(saved.size(), fresh.size());
  for (size_t t = 0; t < saved.size(); ++t) {
    ASSERT_EQ(saved[t].name, fresh[t].name);
    EXPECT_EQ(saved[t].dtype, fresh[t].dtype) << saved[t].name;
    EXPECT_EQ(saved[t].shape, fresh[t].shape) << saved[t].name;
  }
  // ... loads into the CPU QAdamW (step and seed included) and back into a fresh CUDA engine of the same
  // seed (the recipe's backward SR draws from it). (Data parallelism is not refused by name any more: q-adamw
  // shards on 128-element tiles, q_adamw_shards_cuda_test.cu; without a communicator it is refused.)
  testing::expect_state_moves_to_the_cpu_and_back(*gpu, *cpu, make_cuda_engine(cfg, recipe, seed), saved,
                                                  pool[0], h, "device communicator");
}

}  // namespace
}  // namespace fp4
