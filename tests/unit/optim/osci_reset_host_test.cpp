// OsciReset's host backend: its report follows the chunked summation order the device form reproduces, and
// the snapshot selection that both forms share picks the elements closest to bin edges.
#include "optim/osci_reset_host.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "memory_weights.h"
#include "numerics/formats.h"
#include "numerics/quantize.h"
#include "optim/osci_reset.h"
#include "osci_reset_test_util.h"

namespace fp4 {
namespace {

using testing::MemoryWeights;
using testing::q2_spec;
using testing::same_bytes;

uint32_t fresh_seed() {
  return std::random_device{}();
}

// The host form's window end, checked against its own tracks just before it: every element with
// R >= threshold (and only those) takes prev_q, the count and the mean risk (summed chunk by chunk, the
// order the device form reproduces) are the report's, and the mean is the plain mean to rounding.
TEST(OsciResetHost, TheResetAndItsReportFollowTheTracks) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (const double fraction : {1.0, 0.3}) {
    for (const bool tensor : {false, true}) {
      SCOPED_TRACE(std::string(tensor ? "16x16 tensor" : "1x16 block128") + " fraction " +
                   std::to_string(fraction));
      // 37 rows: 1x16 blocks take any row count; 16x16 blocks need a multiple of 16.
      const OsciTarget t{"w", tensor ? 48 : 37, 256, q2_spec(tensor), {}};
      MemoryWeights mem;
      std::normal_distribution<float> d(0.0f, 1.0f);
      auto& w = mem.w["w"];
      w.resize(static_cast<size_t>(t.rows * t.cols));
      for (auto& v : w) v = d(rng);
      OsciHostBackend host;
      host.snapshot({t}, fraction, mem);
      for (int s = 0; s < 4; ++s) {
        for (auto& v : w) v += 0.05f * d(rng);  // a random walk: many grid points move
        host.accumulate({t}, mem);
      }
      const std::vector<OsciTrack> tracks = host.download();
      ASSERT_EQ(tracks.size(), 1u);
      const OsciTrack& k = tracks[0];
      const auto n = static_cast<int64_t>(k.prev_w.size());
      EXPECT_EQ(n, fraction < 1 ? static_cast<int64_t>(std::ceil(fraction * static_cast<double>(w.size())))
                                : static_cast<int64_t>(w.size()));
      EXPECT_GT(n, 2 * kOsciRiskChunk);  // several chunks, the last one partial in the 37-row case
      // A threshold at a median risk: about half the elements reset.
      std::vector<float> risk(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j)
        risk[static_cast<size_t>(j)] = k.dist_m[j] > 0.0f ? k.dist_q[j] / k.dist_m[j] : 0.0f;
      std::vector<float> sorted = risk;
      std::nth_element(sorted.begin(), sorted.begin() + n / 2, sorted.end());
      const double threshold = std::max(1e-6, static_cast<double>(sorted[static_cast<size_t>(n / 2)]));
      std::vector<float> want = w;
      int64_t want_reset = 0;
      double chunked = 0, plain = 0, chunk = 0;
      for (int64_t j = 0; j < n; ++j) {
        const float r = risk[static_cast<size_t>(j)];
        chunk += r;
        plain += r;
        if ((j + 1) % kOsciRiskChunk == 0 || j + 1 == n) {
          chunked += chunk;
          chunk = 0;
        }
        if (r >= threshold) {
          want[static_cast<size_t>(k.index.empty() ? j : k.index[static_cast<size_t>(j)])] = k.prev_q[j];
          ++want_reset;
        }
      }
      const std::vector<OsciLayerReport> rep = host.reset({t}, threshold, mem);
      ASSERT_EQ(rep.size(), 1u);
      EXPECT_EQ(rep[0].tracked, n);
      EXPECT_EQ(rep[0].reset, want_reset);
      EXPECT_GT(want_reset, 0);
      EXPECT_LT(want_reset, n);
      const double mean = chunked / static_cast<double>(n);
      EXPECT_EQ(std::memcmp(&rep[0].mean_risk, &mean, sizeof mean), 0) << rep[0].mean_risk << " vs " << mean;
      EXPECT_NEAR(rep[0].mean_risk, plain / static_cast<double>(n), 1e-12 * std::fabs(mean));
      EXPECT_TRUE(same_bytes(w, want));
      EXPECT_TRUE(host.download().empty()) << "the window's memory outlived its reset";
    }
  }
}

// A weight whose every element sits near a chosen E2M1 grid point: code[e] is a signed magnitude index
// (+-1..7 for 0.5..6, 0 for zero), and every 16-column block starts with +-6, so that every 1x16 and
// 16x16 block (and the tensor) keeps amax 6 and the grid stays put. Q(w) then changes exactly where the
// signed grid value changes (+0 and -0 dequantize to equal values: no flip).
struct GridScene {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  int64_t rows = 32, cols = 128;
  std::mt19937 rng;
  std::vector<int> code;
  explicit GridScene(uint32_t seed) : rng(seed), code(static_cast<size_t>(rows * cols)) {
    for (size_t e = 0; e < code.size(); ++e) code[e] = random_code(e);
  }
  bool anchor(size_t e) const { return static_cast<int64_t>(e) % 16 == 0; }
  int random_code(size_t e) {
    const int sign = rng() % 2 ? 1 : -1;
    return sign * (anchor(e) ? 7 : static_cast<int>(rng() % 7));  // 0..4 away from the 6s: amax stays 6
  }
  // The values: each grid point plus a jitter well inside its bin (the narrowest half-bin is 0.25).
  void write(std::vector<float>& w) {
    std::uniform_real_distribution<float> jitter(-0.1f, 0.1f);
    w.resize(code.size());
    for (size_t e = 0; e < code.size(); ++e) {
      const float mag = kMag[std::abs(code[e])];
      w[e] = (code[e] < 0 ? -mag : mag) + (anchor(e) ? 0.0f : jitter(rng));
    }
  }
  static bool same_value(int a, int b) { return a == b || (a == 0 && b == 0); }
};

// Flips on a hand-made sequence: at every step some elements move to another grid point (the anchors
// flip their sign), the rest jitter in place; the count is the number of tracked elements whose grid
// point changed, summed over the steps, with every element and with a tracked fraction.
TEST(OsciResetHost, FlipsCountTheTrackedElementsWhoseGridPointChanged) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const double fraction : {1.0, 0.3})
    for (const bool tensor : {false, true}) {
      SCOPED_TRACE(std::string(tensor ? "16x16 tensor" : "1x16 block128") + " fraction " +
                   std::to_string(fraction));
      GridScene g(seed + (tensor ? 1u : 0u));
      const OsciTarget t{"w", g.rows, g.cols, q2_spec(tensor), {}};
      MemoryWeights mem;
      g.write(mem.w["w"]);
      OsciHostBackend host;
      host.snapshot({t}, fraction, mem);
      const std::vector<int64_t> index = host.download()[0].index;
      const auto tracked = static_cast<int64_t>(fraction < 1 ? index.size() : g.code.size());
      const auto element = [&](int64_t j) { return static_cast<size_t>(index.empty() ? j : index[j]); };
      int64_t want = 0;
      const int steps = 5;
      for (int s = 0; s < steps; ++s) {
        const std::vector<int> before = g.code;
        const double move = s == 2 ? 0.0 : 0.3;  // one step where nothing changes bins
        for (size_t e = 0; e < g.code.size(); ++e)
          if (std::uniform_real_distribution<double>(0, 1)(g.rng) < move) g.code[e] = g.random_code(e);
        for (int64_t j = 0; j < tracked; ++j)
          want += GridScene::same_value(before[element(j)], g.code[element(j)]) ? 0 : 1;
        g.write(mem.w["w"]);
        host.accumulate({t}, mem);
        const OsciTrack k = host.download()[0];
        EXPECT_EQ(k.flips, want) << "after step " << s + 1;
        EXPECT_EQ(k.flip_steps, s + 1);
      }
      EXPECT_GT(want, 0);
      EXPECT_LT(want, tracked * steps);
      const std::vector<OsciLayerReport> rep = host.reset({t}, 1e30, mem);
      ASSERT_EQ(rep.size(), 1u);
      EXPECT_EQ(rep[0].reset, 0);
      EXPECT_EQ(rep[0].flips, want);
      EXPECT_EQ(rep[0].steps, steps);
      EXPECT_EQ(rep[0].flip_rate, static_cast<double>(want) / (static_cast<double>(tracked) * steps));
    }
}

