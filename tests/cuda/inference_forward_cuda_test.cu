// Evaluation and generation on the GPU at every sequence length: the NVFP4 layers' inference forward builds
// no backward operands (Q6 along tokens needed whole 16-row blocks: a 7-token prompt used to fail in
// quantize_dual_cuda). Each recipe trains two steps on the device, then evaluates and samples at 1 ... 40
// tokens; the CPU engine with the same state gives the same loss within BF16 error.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cuda_test_util.h"
#include "model/cpu_engine.h"
#include "model/cuda/cuda_engine.h"
#include "recipe/recipe_io.h"
#include "train/sample.h"

namespace fp4 {
namespace {

Batch random_tokens(const ModelConfig& cfg, int b, int t, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_real - 1);
  Batch batch{b, t, {}, {}};
  for (int i = 0; i < b * t; ++i) {
    batch.tokens.push_back(tok(rng));
    batch.targets.push_back(tok(rng));
  }
  return batch;
}

struct CudaCase {
  const char* name;
  const char* preset;
  std::vector<std::string> overrides;
};

void PrintTo(const CudaCase& c, std::ostream* os) {
  *os << c.name;
}

class CudaInferenceForward : public ::testing::TestWithParam<CudaCase> {};

TEST_P(CudaInferenceForward, EveryPromptLengthFrom1To40) {
  const uint32_t seed = cudatest::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (replay with FP4_TEST_SEED)");
  std::mt19937 rng(seed);
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = load_recipe(GetParam().preset, GetParam().overrides);
  auto gpu = make_cuda_engine(cfg, recipe, seed);
  StepHyper hyper;
  hyper.lr = 1e-3f;
  const std::vector<Batch> mb = {random_tokens(cfg, 2, 64, rng)};
  for (int step = 1; step <= 2; ++step) ASSERT_TRUE(std::isfinite(gpu->train_step(mb, hyper).loss));
  auto cpu = make_cpu_engine(cfg, recipe, seed);
  cpu->load_state(gpu->save_state());

  // Eight rows, so even a 1-token prompt's loss is a mean over 8 tokens: BF16 (CUDA) and FP32 (CPU)
  // activations flip a few NVFP4 codes, which moves single tokens' losses; with two rows a 2-token mean
  // differed by 0.121 nats, 2.3% (seed 1239760701, tetrajet_v2_qadamw, t = 1, H100, deterministic), past
  // the 2% bound. A wrong row, position or mask moves the mean by far more at every length.
  constexpr int kRows = 8;
  std::vector<float> logits(static_cast<size_t>(kRows * cfg.vocab_size));
  for (int t = 1; t <= 40; ++t) {
    SCOPED_TRACE("t = " + std::to_string(t));
    const Batch batch = random_tokens(cfg, kRows, t, rng);
    const StepStats g = gpu->evaluate(batch);
    ASSERT_TRUE(std::isfinite(g.loss));
    EXPECT_EQ(g.tokens, kRows * t);
    EXPECT_NEAR(g.loss, cpu->evaluate(batch).loss, 0.02 * g.loss);
    ASSERT_NO_THROW(gpu->last_logits(batch, logits));
    for (int r = 0; r < kRows; ++r)
      for (int v = 0; v < cfg.vocab_real; ++v)
        ASSERT_TRUE(std::isfinite(logits[static_cast<size_t>(r * cfg.vocab_size + v)])) << r << " " << v;
  }
  SampleOptions opt;
  opt.max_new_tokens = 39;
  opt.temperature = 0.0f;
  opt.context = 64;
  EXPECT_EQ(generate(*gpu, {static_cast<int32_t>(rng() % cfg.vocab_real)}, opt).size(), 39u);
  EXPECT_TRUE(std::isfinite(gpu->train_step(mb, hyper).loss));  // training resumes after inference
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, CudaInferenceForward,
    ::testing::Values(
        CudaCase{"bf16", "bf16", {}}, CudaCase{"nvidia_nvfp4", "nvidia-nvfp4", {}},
        CudaCase{"tetrajet_v2_base", "tetrajet-v2-base", {}},
        CudaCase{"tetrajet_v2_base_out_control",
                 "tetrajet-v2-base",
                 {"out_control.enabled=true", "out_control.round_to=16", "out_control.calib_start=1",
                  "out_control.calib_steps=1"}},
        // Every other preset the CUDA engine runs, and Q-Attn on its own.
        CudaCase{"nvidia_nvfp4_bf16tail", "nvidia-nvfp4-bf16tail", {}},
        CudaCase{"tetrajet_v2", "tetrajet-v2", {"out_control.calib_start=1", "out_control.calib_steps=1"}},
        CudaCase{"tetrajet_v2_memeff", "tetrajet-v2-memeff", {}},
        CudaCase{"tetrajet_v2_qadamw", "tetrajet-v2-qadamw", {}},
        CudaCase{"tetrajet_v2_qroot", "tetrajet-v2-qroot", {}},
        CudaCase{"tetrajet_v2_lorasvd", "tetrajet-v2-lorasvd", {"lora_svd.realign_every=1"}},
        CudaCase{"q_attn", "tetrajet-v2-base", {"attention.q_attn=true"}}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace fp4
