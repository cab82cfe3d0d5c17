// The CPU engine's ZeRO-1 ranks against one rank: two thread ranks, each fed the same batch, sum to one
// rank's gradient exactly (x + x = 2x, halved by the doubled token count), so whatever their optimizer
// shards, their parameters after a few steps must be one engine's bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "../optim/thread_comm.h"
#include "core/error.h"
#include "dist/shard_plan.h"
#include "engine_training_util.h"
#include "model/cpu_engine.h"

namespace fp4::testing {

// `plan` makes the shard plan of 2 ranks for the engine's parameters; 3 steps on a random rows x 32 batch
// (block128 recipes need rows x 32 to be a multiple of 128).
inline void expect_two_ranks_match_one_rank(
    const ModelConfig& cfg, const Recipe& recipe, uint32_t seed,
    const std::function<ShardPlan(const std::vector<ParameterInfo>&)>& plan, int rows = 2) {
  const Batch batch = random_token_batch(cfg, rows, 32, seed);
  auto one = make_cpu_engine(cfg, recipe, seed);
  train_on(*one, batch, 3, nullptr);
  std::vector<float> rank0;
  std::string failure;
  std::mutex mu;
  test::run_threads(2, [&](Communicator& comm) {
    try {
      auto e = make_cpu_engine(cfg, recipe, seed);
      DataParallel dp{&comm, {}};
      for (const auto& r : plan(e->parameters()).ranks) dp.shards.push_back({r.begin, r.end});
      e->set_data_parallel(dp);
      train_on(*e, batch, 3, nullptr);
      if (comm.rank() == 0) rank0 = all_parameters(*e);
    } catch (const Error& err) {
      const std::lock_guard<std::mutex> lock(mu);
      failure = err.what();
    }
  });
  ASSERT_TRUE(failure.empty()) << failure;
  EXPECT_EQ(rank0, all_parameters(*one));
}

}  // namespace fp4::testing
