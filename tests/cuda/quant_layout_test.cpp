// to_cublaslt_scale_layout_cuda against the CPU to_cublaslt_scale_layout, padding included.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "quant_test_util.h"

namespace fp4 {
namespace {

TEST(QuantLayoutCuda, MatchesCpuLayoutIncludingPadding) {
  const uint64_t seed = cudatest::test_seed();
  SCOPED_TRACE(cudatest::seed_note(seed));
  std::mt19937_64 g(seed);
  // Exact tiles, partial tiles in rows and in scale columns, a single scale, a tall thin matrix.
  const int64_t shapes[][2] = {{128, 4}, {1, 1}, {5, 3}, {130, 9}, {1000, 128}, {4096, 2}, {256, 257}};
  for (const auto& s : shapes) {
    const int64_t rows = s[0], scols = s[1];
    std::vector<uint8_t> scales(rows * scols);
    for (auto& b : scales) b = static_cast<uint8_t>(1 + g() % 255);  // never 0, so padding is visible
    const std::vector<uint8_t> want = to_cublaslt_scale_layout(scales.data(), rows, scols);
    const int64_t bytes = cublaslt_scale_layout_bytes(rows, scols);
    ASSERT_EQ(static_cast<int64_t>(want.size()), bytes) << rows << " x " << scols;
    DeviceBuffer<uint8_t> in(scales.size()), out(bytes);
    in.upload(scales.data(), scales.size());
    FP4_CUDA_CHECK(cudaMemset(out.data(), 0xAB, bytes));  // the kernel must write the padding too
    to_cublaslt_scale_layout_cuda(in.data(), rows, scols, out.data(), nullptr);
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> got(bytes);
    out.download(got.data(), bytes);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < bytes; ++i) mismatches += got[i] != want[i];
    std::printf("[layout] %lld x %lld scales -> %lld bytes: %lld mismatches\n", static_cast<long long>(rows),
                static_cast<long long>(scols), static_cast<long long>(bytes),
                static_cast<long long>(mismatches));
    EXPECT_EQ(mismatches, 0) << rows << " x " << scols;
  }
}

}  // namespace
}  // namespace fp4
