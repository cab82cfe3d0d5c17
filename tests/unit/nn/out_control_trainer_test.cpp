// OutControl through the trainer: the freeze is logged as an `out_control` metrics line, OsciReset then
// tracks only the FP4 columns, and a run stopped during calibration resumes to the same bytes.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <random>

#include "../train/test_util.h"
#include "train/metrics.h"
#include "train/run_config.h"
#include "train/sha256.h"
#include "train/trainer.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;

class OutControlTrainer : public ::testing::Test {
 protected:
  void SetUp() override { testing::prepare_corpus(tmp_.path()); }

  // One block of width 128 (TetraJet-v2's block128 scales need it), 4 x 32 tokens per micro-batch;
  // calibration over steps 2..4, OsciReset windows of 2 steps every 3 from step 5 (after the freeze).
  RunConfig config(const std::string& run, int64_t steps) const {
    RunConfig c = testing::small_run_config(tmp_.path(), run, steps, seed_, 4, 10);
    c.model.d_model = 128;
    c.model.d_ff = 256;
    c.data.grad_accum = 1;
    c.train.eval_every = 5;
    c.train.eval_batches = 1;
    c.train.ckpt_every = 100;
    c.recipe.name = "tetrajet-v2-base";
    c.recipe.overrides = {
        {"out_control.enabled", "true"}, {"out_control.calib_start", "2"}, {"out_control.calib_steps", "3"},
        {"out_control.round_to", "16"},  {"osci_reset.enabled", "true"},   {"osci_reset.window", "2"},
        {"osci_reset.period", "3"},      {"osci_reset.start", "5"},        {"osci_reset.threshold", "1"}};
    return c;
  }

  TrainerOptions quiet() const {
    TrainerOptions o;
    o.log = log_.get();
    return o;
  }

  std::vector<nlohmann::json> records(const std::string& run, const std::string& type) const {
    std::vector<nlohmann::json> out;
    for (const auto& j : read_metrics(tmp_ / run / "metrics.jsonl"))
      if (j["type"] == type) out.push_back(j);
    return out;
  }

  testing::TempDir tmp_;
  uint64_t seed_ = std::random_device{}();
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log_{std::tmpfile(), &std::fclose};
};

TEST_F(OutControlTrainer, FreezeIsLoggedOsciResetTracksFp4ColumnsAndResumeIsBitExact) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  Trainer(config("full", 10), quiet()).run();
  const auto oc = records("full", "out_control");
  ASSERT_EQ(oc.size(), 1u);
  EXPECT_EQ(oc[0]["step"], 4);
  ASSERT_EQ(oc[0]["layers"].size(), 4u);
  int64_t fp4_elements = 0;
  for (const auto& l : oc[0]["layers"]) {
    const int in = l["in_features"].get<int>();
    EXPECT_EQ(l["channels"].get<int>(), in == 128 ? 16 : 32)
        << l["name"];  // ceil(12.8) -> 16, ceil(25.6) -> 32
    const double share = l["share"].get<double>();
    EXPECT_GT(share, 0.0);
    EXPECT_LT(share, 1.0);
  }
  const auto osci = records("full", "osci_reset");
  ASSERT_EQ(osci.size(), 2u);  // windows from steps 5 and 8 close at 7 and 10
  for (const auto& e : osci) {
    int64_t tracked = 0;
    for (const auto& l : e["layers"]) tracked += l["tracked"].get<int64_t>();
    EXPECT_EQ(tracked, e["tracked"].get<int64_t>());
    fp4_elements = tracked;
  }
  // Tracked = every element of the FP4 columns: out * (in - |C8|) per linear.
  int64_t expect = 0;
  const ModelConfig m = config("x", 1).model;
  const int64_t d = m.d_model, ff = m.d_ff;
  for (const auto& l : oc[0]["layers"]) {
    const int64_t in = l["in_features"].get<int64_t>(), c8 = l["channels"].get<int64_t>();
    const std::string name = l["name"];
    const int64_t out = name.find("wqkv") != std::string::npos        ? 3 * d
                        : name.find("w_gate_up") != std::string::npos ? 2 * ff
                                                                      : d;
    expect += out * (in - c8);
  }
  EXPECT_EQ(fp4_elements, expect);

  // Stopped inside the calibration window (step 3), and after the freeze inside an OsciReset window (6).
  for (int stop : {3, 6}) {
    const std::string run = "split" + std::to_string(stop);
    Trainer(config(run, stop), quiet()).run();
    Trainer rest(config(run, 10), quiet());
    ASSERT_TRUE(rest.resumed());
    rest.run();
    EXPECT_EQ(records(run, "out_control").size(), 1u) << run;
    EXPECT_EQ(records(run, "osci_reset").size(), 2u) << run;
    EXPECT_EQ(sha256_file(tmp_ / "full/checkpoints/step_000010/model.safetensors"),
              sha256_file(tmp_ / run / "checkpoints/step_000010/model.safetensors"))
        << run;
  }
}

}  // namespace
}  // namespace fp4
