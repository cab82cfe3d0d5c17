// OsciReset's host form (the reference): the masters are read and written through WeightAccess (host
// copies) and Q(w) is the CPU reference quantizer. Serves the CPU engine, data-parallel CUDA runs and tests.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "optim/osci_reset_backend.h"

namespace fp4 {

// A window's opening state of one weight from its values w (rows * cols): every element, or with
// track_fraction < 1 the ceil(track_fraction * n) elements with the highest bin-edge score
// |w/s - q| / binwidth(q) (ties: the lower index), ascending; OutControl's fp4_columns restrict it.
// The device form uses it too, once per window, for its fraction selection.
OsciTrack osci_host_snapshot(const OsciTarget& t, std::span<const float> w, double track_fraction);

class OsciHostBackend final : public OsciBackend {
 public:
  std::string where() const override { return "host"; }
  void snapshot(const std::vector<OsciTarget>& targets, double track_fraction,
                WeightAccess& weights) override;
  void accumulate(const std::vector<OsciTarget>& targets, WeightAccess& weights) override;
  std::vector<OsciLayerReport> reset(const std::vector<OsciTarget>& targets, double threshold,
                                     WeightAccess& weights) override;
  std::vector<OsciTrack> download() const override { return tracks_; }
  void upload(const std::vector<OsciTarget>& targets, std::vector<OsciTrack> tracks) override;
  void clear() override { tracks_.clear(); }

 private:
  std::vector<OsciTrack> tracks_;  // one per target while a window is open
};

}  // namespace fp4
