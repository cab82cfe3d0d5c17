// DeviceQAdamW (optim/cuda/device_q_adamw.h) on ZeRO-1 shards, ranks as threads of one process on one GPU
// (tests/cuda/staged_thread_comm.h): every rank is given the same gradients (as after the engines'
// reduce-scatter) and steps only its own tiles; after the values are gathered every parameter equals one
// process's DeviceQAdamW bit for bit, and so does the state every rank saves (gathered, full tensors). A
// 3-rank state resumes on 2 ranks as the uninterrupted run; a shard that cuts a 128-element tile is refused.
//
// Why the comparison can fail: tensor "e" is split between ranks and holds one large gradient on the later
// rank, so the earlier rank's own amax of e's moments is far below the tensor's. Without the all-reduce of
// the amaxes that rank would quantize its tiles of e with another tensor scale: other codes (the saved state
// differs at step 1) and, from step 2 on, other decoded moments and so other values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/state_index.h"
#include "nn/cuda/device_params.h"
#include "optim/cuda/device_q_adamw.h"
#include "optimizer_test_util.h"
#include "staged_thread_comm.h"

namespace fp4 {
namespace {

using testing::expect_same_floats;
using testing::expect_same_state;
using testing::fresh_seed;

// Offsets: a [0, 1024), norm [1024, 1280), e [1280, 5376), odd [5376, 6286) (its last tile partial),
// zero_grad [6286, 7286), tiny [7286, 7289). Every tensor up to odd starts on a multiple of 128, so the
// trainer's 128-aligned boundaries there fall on tiles.
ParameterSet make_params(std::mt19937& rng) {
  ParameterSet ps;
  ps.add("a", {8, 128}, true, ParamInit::kNormal);
  ps.add("norm", {256}, false, ParamInit::kOnes);
  ps.add("e", {64, 64}, true, ParamInit::kNormal);
  ps.add("odd", {7, 130}, true, ParamInit::kNormal);
  ps.add("zero_grad", {1000}, false, ParamInit::kNormal);
  ps.add("tiny", {3}, true, ParamInit::kNormal);
  ps.allocate();
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (auto& x : ps.values()) x = n(rng);
  return ps;
}

// Gaussian gradients at a different scale per tensor, scattered zeros, zeros for zero_grad, and in e (scale
// 1) the value 300 at element 3000 (flat 4280: past every boundary inside e below).
std::vector<float> gradients(const ParameterSet& ps0, uint32_t seed) {
  ParameterSet ps = ps0;
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 99);
  for (int i = 0; i < ps.size(); ++i) {
    const float s = std::pow(10.0f, static_cast<float>(i % 3) - 2.0f);
    for (auto& x : ps.grad(i)) x = ps.at(i).info.name == "zero_grad" || pick(rng) < 5 ? 0.0f : s * n(rng);
  }
  ps.grad(ps.require("e"))[3000] = 300.0f;
  return {ps.grads().begin(), ps.grads().end()};
}

StepHyper hyper() {
  StepHyper h;
  h.lr = 0.01f;
  h.weight_decay = 0.1f;
  // No clipping here: the job's norm is summed in another order on N ranks (it is compared within 1e-12),
  // and a clipping factor from it could differ in its last bit. The engine test clips.
  h.grad_clip = 0.0f;
  return h;
}

std::vector<float> all_values(cuda::DeviceParams& dp) {
  std::vector<float> v(static_cast<size_t>(dp.numel()));
  cuda::copy_to_host(v.data(), dp.values(), v.size() * sizeof(float), nullptr);
  return v;
}

TEST(CudaQAdamWShards, ThreadRanksMatchOneProcessAndResumeOnOtherRankCounts) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ParameterSet ps0 = make_params(rng);
  ASSERT_EQ(ps0.numel(), 7289);
  const auto grads_of_step = [&](int step) {
    return gradients(ps0, seed + 7919u * static_cast<uint32_t>(step));
  };
  const StepHyper h = hyper();

  // One process: steps 1-4; the values after each, the state after steps 3 and 4.
  cuda::DeviceParams dp1(ps0, nullptr);
  cuda::DeviceQAdamW one(dp1, nullptr, seed);
  std::vector<std::vector<float>> values_after(5);
  std::vector<double> norms(5);
  std::vector<StateTensor> state3, state4;
  for (int step = 1; step <= 4; ++step) {
    const std::vector<float> g = grads_of_step(step);
    cuda::copy_to_device(dp1.grads(), g.data(), g.size() * sizeof(float), nullptr);
    one.queue_step(dp1, h, nullptr);
    std::vector<double> sumsq;
    const cuda::StepControl ctl = one.read_control(sumsq);
    ASSERT_EQ(ctl.skip, 0);
    norms[static_cast<size_t>(step)] = ctl.grad_norm;
    one.commit_step();
    values_after[static_cast<size_t>(step)] = all_values(dp1);
    if (step == 3) state3 = one.save_state(dp1);
  }
  state4 = one.save_state(dp1);

