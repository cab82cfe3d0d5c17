// CUDA engine tests (run on a GPU): the whole engine against the CPU reference engine: gradients at the
// same initial weights, a 20-step training curve, checkpoints moving between engines, errors. The layer
// kernels against their CPU ops are in ops_parity_test.cu.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda_test_util.h"
#include "model/cpu_engine.h"
#include "model/cuda/cuda_engine.h"
#include "model/engine_weight_access.h"
#include "model/olmo2.h"
#include "numerics/quantize.h"
#include "ops/cuda/attention/causal_sdpa_cuda.h"
#include "ops/cuda/cross_entropy_cuda.h"
#include "ops/cuda/embedding_cuda.h"
#include "ops/cuda/gemm_cublaslt.h"
#include "ops/cuda/rmsnorm_cuda.h"
#include "ops/cuda/rope_cuda.h"
#include "ops/cuda/swiglu_cuda.h"
#include "ops/ops.h"
#include "optim/cuda/adamw_cuda.h"
#include "optim/grad_clip.h"
#include "optim/osci_reset.h"
#include "optimizer_test_util.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

using namespace cudatest;  // NOLINT: the test helpers
using cuda::bf16;

// ---------------------------------------------------------------- the engine against the CPU engine

ModelConfig engine_config(const std::string& name) {
  if (name == "tiny") return model_preset("tiny");  // head_dim 32: the fallback attention
  return testing::small64_config();                 // head_dim 64: the fused attention kernels
}

Batch random_batch(std::mt19937& rng, const ModelConfig& cfg, int b, int t, double ignored = 0.1) {
  std::uniform_int_distribution<int> tok(0, cfg.vocab_real - 1);
  std::bernoulli_distribution skip(ignored);
  Batch batch{b, t, std::vector<int32_t>(static_cast<size_t>(b) * t),
              std::vector<int32_t>(static_cast<size_t>(b) * t)};
  for (auto& x : batch.tokens) x = tok(rng);
  for (auto& x : batch.targets) x = skip(rng) ? -1 : tok(rng);
  return batch;
}

std::vector<float> read_param(const TrainingEngine& e, const ParameterInfo& p) {
  std::vector<float> v(static_cast<size_t>(p.numel()));
  e.read_parameter(p.name, v);
  return v;
}

// A model config and a recipe, with the tolerances of that recipe against the CPU engine. Quantized
// recipes use the same random bits on both engines, but BF16 activations move some values across an FP4
// rounding boundary, so their bounds are wider.
struct EngineCase {
  const char* config;
  const char* recipe;
  double loss_tol, grad_tol, curve_tol;
};

