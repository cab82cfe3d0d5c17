#include "nn/out_control.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/error.h"

namespace fp4 {
namespace {

template <typename T>
StateTensor state_tensor(std::string name, const char* dtype, std::span<const T> data) {
  StateTensor t{std::move(name), dtype, {static_cast<int64_t>(data.size())}, {}};
  t.bytes.resize(data.size_bytes());
  if (!data.empty()) std::memcpy(t.bytes.data(), data.data(), data.size_bytes());
  return t;
}

template <typename T>
std::vector<T> state_values(const StateTensor& t, const char* dtype, size_t expected) {
  FP4_CHECK(t.dtype == dtype && t.bytes.size() == expected * sizeof(T), "state tensor '", t.name,
            "': ", t.dtype, " of ", t.bytes.size(), " bytes, expected ", dtype, " of ", expected * sizeof(T));
  std::vector<T> v(expected);
  if (expected) std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

}  // namespace

int outlier_channel_count(int in_features, double ratio, int round_to, const std::string& layer) {
  FP4_CHECK(ratio > 0 && ratio < 1 && round_to > 0, "out_control, layer ", layer, ": ratio ", ratio,
            " / round_to ", round_to, " out of range");
  const int cap = (in_features - 1) / round_to * round_to;
  FP4_CHECK(cap > 0, "out_control, layer ", layer, ": ", in_features,
            " input channels leave no count that is a ", "multiple of round_to ", round_to, " and below ",
            in_features, " (lower out_control.round_to)");
  // The small slack keeps ratio * I at an integer (0.1 * 640) from rounding up past it.
  const int raw = static_cast<int>(std::ceil(ratio * in_features - 1e-9));
  const int rounded = (std::max(raw, 1) + round_to - 1) / round_to * round_to;
  return std::min(rounded, cap);
}

std::vector<int32_t> select_top_channels(std::span<const double> score, int count) {
  FP4_CHECK(count >= 0 && static_cast<size_t>(count) <= score.size(), "select_top_channels: ", count, " of ",
            score.size(), " channels");
  std::vector<int32_t> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return score[a] > score[b]; });
  idx.resize(static_cast<size_t>(count));
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::vector<int32_t> complement_channels(const std::vector<int32_t>& sorted, int in_features) {
  std::vector<int32_t> out;
  size_t j = 0;
  for (int32_t i = 0; i < in_features; ++i) {
    if (j < sorted.size() && sorted[j] == i)
      ++j;
    else
      out.push_back(i);
  }
  return out;
}

void OutChannels::accumulate(const float* x, int n) {
  if (step_.empty()) step_.assign(2 * static_cast<size_t>(in_), 0.0);
  std::vector<double> sq(static_cast<size_t>(in_), 0.0);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < in_; ++i) {
      const double v = x[static_cast<int64_t>(r) * in_ + i];
      sq[static_cast<size_t>(i)] += v * v;
    }
  for (int i = 0; i < in_; ++i) {
    step_[static_cast<size_t>(i)] += std::sqrt(sq[static_cast<size_t>(i)]);
    step_[static_cast<size_t>(in_ + i)] += sq[static_cast<size_t>(i)];
  }
}

void OutChannels::set_calibrating(bool on) {
  calibrating_ = on;
  if (on && step_.empty()) step_.assign(2 * static_cast<size_t>(in_), 0.0);
}

void OutChannels::merge_step() {
  if (step_.empty()) return;
  if (total_.empty()) total_.assign(step_.size(), 0.0);
  for (size_t i = 0; i < step_.size(); ++i) total_[i] += step_[i];
  std::fill(step_.begin(), step_.end(), 0.0);
}

void OutChannels::freeze(int count) {
  if (total_.empty()) total_.assign(2 * static_cast<size_t>(in_), 0.0);
  c8_ = select_top_channels(std::span(total_).first(static_cast<size_t>(in_)), count);
  c4_ = complement_channels(c8_, in_);
  double all = 0, kept = 0;
  for (int i = 0; i < in_; ++i) all += total_[static_cast<size_t>(in_ + i)];
  for (int32_t c : c8_) kept += total_[static_cast<size_t>(in_ + c)];
  share_ = all > 0 ? kept / all : 0.0;
  frozen_ = true;
  total_.clear();
  step_.clear();
}

void OutChannels::restore(std::vector<double> totals) {
  FP4_CHECK(totals.size() == 2 * static_cast<size_t>(in_), "out_control, layer ", name_, ": ", totals.size(),
            " calibration sums, expected ", 2 * in_);
  clear();
  total_ = std::move(totals);
}

void OutChannels::check_channel_set(std::span<const int64_t> c8) const {
  for (size_t i = 0; i < c8.size(); ++i)
    FP4_CHECK(c8[i] >= 0 && c8[i] < in_ && (i == 0 || c8[i] > c8[i - 1]), "out_control, layer ", name_,
              ": channel set is not ascending within [0, ", in_, ")");
  FP4_CHECK(!c8.empty() && c8.size() % 16 == 0 && static_cast<int>(c8.size()) < in_, "out_control, layer ",
            name_, ": ", c8.size(), " frozen channels of ", in_,
            " (need a positive multiple of 16 below it)");
}

