// The CPU engine with optimizer = "root" / "q-root": the tiny model trains (loss goes down), a saved run
// resumes bit for bit in an engine built from another seed, the engine's parameters are routed as
// root_eligible says, data parallelism and bad names are refused with messages naming the field.
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
#include "model/state_index.h"
#include "optim/root_optimizer.h"
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

std::string test_name(const ::testing::TestParamInfo<const char*>& info) {
  std::string n = info.param;
  for (auto& c : n)
    if (c == '-' || c == '=') c = '_';
  return n;
}

// "optimizer=..." over bf16, or a preset.
Recipe recipe_for(const std::string& p) {
  return p.rfind("optimizer=", 0) == 0 ? load_recipe("bf16", {p}) : load_recipe(p);
}

class RootTraining : public ::testing::TestWithParam<const char*> {};

TEST_P(RootTraining, TinyLossDecreases) {
  const uint32_t seed = fresh_seed();
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = recipe_for(GetParam());
  ASSERT_TRUE(recipe.optimizer == "root" || recipe.optimizer == "q-root") << recipe.optimizer;
  auto engine = make_cpu_engine(cfg, recipe, seed);
  const Batch batch = random_batch(cfg, 4, 64, seed);
  double first = 0;
  const double last = train(*engine, batch, 12, &first);  // q-root NS is slow on the CPU (~0.35 s a step)
  std::cout << GetParam() << ": loss " << first << " -> " << last << "\n";
  EXPECT_LT(last, first - 1.0);
}

INSTANTIATE_TEST_SUITE_P(Recipes, RootTraining,
                         ::testing::Values("optimizer=root", "optimizer=q-root", "tetrajet-v2-qroot"),
                         test_name);

class RootEngine : public ::testing::TestWithParam<const char*> {};

TEST_P(RootEngine, ResumesBitForBit) {
  const uint32_t seed = fresh_seed();
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = recipe_for(GetParam());
  const Batch batch = random_batch(cfg, 2, 32, seed), next = random_batch(cfg, 2, 32, seed + 1);
  auto a = make_cpu_engine(cfg, recipe, seed);
  train(*a, batch, 3, nullptr);
  const auto state = a->save_state();
  auto b = make_cpu_engine(cfg, recipe, seed + 7);  // other weights until the load
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
  // Every matrix ROOT owns has its momentum in the state, every other parameter its AdamW moments.
  const StateIndex index(state);
  int roots = 0;
  for (const auto& p : a->parameters()) {
    const bool root = root_eligible(p);
    roots += root ? 1 : 0;
    EXPECT_EQ(index.has(kRootMomentPrefix + p.name), root) << p.name;
    EXPECT_EQ(index.has("adamw.m." + p.name), !root) << p.name;
  }
  EXPECT_EQ(roots, 4 * cfg.n_layers) << "wqkv, wo, the SwiGLU input and output per layer";
  // An AdamW engine refuses the ROOT state (its moments are missing), the ROOT engine an AdamW state.
  auto c = make_cpu_engine(cfg, load_recipe("bf16"), seed);
  EXPECT_THROW(c->load_state(state), Error);
  try {
    b->load_state(c->save_state());
    ADD_FAILURE() << "a root engine loaded an adamw state";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'optimizer'"));
  }
  EXPECT_EQ(all_parameters(*a), all_parameters(*b)) << "a refused load changed the engine";
}

INSTANTIATE_TEST_SUITE_P(Optimizers, RootEngine, ::testing::Values("optimizer=root", "optimizer=q-root"),
                         test_name);

TEST(RootEngineRefusals, DataParallelIsRefused) {
  const ModelConfig cfg = model_preset("tiny");
  const Recipe recipe = load_recipe("bf16", {"optimizer=root"});
  std::vector<std::string> msgs(2);
  test::run_threads(2, [&](Communicator& comm) {
    try {
      auto e = make_cpu_engine(cfg, recipe, 3);
      const ShardPlan plan = make_shard_plan(e->parameters(), 2, 128);
      DataParallel dp{&comm, {}};
      for (const auto& r : plan.ranks) dp.shards.push_back({r.begin, r.end});
      e->set_data_parallel(dp);
    } catch (const Error& err) {
      msgs[static_cast<size_t>(comm.rank())] = err.what();
    }
  });
  for (const auto& m : msgs) {
    EXPECT_THAT(m, HasSubstr("data parallelism"));
    EXPECT_THAT(m, HasSubstr("optimizer"));
  }
}

TEST(RootEngineRefusals, BadNamesAreRefused) {
  for (const char* bad : {"optimizer=roots", "optimizer=Q-Root", "optimizer=qroot"}) {
    try {
      load_recipe("bf16", {bad});
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string(bad).substr(10)));
      EXPECT_THAT(e.what(), HasSubstr("root, q-root"));
    }
  }
  EXPECT_EQ(load_recipe("bf16", {"optimizer=q-root"}).optimizer, "q-root");
  Recipe r;
  r.optimizer = "ROOT";
  try {
    make_cpu_engine(model_preset("tiny"), r, 1);
    ADD_FAILURE() << "the CPU engine took optimizer 'ROOT'";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("optimizer 'ROOT'"));
  }
}

}  // namespace
}  // namespace fp4
