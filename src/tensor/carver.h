// Carver: hands out aligned pieces of one device region, in order, so that a layout is computed once
// (with base == nullptr it only measures) and then laid over a single allocation. Overlays: carve one
// group, rewind to its start, carve the other, then extend_to the end of the longer.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace fp4 {

// 256 bytes: cuBLASLt's preferred alignment; also covers the 16 bytes of vector accesses.
inline constexpr size_t kCarveAlign = 256;

class Carver {
 public:
  explicit Carver(uint8_t* base) : base_(base) {}
  template <typename T>
  T* take(size_t count) {
    used_ = (used_ + kCarveAlign - 1) / kCarveAlign * kCarveAlign;
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += count * sizeof(T);
    return p;
  }
  size_t used() const { return used_; }
  void rewind(size_t to) { used_ = to; }
  void extend_to(size_t end) { used_ = std::max(used_, end); }

 private:
  uint8_t* base_;
  size_t used_ = 0;
};

}  // namespace fp4
