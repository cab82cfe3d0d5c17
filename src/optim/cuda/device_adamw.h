// DeviceAdamW: the CPU AdamW (optim/adamw.h) and global-norm clipping (optim/grad_clip.h) on the GPU.
// FP32 moments in flat buffers with the parameters' layout; the norm, the clipping factor and the
// non-finite check are computed and consumed on the device, so a step queues without waiting.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "core/communicator.h"
#include "core/index_range.h"
#include "core/parameter_info.h"
#include "core/state_tensor.h"
#include "core/step_types.h"
#include "nn/cuda/device_params.h"
#include "optim/cuda/adamw_cuda.h"

namespace fp4::cuda {

class DeviceAdamW {
 public:
  DeviceAdamW(const DeviceParams& params, cudaStream_t stream);

  // Checks the hyper-parameters (the CPU AdamW's rules, fp4::Error otherwise), then queues the gradient
  // norm, the clipping factor and the update with the bias corrections of step step_count() + 1. The
  // update is skipped on the device when a gradient or loss_sums[0] (may be null) is not finite; the
  // step is counted only by commit_step(), once the host has seen the result.
  void queue_step(DeviceParams& params, const StepHyper& hyper, const double* loss_sums);
  void commit_step() { ++step_; }
  // Queues only the gradient norms and the non-finite check (no clipping, no update).
  void queue_norm(const DeviceParams& params, const double* loss_sums);

  // The last queued step's control and per-parameter gradient sums of squares (synchronizes). Sharded:
  // the sums cover this rank's part of each parameter (0 for parameters outside the shard).
  StepControl read_control(std::vector<double>& param_sumsq) const;

  // ZeRO-1: keep moments (zero, before the first step) for elements [shard.begin, shard.end) of the
  // flat buffers only and update only those; the clipping norm sums every rank's shard through comm
  // (collective, queued on the stream). The caller reduce-scatters the gradients before queue_step
  // and all-gathers the values after it.
  void set_shard(const DeviceParams& params, IndexRange shard, Communicator* comm);
  IndexRange shard() const { return shard_; }
  // The moments of the shard on the device (which = 0: m, 1: v), shard().size() floats.
  const float* moment(int which) const { return which == 0 ? m_.data() : v_.data(); }

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t step);

  // Host copies of one parameter's moments (which = 0: m, 1: v). read_moment needs the whole buffer
  // (no shard); write_moment writes the part of p inside the shard.
  void read_moment(int which, const Parameter& p, std::span<float> out) const;
  void write_moment(int which, const Parameter& p, std::span<const float> in);
  // Zeroes both moments of the flat-buffer elements in `ranges` that lie inside the shard (queued on the
  // stream), as the CPU AdamWOptimizer::reset_moments: LoRA-SVD's factors after a realignment.
  void reset_moments(std::span<const IndexRange> ranges);

 private:
  cudaStream_t stream_;
  int n_params_ = 0;
  int n_chunks_ = 0;
  DeviceBuffer<float> m_, v_;
  DeviceBuffer<ParamChunk> chunks_;
  DeviceBuffer<int32_t> first_chunk_;
  DeviceBuffer<uint8_t> decay_flags_;
  DeviceBuffer<double> chunk_partials_, param_sumsq_;
  DeviceBuffer<StepControl> control_;
  int64_t step_ = 0;
  // Pieces (parameter parts inside the shard) are the units of chunks_, decay flags and sums.
  IndexRange shard_;
  std::vector<int> piece_param_;  // parameter of each piece
  int n_all_params_ = 0;
  Communicator* comm_ = nullptr;
  DeviceBuffer<double> dp_scalars_;  // [sum of squares, non-finite] reduced over ranks
  void build(const DeviceParams& params);
};

}  // namespace fp4::cuda
