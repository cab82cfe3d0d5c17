#include "optim/osci_reset.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "numerics/formats.h"
#include "numerics/quantize.h"

namespace fp4 {
namespace {

constexpr const char* kWindowName = "osci_reset.window";
constexpr const char* kFields[4] = {"prev_w", "prev_q", "dist_m", "dist_q"};

StateTensor f32_tensor(const std::string& name, const std::vector<float>& v, int64_t rows, int64_t cols) {
  StateTensor t{name, "F32", {rows, cols}, std::vector<uint8_t>(v.size() * sizeof(float))};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

}  // namespace

std::vector<OsciTarget> osci_targets(const std::vector<ParameterInfo>& params, const Recipe& recipe,
                                     int n_layers) {
  static constexpr struct {
    const char* suffix;
    LinearKind kind;
  } kLinears[] = {{"attn.wqkv", LinearKind::kQkv},
                  {"attn.wo", LinearKind::kAttnOut},
                  {"mlp.w_gate_up", LinearKind::kGateUp},
                  {"mlp.w_down", LinearKind::kDown}};
  std::vector<OsciTarget> out;
  for (int l = 0; l < n_layers; ++l)
    for (const auto& lin : kLinears) {
      const std::string name = "blocks." + std::to_string(l) + "." + lin.suffix;
      const LinearPolicy policy = recipe.policy_for(l, n_layers, lin.kind);
      const QuantSpec& q2 = policy[Operand::kQ2W];
      if (q2.format != QuantFormat::kNvfp4) continue;  // a BF16 layer: nothing to oscillate
      FP4_CHECK(q2.rounding == Rounding::kRtn && q2.rht_n == 0, "osci_reset: ", name,
                ": Q2 must use RTN without RHT so that a weight's grid point is defined");
      const ParameterInfo* p = nullptr;
      for (const auto& info : params)
        if (info.name == name) p = &info;
      FP4_CHECK(p != nullptr && p->shape.size() == 2, "osci_reset: the model has no 2-D parameter ", name);
      out.push_back(OsciTarget{name, p->shape[0], p->shape[1], q2});
    }
  return out;
}

int64_t osci_start_step(const OsciResetConfig& cfg, int64_t total_steps) {
  if (cfg.start < 1.0) return static_cast<int64_t>(std::llround(cfg.start * static_cast<double>(total_steps)));
  return static_cast<int64_t>(std::llround(cfg.start));
}

OsciReset::OsciReset(const OsciResetConfig& cfg, int64_t total_steps, std::vector<OsciTarget> targets)
    : cfg_(cfg), start_(osci_start_step(cfg, total_steps)), targets_(std::move(targets)), tracks_(targets_.size()) {
  FP4_CHECK(cfg_.window >= 1 && cfg_.period >= cfg_.window && cfg_.threshold > 0, "osci_reset: window ",
            cfg_.window, ", period ", cfg_.period, ", threshold ", cfg_.threshold,
            " (need 1 <= window <= period and threshold > 0)");
}

void OsciReset::set_fp4_columns(const std::string& name, std::vector<int32_t> columns) {
  for (OsciTarget& t : targets_)
    if (t.name == name) {
      for (int32_t c : columns)
        FP4_CHECK(c >= 0 && c < t.cols, "osci_reset: FP4 column ", c, " outside weight ", name);
      t.fp4_columns = std::move(columns);
      return;
    }
  FP4_THROW("osci_reset: no tracked weight ", name);
}

std::vector<float> OsciReset::quantized(const OsciTarget& t, std::span<const float> w,
                                        std::vector<float>* edge_score) const {
  if (!t.fp4_columns.empty()) {
    // OutControl: Q over the FP4 columns as the split layer's forward sees them (gathered, zero-padded to
    // whole 128-blocks); other elements keep their value and an edge score of -1 (never tracked).
    const auto k = static_cast<int64_t>(t.fp4_columns.size()), padded = (k + 127) / 128 * 128;
    OsciTarget g{t.name, t.rows, padded, t.q2, {}};
    std::vector<float> gw(static_cast<size_t>(t.rows * padded), 0.0f), gscore;
    for (int64_t r = 0; r < t.rows; ++r)
      for (int64_t j = 0; j < k; ++j)
        gw[static_cast<size_t>(r * padded + j)] = w[static_cast<size_t>(r * t.cols + t.fp4_columns[j])];
    const std::vector<float> gq = quantized(g, gw, edge_score ? &gscore : nullptr);
    std::vector<float> out(w.begin(), w.end());
    if (edge_score) edge_score->assign(w.size(), -1.0f);
    for (int64_t r = 0; r < t.rows; ++r)
      for (int64_t j = 0; j < k; ++j) {
        const auto e = static_cast<size_t>(r * t.cols + t.fp4_columns[j]);
        const auto ge = static_cast<size_t>(r * padded + j);
        out[e] = gq[ge];
        if (edge_score) (*edge_score)[e] = gscore[ge];
      }
    return out;
  }
  const Nvfp4Tensor q = quantize_nvfp4(w.data(), t.rows, t.cols, t.q2, QuantRandomness{});
  std::vector<float> out(w.size());
  dequantize(q, out.data());
  if (edge_score == nullptr) return out;
  static constexpr float kBinWidth[8] = {0.5f, 0.5f, 0.5f, 0.5f, 0.75f, 1.0f, 1.5f, 2.0f};
  edge_score->resize(w.size());
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t c = 0; c < t.cols; ++c) {
      const auto e = static_cast<size_t>(r * t.cols + c);
      const uint8_t index = q.code(r, c) & 0x7u;
      // The element's scale: q * s is its value, so s = value / magnitude, or the block's s_b * outer.
      const float s = e4m3_decode(q.scale(r, c)) * q.outer_scale(r, c);
      const float a = s > 0.0f ? std::fabs(w[e]) / s : 0.0f;
      (*edge_score)[e] = std::isfinite(a) ? std::fabs(a - e2m1_magnitude(index)) / kBinWidth[index] : 0.0f;
    }
  return out;
}

// The ceil(track_fraction * n) elements with the highest scores (ties: the lower index), ascending.
std::vector<int64_t> OsciReset::closest_to_edges(const std::vector<float>& score) const {
  const auto n = static_cast<int64_t>(score.size());
  const auto k = std::min<int64_t>(n, static_cast<int64_t>(std::ceil(cfg_.track_fraction * static_cast<double>(n))));
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  const auto higher = [&](int64_t a, int64_t b) {
    const float sa = score[static_cast<size_t>(a)], sb = score[static_cast<size_t>(b)];
    return sa != sb ? sa > sb : a < b;
  };
  std::nth_element(order.begin(), order.begin() + k, order.end(), higher);
  order.resize(static_cast<size_t>(k));
  std::sort(order.begin(), order.end());
  return order;
}

namespace {

// The tracked elements of a full tensor (all of them when index is empty).
std::vector<float> gather(const std::vector<float>& full, const std::vector<int64_t>& index) {
  if (index.empty()) return full;
  std::vector<float> out(index.size());
  for (size_t j = 0; j < index.size(); ++j) out[j] = full[static_cast<size_t>(index[j])];
  return out;
}

// OutControl: the elements of `index` (every element when not `fraction`) that lie in FP4 columns.
std::vector<int64_t> only_fp4_columns(const OsciTarget& t, const std::vector<int64_t>& index, bool fraction) {
  std::vector<char> fp4(static_cast<size_t>(t.cols), 0);
  for (int32_t c : t.fp4_columns) fp4[static_cast<size_t>(c)] = 1;
  std::vector<int64_t> out;
  const int64_t n = fraction ? static_cast<int64_t>(index.size()) : t.rows * t.cols;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t e = fraction ? index[static_cast<size_t>(j)] : j;
    if (fp4[static_cast<size_t>(e % t.cols)]) out.push_back(e);
  }
  return out;
}

}  // namespace