std::string case_name(const ::testing::TestParamInfo<EngineCase>& info) {
  std::string s = std::string(info.param.config) + "_" + info.param.recipe;
  for (auto& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

struct CpuGradients {
  double loss = 0, ce = 0, norm = 0;
  int64_t tokens = 0;
  std::vector<std::vector<float>> grads;  // per parameter, in order
};

// The CPU model's gradients for the micro-batches of step 1, as CpuEngine::train_step computes them
// (same loss scaling, same quantization context).
// With weight_noise > 0 every weight is first scaled by (1 + weight_noise * u), u uniform in [-1, 1]: how
// much the reference itself moves under a perturbation the size of BF16 rounding.
CpuGradients cpu_gradients(const ModelConfig& cfg, const Recipe& recipe, uint64_t seed,
                           const std::vector<Batch>& batches, double weight_noise = 0.0) {
  Olmo2Model ref(cfg, recipe);
  ref.init_parameters(seed);
  ref.quant_context().seed = seed;
  if (weight_noise > 0) {
    std::mt19937 rng(static_cast<uint32_t>(seed) ^ 0x5eedu);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& w : ref.params().values()) w *= 1.0f + static_cast<float>(weight_noise) * u(rng);
  }
  CpuGradients out;
  for (const auto& b : batches)
    for (int32_t t : b.targets) out.tokens += t >= 0;
  ref.params().zero_grads();
  for (size_t i = 0; i < batches.size(); ++i) {
    const Batch& b = batches[i];
    ref.quant_context().call = (uint64_t{1} << 8) | i;
    ref.forward(b.tokens.data(), b.batch, b.seq);
    const auto s =
        ref.loss(b.targets.data(), true, static_cast<float>(1.0 / static_cast<double>(out.tokens)));
    out.loss += s.loss;
    out.ce += s.ce;
    ref.backward();
  }
  out.loss /= static_cast<double>(out.tokens);
  out.ce /= static_cast<double>(out.tokens);
  out.norm = global_grad_norm(ref.params());
  for (int i = 0; i < ref.params().size(); ++i) {
    const auto g = ref.params().grad(i);
    out.grads.emplace_back(g.begin(), g.end());
  }
  return out;
}

class CudaEngineVsCpu : public ::testing::TestWithParam<EngineCase> {};

TEST_P(CudaEngineVsCpu, SameInitialWeightsAndGradientsAtTheSameWeights) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const EngineCase ec = GetParam();
  const ModelConfig cfg = engine_config(ec.config);
  const Recipe recipe = load_recipe(ec.recipe);
  auto gpu = make_cuda_engine(cfg, recipe, seed);
  auto cpu = make_cpu_engine(cfg, recipe, seed);
  EXPECT_NE(gpu->device_name().find("cuda:0"), std::string::npos);
  const auto params = cpu->parameters();
  const auto gparams = gpu->parameters();
  ASSERT_EQ(params.size(), gparams.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(gparams[i].name, params[i].name);
    EXPECT_EQ(gparams[i].shape, params[i].shape);
    EXPECT_EQ(gparams[i].weight_decay, params[i].weight_decay);
    EXPECT_EQ(read_param(*gpu, gparams[i]), read_param(*cpu, params[i])) << params[i].name;
  }
  // Two micro-batches of different shapes (accumulation, arena growth), some ignored targets. NVFP4's
  // weight-gradient GEMM reduces over the tokens: a multiple of 128 for the block128 scales.
  const bool quantized = recipe.linear.quantized();
  const std::vector<Batch> batches = {random_batch(rng, cfg, 1, quantized ? 128 : 48),
                                      random_batch(rng, cfg, 2, quantized ? 128 : 64)};
  auto* probe = dynamic_cast<GradientProbe*>(gpu.get());
  ASSERT_NE(probe, nullptr);
  const StepStats gs = probe->compute_gradients(batches);
  const CpuGradients ref = cpu_gradients(cfg, recipe, seed, batches);
  // An NVFP4 network is chaotic under BF16-sized changes (RTN codes flip at grid boundaries): on the CPU
  // alone, weights perturbed by 2^-9 move the gradients by 0.3-0.6 relative (measured 2026-11-29; BF16:
  // 0.01). The CUDA engine (BF16 activations) is held to 1.5x that self-sensitivity, plus the BF16 tolerance.
  double grad_tol = ec.grad_tol;
  std::vector<double> self_sens;
  if (quantized) {
    const CpuGradients moved = cpu_gradients(cfg, recipe, seed, batches, std::ldexp(1.0, -9));
    for (size_t i = 0; i < params.size(); ++i) self_sens.push_back(rel_err(moved.grads[i], ref.grads[i]));
  }
  const std::string tag = "[" + cfg.name + ", " + recipe.name + "] ";
  std::cout << tag << "loss cuda " << gs.loss << " cpu " << ref.loss << ", grad norm cuda " << gs.grad_norm
            << " cpu " << ref.norm << "\n";
  EXPECT_EQ(gs.tokens, ref.tokens);
  EXPECT_NEAR(gs.loss, ref.loss, ec.loss_tol * ref.loss);
  EXPECT_NEAR(gs.ce_loss, ref.ce, ec.loss_tol * ref.ce);
  EXPECT_NEAR(gs.grad_norm, ref.norm, ec.grad_tol * ref.norm);
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> g(static_cast<size_t>(params[i].numel()));
    probe->read_gradient(params[i].name, g);
    const double e = rel_err(g, ref.grads[i]);
    const double tol = quantized ? 1.5 * self_sens[i] + grad_tol : grad_tol;
    EXPECT_LT(e, tol) << "gradient of " << params[i].name
                      << (quantized ? " (CPU self-sensitivity " + std::to_string(self_sens[i]) + ")" : "");
    if (e > worst) {
      worst = e;
      worst_name = params[i].name;
    }
  }
  std::cout << tag << "worst gradient relative error " << worst << " (" << worst_name << ")\n";
}

