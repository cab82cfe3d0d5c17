// The CPU reference engine: OLMo-2 forward/backward in FP32 (OpenBLAS GEMMs) with AdamW.
// Every other engine (CUDA, quantized recipes) is checked against this one.
#pragma once

#include <cstdint>
#include <memory>

#include "model/config.h"
#include "model/engine.h"
#include "recipe/recipe.h"

namespace fp4 {

// Builds the model of `cfg`, initialised from `seed` (truncated normal, counter-based RNG, so the
// same seed gives the same weights on any machine). Throws fp4::Error for an invalid config or a
// recipe whose linears need a path this engine does not have (quantized linears).
std::unique_ptr<TrainingEngine> make_cpu_engine(const ModelConfig& cfg, const Recipe& recipe, uint64_t seed);

}  // namespace fp4
