// The CUDA quantizers reject what the CPU reference rejects, with fp4::Error messages that name the
// shape or argument at fault, before launching anything; CUDA failures become fp4::Error with file:line.
#include <gtest/gtest.h>

#include <string>

#include "quant_test_util.h"

namespace fp4 {
namespace {

// Runs f, expects fp4::Error whose message contains every fragment.
template <typename F>
void expect_error(F f, std::initializer_list<const char*> fragments) {
  try {
    f();
    ADD_FAILURE() << "no fp4::Error thrown (expected one mentioning " << *fragments.begin() << ")";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* frag : fragments) EXPECT_NE(msg.find(frag), std::string::npos) << "message: " << msg;
  }
}

class QuantErrorsCuda : public ::testing::Test {
 protected:
  DeviceBuffer<float> x_{64 * 256};
  DeviceBuffer<float> amax_{1};

  DeviceInput input(int64_t rows, int64_t cols) const {
    return DeviceInput{x_.data(), QuantIoType::kF32, rows, cols};
  }
};

TEST_F(QuantErrorsCuda, ShapesTheCpuReferenceRejects) {
  const QuantRandomness rnd;
  const QuantSpec tensor =
      cudatest::nvfp4_spec(BlockShape::k1x16, OuterScale::kTensor, Rounding::kRtn, 0, false);
  {
    Nvfp4DeviceTensor q(4, 16, BlockShape::k1x16, OuterScale::kTensor);  // any storage; the check comes first
    Nvfp4DeviceView v = q.view();
    v.cols = 24;
    expect_error(
        [&] { quantize_nvfp4_cuda(input(4, 24), tensor, rnd, v, amax_.data(), nullptr, {}, nullptr); },
        {"quantize_nvfp4_cuda", "multiple of 16", "[4 x 24]"});
  }
  {
    const QuantSpec b128 =
        cudatest::nvfp4_spec(BlockShape::k1x16, OuterScale::kBlock128, Rounding::kRtn, 0, false);
    Nvfp4DeviceTensor q(4, 144, BlockShape::k1x16, OuterScale::kTensor);
    Nvfp4DeviceView v = q.view();
    v.outer_mode = OuterScale::kBlock128;
    expect_error([&] { quantize_nvfp4_cuda(input(4, 144), b128, rnd, v, nullptr, nullptr, {}, nullptr); },
                 {"block128", "multiple of 128", "[4 x 144]"});
  }
  {
    const QuantSpec t16 =
        cudatest::nvfp4_spec(BlockShape::k16x16, OuterScale::kTensor, Rounding::kRtn, 0, false);
    Nvfp4DeviceTensor q(24, 32, BlockShape::k16x16, OuterScale::kTensor);
    expect_error(
        [&] { quantize_nvfp4_cuda(input(24, 32), t16, rnd, q.view(), amax_.data(), nullptr, {}, nullptr); },
        {"16x16", "[24 x 32]"});
  }
  {
    const QuantSpec rht =
        cudatest::nvfp4_spec(BlockShape::k1x16, OuterScale::kTensor, Rounding::kRtn, 64, false);
    QuantRandomness r64;
    r64.signs.n = 64;
    Nvfp4DeviceTensor q(2, 96, BlockShape::k1x16, OuterScale::kTensor);
    expect_error(
        [&] { quantize_nvfp4_cuda(input(2, 96), rht, r64, q.view(), amax_.data(), nullptr, {}, nullptr); },
        {"RHT64", "[2 x 96]"});
    expect_error([&] { amax_nvfp4_cuda(input(2, 96), rht, r64, amax_.data(), nullptr); },
                 {"amax_nvfp4_cuda", "RHT64"});
  }
}

TEST_F(QuantErrorsCuda, ArgumentsThatDoNotFit) {
  const QuantRandomness rnd;
  const QuantSpec tensor =
      cudatest::nvfp4_spec(BlockShape::k1x16, OuterScale::kTensor, Rounding::kRtn, 0, false);
  Nvfp4DeviceTensor q(8, 128, BlockShape::k1x16, OuterScale::kTensor);
  expect_error(
      [&] { quantize_nvfp4_cuda(input(8, 128), tensor, rnd, q.view(), nullptr, nullptr, {}, nullptr); },
      {"amax"});
  expect_error(
      [&] { quantize_nvfp4_cuda(input(16, 128), tensor, rnd, q.view(), amax_.data(), nullptr, {}, nullptr); },
      {"output view is [8 x 128]", "[16 x 128]"});
  const QuantSpec b128 =
      cudatest::nvfp4_spec(BlockShape::k1x16, OuterScale::kBlock128, Rounding::kRtn, 0, false);
  expect_error(
      [&] { quantize_nvfp4_cuda(input(8, 128), b128, rnd, q.view(), nullptr, nullptr, {}, nullptr); },
      {"output view is 1x16 tensor"});
  DeviceInput misaligned = input(8, 128);
  misaligned.data = x_.data() + 1;
  expect_error(
      [&] { quantize_nvfp4_cuda(misaligned, tensor, rnd, q.view(), amax_.data(), nullptr, {}, nullptr); },
      {"input", "16-byte aligned"});
  QuantRandomness wrong_signs;
  wrong_signs.signs.n = 32;
  const QuantSpec rht16 =
      cudatest::nvfp4_spec(BlockShape::k1x16, OuterScale::kTensor, Rounding::kRtn, 16, false);
  expect_error(
      [&] {
        quantize_nvfp4_cuda(input(8, 128), rht16, wrong_signs, q.view(), amax_.data(), nullptr, {}, nullptr);
      },
      {"signs have n=32"});
  QuantSpec mx;
  mx.format = QuantFormat::kMxfp8;
  expect_error(
      [&] { quantize_nvfp4_cuda(input(8, 128), mx, rnd, q.view(), amax_.data(), nullptr, {}, nullptr); },
      {"format is mxfp8"});
}

TEST_F(QuantErrorsCuda, DualRejectsBadCombinations) {
  const QuantRandomness rnd;
  const QuantSpec b128 =
      cudatest::nvfp4_spec(BlockShape::k1x16, OuterScale::kBlock128, Rounding::kRtn, 0, false);
  const QuantSpec t16 =
      cudatest::nvfp4_spec(BlockShape::k16x16, OuterScale::kTensor, Rounding::kRtn, 0, false);
  Nvfp4DeviceTensor qr(64, 256, BlockShape::k1x16, OuterScale::kBlock128),
      qc(256, 64, BlockShape::k16x16, OuterScale::kTensor);
  DualOperand rows{b128, rnd, qr.view(), nullptr, nullptr};
  DualOperand cols{t16, rnd, qc.view(), amax_.data(), nullptr};
  expect_error([&] { quantize_dual_cuda(input(64, 256), rows, cols, {}, nullptr); }, {"1x16 blocks only"});
  // T = x^T is [256 x 64]: block128 along its rows needs 64 to be a multiple of 128.
  Nvfp4DeviceTensor qc2(256, 64, BlockShape::k1x16, OuterScale::kTensor);
  DualOperand cols2{b128, rnd, qc2.view(), nullptr, nullptr};
  expect_error([&] { quantize_dual_cuda(input(64, 256), rows, cols2, {}, nullptr); },
               {"multiple of 128", "[256 x 64]"});
}

TEST_F(QuantErrorsCuda, Mxfp8AndLayoutShapes) {
  DeviceBuffer<uint8_t> codes(64 * 48), scales(64 * 48 / 16);
  const Mxfp8DeviceView v{codes.data(), scales.data(), 64, 48};
  expect_error([&] { quantize_mxfp8_cuda(input(64, 48), v, nullptr, nullptr); },
               {"multiple of 32", "[64 x 48]"});
  expect_error([&] { to_cublaslt_scale_layout_cuda(scales.data(), 0, 4, codes.data(), nullptr); }, {"empty"});
}

TEST(CudaCheck, FailedCallsThrowWithFileLineAndRuntimeMessage) {
  int count = 0;
  FP4_CUDA_CHECK(cudaGetDeviceCount(&count));
  try {
    FP4_CUDA_CHECK(cudaSetDevice(count + 7));
    ADD_FAILURE() << "cudaSetDevice on a missing device did not throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("quant_errors_test.cpp:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cudaSetDevice"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cudaErrorInvalidDevice"), std::string::npos) << msg;
  }
  (void)cudaGetLastError();  // clear the recorded error so later launch checks do not see it
  DeviceBuffer<float> b(4);
  float host[4] = {1, 2, 3, 4};
  b.upload(host, 4);
  expect_error([&] { b.upload(host, 5); }, {"DeviceBuffer::upload", "5 elements"});
}

}  // namespace
}  // namespace fp4
