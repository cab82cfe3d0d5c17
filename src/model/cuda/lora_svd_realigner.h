// LoraSvdRealigner: LoRA-SVD's periodic realignment (RECIPES.md section 8.1, docs/LORA_SVD.md) for the CUDA
// engine, the device counterpart of what the CPU engine does after its optimizer step (LoraSvd::realign,
// then the factors' optimizer moments reset). This first form copies each layer's W_res, L1 and L2 to the
// host and runs the CPU reference's realignment on them (LoraSvd::realign_layer: randomized SVD in double,
// one layer per host thread), so the result is the CPU engine's bit for bit; it synchronizes the stream and
// costs a host SVD per layer every realign_every steps (docs/LORA_SVD.md gives the figures).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "nn/cuda/device_params.h"
#include "nn/lora_svd_linear.h"

namespace fp4::cuda {

class LoraSvdRealigner {
 public:
  // `registry`: the host model's LoRA-SVD registry, whose parameter indices are those of the DeviceParams
  // built from that model's ParameterSet. `seed`: the run seed (the sketches' streams).
  LoraSvdRealigner(const LoraSvd& registry, uint64_t seed) : registry_(registry), seed_(seed) {}

  // After optimizer step `step` (1-based): is this a realignment step? (LoraSvd::realigns_after)
  bool due(int64_t step) const { return registry_.realigns_after(step); }
  // Realignment number step / realign_every of every layer, in place in `params` (FP32 masters and their
  // BF16 copies); waits for the stream.
  void realign(int64_t step, DeviceParams& params) const;
  // Flat-buffer ranges of every L1 and L2 (whose optimizer moments reset after a realignment).
  std::vector<IndexRange> factor_ranges(const DeviceParams& params) const;
  const LoraSvd& registry() const { return registry_; }

 private:
  LoraSvd registry_;
  uint64_t seed_;
};

}  // namespace fp4::cuda
