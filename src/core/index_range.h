// IndexRange: elements [begin, end) of a flat buffer (shards, gradient buckets, moment resets).
#pragma once

#include <cstdint>

namespace fp4 {

struct IndexRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const IndexRange&) const = default;
};

}  // namespace fp4
