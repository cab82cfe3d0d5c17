// The CUDA training engine: OLMo-2 on one GPU with BF16 activations, FP32 master weights, cuBLASLt
// GEMMs and hand-written kernels (docs/CUDA_ENGINE.md). It mirrors the CPU reference engine
// (model/cpu_engine.h): same parameter names, shapes and initialisation, same loss, AdamW and clipping,
// same checkpoint tensors, so a state saved by either engine loads into the other.
// This header needs no CUDA headers: the trainer includes it from plain C++.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "model/config.h"
#include "model/engine.h"
#include "optim/cuda/device_master_weights.h"
#include "recipe/recipe.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*: named here without the CUDA headers

namespace fp4 {

// Builds the engine on CUDA device `device`, initialised from `seed` exactly as make_cpu_engine(cfg,
// recipe, seed) is (the CPU init code runs on the host; the FP32 values are uploaded). Quantized linears
// run through the NVFP4 CUDA layer (nn/cuda/quant_linear_cuda.h) with the CPU engine's random streams.
// Throws fp4::Error for an invalid config, a missing device, or a recipe this engine cannot run (a
// policy the NVFP4 CUDA layer refuses, an optimizer other than adamw, q-adamw, root, root-bf16 or q-root;
// q-adamw with data parallelism is refused by set_data_parallel; root, root-bf16 and q-root need shards of
// whole tensors there).
std::unique_ptr<TrainingEngine> make_cuda_engine(const ModelConfig& cfg, const Recipe& recipe, uint64_t seed,
                                                 int device = 0);

// The one place that refuses, naming the feature, what of a recipe the CUDA engine cannot run (an unknown
// optimizer; Q-Attn and LoRA-SVD until their kernels exist). make_cuda_engine calls it before touching the
// device; throws fp4::Error.
void check_cuda_engine_recipe(const Recipe& recipe);

// Extra entry points of the CUDA engine for tests and reference tools:
// dynamic_cast<GradientProbe*>(engine.get()).
class GradientProbe {
 public:
  virtual ~GradientProbe() = default;
  // Forward and backward over the micro-batches exactly as train_step does (same loss scaling), without
  // clipping or update; the step counter does not move. grad_norm is the unclipped global norm.
  virtual StepStats compute_gradients(std::span<const Batch> micro_batches) = 0;
  // The FP32 gradient of a parameter from the last compute_gradients or train_step (before clipping).
  virtual void read_gradient(const std::string& name, std::span<float> out) const = 0;
};

}  // namespace fp4

namespace fp4 {

// The CUDA engine's data-parallel switch: dynamic_cast<GradientOverlap*>(engine.get()). On (the
// default): each gradient bucket's reduce-scatter starts on a communication stream as soon as the last
// micro-batch's backward has queued the bucket's gradients, and the optimizer waits for the stream on
// the device. Off: the buckets are reduced on the compute stream after the backward. Both issue the
// same collectives in the same order, so they give the same bits; the switch exists to measure it.
class GradientOverlap {
 public:
  virtual ~GradientOverlap() = default;
  virtual void set_overlap(bool on) = 0;  // between steps
  virtual bool overlap() const = 0;
};

}  // namespace fp4
