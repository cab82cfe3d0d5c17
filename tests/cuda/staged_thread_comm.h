// A device Communicator for CUDA tests: N ranks as N host threads of one process on one GPU, each with its
// own engine or optimizer. Every collective waits for its stream, copies the device buffer to the host,
// runs the host thread collective (tests/unit/optim/thread_comm.h: sums in rank order, the same bits on
// every rank) and copies the result back. Slow and blocking, but it lets one GPU run a data-parallel job
// whose ranks really own different state. Run ranks with test::run_threads<StagedThreadComm>.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "../unit/optim/thread_comm.h"
#include "ops/cuda/cuda_check.h"

namespace fp4::test {

class StagedThreadComm final : public Communicator {
 public:
  StagedThreadComm(ThreadGroup& g, int rank) : host_(g, rank) {}
  int rank() const override { return host_.rank(); }
  int world_size() const override { return host_.world_size(); }
  std::string backend() const override { return "staged-threads"; }
  bool device_memory() const override { return true; }

  void all_reduce_sum(void* data, int64_t count, CommType type, void* stream) override {
    std::vector<uint8_t> h(static_cast<size_t>(count) * comm_type_bytes(type));
    download(h.data(), data, h.size(), stream);
    host_.all_reduce_sum(h.data(), count, type, nullptr);
    upload(data, h.data(), h.size());
  }
  void reduce_scatter_sum(float* data, std::span<const IndexRange> ranges, void* stream) override {
    std::vector<float> h = download_floats(data, ranges, stream);
    host_.reduce_scatter_sum(h.data(), ranges, nullptr);
    upload(data, h.data(), h.size() * sizeof(float));
  }
  void all_gather(float* data, std::span<const IndexRange> ranges, void* stream) override {
    std::vector<float> h = download_floats(data, ranges, stream);
    host_.all_gather(h.data(), ranges, nullptr);
    upload(data, h.data(), h.size() * sizeof(float));
  }
  void host_all_reduce_sum(void* data, int64_t count, CommType type) override {
    host_.host_all_reduce_sum(data, count, type);
  }
  void barrier(void*) override { host_.barrier(nullptr); }

 private:
  static void download(void* host, const void* device, size_t bytes, void* stream) {
    FP4_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    if (bytes > 0) FP4_CUDA_CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
  }
  static void upload(void* device, const void* host, size_t bytes) {
    if (bytes > 0) FP4_CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
  }
  // The buffer up to the end of the last range (what the collective may read or write).
  static std::vector<float> download_floats(const float* data, std::span<const IndexRange> ranges,
                                            void* stream) {
    int64_t end = 0;
    for (const IndexRange& r : ranges) end = std::max(end, r.end);
    std::vector<float> h(static_cast<size_t>(end));
    download(h.data(), data, h.size() * sizeof(float), stream);
    return h;
  }

  ThreadComm host_;
};

}  // namespace fp4::test
