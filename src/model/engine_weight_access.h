// EngineWeightAccess: OsciReset's WeightAccess (optim/osci_reset_backend.h) over a TrainingEngine.
#pragma once

#include <span>
#include <string>

#include "model/engine.h"
#include "optim/osci_reset_backend.h"

namespace fp4 {

// A training engine's FP32 masters as WeightAccess, through read_parameter / write_parameter (the host form's
// access in the trainer and the tests).
class EngineWeightAccess final : public WeightAccess {
 public:
  explicit EngineWeightAccess(TrainingEngine& engine) : engine_(engine) {}
  void read(const std::string& name, std::span<float> out) override { engine_.read_parameter(name, out); }
  void write(const std::string& name, std::span<const float> in) override {
    engine_.write_parameter(name, in);
  }

 private:
  TrainingEngine& engine_;
};

}  // namespace fp4