void OsciReset::snapshot(int64_t step, WeightAccess& weights) {
  const bool fraction = cfg_.track_fraction < 1.0;
  std::vector<float> w, score;
  for (size_t i = 0; i < targets_.size(); ++i) {
    const OsciTarget& t = targets_[i];
    Track& k = tracks_[i];
    w.resize(static_cast<size_t>(t.rows * t.cols));
    weights.read(t.name, w);
    const std::vector<float> q = quantized(t, w, fraction ? &score : nullptr);
    k.index = fraction ? closest_to_edges(score) : std::vector<int64_t>{};
    if (!t.fp4_columns.empty()) k.index = only_fp4_columns(t, k.index, fraction);
    k.prev_w = gather(w, k.index);
    k.prev_q = gather(q, k.index);
    k.dist_m.assign(k.prev_w.size(), 0.0f);
    k.dist_q.assign(k.prev_w.size(), 0.0f);
  }
  active_ = true;
  window_start_ = step;
}

void OsciReset::accumulate(WeightAccess& weights) {
  std::vector<float> full;
  for (size_t i = 0; i < targets_.size(); ++i) {
    const OsciTarget& t = targets_[i];
    Track& k = tracks_[i];
    full.resize(static_cast<size_t>(t.rows * t.cols));
    weights.read(t.name, full);
    std::vector<float> w = gather(full, k.index);
    std::vector<float> q = gather(quantized(t, full), k.index);
    for (size_t e = 0; e < w.size(); ++e) {
      k.dist_m[e] += std::fabs(w[e] - k.prev_w[e]);
      k.dist_q[e] += std::fabs(q[e] - k.prev_q[e]);
    }
    k.prev_w.swap(w);
    k.prev_q.swap(q);
  }
}

