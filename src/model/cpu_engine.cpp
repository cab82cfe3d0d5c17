#include "model/cpu_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>

#include "core/error.h"
#include "model/engine_common.h"
#include "model/olmo2.h"
#include "model/state_index.h"
#include "model/step_features.h"
#include "nn/out_control.h"
#include "ops/ops.h"
#include "optim/grad_buckets.h"
#include "optim/optimizer.h"
#include "tensor/tensor.h"

namespace fp4 {

namespace {

class CpuEngine final : public TrainingEngine, public OutControlSource {
 public:
  CpuEngine(const ModelConfig& cfg, const Recipe& recipe, uint64_t seed)
      : model_(cfg, checked(recipe)),
        recipe_(recipe),
        optimizer_name_(recipe.optimizer),
        seed_(seed),
        opt_(make_optimizer(optimizer_name_, model_.params(), OptimizerPlacement{}, seed)) {
    model_.init_parameters(seed);
    model_.quant_context().seed = seed;
    features_ = make_features(recipe, StepContext{});
    static const bool advised = [] {  // once per process
      const std::string advice = cpu::blas_advice();
      if (!advice.empty()) std::cerr << "fp4train: " << advice << "\n";
      return true;
    }();
    (void)advised;
  }

  const ModelConfig& config() const override { return model_.config(); }
  std::string device_name() const override { return "cpu (" + cpu::blas_description() + ")"; }
  OutControl* out_control() override { return model_.out_control(); }

  StepStats train_step(std::span<const Batch> micro_batches, const StepHyper& hyper) override {
    const int64_t step = opt_->step_count() + 1;
    const std::string where = "train step " + std::to_string(step);
    FP4_CHECK(!micro_batches.empty(), where, ": no micro-batches");
    int64_t total = 0;
    for (size_t i = 0; i < micro_batches.size(); ++i) {
      check_batch(micro_batches[i], config(), where + " micro-batch " + std::to_string(i));
      total += count_targets(micro_batches[i]);
    }
    if (comm_) comm_->all_reduce_sum(&total, 1, CommType::kI64);  // the job's targets
    FP4_CHECK(total > 0, where, ": no target tokens in ", micro_batches.size(), " micro-batches");

    auto& params = model_.params();
    params.zero_grads();
    // Each token's loss is divided by the step's total token count (over all ranks): micro-batches
    // and ranks are averaged by tokens, exactly as one large batch would be.
    const float grad_scale = static_cast<float>(1.0 / static_cast<double>(total));
    for (const auto& f : features_) f->begin_step(step);
    cpu::LossSums sums;
    std::string fault;  // why this rank cannot finish the step
    for (size_t i = 0; i < micro_batches.size() && fault.empty(); ++i) {
      const Batch& mb = micro_batches[i];
      // Quantized layers draw fresh SR bits and RHT signs per forward: index them by (step, micro-batch).
      model_.quant_context().call = (static_cast<uint64_t>(step) << 8) | (i & 0xFF);
      model_.forward(mb.tokens.data(), mb.batch, mb.seq);
      const auto s = model_.loss(mb.targets.data(), true, grad_scale);
      if (!std::isfinite(s.loss)) {
        fault = detail::concat(where, ": loss is ", s.loss, "; ", diagnose_forward());
        break;
      }
      sums.loss += s.loss;
      sums.ce += s.ce;
      sums.tokens += s.tokens;
      model_.backward();
    }
    if (fault.empty()) fault = find_nonfinite_gradient(where);
    // Every rank learns whether any rank failed, so all stop together instead of waiting on each other.
    double agreed[3] = {sums.loss, sums.ce, fault.empty() ? 0.0 : 1.0};
    if (comm_) comm_->all_reduce_sum(agreed, 3, CommType::kF64);
    if (!fault.empty()) FP4_THROW(fault);
    FP4_CHECK(agreed[2] == 0, where, ": another rank found a non-finite loss or gradient (see its message)");
    for (const auto& f : features_) f->end_step(step);

    StepStats stats;
    stats.loss = agreed[0] / static_cast<double>(total);
    stats.ce_loss = agreed[1] / static_cast<double>(total);
    stats.tokens = total;
    if (comm_) reduce_gradients();
    const IndexRange shard = opt_->shard();
    auto grads = params.grads().subspan(static_cast<size_t>(shard.begin), static_cast<size_t>(shard.size()));
    double sumsq = shard_sum_squares();
    if (comm_) comm_->all_reduce_sum(&sumsq, 1, CommType::kF64);
    stats.grad_norm = std::sqrt(sumsq);
    if (hyper.grad_clip > 0.0f) {  // clip_grad_norm's rule, on this rank's shard
      const double coef = hyper.grad_clip / (stats.grad_norm + 1e-6);
      if (coef < 1.0) cpu::scale(grads.data(), static_cast<int64_t>(grads.size()), static_cast<float>(coef));
    }
    opt_->step(params, hyper);
    if (comm_) comm_->all_gather(params.values().data(), shards_);
    for (const auto& f : features_) f->after_update(step);
    return stats;
  }

