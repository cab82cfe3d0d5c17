// DeviceOptimizer: the interface the CUDA engine steps through (AdamW, Q-AdamW, ROOT, Q-Root on the GPU),
// the device counterpart of the CPU engine's Optimizer (optim/optimizer.h) and parallel to it in shape: a
// step (queued on the engine's stream, counted once the host has seen its control), the step count, the
// ZeRO-1 shard, and the state as the CPU optimizer's named full tensors, so a checkpoint moves between the
// engines. One factory, make_device_optimizer, maps the recipe's optimizer name to an implementation.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/error.h"
#include "core/index_range.h"
#include "core/parameter_info.h"
#include "core/state_index.h"
#include "core/state_tensor.h"
#include "core/step_types.h"
#include "nn/cuda/device_params.h"
#include "optim/cuda/adamw_cuda.h"

namespace fp4::cuda {

class DeviceOptimizer {
 public:
  virtual ~DeviceOptimizer() = default;
  virtual std::string name() const = 0;  // the recipe's optimizer value

  // Checks the hyper-parameters (fp4::Error), then queues the gradient norm, the clipping factor and the
  // update of step step_count() + 1; nothing is updated on the device when a gradient or loss_sums[0] is
  // not finite. The step counts only from commit_step(), once the host has read the control.
  virtual void queue_step(DeviceParams& params, const StepHyper& hyper, const double* loss_sums) = 0;
  virtual void commit_step() = 0;
  // Queues only the gradient norms and the non-finite check (no clipping, no update).
  virtual void queue_norm(const DeviceParams& params, const double* loss_sums) = 0;
  // The last queued step's control and per-parameter gradient sums of squares (synchronizes); throws
  // fp4::Error naming the tensor where the optimizer's own state went non-finite.
  virtual StepControl read_control(std::vector<double>& param_sumsq) const = 0;
  virtual int64_t step_count() const = 0;
  // Zeroes the moments of these element ranges (LoRA-SVD's factors after a realignment, as the CPU
  // optimizers' reset_moments). Optimizers whose device form lacks it refuse, naming themselves; the
  // engine's recipe check refuses such recipes before a run starts.
  virtual void reset_moments(std::span<const IndexRange> ranges) {
    (void)ranges;
    FP4_THROW("optimizer \"", name(), "\" cannot reset moments on the CUDA engine (LoRA-SVD realignment)");
  }

  // ZeRO-1. set_shard (before the first step) keeps state for shards[comm->rank()] only; the clipping norm
  // then sums every rank's shard through comm. It throws fp4::Error, naming the optimizer, for shards it
  // cannot take (q-adamw: a boundary that cuts a 128-element tile; root and q-root: one that cuts a tensor).
  // The engine reduce-scatters the gradients before queue_step and all-gathers the values after it.
  virtual void set_shard(const DeviceParams& params, const std::vector<IndexRange>& shards,
                         Communicator* comm) = 0;
  virtual IndexRange shard() const = 0;  // every element when not sharded

  // The CPU optimizer's tensors, in its order, of every element (collective when sharded).
  virtual std::vector<StateTensor> save_state(const DeviceParams& params) const = 0;
  // Checks every tensor it needs before changing anything, then keeps this rank's shard.
  virtual void load_state(const StateIndex& index, const DeviceParams& params) = 0;
};

// Any name of the CPU engine (known_optimizers: adamw, q-adamw, the ROOT forms with or without "+q-adamw") on
// the device of `stream`; `seed` is the run seed (stochastic
// rounding). Throws fp4::Error naming the value and the known ones otherwise.
std::unique_ptr<DeviceOptimizer> make_device_optimizer(const std::string& name, const DeviceParams& params,
                                                       cudaStream_t stream, uint64_t seed);

// The names make_device_optimizer takes, for the engine's recipe check and messages.
bool is_device_optimizer(const std::string& name);
std::string device_optimizers();  // known_optimizers()

}  // namespace fp4::cuda
