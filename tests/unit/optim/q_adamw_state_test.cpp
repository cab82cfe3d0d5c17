// Q-AdamW's checkpoint tensors: the names per region, the tile count at the edges, and the checks made
// before loading (each of the seven tensors present with its dtype and shape, finite non-negative scales, a
// non-negative step) on hand-made states, each fault named.
#include "optim/q_adamw_state.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../error_of.h"
#include "core/error.h"
#include "optim/q_adamw.h"

namespace fp4 {
namespace {

StateTensor bytes(const std::string& name, const char* dtype, std::vector<int64_t> shape, size_t n,
                  std::mt19937& rng) {
  StateTensor t{name, dtype, std::move(shape), std::vector<uint8_t>(n)};
  for (auto& b : t.bytes) b = static_cast<uint8_t>(rng());
  return t;
}

StateTensor scale_tensor(const std::string& name, float s, float amax) {
  StateTensor t{name, "F32", {2}, std::vector<uint8_t>(8)};
  const float v[2] = {s, amax};
  std::memcpy(t.bytes.data(), v, 8);
  return t;
}

StateTensor i64(const char* name, int64_t v) {
  StateTensor t{name, "I64", {1}, std::vector<uint8_t>(8)};
  std::memcpy(t.bytes.data(), &v, 8);
  return t;
}

// The seven tensors of `param` with `tiles` tiles, as save_state lays them out.
std::vector<StateTensor> param_tensors(const std::string& param, int64_t tiles, std::mt19937& rng) {
  const auto t = static_cast<size_t>(tiles);
  std::vector<StateTensor> out;
  for (int k = 0; k < 2; ++k) {
    out.push_back(bytes(q_adamw_tensor_name(3 * k, param), "U8", {tiles, 64}, t * 64, rng));
    out.push_back(bytes(q_adamw_tensor_name(3 * k + 1, param), "U8", {tiles, 8}, t * 8, rng));
    out.push_back(scale_tensor(q_adamw_tensor_name(3 * k + 2, param), 0.25f * (1 + rng() % 8), 3.0f));
  }
  out.push_back(bytes(q_adamw_tensor_name(6, param), "BF16", {tiles}, t * 2, rng));
  return out;
}

using testing::error_of;

TEST(QAdamWState, NamesAndTiles) {
  const char* want[kQAdamStateRegions] = {"m.codes.",  "m.scales.", "m.scale.", "v.codes.",
                                          "v.scales.", "v.scale.",  "v.mean."};
  for (int r = 0; r < kQAdamStateRegions; ++r)
    EXPECT_EQ(q_adamw_tensor_name(r, "blocks.0.w"), std::string("qadamw.") + want[r] + "blocks.0.w");
  EXPECT_THROW(q_adamw_tensor_name(7, "w"), Error);
  EXPECT_THROW(q_adamw_tensor_name(-1, "w"), Error);
  EXPECT_EQ(q_adamw_tiles(0), 0);
  EXPECT_EQ(q_adamw_tiles(1), 1);
  EXPECT_EQ(q_adamw_tiles(128), 1);
  EXPECT_EQ(q_adamw_tiles(129), 2);
  std::mt19937 rng(std::random_device{}());
  for (int i = 0; i < 100; ++i) {
    const int64_t n = 1 + rng() % 100000, t = q_adamw_tiles(n);
    EXPECT_TRUE(128 * (t - 1) < n && n <= 128 * t) << n;
  }
}

TEST(QAdamWState, RequireFindsTheTensorsOfRandomSizesInOrder) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t tiles = 1 + rng() % 40;
    auto state = param_tensors("w", tiles, rng);
    state.push_back(i64("qadamw.step", static_cast<int64_t>(rng() % 100000)));
    const uint64_t seed = (static_cast<uint64_t>(rng()) << 32) | rng();
    state.push_back(i64("qadamw.seed", static_cast<int64_t>(seed)));
    const StateIndex index(state);
    const QAdamStateTensors f = require_q_adamw_tensors(index, "w", tiles);
    for (int r = 0; r < kQAdamStateRegions; ++r) EXPECT_EQ(f[r], &state[r]) << r;
    const QAdamSavedCounters c = require_q_adamw_counters(index);
    int64_t step;
    std::memcpy(&step, state[7].bytes.data(), 8);
    EXPECT_EQ(c.step, step);
    EXPECT_EQ(c.seed, seed);  // all 64 bits, through the signed I64 tensor
  }
}

TEST(QAdamWState, BrokenTensorsAreNamed) {
  std::mt19937 rng(std::random_device{}());
  const int64_t tiles = 3;
  const auto good = param_tensors("w", tiles, rng);
  // Each tensor missing, or of another shape.
  for (size_t r = 0; r < good.size(); ++r) {
    auto missing = good;
    missing.erase(missing.begin() + static_cast<long>(r));
    const StateIndex a(missing);
    EXPECT_NE(error_of([&] { require_q_adamw_tensors(a, "w", tiles); }).find(good[r].name),
              std::string::npos);
    auto reshaped = good;
    reshaped[r].shape[0] += 1;
    const StateIndex b(reshaped);
    EXPECT_NE(error_of([&] { require_q_adamw_tensors(b, "w", tiles); }).find(good[r].name),
              std::string::npos);
  }
  // Scales that are NaN, infinite or negative, in m's and v's scale tensors.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const size_t r : {size_t{2}, size_t{5}})
    for (const auto& [s, amax] :
         {std::pair{nan, 1.0f}, std::pair{1.0f, inf}, std::pair{-0.5f, 1.0f}, std::pair{1.0f, -2.0f}}) {
      auto broken = good;
      broken[r] = scale_tensor(good[r].name, s, amax);
      const StateIndex index(broken);
      const std::string msg = error_of([&] { require_q_adamw_tensors(index, "w", tiles); });
      EXPECT_NE(msg.find("'" + good[r].name + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("both must be finite and >= 0"), std::string::npos) << msg;
    }
  // Zero scales are a valid all-zero moment.
  auto zeros = good;
  zeros[2] = scale_tensor(good[2].name, 0.0f, 0.0f);
  const StateIndex z(zeros);
  EXPECT_NO_THROW(require_q_adamw_tensors(z, "w", tiles));
  // The counters: a negative step, and either counter missing.
  const std::vector<StateTensor> negative = {i64("qadamw.step", -3), i64("qadamw.seed", 1)};
  const StateIndex n(negative);
  EXPECT_NE(error_of([&] { require_q_adamw_counters(n); }).find("negative step -3"), std::string::npos);
  const std::vector<StateTensor> no_seed = {i64("qadamw.step", 3)};
  const StateIndex ns(no_seed);
  EXPECT_NE(error_of([&] { require_q_adamw_counters(ns); }).find("qadamw.seed"), std::string::npos);
}

}  // namespace
}  // namespace fp4
