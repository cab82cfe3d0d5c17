#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "model/cuda/batch_upload.h"

namespace fp4::cuda {

BatchUploader::BatchUploader(cudaStream_t stream) : stream_(stream) {
  FP4_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
}

BatchUploader::~BatchUploader() {
  if (staging_ != nullptr) {
    cudaEventSynchronize(copied_);  // no copy may still read the staging memory
    cudaFreeHost(staging_);
  }
  if (copied_ != nullptr) cudaEventDestroy(copied_);
}

void BatchUploader::reserve(size_t ints) {
  if (ints <= capacity_) return;
  const size_t cap = std::max(ints, capacity_ * 2);
  if (staging_ != nullptr) {
    FP4_CUDA_CHECK(cudaFreeHost(staging_));  // the last copy has completed: the caller waited on copied_
    staging_ = nullptr;
  }
  FP4_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&staging_), cap * sizeof(int32_t)));
  device_ = DeviceBuffer<int32_t>();
  device_ = DeviceBuffer<int32_t>(cap);
  capacity_ = cap;
}

std::vector<DeviceBatch> BatchUploader::upload(std::span<const Batch> batches, bool with_targets,
                                               bool with_groups) {
  FP4_CUDA_CHECK(cudaEventSynchronize(copied_));  // the previous upload has left the staging memory
  size_t total = 0;
  for (const Batch& mb : batches) {
    const size_t n = static_cast<size_t>(mb.batch) * static_cast<size_t>(mb.seq);
    total += n * (1 + (with_targets ? 1 : 0) + (with_groups ? 3 : 0)) + (with_groups ? 1 : 0);
  }
  reserve(std::max<size_t>(total, 1));
  std::vector<DeviceBatch> out;
  size_t used = 0;
  // Copies `count` ints to the staging memory and returns where they will be on the device.
  auto put = [&](const int32_t* src, size_t count) {
    std::memcpy(staging_ + used, src, count * sizeof(int32_t));
    const int32_t* dst = device_.data() + used;
    used += count;
    return dst;
  };
  for (const Batch& mb : batches) {
    const size_t n = static_cast<size_t>(mb.batch) * static_cast<size_t>(mb.seq);
    DeviceBatch db;
    db.b = mb.batch;
    db.t = mb.seq;
    db.tokens = put(mb.tokens.data(), n);
    if (with_targets) db.targets = put(mb.targets.data(), n);
    if (with_groups) {
      group_tokens(mb.tokens.data(), static_cast<int>(n), groups_);
      db.groups = groups_.groups();
      db.group_ids = put(groups_.ids.data(), groups_.ids.size());
      db.group_offsets = put(groups_.offsets.data(), groups_.offsets.size());
      db.group_positions = put(groups_.positions.data(), groups_.positions.size());
    }
    out.push_back(db);
  }
  if (used > 0)
    FP4_CUDA_CHECK(
        cudaMemcpyAsync(device_.data(), staging_, used * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  FP4_CUDA_CHECK(cudaEventRecord(copied_, stream_));
  return out;
}

}  // namespace fp4::cuda
