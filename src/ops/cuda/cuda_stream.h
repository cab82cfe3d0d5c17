// RAII owners of a CUDA stream and of an ordering-only event, shared by the engine and the optimizers that
// spread work over several streams.
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/cuda_check.h"

namespace fp4::cuda {

// A stream; by default blocking with respect to the legacy default stream.
class Stream {
 public:
  Stream() { FP4_CUDA_CHECK(cudaStreamCreate(&s_)); }
  Stream(unsigned flags, int priority) { FP4_CUDA_CHECK(cudaStreamCreateWithPriority(&s_, flags, priority)); }
  ~Stream() {
    if (s_ != nullptr) cudaStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// An event used only to order streams (no timing).
class Event {
 public:
  Event() { FP4_CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming)); }
  ~Event() {
    if (e_ != nullptr) cudaEventDestroy(e_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// Work queued on `waiter` after this call runs after the work queued on `signaller` so far.
inline void stream_after(cudaStream_t waiter, cudaStream_t signaller, const Event& event) {
  FP4_CUDA_CHECK(cudaEventRecord(event.get(), signaller));
  FP4_CUDA_CHECK(cudaStreamWaitEvent(waiter, event.get(), 0));
}

}  // namespace fp4::cuda
