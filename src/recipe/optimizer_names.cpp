#include "recipe/optimizer_names.h"

namespace fp4 {
namespace {

// ROOT with FP32, BF16 or NVFP4 Newton-Schulz, and AdamW or (with "+q-adamw") Q-AdamW for the rest.
bool is_root_family(const std::string& name) {
  for (const char* base : {"root", "root-bf16", "q-root"})
    if (name == base || name == std::string(base) + "+q-adamw") return true;
  return false;
}

}  // namespace

bool is_known_optimizer(const std::string& name) {
  return name == "adamw" || name == "q-adamw" || is_root_family(name);
}

bool optimizer_needs_whole_tensors(const std::string& name) {
  return is_root_family(name);
}

bool optimizer_resets_factor_moments(const std::string& name) {
  return name == "adamw" || is_root_family(name);
}

std::string known_optimizers() {
  return "adamw, q-adamw, root, root-bf16, q-root, root+q-adamw, root-bf16+q-adamw, q-root+q-adamw";
}

}  // namespace fp4
