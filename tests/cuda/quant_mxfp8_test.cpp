// quantize_mxfp8_cuda / dequantize_mxfp8_cuda against the CPU reference, byte for byte, on FP32 and BF16
// inputs with zeros, huge, tiny, subnormal, NaN and Inf values planted.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "quant_test_util.h"

namespace fp4 {
namespace {

using cudatest::Diff;

TEST(QuantMxfp8Cuda, MatchesCpuReference) {
  const uint64_t seed = cudatest::test_seed();
  SCOPED_TRACE(cudatest::seed_note(seed));
  std::mt19937_64 g(seed);
  const int64_t shapes[][2] = {{1, 32}, {16, 128}, {77, 4096}, {1000, 2048}, {3, 96}};
  for (QuantIoType dtype : {QuantIoType::kF32, QuantIoType::kBF16}) {
    Diff total;
    int64_t elements = 0;
    for (const auto& s : shapes)
      for (bool specials : {false, true}) {
        const int64_t rows = s[0], cols = s[1], n = rows * cols;
        const cudatest::HostInput in = cudatest::random_input(g, rows, cols, dtype, specials);
        const Mxfp8Tensor want = quantize_mxfp8(in.values.data(), rows, cols);
        const cudatest::DeviceCopy dx(in);
        DeviceBuffer<uint8_t> codes(n), scales(n / 32);
        DeviceBuffer<unsigned long long> nonfinite(1);
        FP4_CUDA_CHECK(cudaMemset(nonfinite.data(), 0, sizeof(unsigned long long)));
        const Mxfp8DeviceView view{codes.data(), scales.data(), rows, cols};
        quantize_mxfp8_cuda(dx.input(), view, nonfinite.data(), nullptr);
        DeviceBuffer<float> out_f32(n);
        DeviceBuffer<uint16_t> out_bf16(n);
        dequantize_mxfp8_cuda(view, out_f32.data(), QuantIoType::kF32, nullptr);
        dequantize_mxfp8_cuda(view, out_bf16.data(), QuantIoType::kBF16, nullptr);
        FP4_CUDA_CHECK(cudaDeviceSynchronize());

        Diff d;
        std::vector<uint8_t> got_codes(n), got_scales(n / 32);
        codes.download(got_codes.data(), n);
        scales.download(got_scales.data(), n / 32);
        for (int64_t i = 0; i < n; ++i)
          if (got_codes[i] != want.codes[i] && d.codes++ == 0)
            d.note("code " + std::to_string(i) + ": want " + std::to_string(want.codes[i]) + " got " +
                   std::to_string(got_codes[i]) + " (x = " + std::to_string(in.values[i]) + ")");
        for (int64_t i = 0; i < n / 32; ++i)
          if (got_scales[i] != want.scales[i] && d.scales++ == 0)
            d.note("scale " + std::to_string(i) + ": want " + std::to_string(want.scales[i]) + " got " +
                   std::to_string(got_scales[i]));
        cudatest::compare_nonfinite(want.nonfinite, cudatest::read_back(nonfinite), d);
        std::vector<float> w(n), gf(n);
        dequantize(want, w.data());
        out_f32.download(gf.data(), n);
        cudatest::compare_f32(w, gf, d);
        std::vector<uint16_t> wb(n), gb(n);
        for (int64_t i = 0; i < n; ++i) wb[i] = bf16_bits_rne(w[i]);
        out_bf16.download(gb.data(), n);
        cudatest::compare_bf16(wb, gb, d);
        if (d.total() > 0) total.note(cudatest::shape_tag(rows, cols) + d.first);
        total.add(d);
        elements += n;
      }
    std::printf("[mxfp8] %-4s %8lld elems: %s\n", cudatest::io_name(dtype), static_cast<long long>(elements),
                total.summary().c_str());
    EXPECT_EQ(total.total(), 0) << cudatest::io_name(dtype) << ": " << total.summary();
  }
}

}  // namespace
}  // namespace fp4
