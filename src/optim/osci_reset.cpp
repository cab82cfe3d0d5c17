#include "optim/osci_reset.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "optim/osci_reset_host.h"

namespace fp4 {
namespace {

constexpr const char* kWindowName = "osci_reset.window";
constexpr const char* kFields[4] = {"prev_w", "prev_q", "dist_m", "dist_q"};
// I64 [2]: the window's flip count so far and the steps it covers. Checkpoints written before flips were
// counted lack it: their window resumes counting from zero over the steps still to come.
constexpr const char* kFlipsField = "flips";

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
      out.push_back(OsciTarget{name, p->shape[0], p->shape[1], q2, {}});
    }
  return out;
}

int64_t osci_start_step(const OsciResetConfig& cfg, int64_t total_steps) {
  if (cfg.start < 1.0)
    return static_cast<int64_t>(std::llround(cfg.start * static_cast<double>(total_steps)));
  return static_cast<int64_t>(std::llround(cfg.start));
}

OsciReset::OsciReset(const OsciResetConfig& cfg, int64_t total_steps, std::vector<OsciTarget> targets,
                     std::unique_ptr<OsciBackend> backend)
    : cfg_(cfg),
      start_(osci_start_step(cfg, total_steps)),
      targets_(std::move(targets)),
      backend_(backend ? std::move(backend) : std::make_unique<OsciHostBackend>()) {
  FP4_CHECK(cfg_.window >= 1 && cfg_.period >= cfg_.window && cfg_.threshold > 0, "osci_reset: window ",
            cfg_.window, ", period ", cfg_.period, ", threshold ", cfg_.threshold,
            " (need 1 <= window <= period and threshold > 0)");
}

OsciReset::~OsciReset() = default;

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

double osci_mean_risk(std::span<const double> chunk_sums, int64_t tracked) {
  double total = 0;
  for (double s : chunk_sums) total += s;
  return tracked > 0 ? total / static_cast<double>(tracked) : 0.0;
}

double osci_flip_rate(int64_t flips, int64_t tracked, int64_t steps) {
  const double slots = static_cast<double>(tracked) * static_cast<double>(steps);
  return slots > 0 ? static_cast<double>(flips) / slots : 0.0;
}

std::optional<OsciResetReport> OsciReset::after_step(int64_t step, WeightAccess& weights) {
  std::optional<OsciResetReport> report;
  if (active_) {
    backend_->accumulate(targets_, weights);
    if (step - window_start_ >= cfg_.window) {
      report = OsciResetReport{step, backend_->reset(targets_, cfg_.threshold, weights)};
      active_ = false;
      window_start_ = -1;
    }
  }
  if (step >= start_ && (step - start_) % cfg_.period == 0) {
    backend_->snapshot(targets_, cfg_.track_fraction, weights);
    active_ = true;
    window_start_ = step;
  }
  return report;
}

std::vector<StateTensor> OsciReset::save_state() const {
  std::vector<StateTensor> out;
  StateTensor window{kWindowName, "I64", {1}, std::vector<uint8_t>(sizeof(int64_t))};
  const int64_t ws = active_ ? window_start_ : -1;
  std::memcpy(window.bytes.data(), &ws, sizeof ws);
  out.push_back(std::move(window));
  if (!active_) return out;
  const std::vector<OsciTrack> tracks = backend_->download();
  FP4_CHECK(tracks.size() == targets_.size(), "osci_reset: the ", backend_->where(), " backend holds ",
            tracks.size(), " tracks for ", targets_.size(), " weights");
  for (size_t i = 0; i < targets_.size(); ++i) {
    const OsciTarget& t = targets_[i];
    const OsciTrack& k = tracks[i];
    const std::vector<float>* fields[4] = {&k.prev_w, &k.prev_q, &k.dist_m, &k.dist_q};
    const auto n = static_cast<int64_t>(k.prev_w.size());
    for (int f = 0; f < 4; ++f)
      out.push_back(f32_tensor(std::string(kStatePrefix) + t.name + "." + kFields[f], *fields[f], n, 1));
    StateTensor flips{std::string(kStatePrefix) + t.name + "." + kFlipsField,
                      "I64",
                      {2},
                      std::vector<uint8_t>(2 * sizeof(int64_t))};
    const int64_t counts[2] = {k.flips, k.flip_steps};
    std::memcpy(flips.bytes.data(), counts, sizeof counts);
    out.push_back(std::move(flips));
    if (!k.index.empty()) {
      StateTensor idx{std::string(kStatePrefix) + t.name + ".index",
                      "I64",
                      {n},
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
  backend_->clear();
  const StateTensor* window = nullptr;
  for (const auto& t : state)
    if (t.name == kWindowName) window = &t;
  if (window == nullptr) return;
  FP4_CHECK(window->dtype == "I64" && window->bytes.size() == sizeof(int64_t),
            "osci_reset state: ", kWindowName, " is not one I64");
  int64_t ws = -1;
  std::memcpy(&ws, window->bytes.data(), sizeof ws);
  if (ws < 0) return;
  const auto find = [&](const std::string& name) -> const StateTensor* {
    for (const auto& x : state)
      if (x.name == name) return &x;
    return nullptr;
  };
  const bool fraction = cfg_.track_fraction < 1.0;
  // Flip counts: every weight's or (an older checkpoint) none; a state with only some is damaged.
  size_t with_flips = 0;
  for (const OsciTarget& t : targets_)
    if (find(std::string(kStatePrefix) + t.name + "." + kFlipsField)) ++with_flips;
  std::vector<OsciTrack> tracks(targets_.size());
  for (size_t i = 0; i < targets_.size(); ++i) {
    const OsciTarget& t = targets_[i];
    OsciTrack& k = tracks[i];
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
      FP4_CHECK(s != nullptr, "osci_reset state: ", name,
                " is missing (the checkpoint was saved mid-window)");
      FP4_CHECK(s->dtype == "F32" && s->bytes.size() == static_cast<size_t>(n) * sizeof(float),
                "osci_reset state: ", name, " should be ", n, " F32 values");
      fields[f]->resize(static_cast<size_t>(n));
      std::memcpy(fields[f]->data(), s->bytes.data(), s->bytes.size());
    }
    const std::string flips_name = prefix + kFlipsField;
    if (const StateTensor* s = find(flips_name)) {
      FP4_CHECK(s->dtype == "I64" && s->bytes.size() == 2 * sizeof(int64_t), "osci_reset state: ", flips_name,
                " should be 2 I64 values (flips, steps)");
      int64_t counts[2];
      std::memcpy(counts, s->bytes.data(), sizeof counts);
      FP4_CHECK(counts[1] >= 0 && counts[0] >= 0 &&
                    (n == 0 ? counts[0] == 0 : counts[0] / n + (counts[0] % n != 0) <= counts[1]),
                "osci_reset state: ", flips_name, " holds ", counts[0], " flips over ", counts[1],
                " steps of ", n, " tracked elements (at most one flip per element and step)");
      k.flips = counts[0];
      k.flip_steps = counts[1];
    } else {
      FP4_CHECK(with_flips == 0, "osci_reset state: ", flips_name, " is missing while ", with_flips,
                " other weights have theirs");
    }
  }
  backend_->upload(targets_, std::move(tracks));
  active_ = true;
  window_start_ = ws;
}

}  // namespace fp4
