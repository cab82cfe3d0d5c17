// DeviceRoot: the CPU RootOptimizer (optim/root_optimizer.h) on the GPU. Every
// root_eligible matrix is stepped by ROOT / Q-Root on the device (optim/cuda/root_cuda.h) with FP32 momentum
// in one flat buffer; every other parameter (embedding, head, norm gains) by AdamW (optim/cuda/adamw_cuda.h)
// with compact FP32 moments, or, with RootOptions::rest = kQAdamW ("+q-adamw"), by a DeviceQAdamW that owns
// just those tensors and takes this optimizer's clipping factor. The global gradient norm, clipping factor
// and non-finite check are DeviceAdamW's, over all parameters, as the engines clip before the optimizer.
// Checkpoints use RootOptimizer's tensor names and layout, so a state moves between the CPU and CUDA engines.
// Data parallelism (ZeRO-1, set_shard): as the CPU RootOptimizer, each rank's shard holds whole tensors
// (make_tensor_shard_plan); the rank steps and keeps the state of its own tensors, the clipping norm sums
// every rank's share, and save_state broadcasts each tensor's state from its owner (collective).
// Speed: the matrices' steps are spread over `lanes` streams, each with its own workspace (matrix k on lane
// k % lanes), so their many small kernels overlap; the checks still run in matrix order (each waits for the
// one before), so the result and a failure's effect are those of one stream, bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/index_range.h"
#include "core/parameter_info.h"
#include "core/state_index.h"
#include "core/state_tensor.h"
#include "core/step_types.h"
#include "nn/cuda/device_params.h"
#include "ops/cuda/cuda_stream.h"
#include "optim/cuda/adamw_cuda.h"
#include "optim/cuda/device_q_adamw.h"
#include "optim/cuda/root_cuda.h"
#include "optim/root.h"

namespace fp4::cuda {

class DeviceRoot {
 public:
  // precision kFp32: "root", kBf16: "root-bf16", kNvfp4: "q-root" (opt.precision is overwritten). `seed` is
  // the run seed of Q-Root's SR streams. Throws fp4::Error for options out of range.
  // `lanes` (>= 1): streams the matrices' steps are spread over; each holds a workspace of the largest
  // matrix (the default is a measured trade of speed against that memory).
  static constexpr int kDefaultLanes = 4;
  DeviceRoot(const DeviceParams& params, cudaStream_t stream, uint64_t seed, NsPrecision precision,
             RootOptions opt = {}, int lanes = kDefaultLanes);

  std::string name() const { return root_optimizer_name(opt_.precision, opt_.rest); }
  const RootOptions& options() const { return opt_; }

  // Checks the hyper-parameters (the CPU's rules), then queues the norm, the clipping factor, the ROOT
  // step of every ROOT matrix and the AdamW update of the rest, for step step_count() + 1. Nothing is
  // updated when a gradient or loss_sums[0] is not finite; a ROOT failure stops the step at that matrix
  // (see read_control). Counted only by commit_step().
  void queue_step(DeviceParams& params, const StepHyper& hyper, const double* loss_sums);
  void commit_step();
  // Queues only the gradient norms and the non-finite check.
  void queue_norm(const DeviceParams& params, const double* loss_sums);

  // The last queued step's control and per-parameter gradient sums of squares (synchronizes). Throws
  // fp4::Error naming the matrix when its Newton-Schulz input was not finite or NS diverged: that matrix,
  // those after it and the AdamW parameters were left unchanged (the ones before it were stepped, as on
  // the CPU).
  StepControl read_control(std::vector<double>& param_sumsq) const;

  int64_t step_count() const { return step_; }

  // ZeRO-1, before the first step: keeps and steps only the tensors inside shards[comm->rank()] (a device
  // communicator); throws fp4::Error naming the parameter when that shard cuts a tensor.
  void set_shard(const DeviceParams& params, const std::vector<IndexRange>& shards, Communicator* comm);
  IndexRange shard() const { return shard_; }  // every element when not sharded

