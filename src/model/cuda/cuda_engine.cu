#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "core/error.h"
#include "model/cuda/batch_upload.h"
#include "model/cuda/cuda_engine.h"
#include "model/cuda/cuda_olmo2.h"
#include "model/cuda/lora_svd_realigner.h"
#include "model/engine_common.h"
#include "model/olmo2.h"
#include "model/state_index.h"
#include "model/step_features.h"
#include "nn/cuda/device_params.h"
#include "nn/out_control.h"
#include "ops/cuda/cuda_stream.h"
#include "ops/cuda/elementwise_cuda.h"
#include "ops/cuda/gemm_cublaslt.h"
#include "optim/cuda/device_optimizer.h"
#include "optim/cuda/osci_device_backend.h"
#include "optim/grad_buckets.h"
#include "tensor/tensor.h"

namespace fp4 {

namespace {

int select_device(int device) {
  int count = 0;
  const cudaError_t st = cudaGetDeviceCount(&count);
  FP4_CHECK(st == cudaSuccess && count > 0, "CUDA engine: no CUDA device available (",
            st == cudaSuccess ? "none found" : cudaGetErrorString(st), ")");
  FP4_CHECK(device >= 0 && device < count, "CUDA engine: device ", device, " does not exist (", count,
            " CUDA device(s))");
  FP4_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

using cuda::Event;
using cuda::Stream;

// Where the gradient reductions of an overlapped step run: a non-blocking stream at the highest
// priority (NCCL kernels start as soon as their bucket is ready instead of queuing behind compute),
// one event per bucket recorded on the compute stream, one recorded after the last reduction.
struct CommLane {
  static int highest_priority() {
    int least = 0, greatest = 0;
    FP4_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    return greatest;
  }
  explicit CommLane(size_t buckets) : stream(cudaStreamNonBlocking, highest_priority()), ready(buckets) {}
  Stream stream;
  std::vector<Event> ready;
  Event done;
};

class CudaEngine final : public TrainingEngine,
                         public GradientProbe,
                         public GradientOverlap,
                         public DeviceMasterWeights,
                         public OsciBackendSource,
                         public OutControlSource {
 public:
  CudaEngine(const ModelConfig& cfg, const Recipe& recipe, uint64_t seed, int device)
      : device_(select_device(device)), cfg_(cfg), uploader_(stream_.get()), sums_(2) {
    check_cuda_engine_recipe(recipe);
    cudaDeviceProp prop{};
    FP4_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    device_name_ = "cuda:" + std::to_string(device_) + " (" + prop.name + ")";
    {
      // The CPU model defines the parameter layout and draws the initial values; the real recipe's
      // linear layers are built by CudaOlmo2 below (this host model never runs).
      // With lora_svd the layout holds each quantized linear's factors and the initial values are the CPU
      // engine's after its initial realignment, so the host model is built with the parts of the recipe
      // that decide both.
      Olmo2Model host(cfg, parameter_layout_recipe(recipe));
      host.init_parameters(seed);
      params_ = std::make_unique<cuda::DeviceParams>(host.params(), stream_.get());
      if (const LoraSvd* lora = host.lora_svd())
        lora_ = std::make_unique<cuda::LoraSvdRealigner>(*lora, seed);
    }
    opt_ = cuda::make_device_optimizer(recipe.optimizer, *params_, stream_.get(), seed);
    model_ = std::make_unique<cuda::CudaOlmo2>(cfg_, recipe, *params_, gemm_, stream_.get());
    model_->quant_context().seed = seed;
    recipe_ = recipe;
    features_ = make_features(StepContext{});
  }

  ~CudaEngine() override {
    cudaSetDevice(device_);
    // Nothing queued may outlive the buffers (a failed step may have left reductions queued).
    if (lane_) cudaStreamSynchronize(lane_->stream.get());
    cudaStreamSynchronize(stream_.get());
  }

  const ModelConfig& config() const override { return cfg_; }
  std::string device_name() const override { return device_name_; }
  OutControl* out_control() override { return model_->out_control(); }

  StepStats train_step(std::span<const Batch> micro_batches, const StepHyper& hyper) override {
    set_device();
    const int64_t step = optimizer_steps() + 1;
    const std::string where = "train step " + std::to_string(step);
    for (const auto& f : features_) f->begin_step(step);
    const int64_t total = run_micro_batches(micro_batches, where);
    if (comm_) overlap_ ? wait_for_reductions() : reduce_gradients();
    opt_->queue_step(*params_, hyper, sums_.data());
    if (comm_) gather_parameters();
    const StepStats stats = finish(where, total);
    for (const auto& f : features_) f->end_step(step);
    opt_->commit_step();
    for (const auto& f : features_) f->after_update(step);
    return stats;
  }

  // Every optimizer shards (q-adamw on 128-element tiles, the ROOT family on whole tensors) and LoRA-SVD runs
  // on every rank: its gradient split is linear in each rank's dW and comes before the reduce-scatter, and
  // its realignment after the all-gather is deterministic on identical parameters, so every rank realigns
  // alike and then zeroes the factors' moments in its own shard.
  void set_data_parallel(const DataParallel& dp) override {
    set_device();
    FP4_CHECK(dp.comm != nullptr && dp.comm->device_memory(), "CUDA engine: data parallelism needs a device ",
              "communicator (got ", dp.comm ? dp.comm->backend() : std::string("none"), ")");
    const int world = dp.comm->world_size();
    FP4_CHECK(static_cast<int>(dp.shards.size()) == world, "CUDA engine: ", dp.shards.size(), " shards for ",
              world, " ranks");
    int64_t covered = 0;
    for (const auto& r : dp.shards) covered += r.size();
    FP4_CHECK(covered == params_->numel(), "CUDA engine: the shards cover ", covered, " of ",
              params_->numel(), " parameters");
    FP4_CHECK(optimizer_steps() == 0, "CUDA engine: data parallelism must be set before the first step");
    // First, so that a shard the optimizer refuses (q-adamw: one that cuts a 128-element tile; the ROOT
    // family: one that cuts a tensor) leaves the engine without data parallelism.
    opt_->set_shard(*params_, dp.shards, dp.comm);
    comm_ = dp.comm;
    shards_ = dp.shards;
    buckets_ = gradient_buckets(parameters());
    bucket_ranges_.clear();
    for (const auto& b : buckets_) bucket_ranges_.push_back(bucket_shards(b.range, shards_));
    lane_ = std::make_unique<CommLane>(buckets_.size());
  }

  std::span<const std::unique_ptr<StepFeature>> features() override { return features_; }
  void set_step_context(const StepContext& ctx) override {
    FP4_CHECK(optimizer_steps() == 0, "CUDA engine: the step context must be set before the first step");
    features_ = make_features(ctx);
  }

  void set_overlap(bool on) override { overlap_ = on; }
  bool overlap() const override { return overlap_; }

  StepStats compute_gradients(std::span<const Batch> micro_batches) override {
    set_device();
    FP4_CHECK(comm_ == nullptr, "compute_gradients is not available with data parallelism");
    const std::string where = "compute_gradients";
    const int64_t total = run_micro_batches(micro_batches, where);
    opt_->queue_norm(*params_, sums_.data());
    return finish(where, total);
  }

  void read_gradient(const std::string& name, std::span<float> out) const override {
    set_device();
    params_->read_grad(params_->require(name), out);
  }

  StepStats evaluate(const Batch& batch) override {
    set_device();
    check_batch(batch, cfg_, "evaluate", true);
    const auto up = uploader_.upload({&batch, 1}, true, false);
    FP4_CUDA_CHECK(cudaMemsetAsync(sums_.data(), 0, sums_.bytes(), stream_.get()));
    model_->forward(up[0], ForwardMode::kInference);
    model_->loss(up[0], false, 0.0f, sums_.data());
    double sums[2];
    cuda::copy_to_host(sums, sums_.data(), sizeof(sums), stream_.get());
    StepStats stats;
    stats.tokens = count_targets(batch);
    if (stats.tokens > 0) stats.loss = stats.ce_loss = sums[1] / static_cast<double>(stats.tokens);
    return stats;
  }

  void last_logits(const Batch& batch, std::span<float> out) override {
    set_device();
    check_batch(batch, cfg_, "last_logits", false);
    const size_t need = static_cast<size_t>(batch.batch) * static_cast<size_t>(cfg_.vocab_size);
    FP4_CHECK(out.size() == need, "last_logits: output holds ", out.size(), " floats, need ", need);
    const auto up = uploader_.upload({&batch, 1}, false, false);
    model_->forward(up[0], ForwardMode::kInference);
    model_->last_logits(out);
  }

  std::vector<ParameterInfo> parameters() const override {
    std::vector<ParameterInfo> out;
    for (int i = 0; i < params_->size(); ++i) out.push_back(params_->at(i).info);
    return out;
  }

  void read_parameter(const std::string& name, std::span<float> out) const override {
    set_device();
    params_->read_value(params_->require(name), out);
  }

  void write_parameter(const std::string& name, std::span<const float> in) override {
    set_device();
    params_->write_value(params_->require(name), in);
  }

  std::span<float> device_master(const std::string& name) override {
    set_device();
    const int i = params_->require(name);
    return {params_->value(i), static_cast<size_t>(params_->at(i).info.numel())};
  }

  CUstream_st* device_stream() override {
    set_device();
    return stream_.get();
  }

  void master_written(const std::string& name) override {
    set_device();
    const int i = params_->require(name);
    cuda::f32_to_bf16(params_->value(i), params_->values_bf16() + params_->at(i).offset,
                      params_->at(i).info.numel(), stream_.get());
  }

  // OsciReset's device form. Data parallelism keeps the host form (docs/OSCI_RESET.md), and so does
  // OutControl: only the host form restricts a weight to its FP4 columns after the freeze.
  std::unique_ptr<OsciBackend> make_osci_backend() override {
    if (comm_ != nullptr || model_->out_control() != nullptr) return nullptr;
    return std::make_unique<cuda::OsciDeviceBackend>(*this);
  }

  // The CPU engine's tensors: every parameter, then its AdamW moments, then the step counter.
  std::vector<StateTensor> save_state() const override {
    set_device();
    std::vector<StateTensor> out;
    for (int i = 0; i < params_->size(); ++i) {
      const auto& p = params_->at(i);
      std::vector<float> buf(static_cast<size_t>(p.info.numel()));
      params_->read_value(i, buf);
      out.push_back(f32_state_tensor(p.info.name, p.info.shape, buf));
    }
    for (auto& t : opt_->save_state(*params_)) out.push_back(std::move(t));  // the CPU optimizer's tensors
    append_feature_state(features_, out);                                    // last, as in the CPU engine
    return out;
  }

  // Tensors this engine does not know (a trainer's own entries) are left alone. Everything is checked
  // before anything changes, so a bad state leaves the engine as it was.
  void load_state(const std::vector<StateTensor>& state) override {
    set_device();
    const StateIndex index(state);
    std::vector<const StateTensor*> values;
    for (int i = 0; i < params_->size(); ++i)
      values.push_back(&index.require(params_->at(i).info.name, "F32", params_->at(i).info.shape));
    opt_->load_state(index, *params_);  // checks all of its tensors before keeping any
    for (int i = 0; i < params_->size(); ++i) {
      const StateTensor* t = values[static_cast<size_t>(i)];
      params_->write_value(
          i, {reinterpret_cast<const float*>(t->bytes.data()), t->bytes.size() / sizeof(float)});
    }
    for (const auto& f : features_) f->load_state(state);
  }

 private:
  void set_device() const { FP4_CUDA_CHECK(cudaSetDevice(device_)); }

  // The CUDA backends of the recipe's features (check_cuda_engine_recipe refuses the others): OutControl's
  // device sums, OsciReset's device form.
  StepFeatures make_features(const StepContext& ctx) {
    StepFeatureBackends b;
    b.engine = this;
    b.out_control = model_->out_control();
    b.out_control_sums = [this] { collect_out_control_sums(); };
    b.osci_device_backend = [this] { return make_osci_backend(); };
    // Realignment number `index`, then the factors' moments restart (as the CPU engine). Data-parallel, every
    // rank realigns its full copy of the all-gathered parameters alike and its optimizer zeroes only the part
    // of the factors' moments in its shard.
    if (lora_) {
      b.lora_svd = &lora_->registry();
      b.lora_svd_realign = [this](int64_t index) {
        lora_->realign(index * lora_->registry().config().realign_every, *params_);
        opt_->reset_moments(lora_->factor_ranges(*params_));
      };
    }
    return make_step_features(recipe_, ctx, b);
  }

  // OutControl's step sums (before its end_step): the layers' device sums join the registry's step sums;
  // with data parallelism they are summed over the ranks in one host collective (the device
  // communicator's all_reduce_sum takes device memory), so every rank freezes the same channels.
  void collect_out_control_sums() {
    OutControl* oc = model_->out_control();
    model_->collect_out_control_sums();
    if (comm_) {
      std::vector<double> all;
      for (OutChannels* l : oc->layers()) {
        const std::span<double> s = l->step_sums();
        all.insert(all.end(), s.begin(), s.end());
      }
      if (!all.empty())
        comm_->host_all_reduce_sum(all.data(), static_cast<int64_t>(all.size()), CommType::kF64);
      size_t at = 0;
      for (OutChannels* l : oc->layers()) {
        const std::span<double> s = l->step_sums();
        std::copy(all.begin() + static_cast<std::ptrdiff_t>(at),
                  all.begin() + static_cast<std::ptrdiff_t>(at + s.size()), s.begin());
        at += s.size();
      }
    }
  }

  int64_t optimizer_steps() const { return opt_->step_count(); }

  // Not overlapped: sums the gradients over ranks bucket by bucket in backward order (reduce-scatter
  // to the shard owners), queued on the engine's stream after the whole backward.
  void reduce_gradients() {
    comm_->all_reduce_sum(sums_.data(), 2, CommType::kF64,
                          stream_.get());  // the job's loss, for logs and skips
    for (const auto& r : bucket_ranges_) comm_->reduce_scatter_sum(params_->grads(), r, stream_.get());
  }

  // Overlapped: called from the last micro-batch's backward (CudaOlmo2::on_gradients_queued) once the
  // work completing the gradients of `block` is queued. The lane waits for exactly that work, then
  // reduces the bucket while the compute stream goes on with the next block. The collectives are the
  // same calls in the same order as reduce_gradients()'s, so the sums are the same bits.
  void queue_bucket(int block) {
    FP4_CHECK(next_bucket_ < buckets_.size() && buckets_[next_bucket_].block == block,
              "gradient overlap: the backward completed block ", block, " where bucket ",
              next_bucket_ < buckets_.size() ? buckets_[next_bucket_].name : std::string("(none left)"),
              " was expected");
    const cudaEvent_t ready = lane_->ready[next_bucket_].get();
    const cudaStream_t comm = lane_->stream.get();
    FP4_CUDA_CHECK(cudaEventRecord(ready, stream_.get()));
    FP4_CUDA_CHECK(cudaStreamWaitEvent(comm, ready, 0));
    // The loss sums are final before the backward starts; reduced first as in reduce_gradients().
    if (next_bucket_ == 0) comm_->all_reduce_sum(sums_.data(), 2, CommType::kF64, comm);
    comm_->reduce_scatter_sum(params_->grads(), bucket_ranges_[next_bucket_], comm);
    ++next_bucket_;
  }

  // The optimizer (compute stream) waits on the device for the lane's last reduction; the host does not.
  void wait_for_reductions() {
    FP4_CHECK(next_bucket_ == buckets_.size(), "gradient overlap: the backward reported ", next_bucket_,
              " of ", buckets_.size(), " gradient buckets");
    FP4_CUDA_CHECK(cudaEventRecord(lane_->done.get(), lane_->stream.get()));
    FP4_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), lane_->done.get(), 0));
  }

