// OutControl in the CUDA engine: the tiny model trains through calibration and the split layers (loss
// falls), freezes at the configured step with the CPU engine's counts, checkpoints the CPU engine's
// tensors, and CPU and CUDA engines freeze the same channels from the same seed and data.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "core/error.h"
#include "cuda_test_util.h"
#include "dist/nccl_communicator.h"
#include "model/cpu_engine.h"
#include "model/cuda/cuda_engine.h"
#include "nn/out_control.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

Batch learnable_batch(const ModelConfig& cfg, int b, int t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_real - 1);
  Batch batch{b, t, {}, {}};
  for (int i = 0; i < b * t; ++i) {
    batch.tokens.push_back(tok(rng));
    batch.targets.push_back(tok(rng));
  }
  for (int r = 0; r < b; ++r)  // the next token as target: something for the loss to learn
    for (int i = 0; i + 1 < t; ++i) batch.targets[size_t(r * t + i)] = batch.tokens[size_t(r * t + i + 1)];
  return batch;
}

Recipe out_control_recipe(int start, int steps) {
  return load_recipe("tetrajet-v2-base", {"out_control.enabled=true", "out_control.round_to=16",
                                          "out_control.calib_start=" + std::to_string(start),
                                          "out_control.calib_steps=" + std::to_string(steps)});
}

OutControl& out_control_of(TrainingEngine& e) {
  auto* src = dynamic_cast<OutControlSource*>(&e);
  if (src == nullptr || src->out_control() == nullptr)
    FP4_THROW("engine ", e.device_name(), " runs no OutControl");
  return *src->out_control();
}

// The map points into `state`, which must outlive it (a temporary is refused at compile time).
std::map<std::string, const StateTensor*> out_control_tensors(std::vector<StateTensor>&&) = delete;
std::map<std::string, const StateTensor*> out_control_tensors(const std::vector<StateTensor>& state) {
  std::map<std::string, const StateTensor*> out;
  for (const StateTensor& t : state)
    if (t.name.rfind(OutControl::kStatePrefix, 0) == 0) out[t.name] = &t;
  return out;
}

TEST(OutControlCudaEngine, TinyModelTrainsThroughCalibrationAndTheSplitLayers) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig cfg = model_preset("tiny");
  auto engine = make_cuda_engine(cfg, out_control_recipe(3, 4), seed);
  OutControl& oc = out_control_of(*engine);
  ASSERT_EQ(oc.layers().size(), size_t(4 * cfg.n_layers));
  const std::vector<Batch> mb = {learnable_batch(cfg, 4, 64, seed)};
  StepHyper hyper;
  hyper.lr = 3e-3f;
  double first = 0, last = 0;
  std::vector<StateTensor> during, after;
  for (int step = 1; step <= 30; ++step) {
    const StepStats s = engine->train_step(mb, hyper);
    ASSERT_TRUE(std::isfinite(s.loss)) << "step " << step;
    if (step == 1) first = s.loss;
    last = s.loss;
    if (step == 4) engine->evaluate(learnable_batch(cfg, 4, 64, seed + 1));  // must not count
    if (step == 5) during = engine->save_state();
    if (step == 8) after = engine->save_state();
    const auto report = oc.take_report();
    ASSERT_EQ(report.has_value(), step == 6) << "step " << step;
    for (const OutChannels* l : oc.layers())
      ASSERT_EQ(l->frozen(), step >= 6) << l->name() << " step " << step;
    if (report) {
      for (const auto& l : report->layers) {
        EXPECT_EQ(l.channels, l.in_features == 128 ? 16 : 48) << l.name;  // 12.8 -> 16, 38.4 -> 48
        EXPECT_GT(l.share, 0.0);
        EXPECT_LT(l.share, 1.0);
      }
    }
  }
  std::cout << "CUDA tetrajet-v2-base + out_control: loss " << first << " -> " << last << "\n";
  EXPECT_LT(last, first - 1.0);

  // The CPU engine's checkpoint tensors: sums during the window, the sets after it.
  const auto mid = out_control_tensors(during), end = out_control_tensors(after);
  for (const OutChannels* l : oc.layers()) {
    const std::string base = std::string(OutControl::kStatePrefix) + l->name();
    ASSERT_TRUE(mid.count(base + ".sums")) << base;
    EXPECT_EQ(mid.at(base + ".sums")->shape, (std::vector<int64_t>{2, l->in_features()}));
    ASSERT_TRUE(end.count(base + ".c8") && end.count(base + ".share")) << base;
  }
  // They load into a CPU engine and into a fresh CUDA engine, which hold the same sets.
  auto cpu = make_cpu_engine(cfg, out_control_recipe(3, 4), seed);
  auto again = make_cuda_engine(cfg, out_control_recipe(3, 4), seed);
  cpu->load_state(after);
  again->load_state(after);
  for (size_t k = 0; k < oc.layers().size(); ++k) {
    const OutChannels* l = oc.layers()[k];
    EXPECT_EQ(out_control_of(*cpu).layers()[k]->c8(), l->c8()) << l->name();
    EXPECT_EQ(out_control_of(*again).layers()[k]->c8(), l->c8()) << l->name();
    EXPECT_EQ(out_control_of(*again).layers()[k]->share(), l->share()) << l->name();
  }
  const StepStats s = again->train_step(mb, hyper);
  EXPECT_TRUE(std::isfinite(s.loss));
  // A state from inside the window resumes the sums.
  again->load_state(during);
  for (const OutChannels* l : out_control_of(*again).layers()) {
    EXPECT_FALSE(l->frozen()) << l->name();
    EXPECT_EQ(l->totals().size(), size_t(2 * l->in_features())) << l->name();
  }
}

