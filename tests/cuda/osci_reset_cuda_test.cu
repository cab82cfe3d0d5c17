// OsciReset's device form (optim/cuda/osci_device_backend.h) against the host form (optim/osci_reset_host.h):
// on the CUDA engine, over several windows, both give the same weights after each reset, the same reports and
// the same checkpoint bytes, bit for bit; a state saved by one form continues in the other; thresholds that
// reset nothing and everything; a weight whose row count is not a multiple of 16, at an unaligned address.
//
// The host form runs on a second engine that mirrors the first one's state before every tracker step, so
// only the trackers can make the two differ (not the training kernels' own reproducibility).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../unit/train/test_util.h"
#include "core/error.h"
#include "model/config.h"
#include "model/cuda/cuda_engine.h"
#include "model/engine_weight_access.h"
#include "numerics/quantize.h"
#include "ops/cuda/cuda_check.h"
#include "optim/cuda/osci_device_backend.h"
#include "optim/osci_reset.h"
#include "optim/osci_reset_host.h"
#include "recipe/recipe_io.h"
#include "train/engine_factory.h"
#include "train/metrics.h"
#include "train/trainer.h"

namespace fp4 {
namespace {

uint32_t fresh_seed() {
  static std::random_device rd;
  return rd();
}

Batch token_batch(std::mt19937& rng, const ModelConfig& cfg) {
  const int b = 2, t = 64;  // 128 tokens: block128 scaling along the tokens in the backward
  std::uniform_int_distribution<int> tok(0, cfg.vocab_real - 1);
  Batch batch{b, t, std::vector<int32_t>(b * t), std::vector<int32_t>(b * t)};
  for (auto& x : batch.tokens) x = tok(rng);
  for (auto& x : batch.targets) x = tok(rng);
  return batch;
}

std::vector<float> read_weight(const TrainingEngine& e, const OsciTarget& t) {
  std::vector<float> v(static_cast<size_t>(t.rows * t.cols));
  e.read_parameter(t.name, v);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_same_reports(const std::optional<OsciResetReport>& dev,
                         const std::optional<OsciResetReport>& host, int64_t step) {
  ASSERT_EQ(dev.has_value(), host.has_value()) << "step " << step;
  if (!dev) return;
  EXPECT_EQ(dev->step, host->step);
  ASSERT_EQ(dev->layers.size(), host->layers.size());
  for (size_t i = 0; i < dev->layers.size(); ++i) {
    const OsciLayerReport &d = dev->layers[i], &h = host->layers[i];
    EXPECT_EQ(d.name, h.name);
    EXPECT_EQ(d.tracked, h.tracked) << d.name << " at step " << step;
    EXPECT_EQ(d.reset, h.reset) << d.name << " at step " << step;
    EXPECT_EQ(std::memcmp(&d.mean_risk, &h.mean_risk, sizeof(double)), 0)
        << d.name << " at step " << step << ": mean risk " << d.mean_risk << " vs " << h.mean_risk;
    // The device's integer flip count (one atomic per block) is the host's exactly.
    EXPECT_EQ(d.flips, h.flips) << d.name << " at step " << step;
    EXPECT_EQ(d.steps, h.steps) << d.name << " at step " << step;
    EXPECT_EQ(std::memcmp(&d.flip_rate, &h.flip_rate, sizeof(double)), 0)
        << d.name << " at step " << step << ": flip rate " << d.flip_rate << " vs " << h.flip_rate;
  }
}

void expect_same_state(const std::vector<StateTensor>& dev, const std::vector<StateTensor>& host,
                       const std::string& where) {
  ASSERT_EQ(dev.size(), host.size()) << where;
  for (size_t i = 0; i < dev.size(); ++i) {
    EXPECT_EQ(dev[i].name, host[i].name) << where;
    EXPECT_EQ(dev[i].dtype, host[i].dtype) << dev[i].name << ", " << where;
    EXPECT_EQ(dev[i].shape, host[i].shape) << dev[i].name << ", " << where;
    EXPECT_TRUE(dev[i].bytes == host[i].bytes) << dev[i].name << " differs, " << where;
  }
}

OsciResetConfig osci_config(double threshold, double fraction) {
  OsciResetConfig oc;
  oc.enabled = true;
  oc.window = 3;
  oc.period = 5;
  oc.start = 2;  // windows open after steps 2, 7, 12 and close after 5, 10, 15
  oc.threshold = threshold;
  oc.track_fraction = fraction;
  return oc;
}

// The engine's own device form; throws when the engine offers none (the test would compare the host
// form with itself).
std::unique_ptr<OsciBackend> device_form(TrainingEngine& e) {
  auto* source = dynamic_cast<OsciBackendSource*>(&e);
  FP4_CHECK(source != nullptr, "engine ", e.device_name(), " is no OsciBackendSource");
  std::unique_ptr<OsciBackend> b = source->make_osci_backend();
  FP4_CHECK(b != nullptr && b->where() == "cuda", "engine ", e.device_name(), " offers no device form");
  return b;
}

// Two engines from one seed: `dev` runs the device tracker, `host` mirrors dev's state before each tracker
// step and runs the host tracker through read/write_parameter.
struct Rig {
  ModelConfig cfg = model_preset("tiny");  // the fallback attention: reproducible evaluate() bits
  Recipe recipe;
  std::unique_ptr<TrainingEngine> dev, host;
  std::vector<OsciTarget> targets;
  std::mt19937 rng;
  StepHyper hyper;

  Rig(const std::string& recipe_name, uint32_t seed) : recipe(load_recipe(recipe_name)), rng(seed) {
    dev = make_cuda_engine(cfg, recipe, seed);
    host = make_cuda_engine(cfg, recipe, seed);
    targets = osci_targets(dev->parameters(), recipe, cfg.n_layers);
    hyper.lr = 3e-3f;
  }

  // One optimizer step on dev, mirrored to host; then both trackers, compared bit for bit.
  std::optional<OsciResetReport> step(int64_t step, OsciReset& dev_osci, OsciReset& host_osci) {
    const Batch batch = token_batch(rng, cfg);
    const StepStats st = dev->train_step({&batch, 1}, hyper);
    EXPECT_TRUE(std::isfinite(st.loss)) << "step " << step;
    host->load_state(dev->save_state());
    EngineWeightAccess dev_w(*dev), host_w(*host);
    const auto rd = dev_osci.after_step(step, dev_w);
    const auto rh = host_osci.after_step(step, host_w);
    expect_same_reports(rd, rh, step);
    for (const OsciTarget& t : targets)
      EXPECT_TRUE(same_bits(read_weight(*dev, t), read_weight(*host, t))) << t.name << " after step " << step;
    expect_same_state(dev_osci.save_state(), host_osci.save_state(),
                      "state after step " + std::to_string(step));
    if (rd) {
      // The forward reads the BF16 working copy: the device form must refresh it as write_parameter does.
      const Batch eval = token_batch(rng, cfg);
      const double ld = dev->evaluate(eval).loss, lh = host->evaluate(eval).loss;
      EXPECT_EQ(std::memcmp(&ld, &lh, sizeof ld), 0)
          << "evaluate after the reset of step " << step << ": " << ld << " vs " << lh;
    }
    return rd;
  }
};

struct FormsCase {
  const char* recipe;
  double fraction;
};

std::string forms_name(const ::testing::TestParamInfo<FormsCase>& info) {
  std::string n = std::string(info.param.recipe) + (info.param.fraction < 1 ? "_fraction" : "_all");
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

class OsciResetCudaForms : public ::testing::TestWithParam<FormsCase> {};

TEST_P(OsciResetCudaForms, DeviceAndHostTrackersAgreeBitForBit) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rig rig(GetParam().recipe, seed);
  ASSERT_FALSE(rig.targets.empty());
  const OsciResetConfig oc = osci_config(1.0, GetParam().fraction);
  OsciReset dev(oc, 16, rig.targets, device_form(*rig.dev)), host(oc, 16, rig.targets);
  EXPECT_EQ(dev.backend().where(), "cuda");
  EXPECT_EQ(host.backend().where(), "host");
  int windows = 0;
  int64_t resets = 0, flips = 0;
  for (int64_t step = 1; step <= 16; ++step) {
    const auto report = rig.step(step, dev, host);
    if (HasFatalFailure() || HasFailure()) return;  // the first difference says enough
    if (!report) continue;
    ++windows;
    for (const auto& l : report->layers) {
      resets += l.reset;
      flips += l.flips;
      EXPECT_EQ(l.steps, oc.window) << l.name;
    }
  }
  EXPECT_EQ(windows, 3);
  EXPECT_GT(resets, 0) << "no element reached R >= 1 in three windows: the comparison saw no reset";
  EXPECT_GT(flips, 0) << "no grid point moved in three windows: the comparison saw no flip";
}

TEST_P(OsciResetCudaForms, StateSavedByOneFormContinuesInTheOther) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rig rig(GetParam().recipe, seed);
  const OsciResetConfig oc = osci_config(1.0, GetParam().fraction);
  OsciReset dev(oc, 16, rig.targets, device_form(*rig.dev)), host(oc, 16, rig.targets);
  for (int64_t step = 1; step <= 8; ++step) rig.step(step, dev, host);  // mid-window (opened after step 7)
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(dev.tracking());
  // Crossed over: the device form continues from the host's checkpoint tensors and vice versa.
  OsciReset dev2(oc, 16, rig.targets, device_form(*rig.dev)), host2(oc, 16, rig.targets);
  const std::vector<StateTensor> from_host = host.save_state(), from_dev = dev.save_state();
  dev2.load_state(from_host);
  host2.load_state(from_dev);
  expect_same_state(dev2.save_state(), from_host, "device form right after loading the host's state");
  expect_same_state(host2.save_state(), from_dev, "host form right after loading the device's state");
  // A state without flip counts (written before they existed) loads into both forms alike.
  std::vector<StateTensor> old = from_dev;
  std::erase_if(old, [](const StateTensor& t) { return t.name.ends_with(".flips"); });
  OsciReset dev3(oc, 16, rig.targets, device_form(*rig.dev)), host3(oc, 16, rig.targets);
  dev3.load_state(old);
  host3.load_state(old);
  expect_same_state(dev3.save_state(), host3.save_state(), "both forms after loading a state without flips");
  int windows = 0;
  for (int64_t step = 9; step <= 13; ++step) windows += rig.step(step, dev2, host2).has_value();
  EXPECT_EQ(windows, 1);  // the window opened after step 7 closes after step 10
}

INSTANTIATE_TEST_SUITE_P(Recipes, OsciResetCudaForms,
                         ::testing::Values(FormsCase{"tetrajet-v2-base", 1.0},
                                           FormsCase{"tetrajet-v2-base", 0.3}, FormsCase{"nvidia-nvfp4", 1.0},
                                           FormsCase{"nvidia-nvfp4", 0.3}),
                         forms_name);

// The largest threshold resets nothing and leaves every weight as it was; the smallest positive one resets
// every element with R > 0, each to its grid point Q(w) of the weights before the reset.
TEST(OsciResetCuda, ThresholdsThatResetNothingAndEverything) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const double threshold :
       {std::numeric_limits<double>::max(), std::numeric_limits<double>::denorm_min()}) {
    for (const double fraction : {1.0, 0.3}) {
      SCOPED_TRACE("threshold " + std::to_string(threshold) + " fraction " + std::to_string(fraction));
      Rig rig("tetrajet-v2-base", seed);
      const OsciResetConfig oc = osci_config(threshold, fraction);
      OsciReset dev(oc, 16, rig.targets, device_form(*rig.dev)), host(oc, 16, rig.targets);
      for (int64_t step = 1; step <= 4; ++step) rig.step(step, dev, host);
      // Step 5 closes the first window: the weights just before it are those after the optimizer step.
      const Batch batch = token_batch(rig.rng, rig.cfg);
      rig.dev->train_step({&batch, 1}, rig.hyper);
      std::vector<std::vector<float>> before;
      for (const OsciTarget& t : rig.targets) before.push_back(read_weight(*rig.dev, t));
      EngineWeightAccess w(*rig.dev);
      const auto report = dev.after_step(5, w);
      ASSERT_TRUE(report.has_value());
      int64_t surely_reset = 0;
      for (size_t i = 0; i < rig.targets.size(); ++i) {
        const OsciTarget& t = rig.targets[i];
        const std::vector<float> got = read_weight(*rig.dev, t);
        const OsciLayerReport& l = report->layers[i];
        if (threshold > 1) {
          EXPECT_EQ(l.reset, 0) << t.name;
          EXPECT_TRUE(same_bits(got, before[i])) << t.name << " changed with nothing reset";
          continue;
        }
        const Nvfp4Tensor q = quantize_nvfp4(before[i].data(), t.rows, t.cols, t.q2, QuantRandomness{});
        std::vector<float> grid(before[i].size());
        dequantize(q, grid.data());
        int64_t changed = 0, wrong = 0, on_grid = 0;
        for (size_t e = 0; e < got.size(); ++e) {
          const bool is_grid = std::memcmp(&got[e], &grid[e], sizeof(float)) == 0;
          const bool is_before = std::memcmp(&got[e], &before[i][e], sizeof(float)) == 0;
          changed += is_grid && !is_before;
          on_grid += is_grid && is_before;
          wrong += !is_grid && !is_before;
        }
        EXPECT_EQ(wrong, 0) << t.name << ": elements neither reset nor kept";
        EXPECT_GE(l.reset, changed) << t.name;
        EXPECT_LE(l.reset, changed + on_grid) << t.name;
        EXPECT_LE(l.reset, l.tracked) << t.name;
        surely_reset += changed;
      }
      if (threshold < 1) {
        EXPECT_GT(surely_reset, 0) << "the smallest threshold moved no weight to its grid point";
      }
    }
  }
}

