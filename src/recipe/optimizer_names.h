// The optimizer names a recipe may ask for (optim/optimizer.h: make_optimizer builds each), kept here so
// that recipe validation needs nothing from the optimizers.
#pragma once

#include <string>

namespace fp4 {

bool is_known_optimizer(const std::string& name);
std::string known_optimizers();
// Whether this optimizer's ZeRO-1 shards must hold whole tensors: ROOT's Newton-Schulz needs each matrix's
// whole gradient on one rank (the trainer then shards with dist/shard_plan.h's make_tensor_shard_plan).
bool optimizer_needs_whole_tensors(const std::string& name);
// Whether this optimizer can zero the moments of LoRA-SVD's factors at a realignment: adamw and every ROOT
// form (the factors are ROOT matrices there, so "+q-adamw" does not matter); q-adamw cannot.
bool optimizer_resets_factor_moments(const std::string& name);

}  // namespace fp4
