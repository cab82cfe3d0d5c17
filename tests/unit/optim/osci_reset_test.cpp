// OsciReset (optim/osci_reset.h): oscillating weights are found and reset to their grid points, moving and
// still ones are left alone, the schedule is as configured, the recipe section parses and validates, and a
// tracker restored from its saved state continues exactly as an uninterrupted one.
#include "optim/osci_reset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <optional>
#include <random>

#include "core/error.h"
#include "memory_weights.h"
#include "numerics/quantize.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

using ::testing::HasSubstr;

using FakeWeights = testing::MemoryWeights;

QuantSpec block128_rtn() {
  QuantSpec s;
  s.format = QuantFormat::kNvfp4;
  s.outer = OuterScale::kBlock128;
  return s;
}

std::vector<float> grid_values(const std::vector<float>& w, int64_t rows, int64_t cols,
                               const QuantSpec& spec) {
  const Nvfp4Tensor q = quantize_nvfp4(w.data(), rows, cols, spec, QuantRandomness{});
  std::vector<float> out(w.size());
  dequantize(q, out.data());
  return out;
}

// A [4 x 128] weight whose every 16-block holds a fixed 6 (so its scales, and grid, stay put), and three
// kinds of elements in column 1 of each row: row 0 oscillates across the 1.0 / 1.5 midpoint, row 1 drifts
// up through 2.5 once, row 2 stands still; row 3 oscillates too but inside one bin (1.55 / 1.65).
struct Scene {
  static constexpr int64_t kRows = 4, kCols = 128;
  FakeWeights fake;
  std::mt19937 rng{std::random_device{}()};
  Scene() {
    std::vector<float> w(kRows * kCols);
    std::uniform_real_distribution<float> small(-0.2f, 0.2f);
    for (auto& x : w) x = small(rng);
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t b = 0; b < kCols / 16; ++b) w[r * kCols + b * 16] = 6.0f;
    fake.w["blocks.0.attn.wqkv"] = w;
  }
  float& at(int64_t r) { return fake.w["blocks.0.attn.wqkv"][r * kCols + 1]; }
  void move(int64_t step) {  // the weights after optimizer step `step`
    at(0) = step % 2 ? 1.27f : 1.23f;
    at(1) = 2.1f + 0.05f * static_cast<float>(step % 20);
    at(2) = 0.9f;
    at(3) = step % 2 ? 1.65f : 1.55f;
  }
  std::vector<OsciTarget> targets() const {
    return {OsciTarget{"blocks.0.attn.wqkv", kRows, kCols, block128_rtn(), {}}};
  }
};

