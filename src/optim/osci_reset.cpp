#include "optim/osci_reset.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
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

std::vector<float> OsciReset::quantized(const OsciTarget& t, std::span<const float> w) const {
  const Nvfp4Tensor q = quantize_nvfp4(w.data(), t.rows, t.cols, t.q2, QuantRandomness{});
  std::vector<float> out(w.size());
  dequantize(q, out.data());
  return out;
}

void OsciReset::snapshot(int64_t step, WeightAccess& weights) {
  for (size_t i = 0; i < targets_.size(); ++i) {
    const OsciTarget& t = targets_[i];
    Track& k = tracks_[i];
    const auto n = static_cast<size_t>(t.rows * t.cols);
    k.prev_w.resize(n);
    weights.read(t.name, k.prev_w);
    k.prev_q = quantized(t, k.prev_w);
    k.dist_m.assign(n, 0.0f);
    k.dist_q.assign(n, 0.0f);
  }
  active_ = true;
  window_start_ = step;
}

void OsciReset::accumulate(WeightAccess& weights) {
  std::vector<float> w;
  for (size_t i = 0; i < targets_.size(); ++i) {
    const OsciTarget& t = targets_[i];
    Track& k = tracks_[i];
    w.resize(k.prev_w.size());
    weights.read(t.name, w);
    const std::vector<float> q = quantized(t, w);
    for (size_t e = 0; e < w.size(); ++e) {
      k.dist_m[e] += std::fabs(w[e] - k.prev_w[e]);
      k.dist_q[e] += std::fabs(q[e] - k.prev_q[e]);
    }
    k.prev_w.swap(w);
    k.prev_q = q;
  }
}

OsciResetReport OsciReset::reset(int64_t step, WeightAccess& weights) {
  OsciResetReport report;
  report.step = step;
  for (size_t i = 0; i < targets_.size(); ++i) {
    const OsciTarget& t = targets_[i];
    Track& k = tracks_[i];
    // prev_w / prev_q hold this step's weights and grid points (accumulate ran first).
    std::vector<float> w = k.prev_w;
    OsciLayerReport layer{t.name, static_cast<int64_t>(w.size()), 0, 0.0};
    double risk_sum = 0;
    for (size_t e = 0; e < w.size(); ++e) {
      const float risk = k.dist_m[e] > 0.0f ? k.dist_q[e] / k.dist_m[e] : 0.0f;
      risk_sum += risk;
      if (risk >= cfg_.threshold) {
        w[e] = k.prev_q[e];
        ++layer.reset;
      }
    }
    layer.mean_risk = w.empty() ? 0.0 : risk_sum / static_cast<double>(w.size());
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
    for (int f = 0; f < 4; ++f)
      out.push_back(f32_tensor(std::string(kStatePrefix) + t.name + "." + kFields[f], *fields[f], t.rows, t.cols));
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
  for (size_t i = 0; i < targets_.size(); ++i) {
    const OsciTarget& t = targets_[i];
    Track& k = tracks_[i];
    std::vector<float>* fields[4] = {&k.prev_w, &k.prev_q, &k.dist_m, &k.dist_q};
    for (int f = 0; f < 4; ++f) {
      const std::string name = std::string(kStatePrefix) + t.name + "." + kFields[f];
      const StateTensor* s = nullptr;
      for (const auto& x : state)
        if (x.name == name) s = &x;
      FP4_CHECK(s != nullptr, "osci_reset state: ", name, " is missing (the checkpoint was saved mid-window)");
      FP4_CHECK(s->dtype == "F32" && s->bytes.size() == static_cast<size_t>(t.rows * t.cols) * sizeof(float),
                "osci_reset state: ", name, " should be F32 [", t.rows, " x ", t.cols, "]");
      fields[f]->resize(static_cast<size_t>(t.rows * t.cols));
      std::memcpy(fields[f]->data(), s->bytes.data(), s->bytes.size());
    }
  }
  active_ = true;
  window_start_ = ws;
}

}  // namespace fp4
