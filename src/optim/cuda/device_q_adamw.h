// DeviceQAdamW: the CPU QAdamW (optim/q_adamw.h) on the GPU, on one process or ZeRO-1 shards. The packed
// moments (codes, E4M3 scales, BF16 tile means) of the pieces this rank keeps live on the device in flat
// buffers, piece after piece, with the tensor scales of every tensor; the gradient norm, clipping and
// non-finite check are DeviceAdamW's (optim/cuda/adamw_cuda.h). Sharded, as the CPU QAdamW: a rank keeps the
// whole 128-element tiles of each tensor its shard touches (a shard boundary that cuts a tile is refused),
// and each step's tensor amaxes are combined over the ranks (one F64 all-reduce), so N ranks write one
// process's bytes. Checkpoints use QAdamW's tensor names and bytes, full tensors whatever the rank count,
// so a state moves between the CPU and CUDA engines and between rank counts.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/communicator.h"
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
  // Zero moments for every parameter of `params` that `select` accepts (every one when empty: QAdamW's
  // TensorSelection); `seed` is the run seed the SR keys derive from (each tensor keyed by its index in
  // `params`, selected or not, as on the CPU).
  DeviceQAdamW(const DeviceParams& params, cudaStream_t stream, uint64_t seed,
               const std::function<bool(const ParameterInfo&)>& select = {});

  // As DeviceAdamW::queue_step: hyper-parameters checked on the host, then the norm, clipping factor and
  // Q-AdamW update of step step_count() + 1 queued; counted only by commit_step(). Sharded, the norm and the
  // tensor amaxes are all-reduced through the communicator (collective) and only this rank's pieces of the
  // values are written: the caller reduce-scatters the gradients before and all-gathers the values after.
  void queue_step(DeviceParams& params, const StepHyper& hyper, const double* loss_sums);
  // The update alone, with the clipping factor and skip flag of a `control` another optimizer computed over
  // all parameters (DeviceRoot's, for ROOT's other tensors): hyper-parameters checked, then the measure pass,
  // the amax all-reduce when sharded (collective) and the write pass.
  void queue_update(DeviceParams& params, const StepHyper& hyper, const StepControl* control);
  void commit_step() { ++step_; }
  // Throws fp4::Error naming the parameter when the last queued update's new moments were not finite
  // (synchronizes; nothing was updated then).
  void check_fault() const;
  // One process only (GradientProbe).
  void queue_norm(const DeviceParams& params, const double* loss_sums);

  // The last queued step's control and per-parameter gradient sums of squares (synchronizes; sharded, the
  // sums cover this rank's part of each parameter). Throws fp4::Error naming the parameter when the step's
  // new moments were not finite on any rank (nothing was updated).
  StepControl read_control(std::vector<double>& param_sumsq) const;

  // ZeRO-1 (before the first step): keep the moments of shards[comm->rank()] only, zero. shards are the
  // ranks' contiguous ranges of the flat buffer from 0 to params.numel(); a boundary inside a tensor must
  // fall on its 128-element tiles (fp4::Error naming the rank, the shard, the parameter and the element).
  void set_shard(const DeviceParams& params, const std::vector<IndexRange>& shards, Communicator* comm);
  IndexRange shard() const { return shard_; }

  int64_t step_count() const { return step_; }
  uint64_t seed() const { return seed_; }

  // QAdamW::save_state's tensors (qadamw.{m,v}.{codes,scales,scale}.<name>, qadamw.v.mean.<name>,
  // qadamw.step, qadamw.seed), in its order, of every tile (sharded: collective, every rank returns them).
  std::vector<StateTensor> save_state(const DeviceParams& params) const;
  // QAdamW::load_state's checks (every tensor before anything changes), then this rank's tiles to the device.
  void load_state(const StateIndex& index, const DeviceParams& params);
  int64_t state_bytes() const;

 private:
  // The pieces of `shard` (whole tiles of each tensor it touches); throws naming a tile it cuts.
  std::vector<QAdamPiece> pieces_in(IndexRange shard, int rank) const;
  // Buffers, norm chunks and the zero state of these pieces.
  void build(std::vector<QAdamPiece> pieces);
  QAdamPacked packed();

  // The packed moments in the one-process layout (every tensor's tiles, tensor after tensor) on the host.
  struct HostState {
    std::vector<uint8_t> codes[2], scales[2];
    std::vector<float> scale[2];
    std::vector<uint16_t> mean;
  };
  HostState full_host_state() const;  // sharded: collective

  cudaStream_t stream_;
  uint64_t seed_ = 0;
  int64_t step_ = 0;
  int n_params_ = 0;
  std::vector<std::string> names_;
  std::vector<bool> selected_;  // per parameter: its moments are kept here
  std::vector<int64_t> param_offset_, param_numel_;
  std::vector<int32_t> decay_;            // per parameter: 1 when weight decay applies
  std::vector<int64_t> full_first_tile_;  // per parameter: its first tile in the one-process layout
  int64_t full_tiles_ = 0;

  // This rank's part (everything on one process).
  IndexRange shard_;
  Communicator* comm_ = nullptr;
  int n_pieces_ = 0, n_chunks_ = 0;
  int64_t tiles_ = 0;
  std::vector<QAdamPiece> host_pieces_;
  DeviceBuffer<QAdamPiece> pieces_;
  DeviceBuffer<uint8_t> codes_[2], scales_[2];
  DeviceBuffer<float> scale_[2];  // every tensor's [S_dec, amax] (the same on every rank)
  DeviceBuffer<uint16_t> mean_;
  DeviceBuffer<float> amax_;
  DeviceBuffer<uint32_t> fault_;
  DeviceBuffer<ParamChunk> chunks_;  // of the pieces (norm units: one per piece)
  DeviceBuffer<int32_t> first_chunk_;
  DeviceBuffer<double> chunk_partials_, param_sumsq_;
  DeviceBuffer<StepControl> control_;
  DeviceBuffer<double> dp_scalars_, amax_slots_;  // sharded: the norm's and the amaxes' all-reduce buffers
};

}  // namespace fp4::cuda
