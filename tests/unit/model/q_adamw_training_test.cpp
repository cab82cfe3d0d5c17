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
#include "dist/shard_plan.h"
#include "model/cpu_engine.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

using ::testing::HasSubstr;

uint32_t fresh_seed() {
  const uint32_t s = std::random_device{}();
  std::cout << "[ seed " << s << " ]\n";
  return s;
}

Batch random_batch(const ModelConfig& cfg, int b, int t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_real - 1);
  Batch batch{b, t, {}, {}};
  for (int i = 0; i < b * t; ++i) {
    batch.tokens.push_back(tok(rng));
    batch.targets.push_back(tok(rng));
  }
  return batch;
}

std::vector<float> all_parameters(const TrainingEngine& e) {
  std::vector<float> out;
  for (const auto& p : e.parameters()) {
    std::vector<float> v(static_cast<size_t>(p.numel()));
    e.read_parameter(p.name, v);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

double train(TrainingEngine& e, const Batch& batch, int steps, double* first) {
  StepHyper h;
  h.lr = 3e-3f;
  double last = 0;
  for (int s = 0; s < steps; ++s) {
    const StepStats st = e.train_step({&batch, 1}, h);
    EXPECT_TRUE(std::isfinite(st.loss)) << "step " << s;
    if (s == 0 && first) *first = st.loss;
    last = st.loss;
  }
  return last;
}

class QAdamWTraining : public ::testing::TestWithParam<const char*> {};

TEST_P(QAdamWTraining, TinyLossDecreases) {
  const uint32_t seed = fresh_seed();
  const ModelConfig cfg = model_preset("tiny");
  const std::string name = GetParam();
  const Recipe recipe = name == "bf16" ? load_recipe("bf16", {"optimizer=q-adamw"}) : load_recipe(name);
  ASSERT_EQ(recipe.optimizer, "q-adamw");
  auto engine = make_cpu_engine(cfg, recipe, seed);
  const Batch batch = random_batch(cfg, 4, 64, seed);
  double first = 0;
  const double last = train(*engine, batch, 30, &first);
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
  const uint32_t seed = fresh_seed();
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = load_recipe("bf16", {"optimizer=q-adamw"});
  const Batch batch = random_batch(cfg, 2, 32, seed), next = random_batch(cfg, 2, 32, seed + 1);
  auto a = make_cpu_engine(cfg, recipe, seed);
  train(*a, batch, 3, nullptr);
  const auto state = a->save_state();
  auto b = make_cpu_engine(cfg, recipe, seed + 7);  // other weights and SR seed until the load
  b->load_state(state);
  EXPECT_EQ(all_parameters(*a), all_parameters(*b));
  for (int s = 0; s < 3; ++s) {
    const double la = train(*a, next, 1, nullptr), lb = train(*b, next, 1, nullptr);
    EXPECT_EQ(la, lb) << "step " << s;
  }
  EXPECT_EQ(all_parameters(*a), all_parameters(*b));
  const auto sa = a->save_state(), sb = b->save_state();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(sa[i].bytes, sb[i].bytes) << sa[i].name;
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
  const uint32_t seed = fresh_seed();
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = load_recipe("bf16", {"optimizer=q-adamw"});
  const Batch batch = random_batch(cfg, 2, 32, seed);
  auto one = make_cpu_engine(cfg, recipe, seed);
  train(*one, batch, 3, nullptr);
  std::vector<float> rank0;
  std::string failure;
  std::mutex mu;
  test::run_threads(2, [&](Communicator& comm) {
    try {
      auto e = make_cpu_engine(cfg, recipe, seed);
      const ShardPlan plan = make_shard_plan(e->parameters(), 2, 128);
      DataParallel dp{&comm, {}};
      for (const auto& r : plan.ranks) dp.shards.push_back({r.begin, r.end});
      e->set_data_parallel(dp);
      train(*e, batch, 3, nullptr);
      if (comm.rank() == 0) rank0 = all_parameters(*e);
    } catch (const Error& err) {
      const std::lock_guard<std::mutex> lock(mu);
      failure = err.what();
    }
  });
  ASSERT_TRUE(failure.empty()) << failure;
  EXPECT_EQ(rank0, all_parameters(*one));
}

TEST(QAdamWEngine, BadOptimizerNamesAreRefused) {
  try {
    load_recipe("bf16", {"optimizer=qadamw"});
    ADD_FAILURE() << "optimizer=qadamw was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'qadamw'"));
    EXPECT_THAT(e.what(), HasSubstr("adamw, q-adamw"));
  }
  Recipe r;
  r.optimizer = "Q-AdamW";
  try {
    make_cpu_engine(model_preset("tiny"), r, 1);
    ADD_FAILURE() << "the CPU engine took optimizer 'Q-AdamW'";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("optimizer 'Q-AdamW'"));
  }
}

}  // namespace
}  // namespace fp4