TEST_P(CudaEngineVsCpu, TwentyStepsLowerTheLossAndTrackTheCpuCurve) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const EngineCase ec = GetParam();
  const ModelConfig cfg = engine_config(ec.config);
  const Recipe recipe = load_recipe(ec.recipe);
  auto gpu = make_cuda_engine(cfg, recipe, seed);
  auto cpu = make_cpu_engine(cfg, recipe, seed);
  // A small pool of batches seen again and again: the loss must fall well below its initial value.
  std::vector<std::vector<Batch>> pool;
  for (int i = 0; i < 2; ++i) pool.push_back({random_batch(rng, cfg, 2, 64), random_batch(rng, cfg, 2, 64)});
  StepHyper h;
  h.lr = 3e-3f;
  std::vector<double> lg, lc;
  const std::string tag = "[" + cfg.name + ", " + recipe.name + "] ";
  for (int step = 0; step < 20; ++step) {
    const auto& mb = pool[static_cast<size_t>(step) % pool.size()];
    const StepStats sg = gpu->train_step(mb, h), sc = cpu->train_step(mb, h);
    lg.push_back(sg.loss);
    lc.push_back(sc.loss);
    std::cout << tag << "step " << step << " loss cuda " << sg.loss << " cpu " << sc.loss
              << " grad norm cuda " << sg.grad_norm << " cpu " << sc.grad_norm << "\n";
    // BF16 and FP32 trajectories separate as a memorising run sharpens (seen on the H200: 6-8% apart by
    // step 18 at lr 3e-3), so only the first steps are held to the tight bound ...
    if (step < 5) EXPECT_NEAR(sg.loss, sc.loss, ec.curve_tol * sc.loss) << "step " << step;
  }
  // ... and the second half of the curve to a looser one, on its average (an FP4 recipe's SR flips wherever
  // the two engines' values differ by an ulp, so single late steps of a memorising run scatter: nvidia-nvfp4
  // on the H200, steps 15-19 averaged 0.46 vs 0.38, steps 10-19 1.07 vs 0.98).
  double half_g = 0, half_c = 0, tail_c = 0;
  for (int i = 10; i < 20; ++i)
    half_g += lg[static_cast<size_t>(i)] / 10, half_c += lc[static_cast<size_t>(i)] / 10;
  for (int i = 15; i < 20; ++i) tail_c += lc[static_cast<size_t>(i)] / 5;
  EXPECT_NEAR(half_g, half_c, 3 * ec.curve_tol * half_c);
  EXPECT_LT(lg.back(), lg.front() - 0.5);
  EXPECT_LT(lc.back(), lc.front() - 0.5);
  // The engine's evaluation agrees with the CPU engine's after the same training. Near zero a memorised
  // loss differs by a large factor between two trajectories (FP4 on the H200: 0.082 vs 0.111), so the
  // bound is in units of the loss level of the last five steps, or twice the widest gap the two training
  // curves themselves showed there, whichever is larger (bf16 on tiny, H200: steps 15-19 up to 0.15 apart,
  // evaluation 1.52 vs 1.73). A broken evaluation still fails: it owes nothing to the training curves.
  double tail_gap = 0;
  for (size_t i = 15; i < 20; ++i) tail_gap = std::max(tail_gap, std::abs(lg[i] - lc[i]));
  const Batch& eb = pool[0][0];
  const StepStats eg = gpu->evaluate(eb), ecpu = cpu->evaluate(eb);
  EXPECT_EQ(eg.tokens, ecpu.tokens);
  EXPECT_NEAR(eg.loss, ecpu.loss, std::max(3 * ec.curve_tol * tail_c, 2 * tail_gap));
}

