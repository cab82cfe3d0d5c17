// Helpers of the CUDA op and engine tests (tests/cuda/ops_parity_test.cu, engine_test.cu): fresh random
// inputs, BF16 rounding as the kernels see it, device copies and norm-wise relative errors.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace fp4::cudatest {

using bf16 = __nv_bfloat16;

// A fresh seed per call, or FP4_TEST_SEED's value to replay a failure (the traces print the seed).
inline uint32_t fresh_seed() {
  if (const char* s = std::getenv("FP4_TEST_SEED")) return static_cast<uint32_t>(std::stoull(s));
  static std::random_device rd;
  return rd();
}

inline std::vector<float> normal(std::mt19937& rng, size_t n, float std = 1.0f, float mean = 0.0f) {
  std::normal_distribution<float> dist(mean, std);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16(x));
}

inline std::vector<float> rounded(std::vector<float> v) {
  for (auto& x : v) x = round_bf16(x);
  return v;
}

inline std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16(v[i]);
  return out;
}

inline std::vector<float> to_f32(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __bfloat162float(v[i]);
  return out;
}

// A device copy of a host vector (kernels under test run on the legacy default stream 0).
template <typename T>
struct Dev {
  DeviceBuffer<T> buf;
  explicit Dev(size_t n) : buf(n) {}
  explicit Dev(const std::vector<T>& h) : buf(h.size()) { buf.upload(h.data(), h.size()); }
  T* p() { return buf.data(); }
  std::vector<T> get() const {
    std::vector<T> h(buf.size());
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    buf.download(h.data(), h.size());
    return h;
  }
};

inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += std::pow(static_cast<double>(a[i]) - b[i], 2);
    den += std::pow(static_cast<double>(b[i]), 2);
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Columns [c0, c0 + w) of a row-major [rows][ld] matrix.
template <typename T>
std::vector<T> columns(const std::vector<T>& m, int rows, int ld, int c0, int w) {
  std::vector<T> out;
  for (int r = 0; r < rows; ++r)
    out.insert(out.end(), m.begin() + static_cast<int64_t>(r) * ld + c0,
               m.begin() + static_cast<int64_t>(r) * ld + c0 + w);
  return out;
}

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline int round_up8(int x) {
  return (x + 7) / 8 * 8;
}

}  // namespace fp4::cudatest
