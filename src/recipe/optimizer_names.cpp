#include "recipe/optimizer_names.h"

namespace fp4 {

bool is_known_optimizer(const std::string& name) {
  return name == "adamw" || name == "q-adamw" || name == "root" || name == "root-bf16" || name == "q-root";
}

bool optimizer_needs_whole_tensors(const std::string& name) {
  return name == "root" || name == "root-bf16" || name == "q-root";
}

std::string known_optimizers() {
  return "adamw, q-adamw, root, root-bf16, q-root";
}

}  // namespace fp4
