// make_optimizer: each recipe name gives its optimizer, an unknown one is an error listing the known ones;
// a placement with the wrong number of shards is named; Q-AdamW, which has no reset_moments, refuses it.
#include "optim/optimizer.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "../error_of.h"
#include "core/error.h"
#include "nn/parameters.h"
#include "thread_comm.h"

namespace fp4 {
namespace {

using testing::error_of;

ParameterSet small_params() {
  ParameterSet ps;
  ps.add("w", {32, 64}, true, ParamInit::kNormal);
  ps.add("norm", {64}, false, ParamInit::kOnes);
  ps.allocate();
  return ps;
}

TEST(Optimizer, EachNameGivesItsOptimizerOverEveryElement) {
  const ParameterSet ps = small_params();
  for (const char* name : {"adamw", "q-adamw", "root", "q-root"}) {
    const auto opt = make_optimizer(name, ps, OptimizerPlacement{}, 7);
    ASSERT_NE(opt, nullptr);
    EXPECT_EQ(opt->name(), name);
    EXPECT_EQ(opt->shard(), (IndexRange{0, ps.numel()})) << name;
    EXPECT_EQ(opt->step_count(), 0) << name;
    EXPECT_GT(opt->state_bytes(), 0) << name;
  }
  const std::string msg = error_of([&] { make_optimizer("sgd", ps, OptimizerPlacement{}, 7); });
  EXPECT_NE(msg.find("optimizer 'sgd' is unknown"), std::string::npos) << msg;
  for (const char* known : {"adamw", "q-adamw", "root", "q-root"})
    EXPECT_NE(msg.find(known), std::string::npos) << msg;
}

TEST(Optimizer, ResetMomentsIsRefusedByNameWhereUnsupported) {
  const ParameterSet ps = small_params();
  auto q = make_optimizer("q-adamw", ps, OptimizerPlacement{}, 1);
  const std::string msg = error_of([&] { q->reset_moments({{0, 16}}); });
  EXPECT_NE(msg.find("optimizer q-adamw cannot reset the moments"), std::string::npos) << msg;
  for (const char* name : {"adamw", "root", "q-root"}) {  // the ones lora_svd can run with
    auto opt = make_optimizer(name, ps, OptimizerPlacement{}, 1);
    EXPECT_NO_THROW(opt->reset_moments({{0, 16}})) << name;
  }
}

// On two ranks: a placement's shard is this rank's range, and a shard list of another length is an error.
TEST(Optimizer, PlacementShardsAreCheckedAgainstTheRanks) {
  test::run_threads(2, [](Communicator& comm) {
    OptimizerPlacement good{&comm, {{0, 10}, {10, 25}}};
    EXPECT_EQ(good.shard(25), comm.rank() == 0 ? (IndexRange{0, 10}) : (IndexRange{10, 25}));
    const OptimizerPlacement bad{&comm, {{0, 25}}};
    const std::string msg = error_of([&] { bad.shard(25); });
    EXPECT_NE(msg.find("1 shards for 2 ranks"), std::string::npos) << msg;
  });
  EXPECT_EQ(OptimizerPlacement{}.shard(123), (IndexRange{0, 123}));
}

}  // namespace
}  // namespace fp4