  // Every rank's updated shard to every rank, then the BF16 copy of the parts this rank did not update.
  void gather_parameters() {
    comm_->all_gather(params_->values(), shards_, stream_.get());
    const IndexRange mine = opt_->shard();
    if (mine.begin > 0)
      cuda::f32_to_bf16(params_->values(), params_->values_bf16(), mine.begin, stream_.get());
    if (mine.end < params_->numel())
      cuda::f32_to_bf16(params_->values() + mine.end, params_->values_bf16() + mine.end,
                        params_->numel() - mine.end, stream_.get());
  }

  // Queues forward, loss and backward of every micro-batch with the step's loss scaling; returns the
  // step's target count. Gradients are zeroed first, the loss sums accumulate in sums_. With overlap,
  // the last micro-batch's backward queues the bucket reductions (earlier ones only accumulate).
  int64_t run_micro_batches(std::span<const Batch> micro_batches, const std::string& where) {
    FP4_CHECK(!micro_batches.empty(), where, ": no micro-batches");
    int64_t total = 0;
    for (size_t i = 0; i < micro_batches.size(); ++i) {
      check_batch(micro_batches[i], cfg_, where + " micro-batch " + std::to_string(i), true);
      total += count_targets(micro_batches[i]);
    }
    if (comm_) comm_->host_all_reduce_sum(&total, 1, CommType::kI64);  // the job's targets
    FP4_CHECK(total > 0, where, ": no target tokens in ", micro_batches.size(), " micro-batches");
    // Each token's loss is divided by the step's total token count (all ranks), as in the CPU engine.
    const float grad_scale = static_cast<float>(1.0 / static_cast<double>(total));
    const auto up = uploader_.upload(micro_batches, true, true);
    params_->zero_grads();
    FP4_CUDA_CHECK(cudaMemsetAsync(sums_.data(), 0, sums_.bytes(), stream_.get()));
    const auto step = static_cast<uint64_t>(optimizer_steps() + 1);
    for (size_t i = 0; i < up.size(); ++i) {
      const cuda::DeviceBatch& mb = up[i];
      // Quantized layers draw fresh bits per forward, indexed by (step, micro-batch) as in the CPU engine.
      model_->quant_context().call = (step << 8) | (i & 0xFF);
      model_->forward(mb);
      model_->loss(mb, true, grad_scale, sums_.data());
      const bool reduce_now = comm_ != nullptr && overlap_ && i + 1 == up.size();
      next_bucket_ = 0;
      model_->on_gradients_queued = nullptr;
      if (reduce_now) model_->on_gradients_queued = [this](int block) { queue_bucket(block); };
      model_->backward(mb);
      model_->on_gradients_queued = nullptr;
    }
    return total;
  }