std::string error_of_load(OsciReset& o, const std::vector<StateTensor>& st) {
  try {
    o.load_state(st);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

OsciResetConfig schedule(int window, int period, double start) {
  OsciResetConfig c;
  c.enabled = true;
  c.window = window;
  c.period = period;
  c.start = start;
  return c;
}

TEST(OsciReset, ResetsOnlyElementsThatOscillateAcrossABinEdge) {
  Scene s;
  OsciReset osci(schedule(10, 20, 5), 100, s.targets());
  std::vector<int64_t> report_steps;
  std::vector<float> before;  // the weights of step 15, before OsciReset saw them
  for (int64_t step = 1; step <= 15; ++step) {
    s.move(step);
    before = s.fake.w["blocks.0.attn.wqkv"];
    if (auto rep = osci.after_step(step, s.fake)) {
      report_steps.push_back(step);
      ASSERT_EQ(rep->layers.size(), 1u);
      EXPECT_EQ(rep->layers[0].tracked, Scene::kRows * Scene::kCols);
      EXPECT_EQ(rep->layers[0].reset, 1);  // row 0 only: R = 0.5 / 0.04 = 12.5 >= 8
      EXPECT_GT(rep->layers[0].mean_risk, 0.0);
      // Flips over the 10 steps: row 0 changes grid point every step, row 1 once (2 -> 3 on its way up
      // through 2.5), rows 2 and 3 and the still elements never.
      EXPECT_EQ(rep->layers[0].flips, 11);
      EXPECT_EQ(rep->layers[0].steps, 10);
      EXPECT_EQ(rep->layers[0].flip_rate, 11.0 / (10.0 * Scene::kRows * Scene::kCols));
    }
  }
  EXPECT_EQ(report_steps, std::vector<int64_t>{15});
  ASSERT_EQ(s.fake.writes.size(), 1u);
  // Row 0 now sits on the grid point Q(w) of the weights at step 15 (1.27 -> 1.5), nothing else moved.
  ASSERT_EQ(before[1], 1.27f);
  const std::vector<float> q = grid_values(before, Scene::kRows, Scene::kCols, block128_rtn());
  const std::vector<float>& after = s.fake.w["blocks.0.attn.wqkv"];
  EXPECT_EQ(after[1], q[1]);
  EXPECT_NEAR(after[1], 1.5f, 1e-5f);
  for (size_t e = 0; e < after.size(); ++e) {
    if (e != 1) {
      EXPECT_EQ(after[e], before[e]) << e;
    }
  }
}

TEST(OsciReset, TheMemoryEfficientVariantTracksTheElementsClosestToBinEdges) {
  // Edge scores at the snapshot (step 5): row 1 (2.35 in the bin of 2: 0.35 / 0.75 = 0.47) and row 0
  // (1.27 in the bin of 1.5: 0.23 / 0.5 = 0.46) lead every other element (at most 0.4): tracking 2 of the
  // 512 elements finds the same reset as tracking all of them.
  Scene a, b;
  b.fake.w = a.fake.w;
  OsciResetConfig efficient = schedule(10, 20, 5);
  efficient.track_fraction = 2.0 / 512.0;
  OsciReset all(schedule(10, 20, 5), 100, a.targets()), some(efficient, 100, b.targets());
  for (int64_t step = 1; step <= 15; ++step) {
    a.move(step);
    b.move(step);
    const auto ra = all.after_step(step, a.fake);
    const auto rb = some.after_step(step, b.fake);
    ASSERT_EQ(ra.has_value(), rb.has_value()) << step;
    if (!rb) continue;
    EXPECT_EQ(rb->layers[0].tracked, 2);
    EXPECT_EQ(rb->layers[0].reset, 1);
    EXPECT_EQ(ra->layers[0].reset, 1);
  }
  EXPECT_EQ(a.fake.w, b.fake.w);
  // While a window is open only the tracked elements are kept: 2 values per field, and their indices.
  Scene c;
  OsciReset open(efficient, 100, c.targets());
  for (int64_t step = 1; step <= 6; ++step) {
    c.move(step);
    open.after_step(step, c.fake);
  }
  for (const StateTensor& t : open.save_state()) {
    if (t.name == "osci_reset.window") continue;
    EXPECT_EQ(t.shape[0], 2) << t.name;
    if (t.name.ends_with(".index")) {
      std::vector<int64_t> idx(2);
      std::memcpy(idx.data(), t.bytes.data(), 16);
      EXPECT_EQ(idx, (std::vector<int64_t>{1, Scene::kCols + 1}));
    }
  }
}

TEST(OsciReset, FollowsTheScheduleAndAFractionalStart) {
  Scene s;
  OsciReset osci(schedule(3, 5, 0.5), 20, s.targets());  // start = 0.5 x 20 = step 10
  EXPECT_EQ(osci.start_step(), 10);
  std::vector<int64_t> reports, tracking;
  for (int64_t step = 1; step <= 20; ++step) {
    s.move(step);
    if (osci.after_step(step, s.fake)) reports.push_back(step);
    if (osci.tracking()) tracking.push_back(step);
  }
  EXPECT_EQ(reports, (std::vector<int64_t>{13, 18}));
  EXPECT_EQ(tracking, (std::vector<int64_t>{10, 11, 12, 15, 16, 17, 20}));
  EXPECT_EQ(osci_start_step(schedule(3, 5, 7), 1000), 7);  // >= 1: a step number
}

TEST(OsciReset, AWindowAsLongAsThePeriodRestartsRightAfterItsReset) {
  Scene s;
  OsciReset osci(schedule(4, 4, 2), 100, s.targets());
  std::vector<int64_t> reports;
  for (int64_t step = 1; step <= 14; ++step) {
    s.move(step);
    if (osci.after_step(step, s.fake)) reports.push_back(step);
    EXPECT_EQ(osci.tracking(), step >= 2) << step;
  }
  EXPECT_EQ(reports, (std::vector<int64_t>{6, 10, 14}));
}

TEST(OsciReset, RestoredStateContinuesExactlyAsTheUninterruptedRun) {
  for (const double fraction : {1.0, 0.25})
    for (int64_t stop : {7, 9, 12}) {  // mid-window, at a window's end, between windows
      SCOPED_TRACE("track_fraction " + std::to_string(fraction) + ", stop after step " +
                   std::to_string(stop));
      Scene a;
      Scene b;
      b.fake.w = a.fake.w;
      OsciResetConfig cfg = schedule(6, 8, 3);
      cfg.track_fraction = fraction;
      OsciReset full(cfg, 100, a.targets());
      OsciReset first(cfg, 100, b.targets());
      std::vector<OsciResetReport> ra, rb;
      for (int64_t step = 1; step <= 30; ++step) {
        a.move(step);
        if (auto r = full.after_step(step, a.fake)) ra.push_back(*r);
      }
      for (int64_t step = 1; step <= stop; ++step) {
        b.move(step);
        if (auto r = first.after_step(step, b.fake)) rb.push_back(*r);
      }
      OsciReset second(cfg, 100, b.targets());
      second.load_state(first.save_state());
      EXPECT_EQ(second.tracking(), first.tracking());
      for (int64_t step = stop + 1; step <= 30; ++step) {
        b.move(step);
        if (auto r = second.after_step(step, b.fake)) rb.push_back(*r);
      }
      ASSERT_EQ(ra.size(), rb.size());
      for (size_t i = 0; i < ra.size(); ++i) {
        EXPECT_EQ(ra[i].step, rb[i].step);
        EXPECT_EQ(ra[i].layers[0].reset, rb[i].layers[0].reset);
        EXPECT_EQ(ra[i].layers[0].mean_risk, rb[i].layers[0].mean_risk);
        EXPECT_GT(ra[i].layers[0].flips, 0);
        EXPECT_EQ(ra[i].layers[0].flips, rb[i].layers[0].flips);
        EXPECT_EQ(ra[i].layers[0].steps, 6);
        EXPECT_EQ(rb[i].layers[0].steps, 6);
        EXPECT_EQ(ra[i].layers[0].flip_rate, rb[i].layers[0].flip_rate);
      }
      EXPECT_EQ(a.fake.w, b.fake.w);
    }
}

// A mid-window checkpoint written before flips were counted (no ".flips" tensors) still resumes: the
// window's resets are the uninterrupted run's, and its flips are those of the steps after the resume,
// over those steps. A state with only some weights' counts, or counts no window can hold, is refused.
TEST(OsciReset, AStateWithoutFlipCountsResumesCountingFromTheResume) {
  const auto two = [] {
    return std::vector<OsciTarget>{
        OsciTarget{"blocks.0.attn.wqkv", Scene::kRows, Scene::kCols, block128_rtn(), {}},
        OsciTarget{"blocks.0.attn.wo", Scene::kRows, Scene::kCols, block128_rtn(), {}}};
  };
  Scene a, b;
  b.fake.w = a.fake.w;
  a.fake.w["blocks.0.attn.wo"] = a.fake.w["blocks.0.attn.wqkv"];
  b.fake.w["blocks.0.attn.wo"] = a.fake.w["blocks.0.attn.wqkv"];
  const OsciResetConfig cfg = schedule(6, 8, 3);  // window 3..9
  OsciReset full(cfg, 100, two()), first(cfg, 100, two());
  std::optional<OsciResetReport> ra, rb;
  for (int64_t step = 1; step <= 9; ++step) {
    a.move(step);
    if (auto r = full.after_step(step, a.fake)) ra = r;
  }
  for (int64_t step = 1; step <= 5; ++step) {
    b.move(step);
    first.after_step(step, b.fake);
  }
  const std::vector<StateTensor> saved = first.save_state();
  std::vector<StateTensor> old = saved;
  std::erase_if(old, [](const StateTensor& t) { return t.name.ends_with(".flips"); });
  ASSERT_EQ(old.size() + 2, saved.size());
  OsciReset second(cfg, 100, two());
  second.load_state(old);
  ASSERT_TRUE(second.tracking());
  for (int64_t step = 6; step <= 9; ++step) {
    b.move(step);
    if (auto r = second.after_step(step, b.fake)) rb = r;
  }
  ASSERT_TRUE(ra && rb);
  EXPECT_EQ(rb->step, 9);
  // wqkv: row 0 changes bins every step (6 flips in the window, 4 after the resume at step 5), row 1 once
  // (2 -> 3 at step 8 or 9, after the resume); wo stands still.
  const int64_t want_full[2] = {7, 0}, want_resumed[2] = {5, 0};
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(rb->layers[i].reset, ra->layers[i].reset);
    EXPECT_EQ(ra->layers[i].steps, 6);
    EXPECT_EQ(rb->layers[i].steps, 4);
    EXPECT_EQ(ra->layers[i].flips, want_full[i]);
    EXPECT_EQ(rb->layers[i].flips, want_resumed[i]);
    EXPECT_EQ(rb->layers[i].flip_rate,
              static_cast<double>(want_resumed[i]) / (4.0 * Scene::kRows * Scene::kCols));
  }
  EXPECT_EQ(a.fake.w, b.fake.w);

  OsciReset third(cfg, 100, two());
  std::vector<StateTensor> some = saved;
  std::erase_if(some, [](const StateTensor& t) { return t.name == "osci_reset.blocks.0.attn.wo.flips"; });
  EXPECT_THAT(error_of_load(third, some), HasSubstr("osci_reset.blocks.0.attn.wo.flips is missing"));
  EXPECT_FALSE(third.tracking());
  std::vector<StateTensor> bad = saved;
  for (StateTensor& t : bad)
    if (t.name == "osci_reset.blocks.0.attn.wqkv.flips") {
      const int64_t counts[2] = {2 * Scene::kRows * Scene::kCols + 1,
                                 2};  // more than one per element and step
      std::memcpy(t.bytes.data(), counts, sizeof counts);
    }
  EXPECT_THAT(error_of_load(third, bad), HasSubstr("at most one flip per element and step"));
  for (StateTensor& t : bad)
    if (t.name == "osci_reset.blocks.0.attn.wqkv.flips") t.bytes.resize(8);
  EXPECT_THAT(error_of_load(third, bad), HasSubstr("should be 2 I64 values"));
}

TEST(OsciReset, StateWithoutTheTrackerLeavesItIdleAndBadStateIsNamed) {
  Scene s;
  OsciReset osci(schedule(3, 5, 1), 100, s.targets());
  osci.load_state({});
  EXPECT_FALSE(osci.tracking());
  OsciReset busy(schedule(3, 5, 1), 100, s.targets());
  s.move(1);
  busy.after_step(1, s.fake);
  ASSERT_TRUE(busy.tracking());
  std::vector<StateTensor> st = busy.save_state();
  std::erase_if(st, [](const StateTensor& t) { return t.name.find("dist_q") != std::string::npos; });
  EXPECT_THAT(error_of_load(osci, st), HasSubstr("dist_q is missing"));
}

TEST(OsciReset, TargetsAreTheQuantizedLinearsAndRefuseUndefinedGridPoints) {
  const Recipe r = load_recipe("tetrajet-v2-base", {"bf16_layers=[-1]"});
  std::vector<ParameterInfo> params;
  for (int l = 0; l < 2; ++l)
    for (const char* n : {"attn.wqkv", "attn.wo", "mlp.w_gate_up", "mlp.w_down"})
      params.push_back(ParameterInfo{"blocks." + std::to_string(l) + "." + n, {32, 16}, true});
  const std::vector<OsciTarget> t = osci_targets(params, r, 2);
  ASSERT_EQ(t.size(), 4u);  // block 1 stays in BF16
  EXPECT_EQ(t[0].name, "blocks.0.attn.wqkv");
  EXPECT_EQ(t[3].name, "blocks.0.mlp.w_down");
  EXPECT_EQ(t[0].q2.outer, OuterScale::kBlock128);
  Recipe sr = r;
  sr.linear[Operand::kQ2W].rounding = Rounding::kSr;
  try {
    osci_targets(params, sr, 2);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("blocks.0.attn.wqkv: Q2 must use RTN"));
  }
}

