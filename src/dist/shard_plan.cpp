#include "dist/shard_plan.h"

#include <algorithm>
#include <cmath>

namespace fp4 {
namespace {

// Fills every rank's pieces from its [begin, end).
void add_pieces(ShardPlan& plan, const std::vector<ParameterInfo>& params) {
  for (auto& shard : plan.ranks) {
    shard.pieces.clear();
    for (size_t t = 0; t < params.size(); ++t) {
      const int64_t t_begin = plan.offsets[t];
      const int64_t t_end = t_begin + params[t].numel();
      const int64_t lo = std::max(t_begin, shard.begin);
      const int64_t hi = std::min(t_end, shard.end);
      if (lo < hi) shard.pieces.push_back({params[t].name, lo - t_begin, lo, hi - lo});
    }
  }
}

}  // namespace

ShardPlan make_shard_plan(const std::vector<ParameterInfo>& params, int world_size, int64_t align_elements) {
  FP4_CHECK(world_size >= 1, "make_shard_plan: world_size ", world_size, " must be >= 1");
  FP4_CHECK(align_elements >= 1, "make_shard_plan: align_elements ", align_elements, " must be >= 1");
  ShardPlan plan;
  plan.world_size = world_size;
  plan.align = align_elements;
  for (const auto& p : params) {
    for (auto d : p.shape)
      FP4_CHECK(d >= 0, "make_shard_plan: parameter ", p.name, " has negative dimension ", d);
    plan.names.push_back(p.name);
    plan.offsets.push_back(plan.total);
    plan.total += p.numel();
  }

  // Whole blocks per rank; the remainder blocks go to the last ranks, whose end is clipped to total,
  // so that the clipped rank is one of the larger ones and sizes differ by at most one block.
  const int64_t blocks = (plan.total + align_elements - 1) / align_elements;
  const int64_t base = blocks / world_size;
  const int64_t extra = blocks % world_size;
  plan.ranks.resize(world_size);
  int64_t block = 0;
  for (int r = 0; r < world_size; ++r) {
    const int64_t count = base + (r >= world_size - extra ? 1 : 0);
    plan.ranks[r].begin = std::min(block * align_elements, plan.total);
    block += count;
    plan.ranks[r].end = std::min(block * align_elements, plan.total);
  }

  add_pieces(plan, params);
  return plan;
}

ShardPlan make_tensor_shard_plan(const std::vector<ParameterInfo>& params, int world_size,
                                 std::span<const double> costs) {
  FP4_CHECK(costs.size() == params.size(), "make_tensor_shard_plan: ", costs.size(), " costs for ",
            params.size(), " parameters");
  for (size_t t = 0; t < costs.size(); ++t)
    FP4_CHECK(std::isfinite(costs[t]) && costs[t] >= 0.0, "make_tensor_shard_plan: parameter ",
              params[t].name, " has cost ", costs[t], " (must be finite and >= 0)");
  ShardPlan plan = make_shard_plan(params, world_size, 1);  // validates; its ranges are replaced below
  const size_t n = params.size();
  // Balanced by the sum over ranks of the squared rank cost (additive, so exact by dynamic programming,
  // and it spreads tensors over every rank that can take some). best[r][i]: the least sum for ranks
  // 0..r-1 holding tensors [0, i); split[r][i]: where rank r-1's tensors begin (the first best one).
  std::vector<double> prefix(n + 1, 0.0);
  for (size_t t = 0; t < n; ++t) prefix[t + 1] = prefix[t] + costs[t];
  const auto ranks = static_cast<size_t>(world_size);
  std::vector<std::vector<double>> best(ranks + 1, std::vector<double>(n + 1, INFINITY));
  std::vector<std::vector<size_t>> split(ranks + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0.0;
  for (size_t r = 1; r <= ranks; ++r) {
    for (size_t i = 0; i <= n; ++i) {
      for (size_t s = 0; s <= i; ++s) {
        const double load = prefix[i] - prefix[s];
        const double c = best[r - 1][s] + load * load;
        if (c < best[r][i]) best[r][i] = c, split[r][i] = s;
      }
    }
  }
  std::vector<size_t> first(ranks + 1, n);  // rank r holds tensors [first[r], first[r + 1])
  for (size_t r = ranks; r >= 1; --r) first[r - 1] = split[r][first[r]];
  const auto offset_of = [&](size_t t) { return t < n ? plan.offsets[t] : plan.total; };
  for (size_t r = 0; r < ranks; ++r) {
    plan.ranks[r] = RankShard{offset_of(first[r]), offset_of(first[r + 1]), {}};
  }
  add_pieces(plan, params);
  return plan;
}

ByteRange state_byte_range(const ShardPlan& plan, int rank, StateLayout layout) {
  FP4_CHECK(rank >= 0 && rank < plan.world_size, "state_byte_range: rank ", rank, " outside world of ",
            plan.world_size);
  const int64_t epu = layout.elements_per_unit;
  FP4_CHECK(epu >= 1 && layout.bytes_per_unit >= 1, "state_byte_range: layout of ", epu, " elements per ",
            layout.bytes_per_unit, " bytes is invalid");
  FP4_CHECK(plan.align % epu == 0, "state_byte_range: plan alignment ", plan.align,
            " elements is not a multiple of the state's ", epu, " elements per unit");
  const auto& s = plan.ranks[rank];
  // begin is a multiple of align (or total); a partial last unit belongs to the rank ending at total.
  const int64_t first_unit = (s.begin + epu - 1) / epu;
  const int64_t end_unit = (s.end + epu - 1) / epu;
  return {first_unit * layout.bytes_per_unit, end_unit * layout.bytes_per_unit};
}

std::vector<ByteRange> state_byte_ranges(const ShardPlan& plan, StateLayout layout) {
  std::vector<ByteRange> out;
  for (int r = 0; r < plan.world_size; ++r) out.push_back(state_byte_range(plan, r, layout));
  return out;
}

std::vector<ByteRange> element_ranges(const ShardPlan& plan) {
  std::vector<ByteRange> out;
  for (const auto& s : plan.ranks) out.push_back({s.begin, s.end});
  return out;
}

void check_same_layout(const ShardPlan& a, const ShardPlan& b, const std::string& what) {
  FP4_CHECK(a.total == b.total, what, ": plans cover ", a.total, " and ", b.total, " elements");
  FP4_CHECK(a.names == b.names && a.offsets == b.offsets, what,
            ": plans list different tensors or tensor sizes");
}

std::vector<std::vector<float>> reshard(const ShardPlan& from, const ShardPlan& to,
                                        const std::vector<std::vector<float>>& shards) {
  check_same_layout(from, to, "reshard");
  const auto flat = gather_shards(element_ranges(from), shards);
  return split_shards<float>(element_ranges(to), flat);
}

std::vector<std::vector<uint8_t>> reshard_bytes(const ShardPlan& from, const ShardPlan& to,
                                                StateLayout layout,
                                                const std::vector<std::vector<uint8_t>>& shards) {
  check_same_layout(from, to, "reshard_bytes");
  const auto flat = gather_shards(state_byte_ranges(from, layout), shards);
  return split_shards<uint8_t>(state_byte_ranges(to, layout), flat);
}

}  // namespace fp4