  void set_data_parallel(const DataParallel& dp) override {
    FP4_CHECK(dp.comm != nullptr && !dp.comm->device_memory(), "CPU engine: data parallelism needs a host ",
              "communicator (got ", dp.comm ? dp.comm->backend() : std::string("none"), ")");
    const int world = dp.comm->world_size();
    FP4_CHECK(static_cast<int>(dp.shards.size()) == world, "CPU engine: ", dp.shards.size(), " shards for ",
              world, " ranks");
    int64_t covered = 0;
    for (const auto& r : dp.shards) covered += r.size();
    FP4_CHECK(covered == model_.params().numel(), "CPU engine: the shards cover ", covered, " of ",
              model_.params().numel(), " parameters");
    FP4_CHECK(opt_->step_count() == 0, "CPU engine: data parallelism must be set before the first step");
    comm_ = dp.comm;
    shards_ = dp.shards;
    buckets_ = gradient_buckets(parameters());
    opt_ = make_optimizer(optimizer_name_, model_.params(), OptimizerPlacement{comm_, shards_}, seed_);
  }

  std::span<const std::unique_ptr<StepFeature>> features() override { return features_; }
  void set_step_context(const StepContext& ctx) override {
    FP4_CHECK(opt_->step_count() == 0, "CPU engine: the step context must be set before the first step");
    features_ = make_features(recipe_, ctx);
  }

  StepStats evaluate(const Batch& batch) override {
    check_batch(batch, config(), "evaluate");
    model_.forward(batch.tokens.data(), batch.batch, batch.seq, ForwardMode::kInference);
    const auto s = model_.loss(batch.targets.data(), false, 0.0f);
    StepStats stats;
    stats.tokens = s.tokens;
    if (s.tokens > 0) stats.loss = stats.ce_loss = s.ce / static_cast<double>(s.tokens);
    return stats;
  }

  void last_logits(const Batch& batch, std::span<float> out) override {
    FP4_CHECK(batch.batch > 0 && batch.seq > 0 &&
                  batch.tokens.size() == static_cast<size_t>(batch.batch) * batch.seq,
              "last_logits: ", batch.tokens.size(), " tokens for shape ", batch.batch, " x ", batch.seq);
    const size_t need = static_cast<size_t>(batch.batch) * static_cast<size_t>(config().vocab_size);
    FP4_CHECK(out.size() == need, "last_logits: output holds ", out.size(), " floats, need ", need);
    model_.forward(batch.tokens.data(), batch.batch, batch.seq, ForwardMode::kInference);
    model_.last_logits(out.data());
  }

  std::vector<ParameterInfo> parameters() const override {
    std::vector<ParameterInfo> out;
    const auto& ps = model_.params();
    for (int i = 0; i < ps.size(); ++i) out.push_back(ps.at(i).info);
    return out;
  }

  void read_parameter(const std::string& name, std::span<float> out) const override {
    const auto& ps = model_.params();
    const auto v = ps.value(ps.require(name));
    FP4_CHECK(out.size() == v.size(), "read_parameter ", name, ": buffer of ", out.size(), " floats, need ",
              v.size());
    std::copy(v.begin(), v.end(), out.begin());
  }

  void write_parameter(const std::string& name, std::span<const float> in) override {
    auto& ps = model_.params();
    auto v = ps.value(ps.require(name));
    FP4_CHECK(in.size() == v.size(), "write_parameter ", name, ": ", in.size(), " floats given, need ",
              v.size());
    std::copy(in.begin(), in.end(), v.begin());
  }

  // Full tensors whatever the world size; with data parallelism the optimizer state is gathered (collective).
  std::vector<StateTensor> save_state() const override {
    std::vector<StateTensor> out;
    const auto& ps = model_.params();
    for (int i = 0; i < ps.size(); ++i)
      out.push_back(f32_state_tensor(ps.at(i).info.name, ps.at(i).info.shape, ps.value(i)));
    for (auto& t : opt_->save_state(ps)) out.push_back(std::move(t));
    append_feature_state(features_, out);
    return out;
  }