// OsciReset on the CUDA engine: the trainer drives it through read_parameter / write_parameter. With
// threshold 0 every tracked element is reset when the window closes, so each tracked weight read back from
// the device must be Q(w) of the weights just before (the forward quantizer, scales recomputed), bit for bit;
// training then goes on with finite losses.
TEST(CudaEngine, OsciResetWritesGridPointsThroughTheEngine) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = engine_config("small64");
  const Recipe recipe = load_recipe("tetrajet-v2-base");
  auto gpu = make_cuda_engine(cfg, recipe, seed);
  OsciResetConfig oc;
  oc.enabled = true;
  oc.window = 2;
  oc.period = 4;
  oc.start = 2;
  oc.threshold = 1e-30;  // the smallest risk that counts: every element whose grid point moved is reset
  OsciReset osci(oc, 12, osci_targets(gpu->parameters(), recipe, cfg.n_layers));
  ASSERT_FALSE(osci.targets().empty());
  EngineWeightAccess weights(*gpu);
  StepHyper h;
  h.lr = 3e-3f;
  int windows = 0;
  int64_t total_reset = 0;
  for (int step = 1; step <= 8; ++step) {
    const Batch batch = random_batch(rng, cfg, 2, 64);  // 128 tokens: block128 scaling along the tokens
    ASSERT_TRUE(std::isfinite(gpu->train_step({&batch, 1}, h).loss)) << "step " << step;
    std::vector<std::vector<float>> before;
    for (const OsciTarget& t : osci.targets()) {
      before.emplace_back(static_cast<size_t>(t.rows * t.cols));
      gpu->read_parameter(t.name, before.back());
    }
    const std::optional<OsciResetReport> report = osci.after_step(step, weights);
    if (!report) continue;
    ++windows;
    for (size_t i = 0; i < osci.targets().size(); ++i) {
      const OsciTarget& t = osci.targets()[i];
      const Nvfp4Tensor q = quantize_nvfp4(before[i].data(), t.rows, t.cols, t.q2, QuantRandomness{});
      std::vector<float> want(before[i].size()), got(before[i].size());
      dequantize(q, want.data());
      gpu->read_parameter(t.name, got);
      // Each element is either its grid point Q(w) (reset) or untouched; where the two differ the engine's
      // value says which, and those counts bound the report's (an element already on its grid point can be
      // reset without a visible change).
      int64_t surely_reset = 0, reset_or_kept = 0, wrong = 0;
      for (size_t e = 0; e < got.size(); ++e) {
        const bool is_want = std::memcmp(&got[e], &want[e], sizeof(float)) == 0;
        const bool is_before = std::memcmp(&got[e], &before[i][e], sizeof(float)) == 0;
        surely_reset += is_want && !is_before;
        reset_or_kept += is_want && is_before;
        wrong += !is_want && !is_before;
      }
      EXPECT_EQ(wrong, 0) << t.name << " at step " << step << ": elements neither reset nor kept";
      EXPECT_GE(report->layers[i].reset, surely_reset) << t.name;
      EXPECT_LE(report->layers[i].reset, surely_reset + reset_or_kept) << t.name;
      total_reset += surely_reset;
    }
  }
  EXPECT_EQ(windows, 2);  // windows close after steps 4 and 8
  EXPECT_GT(total_reset, 0) << "no weight moved to its grid point: the reset never reached the engine";
}

// tiny: head size 32 (the fallback attention); small64: head size 64 (the fused attention kernels).
INSTANTIATE_TEST_SUITE_P(Recipes, CudaEngineVsCpu,
                         ::testing::Values(EngineCase{"tiny", "bf16", 1e-2, 3e-2, 3e-2},
                                           EngineCase{"small64", "bf16", 1e-2, 3e-2, 3e-2},
                                           EngineCase{"small64", "nvidia-nvfp4", 2e-2, 5e-2, 5e-2},
                                           EngineCase{"small64", "tetrajet-v2-base", 2e-2, 5e-2, 5e-2}),
                         case_name);

