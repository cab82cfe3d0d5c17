// make_engine: the one place that turns a run config into a compute backend.
#pragma once

#include <memory>

#include "model/engine.h"
#include "recipe/recipe.h"
#include "train/run_config.h"

namespace fp4 {

// The engine for cfg.train.device ("cpu": the reference engine; "cuda": the GPU engine when this
// build has one), built from cfg.model and initialised from cfg.train.seed. Throws fp4::Error when
// the device is not available in this build. cuda_device: the GPU of a CUDA engine (a data-parallel
// rank uses its LOCAL_RANK).
std::unique_ptr<TrainingEngine> make_engine(const RunConfig& cfg, const Recipe& recipe, int cuda_device = 0);

// The CUDA engine lives in the fp4_cuda library, which the trainer library does not link: a program built
// with CUDA registers its factory once at start (apps/fp4train.cpp does), then device = "cuda" uses it.
using CudaEngineFactory = std::unique_ptr<TrainingEngine> (*)(const ModelConfig& cfg, const Recipe& recipe,
                                                              uint64_t seed, int device);
void register_cuda_engine(CudaEngineFactory factory);

}  // namespace fp4
