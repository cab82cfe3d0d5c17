// The CPU engine with optimizer = "root" / "root-bf16" / "q-root": the tiny model trains (loss goes down), a
// saved run resumes bit for bit in an engine built from another seed, the engine's parameters are routed as
// root_eligible says, whole-tensor ZeRO-1 shards step as one rank, shards that cut a matrix and bad names are
// refused with messages naming the parameter or the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <mutex>
#include <random>

#include "../optim/thread_comm.h"
#include "core/error.h"
#include "data_parallel_util.h"
#include "dist/shard_plan.h"
#include "engine_training_util.h"
#include "model/cpu_engine.h"
#include "model/state_index.h"
#include "optim/root_optimizer.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

using ::testing::HasSubstr;

using testing::all_parameters;
using testing::expect_state_round_trip;
using testing::logged_seed;
using testing::random_token_batch;
using testing::train_on;

std::string test_name(const ::testing::TestParamInfo<const char*>& info) {
  std::string n = info.param;
  for (auto& c : n)
    if (c == '-' || c == '=' || c == '+') c = '_';
  return n;
}

// "optimizer=..." over bf16, or a preset.
Recipe recipe_for(const std::string& p) {
  return p.rfind("optimizer=", 0) == 0 ? load_recipe("bf16", {p}) : load_recipe(p);
}

class RootTraining : public ::testing::TestWithParam<const char*> {};

TEST_P(RootTraining, TinyLossDecreases) {
  const uint32_t seed = logged_seed();
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = recipe_for(GetParam());
  ASSERT_TRUE(optimizer_needs_whole_tensors(recipe.optimizer)) << recipe.optimizer;  // a ROOT form
  auto engine = make_cpu_engine(cfg, recipe, seed);
  const Batch batch = random_token_batch(cfg, 4, 64, seed);
  double first = 0;
  const double last = train_on(*engine, batch, 12, &first);  // q-root NS is slow on the CPU (~0.35 s a step)
  std::cout << GetParam() << ": loss " << first << " -> " << last << "\n";
  EXPECT_LT(last, first - 1.0);
}

INSTANTIATE_TEST_SUITE_P(Recipes, RootTraining,
                         ::testing::Values("optimizer=root", "optimizer=root-bf16", "optimizer=q-root",
                                           "tetrajet-v2-qroot", "optimizer=q-root+q-adamw"),
                         test_name);

class RootEngine : public ::testing::TestWithParam<const char*> {};

TEST_P(RootEngine, ResumesBitForBit) {
  const uint32_t seed = logged_seed();
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = recipe_for(GetParam());
  const auto state = expect_state_round_trip(cfg, recipe, seed);
  auto a = make_cpu_engine(cfg, recipe, seed);  // the parameter list the state describes
  // Every matrix ROOT owns has its momentum in the state, every other parameter its AdamW (or Q-AdamW)
  // moments.
  const StateIndex index(state);
  const bool q_rest = parse_root_optimizer_name(recipe.optimizer)->rest == RootRest::kQAdamW;
  int roots = 0;
  for (const auto& p : a->parameters()) {
    const bool root = root_eligible(p);
    roots += root ? 1 : 0;
    EXPECT_EQ(index.has(kRootMomentPrefix + p.name), root) << p.name;
    EXPECT_EQ(index.has("adamw.m." + p.name), !root && !q_rest) << p.name;
    EXPECT_EQ(index.has("qadamw.m.codes." + p.name), !root && q_rest) << p.name;
  }
  EXPECT_EQ(roots, 4 * cfg.n_layers) << "wqkv, wo, the SwiGLU input and output per layer";
  // An AdamW engine refuses the ROOT state (its moments are missing), the ROOT engine an AdamW state.
  auto c = make_cpu_engine(cfg, load_recipe("bf16"), seed);
  EXPECT_THROW(c->load_state(state), Error);
  a->load_state(state);
  const std::vector<float> before = all_parameters(*a);
  try {
    a->load_state(c->save_state());
    ADD_FAILURE() << "a root engine loaded an adamw state";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'optimizer'"));
  }
  EXPECT_EQ(all_parameters(*a), before) << "a refused load changed the engine";
}

INSTANTIATE_TEST_SUITE_P(Optimizers, RootEngine,
                         ::testing::Values("optimizer=root", "optimizer=root-bf16", "optimizer=q-root",
                                           "optimizer=root+q-adamw"),
                         test_name);

