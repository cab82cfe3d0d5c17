// The CUDA engine data-parallel with q-adamw and with LoRA-SVD (model/cuda/cuda_engine.cu): two ranks as
// threads of one process on one GPU (tests/cuda/staged_thread_comm.h) on the trainer's shard plan, each fed
// the same micro-batch, against one engine of the same seed, bit for bit, through a LoRA-SVD realignment.
//
// Why bit for bit: each rank's token count is half the job's, so its loss scaling is exactly half the single
// engine's, and every step of the backward is linear in it (BF16 and FP32 roundings, NVFP4 quantization with
// its amax-derived scales and stochastic rounding, and LoRA-SVD's split P = U U^T dW all commute with a
// power-of-two factor away from underflow). Each rank's gradient is then exactly half the single engine's
// and their sum is its gradient. The one summation that differs is the gradient norm (each rank sums its
// shard, then the ranks are added): it is compared within 1e-12, and the clipping factor, rounded to FP32
// from it, agrees unless the two norms straddle an FP32 rounding boundary (about 2^-29 per step).
// The realignment then runs on identical parameters on every rank and each rank zeroes the factors' moments
// in its own shard; a rank that did not realign, realigned differently or zeroed moments outside its shard
// would break the comparison.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "../unit/model/engine_parameters.h"
#include "core/error.h"
#include "dist/shard_plan.h"
#include "model/config.h"
#include "model/cuda/cuda_engine.h"
#include "nn/lora_svd_linear.h"
#include "optim/adamw_state.h"
#include "optim/root.h"
#include "optim/root_optimizer.h"
#include "optimizer_test_util.h"
#include "recipe/recipe_io.h"
#include "staged_thread_comm.h"