// Weights that stand still, or move inside their bins, flip nothing; weights whose every element
// alternates between two grid points flip every tracked element at every step (flip_rate 1).
TEST(OsciResetHost, FlipsAreZeroForStillWeightsAndEveryElementForAlternatingOnes) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const double fraction : {1.0, 0.3})
    for (const bool tensor : {false, true}) {
      SCOPED_TRACE(std::string(tensor ? "16x16 tensor" : "1x16 block128") + " fraction " +
                   std::to_string(fraction));
      const int steps = 4;
      {  // still, then jittering in place
        GridScene g(seed);
        const OsciTarget t{"w", g.rows, g.cols, q2_spec(tensor), {}};
        MemoryWeights mem;
        g.write(mem.w["w"]);
        OsciHostBackend host;
        host.snapshot({t}, fraction, mem);
        for (int s = 0; s < steps; ++s) {
          if (s >= steps / 2) g.write(mem.w["w"]);  // new jitter, same grid points
          host.accumulate({t}, mem);
        }
        const OsciTrack k = host.download()[0];
        EXPECT_GT(*std::max_element(k.dist_m.begin(), k.dist_m.end()), 0.0f);  // they did move
        const std::vector<OsciLayerReport> rep = host.reset({t}, 1e30, mem);
        EXPECT_EQ(rep[0].flips, 0);
        EXPECT_EQ(rep[0].steps, steps);
        EXPECT_EQ(rep[0].flip_rate, 0.0);
      }
      {  // every element between +v and -v (the zeros made 0.5; the anchors +-6)
        GridScene g(seed);
        for (size_t e = 0; e < g.code.size(); ++e)
          if (g.code[e] == 0) g.code[e] = 1;
        const OsciTarget t{"w", g.rows, g.cols, q2_spec(tensor), {}};
        MemoryWeights mem;
        g.write(mem.w["w"]);
        OsciHostBackend host;
        host.snapshot({t}, fraction, mem);
        const auto tracked = static_cast<int64_t>(host.download()[0].prev_w.size());
        for (int s = 0; s < steps; ++s) {
          for (int& c : g.code) c = -c;
          g.write(mem.w["w"]);
          host.accumulate({t}, mem);
        }
        const std::vector<OsciLayerReport> rep = host.reset({t}, 1e30, mem);
        EXPECT_EQ(rep[0].tracked, tracked);
        EXPECT_EQ(rep[0].flips, tracked * steps);
        EXPECT_EQ(rep[0].flip_rate, 1.0);
      }
    }
  EXPECT_EQ(osci_flip_rate(0, 0, 3), 0.0);
  EXPECT_EQ(osci_flip_rate(0, 5, 0), 0.0);
  EXPECT_EQ(osci_flip_rate(3, 4, 2), 3.0 / 8.0);
}

