#include "optim/grad_buckets.h"

#include <algorithm>

#include "core/error.h"

namespace fp4 {
namespace {

// l for "blocks.<l>.<...>", else -1.
int block_of(const std::string& name) {
  constexpr std::string_view kPrefix = "blocks.";
  if (name.rfind(kPrefix, 0) != 0) return -1;
  const size_t dot = name.find('.', kPrefix.size());
  if (dot == std::string::npos || dot == kPrefix.size()) return -1;
  int l = 0;
  for (size_t i = kPrefix.size(); i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    l = l * 10 + (name[i] - '0');
  }
  return l;
}

}  // namespace

std::vector<GradBucket> gradient_buckets(const std::vector<ParameterInfo>& params) {
  // Walk in flat order: the embedding part, then one run per block, then the head part.
  std::vector<GradBucket> forward;
  int64_t offset = 0;
  int n_blocks = 0;
  bool seen_block = false;
  for (const auto& p : params) {
    const int l = block_of(p.name);
    const int key = l >= 0 ? l : (seen_block ? -1 : -2);  // -2: before any block
    if (l >= 0) {
      seen_block = true;
      n_blocks = std::max(n_blocks, l + 1);
    }
    if (forward.empty() || forward.back().block != key) {
      for (const auto& b : forward)
        FP4_CHECK(b.block != key, "gradient buckets: the parameters of ",
                  key >= 0 ? "blocks." + std::to_string(key) : std::string("the embedding/head"),
                  " are not contiguous (", p.name, " comes after others)");
      forward.push_back({{offset, offset}, key, ""});
    }
    offset += p.numel();
    forward.back().range.end = offset;
  }
  std::vector<GradBucket> out(forward.rbegin(), forward.rend());
  for (auto& b : out) {
    if (b.block == -2) b.block = n_blocks;
    b.name = b.block == -1 ? "head" : b.block == n_blocks ? "embed" : "blocks." + std::to_string(b.block);
  }
  return out;
}

std::vector<IndexRange> bucket_shards(const IndexRange& bucket, std::span<const IndexRange> shards) {
  std::vector<IndexRange> out;
  for (const auto& s : shards) {
    const int64_t lo = std::max(bucket.begin, s.begin), hi = std::min(bucket.end, s.end);
    out.push_back(lo < hi ? IndexRange{lo, hi} : IndexRange{bucket.begin, bucket.begin});
  }
  return out;
}

}  // namespace fp4
