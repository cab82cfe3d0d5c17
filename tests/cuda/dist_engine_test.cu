// Data parallelism on the GPU with one rank (a second rank on the same GPU is refused by NCCL): the
// NCCL communicator, the sharded AdamW step, the bucketed reduce-scatter, the all-gather and the
// gathered checkpoint must leave the CUDA engine's training bit-identical to the plain engine's.
// Multi-GPU runs: scripts/dist_gpu_check.sh.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "dist/nccl_communicator.h"
#include "model/cuda/cuda_engine.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

Batch random_batch(std::mt19937_64& rng, int rows, int seq, int vocab) {
  Batch b;
  b.batch = rows;
  b.seq = seq;
  for (int i = 0; i < rows * seq; ++i) {
    b.tokens.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
    b.targets.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
  }
  return b;
}

void expect_same_parameters(const TrainingEngine& a, const TrainingEngine& b) {
  for (const auto& p : a.parameters()) {
    std::vector<float> x(static_cast<size_t>(p.numel())), y(x.size());
    a.read_parameter(p.name, x);
    b.read_parameter(p.name, y);
    ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << p.name;
  }
}

TEST(DistCuda, OneRankNcclTrainingIsBitIdenticalToThePlainEngine) {
  const uint64_t seed = std::random_device{}();
  ModelConfig cfg = model_preset("tiny");
  cfg.n_layers = 3;
  for (const char* recipe_name : {"bf16", "nvidia-nvfp4"}) {
    const Recipe recipe = load_recipe(recipe_name);
    auto plain = make_cuda_engine(cfg, recipe, seed, 0);
    auto dp = make_cuda_engine(cfg, recipe, seed, 0);
    DistEnv env;
    env.launched = true;  // world 1: no sockets, NCCL with one rank
    NcclCommunicator comm(env, std::chrono::seconds(60), std::chrono::seconds(60),
                          [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
    ASSERT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
    int64_t numel = 0;
    for (const auto& p : dp->parameters()) numel += p.numel();
    dp->set_data_parallel({&comm, {{0, numel}}});

    std::mt19937_64 rng(seed);
    StepHyper h;
    h.lr = 3e-3f;
    h.grad_clip = 0.5f;  // clipping active: the norm goes through the all-reduce
    for (int step = 0; step < 4; ++step) {
      std::vector<Batch> micro = {random_batch(rng, 3, 64, cfg.vocab_real), random_batch(rng, 3, 64, cfg.vocab_real)};
      const StepStats a = plain->train_step(micro, h);
      const StepStats b = dp->train_step(micro, h);
      EXPECT_EQ(a.loss, b.loss) << recipe_name << " step " << step;
      EXPECT_EQ(a.grad_norm, b.grad_norm) << recipe_name << " step " << step;
      EXPECT_EQ(a.tokens, b.tokens);
    }
    expect_same_parameters(*plain, *dp);
    // The gathered checkpoint is the plain one, and it loads back into a data-parallel engine.
    const auto sa = plain->save_state(), sb = dp->save_state();
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t i = 0; i < sa.size(); ++i) {
      EXPECT_EQ(sa[i].name, sb[i].name);
      EXPECT_TRUE(sa[i].bytes == sb[i].bytes) << sa[i].name;
    }
    dp->load_state(sa);
    std::vector<Batch> micro = {random_batch(rng, 4, 64, cfg.vocab_real)};
    EXPECT_EQ(plain->train_step(micro, h).loss, dp->train_step(micro, h).loss);
    expect_same_parameters(*plain, *dp);
  }
}

}  // namespace
}  // namespace fp4
