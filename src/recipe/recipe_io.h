// Loading recipes: presets from configs/recipes/<name>.toml (or any TOML path), `key=value` overrides,
// and validation of the combination.
#pragma once

#include <string>
#include <vector>

#include "recipe/recipe.h"

namespace fp4 {

// name_or_path: a preset name ("bf16", "nvidia-nvfp4", "tetrajet-v2-base") or a .toml path. Overrides are
// "linear.q2.block=16x16", "linear.rht_signs=fixed", "bf16_layers=[0,-1]", "optimizer=adamw".
// Throws fp4::Error naming the file, key or operand at fault.
Recipe load_recipe(const std::string& name_or_path, const std::vector<std::string>& overrides = {});

// Parses recipe TOML text; `origin` names it in errors.
Recipe parse_recipe(const std::string& toml_text, const std::string& origin);

// Applies one "key=value" override.
void apply_recipe_override(Recipe& recipe, const std::string& assignment);

// Throws fp4::Error if the six specs cannot be executed together (paired RHT sizes, reuse without 16x16,
// ...).
void validate(const Recipe& recipe);

// The preset names found in the recipe directory, and that directory.
std::vector<std::string> recipe_preset_names();
std::string recipe_directory();

// TOML text of a recipe (what a run directory records).
std::string to_toml(const Recipe& recipe);

}  // namespace fp4
