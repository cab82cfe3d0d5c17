// ZeRO-1 sharding: each data-parallel rank owns one contiguous, aligned element range of the flat
// concatenation of all parameters, and keeps optimizer state (FP32 or quantized) only for that range.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/parameter_info.h"

namespace fp4 {

// The part of one tensor that a rank owns: elements [tensor_offset, tensor_offset + length) of the
// tensor, found at flat_offset in the flat buffer.
struct ShardPiece {
  std::string tensor;
  int64_t tensor_offset = 0;
  int64_t flat_offset = 0;
  int64_t length = 0;
};

// One rank's range [begin, end) of the flat buffer (empty when begin == end) and the pieces in it.
struct RankShard {
  int64_t begin = 0;
  int64_t end = 0;
  std::vector<ShardPiece> pieces;
  int64_t size() const { return end - begin; }
};

struct ShardPlan {
  int world_size = 1;
  int64_t align = 1;
  int64_t total = 0;               // elements of the flat buffer
  std::vector<std::string> names;  // tensors in flat order
  std::vector<int64_t> offsets;    // flat offset of each tensor
  std::vector<RankShard> ranks;    // world_size entries
};

// Splits the flat concatenation of params (in the given order) over world_size ranks. Every begin is a
// multiple of align_elements; ranks get whole blocks of align_elements, the last rank's end is clipped
// to total, and shard sizes differ by at most align_elements. Ranks may be empty when total is small.
ShardPlan make_shard_plan(const std::vector<ParameterInfo>& params, int world_size,
                          int64_t align_elements = 64);

// Shards of whole tensors, for optimizers that need each tensor's whole gradient (ROOT's Newton-Schulz):
// rank r holds a contiguous run of tensors in the given order, chosen so that the per-rank sums of costs[t]
// (one non-negative cost per tensor) are balanced: their sum of squares is the least of all such splits.
// Ranks may be empty when tensors are fewer than ranks.
// align is 1 (a quantized state's tiles are not respected).
ShardPlan make_tensor_shard_plan(const std::vector<ParameterInfo>& params, int world_size,
                                 std::span<const double> costs);

// How a per-element state is stored: bytes_per_unit bytes hold elements_per_unit consecutive
// elements (FP32: 1 element / 4 bytes; packed FP4: 2 / 1; one E4M3 scale per 16: 16 / 1).
struct StateLayout {
  int64_t elements_per_unit = 1;
  int64_t bytes_per_unit = 4;
};

struct ByteRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// Bytes of a state stored in layout that hold the elements of rank's shard. The plan's alignment must
// be a multiple of elements_per_unit so that no unit is split between ranks; the last unit of the
// buffer may be partial.
ByteRange state_byte_range(const ShardPlan& plan, int rank, StateLayout layout);

// Byte ranges of every rank for a state stored in layout: contiguous, covering the whole state.
std::vector<ByteRange> state_byte_ranges(const ShardPlan& plan, StateLayout layout);

// Element ranges of every rank as ByteRange with one "byte" per element (for FP32 vectors of floats).
std::vector<ByteRange> element_ranges(const ShardPlan& plan);

// Checks that two plans describe the same flat buffer (same tensors, order, sizes); names `what`.
void check_same_layout(const ShardPlan& a, const ShardPlan& b, const std::string& what);

// Reassembles a flat buffer from per-rank shards laid out by ranges (ranges[r] holds shards[r]).
template <typename T>
std::vector<T> gather_shards(const std::vector<ByteRange>& ranges,
                             const std::vector<std::vector<T>>& shards) {
  FP4_CHECK(shards.size() == ranges.size(), "gather_shards: ", shards.size(), " shards for ", ranges.size(),
            " ranks");
  const int64_t total = ranges.empty() ? 0 : ranges.back().end;
  std::vector<T> flat(static_cast<size_t>(total));
  for (size_t r = 0; r < ranges.size(); ++r) {
    FP4_CHECK(static_cast<int64_t>(shards[r].size()) == ranges[r].size(), "gather_shards: shard of rank ", r,
              " has ", shards[r].size(), " entries, the plan gives it ", ranges[r].size());
    std::copy(shards[r].begin(), shards[r].end(), flat.begin() + ranges[r].begin);
  }
  return flat;
}

// Splits a flat buffer into per-rank shards laid out by ranges.
template <typename T>
std::vector<std::vector<T>> split_shards(const std::vector<ByteRange>& ranges, std::span<const T> flat) {
  const int64_t total = ranges.empty() ? 0 : ranges.back().end;
  FP4_CHECK(static_cast<int64_t>(flat.size()) == total, "split_shards: flat buffer has ", flat.size(),
            " entries, the plan covers ", total);
  std::vector<std::vector<T>> shards(ranges.size());
  for (size_t r = 0; r < ranges.size(); ++r)
    shards[r].assign(flat.begin() + ranges[r].begin, flat.begin() + ranges[r].end);
  return shards;
}

// FP32 state written by the ranks of `from` (one vector per rank, its element range), re-split for the
// ranks of `to`: a checkpoint written by N ranks resumes on M ranks.
std::vector<std::vector<float>> reshard(const ShardPlan& from, const ShardPlan& to,
                                        const std::vector<std::vector<float>>& shards);

// The same for a state stored in layout (quantized moments, scales): shards are its bytes.
std::vector<std::vector<uint8_t>> reshard_bytes(const ShardPlan& from, const ShardPlan& to,
                                                StateLayout layout,
                                                const std::vector<std::vector<uint8_t>>& shards);

}  // namespace fp4