  // The step's one wait: loss sums, norm and per-parameter sums of squares. Throws, naming the cause,
  // when the loss or a gradient is not finite (the update was skipped on the device).
  StepStats finish(const std::string& where, int64_t total) {
    std::vector<double> sumsq;
    const cuda::StepControl ctl = opt_->read_control(sumsq);
    double sums[2];
    cuda::copy_to_host(sums, sums_.data(), sizeof(sums), stream_.get());
    if (!std::isfinite(sums[0]))
      FP4_THROW(where, ": loss is ", sums[0] / static_cast<double>(total), "; ", diagnose_forward());
    // Scanned in backward order (LM head first): the parameter closest to where the NaN/Inf entered.
    for (int i = params_->size(); i-- > 0;) {
      if (std::isfinite(sumsq[static_cast<size_t>(i)])) continue;
      const auto& p = params_->at(i);
      std::vector<float> g(static_cast<size_t>(p.info.numel()));
      params_->read_grad(i, g);
      for (size_t j = 0; j < g.size(); ++j)
        if (!std::isfinite(g[j]))
          FP4_THROW(where, ": non-finite gradient (", g[j], ") in parameter ", p.info.name, " at element ",
                    j);
      FP4_THROW(where, ": the gradient of parameter ", p.info.name, " overflows its sum of squares");
    }
    FP4_CHECK(!ctl.skip, where, ": the global gradient norm is not finite (", ctl.grad_norm, ")");
    StepStats stats;
    stats.loss = sums[0] / static_cast<double>(total);
    stats.ce_loss = sums[1] / static_cast<double>(total);
    stats.grad_norm = ctl.grad_norm;
    stats.tokens = total;
    return stats;
  }

