#include "optim/adamw_optimizer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/state_tensor.h"
#include "optim/adamw_state.h"

namespace fp4 {

AdamWOptimizer::AdamWOptimizer(const ParameterSet& params, const OptimizerPlacement& place)
    : place_(place), adam_(params, place.shard(params.numel())) {}

int64_t AdamWOptimizer::state_bytes() const {
  return static_cast<int64_t>((adam_.first_moment().size() + adam_.second_moment().size()) * sizeof(float));
}

// A moment of every element: this rank's shard, and with data parallelism the others' gathered.
std::vector<float> AdamWOptimizer::full_moment(std::span<const float> shard_state, int64_t numel) const {
  std::vector<float> full(static_cast<size_t>(numel), 0.0f);
  std::copy(shard_state.begin(), shard_state.end(), full.begin() + adam_.shard().begin);
  if (place_.comm) place_.comm->all_gather(full.data(), place_.shards);
  return full;
}

std::vector<StateTensor> AdamWOptimizer::save_state(const ParameterSet& ps) const {
  std::vector<StateTensor> out;
  // One process holds every element's moments and slices them in place; with data parallelism every rank
  // gathers the shards into full copies first (a collective: all ranks take this branch together).
  std::span<const float> m = adam_.first_moment(), v = adam_.second_moment();
  std::vector<float> m_full, v_full;
  if (place_.comm == nullptr) {
    FP4_CHECK(adam_.shard().begin == 0 && static_cast<int64_t>(m.size()) == ps.numel(),
              "AdamW save_state: a single process must hold all ", ps.numel(), " moments, holds ", m.size());
  } else {
    m_full = full_moment(m, ps.numel());
    v_full = full_moment(v, ps.numel());
    m = m_full;
    v = v_full;
  }
  for (int i = 0; i < ps.size(); ++i) {
    const auto& p = ps.at(i);
    const auto off = static_cast<size_t>(p.offset), n = static_cast<size_t>(p.info.numel());
    out.push_back(f32_state_tensor(kAdamMomentPrefix[0] + p.info.name, p.info.shape, m.subspan(off, n)));
    out.push_back(f32_state_tensor(kAdamMomentPrefix[1] + p.info.name, p.info.shape, v.subspan(off, n)));
  }
  out.push_back(adam_step_tensor(adam_.step_count()));
  return out;
}

void AdamWOptimizer::reset_moments(const std::vector<IndexRange>& ranges) {
  const IndexRange shard = adam_.shard();
  for (const IndexRange& r : ranges) {
    const int64_t lo = std::max(r.begin, shard.begin), hi = std::min(r.end, shard.end);
    if (lo >= hi) continue;
    const auto from = static_cast<size_t>(lo - shard.begin), n = static_cast<size_t>(hi - lo);
    std::fill_n(adam_.first_moment().begin() + static_cast<std::ptrdiff_t>(from), n, 0.0f);
    std::fill_n(adam_.second_moment().begin() + static_cast<std::ptrdiff_t>(from), n, 0.0f);
  }
}

// Whatever world size wrote the state, this rank keeps the moments of its shard.
void AdamWOptimizer::load_state(const StateIndex& index, const ParameterSet& ps) {
  FP4_CHECK(index.has(kAdamStepName) || !index.has("qadamw.step"),
            "load_state: the state holds Q-AdamW moments ",
            "('qadamw.step'), but this run's optimizer is adamw (recipe field 'optimizer'); resume with the ",
            "optimizer that wrote it");
  std::vector<ParameterInfo> infos;
  for (int i = 0; i < ps.size(); ++i) infos.push_back(ps.at(i).info);
  const AdamState st = find_adam_state(index, infos);  // checks everything first
  const IndexRange shard = adam_.shard();
  for (int i = 0; i < ps.size(); ++i) {
    const auto& p = ps.at(i);
    const auto k = static_cast<size_t>(i);
    const int64_t lo = std::max(p.offset, shard.begin);
    const int64_t hi = std::min(p.offset + p.info.numel(), shard.end);
    if (lo >= hi) continue;
    const size_t from = static_cast<size_t>(lo - p.offset) * 4, to = static_cast<size_t>(lo - shard.begin);
    const size_t bytes = static_cast<size_t>(hi - lo) * 4;
    std::memcpy(adam_.first_moment().data() + to, st.m[k]->bytes.data() + from, bytes);
    std::memcpy(adam_.second_moment().data() + to, st.v[k]->bytes.data() + from, bytes);
  }
  adam_.set_step_count(st.step);
}

}  // namespace fp4
