#include "dist/shard_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

namespace fp4 {
namespace {

// A random list of tensors: matrices, vectors, scalars and some empty tensors.
std::vector<ParameterInfo> random_params(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> count(0, 12), kind(0, 4), dim(1, 300);
  std::vector<ParameterInfo> params;
  const int n = count(rng);
  for (int i = 0; i < n; ++i) {
    ParameterInfo p;
    p.name = "t" + std::to_string(i);
    switch (kind(rng)) {
      case 0:
        p.shape = {dim(rng), dim(rng)};
        break;
      case 1:
        p.shape = {dim(rng)};
        break;
      case 2:
        p.shape = {};
        break;  // scalar: one element
      case 3:
        p.shape = {dim(rng), 0};
        break;
      default:
        p.shape = {dim(rng) % 7 + 1, dim(rng) % 5 + 1, dim(rng)};
        break;
    }
    params.push_back(p);
  }
  return params;
}

std::vector<float> random_floats(std::mt19937_64& rng, int64_t n) {
  std::normal_distribution<float> dist;
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(ShardPlan, CoversEveryElementOnceAlignedAndBalanced) {
  std::mt19937_64 rng(std::random_device{}());
  const int64_t aligns[] = {1, 16, 64, 128};
  for (int trial = 0; trial < 60; ++trial) {
    const auto params = random_params(rng);
    int64_t total = 0;
    for (const auto& p : params) total += p.numel();
    for (int world = 1; world <= 9; ++world) {
      const int64_t align = aligns[trial % 4];
      const auto plan = make_shard_plan(params, world, align);
      ASSERT_EQ(plan.total, total);
      ASSERT_EQ(plan.ranks.size(), static_cast<size_t>(world));
      // Contiguous ranges from 0 to total: each element owned by exactly one rank.
      int64_t expect_begin = 0, min_size = total, max_size = 0;
      for (const auto& s : plan.ranks) {
        EXPECT_EQ(s.begin, expect_begin);
        EXPECT_LE(s.begin, s.end);
        EXPECT_TRUE(s.begin % align == 0 || s.begin == total) << "begin " << s.begin;
        expect_begin = s.end;
        min_size = std::min(min_size, s.size());
        max_size = std::max(max_size, s.size());
      }
      EXPECT_EQ(expect_begin, total);
      EXPECT_LE(max_size - min_size, align) << "world " << world << " total " << total;
      EXPECT_LE(max_size, (total + world - 1) / world + align);

      // Pieces: count each element of each tensor, check flat offsets and tensor offsets agree.
      std::map<std::string, std::vector<int>> owned;
      for (const auto& p : params) owned[p.name].assign(static_cast<size_t>(p.numel()), 0);
      for (const auto& s : plan.ranks) {
        int64_t flat = s.begin;
        for (const auto& piece : s.pieces) {
          EXPECT_GT(piece.length, 0);
          EXPECT_EQ(piece.flat_offset, flat);  // pieces tile the range in order
          const auto it = std::find(plan.names.begin(), plan.names.end(), piece.tensor);
          ASSERT_NE(it, plan.names.end());
          EXPECT_EQ(plan.offsets[it - plan.names.begin()] + piece.tensor_offset, piece.flat_offset);
          for (int64_t i = 0; i < piece.length; ++i) ++owned[piece.tensor].at(piece.tensor_offset + i);
          flat += piece.length;
        }
        EXPECT_EQ(flat, s.end);
      }
      for (const auto& [name, counts] : owned)
        for (int c : counts) ASSERT_EQ(c, 1) << name;
    }
  }
}

TEST(ShardPlan, RejectsBadArguments) {
  const std::vector<ParameterInfo> params = {{"w", {4, 4}}};
  EXPECT_THROW(make_shard_plan(params, 0), Error);
  EXPECT_THROW(make_shard_plan(params, 2, 0), Error);
  try {
    make_shard_plan({{"bad", {3, -1}}}, 2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad"), std::string::npos);
  }
}

// The least sum of squared rank costs over every way to cut costs[0, n) into `ranks` contiguous runs.
double brute_force_best(const std::vector<double>& costs, size_t from, int ranks) {
  double rest = 0.0;
  for (size_t t = from; t < costs.size(); ++t) rest += costs[t];
  if (ranks == 1) return rest * rest;
  double best = INFINITY, load = 0.0;
  for (size_t end = from;; ++end) {  // this rank holds [from, end)
    best = std::min(best, load * load + brute_force_best(costs, end, ranks - 1));
    if (end == costs.size()) break;
    load += costs[end];
  }
  return best;
}

// Whole-tensor shards (ROOT): contiguous, covering, every tensor on one rank, and the split the least sum of
// squared rank costs, checked against every possible split.
TEST(ShardPlan, TensorPlanKeepsTensorsWholeAndBalancesCosts) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int> world_d(1, 5);
  std::uniform_real_distribution<double> cost_d(0.0, 100.0);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<ParameterInfo> params;
    for (const auto& p : random_params(rng))
      if (p.numel() > 0 && params.size() < 8) params.push_back(p);
    const int world = world_d(rng);
    std::vector<double> costs;
    for (size_t t = 0; t < params.size(); ++t) costs.push_back(trial % 5 == 0 && t % 2 ? 0.0 : cost_d(rng));
    const ShardPlan plan = make_tensor_shard_plan(params, world, costs);
    ASSERT_EQ(plan.ranks.size(), static_cast<size_t>(world));
    EXPECT_EQ(plan.align, 1);
    EXPECT_EQ(plan.ranks.front().begin, 0);
    EXPECT_EQ(plan.ranks.back().end, plan.total);
    double sum_sq = 0.0;
    for (int r = 0; r < world; ++r) {
      const RankShard& s = plan.ranks[static_cast<size_t>(r)];
      if (r > 0) {
        EXPECT_EQ(s.begin, plan.ranks[static_cast<size_t>(r - 1)].end);
      }
      double load = 0.0;
      for (const ShardPiece& piece : s.pieces) {
        const size_t t = static_cast<size_t>(std::find(plan.names.begin(), plan.names.end(), piece.tensor) -
                                             plan.names.begin());
        EXPECT_EQ(piece.tensor_offset, 0) << piece.tensor << " is cut";
        EXPECT_EQ(piece.length, params[t].numel()) << piece.tensor << " is cut";
        load += costs[t];
      }
      sum_sq += load * load;
    }
    const double best = brute_force_best(costs, 0, world);
    EXPECT_LE(sum_sq, best * (1 + 1e-12) + 1e-9)
        << "trial " << trial << ": " << params.size() << " tensors, " << world << " ranks";
  }
  // Two equal matrices and a small vector over 2 ranks: one matrix each.
  const std::vector<ParameterInfo> three = {{"a", {64, 64}, true}, {"b", {8}, false}, {"c", {64, 64}, true}};
  const std::vector<double> c3 = {100.0, 1.0, 100.0};
  const ShardPlan two = make_tensor_shard_plan(three, 2, c3);
  EXPECT_TRUE((two.ranks[0].end == 4096) || (two.ranks[0].end == 4104));
  // More ranks than tensors: the extra ranks are empty, every tensor still whole.
  const ShardPlan five = make_tensor_shard_plan(three, 5, c3);
  int nonempty = 0;
  for (const auto& r : five.ranks) nonempty += r.size() > 0;
  EXPECT_EQ(nonempty, 3);
}

TEST(ShardPlan, TensorPlanRejectsBadCosts) {
  const std::vector<ParameterInfo> params = {{"a", {4, 4}, true}, {"b", {4}, false}};
  EXPECT_THROW(make_tensor_shard_plan(params, 2, std::vector<double>{1.0}), Error);
  EXPECT_THROW(make_tensor_shard_plan(params, 2, std::vector<double>{1.0, -1.0}), Error);
  EXPECT_THROW(make_tensor_shard_plan(params, 2, std::vector<double>{1.0, NAN}), Error);
  EXPECT_THROW(make_tensor_shard_plan(params, 0, std::vector<double>{1.0, 1.0}), Error);
}

TEST(ShardPlan, ReshardRoundTripIsExact) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int> world(1, 9);
  for (int trial = 0; trial < 100; ++trial) {
    const auto params = random_params(rng);
    const int n = world(rng), m = world(rng);
    const auto plan_n = make_shard_plan(params, n, 64);
    const auto plan_m = make_shard_plan(params, m, 64);
    const auto flat = random_floats(rng, plan_n.total);
    const auto shards_n = split_shards<float>(element_ranges(plan_n), flat);
    for (int r = 0; r < n; ++r) ASSERT_EQ(shards_n[r].size(), static_cast<size_t>(plan_n.ranks[r].size()));
    const auto shards_m = reshard(plan_n, plan_m, shards_n);
    ASSERT_EQ(shards_m.size(), static_cast<size_t>(m));
    // Each rank of M holds exactly its slice of the original buffer.
    for (int r = 0; r < m; ++r) {
      const std::vector<float> expect(flat.begin() + plan_m.ranks[r].begin,
                                      flat.begin() + plan_m.ranks[r].end);
      ASSERT_EQ(shards_m[r], expect);
    }
    EXPECT_EQ(reshard(plan_m, plan_n, shards_m), shards_n);
  }
}

TEST(ShardPlan, ReshardRejectsMismatchedShards) {
  const std::vector<ParameterInfo> a = {{"w", {10, 10}}}, b = {{"w", {10, 11}}};
  const auto pa = make_shard_plan(a, 2, 16);
  const auto pb = make_shard_plan(b, 3, 16);
  std::vector<std::vector<float>> shards = {std::vector<float>(pa.ranks[0].size()),
                                            std::vector<float>(pa.ranks[1].size())};
  EXPECT_THROW(reshard(pa, pb, shards), Error);  // different tensor sizes
  shards[1].pop_back();
  EXPECT_THROW(reshard(pa, make_shard_plan(a, 3, 16), shards), Error);  // truncated shard
  shards.pop_back();
  EXPECT_THROW(reshard(pa, make_shard_plan(a, 3, 16), shards), Error);  // missing rank
}

TEST(ShardPlan, QuantizedStateRangesFollowElementRanges) {
  std::mt19937_64 rng(std::random_device{}());
  // FP32, packed FP4 (2 per byte), one E4M3 scale per 16 elements, one FP32 scale per 64.
  const StateLayout layouts[] = {{1, 4}, {2, 1}, {16, 1}, {64, 4}};
  for (int trial = 0; trial < 40; ++trial) {
    const auto params = random_params(rng);
    for (int world = 1; world <= 9; ++world) {
      const auto plan = make_shard_plan(params, world, 64);
      for (const auto& layout : layouts) {
        const int64_t units = (plan.total + layout.elements_per_unit - 1) / layout.elements_per_unit;
        const auto ranges = state_byte_ranges(plan, layout);
        int64_t expect = 0;
        for (int r = 0; r < world; ++r) {
          EXPECT_EQ(ranges[r].begin, expect);
          // The rank's bytes are exactly the units holding its first and last element.
          const auto& s = plan.ranks[r];
          if (s.size() > 0) {
            EXPECT_EQ(ranges[r].begin, s.begin / layout.elements_per_unit * layout.bytes_per_unit);
            EXPECT_EQ(ranges[r].end, ((s.end - 1) / layout.elements_per_unit + 1) * layout.bytes_per_unit);
          } else {
            EXPECT_EQ(ranges[r].size(), 0);
          }
          expect = ranges[r].end;
        }
        EXPECT_EQ(expect, units * layout.bytes_per_unit);

        // N -> M -> N on random bytes is exact.
        std::vector<uint8_t> bytes(static_cast<size_t>(units * layout.bytes_per_unit));
        for (auto& b : bytes) b = static_cast<uint8_t>(rng());
        const auto shards = split_shards<uint8_t>(ranges, bytes);
        const auto other = make_shard_plan(params, world % 9 + 1, 64);
        const auto moved = reshard_bytes(plan, other, layout, shards);
        EXPECT_EQ(gather_shards(state_byte_ranges(other, layout), moved), bytes);
        EXPECT_EQ(reshard_bytes(other, plan, layout, moved), shards);
      }
    }
  }
}

TEST(ShardPlan, StateLayoutMustNotSplitUnitsBetweenRanks) {
  const auto plan = make_shard_plan({{"w", {100}}}, 3, 8);
  EXPECT_THROW(state_byte_range(plan, 0, {16, 1}), Error);  // 16-element units, 8-element alignment
  EXPECT_THROW(state_byte_range(plan, 3, {1, 4}), Error);   // no such rank
  EXPECT_NO_THROW(state_byte_range(plan, 2, {8, 1}));
}

}  // namespace
}  // namespace fp4