// A stand-alone weight in device memory: 37 rows (1x16 blocks take any row count), one float past an
// aligned address (the quantizer needs 16-byte alignment: the device form stages such a weight).
class OneWeight final : public DeviceMasterWeights {
 public:
  OneWeight(int64_t n, int64_t misalign)
      : buf_(static_cast<size_t>(n + misalign)), misalign_(misalign), n_(n) {}
  std::span<float> device_master(const std::string& name) override {
    FP4_CHECK(name == "w", "unknown parameter '", name, "'");
    return {buf_.data() + misalign_, static_cast<size_t>(n_)};
  }
  CUstream_st* device_stream() override { return nullptr; }  // the legacy default stream
  void master_written(const std::string&) override { ++written; }
  void set(const std::vector<float>& v) {
    FP4_CUDA_CHECK(
        cudaMemcpy(buf_.data() + misalign_, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  std::vector<float> get() {
    std::vector<float> v(static_cast<size_t>(n_));
    FP4_CUDA_CHECK(
        cudaMemcpy(v.data(), buf_.data() + misalign_, v.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return v;
  }
  int written = 0;

 private:
  DeviceBuffer<float> buf_;
  int64_t misalign_, n_;
};

class HostWeight final : public WeightAccess {
 public:
  std::vector<float> w;
  void read(const std::string&, std::span<float> out) override { std::copy(w.begin(), w.end(), out.begin()); }
  void write(const std::string&, std::span<const float> in) override { w.assign(in.begin(), in.end()); }
};

TEST(OsciResetCuda, AWeightOf37RowsAtAnUnalignedAddress) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  QuantSpec q2;
  q2.format = QuantFormat::kNvfp4;
  q2.outer = OuterScale::kBlock128;
  const OsciTarget target{"w", 37, 256, q2, {}};
  const int64_t n = target.rows * target.cols;
  for (const int64_t misalign : {0, 1}) {
    for (const double fraction : {1.0, 0.3}) {
      SCOPED_TRACE("misalign " + std::to_string(misalign) + " fraction " + std::to_string(fraction));
      OneWeight dev_w(n, misalign);
      HostWeight host_w;
      std::normal_distribution<float> d(0.0f, 1.0f);
      host_w.w.resize(static_cast<size_t>(n));
      for (auto& v : host_w.w) v = d(rng);
      dev_w.set(host_w.w);
      const OsciResetConfig oc = osci_config(1.0, fraction);
      OsciReset dev(oc, 16, {target}, std::make_unique<cuda::OsciDeviceBackend>(dev_w)),
          host(oc, 16, {target});
      int64_t resets = 0, flips = 0;
      for (int64_t step = 1; step <= 11; ++step) {
        // A random walk of the same values on both sides: many grid points move.
        for (auto& v : host_w.w) v += 0.05f * d(rng);
        dev_w.set(host_w.w);
        const int written_before = dev_w.written;
        const auto rd = dev.after_step(step, host_w), rh = host.after_step(step, host_w);
        expect_same_reports(rd, rh, step);
        ASSERT_TRUE(same_bits(dev_w.get(), host_w.w)) << "after step " << step;
        expect_same_state(dev.save_state(), host.save_state(), "after step " + std::to_string(step));
        if (rd) {
          resets += rd->layers[0].reset;
          flips += rd->layers[0].flips;
          EXPECT_EQ(dev_w.written - written_before, rd->layers[0].reset > 0 ? 1 : 0)
              << "the working copy must be refreshed exactly when a weight changed";
        }
      }
      EXPECT_GT(resets, 0);
      EXPECT_GT(flips, 0);
    }
  }
  // 16x16 blocks need a multiple of 16 rows: refused, naming the weight, as the host form refuses it.
  q2.block = BlockShape::k16x16;
  q2.outer = OuterScale::kTensor;
  OneWeight w(n, 0);
  OsciReset dev(osci_config(1.0, 1.0), 16, {OsciTarget{"w", 37, 256, q2, {}}},
                std::make_unique<cuda::OsciDeviceBackend>(w));
  HostWeight unused;
  unused.w.assign(static_cast<size_t>(n), 0.5f);
  EXPECT_NO_THROW(dev.after_step(1, unused));
  try {
    dev.after_step(2, unused);
    ADD_FAILURE() << "a 37-row weight with 16x16 blocks was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 16"), std::string::npos) << e.what();
  }
}

std::vector<char> file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in.good()) << p;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string file_text(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  for (int c = std::fgetc(f); c != EOF; c = std::fgetc(f)) out += static_cast<char>(c);
  return out;
}

// The trainer on the CUDA engine: it picks the device form by itself, a run stopped mid-window resumes on
// the GPU bit for bit, and its checkpoint resumes on the CPU engine (the host form takes the window over).
TEST(OsciResetCuda, TheTrainerUsesTheDeviceFormAndItsCheckpointsResumeOnEitherEngine) {
  register_cuda_engine(&make_cuda_engine);
  testing::TempDir tmp;
  testing::prepare_corpus(tmp.path());
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const auto config = [&](const std::string& run, int64_t steps, const std::string& device) {
    RunConfig c = testing::small_run_config(tmp.path(), run, steps, seed, 4, 12);
    c.model = model_preset("tiny");  // 4 x 32 = 128 tokens per micro-batch: block128 along the tokens
    c.train.device = device;
    c.train.eval_every = 100;
    c.train.eval_batches = 2;
    c.train.ckpt_every = 100;
    c.recipe.name = "tetrajet-v2-base";
    c.recipe.overrides = {{"osci_reset.enabled", "true"},
                          {"osci_reset.window", "3"},
                          {"osci_reset.period", "4"},
                          {"osci_reset.start", "2"},
                          {"osci_reset.threshold", "1"}};  // windows 2..5, 6..9, 10..13
    return c;
  };
  const auto run = [&](const RunConfig& c, bool resume) {
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> log(std::tmpfile(), &std::fclose);
    TrainerOptions o;
    o.log = log.get();
    Trainer t(c, o);
    EXPECT_EQ(t.resumed(), resume) << c.train.out_dir;
    t.run();
    return file_text(log.get());
  };
  const auto events = [&](const std::string& name) {
    std::vector<int64_t> steps;
    for (const auto& j : read_metrics(tmp / name / "metrics.jsonl"))
      if (j["type"] == "osci_reset") {
        steps.push_back(j["step"].get<int64_t>());
        EXPECT_GT(j["tracked"].get<int64_t>(), 0);
      }
    return steps;
  };
  const std::vector<int64_t> closes = {5, 9};

  EXPECT_NE(run(config("full", 12, "cuda"), false).find("osci_reset: the cuda form"), std::string::npos);
  EXPECT_EQ(events("full"), closes);

  run(config("split", 7, "cuda"), false);  // its final checkpoint is mid-window (opened after step 6)
  run(config("split", 12, "cuda"), true);
  EXPECT_EQ(events("split"), closes);
  EXPECT_TRUE(file_bytes(tmp / "full/checkpoints/step_000012/model.safetensors") ==
              file_bytes(tmp / "split/checkpoints/step_000012/model.safetensors"))
      << "the GPU run resumed mid-window differs from the uninterrupted one";

  run(config("to_cpu", 7, "cuda"), false);
  const std::string cpu_log = run(config("to_cpu", 12, "cpu"), true);
  EXPECT_NE(cpu_log.find("osci_reset: the host form"), std::string::npos) << cpu_log;
  EXPECT_EQ(events("to_cpu"), closes);
}

}  // namespace
}  // namespace fp4