// Scales the given columns of parameter `name` ([rows x cols]) or its rows [row0 + c] by factors.
void scale_columns(std::vector<float>& v, int64_t rows, int64_t cols, const std::vector<int32_t>& idx) {
  for (int64_t r = 0; r < rows; ++r)
    for (size_t k = 0; k < idx.size(); ++k) v[size_t(r * cols + idx[k])] *= 10.0f + float(k % 5);
}
void scale_rows(std::vector<float>& v, int64_t cols, int64_t row0, const std::vector<int32_t>& idx) {
  for (size_t k = 0; k < idx.size(); ++k)
    for (int64_t c = 0; c < cols; ++c) v[size_t((row0 + idx[k]) * cols + c)] *= 10.0f + float(k % 5);
}

// Elements two sorted sets share.
size_t common_count(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return both.size();
}

std::vector<int32_t> random_set(int in, int count, std::mt19937& rng) {
  std::vector<int32_t> all(static_cast<size_t>(in));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(static_cast<size_t>(count));
  std::sort(all.begin(), all.end());
  return all;
}

TEST(OutControlCudaEngine, CpuAndCudaEnginesFreezeTheSameChannels) {
  const uint32_t seed = cudatest::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (replay with FP4_TEST_SEED)");
  std::mt19937 rng(seed);
  const ModelConfig cfg = model_preset("tiny");
  const int64_t d = cfg.d_model, ff = cfg.d_ff;
  const Recipe recipe = out_control_recipe(1, 2);  // freeze after step 2
  auto cpu = make_cpu_engine(cfg, recipe, seed);
  auto gpu = make_cuda_engine(cfg, recipe, seed);

  // Planted outlier channels, so the right answer is known: P (16 of d) in the residual stream (the
  // embedding's columns and every norm's gains) and in the attention output (V's rows), Q (48 of d_ff)
  // in the SwiGLU output (the up projection's rows). Both engines get the same parameters.
  const std::vector<int32_t> P = random_set(int(d), 16, rng), Q = random_set(int(ff), 48, rng);
  auto plant = [&](const std::string& name, auto&& change) {
    std::vector<float> v;
    for (const ParameterInfo& info : cpu->parameters())
      if (info.name == name) v.resize(size_t(info.numel()));
    ASSERT_FALSE(v.empty()) << name;
    cpu->read_parameter(name, v);
    change(v);
    cpu->write_parameter(name, v);
    gpu->write_parameter(name, v);
  };
  plant("embed", [&](std::vector<float>& v) { scale_columns(v, cfg.vocab_size, d, P); });
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string pre = "blocks." + std::to_string(l) + ".";
    plant(pre + "attn_norm", [&](std::vector<float>& v) { scale_columns(v, 1, d, P); });
    plant(pre + "mlp_norm", [&](std::vector<float>& v) { scale_columns(v, 1, d, P); });
    plant(pre + "attn.wqkv", [&](std::vector<float>& v) { scale_rows(v, d, 2 * d, P); });   // V rows
    plant(pre + "mlp.w_gate_up", [&](std::vector<float>& v) { scale_rows(v, d, ff, Q); });  // up rows
  }

  const std::vector<Batch> mb = {learnable_batch(cfg, 2, 64, seed), learnable_batch(cfg, 2, 64, seed + 7)};
  StepHyper hyper;
  hyper.lr = 1e-3f;
  for (int step = 1; step <= 3; ++step) {
    const StepStats sc = cpu->train_step(mb, hyper), sg = gpu->train_step(mb, hyper);
    ASSERT_TRUE(std::isfinite(sc.loss) && std::isfinite(sg.loss)) << "step " << step;
    EXPECT_NEAR(sg.loss, sc.loss, 0.05 * std::abs(sc.loss)) << "step " << step;
    // The window's first step: the engines' sums agree up to BF16 (CUDA) vs FP32 (CPU) activations, which
    // also flip some NVFP4 codes of the layers before: 2.3-6.6% relative on an H200 (w_down, wo; session 7).
    // w_down's input, the planted up rows times silu(gate), is heavy-tailed: a few tokens carry its sums,
    // so their code flips weigh more; seed 767105419 gives 0.208 in blocks.1 (H100, deterministic, every
    // other tensor and both frozen sets agreeing). A lost micro-batch (50%), a missing square root or a
    // wrong channel would be far outside 0.15, and outside w_down's 0.3.
    if (step == 1) {
      const std::vector<StateTensor> cpu_state = cpu->save_state(), gpu_state = gpu->save_state();
      const auto ct = out_control_tensors(cpu_state), gt = out_control_tensors(gpu_state);
      ASSERT_EQ(ct.size(), size_t(4 * cfg.n_layers));
      ASSERT_EQ(gt.size(), ct.size());
      for (const auto& [name, t] : ct) {
        ASSERT_TRUE(gt.count(name)) << name;
        const auto* a = reinterpret_cast<const double*>(t->bytes.data());
        const auto* b = reinterpret_cast<const double*>(gt.at(name)->bytes.data());
        ASSERT_EQ(gt.at(name)->bytes.size(), t->bytes.size()) << name;
        double num = 0, den = 0;
        for (size_t i = 0; i < t->bytes.size() / 8; ++i) {
          num += (a[i] - b[i]) * (a[i] - b[i]);
          den += a[i] * a[i];
        }
        const bool down = name.find("w_down") != std::string::npos;
        EXPECT_LT(std::sqrt(num / den), down ? 0.3 : 0.15) << name;
      }
    }
  }
  OutControl &co = out_control_of(*cpu), &go = out_control_of(*gpu);
  ASSERT_EQ(co.layers().size(), go.layers().size());
  for (size_t k = 0; k < co.layers().size(); ++k) {
    const OutChannels &c = *co.layers()[k], &g = *go.layers()[k];
    ASSERT_EQ(c.name(), g.name());
    ASSERT_TRUE(c.frozen() && g.frozen()) << c.name();
    const bool down = c.name().find("w_down") != std::string::npos;
    if (!down) {
      EXPECT_EQ(g.c8(), c.c8()) << c.name();
      EXPECT_EQ(g.c8(), P) << c.name();
    } else {
      // w_down's planted channels (Q) grow through the up projection only, so silu(gate) decides how far
      // each stands out and a few non-planted channels come close to the set's edge, where BF16 (CUDA) and
      // FP32 (CPU) activations may order them differently (seen: 1-2 of 48). Both sets must hold nearly
      // all of Q and nearly coincide; a wrong channel index or norm would scatter them.
      EXPECT_EQ(g.c8().size(), Q.size()) << c.name();
      EXPECT_GE(common_count(g.c8(), c.c8()), Q.size() - 4) << c.name();
      EXPECT_GE(common_count(g.c8(), Q), Q.size() - 6) << c.name();
      EXPECT_GE(common_count(c.c8(), Q), Q.size() - 6) << c.name();
    }
    EXPECT_NEAR(g.share(), c.share(), 2e-2) << c.name();
  }
}