  // Ranks over `shards` from `start` (values and, if given, a state) for steps [from, to]; returns the
  // state rank 0 saved.
  const auto run = [&](const std::vector<IndexRange>& shards, const std::vector<float>& start,
                       const std::vector<StateTensor>* state, int from, int to, const std::string& what) {
    const int world = static_cast<int>(shards.size());
    std::vector<std::vector<StateTensor>> saved(static_cast<size_t>(world));
    std::vector<std::vector<float>> values(static_cast<size_t>(world));
    std::string failure;
    std::mutex mu;
    test::run_threads<test::StagedThreadComm>(world, [&](Communicator& comm) {
      try {
        ParameterSet ps = ps0;
        std::copy(start.begin(), start.end(), ps.values().begin());
        cuda::DeviceParams dp(ps, nullptr);
        cuda::DeviceQAdamW gpu(dp, nullptr, seed);
        gpu.set_shard(dp, shards, &comm);
        EXPECT_EQ(gpu.shard().begin, shards[static_cast<size_t>(comm.rank())].begin);
        EXPECT_EQ(gpu.shard().end, shards[static_cast<size_t>(comm.rank())].end);
        if (state) gpu.load_state(StateIndex(*state), dp);
        for (int step = from; step <= to; ++step) {
          const std::vector<float> g = grads_of_step(step);
          cuda::copy_to_device(dp.grads(), g.data(), g.size() * sizeof(float), nullptr);
          gpu.queue_step(dp, h, nullptr);
          std::vector<double> sumsq;
          const cuda::StepControl ctl = gpu.read_control(sumsq);
          EXPECT_EQ(ctl.skip, 0) << what << ", step " << step;
          const double want = norms[static_cast<size_t>(step)];
          EXPECT_NEAR(ctl.grad_norm, want, 1e-12 * want) << what << ", step " << step << ": the job's norm";
          gpu.commit_step();
          comm.all_gather(dp.values(), shards, nullptr);
        }
        std::vector<float> v = all_values(dp);
        std::vector<StateTensor> st = gpu.save_state(dp);  // collective
        const std::lock_guard<std::mutex> lock(mu);
        values[static_cast<size_t>(comm.rank())] = std::move(v);
        saved[static_cast<size_t>(comm.rank())] = std::move(st);
      } catch (const Error& e) {
        const std::lock_guard<std::mutex> lock(mu);
        failure = e.what();
      }
    });
    EXPECT_EQ(failure, "") << what;
    const std::vector<StateTensor>& want_state = to == 3 ? state3 : state4;
    for (int q = 0; q < world; ++q) {
      const std::string who = what + ", rank " + std::to_string(q);
      expect_same_floats(values_after[static_cast<size_t>(to)], values[static_cast<size_t>(q)],
                         who + ": values");
      expect_same_state(want_state, saved[static_cast<size_t>(q)], who + ": saved state");
    }
    return saved[0];
  };
  const std::vector<float> start(ps0.values().begin(), ps0.values().end());
  // 2 ranks, the boundary inside e (2304 = 1280 + 8 tiles).
  run({{0, 2304}, {2304, 7289}}, start, nullptr, 1, 3, "2 ranks");
  // 3 ranks: a boundary inside e (1920), one at the end of odd, whose partial last tile rank 1 keeps (6286,
  // not a multiple of 128 but a tensor boundary, which the CPU QAdamW accepts too).
  const std::vector<StateTensor> from3 =
      run({{0, 1920}, {1920, 6286}, {6286, 7289}}, start, nullptr, 1, 3, "3 ranks");
  // 4 ranks, the first one empty (the trainer's plan leaves the first ranks empty when there are few tiles).
  run({{0, 0}, {0, 2304}, {2304, 5504}, {5504, 7289}}, start, nullptr, 1, 3, "4 ranks, rank 0 empty");
  // The 3 ranks' state resumed on 2 ranks cut inside odd (5632 = 5376 + 2 tiles): step 4 as one process.
  run({{0, 5632}, {5632, 7289}}, values_after[3], &from3, 4, 4, "3 ranks' state resumed on 2");
}

// A boundary 64 elements into odd cuts its first tile: both ranks refuse, naming the rank, the parameter, the
// element and the rule, before any collective.
TEST(CudaQAdamWShards, AShardThatCutsATileIsRefused) {
  std::mt19937 rng(5);
  const ParameterSet ps = make_params(rng);
  const int64_t cut = ps.at(ps.require("odd")).offset + 64;
  std::vector<std::string> msgs(2);
  test::run_threads<test::StagedThreadComm>(2, [&](Communicator& comm) {
    try {
      cuda::DeviceParams dp(ps, nullptr);
      cuda::DeviceQAdamW gpu(dp, nullptr, 1);
      gpu.set_shard(dp, {{0, cut}, {cut, ps.numel()}}, &comm);
    } catch (const Error& e) {
      msgs[static_cast<size_t>(comm.rank())] = e.what();
    }
  });
  for (int q = 0; q < 2; ++q) {
    const std::string& m = msgs[static_cast<size_t>(q)];
    EXPECT_NE(m.find("q-adamw (CUDA): rank " + std::to_string(q) + "'s shard"), std::string::npos) << m;
    EXPECT_NE(m.find("cuts parameter odd (910 elements) at element 64"), std::string::npos) << m;
    EXPECT_NE(m.find("128-element tiles"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace fp4
