// OsciReset's split into schedule (optim/osci_reset.h) and per-element backend (optim/osci_reset_backend.h,
// the host form in optim/osci_reset_host.h): the schedule drives any backend on the configured steps, the
// checkpoint tensors are exactly the backend's tracks and go back to a backend unchanged, the host form's
// report follows the chunked summation order the device form reproduces, and the snapshot selection that
// both forms share picks the right elements.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "core/error.h"
#include "memory_weights.h"
#include "numerics/formats.h"
#include "numerics/quantize.h"
#include "optim/osci_reset.h"
#include "optim/osci_reset_host.h"

namespace fp4 {
namespace {

using ::testing::HasSubstr;

uint32_t fresh_seed() {
  return std::random_device{}();
}

using testing::MemoryWeights;

// A backend that records what the schedule asks of it and holds random tracks.
class RecordingBackend final : public OsciBackend {
 public:
  std::vector<std::pair<char, int>> calls;  // ('s' | 'a' | 'r', number of targets)
  std::vector<OsciTrack> tracks;
  std::vector<OsciTrack> uploaded;
  int uploads = 0, clears = 0;
  std::mt19937 rng{fresh_seed()};
  bool with_index = false;
  size_t wrong_count = 0;  // > 0: download returns this many tracks

  std::string where() const override { return "recorder"; }
  void snapshot(const std::vector<OsciTarget>& targets, double, WeightAccess&) override {
    calls.emplace_back('s', static_cast<int>(targets.size()));
    tracks.clear();
    for (const OsciTarget& t : targets) {
      OsciTrack k;
      const int64_t n =
          with_index ? std::uniform_int_distribution<int64_t>(1, t.rows * t.cols)(rng) : t.rows * t.cols;
      if (with_index) {
        for (int64_t e = 0; e < t.rows * t.cols && static_cast<int64_t>(k.index.size()) < n; ++e)
          if (rng() % 2 || t.rows * t.cols - e <= n - static_cast<int64_t>(k.index.size()))
            k.index.push_back(e);
      }
      std::normal_distribution<float> d;
      for (auto* f : {&k.prev_w, &k.prev_q, &k.dist_m, &k.dist_q})
        for (int64_t j = 0; j < n; ++j) f->push_back(d(rng));
      tracks.push_back(std::move(k));
    }
  }
  void accumulate(const std::vector<OsciTarget>& targets, WeightAccess&) override {
    calls.emplace_back('a', static_cast<int>(targets.size()));
  }
  std::vector<OsciLayerReport> reset(const std::vector<OsciTarget>& targets, double, WeightAccess&) override {
    calls.emplace_back('r', static_cast<int>(targets.size()));
    std::vector<OsciLayerReport> out;
    for (size_t i = 0; i < targets.size(); ++i)
      out.push_back(
          {targets[i].name, static_cast<int64_t>(tracks[i].prev_w.size()), static_cast<int64_t>(i), 0.5});
    tracks.clear();
    return out;
  }
  std::vector<OsciTrack> download() const override {
    if (wrong_count > 0) return std::vector<OsciTrack>(wrong_count);
    return tracks;
  }
  void upload(const std::vector<OsciTarget>&, std::vector<OsciTrack> t) override {
    ++uploads;
    uploaded = t;
    tracks = std::move(t);
  }
  void clear() override {
    ++clears;
    tracks.clear();
  }
};

QuantSpec q2_spec(bool tensor_16x16) {
  QuantSpec s;
  s.format = QuantFormat::kNvfp4;
  s.block = tensor_16x16 ? BlockShape::k16x16 : BlockShape::k1x16;
  s.outer = tensor_16x16 ? OuterScale::kTensor : OuterScale::kBlock128;
  return s;
}

std::vector<OsciTarget> two_targets() {
  return {OsciTarget{"blocks.0.attn.wqkv", 48, 128, q2_spec(false), {}},
          OsciTarget{"blocks.0.mlp.w_down", 32, 256, q2_spec(true), {}}};
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(OsciResetBackend, TheScheduleDrivesTheBackendOnTheConfiguredSteps) {
  std::mt19937 rng(fresh_seed());
  for (int trial = 0; trial < 20; ++trial) {
    OsciResetConfig cfg;
    cfg.enabled = true;
    cfg.window = std::uniform_int_distribution<int>(1, 5)(rng);
    cfg.period = cfg.window + std::uniform_int_distribution<int>(0, 4)(rng);
    cfg.start = std::uniform_int_distribution<int>(1, 7)(rng);
    SCOPED_TRACE("window " + std::to_string(cfg.window) + " period " + std::to_string(cfg.period) +
                 " start " + std::to_string(cfg.start));
    auto backend = std::make_unique<RecordingBackend>();
    RecordingBackend& rec = *backend;
    OsciReset osci(cfg, 100, two_targets(), std::move(backend));
    EXPECT_EQ(osci.backend().where(), "recorder");
    MemoryWeights none;
    std::vector<std::pair<char, int>> want;
    int64_t open = -1;
    for (int64_t step = 1; step <= 40; ++step) {
      // The schedule written out independently: accumulate while open, reset `window` steps after the
      // snapshot, snapshot at start + k * period.
      bool closes = false;
      if (open >= 0) {
        want.emplace_back('a', 2);
        if (step - open == cfg.window) {
          want.emplace_back('r', 2);
          open = -1;
          closes = true;
        }
      }
      const auto start = static_cast<int64_t>(cfg.start);
      if (step >= start && (step - start) % cfg.period == 0) {
        want.emplace_back('s', 2);
        open = step;
      }
      const auto report = osci.after_step(step, none);
      ASSERT_EQ(report.has_value(), closes) << "step " << step;
      if (report) {
        EXPECT_EQ(report->step, step);
        ASSERT_EQ(report->layers.size(), 2u);
        EXPECT_EQ(report->layers[1].reset, 1);  // the backend's own report is passed on
      }
      EXPECT_EQ(osci.tracking(), open >= 0);
    }
    EXPECT_EQ(rec.calls, want);
  }
}

TEST(OsciResetBackend, CheckpointTensorsAreTheBackendsTracksAndLoadBackUnchanged) {
  for (const bool with_index : {false, true}) {
    SCOPED_TRACE(with_index ? "tracked fraction" : "every element");
    OsciResetConfig cfg;
    cfg.enabled = true;
    cfg.window = 4;
    cfg.period = 6;
    cfg.start = 2;
    cfg.track_fraction = with_index ? 0.3 : 1.0;
    auto a = std::make_unique<RecordingBackend>();
    a->with_index = with_index;
    RecordingBackend& ra = *a;
    OsciReset first(cfg, 100, two_targets(), std::move(a));
    MemoryWeights none;
    for (int64_t step = 1; step <= 3; ++step) first.after_step(step, none);  // open since step 2
    ASSERT_TRUE(first.tracking());
    const std::vector<StateTensor> st = first.save_state();
    // Names, dtypes, shapes and bytes come straight from the tracks.
    std::map<std::string, const StateTensor*> by_name;
    for (const StateTensor& t : st) by_name[t.name] = &t;
    ASSERT_EQ(by_name.count("osci_reset.window"), 1u);
    int64_t ws = 0;
    std::memcpy(&ws, by_name["osci_reset.window"]->bytes.data(), sizeof ws);
    EXPECT_EQ(ws, 2);
    const auto targets = two_targets();
    EXPECT_EQ(st.size(), 1 + targets.size() * (with_index ? 5 : 4));
    for (size_t i = 0; i < targets.size(); ++i) {
      const OsciTrack& k = ra.tracks[i];
      const std::string p = "osci_reset." + targets[i].name + ".";
      const auto n = static_cast<int64_t>(k.prev_w.size());
      const std::pair<const char*, const std::vector<float>*> fields[] = {
          {"prev_w", &k.prev_w}, {"prev_q", &k.prev_q}, {"dist_m", &k.dist_m}, {"dist_q", &k.dist_q}};
      for (const auto& [f, v] : fields) {
        ASSERT_EQ(by_name.count(p + f), 1u) << p + f;
        const StateTensor& t = *by_name[p + f];
        EXPECT_EQ(t.dtype, "F32");
        EXPECT_EQ(t.shape, (std::vector<int64_t>{n, 1}));
        ASSERT_EQ(t.bytes.size(), v->size() * sizeof(float));
        EXPECT_EQ(std::memcmp(t.bytes.data(), v->data(), t.bytes.size()), 0) << p + f;
      }
      ASSERT_EQ(by_name.count(p + "index"), with_index ? 1u : 0u);
      if (with_index) {
        const StateTensor& t = *by_name[p + "index"];
        EXPECT_EQ(t.dtype, "I64");
        EXPECT_EQ(t.shape, (std::vector<int64_t>{n}));
        ASSERT_EQ(t.bytes.size(), k.index.size() * sizeof(int64_t));
        EXPECT_EQ(std::memcmp(t.bytes.data(), k.index.data(), t.bytes.size()), 0);
      }
    }
    // Another backend receives the same tracks, and saves the same tensors.
    auto b = std::make_unique<RecordingBackend>();
    RecordingBackend& rb = *b;
    OsciReset second(cfg, 100, two_targets(), std::move(b));
    second.load_state(st);
    EXPECT_TRUE(second.tracking());
    ASSERT_EQ(rb.uploads, 1);
    ASSERT_EQ(rb.uploaded.size(), ra.tracks.size());
    for (size_t i = 0; i < ra.tracks.size(); ++i) {
      EXPECT_EQ(rb.uploaded[i].index, ra.tracks[i].index);
      EXPECT_TRUE(same_bytes(rb.uploaded[i].prev_w, ra.tracks[i].prev_w));
      EXPECT_TRUE(same_bytes(rb.uploaded[i].dist_q, ra.tracks[i].dist_q));
    }
    const std::vector<StateTensor> again = second.save_state();
    ASSERT_EQ(again.size(), st.size());
    for (size_t i = 0; i < st.size(); ++i) {
      EXPECT_EQ(again[i].name, st[i].name);
      EXPECT_EQ(again[i].bytes, st[i].bytes) << st[i].name;
    }
    // The window then closes where the first one's does: 4 steps after step 2.
    EXPECT_FALSE(second.after_step(5, none).has_value());
    EXPECT_TRUE(second.after_step(6, none).has_value());

    // A damaged state is refused before anything reaches the backend, and the tracker is left idle.
    std::vector<StateTensor> bad = st;
    for (StateTensor& t : bad)
      if (t.name == "osci_reset." + targets[1].name + ".dist_m")
        t.bytes.resize(t.bytes.size() - sizeof(float));
    auto c = std::make_unique<RecordingBackend>();
    RecordingBackend& rc = *c;
    OsciReset third(cfg, 100, two_targets(), std::move(c));
    try {
      third.load_state(bad);
      ADD_FAILURE() << "a short dist_m was accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(targets[1].name + ".dist_m"));
    }
    EXPECT_EQ(rc.uploads, 0);
    EXPECT_GE(rc.clears, 1);
    EXPECT_FALSE(third.tracking());
  }
}

TEST(OsciResetBackend, ABackendHoldingTheWrongNumberOfTracksIsNamedOnSave) {
  OsciResetConfig cfg;
  cfg.enabled = true;
  cfg.window = 2;
  cfg.period = 2;
  cfg.start = 1;
  auto a = std::make_unique<RecordingBackend>();
  a->wrong_count = 3;
  OsciReset osci(cfg, 100, two_targets(), std::move(a));
  MemoryWeights none;
  osci.after_step(1, none);
  try {
    osci.save_state();
    ADD_FAILURE() << "3 tracks for 2 weights were saved";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("recorder"));
  }
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
