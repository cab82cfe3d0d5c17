// OsciReset's device form for the single-process CUDA engine: the tracked weights' prev_w, prev_q, dist_M
// and dist_Q live on the GPU, and the masters are read and written in place (DeviceMasterWeights). A step
// of a window is, per weight, Q(w) by the CUDA quantizer and one accumulation kernel, all queued on the
// engine's stream without a host wait. A window's end runs the reset kernel, copies one partial sum and
// count per 256 tracked elements and each weight's flip count to the host for the report, and refreshes the
// BF16 working copy of each weight it changed. With track_fraction < 1 the snapshot copies each weight to the
// host once and selects its elements there (osci_host_snapshot); the window then runs on the device over the
// index list. Results, reports and checkpoint tracks are the host form's bit for bit
// (optim/osci_reset_host.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "optim/cuda/device_master_weights.h"
#include "optim/cuda/osci_device_quantizer.h"
#include "optim/cuda/osci_kernels.h"
#include "optim/osci_reset_backend.h"

namespace fp4::cuda {

class OsciDeviceBackend final : public OsciBackend {
 public:
  // `masters` (the engine) outlives the backend.
  explicit OsciDeviceBackend(DeviceMasterWeights& masters) : masters_(masters) {}

  std::string where() const override { return "cuda"; }
  void snapshot(const std::vector<OsciTarget>& targets, double track_fraction,
                WeightAccess& weights) override;
  void accumulate(const std::vector<OsciTarget>& targets, WeightAccess& weights) override;
  std::vector<OsciLayerReport> reset(const std::vector<OsciTarget>& targets, double threshold,
                                     WeightAccess& weights) override;
  std::vector<OsciTrack> download() const override;
  void upload(const std::vector<OsciTarget>& targets, std::vector<OsciTrack> tracks) override;
  void clear() override;

 private:
  struct Track {
    int64_t n = 0;
    DeviceBuffer<uint32_t> index;  // empty: every element
    DeviceBuffer<float> prev_w, prev_q, dist_m, dist_q;
    unsigned long long* flips = nullptr;  // its counter in flips_
    int64_t flip_steps = 0;               // accumulate steps the count covers (kept on the host)
    Track(int64_t count, unsigned long long* flip_counter);
    OsciDeviceTrack view();
  };
  float* master(const OsciTarget& t) const;              // checked against the target's shape
  void prepare(const std::vector<OsciTarget>& targets);  // checks the targets, sizes the scratch
  void upload_track(const OsciTrack& h);

  DeviceMasterWeights& masters_;
  std::vector<Track> tracks_;
  OsciDeviceQuantizer quantizer_;
  DeviceBuffer<float> q_;  // Q(w) of the weight being accumulated (the largest target's size)
  DeviceBuffer<unsigned long long> flips_;  // per target, the window's flips so far
};

}  // namespace fp4::cuda
