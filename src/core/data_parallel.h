// DataParallel: what makes an engine one rank of a data-parallel (ZeRO-1) job.
#pragma once

#include <vector>

#include "core/communicator.h"
#include "core/index_range.h"

namespace fp4 {

// comm outlives the engine's use of it; shards[q] is the range of the flat parameter buffer (parameters()
// order, each tensor's elements row-major, no gaps) whose optimizer state rank q keeps (dist/shard_plan.h
// makes them).
struct DataParallel {
  Communicator* comm = nullptr;
  std::vector<IndexRange> shards;
};

}  // namespace fp4
