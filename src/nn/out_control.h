// OutControl (TetraJet-v2, RECIPES.md section 7): static outlier-channel retention. During a calibration
// window each quantized linear measures s_i = sum over training forwards of ||X[:, i]||_2 per input
// channel i; at the window's end the top channels (count from ratio and round_to) freeze as C8, kept in
// MXFP8 on the forward, and the rest (C4) stay NVFP4. OutControl is the model-wide registry the engine
// drives step by step; OutChannels is one linear's state, read by QuantLinearCpu.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/communicator.h"
#include "core/state_tensor.h"
#include "recipe/recipe.h"

namespace fp4 {

// Channels kept in MXFP8 for a layer of `in_features` inputs: ceil(ratio * I) rounded up to a multiple of
// round_to, capped at the largest multiple of round_to below I. Throws fp4::Error naming `layer` when no
// such count exists (I <= round_to).
int outlier_channel_count(int in_features, double ratio, int round_to, const std::string& layer = "?");

// The `count` channels of highest score, ties to the lower index, returned in ascending order.
std::vector<int32_t> select_top_channels(std::span<const double> score, int count);

// The channels of 0..in-1 not in `sorted` (ascending).
std::vector<int32_t> complement_channels(const std::vector<int32_t>& sorted, int in_features);

class OutChannels {
 public:
  OutChannels(std::string name, int in_features) : name_(std::move(name)), in_(in_features) {}

  const std::string& name() const { return name_; }
  int in_features() const { return in_; }
  bool calibrating() const { return calibrating_; }
  bool frozen() const { return frozen_; }
  const std::vector<int32_t>& c8() const { return c8_; }
  const std::vector<int32_t>& c4() const { return c4_; }
  double share() const { return share_; }  // of sum_i ||X[:, i]||^2 over calibration held by C8

  // Adds ||X[:, i]|| and ||X[:, i]||^2 of x [n][in] to this step's sums (while calibrating).
  void accumulate(const float* x, int n);
  // This step's sums (norms then squares, 2 * in doubles): a data-parallel engine all-reduces them.
  std::span<double> step_sums() { return step_; }
  // Adds the step's sums to the totals and clears them.
  void merge_step();
  // Freezes C8 = the top `count` channels of the norm totals; the totals are dropped.
  void freeze(int count);
  void set_calibrating(bool on);

  // Checkpoint form: totals while calibrating, the sets once frozen.
  const std::vector<double>& totals() const { return total_; }
  void restore(std::vector<double> totals);
  void restore_frozen(std::vector<int32_t> c8, double share);
  // Throws naming the layer unless c8 is an ascending set of a positive multiple of 16 channels below I.
  void check_channel_set(std::span<const int64_t> c8) const;
  void clear();

 private:
  std::string name_;
  int in_;
  bool calibrating_ = false, frozen_ = false;
  std::vector<double> step_, total_;  // 2 * in: sum of norms, sum of squared norms
  std::vector<int32_t> c8_, c4_;
  double share_ = 0;
};

struct OutControlLayerReport {
  std::string name;
  int in_features = 0;
  int channels = 0;  // |C8|
  double share = 0;  // of ||X||^2 held by C8 over calibration
};
struct OutControlReport {
  int64_t step = 0;
  std::vector<OutControlLayerReport> layers;
};

class OutControl {
 public:
  explicit OutControl(const OutControlConfig& cfg) : cfg_(cfg) {}

  const OutControlConfig& config() const { return cfg_; }
  // Registers a quantized linear; throws naming it when no channel count fits its width.
  OutChannels* add(const std::string& name, int in_features);
  std::span<OutChannels* const> layers() { return order_; }
  std::span<const OutChannels* const> layers() const { return order_; }

  // Before the forwards of optimizer step `step` (1-based): are they measured?
  void begin_step(int64_t step);
  // After them: merges the step's sums; after the window's last step freezes every layer and reports.
  std::optional<OutControlReport> end_step(int64_t step);
  // Data parallelism: sums every layer's step sums over the ranks (collective; call before end_step),
  // so all ranks freeze the same channels.
  void all_reduce_step_sums(Communicator& comm);
  int64_t freeze_step() const { return int64_t{cfg_.calib_start} + cfg_.calib_steps - 1; }

  // "out_control.<layer>.sums" (F64 [2][in]) while calibrating, "out_control.<layer>.c8" (I64) and
  // "out_control.<layer>.share" (F64 [1]) once frozen.
  std::vector<StateTensor> save_state() const;
  // Restores save_state()'s tensors (other names ignored); layers without any go back to unmeasured.
  void load_state(const std::vector<StateTensor>& state);
  static constexpr const char* kStatePrefix = "out_control.";

  // The report of the last freeze, once (the trainer's metrics line).
  std::optional<OutControlReport> take_report() { return std::exchange(report_, std::nullopt); }
  // Per layer (weight name) the FP4 input channels, for the frozen layers.
  std::map<std::string, std::vector<int32_t>> fp4_columns() const;

 private:
  std::optional<OutControlReport> report_;
  OutControlConfig cfg_;
  std::map<std::string, OutChannels> by_name_;
  std::vector<OutChannels*> order_;  // registration order
};

// An engine's registry, for tests: dynamic_cast<OutControlSource*>(engine). Engines run OutControl as a step
// feature (model/step_features.h); engines without it do not implement this.
class OutControlSource {
 public:
  virtual ~OutControlSource() = default;
  virtual OutControl* out_control() = 0;  // null when the recipe leaves it off
};

}  // namespace fp4