OsciResetReport OsciReset::reset(int64_t step, WeightAccess& weights) {
  OsciResetReport report;
  report.step = step;
  std::vector<float> w;
  for (size_t i = 0; i < targets_.size(); ++i) {
    const OsciTarget& t = targets_[i];
    Track& k = tracks_[i];
    // prev_q holds this step's grid points (accumulate ran first); the other elements are read back as
    // they are.
    w.resize(static_cast<size_t>(t.rows * t.cols));
    weights.read(t.name, w);
    OsciLayerReport layer{t.name, static_cast<int64_t>(k.prev_w.size()), 0, 0.0};
    double risk_sum = 0;
    for (size_t j = 0; j < k.prev_w.size(); ++j) {
      const float risk = k.dist_m[j] > 0.0f ? k.dist_q[j] / k.dist_m[j] : 0.0f;
      risk_sum += risk;
      if (risk >= cfg_.threshold) {
        w[k.index.empty() ? j : static_cast<size_t>(k.index[j])] = k.prev_q[j];
        ++layer.reset;
      }
    }
    layer.mean_risk = k.prev_w.empty() ? 0.0 : risk_sum / static_cast<double>(k.prev_w.size());
    if (layer.reset > 0) weights.write(t.name, w);
    report.layers.push_back(layer);
    k = Track{};  // the window's memory is released until the next snapshot
  }
  active_ = false;
  window_start_ = -1;
  return report;
}

std::optional<OsciResetReport> OsciReset::after_step(int64_t step, WeightAccess& weights) {
  std::optional<OsciResetReport> report;
  if (active_) {
    accumulate(weights);
    if (step - window_start_ >= cfg_.window) report = reset(step, weights);
  }
  if (step >= start_ && (step - start_) % cfg_.period == 0) snapshot(step, weights);
  return report;
}

