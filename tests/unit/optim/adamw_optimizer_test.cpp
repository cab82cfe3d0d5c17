// AdamWOptimizer: its state saves and loads back so that later steps are bit for bit the uninterrupted
// run's, on one process and on two ranks whose shards cut tensors; reset_moments zeroes exactly the
// ranges asked for; a Q-AdamW state is refused by name.
#include "optim/adamw_optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/state_index.h"
#include "nn/parameters.h"
#include "thread_comm.h"

namespace fp4 {
namespace {

ParameterSet make_params(uint64_t seed) {
  ParameterSet ps;
  ps.add("w", {24, 40}, true, ParamInit::kNormal);
  ps.add("norm", {40}, false, ParamInit::kOnes);
  ps.add("e", {16, 9}, true, ParamInit::kNormal);
  ps.allocate();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n;
  for (auto& x : ps.values()) x = n(rng);
  return ps;
}

// Gradients that depend on the step only, so that two runs see the same ones.
void fill_grads(ParameterSet& ps, int step) {
  std::mt19937_64 rng(1000 + step);
  std::normal_distribution<float> n(0.0f, 0.1f);
  for (auto& g : ps.grads()) g = n(rng);
}

std::vector<float> moment_of(const std::vector<StateTensor>& state, const std::string& name) {
  for (const auto& t : state)
    if (t.name == name) {
      std::vector<float> v(t.bytes.size() / 4);
      std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
      return v;
    }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

// What an engine saves: the parameter values beside the optimizer's moments.
std::vector<StateTensor> with_values(std::vector<StateTensor> state, const ParameterSet& ps) {
  for (int i = 0; i < ps.size(); ++i)
    state.push_back(f32_state_tensor(ps.at(i).info.name, ps.at(i).info.shape, ps.value(i)));
  return state;
}

StepHyper hyper() {
  StepHyper h;
  h.lr = 0.01f;
  h.weight_decay = 0.05f;
  return h;
}

TEST(AdamWOptimizer, SaveLoadResumesBitForBit) {
  const uint64_t seed = std::random_device{}();
  ParameterSet a = make_params(seed), b = make_params(seed);
  AdamWOptimizer run(a, {});
  for (int s = 1; s <= 3; ++s) fill_grads(a, s), run.step(a, hyper());
  const std::vector<StateTensor> saved = with_values(run.save_state(a), a);
  EXPECT_EQ(run.state_bytes(), 2 * 4 * a.numel());
  // b takes a's values and state, then both go on.
  std::copy(a.values().begin(), a.values().end(), b.values().begin());
  AdamWOptimizer resumed(b, {});
  resumed.load_state(StateIndex(saved), b);
  EXPECT_EQ(resumed.step_count(), 3);
  for (int s = 4; s <= 6; ++s) {
    fill_grads(a, s), run.step(a, hyper());
    fill_grads(b, s), resumed.step(b, hyper());
  }
  EXPECT_EQ(std::vector<float>(a.values().begin(), a.values().end()),
            std::vector<float>(b.values().begin(), b.values().end()));
}

// Two ranks with a shard boundary inside "w": the gathered state equals one process's, and it loads back
// onto one process.
TEST(AdamWOptimizer, ShardedStateEqualsOneProcessAndLoadsOnIt) {
  const uint64_t seed = std::random_device{}();
  ParameterSet one = make_params(seed);
  AdamWOptimizer single(one, {});
  for (int s = 1; s <= 2; ++s) fill_grads(one, s), single.step(one, hyper());
  const std::vector<StateTensor> want = single.save_state(one);
  const int64_t cut = 1 + static_cast<int64_t>(std::random_device{}() % (one.numel() - 1));
  std::vector<std::vector<StateTensor>> got(2);
  test::run_threads(2, [&](Communicator& comm) {
    ParameterSet ps = make_params(seed);
    OptimizerPlacement place{&comm, {{0, cut}, {cut, ps.numel()}}};
    AdamWOptimizer opt(ps, place);
    for (int s = 1; s <= 2; ++s) {
      fill_grads(ps, s);
      opt.step(ps, hyper());
    }
    got[static_cast<size_t>(comm.rank())] = opt.save_state(ps);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(got[r].size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[r][i].name, want[i].name);
      EXPECT_EQ(got[r][i].bytes, want[i].bytes) << want[i].name << " on rank " << r << ", cut " << cut;
    }
  }
  ParameterSet back = make_params(seed);
  AdamWOptimizer loaded(back, {});
  const std::vector<StateTensor> rank1 = with_values(got[1], back);
  loaded.load_state(StateIndex(rank1), back);
  const auto again = loaded.save_state(back);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(again[i].bytes, want[i].bytes) << want[i].name;
}

TEST(AdamWOptimizer, ResetMomentsZeroesExactlyTheRanges) {
  std::mt19937 rng(std::random_device{}());
  ParameterSet ps = make_params(rng());
  AdamWOptimizer opt(ps, {});
  fill_grads(ps, 1);
  opt.step(ps, hyper());
  const auto before = opt.save_state(ps);
  std::vector<IndexRange> ranges;
  std::vector<bool> zeroed(static_cast<size_t>(ps.numel()), false);
  for (int k = 0; k < 3; ++k) {
    const int64_t a = rng() % ps.numel(), b = a + rng() % (ps.numel() - a + 1);
    ranges.push_back({a, b});
    for (int64_t i = a; i < b; ++i) zeroed[static_cast<size_t>(i)] = true;
  }
  ranges.push_back({5, 5});  // empty
  opt.reset_moments(ranges);
  const auto after = opt.save_state(ps);
  for (int i = 0; i < ps.size(); ++i)
    for (const char* prefix : {"adamw.m.", "adamw.v."}) {
      const std::string name = prefix + ps.at(i).info.name;
      const auto m0 = moment_of(before, name), m1 = moment_of(after, name);
      for (size_t j = 0; j < m0.size(); ++j) {
        const size_t flat = static_cast<size_t>(ps.at(i).offset) + j;
        ASSERT_EQ(m1[j], zeroed[flat] ? 0.0f : m0[j]) << name << "[" << j << "]";
      }
    }
  EXPECT_EQ(opt.step_count(), 1);  // the step count stays
}

TEST(AdamWOptimizer, AQAdamWStateIsRefusedByName) {
  ParameterSet ps = make_params(1);
  AdamWOptimizer opt(ps, {});
  const std::vector<StateTensor> foreign = {{"qadamw.step", "I64", {1}, std::vector<uint8_t>(8)}};
  try {
    opt.load_state(StateIndex(foreign), ps);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds Q-AdamW moments"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4
