// quantize_mxfp8_cuda / dequantize_mxfp8_cuda and quantize_mxfp8_transposed_cuda against the CPU reference,
// byte for byte, on FP32 and BF16 inputs with zeros, huge, tiny, subnormal, NaN and Inf values planted.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
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
        cudatest::compare_mxfp8(want, codes, scales, d);
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

// The transposed quantizer against quantize_mxfp8 of the zero-padded transpose of the input's first
// out_rows columns: codes, scales, the non-finite count and the dequantized values in BF16 and FP32, with and
// without the codes stored; odd row counts exercise the padding, out_rows < cols the column prefix.
TEST(QuantMxfp8Cuda, TransposedMatchesCpuReferenceOfThePaddedTranspose) {
  const uint64_t seed = cudatest::test_seed();
  SCOPED_TRACE(cudatest::seed_note(seed));
  std::mt19937_64 g(seed);
  // {input rows, input cols, output rows (a prefix of the input's columns)}
  const int64_t shapes[][3] = {{32, 1, 1},      {1, 48, 48},    {77, 130, 101},
                               {256, 512, 512}, {1000, 96, 17}, {4099, 64, 64}};
  for (QuantIoType dtype : {QuantIoType::kF32, QuantIoType::kBF16}) {
    Diff total;
    for (const auto& s : shapes)
      for (bool specials : {false, true}) {
        const int64_t rows = s[0], cols = s[1], orows = s[2], ocols = (rows + 31) / 32 * 32,
                      n = orows * ocols;
        const cudatest::HostInput in = cudatest::random_input(g, rows, cols, dtype, specials);
        std::vector<float> t(static_cast<size_t>(n), 0.0f);  // the padded transpose of the column prefix
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < orows; ++c) t[static_cast<size_t>(c * ocols + r)] = in.values[r * cols + c];
        const Mxfp8Tensor want = quantize_mxfp8(t.data(), orows, ocols);
        std::vector<float> wv(static_cast<size_t>(n));
        dequantize(want, wv.data());
        std::vector<uint16_t> wb(wv.size());
        for (size_t i = 0; i < wv.size(); ++i) wb[i] = bf16_bits_rne(wv[i]);

        const cudatest::DeviceCopy dx(in);
        DeviceBuffer<uint8_t> codes(n), scales(n / 32);
        DeviceBuffer<unsigned long long> nonfinite(1);
        FP4_CUDA_CHECK(cudaMemset(nonfinite.data(), 0, sizeof(unsigned long long)));
        DeviceBuffer<float> out_f32(n);
        DeviceBuffer<uint16_t> out_bf16(n);
        const Mxfp8DeviceView view{codes.data(), scales.data(), orows, ocols};
        quantize_mxfp8_transposed_cuda(dx.input(), view,
                                       DequantOutput{out_f32.data(), QuantIoType::kF32, true},
                                       nonfinite.data(), nullptr);
        // Values only: no codes or scales stored.
        quantize_mxfp8_transposed_cuda(dx.input(), Mxfp8DeviceView{nullptr, nullptr, orows, ocols},
                                       DequantOutput{out_bf16.data(), QuantIoType::kBF16, true}, nullptr,
                                       nullptr);
        FP4_CUDA_CHECK(cudaDeviceSynchronize());

        Diff d;
        cudatest::compare_mxfp8(want, codes, scales, d);
        cudatest::compare_nonfinite(want.nonfinite, cudatest::read_back(nonfinite), d);
        std::vector<float> gf(static_cast<size_t>(n));
        out_f32.download(gf.data(), n);
        cudatest::compare_f32(wv, gf, d);
        std::vector<uint16_t> gb(static_cast<size_t>(n));
        out_bf16.download(gb.data(), n);
        cudatest::compare_bf16(wb, gb, d);
        if (d.total() > 0) {
          std::string tag = cudatest::shape_tag(rows, cols);
          tag += "transposed: ";
          tag += d.first;
          total.note(tag);
        }
        total.add(d);
      }
    std::printf("[mxfp8 transposed] %-4s: %s\n", cudatest::io_name(dtype), total.summary().c_str());
    EXPECT_EQ(total.total(), 0) << cudatest::io_name(dtype) << ": " << total.summary();
  }
}

TEST(QuantMxfp8Cuda, TransposedRefusesBadShapes) {
  DeviceBuffer<float> x(64 * 40), v(64 * 64);
  DeviceBuffer<uint8_t> codes(64 * 64), scales(64 * 2);
  const DeviceInput in{x.data(), QuantIoType::kF32, 40, 64};  // 40 rows: padded to 64
  const DequantOutput values{v.data(), QuantIoType::kF32, true};
  EXPECT_THROW(quantize_mxfp8_transposed_cuda(in, Mxfp8DeviceView{codes.data(), scales.data(), 65, 64},
                                              values, nullptr, nullptr),
               Error);  // more output rows than input columns
  EXPECT_THROW(quantize_mxfp8_transposed_cuda(in, Mxfp8DeviceView{codes.data(), scales.data(), 64, 40},
                                              values, nullptr, nullptr),
               Error);  // output columns not the padded row count
  EXPECT_THROW(quantize_mxfp8_transposed_cuda(in, Mxfp8DeviceView{codes.data(), nullptr, 64, 64}, values,
                                              nullptr, nullptr),
               Error);  // codes without scales
  EXPECT_THROW(quantize_mxfp8_transposed_cuda(in, Mxfp8DeviceView{nullptr, nullptr, 64, 64}, DequantOutput{},
                                              nullptr, nullptr),
               Error);  // nothing to store
}

}  // namespace
}  // namespace fp4
