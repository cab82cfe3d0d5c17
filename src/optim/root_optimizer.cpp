#include "optim/root_optimizer.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <iterator>

#include "core/error.h"
#include "core/state_index.h"
#include "core/state_tensor.h"
#include "optim/adamw_state.h"

namespace fp4 {

void check_root_rest_state(const StateIndex& index, RootRest rest, const std::string& name) {
  const bool saved_q = index.has(kQAdamStepName), want_q = rest == RootRest::kQAdamW;
  FP4_CHECK(saved_q == want_q, "load_state: the state's embedding, head and gains were stepped by ",
            saved_q ? "Q-AdamW ('" : "AdamW ('", saved_q ? kQAdamStepName : kAdamStepName,
            "'), but this run's optimizer ", name, " steps them with ", want_q ? "Q-AdamW" : "AdamW",
            " (recipe field 'optimizer'); resume with the optimizer that wrote it");
}

RootOptimizer::RootOptimizer(const ParameterSet& params, const OptimizerPlacement& place, uint64_t seed,
                             NsPrecision precision, RootOptions opt)
    : opt_(opt), place_(place), shard_(place.shard(params.numel())) {
  opt_.precision = precision;
  const std::string me = "optimizer '" + root_optimizer_name(precision, opt_.rest) + "'";
  check_root_options(opt_, me);
  for (int i = 0; i < params.size(); ++i) {
    const Parameter& p = params.at(i);
    all_infos_.push_back(p.info);
    const int64_t end = p.offset + p.info.numel();
    const bool mine = p.offset >= shard_.begin && end <= shard_.end;
    // Newton-Schulz needs each matrix whole, so a shard holds whole tensors (make_tensor_shard_plan).
    FP4_CHECK(mine || end <= shard_.begin || p.offset >= shard_.end, me, ": the shard [", shard_.begin, ", ",
              shard_.end, ") of rank ", place.comm ? place.comm->rank() : 0, " cuts parameter ", p.info.name,
              " [", p.offset, ", ", end, "); this optimizer needs shards of whole tensors");
    if (!mine) continue;
    if (root_eligible(p.info)) {
      root_index_.push_back(i);
      root_offset_.push_back(p.offset);
      // The matrix's global index keys Q-Root's SR stream: the same bits on any number of ranks.
      roots_.emplace_back(p.info.name, p.info.shape[0], p.info.shape[1], static_cast<uint32_t>(i), seed);
    } else {
      adam_index_.push_back(i);
      adam_offset_.push_back(p.offset);
      if (opt_.rest == RootRest::kAdamW)
        adam_params_.add(p.info.name, p.info.shape, p.info.weight_decay, p.init);
    }
  }
  if (opt_.rest == RootRest::kQAdamW) {
    // Q-AdamW takes this rank's shard from `place`: whole tensors, so no tile is cut.
    qadam_ = std::make_unique<QAdamW>(params, place, seed, std::not_fn(root_eligible));
    return;
  }
  adam_params_.allocate();
  adam_ = std::make_unique<AdamWOptimizer>(adam_params_, OptimizerPlacement{});
}

std::string RootOptimizer::name() const {
  return root_optimizer_name(opt_.precision, opt_.rest);
}

void RootOptimizer::check_layout(const ParameterSet& ps, const char* what) const {
  int64_t numel = 0;
  for (const ParameterInfo& info : all_infos_) numel += info.numel();
  FP4_CHECK(static_cast<size_t>(ps.size()) == all_infos_.size() && ps.numel() == numel, name(), " ", what,
            ": built for ", all_infos_.size(), " parameters (", numel, " elements), given ", ps.size(), " (",
            ps.numel(), ")");
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
  if (qadam_) {  // in place on this rank's other tensors (collective, like AdamW's step below)
    qadam_->step(ps, h);
    return;
  }
  // Stepped even when this rank holds no AdamW parameter, so that every rank counts the same steps.
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

// With data parallelism every rank holds the state of its own tensors only: the first moments (ROOT's
// momentum or AdamW's m, one tensor each) and AdamW's second moments are placed at their flat offsets and
// gathered, so that every rank returns the same full state (collective).
std::vector<StateTensor> RootOptimizer::save_state(const ParameterSet& ps) const {
  check_layout(ps, "save_state");
  // ROOT's momentum and AdamW's m in `first`; AdamW's v in `second` (not needed with Q-AdamW for the rest).
  std::vector<float> first(static_cast<size_t>(ps.numel()), 0.0f), second(adam_ ? first.size() : 0, 0.0f);
  for (size_t k = 0; k < roots_.size(); ++k)
    std::copy(roots_[k].momentum().begin(), roots_[k].momentum().end(), first.begin() + root_offset_[k]);
  for (size_t k = 0; adam_ && k < adam_index_.size(); ++k) {
    const AdamW& adam = adam_->state();
    const Parameter& p = adam_params_.at(static_cast<int>(k));
    const auto n = static_cast<size_t>(p.info.numel());
    std::copy_n(adam.first_moment().begin() + p.offset, n, first.begin() + adam_offset_[k]);
    std::copy_n(adam.second_moment().begin() + p.offset, n, second.begin() + adam_offset_[k]);
  }
  if (place_.comm) {
    place_.comm->all_gather(first.data(), place_.shards);
    if (adam_) place_.comm->all_gather(second.data(), place_.shards);
  }
  std::vector<StateTensor> out;
  for (int i = 0; i < ps.size(); ++i) {
    const Parameter& p = ps.at(i);
    if (!root_eligible(p.info)) continue;
    out.push_back(f32_state_tensor(kRootMomentPrefix + p.info.name, p.info.shape,
                                   std::span<const float>(first).subspan(p.offset, p.info.numel())));
  }
  StateTensor step{kRootStepName, "I64", {1}, std::vector<uint8_t>(8)};
  std::memcpy(step.bytes.data(), &step_, 8);
  out.push_back(std::move(step));
  if (qadam_) {  // Q-AdamW's own layout and gather (collective)
    std::vector<StateTensor> rest = qadam_->save_state(ps);
    std::move(rest.begin(), rest.end(), std::back_inserter(out));
    return out;
  }
  for (int i = 0; i < ps.size(); ++i) {  // AdamW's own layout, its parameters in ParameterSet order
    const Parameter& p = ps.at(i);
    if (root_eligible(p.info)) continue;
    for (int k = 0; k < 2; ++k) {
      const std::vector<float>& moment = k == 0 ? first : second;
      out.push_back(f32_state_tensor(kAdamMomentPrefix[k] + p.info.name, p.info.shape,
                                     std::span<const float>(moment).subspan(p.offset, p.info.numel())));
    }
  }
  out.push_back(adam_step_tensor(adam_->step_count()));
  return out;
}

// Whatever world size wrote the state, this rank keeps the state of its own tensors.
void RootOptimizer::load_state(const StateIndex& index, const ParameterSet& ps) {
  check_layout(ps, "load_state");
  FP4_CHECK(index.has(kRootStepName), "load_state: the state has no '", kRootStepName,
            "' (it was written by ", index.has("qadamw.step") ? "q-adamw" : "another optimizer",
            "), but this run's optimizer is ", name(),
            " (recipe field 'optimizer'); resume with the optimizer that wrote it");
  // Check every tensor, of every rank's parameters, before changing anything.
  const StateTensor& step_t = index.require(kRootStepName, "I64", {1});
  int64_t step = 0;
  std::memcpy(&step, step_t.bytes.data(), 8);
  FP4_CHECK(step >= 0, "load_state: '", kRootStepName, "' is negative (", step, ")");
  std::vector<ParameterInfo> adam_infos;
  for (const ParameterInfo& info : all_infos_) {
    if (root_eligible(info))
      (void)index.require(kRootMomentPrefix + info.name, "F32", info.shape);
    else
      adam_infos.push_back(info);
  }
  check_root_rest_state(index, opt_.rest, name());
  if (qadam_) {
    qadam_->load_state(index, ps);  // checks every tensor it needs before it changes anything
  } else {
    (void)find_adam_state(index, adam_infos);  // throws naming the tensor at fault
    adam_->load_state(index, adam_params_);
  }
  for (size_t k = 0; k < roots_.size(); ++k) {
    const ParameterInfo& info = ps.at(root_index_[k]).info;
    const StateTensor& m = index.require(kRootMomentPrefix + info.name, "F32", info.shape);
    std::memcpy(roots_[k].momentum().data(), m.bytes.data(), m.bytes.size());
    roots_[k].set_step_count(step);
  }
  step_ = step;
}

int64_t RootOptimizer::state_bytes() const {
  int64_t bytes = adam_ ? adam_->state_bytes() : qadam_->state_bytes();
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
      const ParameterInfo& info = all_infos_[static_cast<size_t>(adam_index_[k])];
      const int64_t off = adam_offset_[k];
      const int64_t lo = std::max(r.begin, off), hi = std::min(r.end, off + info.numel());
      if (lo >= hi) continue;
      FP4_CHECK(adam_, name(), ": cannot zero the moments of ", info.name, " (elements [", lo - off, ", ",
                hi - off, ")): its Q-AdamW moments are packed in 128-element tiles");
      const int64_t at = adam_params_.at(static_cast<int>(k)).offset;
      adam_ranges.push_back({at + (lo - off), at + (hi - off)});
    }
  }
  if (adam_) adam_->reset_moments(adam_ranges);
}

std::vector<std::string> RootOptimizer::root_parameters() const {
  std::vector<std::string> out;
  for (const auto& r : roots_) out.push_back(r.name());
  return out;
}

std::vector<std::string> RootOptimizer::adamw_parameters() const {
  std::vector<std::string> out;
  for (int i : adam_index_) out.push_back(all_infos_[static_cast<size_t>(i)].name);
  return out;
}

}  // namespace fp4
