// What one optimizer step takes (StepHyper, the trainer's schedule) and gives back (StepStats).
#pragma once

#include <cstdint>

namespace fp4 {

// Optimizer hyper-parameters of one step (the trainer's schedule fills lr).
struct StepHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // not applied to embeddings, norms (see ParameterInfo::weight_decay)
  float grad_clip = 1.0f;     // max global L2 norm; <= 0 disables clipping
};

struct StepStats {
  double loss = 0;       // mean cross-entropy + z-loss over all target tokens of the step
  double ce_loss = 0;    // mean cross-entropy alone
  double grad_norm = 0;  // global L2 norm before clipping
  int64_t tokens = 0;    // target tokens counted
};

}  // namespace fp4
