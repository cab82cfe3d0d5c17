#include "optim/optimizer.h"

#include "core/error.h"
#include "optim/adamw_optimizer.h"
#include "optim/q_adamw.h"
#include "optim/root_optimizer.h"

namespace fp4 {

IndexRange OptimizerPlacement::shard(int64_t numel) const {
  if (!comm) return IndexRange{0, numel};
  FP4_CHECK(static_cast<int>(shards.size()) == comm->world_size(), "optimizer: ", shards.size(),
            " shards for ", comm->world_size(), " ranks");
  return shards[static_cast<size_t>(comm->rank())];
}

void Optimizer::reset_moments(const std::vector<IndexRange>& ranges) {
  (void)ranges;
  FP4_THROW("optimizer ", name(), " cannot reset the moments of selected parameters (lora_svd needs adamw)");
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const ParameterSet& params,
                                          const OptimizerPlacement& place, uint64_t seed) {
  if (name == "adamw") return std::make_unique<AdamWOptimizer>(params, place);
  if (name == "q-adamw") return std::make_unique<QAdamW>(params, place, seed);
  // ROOT's hyper-parameters are RootOptions' defaults (momentum 0.95 Nesterov, clip quantile 0.99, update
  // scale 0.2, 5 NS steps); lr and weight decay come from each step's StepHyper.
  if (const auto root = parse_root_optimizer_name(name)) {
    RootOptions opt;
    opt.rest = root->rest;
    return std::make_unique<RootOptimizer>(params, place, seed, root->precision, opt);
  }
  FP4_THROW("optimizer '", name, "' is unknown (known: ", known_optimizers(), ")");
}

}  // namespace fp4