TEST(CudaEngine, EvaluateAndLastLogitsMatchCpu) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = engine_config("small64");
  auto gpu = make_cuda_engine(cfg, Recipe{}, seed);
  auto cpu = make_cpu_engine(cfg, Recipe{}, seed);
  const Batch batch = random_batch(rng, cfg, 3, 40, 0.3);
  const StepStats eg = gpu->evaluate(batch), ec = cpu->evaluate(batch);
  EXPECT_EQ(eg.tokens, ec.tokens);
  EXPECT_NEAR(eg.loss, ec.loss, 1e-2 * ec.loss);
  EXPECT_EQ(eg.loss, eg.ce_loss);
  std::vector<float> lg(static_cast<size_t>(3) * cfg.vocab_size), lc(lg.size());
  gpu->last_logits(batch, lg);
  cpu->last_logits(batch, lc);
  std::vector<float> real_g, real_c;
  for (int b = 0; b < 3; ++b)
    for (int j = 0; j < cfg.vocab_size; ++j) {
      const size_t i = static_cast<size_t>(b) * cfg.vocab_size + j;
      if (j >= cfg.vocab_real) {
        EXPECT_EQ(lg[i], -std::numeric_limits<float>::infinity());
      } else {
        real_g.push_back(lg[i]);
        real_c.push_back(lc[i]);
      }
    }
  EXPECT_LT(rel_err(real_g, real_c), 3e-2);
  std::vector<float> small(3);
  EXPECT_NE(error_of([&] { gpu->last_logits(batch, small); }).find("need"), std::string::npos);
}

TEST(CudaEngine, StateMovesBetweenCudaAndCpuEngines) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = engine_config("tiny");
  const Batch batch = random_batch(rng, cfg, 2, 32), next = random_batch(rng, cfg, 2, 32);
  StepHyper h;
  h.lr = 5e-3f;
  auto gpu = make_cuda_engine(cfg, Recipe{}, seed);
  for (int i = 0; i < 3; ++i) gpu->train_step({&batch, 1}, h);
  const auto state = gpu->save_state();

  auto cpu = make_cpu_engine(cfg, Recipe{}, seed + 1);
  cpu->load_state(state);
  const auto back = cpu->save_state();  // the CPU engine writes exactly what it read
  ASSERT_EQ(back.size(), state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    EXPECT_EQ(back[i].name, state[i].name);
    EXPECT_EQ(back[i].dtype, state[i].dtype);
    EXPECT_EQ(back[i].shape, state[i].shape);
    EXPECT_EQ(back[i].bytes, state[i].bytes) << state[i].name;
  }

  auto gpu2 = make_cuda_engine(cfg, Recipe{}, seed + 2);
  gpu2->load_state(back);
  for (const auto& p : gpu->parameters()) EXPECT_EQ(read_param(*gpu2, p), read_param(*gpu, p)) << p.name;
  const StepStats a = gpu->train_step({&next, 1}, h), b = gpu2->train_step({&next, 1}, h);
  const StepStats c = cpu->train_step({&next, 1}, h);
  EXPECT_EQ(a.loss, b.loss);  // same state, same kernels: the resumed engine repeats the step exactly
  EXPECT_EQ(a.grad_norm, b.grad_norm);
  for (const auto& p : gpu->parameters()) EXPECT_EQ(read_param(*gpu2, p), read_param(*gpu, p)) << p.name;
  EXPECT_NEAR(c.loss, a.loss, 2e-2 * a.loss);  // the CPU engine continues the same training
  const auto s2 = gpu2->save_state();
  int64_t step = 0;
  std::memcpy(&step, s2.back().bytes.data(), sizeof(step));
  EXPECT_EQ(s2.back().name, "adamw.step");
  EXPECT_EQ(step, 4);

  // A state missing a tensor or with a wrong shape is refused and changes nothing.
  auto broken = state;
  broken.erase(broken.begin() + 1);
  EXPECT_NE(error_of([&] { gpu2->load_state(broken); }).find("is missing"), std::string::npos);
  broken = state;
  broken[0].shape = {1, 2};
  EXPECT_NE(error_of([&] { gpu2->load_state(broken); }).find("has shape"), std::string::npos);
  for (const auto& p : gpu->parameters()) EXPECT_EQ(read_param(*gpu2, p), read_param(*gpu, p)) << p.name;
}

