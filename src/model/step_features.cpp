#include "model/step_features.h"

#include <cstdio>
#include <utility>

#include "core/error.h"
#include "model/engine_weight_access.h"
#include "optim/osci_reset.h"

namespace fp4 {
namespace {

// OutControl: calibration over its window, the freeze at the window's end (one metrics line).
class OutControlFeature final : public StepFeature {
 public:
  OutControlFeature(OutControl& oc, std::function<void()> step_sums)
      : oc_(oc), step_sums_(std::move(step_sums)) {}

  std::string name() const override { return "out_control"; }
  std::string state_prefix() const override { return OutControl::kStatePrefix; }
  void begin_step(int64_t step) override { oc_.begin_step(step); }
  void end_step(int64_t step) override {
    step_sums_();
    oc_.end_step(step);
  }
  std::vector<StateTensor> save_state() const override { return oc_.save_state(); }
  void load_state(const std::vector<StateTensor>& state) override { oc_.load_state(state); }

  // The freeze's line: per layer |C8| and its share of ||X||^2.
  std::vector<StepReport> take_reports() override {
    const std::optional<OutControlReport> report = oc_.take_report();
    if (!report) return {};
    nlohmann::json layers = nlohmann::json::array();
    int64_t channels = 0;
    for (const OutControlLayerReport& l : report->layers) {
      channels += l.channels;
      layers.push_back(
          {{"name", l.name}, {"channels", l.channels}, {"in_features", l.in_features}, {"share", l.share}});
    }
    StepReport r;
    r.line = {{"type", "out_control"}, {"step", report->step}, {"channels", channels}, {"layers", layers}};
    r.message = "out_control at step " + std::to_string(report->step) + ": " + std::to_string(channels) +
                " input channels over " + std::to_string(report->layers.size()) + " linears kept in MXFP8";
    return {std::move(r)};
  }

 private:
  OutControl& oc_;
  std::function<void()> step_sums_;
};

// LoRA-SVD: every realign_every steps the engine's realignment (its backend), numbered by step.
class LoraSvdFeature final : public StepFeature {
 public:
  LoraSvdFeature(const LoraSvd& lora, std::function<void(int64_t)> realign)
      : lora_(lora), realign_(std::move(realign)) {}

  std::string name() const override { return "lora_svd"; }
  std::string state_prefix() const override { return "lora_svd."; }
  void after_update(int64_t step) override {
    if (lora_.realigns_after(step)) realign_(step / lora_.config().realign_every);
  }

 private:
  const LoraSvd& lora_;
  std::function<void(int64_t)> realign_;
};

// OsciReset: the schedule and its backend (optim/osci_reset.h); after OutControl's freeze it tracks only the
// frozen layers' FP4 columns.
class OsciResetFeature final : public StepFeature {
 public:
  OsciResetFeature(std::unique_ptr<OsciReset> osci, TrainingEngine& engine, const OutControl* oc)
      : osci_(std::move(osci)), engine_(engine), oc_(oc) {}

  std::string name() const override { return "osci_reset"; }
  std::string state_prefix() const override { return OsciReset::kStatePrefix; }
  std::string summary() const override {
    return "the " + osci_->backend().where() + " form tracks the weights";
  }

  void after_update(int64_t step) override {
    if (oc_ && step == oc_->freeze_step()) apply_fp4_columns();
    EngineWeightAccess weights(engine_);
    if (std::optional<OsciResetReport> report = osci_->after_step(step, weights))
      pending_.push_back(std::move(*report));
  }

  std::vector<StateTensor> save_state() const override { return osci_->save_state(); }
  void load_state(const std::vector<StateTensor>& state) override {
    apply_fp4_columns();  // OutControl loaded first: the tracks saved after a freeze cover the FP4 columns
    osci_->load_state(state);
  }