std::vector<StateTensor> OsciReset::save_state() const {
  std::vector<StateTensor> out;
  StateTensor window{kWindowName, "I64", {1}, std::vector<uint8_t>(sizeof(int64_t))};
  const int64_t ws = active_ ? window_start_ : -1;
  std::memcpy(window.bytes.data(), &ws, sizeof ws);
  out.push_back(std::move(window));
  if (!active_) return out;
  for (size_t i = 0; i < targets_.size(); ++i) {
    const OsciTarget& t = targets_[i];
    const Track& k = tracks_[i];
    const std::vector<float>* fields[4] = {&k.prev_w, &k.prev_q, &k.dist_m, &k.dist_q};
    const auto n = static_cast<int64_t>(k.prev_w.size());
    for (int f = 0; f < 4; ++f)
      out.push_back(f32_tensor(std::string(kStatePrefix) + t.name + "." + kFields[f], *fields[f], n, 1));
    if (!k.index.empty()) {
      StateTensor idx{std::string(kStatePrefix) + t.name + ".index", "I64", {n},
                      std::vector<uint8_t>(k.index.size() * sizeof(int64_t))};
      std::memcpy(idx.bytes.data(), k.index.data(), idx.bytes.size());
      out.push_back(std::move(idx));
    }
  }
  return out;
}

void OsciReset::load_state(const std::vector<StateTensor>& state) {
  active_ = false;
  window_start_ = -1;
  for (auto& k : tracks_) k = Track{};
  const StateTensor* window = nullptr;
  for (const auto& t : state)
    if (t.name == kWindowName) window = &t;
  if (window == nullptr) return;
  FP4_CHECK(window->dtype == "I64" && window->bytes.size() == sizeof(int64_t), "osci_reset state: ", kWindowName,
            " is not one I64");
  int64_t ws = -1;
  std::memcpy(&ws, window->bytes.data(), sizeof ws);
  if (ws < 0) return;
  const auto find = [&](const std::string& name) -> const StateTensor* {
    for (const auto& x : state)
      if (x.name == name) return &x;
    return nullptr;
  };
  const bool fraction = cfg_.track_fraction < 1.0;
  for (size_t i = 0; i < targets_.size(); ++i) {
    const OsciTarget& t = targets_[i];
    Track& k = tracks_[i];
    auto n = t.rows * t.cols;
    const std::string prefix = std::string(kStatePrefix) + t.name + ".";
    if (const StateTensor* idx = find(prefix + "index")) {
      FP4_CHECK(fraction || !t.fp4_columns.empty(), "osci_reset state: ", prefix,
                "index is present but track_fraction is 1");
      FP4_CHECK(idx->dtype == "I64" && idx->bytes.size() % sizeof(int64_t) == 0, "osci_reset state: ", prefix,
                "index should be I64");
      k.index.resize(idx->bytes.size() / sizeof(int64_t));
      std::memcpy(k.index.data(), idx->bytes.data(), idx->bytes.size());
      for (int64_t e : k.index)
        FP4_CHECK(e >= 0 && e < n, "osci_reset state: ", prefix, "index holds ", e, ", outside [0, ", n, ")");
      n = static_cast<int64_t>(k.index.size());
    } else {
      FP4_CHECK(!fraction, "osci_reset state: ", prefix, "index is missing (track_fraction < 1)");
    }
    std::vector<float>* fields[4] = {&k.prev_w, &k.prev_q, &k.dist_m, &k.dist_q};
    for (int f = 0; f < 4; ++f) {
      const std::string name = prefix + kFields[f];
      const StateTensor* s = find(name);
      FP4_CHECK(s != nullptr, "osci_reset state: ", name, " is missing (the checkpoint was saved mid-window)");
      FP4_CHECK(s->dtype == "F32" && s->bytes.size() == static_cast<size_t>(n) * sizeof(float), "osci_reset state: ",
                name, " should be ", n, " F32 values");
      fields[f]->resize(static_cast<size_t>(n));
      std::memcpy(fields[f]->data(), s->bytes.data(), s->bytes.size());
    }
  }
  active_ = true;
  window_start_ = ws;
}

}  // namespace fp4
