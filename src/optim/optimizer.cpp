#include "optim/optimizer.h"

#include "core/error.h"
#include "optim/adamw_optimizer.h"
#include "optim/q_adamw.h"

namespace fp4 {

IndexRange OptimizerPlacement::shard(int64_t numel) const {
  if (!comm) return IndexRange{0, numel};
  FP4_CHECK(static_cast<int>(shards.size()) == comm->world_size(), "optimizer: ", shards.size(), " shards for ",
            comm->world_size(), " ranks");
  return shards[static_cast<size_t>(comm->rank())];
}

bool is_known_optimizer(const std::string& name) { return name == "adamw" || name == "q-adamw"; }

std::string known_optimizers() { return "adamw, q-adamw"; }

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const ParameterSet& params,
                                          const OptimizerPlacement& place, uint64_t seed) {
  if (name == "adamw") return std::make_unique<AdamWOptimizer>(params, place);
  if (name == "q-adamw") return std::make_unique<QAdamW>(params, place, seed);
  FP4_THROW("optimizer '", name, "' is unknown (known: ", known_optimizers(), ")");
}

}  // namespace fp4