  std::vector<StepReport> take_reports() override {
    std::vector<StepReport> out;
    for (const OsciResetReport& report : pending_) {
      int64_t tracked = 0, reset = 0, flips = 0;
      double slots = 0;  // sum of tracked * steps: the total flip rate's denominator
      nlohmann::json layers = nlohmann::json::array();
      for (const OsciLayerReport& l : report.layers) {
        tracked += l.tracked;
        reset += l.reset;
        flips += l.flips;
        slots += static_cast<double>(l.tracked) * static_cast<double>(l.steps);
        layers.push_back({{"name", l.name},
                          {"tracked", l.tracked},
                          {"reset", l.reset},
                          {"mean_risk", l.mean_risk},
                          {"flips", l.flips},
                          {"flip_rate", l.flip_rate}});
      }
      const double flip_rate = slots > 0 ? static_cast<double>(flips) / slots : 0.0;
      StepReport r;
      r.line = {{"type", "osci_reset"}, {"step", report.step},    {"tracked", tracked}, {"reset", reset},
                {"flips", flips},       {"flip_rate", flip_rate}, {"layers", layers}};
      char rate[32];
      std::snprintf(rate, sizeof rate, "%.3g", flip_rate);
      r.message = "osci_reset at step " + std::to_string(report.step) + ": " + std::to_string(reset) +
                  " of " + std::to_string(tracked) + " weights reset to their grid points; flip rate " +
                  rate + " per element and step";
      out.push_back(std::move(r));
    }
    pending_.clear();
    return out;
  }

 private:
  void apply_fp4_columns() {
    if (!oc_) return;
    for (auto& [name, columns] : oc_->fp4_columns()) osci_->set_fp4_columns(name, columns);
  }

  std::unique_ptr<OsciReset> osci_;
  TrainingEngine& engine_;
  const OutControl* oc_;
  std::vector<OsciResetReport> pending_;
};

}  // namespace

StepFeatures make_step_features(const Recipe& recipe, const StepContext& ctx,
                                const StepFeatureBackends& backends) {
  FP4_CHECK(backends.engine != nullptr, "make_step_features: no engine given");
  const std::string engine = backends.engine->device_name();
  StepFeatures out;
  if (recipe.out_control.enabled && backends.out_control) {
    FP4_CHECK(backends.out_control_sums != nullptr, "recipe ", recipe.name, ": out_control: engine ", engine,
              " gives no channel sums for it");
    out.push_back(std::make_unique<OutControlFeature>(*backends.out_control, backends.out_control_sums));
  }
  if (recipe.lora_svd.enabled) {
    FP4_CHECK(backends.lora_svd != nullptr && backends.lora_svd_realign != nullptr, "recipe ", recipe.name,
              ": lora_svd: engine ", engine, " has no realignment for it");
    out.push_back(std::make_unique<LoraSvdFeature>(*backends.lora_svd, backends.lora_svd_realign));
  }
  if (recipe.osci_reset.enabled && ctx.total_steps) {
    // Data parallelism: every rank runs its own replica of the tracker. After each step's all-gather the
    // ranks hold the same master weights bit for bit, and the tracker is a deterministic function of them, so
    // every rank tracks and resets the same elements to the same values: no collective is needed and the
    // ranks stay identical (docs/DIST.md, "OsciReset under data parallelism"). Such runs use the host form.
    std::unique_ptr<OsciBackend> device_form;
    if (!ctx.data_parallel && backends.osci_device_backend) device_form = backends.osci_device_backend();
    const int n_layers = backends.engine->config().n_layers;
    auto osci = std::make_unique<OsciReset>(recipe.osci_reset, *ctx.total_steps,
                                            osci_targets(backends.engine->parameters(), recipe, n_layers),
                                            std::move(device_form));
    out.push_back(std::make_unique<OsciResetFeature>(
        std::move(osci), *backends.engine, recipe.out_control.enabled ? backends.out_control : nullptr));
  }
  return out;
}

void append_feature_state(std::span<const std::unique_ptr<StepFeature>> features,
                          std::vector<StateTensor>& state) {
  for (const auto& f : features) {
    const std::string prefix = f->state_prefix();
    for (StateTensor& t : f->save_state()) {
      FP4_CHECK(t.name.rfind(prefix, 0) == 0, "step feature ", f->name(), ": state tensor '", t.name,
                "' is outside its prefix '", prefix, "'");
      state.push_back(std::move(t));
    }
  }
}

}  // namespace fp4