TEST(OsciResetHost, MeanRiskSumsChunksInOrder) {
  std::mt19937 rng(fresh_seed());
  EXPECT_EQ(osci_mean_risk({}, 0), 0.0);
  std::vector<double> sums(7);
  for (auto& s : sums) s = std::uniform_real_distribution<double>(0, 1e3)(rng);
  double total = 0;
  for (double s : sums) total += s;
  EXPECT_EQ(osci_mean_risk(sums, 1700), total / 1700.0);
}

// The snapshot selection both forms use: ceil(fraction * n) distinct elements, ascending, whose edge scores
// are at least those of every element left out, with prev_w = w and prev_q = Q(w) there and zero distances.
TEST(OsciResetHost, TheSnapshotSelectsTheElementsClosestToBinEdges) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (const bool tensor : {false, true}) {
    const OsciTarget t{"w", 32, 128, q2_spec(tensor), {}};
    std::vector<float> w(static_cast<size_t>(t.rows * t.cols));
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (auto& v : w) v = d(rng);
    w[5] = 0.0f;  // a zero and a whole zero block: no scale
    std::fill(w.begin() + 16, w.begin() + 32, 0.0f);
    const Nvfp4Tensor q = quantize_nvfp4(w.data(), t.rows, t.cols, t.q2, QuantRandomness{});
    std::vector<float> qv(w.size());
    dequantize(q, qv.data());
    const OsciTrack all = osci_host_snapshot(t, w, 1.0);
    EXPECT_TRUE(all.index.empty());
    EXPECT_TRUE(same_bytes(all.prev_w, w));
    EXPECT_TRUE(same_bytes(all.prev_q, qv));
    for (const double fraction : {1e-9, 0.1, 0.3, 0.999}) {
      SCOPED_TRACE("fraction " + std::to_string(fraction));
      const OsciTrack k = osci_host_snapshot(t, w, fraction);
      const auto want = static_cast<size_t>(std::ceil(fraction * static_cast<double>(w.size())));
      ASSERT_EQ(k.index.size(), want);
      EXPECT_TRUE(std::is_sorted(k.index.begin(), k.index.end()));
      EXPECT_EQ(std::adjacent_find(k.index.begin(), k.index.end()), k.index.end());
      ASSERT_EQ(k.prev_w.size(), want);
      std::vector<char> chosen(w.size(), 0);
      for (size_t j = 0; j < want; ++j) {
        const auto e = static_cast<size_t>(k.index[j]);
        chosen[e] = 1;
        EXPECT_EQ(std::memcmp(&k.prev_w[j], &w[e], sizeof(float)), 0);
        EXPECT_EQ(std::memcmp(&k.prev_q[j], &qv[e], sizeof(float)), 0);
        EXPECT_EQ(k.dist_m[j], 0.0f);
        EXPECT_EQ(k.dist_q[j], 0.0f);
      }
      // Edge score written out: |w/s - q| / binwidth(q), s the element's scale.
      static constexpr float kWidth[8] = {0.5f, 0.5f, 0.5f, 0.5f, 0.75f, 1.0f, 1.5f, 2.0f};
      static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
      const auto score = [&](size_t e) {
        const int64_t r = static_cast<int64_t>(e) / t.cols, c = static_cast<int64_t>(e) % t.cols;
        const uint8_t m = q.code(r, c) & 7u;
        const float s = std::fabs(q.value(r, c)) > 0.0f ? std::fabs(q.value(r, c)) / kMag[m]
                                                        : e4m3_decode(q.scale(r, c)) * q.outer_scale(r, c);
        const float a = s > 0.0f ? std::fabs(w[e]) / s : 0.0f;
        return std::isfinite(a) ? std::fabs(a - kMag[m]) / kWidth[m] : 0.0f;
      };
      float lowest_in = INFINITY, highest_out = -INFINITY;
      for (size_t e = 0; e < w.size(); ++e) {
        if (chosen[e])
          lowest_in = std::min(lowest_in, score(e));
        else
          highest_out = std::max(highest_out, score(e));
      }
      if (want < w.size()) {
        EXPECT_GE(lowest_in, highest_out - 1e-5f);
      }
    }
  }
}

}  // namespace
}  // namespace fp4