  // Why the loss is not finite: a parameter holding NaN/Inf, else the first non-finite activation.
  std::string diagnose_forward() const {
    for (int i = 0; i < params_->size(); ++i) {
      const auto& p = params_->at(i);
      std::vector<float> w(static_cast<size_t>(p.info.numel()));
      params_->read_value(i, w);
      for (size_t j = 0; j < w.size(); ++j)
        if (!std::isfinite(w[j]))
          return "parameter " + p.info.name + " holds a non-finite value (" + std::to_string(w[j]) +
                 " at element " + std::to_string(j) + ")";
    }
    const std::string act = model_->first_nonfinite_activation();
    if (!act.empty()) return "the first non-finite activation (last micro-batch) is the " + act;
    return "all activations are finite: the logits overflow the loss";
  }

  int device_;
  std::string device_name_;
  ModelConfig cfg_;
  Stream stream_;
  cuda::GemmRunner gemm_;
  cuda::BatchUploader uploader_;
  DeviceBuffer<double> sums_;  // [loss, ce] of the current step or evaluation
  std::unique_ptr<cuda::DeviceParams> params_;
  std::unique_ptr<cuda::DeviceOptimizer> opt_;  // the recipe's optimizer (cuda::make_device_optimizer)
  std::unique_ptr<cuda::CudaOlmo2> model_;
  std::unique_ptr<cuda::LoraSvdRealigner> lora_;  // lora_svd, when the recipe enables it
  Recipe recipe_;
  StepFeatures features_;         // the recipe's (make_step_features), in the order they act
  Communicator* comm_ = nullptr;  // data parallelism, when set
  std::vector<IndexRange> shards_;
  std::vector<GradBucket> buckets_;
  std::vector<std::vector<IndexRange>> bucket_ranges_;  // per bucket: each rank's part of it
  bool overlap_ = true;
  std::unique_ptr<CommLane> lane_;  // data parallelism only
  size_t next_bucket_ = 0;          // buckets queued by the current backward
};

}  // namespace

void check_cuda_engine_recipe(const Recipe& recipe) {
  FP4_CHECK(cuda::is_device_optimizer(recipe.optimizer), "recipe ", recipe.name, ": optimizer = \"",
            recipe.optimizer, "\" is not available in the CUDA engine (", cuda::device_optimizers(),
            " only; set the recipe field optimizer)");
}

std::unique_ptr<TrainingEngine> make_cuda_engine(const ModelConfig& cfg, const Recipe& recipe, uint64_t seed,
                                                 int device) {
  return std::make_unique<CudaEngine>(cfg, recipe, seed, device);
}

}  // namespace fp4