TEST(OsciResetRecipe, ParsesOverridesValidatesAndRoundTrips) {
  Recipe r = load_recipe("tetrajet-v2-base", {"osci_reset.enabled=true", "osci_reset.window=40",
                                              "osci_reset.start=0.6", "osci_reset.threshold=7.5"});
  EXPECT_TRUE(r.osci_reset.enabled);
  EXPECT_EQ(r.osci_reset.window, 40);
  EXPECT_EQ(r.osci_reset.period, 200);
  EXPECT_DOUBLE_EQ(r.osci_reset.start, 0.6);
  EXPECT_DOUBLE_EQ(r.osci_reset.threshold, 7.5);
  const std::string text = to_toml(r);
  EXPECT_THAT(text, HasSubstr("[osci_reset]"));
  const Recipe back = parse_recipe(text, "round trip");
  EXPECT_EQ(to_toml(back), text);
  EXPECT_EQ(back.osci_reset.window, 40);
  EXPECT_DOUBLE_EQ(back.osci_reset.start, 0.6);
  // Recipes without it keep the text they had (checkpoints compare it).
  EXPECT_THAT(to_toml(load_recipe("tetrajet-v2-base")), ::testing::Not(HasSubstr("osci_reset")));

  const auto error_of = [](const std::vector<std::string>& o) {
    try {
      load_recipe("tetrajet-v2-base", o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error_of({"osci_reset.enabled=true", "osci_reset.window=300"}),
              HasSubstr("at least its window"));
  EXPECT_THAT(error_of({"osci_reset.window=0"}), HasSubstr("positive number of steps"));
  EXPECT_THAT(error_of({"osci_reset.threshold=-1"}), HasSubstr("positive number"));
  EXPECT_THAT(error_of({"osci_reset.windw=3"}), HasSubstr("unknown key"));
  EXPECT_THAT(error_of({"osci_reset.enabled=true", "linear.q2.rounding=sr"}), HasSubstr("RTN and no RHT"));
  EXPECT_THAT(error_of({"osci_reset.enabled=yes"}), HasSubstr("true or false"));
  EXPECT_THAT(error_of({"osci_reset.track_fraction=1.5"}), HasSubstr("fraction in (0, 1]"));
  EXPECT_DOUBLE_EQ(
      load_recipe("tetrajet-v2-base", {"osci_reset.track_fraction=0.1"}).osci_reset.track_fraction, 0.1);
  const std::string bf16 = [] {
    try {
      load_recipe("bf16", {"osci_reset.enabled=true"});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  EXPECT_THAT(bf16, HasSubstr("tracks NVFP4 weights"));
}

}  // namespace
}  // namespace fp4
