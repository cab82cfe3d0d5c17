// make_engine: the one place that turns a run config into a compute backend.
#pragma once

#include <memory>

#include "model/engine.h"
#include "recipe/recipe.h"
#include "train/run_config.h"

namespace fp4 {

// The engine for cfg.train.device ("cpu": the reference engine; "cuda": the GPU engine when this
// build has one), built from cfg.model and initialised from cfg.train.seed. Throws fp4::Error when
// the device is not available in this build.
std::unique_ptr<TrainingEngine> make_engine(const RunConfig& cfg, const Recipe& recipe);

}  // namespace fp4
