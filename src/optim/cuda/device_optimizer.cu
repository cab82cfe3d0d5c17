#include <cstring>

#include "core/error.h"
#include "optim/adamw_state.h"
#include "optim/cuda/device_adamw.h"
#include "optim/cuda/device_optimizer.h"
#include "optim/cuda/device_q_adamw.h"
#include "optim/cuda/device_root.h"
#include "recipe/optimizer_names.h"

namespace fp4::cuda {

namespace {

std::vector<ParameterInfo> infos(const DeviceParams& params) {
  std::vector<ParameterInfo> out;
  for (int i = 0; i < params.size(); ++i) out.push_back(params.at(i).info);
  return out;
}

// AdamW: FP32 moments, sharded as ZeRO-1 (tensors "adamw.m.<name>", "adamw.v.<name>", "adamw.step").
class AdamWOnDevice final : public DeviceOptimizer {
 public:
  AdamWOnDevice(const DeviceParams& params, cudaStream_t stream) : stream_(stream), adam_(params, stream) {}

  std::string name() const override { return "adamw"; }
  void queue_step(DeviceParams& params, const StepHyper& hyper, const double* loss_sums) override {
    adam_.queue_step(params, hyper, loss_sums);
  }
  void commit_step() override { adam_.commit_step(); }
  void queue_norm(const DeviceParams& params, const double* loss_sums) override {
    adam_.queue_norm(params, loss_sums);
  }
  StepControl read_control(std::vector<double>& param_sumsq) const override {
    return adam_.read_control(param_sumsq);
  }
  int64_t step_count() const override { return adam_.step_count(); }
  void reset_moments(std::span<const IndexRange> ranges) override { adam_.reset_moments(ranges); }

  void set_shard(const DeviceParams& params, const std::vector<IndexRange>& shards,
                 Communicator* comm) override {
    comm_ = comm;
    shards_ = shards;
    adam_.set_shard(params, shards_[static_cast<size_t>(comm_->rank())], comm_);
  }
  IndexRange shard() const override { return adam_.shard(); }

  // Each parameter's moments go from the gathered device copy straight into their tensors (no host copy
  // of the whole moment in between: for olmo2-370m that was 3 GB more to fault in and copy).
  std::vector<StateTensor> save_state(const DeviceParams& params) const override {
    std::vector<StateTensor> out;
    const DeviceBuffer<float> m = full_moment(params, 0), v = full_moment(params, 1);
    for (int i = 0; i < params.size(); ++i) {
      const auto& p = params.at(i);
      for (int which = 0; which < 2; ++which) {
        StateTensor t{kAdamMomentPrefix[which] + p.info.name, "F32", p.info.shape,
                      std::vector<uint8_t>(static_cast<size_t>(p.info.numel()) * sizeof(float))};
        if (!t.bytes.empty())
          copy_to_host(t.bytes.data(), (which == 0 ? m : v).data() + p.offset, t.bytes.size(), stream_);
        out.push_back(std::move(t));
      }
    }
    out.push_back(adam_step_tensor(adam_.step_count()));
    return out;
  }

  void load_state(const StateIndex& index, const DeviceParams& params) override {
    const AdamState st = find_adam_state(index, infos(params));  // checks everything first
    auto as_floats = [](const StateTensor* t) {
      return std::span<const float>(reinterpret_cast<const float*>(t->bytes.data()),
                                    t->bytes.size() / sizeof(float));
    };
    for (int i = 0; i < params.size(); ++i) {
      const size_t k = static_cast<size_t>(i);
      adam_.write_moment(0, params.at(i), as_floats(st.m[k]));
      adam_.write_moment(1, params.at(i), as_floats(st.v[k]));
    }
    adam_.set_step_count(st.step);
  }

 private:
  // A moment of every element on the device (which = 0: m, 1: v); sharded, the shards are all-gathered
  // (collective).
  DeviceBuffer<float> full_moment(const DeviceParams& params, int which) const {
    DeviceBuffer<float> full(static_cast<size_t>(params.numel()));
    if (params.numel() == 0) return full;
    const IndexRange shard = adam_.shard();
    FP4_CUDA_CHECK(cudaMemsetAsync(full.data(), 0, full.bytes(), stream_));
    if (shard.size() > 0)
      FP4_CUDA_CHECK(cudaMemcpyAsync(full.data() + shard.begin, adam_.moment(which),
                                     static_cast<size_t>(shard.size()) * sizeof(float),
                                     cudaMemcpyDeviceToDevice, stream_));
    if (comm_) comm_->all_gather(full.data(), shards_, stream_);
    return full;
  }

