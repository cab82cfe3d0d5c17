#include "recipe/recipe.h"

namespace fp4 {

bool LinearPolicy::quantized() const {
  for (const auto& s : q)
    if (s.quantized()) return true;
  return false;
}

std::string to_string(LinearKind k) {
  switch (k) {
    case LinearKind::kQkv:
      return "qkv";
    case LinearKind::kAttnOut:
      return "attn_out";
    case LinearKind::kGateUp:
      return "gate_up";
    case LinearKind::kDown:
      return "down";
  }
  return "?";
}

LinearPolicy Recipe::policy_for(int layer, int n_layers, LinearKind /*kind*/) const {
  for (int l : bf16_layers) {
    const int idx = l < 0 ? n_layers + l : l;
    if (idx == layer) return LinearPolicy{};
  }
  return linear;
}

}  // namespace fp4
