// DeviceQAdamW: the CPU QAdamW (optim/q_adamw.h) on the GPU for one process. The packed moments (codes,
// E4M3 scales, tensor scales, BF16 tile means) live on the device in flat buffers, tensor after tensor;
// the gradient norm, clipping and non-finite check are DeviceAdamW's (optim/cuda/adamw_cuda.h). Checkpoints
// use QAdamW's tensor names and bytes, so a state moves between the CPU and CUDA engines.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/index_range.h"
#include "core/parameter_info.h"
#include "core/state_index.h"
#include "core/state_tensor.h"
#include "core/step_types.h"
#include "nn/cuda/device_params.h"
#include "optim/cuda/adamw_cuda.h"
#include "optim/cuda/q_adamw_cuda.h"

namespace fp4::cuda {

class DeviceQAdamW {
 public:
  // Zero moments for every parameter of `params`; `seed` is the run seed the SR keys derive from.
  DeviceQAdamW(const DeviceParams& params, cudaStream_t stream, uint64_t seed);

  // As DeviceAdamW::queue_step: hyper-parameters checked on the host, then the norm, clipping factor and
  // Q-AdamW update of step step_count() + 1 queued; counted only by commit_step().
  void queue_step(DeviceParams& params, const StepHyper& hyper, const double* loss_sums);
  void commit_step() { ++step_; }
  void queue_norm(const DeviceParams& params, const double* loss_sums);

  // The last queued step's control and per-parameter gradient sums of squares (synchronizes). Throws
  // fp4::Error naming the parameter when the step's new moments were not finite (nothing was updated).
  StepControl read_control(std::vector<double>& param_sumsq) const;

  int64_t step_count() const { return step_; }
  uint64_t seed() const { return seed_; }

  // QAdamW::save_state's tensors (qadamw.{m,v}.{codes,scales,scale}.<name>, qadamw.v.mean.<name>,
  // qadamw.step, qadamw.seed), in its order.
  std::vector<StateTensor> save_state(const DeviceParams& params) const;
  // QAdamW::load_state's checks (every tensor before anything changes), then the bytes to the device.
  void load_state(const StateIndex& index, const DeviceParams& params);
  int64_t state_bytes() const;

 private:
  cudaStream_t stream_;
  uint64_t seed_ = 0;
  int64_t step_ = 0;
  int n_params_ = 0, n_chunks_ = 0;
  int64_t tiles_ = 0;
  std::vector<QAdamTensor> host_tensors_;
  DeviceBuffer<QAdamTensor> tensors_;
  DeviceBuffer<uint8_t> codes_[2], scales_[2];
  DeviceBuffer<float> scale_[2];
  DeviceBuffer<uint16_t> mean_;
  DeviceBuffer<float> amax_;
  DeviceBuffer<uint32_t> fault_;
  DeviceBuffer<ParamChunk> chunks_;
  DeviceBuffer<int32_t> first_chunk_;
  DeviceBuffer<double> chunk_partials_, param_sumsq_;
  DeviceBuffer<StepControl> control_;
  std::vector<std::string> names_;
  QAdamPacked packed();

  // A host copy of the packed moments, sized as the device buffers (checkpoints go through it).
  struct HostState {
    std::vector<uint8_t> codes[2], scales[2];
    std::vector<float> scale[2];
    std::vector<uint16_t> mean;
  };
  HostState sized_host_state() const;
};

}  // namespace fp4::cuda