TEST(CudaEngine, NonFiniteLossThrowsNamingTheParameterAndChangesNothing) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = engine_config("tiny");
  auto gpu = make_cuda_engine(cfg, Recipe{}, seed);
  const Batch batch = random_batch(rng, cfg, 2, 16);
  StepHyper h;
  const auto params = gpu->parameters();
  std::vector<std::vector<float>> before;
  for (const auto& p : params) before.push_back(read_param(*gpu, p));
  auto head = before.back();
  ASSERT_EQ(params.back().name, "lm_head");
  head[5] = std::numeric_limits<float>::quiet_NaN();
  gpu->write_parameter("lm_head", head);
  const std::string msg = error_of([&] { gpu->train_step({&batch, 1}, h); });
  EXPECT_NE(msg.find("train step 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lm_head"), std::string::npos) << msg;
  for (size_t i = 0; i + 1 < params.size(); ++i)
    EXPECT_EQ(read_param(*gpu, params[i]), before[i]) << params[i].name;
  gpu->write_parameter("lm_head", before.back());
  const StepStats ok = gpu->train_step({&batch, 1}, h);
  EXPECT_TRUE(std::isfinite(ok.loss));
  const auto st = gpu->save_state();
  int64_t step = 0;
  std::memcpy(&step, st.back().bytes.data(), sizeof(step));
  EXPECT_EQ(step, 1);  // the failed step was not counted
}

TEST(CudaEngine, RefusesBadBatchesRecipesAndDevices) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = engine_config("tiny");
  auto gpu = make_cuda_engine(cfg, Recipe{}, seed);
  StepHyper h;
  Batch bad = random_batch(rng, cfg, 1, 8);
  bad.tokens[3] = cfg.vocab_size;
  EXPECT_NE(error_of([&] {
              gpu->train_step({&bad, 1}, h);
            }).find("outside the embedding table"),
            std::string::npos);
  bad = random_batch(rng, cfg, 1, 8);
  bad.targets[2] = cfg.vocab_real;
  EXPECT_NE(error_of([&] {
              gpu->train_step({&bad, 1}, h);
            }).find("outside the vocabulary"),
            std::string::npos);
  bad = random_batch(rng, cfg, 1, cfg.max_seq_len + 1);
  EXPECT_NE(error_of([&] { gpu->evaluate(bad); }).find("max_seq_len"), std::string::npos);
  bad = random_batch(rng, cfg, 1, 8, 1.0);
  EXPECT_NE(error_of([&] { gpu->train_step({&bad, 1}, h); }).find("no target tokens"), std::string::npos);
  h.lr = -1.0f;
  const Batch good = random_batch(rng, cfg, 1, 8);
  EXPECT_NE(error_of([&] { gpu->train_step({&good, 1}, h); }).find("learning rate"), std::string::npos);

  Recipe quant;
  quant.name = "nvfp4-test";
  quant.linear[Operand::kQ1X].format = QuantFormat::kNvfp4;
  // A mixed BF16/NVFP4 operand set is not something the CUDA NVFP4 layer runs: refused, naming the layer.
  const std::string msg = error_of([&] { make_cuda_engine(cfg, quant, seed); });
  EXPECT_NE(msg.find("blocks.0.attn.wqkv"), std::string::npos) << msg;
  Recipe unknown;  // the recipe loader refuses unknown names too; the engine checks a Recipe built in code
  unknown.optimizer = "sgd";
  EXPECT_NE(error_of([&] { make_cuda_engine(cfg, unknown, seed); }).find("not available in the CUDA engine"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_cuda_engine(cfg, Recipe{}, seed, 999); }).find("does not exist"),
            std::string::npos);
}

}  // namespace
}  // namespace fp4
