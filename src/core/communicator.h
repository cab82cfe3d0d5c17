// Communicator: the collectives data-parallel training needs, over host memory (the CPU engine, TCP
// between processes) or device memory (the CUDA engine, NCCL). Engines call it through this header
// only (it is part of core), so the model library needs nothing from the dist library.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/index_range.h"

namespace fp4 {

enum class CommType : uint8_t { kF32, kF64, kI64 };

inline size_t comm_type_bytes(CommType t) {
  return t == CommType::kF32 ? 4 : 8;
}

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "tcp" or "nccl", for logs.
  virtual std::string backend() const = 0;
  // True when buffers are device pointers (NCCL), false for host memory.
  virtual bool device_memory() const = 0;

  // Every call below is collective: all ranks make the same calls in the same order. `stream` is the
  // CUDA stream (cudaStream_t) the device backend queues on; host backends ignore it. Sums are taken
  // in a fixed order, so the same inputs give the same bits on every run.

  // data[0, count) <- the sum over ranks of data[0, count).
  virtual void all_reduce_sum(void* data, int64_t count, CommType type, void* stream = nullptr) = 0;

  // ranges[q] (one per rank, disjoint, possibly empty) are ranges of the FP32 buffer data. Afterwards
  // this rank's range holds the sum over ranks of that range; the rest of data is unspecified.
  virtual void reduce_scatter_sum(float* data, std::span<const IndexRange> ranges,
                                  void* stream = nullptr) = 0;

  // Afterwards data[ranges[q]] holds rank q's data[ranges[q]] on every rank, for every q.
  virtual void all_gather(float* data, std::span<const IndexRange> ranges, void* stream = nullptr) = 0;

  // The same sum over host memory whatever the backend: small control values (token counts, stop
  // flags, evaluation sums). Returns with the result; queued device work is not waited for.
  virtual void host_all_reduce_sum(void* data, int64_t count, CommType type) = 0;

  // Returns once every rank has called it; queued device work is not waited for.
  virtual void barrier(void* stream = nullptr) = 0;
};

}  // namespace fp4
