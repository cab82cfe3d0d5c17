// DeviceMasterWeights: what the CUDA engine (model/cuda/cuda_engine.h) offers to work queued between its
// steps. Plain C++: the trainer includes it without CUDA headers.
#pragma once

#include <span>
#include <string>

struct CUstream_st;

namespace fp4 {

// The CUDA engine's FP32 master weights in place, for work queued between steps (OsciReset's device
// form, optim/cuda/osci_device_backend.h): dynamic_cast<DeviceMasterWeights*>(engine.get()).
class DeviceMasterWeights {
 public:
  virtual ~DeviceMasterWeights() = default;
  // The FP32 master of parameter `name` in device memory (numel floats, row-major); throws fp4::Error
  // naming an unknown parameter. Valid while the engine lives.
  virtual std::span<float> device_master(const std::string& name) = 0;
  // Makes the engine's device current and returns the stream it queues its steps on: work on the
  // masters is queued there, so it runs between the steps around it.
  virtual CUstream_st* device_stream() = 0;
  // After a master was written in place: refreshes the BF16 working copy the forward reads (what
  // write_parameter does).
  virtual void master_written(const std::string& name) = 0;
};

}  // namespace fp4