  // Zeroes the ROOT momentum and the AdamW moments of the elements in `ranges` (indices into the flat
  // parameter buffer; queued on the stream), as the CPU RootOptimizer::reset_moments: LoRA-SVD's factors
  // after a realignment. Step counters are kept. With Q-AdamW for the other parameters, a range that touches
  // one of them is refused (fp4::Error), as on the CPU.
  void reset_moments(std::span<const IndexRange> ranges);

  // RootOptimizer::save_state's tensors in its order: root.m.<name>..., root.step, then AdamW's
  // adamw.m/v.<name> of the AdamW parameters and adamw.step (or Q-AdamW's tensors of those parameters).
  std::vector<StateTensor> save_state(const DeviceParams& params) const;
  // RootOptimizer::load_state's checks (every tensor before anything changes), then the bytes to the device.
  void load_state(const StateIndex& index, const DeviceParams& params);
  int64_t state_bytes() const;

  // Names of this rank's ROOT and AdamW parameters, in parameter order.
  std::vector<std::string> root_parameters() const;
  std::vector<std::string> adamw_parameters() const;
  // For tests (synchronize): the momentum of ROOT matrix k, the last step's clipping statistics per
  // ROOT matrix; trace_ns makes the next step copy matrix k's NS operands (Q-Root) to *out.
  void read_momentum(int k, std::span<float> out) const;
  std::vector<RootStepInfo> last_step_info() const;
  void trace_ns(int k, NsTrace* out);

 private:
  struct Matrix {
    int param;
    int64_t rows, cols, offset;  // offset into m_
  };
  struct AdamPart {
    int param;
    int64_t offset;  // into am_ / av_
  };
  // A stream (lane 0: stream_ itself) with its own ROOT workspace; `checked` is recorded after each
  // matrix's check and commit, `done` after its last matrix.
  struct Lane {
    Lane(int64_t max_numel, NsPrecision precision, bool own_stream);
    cudaStream_t stream(cudaStream_t main) const { return own ? own->get() : main; }
    RootStepCuda step;
    std::unique_ptr<Stream> own;
    Event checked, done;
  };

  void build(const DeviceParams& params);
  int owner(int param) const;  // the rank whose shard holds parameter `param`

  cudaStream_t stream_;
  uint64_t seed_;
  RootOptions opt_;
  int64_t step_ = 0, adam_step_ = 0;
  int n_params_ = 0, n_chunks_ = 0;
  IndexRange shard_;
  std::vector<IndexRange> shards_;  // every rank's, with data parallelism
  Communicator* comm_ = nullptr;
  std::vector<int> piece_param_;  // the parameters this rank norms and steps, in order
  std::vector<std::string> names_;
  std::vector<int64_t> param_offset_, param_numel_;  // each parameter's place in the flat buffer
  std::vector<Matrix> roots_;
  std::vector<AdamPart> adams_;
  std::vector<int32_t> adam_first_;  // AdamW parameter j owns adam_chunks_[adam_first_[j], adam_first_[j+1])
  int n_lanes_ = kDefaultLanes;
  std::vector<std::unique_ptr<Lane>> lanes_;  // min(n_lanes_, ROOT matrices of this rank)
  Event fork_;
  std::unique_ptr<DeviceQAdamW> qadam_;  // the other parameters' optimizer with RootRest::kQAdamW
  DeviceBuffer<float> m_, am_, av_;
  DeviceBuffer<ParamChunk> chunks_, adam_chunks_;
  DeviceBuffer<int32_t> first_chunk_;
  DeviceBuffer<uint8_t> adam_decay_;
  DeviceBuffer<double> chunk_partials_, param_sumsq_;  // param_sumsq_: one per piece_param_
  DeviceBuffer<double> dp_scalars_;                    // [sum of squares, non-finite] reduced over ranks
  DeviceBuffer<StepControl> control_;
  DeviceBuffer<RootDeviceStats> stats_;
  DeviceBuffer<RootFault> fault_;
  int trace_k_ = -1;
  NsTrace* trace_ = nullptr;
};

}  // namespace fp4::cuda
