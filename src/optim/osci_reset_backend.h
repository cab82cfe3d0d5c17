// OsciReset's per-element work behind one interface. OsciReset (optim/osci_reset.h) decides when windows
// open and close and what the checkpoint tensors and reports look like; a backend keeps the tracked
// elements' window state and computes on it. Two forms: the host one (optim/osci_reset_host.h) reads the
// masters through WeightAccess and quantizes with the CPU reference; the CUDA engine's device one
// (optim/cuda/osci_device_backend.h) works on the masters in place on the GPU. They give the same bits.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "numerics/quant_spec.h"

namespace fp4 {

// Read/write access to FP32 master weights by parameter name (the training engine, or a test's fake).
class WeightAccess {
 public:
  virtual ~WeightAccess() = default;
  virtual void read(const std::string& name, std::span<float> out) = 0;
  virtual void write(const std::string& name, std::span<const float> in) = 0;
};

// A tracked weight [rows = out features][cols = in features] and the quantizer of its forward (Q2).
struct OsciTarget {
  std::string name;
  int64_t rows = 0, cols = 0;
  QuantSpec q2;
  // OutControl: once its channels freeze, the weight's NVFP4 input channels (C4, ascending); only they
  // are quantized, tracked and reset. Empty: every column.
  std::vector<int32_t> fp4_columns;
};

// What the end of one window did, per weight: elements tracked and reset, mean risk R, and the flips: over
// the `steps` accumulated steps, how often a tracked element's Q(w) differed from its prev_q (flip_rate =
// flips / (tracked * steps), 0 when that is 0).
struct OsciLayerReport {
  std::string name;
  int64_t tracked = 0;
  int64_t reset = 0;
  double mean_risk = 0;
  int64_t flips = 0;
  int64_t steps = 0;
  double flip_rate = 0;
};

// One weight's window state in host form, as the checkpoint stores it.
struct OsciTrack {
  std::vector<int64_t> index;  // tracked elements (ascending); empty: every element
  std::vector<float> prev_w, prev_q, dist_m, dist_q;
  // Flips counted so far in the window, and over how many accumulate steps (the window's steps, fewer
  // after resuming a checkpoint written before flips were counted).
  int64_t flips = 0, flip_steps = 0;
};

// The mean risk of a report is summed in a fixed order that a GPU can follow without a host copy of R:
// R in double over each chunk of kOsciRiskChunk consecutive tracked elements (in order), then the chunk
// sums in order. Both forms use it, so their reports agree bit for bit.
inline constexpr int64_t kOsciRiskChunk = 256;
double osci_mean_risk(std::span<const double> chunk_sums, int64_t tracked);
// flips / (tracked * steps), 0 when tracked * steps is 0.
double osci_flip_rate(int64_t flips, int64_t tracked, int64_t steps);

class OsciBackend {
 public:
  virtual ~OsciBackend() = default;

  // Where the work runs, for logs ("host", "cuda:0 (...)").
  virtual std::string where() const = 0;

  // `weights` is the host form's access to the masters; a backend that owns its access ignores it.
  // snapshot opens a window: per target prev_w = w, prev_q = Q(w), dist_M = dist_Q = 0, over every element
  // or (track_fraction < 1) the elements closest to a bin edge.
  virtual void snapshot(const std::vector<OsciTarget>& targets, double track_fraction,
                        WeightAccess& weights) = 0;
  // One step of the window: dist_M += |w - prev_w|, dist_Q += |Q(w) - prev_q|, flips += the number of
  // elements with Q(w) != prev_q, flip_steps += 1, then prev = current.
  virtual void accumulate(const std::vector<OsciTarget>& targets, WeightAccess& weights) = 0;
  // The window's end (after this step's accumulate): w = prev_q where R >= threshold; the per-target
  // reports; the window's memory is released.
  virtual std::vector<OsciLayerReport> reset(const std::vector<OsciTarget>& targets, double threshold,
                                             WeightAccess& weights) = 0;

  // The open window's state per target (host copies), and its replacement by checked checkpoint tracks.
  virtual std::vector<OsciTrack> download() const = 0;
  virtual void upload(const std::vector<OsciTarget>& targets, std::vector<OsciTrack> tracks) = 0;
  virtual void clear() = 0;  // no window open: the state is released
};

// An engine that can run OsciReset's per-element work itself (the CUDA engine, which gives it to its
// OsciReset step feature; tests reach it by dynamic_cast<OsciBackendSource*>(engine)). Returns nullptr where
// it cannot (the caller keeps the host form).
class OsciBackendSource {
 public:
  virtual ~OsciBackendSource() = default;
  virtual std::unique_ptr<OsciBackend> make_osci_backend() = 0;
};

}  // namespace fp4