void OutChannels::restore_frozen(std::vector<int32_t> c8, double share) {
  check_channel_set(std::vector<int64_t>(c8.begin(), c8.end()));
  clear();
  c8_ = std::move(c8);
  c4_ = complement_channels(c8_, in_);
  share_ = share;
  frozen_ = true;
}

void OutChannels::clear() {
  frozen_ = false;
  step_.clear();
  total_.clear();
  c8_.clear();
  c4_.clear();
  share_ = 0;
}

OutChannels* OutControl::add(const std::string& name, int in_features) {
  outlier_channel_count(in_features, cfg_.ratio, cfg_.round_to, name);  // refuse a width it cannot split
  auto [it, inserted] = by_name_.try_emplace(name, name, in_features);
  FP4_CHECK(inserted, "out_control: layer ", name, " registered twice");
  order_.push_back(&it->second);
  return &it->second;
}

void OutControl::begin_step(int64_t step) {
  const bool on = step >= cfg_.calib_start && step <= freeze_step();
  for (OutChannels* l : order_) l->set_calibrating(on && !l->frozen());
}

void OutControl::all_reduce_step_sums(Communicator& comm) {
  for (OutChannels* l : order_) {
    const std::span<double> s = l->step_sums();
    if (!s.empty()) comm.all_reduce_sum(s.data(), static_cast<int64_t>(s.size()), CommType::kF64);
  }
}

std::optional<OutControlReport> OutControl::end_step(int64_t step) {
  for (OutChannels* l : order_) {
    l->merge_step();
    l->set_calibrating(false);
  }
  if (step != freeze_step()) return std::nullopt;
  OutControlReport report{step, {}};
  for (OutChannels* l : order_) {
    l->freeze(outlier_channel_count(l->in_features(), cfg_.ratio, cfg_.round_to, l->name()));
    report.layers.push_back({l->name(), l->in_features(), static_cast<int>(l->c8().size()), l->share()});
  }
  report_ = report;
  return report;
}

std::map<std::string, std::vector<int32_t>> OutControl::fp4_columns() const {
  std::map<std::string, std::vector<int32_t>> out;
  for (const OutChannels* l : order_)
    if (l->frozen()) out[l->name()] = l->c4();
  return out;
}

std::vector<StateTensor> OutControl::save_state() const {
  std::vector<StateTensor> out;
  for (const OutChannels* l : order_) {
    const std::string base = kStatePrefix + l->name();
    if (l->frozen()) {
      const std::vector<int64_t> c8(l->c8().begin(), l->c8().end());
      out.push_back(state_tensor<int64_t>(base + ".c8", "I64", c8));
      const double share = l->share();
      out.push_back(state_tensor<double>(base + ".share", "F64", std::span(&share, 1)));
    } else if (!l->totals().empty()) {
      out.push_back(state_tensor<double>(base + ".sums", "F64", l->totals()));
      out.back().shape = {2, l->in_features()};
    }
  }
  return out;
}

void OutControl::load_state(const std::vector<StateTensor>& state) {
  std::map<std::string, const StateTensor*> found;
  for (const StateTensor& t : state)
    if (t.name.rfind(kStatePrefix, 0) == 0) found[t.name] = &t;
  // Parse everything first, so a bad tensor leaves every layer as it was.
  struct Loaded {
    std::vector<double> sums;
    std::vector<int64_t> c8;
    double share = 0;
    bool frozen = false;
  };
  std::vector<Loaded> loaded(order_.size());
  for (size_t k = 0; k < order_.size(); ++k) {
    const OutChannels& l = *order_[k];
    const std::string base = kStatePrefix + l.name();
    const auto c8 = found.find(base + ".c8");
    const auto sums = found.find(base + ".sums");
    if (c8 != found.end()) {
      const auto share = found.find(base + ".share");
      FP4_CHECK(share != found.end(), "state: ", base, ".c8 without ", base, ".share");
      loaded[k].c8 = state_values<int64_t>(*c8->second, "I64", c8->second->bytes.size() / 8);
      l.check_channel_set(loaded[k].c8);
      loaded[k].share = state_values<double>(*share->second, "F64", 1)[0];
      loaded[k].frozen = true;
    } else if (sums != found.end()) {
      loaded[k].sums = state_values<double>(*sums->second, "F64", 2 * static_cast<size_t>(l.in_features()));
    }
  }
  for (size_t k = 0; k < order_.size(); ++k) {
    OutChannels& l = *order_[k];
    if (loaded[k].frozen)
      l.restore_frozen(std::vector<int32_t>(loaded[k].c8.begin(), loaded[k].c8.end()), loaded[k].share);
    else if (!loaded[k].sums.empty())
      l.restore(std::move(loaded[k].sums));
    else
      l.clear();
  }
}

}  // namespace fp4
