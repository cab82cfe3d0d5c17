// Helpers for tests that train the tiny model on the CPU engine (optimizers here, layer features in
// tests/unit/nn): a logged fresh seed, random and next-token batches, every parameter read back, a few
// steps on one batch, and the bit-exact resume check.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine_parameters.h"
#include "model/cpu_engine.h"
#include "model/engine.h"
#include "recipe/recipe.h"

namespace fp4::testing {

inline uint32_t logged_seed() {
  const uint32_t s = std::random_device{}();
  std::cout << "[ seed " << s << " ]\n";
  return s;
}

inline Batch random_token_batch(const ModelConfig& cfg, int b, int t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_real - 1);
  Batch batch{b, t, {}, {}};
  for (int i = 0; i < b * t; ++i) {
    batch.tokens.push_back(tok(rng));
    batch.targets.push_back(tok(rng));
  }
  return batch;
}

// Targets are the next tokens (a structure the loss can fall on); each row's last position gets a random one.
inline Batch next_token_batch(const ModelConfig& cfg, int b, int t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_real - 1);
  Batch batch{b, t, {}, {}};
  for (int i = 0; i < b * t; ++i) batch.tokens.push_back(tok(rng));
  for (int i = 0; i < b * t; ++i)
    batch.targets.push_back((i + 1) % t ? batch.tokens[static_cast<size_t>(i + 1)] : tok(rng));
  return batch;
}

// `steps` steps on `batch` at lr 3e-3; returns the last loss, and the first in *first when given.
inline double train_on(TrainingEngine& e, const Batch& batch, int steps, double* first) {
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

// Trains 3 steps on one batch, saves the state and loads it into an engine made with another seed; both
// then train 3 more steps bit-identically (losses, parameters, state bytes). Returns the saved state.
inline std::vector<StateTensor> expect_state_round_trip(const ModelConfig& cfg, const Recipe& recipe,
                                                        uint32_t seed) {
  const Batch batch = random_token_batch(cfg, 2, 32, seed), next = random_token_batch(cfg, 2, 32, seed + 1);
  auto a = make_cpu_engine(cfg, recipe, seed);
  train_on(*a, batch, 3, nullptr);
  std::vector<StateTensor> state = a->save_state();
  auto b = make_cpu_engine(cfg, recipe, seed + 7);  // other weights and SR seed until the load
  b->load_state(state);
  EXPECT_EQ(all_parameters(*a), all_parameters(*b));
  for (int s = 0; s < 3; ++s) {
    const double la = train_on(*a, next, 1, nullptr), lb = train_on(*b, next, 1, nullptr);
    EXPECT_EQ(la, lb) << "step " << s;
  }
  EXPECT_EQ(all_parameters(*a), all_parameters(*b));
  const auto sa = a->save_state(), sb = b->save_state();
  EXPECT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size() && i < sb.size(); ++i) EXPECT_EQ(sa[i].bytes, sb[i].bytes) << sa[i].name;
  return state;
}

// Trains one engine through `data` (a step per entry), saving its state after every step; then, for every
// cut, a fresh engine resumes from the state after step `cut`, trains the remaining steps and must end with
// every parameter bit-identical. `check(whole, resumed, cut)` adds the caller's own comparisons.
inline void expect_resume_bit_exact(
    const ModelConfig& cfg, const Recipe& recipe, uint32_t seed, const std::vector<std::vector<Batch>>& data,
    const StepHyper& hyper, const std::vector<int>& cuts,
    const std::function<void(TrainingEngine&, TrainingEngine&, int)>& check = {}) {
  const int total = static_cast<int>(data.size());
  auto whole = make_cpu_engine(cfg, recipe, seed);
  std::vector<std::vector<StateTensor>> states(static_cast<size_t>(total) + 1);
  for (int s = 1; s <= total; ++s) {
    whole->train_step(data[static_cast<size_t>(s - 1)], hyper);
    states[static_cast<size_t>(s)] = whole->save_state();
  }
  const std::vector<float> final_params = all_parameters(*whole);
  for (int cut : cuts) {
    auto resumed = make_cpu_engine(cfg, recipe, seed);  // the run seed also keys the SR bits
    resumed->load_state(states[static_cast<size_t>(cut)]);
    for (int s = cut + 1; s <= total; ++s) resumed->train_step(data[static_cast<size_t>(s - 1)], hyper);
    const std::vector<float> p = all_parameters(*resumed);
    ASSERT_EQ(p.size(), final_params.size());
    EXPECT_EQ(std::memcmp(p.data(), final_params.data(), p.size() * sizeof(float)), 0)
        << "resumed at step " << cut;
    if (check) check(*whole, *resumed, cut);
  }
}

// The CPU engine refuses a recipe whose optimizer is `name`, naming it.
inline void expect_engine_refuses_optimizer(const std::string& name) {
  Recipe r;
  r.optimizer = name;
  try {
    make_cpu_engine(model_preset("tiny"), r, 1);
    ADD_FAILURE() << "the CPU engine took optimizer '" << name << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer '" + name + "'"), std::string::npos) << e.what();
  }
}

}  // namespace fp4::testing
