// Q-AdamW: AdamW whose moments live only in the packed form of the quantized-moment codec
// (optim/quantized_moments.h, RECIPES.md section 8.2): m as H16-mixed NVFP4, v as sqrt(v) around a BF16
// per-128 mean with an H16-mixed NVFP4 residual. Each step decodes a tensor piece into FP32 temporaries,
// runs AdamW's arithmetic (cpu::adamw_update: same bias correction and decoupled weight decay) and
// re-encodes with fresh stochastic rounding.
//
// Layout [ours]: per parameter tensor, the moments are cut into 128-element tiles counted from the
// tensor's first element; a rank keeps a piece (whole tiles) of each tensor its shard touches, so shard
// boundaries inside a tensor must fall on its tiles. All pieces of a tensor share the tensor amax (one
// all-reduce per step) and tile t of tensor i at step s rounds with the Philox stream
// {key(run seed, s, i, moment), t}: the packed bytes do not depend on how the tiles are spread over
// ranks, so N ranks compute what one rank computes and a checkpoint resumes bit for bit on any M.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "optim/optimizer.h"
#include "optim/quantized_moments.h"

namespace fp4 {

inline constexpr int64_t kQAdamTile = 128;
inline constexpr const char* kQAdamStepName = "qadamw.step";
inline constexpr const char* kQAdamSeedName = "qadamw.seed";

// Which tensors an optimizer keeps state for and steps (every tensor when empty).
using TensorSelection = std::function<bool(const ParameterInfo&)>;

class QAdamW final : public Optimizer {
 public:
  // Throws fp4::Error when a shard boundary cuts a tensor between tiles (naming rank, tensor, element).
  // `select`: the tensors this optimizer owns (ROOT's other parameters in "q-root+q-adamw"); the others are
  // neither stepped nor saved, and the SR keys keep each tensor's index in `params`.
  QAdamW(const ParameterSet& params, const OptimizerPlacement& place, uint64_t seed,
         const TensorSelection& select = {});

  std::string name() const override { return "q-adamw"; }
  IndexRange shard() const override { return shard_; }
  void step(ParameterSet& params, const StepHyper& hyper) override;
  int64_t step_count() const override { return step_; }
  std::vector<StateTensor> save_state(const ParameterSet& params) const override;
  void load_state(const StateIndex& index, const ParameterSet& params) override;
  int64_t state_bytes() const override;

  // The decoded moments of this rank's shard (element i at i - shard().begin), for tests and tools.
  std::vector<float> decoded_first_moment() const;
  std::vector<float> decoded_second_moment() const;

 private:
  struct Piece {
    int param = 0;               // index in the ParameterSet
    int64_t begin = 0, end = 0;  // element range inside the tensor; begin is a multiple of the tile
    int64_t flat = 0;            // flat offset of element `begin`
    QuantizedMoment m, v;
  };

  std::vector<float> decoded(bool second) const;
  void check_layout(const ParameterSet& params, const char* what) const;

  OptimizerPlacement place_;
  std::vector<bool> selected_;  // per tensor of the ParameterSet
  IndexRange shard_;
  uint64_t seed_ = 0;
  int64_t step_ = 0;
  std::vector<Piece> pieces_;
};

}  // namespace fp4
