// The CPU engine with optimizer = "q-adamw": the tiny model trains (loss goes down), a saved run resumes
// bit for bit (even in an engine built from another seed), ZeRO-1 ranks with the same batch reproduce one
// rank's bits, and bad optimizer names are refused by the recipe loader and the engine.
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
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

using ::testing::HasSubstr;

using testing::all_parameters;
using testing::expect_state_round_trip;
using testing::logged_seed;
using testing::random_token_batch;
using testing::train_on;

class QAdamWTraining : public ::testing::TestWithParam<const char*> {};

TEST_P(QAdamWTraining, TinyLossDecreases) {
  const uint32_t seed = logged_seed();
  const ModelConfig cfg = model_preset("tiny");
  const std::string name = GetParam();
  const Recipe recipe = name == "bf16" ? load_recipe("bf16", {"optimizer=q-adamw"}) : load_recipe(name);
  ASSERT_EQ(recipe.optimizer, "q-adamw");
  auto engine = make_cpu_engine(cfg, recipe, seed);
  const Batch batch = random_token_batch(cfg, 4, 64, seed);
  double first = 0;
  const double last = train_on(*engine, batch, 30, &first);
  std::cout << name << " + q-adamw: loss " << first << " -> " << last << "\n";
  EXPECT_LT(last, first - 1.0);
}

INSTANTIATE_TEST_SUITE_P(Recipes, QAdamWTraining, ::testing::Values("bf16", "tetrajet-v2-qadamw"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(QAdamWEngine, ResumesBitForBit) {
  const uint32_t seed = logged_seed();
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = load_recipe("bf16", {"optimizer=q-adamw"});
  const auto state = expect_state_round_trip(cfg, recipe, seed);
  // An AdamW engine refuses the Q-AdamW state by name.
  auto c = make_cpu_engine(cfg, load_recipe("bf16"), seed);
  try {
    c->load_state(state);
    ADD_FAILURE() << "an adamw engine loaded a q-adamw state";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Q-AdamW"));
  }
}

// Two ZeRO-1 ranks (shard plan aligned to 128) fed the same batch sum to one rank's gradient exactly, so
// the sharded Q-AdamW state must give one rank's parameters bit for bit.
TEST(QAdamWEngine, DataParallelRanksMatchOneRank) {
  const uint32_t seed = logged_seed();
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = load_recipe("bf16", {"optimizer=q-adamw"});
  testing::expect_two_ranks_match_one_rank(cfg, recipe, seed, [](const std::vector<ParameterInfo>& params) {
    return make_shard_plan(params, 2, 128);
  });
}

TEST(QAdamWEngine, BadOptimizerNamesAreRefused) {
  try {
    load_recipe("bf16", {"optimizer=qadamw"});
    ADD_FAILURE() << "optimizer=qadamw was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'qadamw'"));
    EXPECT_THAT(e.what(), HasSubstr("adamw, q-adamw"));
  }
  testing::expect_engine_refuses_optimizer("Q-AdamW");
}

}  // namespace
}  // namespace fp4
