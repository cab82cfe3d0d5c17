// The optimizer names a recipe may ask for (optim/optimizer.h: make_optimizer builds each), kept here so
// that recipe validation needs nothing from the optimizers.
#pragma once

#include <string>

namespace fp4 {

bool is_known_optimizer(const std::string& name);
std::string known_optimizers();  // "adamw, q-adamw, root, root-bf16, q-root"

}  // namespace fp4