// ZeRO-1 shards of whole tensors (the trainer's plan for ROOT, balanced by root_step_costs): two ranks fed
// the same batch sum to one rank's gradient exactly, so every ROOT matrix and AdamW parameter steps as in
// one rank, bit for bit. A 128-element plan, which cuts matrices, is refused naming the parameter.
TEST(RootEngine, WholeTensorShardsMatchOneRank) {
  for (const char* optimizer :
       {"optimizer=root", "optimizer=root-bf16", "optimizer=q-root", "optimizer=root+q-adamw"}) {
    SCOPED_TRACE(optimizer);
    const uint32_t seed = logged_seed();
    const ModelConfig cfg = model_preset("tiny");
    const Recipe recipe = load_recipe("bf16", {optimizer});
    testing::expect_two_ranks_match_one_rank(cfg, recipe, seed, [](const std::vector<ParameterInfo>& params) {
      const ShardPlan plan = make_tensor_shard_plan(params, 2, root_step_costs(params));
      EXPECT_GT(plan.ranks[0].size(), 0);
      EXPECT_GT(plan.ranks[1].size(), 0);
      return plan;
    });
  }
}

// The flagship presets on the trainer's whole-tensor plan: fullstack-fp4 (LoRA-SVD factors stepped by Q-Root
// beside the residual weights, Q-AdamW for the embedding, head and gains, Q-Attn) and fp4train-max (with
// OutControl and OsciReset) step as one rank.
TEST(RootEngine, FlagshipPresetsOnWholeTensorShardsMatchOneRank) {
  for (const char* preset : {"fullstack-fp4", "fp4train-max"}) {
    SCOPED_TRACE(preset);
    const Recipe recipe = load_recipe(preset);
    ASSERT_EQ(recipe.optimizer, "q-root+q-adamw");
    testing::expect_two_ranks_match_one_rank(
        model_preset("tiny"), recipe, logged_seed(),
        [](const std::vector<ParameterInfo>& params) {
          return make_tensor_shard_plan(params, 2, root_step_costs(params));
        },
        4);
  }
}

TEST(RootEngineRefusals, ShardsThatCutAMatrixAreRefused) {
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = load_recipe("bf16", {"optimizer=root"});
  std::vector<std::string> msgs(2);
  std::string first;  // the matrix the boundary cuts
  test::run_threads(2, [&](Communicator& comm) {
    try {
      auto e = make_cpu_engine(cfg, recipe, 3);
      // A boundary 64 elements into the first ROOT matrix (as an element-granular plan can put it).
      int64_t offset = 0, cut = -1;
      for (const auto& p : e->parameters()) {
        if (cut < 0 && root_eligible(p)) cut = offset + 64, first = p.name;
        offset += p.numel();
      }
      DataParallel dp{&comm, {{0, cut}, {cut, offset}}};
      e->set_data_parallel(dp);
    } catch (const Error& err) {
      msgs[static_cast<size_t>(comm.rank())] = err.what();
    }
  });
  ASSERT_FALSE(first.empty());
  for (const auto& m : msgs) {
    EXPECT_THAT(m, HasSubstr("cuts parameter " + first));
    EXPECT_THAT(m, HasSubstr("optimizer 'root'"));
    EXPECT_THAT(m, HasSubstr("whole tensors"));
  }
}

TEST(RootEngineRefusals, BadNamesAreRefused) {
  for (const char* bad : {"optimizer=roots", "optimizer=Q-Root", "optimizer=qroot", "optimizer=root-BF16",
                          "optimizer=root_bf16"}) {
    try {
      load_recipe("bf16", {bad});
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string(bad).substr(10)));
      EXPECT_THAT(e.what(), HasSubstr("root, root-bf16, q-root"));
    }
  }
  EXPECT_EQ(load_recipe("bf16", {"optimizer=q-root"}).optimizer, "q-root");
  // The checkpoint's trainer.json keeps the recipe as to_toml writes it, so a resume sees the precision.
  const Recipe bf16 = load_recipe("bf16", {"optimizer=root-bf16"});
  EXPECT_EQ(bf16.optimizer, "root-bf16");
  EXPECT_THAT(to_toml(bf16), HasSubstr("optimizer = \"root-bf16\""));
  testing::expect_engine_refuses_optimizer("ROOT");
}

}  // namespace
}  // namespace fp4
