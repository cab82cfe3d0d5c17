// The optimizer names a recipe may ask for (optim/optimizer.h: make_optimizer builds each), kept here so
// that recipe validation needs nothing from the optimizers.
#pragma once

#include <string>

namespace fp4 {

bool is_known_optimizer(const std::string& name);
std::string known_optimizers();
// Whether this optimizer's ZeRO-1 shards must hold whole tensors: ROOT's Newton-Schulz needs each matrix's
// whole gradient on one rank (the trainer then shards with dist/shard_plan.h's make_tensor_shard_plan).
bool optimizer_needs_whole_tensors(const std::string& name);  // "adamw, q-adamw, root, root-bf16, q-root"

}  // namespace fp4
