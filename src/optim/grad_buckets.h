// Gradient buckets for data parallelism: the flat gradient buffer (parameters in engine order) cut into
// contiguous groups in the order the backward completes them (LM head and final norm, then blocks L-1
// .. 0, then the embedding), so each bucket can be reduced as soon as its gradients are final.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/index_range.h"
#include "core/parameter_info.h"

namespace fp4 {

struct GradBucket {
  IndexRange range;  // of the flat buffer
  int block = -1;    // the transformer block whose backward completes it; -1: the head, L: the embedding
  std::string name;  // "head", "blocks.3", "embed": for messages
};

// Parameters named "blocks.<l>.*" group by l; everything after the last block (final norm, LM head)
// is the head bucket, everything before the first block (embedding) the embedding bucket. Throws
// fp4::Error when a block's parameters are not contiguous.
std::vector<GradBucket> gradient_buckets(const std::vector<ParameterInfo>& params);

// Each rank's part of a bucket: shards[q] intersected with the bucket (empty when disjoint).
std::vector<IndexRange> bucket_shards(const IndexRange& bucket, std::span<const IndexRange> shards);

}  // namespace fp4
