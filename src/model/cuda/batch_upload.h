// BatchUploader: copies a step's micro-batches to the GPU in one transfer through pinned staging memory:
// tokens, targets and, for the embedding backward, the rows grouped by token (built on the host).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "model/engine.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/embedding_cuda.h"

namespace fp4::cuda {

// Device views of one micro-batch (valid until the next upload).
struct DeviceBatch {
  int b = 0, t = 0;
  const int32_t* tokens = nullptr;   // [b*t]
  const int32_t* targets = nullptr;  // [b*t], null when not uploaded
  int groups = 0;                    // token groups (embedding backward), 0 when not uploaded
  const int32_t* group_ids = nullptr;
  const int32_t* group_offsets = nullptr;
  const int32_t* group_positions = nullptr;
};

class BatchUploader {
 public:
  explicit BatchUploader(cudaStream_t stream);
  ~BatchUploader();
  BatchUploader(const BatchUploader&) = delete;
  BatchUploader& operator=(const BatchUploader&) = delete;

  // Queues the copy on the stream (the caller has checked the batches' shapes). Waits only for the
  // previous upload's copy to have left the staging memory.
  std::vector<DeviceBatch> upload(std::span<const Batch> batches, bool with_targets, bool with_groups);

 private:
  void reserve(size_t ints);

  cudaStream_t stream_;
  cudaEvent_t copied_ = nullptr;
  int32_t* staging_ = nullptr;  // pinned host memory
  size_t capacity_ = 0;         // int32 elements of staging_ and device_
  DeviceBuffer<int32_t> device_;
  TokenGroups groups_;
};

}  // namespace fp4::cuda
