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