// The data-parallel path (the step sums through the communicator's host all-reduce) with one NCCL rank
// (a second rank on one GPU is refused by NCCL; multi-GPU runs: scripts/dist_gpu_check.sh): the sums and
// the frozen sets are the plain engine's, bit for bit.
TEST(OutControlCudaEngine, OneRankDataParallelFreezesAsThePlainEngine) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = out_control_recipe(2, 2);  // freeze after step 3
  auto plain = make_cuda_engine(cfg, recipe, seed, 0);
  auto dp = make_cuda_engine(cfg, recipe, seed, 0);
  DistEnv env;
  env.launched = true;  // world 1: no sockets, NCCL with one rank
  NcclCommunicator comm(env, std::chrono::seconds(60), std::chrono::seconds(60),
                        [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
  int64_t numel = 0;
  for (const ParameterInfo& p : dp->parameters()) numel += p.numel();
  dp->set_data_parallel({&comm, {{0, numel}}});
  StepHyper hyper;
  hyper.lr = 3e-3f;
  for (int step = 1; step <= 4; ++step) {
    const std::vector<Batch> mb = {learnable_batch(cfg, 2, 64, seed + step),
                                   learnable_batch(cfg, 2, 64, seed + 99 * step)};
    const StepStats a = plain->train_step(mb, hyper), b = dp->train_step(mb, hyper);
    EXPECT_EQ(a.loss, b.loss) << "step " << step;
    const std::vector<StateTensor> plain_state = plain->save_state(), dp_state = dp->save_state();
    const auto ta = out_control_tensors(plain_state), tb = out_control_tensors(dp_state);
    ASSERT_EQ(ta.size(), tb.size()) << "step " << step;
    for (const auto& [name, t] : ta) {
      ASSERT_TRUE(tb.count(name)) << name;
      EXPECT_TRUE(t->bytes == tb.at(name)->bytes) << name << " step " << step;
    }
    EXPECT_EQ(ta.empty(), step == 1) << "measured from step 2 only";
  }
  OutControl &a = out_control_of(*plain), &b = out_control_of(*dp);
  for (size_t k = 0; k < a.layers().size(); ++k) {
    ASSERT_TRUE(b.layers()[k]->frozen());
    EXPECT_EQ(a.layers()[k]->c8(), b.layers()[k]->c8()) << a.layers()[k]->name();
  }
}

}  // namespace
}  // namespace fp4