  // Tensors this engine does not know (a trainer's own entries) are left alone. A data-parallel rank
  // keeps the optimizer state of its shard only, whatever world size wrote the state.
  void load_state(const std::vector<StateTensor>& state) override {
    const StateIndex index(state);
    auto& ps = model_.params();
    // Check everything before changing anything, so a bad state leaves the engine as it was.
    std::vector<const StateTensor*> values;
    for (int i = 0; i < ps.size(); ++i)
      values.push_back(&index.require(ps.at(i).info.name, "F32", ps.at(i).info.shape));
    opt_->load_state(index, ps);  // checks all of its tensors before keeping any
    for (int i = 0; i < ps.size(); ++i)
      std::memcpy(ps.value(i).data(), values[static_cast<size_t>(i)]->bytes.data(),
                  static_cast<size_t>(ps.at(i).info.numel()) * 4);
    for (const auto& f : features_) f->load_state(state);
  }

 private:
  static const Recipe& checked(const Recipe& recipe) {
    FP4_CHECK(is_known_optimizer(recipe.optimizer), "recipe ", recipe.name, ": optimizer '", recipe.optimizer,
              "' is not available in the CPU engine (known: ", known_optimizers(), ")");
    return recipe;
  }

  // The CPU backends of the recipe's features: OutControl's sums added over the ranks; LoRA-SVD's realignment
  // on the host parameters (every rank holds the same parameters after the all-gather, so each realigns
  // alike) with the factors' moments reset on each shard.
  StepFeatures make_features(const Recipe& recipe, const StepContext& ctx) {
    StepFeatureBackends b;
    b.engine = this;
    b.out_control = model_.out_control();
    b.out_control_sums = [this] {
      if (comm_) model_.out_control()->all_reduce_step_sums(*comm_);
    };
    b.lora_svd = model_.lora_svd();
    b.lora_svd_realign = [this](int64_t index) {
      LoraSvd* lora = model_.lora_svd();
      lora->realign(model_.params(), seed_, index);
      opt_->reset_moments(lora->factor_ranges(model_.params()));
    };
    return make_step_features(recipe, ctx, b);
  }

  // Why the loss is not finite: a parameter holding NaN/Inf, else the first non-finite activation.
  std::string diagnose_forward() const {
    const auto& ps = model_.params();
    for (int i = 0; i < ps.size(); ++i) {
      const auto v = ps.value(i);
      const int64_t at = cpu::first_nonfinite(v.data(), static_cast<int64_t>(v.size()));
      if (at >= 0)
        return "parameter " + ps.at(i).info.name + " holds a non-finite value (" +
               std::to_string(v[static_cast<size_t>(at)]) + " at element " + std::to_string(at) + ")";
    }
    const std::string act = model_.first_nonfinite_activation();
    if (!act.empty()) return "the first non-finite activation is the " + act;
    return "all activations are finite: the logits overflow the loss";
  }

  // Gradients are scanned in backward order (LM head first), so the parameter named is the one
  // closest to where the NaN/Inf entered the backward. "" when all are finite.
  std::string find_nonfinite_gradient(const std::string& where) const {
    const auto& ps = model_.params();
    for (int i = ps.size(); i-- > 0;) {
      const auto g = ps.grad(i);
      const int64_t at = cpu::first_nonfinite(g.data(), static_cast<int64_t>(g.size()));
      if (at >= 0)
        return detail::concat(where, ": non-finite gradient (", g[static_cast<size_t>(at)], ") in parameter ",
                              ps.at(i).info.name, " at element ", at);
    }
    return "";
  }

  // Sums the gradients over ranks, bucket by bucket in backward order: each rank receives the sum
  // over its own shard (the rest of its gradient buffer is stale afterwards).
  void reduce_gradients() {
    float* grads = model_.params().grads().data();
    for (const auto& b : buckets_) comm_->reduce_scatter_sum(grads, bucket_shards(b.range, shards_));
  }

  // Sum of squared gradients over this rank's shard, parameter by parameter (global_grad_norm's order
  // when the shard is everything).
  double shard_sum_squares() const {
    const auto& ps = model_.params();
    const IndexRange shard = opt_->shard();
    double ss = 0;
    for (int i = 0; i < ps.size(); ++i) {
      const int64_t off = ps.at(i).offset;
      const int64_t lo = std::max(off, shard.begin), hi = std::min(off + ps.at(i).info.numel(), shard.end);
      if (lo < hi) ss += cpu::sum_squares(ps.grad(i).data() + (lo - off), hi - lo);
    }
    return ss;
  }

  Olmo2Model model_;
  Recipe recipe_;
  std::string optimizer_name_;
  uint64_t seed_ = 0;
  std::unique_ptr<Optimizer> opt_;
  Communicator* comm_ = nullptr;  // data parallelism, when set
  std::vector<IndexRange> shards_;
  std::vector<GradBucket> buckets_;
  StepFeatures features_;  // the recipe's (make_step_features), in the order they act
};

}  // namespace

std::unique_ptr<TrainingEngine> make_cpu_engine(const ModelConfig& cfg, const Recipe& recipe, uint64_t seed) {
  return std::make_unique<CpuEngine>(cfg, recipe, seed);
}

}  // namespace fp4
