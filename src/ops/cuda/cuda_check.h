// CUDA error checking and the RAII owner of device memory, shared by every CUDA source of fp4train.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "core/error.h"

// Throws fp4::Error naming the call, its file:line and the runtime's own error string.
#define FP4_CUDA_CHECK(expr)                                                                                 \
  do {                                                                                                       \
    const cudaError_t fp4_cuda_status_ = (expr);                                                             \
    if (fp4_cuda_status_ != cudaSuccess)                                                                     \
      FP4_THROW(__FILE__, ":", __LINE__, ": ", #expr, " failed: ", cudaGetErrorName(fp4_cuda_status_), " (", \
                cudaGetErrorString(fp4_cuda_status_), ")");                                                  \
  } while (0)

// After a kernel launch: reports a bad launch configuration (or an earlier asynchronous error).
#define FP4_CUDA_CHECK_LAUNCH(kernel_name)                                                                   \
  do {                                                                                                       \
    const cudaError_t fp4_cuda_status_ = cudaGetLastError();                                                 \
    if (fp4_cuda_status_ != cudaSuccess)                                                                     \
      FP4_THROW(__FILE__, ":", __LINE__, ": launch of ", kernel_name,                                        \
                " failed: ", cudaGetErrorName(fp4_cuda_status_), " (", cudaGetErrorString(fp4_cuda_status_), \
                ")");                                                                                        \
  } while (0)

namespace fp4 {

// Owns `count` elements of device memory (cudaMalloc / cudaFree). Move-only; never null unless empty.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count > 0) FP4_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T)));
  }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

  // Synchronous copies of the first n elements (n <= size()).
  void upload(const T* host, size_t n) {
    FP4_CHECK(n <= count_, "DeviceBuffer::upload: ", n, " elements into a buffer of ", count_);
    if (n > 0) FP4_CUDA_CHECK(cudaMemcpy(data_, host, n * sizeof(T), cudaMemcpyHostToDevice));
  }
  void download(T* host, size_t n) const {
    FP4_CHECK(n <= count_, "DeviceBuffer::download: ", n, " elements from a buffer of ", count_);
    if (n > 0) FP4_CUDA_CHECK(cudaMemcpy(host, data_, n * sizeof(T), cudaMemcpyDeviceToHost));
  }

 private:
  void release() noexcept {
    if (data_ != nullptr) cudaFree(data_);  // a destructor cannot throw; a failed free leaks nothing more
    data_ = nullptr;
    count_ = 0;
  }

  T* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace fp4
