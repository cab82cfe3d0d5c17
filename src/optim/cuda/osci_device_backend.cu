#include <algorithm>
#include <limits>

#include "core/error.h"
#include "nn/cuda/device_params.h"
#include "optim/cuda/osci_device_backend.h"
#include "optim/osci_reset_host.h"

namespace fp4::cuda {
namespace {

// Indices are kept as uint32 on the device (a weight has fewer than 2^32 elements); I64 in checkpoints.
constexpr int64_t kMaxIndexed = int64_t{1} << 32;

void zero(DeviceBuffer<float>& b, cudaStream_t s) {
  if (b.size() > 0) FP4_CUDA_CHECK(cudaMemsetAsync(b.data(), 0, b.bytes(), s));
}

}  // namespace

OsciDeviceBackend::Track::Track(int64_t count, unsigned long long* flip_counter)
    : n(count),
      prev_w(static_cast<size_t>(count)),
      prev_q(static_cast<size_t>(count)),
      dist_m(static_cast<size_t>(count)),
      dist_q(static_cast<size_t>(count)),
      flips(flip_counter) {}

OsciDeviceTrack OsciDeviceBackend::Track::view() {
  return OsciDeviceTrack{index.size() > 0 ? index.data() : nullptr,
                         n,
                         prev_w.data(),
                         prev_q.data(),
                         dist_m.data(),
                         dist_q.data(),
                         flips};
}

float* OsciDeviceBackend::master(const OsciTarget& t) const {
  const std::span<float> w = masters_.device_master(t.name);
  FP4_CHECK(static_cast<int64_t>(w.size()) == t.rows * t.cols, "osci_reset (cuda): parameter ", t.name,
            " holds ", w.size(), " values, the tracker expects [", t.rows, " x ", t.cols, "]");
  return w.data();
}

void OsciDeviceBackend::prepare(const std::vector<OsciTarget>& targets) {
  int64_t largest = 0;
  for (const OsciTarget& t : targets) {
    FP4_CHECK(t.fp4_columns.empty(), "osci_reset (cuda): weight ", t.name,
              " has OutControl FP4 columns; the ",
              "device form tracks whole weights (OutControl runs on the CPU engine)");
    FP4_CHECK(t.rows * t.cols < kMaxIndexed, "osci_reset (cuda): weight ", t.name, " has ", t.rows * t.cols,
              " elements, more than the device form indexes (2^32)");
    master(t);
    largest = std::max(largest, t.rows * t.cols);
  }
  quantizer_.reserve(targets);
  if (static_cast<int64_t>(q_.size()) < largest) q_ = DeviceBuffer<float>(static_cast<size_t>(largest));
  flips_ = DeviceBuffer<unsigned long long>(targets.size());
  if (flips_.size() > 0)
    FP4_CUDA_CHECK(cudaMemsetAsync(flips_.data(), 0, flips_.bytes(), masters_.device_stream()));
}

void OsciDeviceBackend::upload_track(const OsciTrack& h) {
  const cudaStream_t s = masters_.device_stream();
  FP4_CHECK(tracks_.size() < flips_.size(), "osci_reset (cuda): more tracks than weights");
  FP4_CHECK(h.flips >= 0 && h.flip_steps >= 0, "osci_reset (cuda): negative flip count ", h.flips, " over ",
            h.flip_steps, " steps");
  Track k(static_cast<int64_t>(h.prev_w.size()), flips_.data() + tracks_.size());
  k.flip_steps = h.flip_steps;
  const auto flips = static_cast<unsigned long long>(h.flips);
  copy_to_device(k.flips, &flips, sizeof flips, s);
  if (!h.index.empty()) {
    std::vector<uint32_t> index(h.index.size());
    for (size_t j = 0; j < index.size(); ++j) {
      FP4_CHECK(h.index[j] >= 0 && h.index[j] < kMaxIndexed, "osci_reset (cuda): tracked index ", h.index[j],
                " out of range");
      index[j] = static_cast<uint32_t>(h.index[j]);
    }
    k.index = DeviceBuffer<uint32_t>(index.size());
    copy_to_device(k.index.data(), index.data(), index.size() * sizeof(uint32_t), s);
  }
  copy_to_device(k.prev_w.data(), h.prev_w.data(), k.prev_w.bytes(), s);
  copy_to_device(k.prev_q.data(), h.prev_q.data(), k.prev_q.bytes(), s);
  copy_to_device(k.dist_m.data(), h.dist_m.data(), k.dist_m.bytes(), s);
  copy_to_device(k.dist_q.data(), h.dist_q.data(), k.dist_q.bytes(), s);
  tracks_.push_back(std::move(k));
}

void OsciDeviceBackend::snapshot(const std::vector<OsciTarget>& targets, double track_fraction,
                                 WeightAccess& /*weights: the masters are read in place*/) {
  clear();
  prepare(targets);
  const cudaStream_t s = masters_.device_stream();
  std::vector<float> host;
  for (const OsciTarget& t : targets) {
    const float* w = master(t);
    const int64_t n = t.rows * t.cols;
    if (track_fraction < 1.0) {
      // The selection needs every element's edge score and a partial sort: once per window, on the host.
      host.resize(static_cast<size_t>(n));
      copy_to_host(host.data(), w, host.size() * sizeof(float), s);
      upload_track(osci_host_snapshot(t, host, track_fraction));
      continue;
    }
    Track k(n, flips_.data() + tracks_.size());  // its counter was zeroed by prepare
    FP4_CUDA_CHECK(cudaMemcpyAsync(k.prev_w.data(), w, k.prev_w.bytes(), cudaMemcpyDeviceToDevice, s));
    quantizer_.run(t, w, k.prev_q.data(), s);
    zero(k.dist_m, s);
    zero(k.dist_q, s);
    tracks_.push_back(std::move(k));
  }
}

void OsciDeviceBackend::accumulate(const std::vector<OsciTarget>& targets, WeightAccess& /*weights*/) {
  FP4_CHECK(tracks_.size() == targets.size(), "osci_reset (cuda): no window open");
  const cudaStream_t s = masters_.device_stream();
  for (size_t i = 0; i < targets.size(); ++i) {
    const float* w = master(targets[i]);
    quantizer_.run(targets[i], w, q_.data(), s);
    osci_accumulate_cuda(tracks_[i].view(), w, q_.data(), s);
    ++tracks_[i].flip_steps;
  }
}

std::vector<OsciLayerReport> OsciDeviceBackend::reset(const std::vector<OsciTarget>& targets,
                                                      double threshold, WeightAccess& /*weights*/) {
  FP4_CHECK(tracks_.size() == targets.size(), "osci_reset (cuda): no window open");
  const cudaStream_t s = masters_.device_stream();
  std::vector<int64_t> first(targets.size() + 1, 0);  // each weight's first chunk
  for (size_t i = 0; i < targets.size(); ++i) first[i + 1] = first[i] + osci_chunk_count(tracks_[i].n);
  const auto chunks = static_cast<size_t>(first.back());
  DeviceBuffer<double> sums(chunks);
  DeviceBuffer<uint32_t> counts(chunks);
  for (size_t i = 0; i < targets.size(); ++i)
    osci_reset_cuda(tracks_[i].view(), master(targets[i]), threshold, sums.data() + first[i],
                    counts.data() + first[i], s);
  std::vector<double> host_sums(chunks);
  std::vector<uint32_t> host_counts(chunks);
  std::vector<unsigned long long> host_flips(flips_.size());
  copy_to_host(host_flips.data(), flips_.data(), flips_.bytes(), s);
  copy_to_host(host_sums.data(), sums.data(), sums.bytes(), s);
  copy_to_host(host_counts.data(), counts.data(), counts.bytes(), s);  // waits for the reset kernels
  std::vector<OsciLayerReport> out;
  for (size_t i = 0; i < targets.size(); ++i) {
    const auto b = static_cast<size_t>(first[i]), e = static_cast<size_t>(first[i + 1]);
    const auto flips = static_cast<int64_t>(host_flips[i]);
    const int64_t n = tracks_[i].n, steps = tracks_[i].flip_steps;
    OsciLayerReport layer{targets[i].name, n, 0, 0.0, flips, steps, osci_flip_rate(flips, n, steps)};
    for (size_t c = b; c < e; ++c) layer.reset += host_counts[c];
    layer.mean_risk = osci_mean_risk(std::span<const double>(host_sums).subspan(b, e - b), tracks_[i].n);
    if (layer.reset > 0) masters_.master_written(targets[i].name);
    out.push_back(layer);
  }
  clear();  // the window's memory is released until the next snapshot
  return out;
}

std::vector<OsciTrack> OsciDeviceBackend::download() const {
  const cudaStream_t s = masters_.device_stream();
  std::vector<OsciTrack> out;
  std::vector<unsigned long long> flips(flips_.size());
  if (!tracks_.empty()) copy_to_host(flips.data(), flips_.data(), flips_.bytes(), s);
  for (const Track& k : tracks_) {
    OsciTrack h;
    h.flips = static_cast<int64_t>(flips[out.size()]);
    h.flip_steps = k.flip_steps;
    const auto n = static_cast<size_t>(k.n);
    if (k.index.size() > 0) {
      std::vector<uint32_t> index(n);
      copy_to_host(index.data(), k.index.data(), k.index.bytes(), s);
      h.index.assign(index.begin(), index.end());
    }
    for (auto [dst, src] : {std::pair{&h.prev_w, &k.prev_w}, std::pair{&h.prev_q, &k.prev_q},
                            std::pair{&h.dist_m, &k.dist_m}, std::pair{&h.dist_q, &k.dist_q}}) {
      dst->resize(n);
      copy_to_host(dst->data(), src->data(), src->bytes(), s);
    }
    out.push_back(std::move(h));
  }
  return out;
}

void OsciDeviceBackend::upload(const std::vector<OsciTarget>& targets, std::vector<OsciTrack> tracks) {
  FP4_CHECK(tracks.size() == targets.size(), "osci_reset (cuda): ", tracks.size(), " tracks for ",
            targets.size(), " weights");
  clear();
  prepare(targets);
  for (const OsciTrack& h : tracks) upload_track(h);
}

void OsciDeviceBackend::clear() {
  if (!tracks_.empty() || q_.size() > 0 || flips_.size() > 0)
    FP4_CUDA_CHECK(cudaStreamSynchronize(masters_.device_stream()));  // nothing queued may use the buffers
  tracks_.clear();
  q_ = DeviceBuffer<float>();
  flips_ = DeviceBuffer<unsigned long long>();
  quantizer_.release();
}

}  // namespace fp4::cuda