namespace fp4 {
namespace {

using testing::error_of;
using testing::expect_same_floats;
using testing::expect_same_state;
using testing::fresh_seed;

struct ShardCase {
  const char* name;
  const char* recipe;
  std::vector<std::string> overrides;
  bool whole_tensors;  // the ROOT family's plan (make_tensor_shard_plan), else 128-aligned elements
  bool lora;
};

// The moment tensors (AdamW's m and v, ROOT's momentum) of parameter `name` in a state.
std::vector<const StateTensor*> moments_of(const std::vector<StateTensor>& state, const std::string& name) {
  std::vector<const StateTensor*> out;
  for (const StateTensor& t : state)
    for (const std::string prefix : {std::string(kAdamMomentPrefix[0]), std::string(kAdamMomentPrefix[1]),
                                     std::string(kRootMomentPrefix)})
      if (t.name == prefix + name) out.push_back(&t);
  return out;
}

bool moments_zero(const std::vector<StateTensor>& state, const std::string& name) {
  const std::vector<const StateTensor*> ms = moments_of(state, name);
  EXPECT_FALSE(ms.empty()) << "no moment tensor of " << name;
  for (const StateTensor* t : ms)
    if (std::any_of(t->bytes.begin(), t->bytes.end(), [](uint8_t b) { return b != 0; })) return false;
  return true;
}

// The factors' flat ranges.
std::vector<IndexRange> factor_ranges(const std::vector<ParameterInfo>& params) {
  std::vector<IndexRange> out;
  int64_t at = 0;
  for (const ParameterInfo& p : params) {
    const bool factor = p.name.size() > 8 && (p.name.ends_with(".lora_l1") || p.name.ends_with(".lora_l2"));
    if (factor) out.push_back({at, at + p.numel()});
    at += p.numel();
  }
  return out;
}

std::vector<IndexRange> trainer_shards(const std::vector<ParameterInfo>& params, bool whole_tensors) {
  const ShardPlan plan = whole_tensors ? make_tensor_shard_plan(params, 2, root_step_costs(params))
                                       : make_shard_plan(params, 2, 128);
  std::vector<IndexRange> out;
  for (const RankShard& r : plan.ranks) out.push_back({r.begin, r.end});
  return out;
}

class CudaEngineShards : public ::testing::TestWithParam<ShardCase> {};

TEST_P(CudaEngineShards, TwoThreadRanksMatchOneEngineThroughARealignment) {
  const ShardCase c = GetParam();
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(std::string(c.name) + ", seed " + std::to_string(seed));
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = load_recipe(c.recipe, c.overrides);
  ASSERT_EQ(recipe.lora_svd.enabled, c.lora);
  const Batch batch = testing::next_token_batch(cfg, 2, 64, seed);  // 128 rows: block128 operands
  StepHyper h;
  h.lr = 3e-3f;  // clipping at the default 1.0

  // One engine: 3 steps (with realign_every = 2 the realignment follows step 2).
  constexpr int kSteps = 3;
  auto one = make_cuda_engine(cfg, recipe, seed);
  std::vector<StepStats> want_stats;
  std::vector<std::vector<float>> want_values;
  std::vector<std::vector<StateTensor>> want_state;
  for (int step = 1; step <= kSteps; ++step) {
    want_stats.push_back(one->train_step({&batch, 1}, h));
    want_values.push_back(testing::all_parameters(*one));
    want_state.push_back(one->save_state());
  }
  const std::vector<ParameterInfo> params = one->parameters();
  const std::vector<IndexRange> shards = trainer_shards(params, c.whole_tensors);
  ASSERT_EQ(shards.size(), 2u);
  ASSERT_GT(shards[0].size(), 0);
  ASSERT_GT(shards[1].size(), 0);
  if (c.lora) {
    // The premise: a realignment happened after step 2 (the factors' moments restart from zero) and the
    // factors' moments live on both ranks, so both ranks' resets are compared.
    const std::string w = "blocks.0.attn.wqkv";
    EXPECT_TRUE(moments_zero(want_state[1], lora_l1_name(w)));
    EXPECT_FALSE(moments_zero(want_state[2], lora_l1_name(w)));
    EXPECT_FALSE(moments_zero(want_state[1], w));
    for (const IndexRange& s : shards) {
      bool owns_a_factor = false;
      for (const IndexRange& f : factor_ranges(params))
        owns_a_factor = owns_a_factor || (std::max(f.begin, s.begin) < std::min(f.end, s.end));
      EXPECT_TRUE(owns_a_factor) << "shard [" << s.begin << ", " << s.end << ") holds no factor";
    }
  }

  for (const bool overlap : {false, true}) {
    const std::string what = std::string(c.name) + (overlap ? ", overlap on" : ", overlap off");
    std::vector<std::vector<StepStats>> stats(2);
    std::vector<std::vector<std::vector<float>>> values(2);
    std::vector<std::vector<std::vector<StateTensor>>> states(2);
    std::string failure;
    std::mutex mu;
    test::run_threads<test::StagedThreadComm>(2, [&](Communicator& comm) {
      try {
        auto e = make_cuda_engine(cfg, recipe, seed);
        e->set_data_parallel(DataParallel{&comm, shards});
        dynamic_cast<GradientOverlap&>(*e).set_overlap(overlap);
        std::vector<StepStats> st;
        std::vector<std::vector<float>> v;
        std::vector<std::vector<StateTensor>> s;
        for (int step = 1; step <= kSteps; ++step) {
          st.push_back(e->train_step({&batch, 1}, h));
          v.push_back(testing::all_parameters(*e));
          s.push_back(e->save_state());  // collective: every rank's moments, gathered
        }
        const std::lock_guard<std::mutex> lock(mu);
        const auto r = static_cast<size_t>(comm.rank());
        stats[r] = std::move(st);
        values[r] = std::move(v);
        states[r] = std::move(s);
      } catch (const Error& err) {
        const std::lock_guard<std::mutex> lock(mu);
        failure = err.what();
      }
    });
    ASSERT_EQ(failure, "") << what;
    for (size_t q = 0; q < 2; ++q)
      for (size_t s = 0; s < kSteps; ++s) {
        const std::string where = what + ", rank " + std::to_string(q) + ", step " + std::to_string(s + 1);
        EXPECT_EQ(stats[q][s].loss, want_stats[s].loss) << where;
        EXPECT_EQ(stats[q][s].tokens, 2 * want_stats[s].tokens) << where;  // the job's: both ranks' rows
        EXPECT_NEAR(stats[q][s].grad_norm, want_stats[s].grad_norm, 1e-12 * want_stats[s].grad_norm) << where;
        expect_same_floats(want_values[s], values[q][s], where + ": parameters");
        expect_same_state(want_state[s], states[q][s], where + ": state");
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, CudaEngineShards,
                         ::testing::Values(ShardCase{"q_adamw", "tetrajet-v2-qadamw", {}, false, false},
                                           ShardCase{"lora_svd_adamw",
                                                     "tetrajet-v2-lorasvd",
                                                     {"lora_svd.realign_every=2", "lora_svd.rank=16"},
                                                     false,
                                                     true},
                                           ShardCase{"lora_svd_q_root",
                                                     "tetrajet-v2-lorasvd",
                                                     {"lora_svd.realign_every=2", "lora_svd.rank=16",
                                                      "optimizer=q-root"},
                                                     true,
                                                     true}),
                         [](const auto& info) { return std::string(info.param.name); });

// q-adamw on a plan aligned to 64 instead of 128: the boundary cuts a tile, and set_data_parallel refuses it
// on both ranks, naming q-adamw, the parameter and the tiles, before the engine changes (it then trains
// as one process).
TEST(CudaEngineShardsRefusals, QAdamWRefusesAShardThatCutsATile) {
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = load_recipe("tetrajet-v2-qadamw");
  std::vector<std::string> msgs(2);
  std::vector<double> losses(2, 0.0);
  test::run_threads<test::StagedThreadComm>(2, [&](Communicator& comm) {
    auto e = make_cuda_engine(cfg, recipe, 11);
    // The first tensor boundary after 40 tiles, moved 64 elements in: inside a tensor, off its tiles.
    int64_t cut = 0;
    for (const ParameterInfo& p : e->parameters()) {
      if (cut >= 40 * 128) break;
      cut += p.numel();
    }
    cut += 64;
    int64_t total = 0;
    for (const ParameterInfo& p : e->parameters()) total += p.numel();
    const auto r = static_cast<size_t>(comm.rank());
    msgs[r] = error_of([&] { e->set_data_parallel(DataParallel{&comm, {{0, cut}, {cut, total}}}); });
    StepHyper h;
    const Batch b = testing::next_token_batch(cfg, 2, 64, 3);
    losses[r] = e->train_step({&b, 1}, h).loss;  // no collective: the engine stayed a single process
  });
  for (size_t q = 0; q < 2; ++q) {
    EXPECT_NE(msgs[q].find("q-adamw (CUDA): rank " + std::to_string(q) + "'s shard"), std::string::npos)
        << msgs[q];
    EXPECT_NE(msgs[q].find("128-element tiles"), std::string::npos) << msgs[q];
    EXPECT_TRUE(std::isfinite(losses[q]));
  }
  EXPECT_EQ(losses[0], losses[1]);
}

}  // namespace
}  // namespace fp4
