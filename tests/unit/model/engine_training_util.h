// Helpers for tests that train the tiny model on the CPU engine with one optimizer or another: a logged
// fresh seed, a random batch, every parameter read back, and a few steps on one batch.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
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

inline std::vector<float> all_parameters(const TrainingEngine& e) {
  std::vector<float> out;
  for (const auto& p : e.parameters()) {
    std::vector<float> v(static_cast<size_t>(p.numel()));
    e.read_parameter(p.name, v);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
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
