// OsciReset (TetraJet-v2, RECIPES.md section 6): finds weight elements that oscillate across a
// quantization bin edge and resets them to their grid point.
//
// Per element of each tracked weight, over a window of `window` optimizer steps: dist_M = sum |w_t - w_{t-1}|
// (FP32 master) and dist_Q = sum |Q(w_t) - Q(w_{t-1})| (Q: the layer's forward weight quantizer, scales
// recomputed every step); risk R = dist_Q / dist_M (0 where dist_M = 0). From step `start` on, every
// `period` steps: snapshot, accumulate for `window` steps, then set every element with R >= threshold to
// Q(w). Optimizer moments are left alone. This class is the schedule, the checkpoint state and the
// reports; the per-element work is its backend's (optim/osci_reset_backend.h): the host form through
// WeightAccess by default, or the CUDA engine's device form. Four FP32 values per tracked element.
// With track_fraction < 1 (the paper's memory-efficient variant) a window tracks only that fraction of
// each weight: the elements with the highest edge score
// |w/s - q| / binwidth(q) at its snapshot (s the element's scale, q its grid magnitude; bin widths 0.5,
// 0.5, 0.5, 0.5, 0.75, 1, 1.5, 2 for q = 0, 0.5, ..., 6), kept with their indices.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/parameter_info.h"
#include "core/state_tensor.h"
#include "optim/osci_reset_backend.h"
#include "recipe/recipe.h"

namespace fp4 {

struct OsciResetReport {
  int64_t step = 0;
  std::vector<OsciLayerReport> layers;
};

// The weights OsciReset tracks under `recipe`: the four linears of every block whose Q2 is NVFP4. Throws
// fp4::Error naming the layer when its Q2 cannot define a grid point (SR or an RHT).
std::vector<OsciTarget> osci_targets(const std::vector<ParameterInfo>& params, const Recipe& recipe,
                                     int n_layers);

// The first step of the schedule: `start` < 1 is a fraction of total_steps (the LR schedule's length, which
// a stopped and resumed run shares), otherwise a step number.
int64_t osci_start_step(const OsciResetConfig& cfg, int64_t total_steps);

class OsciReset {
 public:
  // backend: where the per-element work runs (nullptr: the host form, OsciHostBackend).
  OsciReset(const OsciResetConfig& cfg, int64_t total_steps, std::vector<OsciTarget> targets,
            std::unique_ptr<OsciBackend> backend = nullptr);
  ~OsciReset();

  // Call after every optimizer step; `step` counts the steps completed. Returns a report when the step
  // closed a window (and reset what crossed the threshold). The host form reads and writes the masters
  // through `weights`; a device backend works on them in place and does not use it.
  std::optional<OsciResetReport> after_step(int64_t step, WeightAccess& weights);

  int64_t start_step() const { return start_; }
  bool tracking() const { return active_; }
  const std::vector<OsciTarget>& targets() const { return targets_; }
  const OsciBackend& backend() const { return *backend_; }
  // OutControl's hook: restricts weight `name` to its FP4 columns from the next snapshot on.
  void set_fp4_columns(const std::string& name, std::vector<int32_t> columns);

  // Checkpoint state: "osci_reset.window" (I64: step of the window's snapshot, -1 when not tracking) and
  // per weight "osci_reset.<name>.{prev_w,prev_q,dist_m,dist_q}" (F32) and "osci_reset.<name>.flips" (I64
  // [2]: flips so far, steps they cover) while tracking, plus "osci_reset.<name>.index" (I64) when tracking
  // a fraction.
  std::vector<StateTensor> save_state() const;
  // Restores save_state()'s tensors (names not starting with "osci_reset." are ignored); a state without
  // them leaves the tracker idle until its next snapshot. A mid-window state without any ".flips" (written
  // before flips were counted) resumes with flips = 0 over 0 steps: the window's report then counts the
  // flips of the steps after the resume, and its flip_rate divides by those steps.
  void load_state(const std::vector<StateTensor>& state);

  static constexpr const char* kStatePrefix = "osci_reset.";

 private:
  OsciResetConfig cfg_;
  int64_t start_ = 0;
  std::vector<OsciTarget> targets_;
  std::unique_ptr<OsciBackend> backend_;
  bool active_ = false;
  int64_t window_start_ = -1;
};

}  // namespace fp4