  cudaStream_t stream_;
  DeviceAdamW adam_;
  Communicator* comm_ = nullptr;
  std::vector<IndexRange> shards_;
};

// Q-AdamW: NVFP4 moments (tensors of the CPU QAdamW), on one process or ZeRO-1 shards whose boundaries inside
// a tensor fall on its 128-element tiles (the trainer's plan is aligned to 128).
class QAdamWOnDevice final : public DeviceOptimizer {
 public:
  QAdamWOnDevice(const DeviceParams& params, cudaStream_t stream, uint64_t seed)
      : qadam_(params, stream, seed) {}

  std::string name() const override { return "q-adamw"; }
  void queue_step(DeviceParams& params, const StepHyper& hyper, const double* loss_sums) override {
    qadam_.queue_step(params, hyper, loss_sums);
  }
  void commit_step() override { qadam_.commit_step(); }
  void queue_norm(const DeviceParams& params, const double* loss_sums) override {
    qadam_.queue_norm(params, loss_sums);
  }
  StepControl read_control(std::vector<double>& param_sumsq) const override {
    return qadam_.read_control(param_sumsq);
  }
  int64_t step_count() const override { return qadam_.step_count(); }

  void set_shard(const DeviceParams& params, const std::vector<IndexRange>& shards,
                 Communicator* comm) override {
    qadam_.set_shard(params, shards, comm);
  }
  IndexRange shard() const override { return qadam_.shard(); }

  std::vector<StateTensor> save_state(const DeviceParams& params) const override {
    return qadam_.save_state(params);
  }
  void load_state(const StateIndex& index, const DeviceParams& params) override {
    qadam_.load_state(index, params);
  }

 private:
  DeviceQAdamW qadam_;
};

// ROOT / Q-Root: ROOT for the hidden matrices, AdamW (or, "+q-adamw", Q-AdamW) for the rest (tensors of the
// CPU RootOptimizer), on one process or on whole-tensor ZeRO-1 shards.
class RootOnDevice final : public DeviceOptimizer {
 public:
  RootOnDevice(const DeviceParams& params, cudaStream_t stream, uint64_t seed, RootChoice choice)
      : root_(params, stream, seed, choice.precision, options(choice)) {}

  std::string name() const override { return root_.name(); }
  void queue_step(DeviceParams& params, const StepHyper& hyper, const double* loss_sums) override {
    root_.queue_step(params, hyper, loss_sums);
  }
  void commit_step() override { root_.commit_step(); }
  void queue_norm(const DeviceParams& params, const double* loss_sums) override {
    root_.queue_norm(params, loss_sums);
  }
  StepControl read_control(std::vector<double>& param_sumsq) const override {
    return root_.read_control(param_sumsq);
  }
  int64_t step_count() const override { return root_.step_count(); }
  void reset_moments(std::span<const IndexRange> ranges) override { root_.reset_moments(ranges); }

  // Shards of whole tensors (the trainer's make_tensor_shard_plan for this optimizer): DeviceRoot checks.
  void set_shard(const DeviceParams& params, const std::vector<IndexRange>& shards,
                 Communicator* comm) override {
    root_.set_shard(params, shards, comm);
  }
  IndexRange shard() const override { return root_.shard(); }

  std::vector<StateTensor> save_state(const DeviceParams& params) const override {
    return root_.save_state(params);
  }
  void load_state(const StateIndex& index, const DeviceParams& params) override {
    root_.load_state(index, params);
  }

 private:
  static RootOptions options(RootChoice choice) {
    RootOptions opt;
    opt.rest = choice.rest;
    return opt;
  }

  DeviceRoot root_;
};

}  // namespace

bool is_device_optimizer(const std::string& name) {
  return name == "adamw" || name == "q-adamw" || parse_root_optimizer_name(name).has_value();
}

std::string device_optimizers() {
  return known_optimizers();  // every optimizer of the CPU engine
}

std::unique_ptr<DeviceOptimizer> make_device_optimizer(const std::string& name, const DeviceParams& params,
                                                       cudaStream_t stream, uint64_t seed) {
  if (name == "adamw") return std::make_unique<AdamWOnDevice>(params, stream);
  if (name == "q-adamw") return std::make_unique<QAdamWOnDevice>(params, stream, seed);
  if (const auto root = parse_root_optimizer_name(name))
    return std::make_unique<RootOnDevice>(params, stream, seed, *root);
  FP4_THROW("optimizer = \"", name, "\" is not available in the CUDA engine (", device_optimizers(),
            " only; set the recipe field optimizer)");
}

}  // namespace fp4::cuda
