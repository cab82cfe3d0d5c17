#include "optim/root_optimizer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/state_index.h"
#include "core/state_tensor.h"
#include "optim/adamw_state.h"

namespace fp4 {

RootOptimizer::RootOptimizer(const ParameterSet& params, const OptimizerPlacement& place, uint64_t seed,
                             NsPrecision precision, RootOptions opt)
    : opt_(opt), shard_{0, params.numel()} {
  opt_.precision = precision;
  const std::string me = "optimizer '" + root_optimizer_name(precision) + "'";
  FP4_CHECK(
      !place.comm || place.comm->world_size() == 1, me, ": data parallelism (", place.comm->world_size(),
      " ranks) is not supported: Newton-Schulz needs each matrix's whole gradient, and gradients are ",
      "reduce-scattered to ZeRO-1 shards; run on one rank or set the recipe field optimizer = \"adamw\"");
  check_root_options(opt_, me);
  for (int i = 0; i < params.size(); ++i) {
    const Parameter& p = params.at(i);
    if (root_eligible(p.info)) {
      root_index_.push_back(i);
      root_offset_.push_back(p.offset);
      roots_.emplace_back(p.info.name, p.info.shape[0], p.info.shape[1], static_cast<uint32_t>(i), seed);
    } else {
      adam_index_.push_back(i);
      adam_offset_.push_back(p.offset);
      adam_params_.add(p.info.name, p.info.shape, p.info.weight_decay, p.init);
    }
  }
  adam_params_.allocate();
  adam_ = std::make_unique<AdamWOptimizer>(adam_params_, OptimizerPlacement{});
}

std::string RootOptimizer::name() const {
  return root_optimizer_name(opt_.precision);
}

void RootOptimizer::check_layout(const ParameterSet& ps, const char* what) const {
  FP4_CHECK(
      static_cast<size_t>(ps.size()) == root_index_.size() + adam_index_.size() && ps.numel() == shard_.end,
      name(), " ", what, ": built for ", root_index_.size() + adam_index_.size(), " parameters (", shard_.end,
      " elements), given ", ps.size(), " (", ps.numel(), ")");
}

void RootOptimizer::step(ParameterSet& ps, const StepHyper& h) {
  check_layout(ps, "step");
  check_adamw_hyper(h);  // lr and weight decay are shared; betas and eps matter to the AdamW part only
  ++step_;
  last_info_.assign(roots_.size(), RootStepInfo{});
  for (size_t k = 0; k < roots_.size(); ++k) {
    const int i = root_index_[k];
    const float wd = ps.at(i).info.weight_decay ? h.weight_decay : 0.0f;
    last_info_[k] = roots_[k].step(ps.value(i), ps.grad(i), h.lr, wd, opt_);
  }
  if (adam_index_.empty()) return;
  for (size_t k = 0; k < adam_index_.size(); ++k) {
    const int i = adam_index_[k], j = static_cast<int>(k);
    std::memcpy(adam_params_.value(j).data(), ps.value(i).data(), ps.value(i).size_bytes());
    std::memcpy(adam_params_.grad(j).data(), ps.grad(i).data(), ps.grad(i).size_bytes());
  }
  adam_->step(adam_params_, h);
  for (size_t k = 0; k < adam_index_.size(); ++k) {
    const int i = adam_index_[k], j = static_cast<int>(k);
    std::memcpy(ps.value(i).data(), adam_params_.value(j).data(), ps.value(i).size_bytes());
  }
}

std::vector<StateTensor> RootOptimizer::save_state(const ParameterSet& ps) const {
  check_layout(ps, "save_state");
  std::vector<StateTensor> out;
  for (size_t k = 0; k < roots_.size(); ++k) {
    const ParameterInfo& info = ps.at(root_index_[k]).info;
    out.push_back(f32_state_tensor(kRootMomentPrefix + info.name, info.shape, roots_[k].momentum()));
  }
  StateTensor step{kRootStepName, "I64", {1}, std::vector<uint8_t>(8)};
  std::memcpy(step.bytes.data(), &step_, 8);
  out.push_back(std::move(step));
  for (auto& t : adam_->save_state(adam_params_)) out.push_back(std::move(t));
  return out;
}

void RootOptimizer::load_state(const StateIndex& index, const ParameterSet& ps) {
  check_layout(ps, "load_state");
  FP4_CHECK(index.has(kRootStepName), "load_state: the state has no '", kRootStepName,
            "' (it was written by ", index.has("qadamw.step") ? "q-adamw" : "another optimizer",
            "), but this run's optimizer is ", name(),
            " (recipe field 'optimizer'); resume with the optimizer that wrote it");
  // Check every tensor before changing anything.
  const StateTensor& step_t = index.require(kRootStepName, "I64", {1});
  int64_t step = 0;
  std::memcpy(&step, step_t.bytes.data(), 8);
  FP4_CHECK(step >= 0, "load_state: '", kRootStepName, "' is negative (", step, ")");
  std::vector<const StateTensor*> moments;
  for (size_t k = 0; k < roots_.size(); ++k) {
    const ParameterInfo& info = ps.at(root_index_[k]).info;
    moments.push_back(&index.require(kRootMomentPrefix + info.name, "F32", info.shape));
  }
  std::vector<ParameterInfo> adam_infos;
  for (int j = 0; j < adam_params_.size(); ++j) adam_infos.push_back(adam_params_.at(j).info);
  (void)find_adam_state(index, adam_infos);  // throws naming the tensor at fault
  adam_->load_state(index, adam_params_);
  for (size_t k = 0; k < roots_.size(); ++k) {
    std::memcpy(roots_[k].momentum().data(), moments[k]->bytes.data(), moments[k]->bytes.size());
    roots_[k].set_step_count(step);
  }
  step_ = step;
}

int64_t RootOptimizer::state_bytes() const {
  int64_t bytes = adam_->state_bytes();
  for (const auto& r : roots_) bytes += static_cast<int64_t>(r.momentum().size_bytes());
  return bytes;
}

void RootOptimizer::reset_moments(const std::vector<IndexRange>& ranges) {
  std::vector<IndexRange> adam_ranges;  // the same elements in AdamW's compact parameter buffer
  for (const IndexRange& r : ranges) {
    for (size_t k = 0; k < roots_.size(); ++k) {
      const int64_t off = root_offset_[k], n = static_cast<int64_t>(roots_[k].momentum().size());
      const int64_t lo = std::max(r.begin, off), hi = std::min(r.end, off + n);
      if (lo < hi)
        std::fill(roots_[k].momentum().begin() + (lo - off), roots_[k].momentum().begin() + (hi - off), 0.0f);
    }
    for (size_t k = 0; k < adam_index_.size(); ++k) {
      const Parameter& p = adam_params_.at(static_cast<int>(k));
      const int64_t off = adam_offset_[k];
      const int64_t lo = std::max(r.begin, off), hi = std::min(r.end, off + p.info.numel());
      if (lo < hi) adam_ranges.push_back({p.offset + (lo - off), p.offset + (hi - off)});
    }
  }
  adam_->reset_moments(adam_ranges);
}

std::vector<std::string> RootOptimizer::root_parameters() const {
  std::vector<std::string> out;
  for (const auto& r : roots_) out.push_back(r.name());
  return out;
}

std::vector<std::string> RootOptimizer::adamw_parameters() const {
  std::vector<std::string> out;
  for (int j = 0; j < adam_params_.size(); ++j) out.push_back(adam_params_.at(j).info.name);
  return out;
}

}  // namespace fp4
