#include "optim/osci_reset_host.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "numerics/formats.h"
#include "numerics/quantize.h"

namespace fp4 {
namespace {

// Q(w) dequantized, and (when edge_score is given) each element's bin-edge score.
std::vector<float> quantized(const OsciTarget& t, std::span<const float> w, std::vector<float>* edge_score) {
  if (!t.fp4_columns.empty()) {
    // OutControl: Q over the FP4 columns as the split layer's forward sees them (gathered, zero-padded to
    // whole 128-blocks); other elements keep their value and an edge score of -1 (never tracked).
    const auto k = static_cast<int64_t>(t.fp4_columns.size()), padded = (k + 127) / 128 * 128;
    const OsciTarget g{t.name, t.rows, padded, t.q2, {}};
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

// The ceil(fraction * n) elements with the highest scores (ties: the lower index), ascending.
std::vector<int64_t> closest_to_edges(const std::vector<float>& score, double fraction) {
  const auto n = static_cast<int64_t>(score.size());
  const auto k = std::min<int64_t>(n, static_cast<int64_t>(std::ceil(fraction * static_cast<double>(n))));
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

std::vector<float> read_all(const OsciTarget& t, WeightAccess& weights) {
  std::vector<float> w(static_cast<size_t>(t.rows * t.cols));
  weights.read(t.name, w);
  return w;
}

}  // namespace

OsciTrack osci_host_snapshot(const OsciTarget& t, std::span<const float> w, double track_fraction) {
  FP4_CHECK(static_cast<int64_t>(w.size()) == t.rows * t.cols, "osci_reset: ", t.name, " holds ", w.size(),
            " values, expected [", t.rows, " x ", t.cols, "]");
  const bool fraction = track_fraction < 1.0;
  std::vector<float> score;
  const std::vector<float> q = quantized(t, w, fraction ? &score : nullptr);
  OsciTrack k;
  if (fraction) k.index = closest_to_edges(score, track_fraction);
  if (!t.fp4_columns.empty()) k.index = only_fp4_columns(t, k.index, fraction);
  k.prev_w = gather(std::vector<float>(w.begin(), w.end()), k.index);
  k.prev_q = gather(q, k.index);
  k.dist_m.assign(k.prev_w.size(), 0.0f);
  k.dist_q.assign(k.prev_w.size(), 0.0f);
  return k;
}

void OsciHostBackend::snapshot(const std::vector<OsciTarget>& targets, double track_fraction,
                               WeightAccess& weights) {
  tracks_.clear();
  for (const OsciTarget& t : targets)
    tracks_.push_back(osci_host_snapshot(t, read_all(t, weights), track_fraction));
}

void OsciHostBackend::accumulate(const std::vector<OsciTarget>& targets, WeightAccess& weights) {
  for (size_t i = 0; i < targets.size(); ++i) {
    const OsciTarget& t = targets[i];
    OsciTrack& k = tracks_[i];
    const std::vector<float> full = read_all(t, weights);
    std::vector<float> w = gather(full, k.index);
    std::vector<float> q = gather(quantized(t, full, nullptr), k.index);
    int64_t flips = 0;
    for (size_t e = 0; e < w.size(); ++e) {
      k.dist_m[e] += std::fabs(w[e] - k.prev_w[e]);
      k.dist_q[e] += std::fabs(q[e] - k.prev_q[e]);
      flips += q[e] != k.prev_q[e] ? 1 : 0;
    }
    k.flips += flips;
    ++k.flip_steps;
    k.prev_w.swap(w);
    k.prev_q.swap(q);
  }
}

std::vector<OsciLayerReport> OsciHostBackend::reset(const std::vector<OsciTarget>& targets, double threshold,
                                                    WeightAccess& weights) {
  std::vector<OsciLayerReport> out;
  for (size_t i = 0; i < targets.size(); ++i) {
    const OsciTarget& t = targets[i];
    const OsciTrack& k = tracks_[i];
    // prev_q holds this step's grid points (accumulate ran first); the other elements are written back
    // as they were read.
    std::vector<float> w = read_all(t, weights);
    const auto n = static_cast<int64_t>(k.prev_w.size());
    OsciLayerReport layer{t.name, n, 0, 0.0, k.flips, k.flip_steps, osci_flip_rate(k.flips, n, k.flip_steps)};
    std::vector<double> chunk_sums(static_cast<size_t>((n + kOsciRiskChunk - 1) / kOsciRiskChunk), 0.0);
    for (int64_t j = 0; j < n; ++j) {
      const auto u = static_cast<size_t>(j);
      const float risk = k.dist_m[u] > 0.0f ? k.dist_q[u] / k.dist_m[u] : 0.0f;
      chunk_sums[static_cast<size_t>(j / kOsciRiskChunk)] += risk;
      if (risk >= threshold) {
        w[k.index.empty() ? u : static_cast<size_t>(k.index[u])] = k.prev_q[u];
        ++layer.reset;
      }
    }
    layer.mean_risk = osci_mean_risk(chunk_sums, n);
    if (layer.reset > 0) weights.write(t.name, w);
    out.push_back(layer);
  }
  tracks_.clear();  // the window's memory is released until the next snapshot
  return out;
}

void OsciHostBackend::upload(const std::vector<OsciTarget>& targets, std::vector<OsciTrack> tracks) {
  FP4_CHECK(tracks.size() == targets.size(), "osci_reset: ", tracks.size(), " tracks for ", targets.size(),
            " weights");
  tracks_ = std::move(tracks);
}

}  // namespace fp4
