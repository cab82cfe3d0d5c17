// OsciReset's split into schedule (optim/osci_reset.h) and per-element backend (optim/osci_reset_backend.h,
// the host form in optim/osci_reset_host.h, tested in osci_reset_host_test.cpp): the schedule drives any
// backend on the configured steps, and the checkpoint tensors are exactly the backend's tracks and go back
// to a backend unchanged.
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
#include "osci_reset_test_util.h"

namespace fp4 {
namespace {

using ::testing::HasSubstr;

uint32_t fresh_seed() {
  return std::random_device{}();
}

using testing::MemoryWeights;
using testing::q2_spec;
using testing::same_bytes;

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
      k.flip_steps = std::uniform_int_distribution<int64_t>(0, 50)(rng);
      k.flips = std::uniform_int_distribution<int64_t>(0, n * k.flip_steps)(rng);
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

std::vector<OsciTarget> two_targets() {
  return {OsciTarget{"blocks.0.attn.wqkv", 48, 128, q2_spec(false), {}},
          OsciTarget{"blocks.0.mlp.w_down", 32, 256, q2_spec(true), {}}};
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
    EXPECT_EQ(st.size(), 1 + targets.size() * (with_index ? 6 : 5));
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
      ASSERT_EQ(by_name.count(p + "flips"), 1u);
      const StateTensor& flips = *by_name[p + "flips"];
      EXPECT_EQ(flips.dtype, "I64");
      EXPECT_EQ(flips.shape, (std::vector<int64_t>{2}));
      ASSERT_EQ(flips.bytes.size(), 2 * sizeof(int64_t));
      int64_t counts[2];
      std::memcpy(counts, flips.bytes.data(), sizeof counts);
      EXPECT_EQ(counts[0], k.flips);
      EXPECT_EQ(counts[1], k.flip_steps);
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
      EXPECT_EQ(rb.uploaded[i].flips, ra.tracks[i].flips);
      EXPECT_EQ(rb.uploaded[i].flip_steps, ra.tracks[i].flip_steps);
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

}  // namespace
}  // namespace fp4
