// quantize_nvfp4_cuda, amax_nvfp4_cuda and dequantize_nvfp4_cuda against the CPU reference, byte for
// byte, in every valid mode: block 1x16 / 16x16, outer tensor / block128, RTN / SR, Four Over Six,
// sr_headroom, RHT 0 / 16 / 32 / 64 / 128, FP32 / BF16 input, on fresh random tensors of several shapes
// with zeros, huge, tiny, subnormal, NaN and Inf values planted.
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <limits>
#include <vector>

#include "quant_test_util.h"

namespace fp4 {
namespace {

using cudatest::Diff;
using cudatest::HostInput;

struct Shape {
  int64_t rows, cols;
  bool specials;
};

// 16 x 128 (one tile row), 128 x 4096, 1000 x 2048 (rows not a multiple of 16 or 64), non-square small
// ones, and 1008 x 640 (16x16-compatible, partial column tiles for 1x16 tensor mode).
const Shape kShapes[] = {{16, 128, false}, {16, 128, true},    {48, 384, true},   {128, 4096, false},
                         {1000, 2048, true}, {1008, 640, true}, {32, 144, true}};

struct CaseResult {
  Diff diff;
  int64_t elements = 0;
};

// One shape of one mode: CPU reference (on a worker thread) and GPU, compared.
CaseResult run_case(std::mt19937_64& g, const QuantSpec& spec, QuantIoType dtype, const Shape& shape, int variant) {
  CaseResult out;
  const HostInput in = cudatest::random_input(g, shape.rows, shape.cols, dtype, shape.specials);
  const QuantRandomness rnd = cudatest::randomness(g, spec.rht_n);
  auto want_future = std::async(std::launch::async, [&] { return quantize_nvfp4(in.values.data(), in.rows, in.cols, spec, rnd); });

  const cudatest::DeviceCopy dx(in);
  Nvfp4DeviceTensor q(in.rows, in.cols, spec.block, spec.outer);
  DeviceBuffer<float> amax(1);
  DeviceBuffer<unsigned long long> nonfinite(1);
  FP4_CUDA_CHECK(cudaMemset(nonfinite.data(), 0, sizeof(unsigned long long)));
  const bool tensor = spec.outer == OuterScale::kTensor;
  if (tensor) amax_nvfp4_cuda(dx.input(), spec, rnd, amax.data(), nullptr);
  // The fused dequantized output rotates through FP32 / BF16 and with / without the tensor scale.
  DequantOutput dq;
  dq.dtype = (variant & 1) ? QuantIoType::kBF16 : QuantIoType::kF32;
  dq.apply_tensor_scale = (variant & 2) == 0;
  const int64_t n = in.rows * in.cols;
  DeviceBuffer<float> dq_buf(static_cast<size_t>(n));
  dq.data = dq_buf.data();
  quantize_nvfp4_cuda(dx.input(), spec, rnd, q.view(), tensor ? amax.data() : nullptr, nonfinite.data(), dq, nullptr);
  // The standalone dequantizer on the GPU's own packed output, in the other dtype.
  DequantOutput dq2 = dq;
  dq2.dtype = (variant & 1) ? QuantIoType::kF32 : QuantIoType::kBF16;
  DeviceBuffer<float> dq2_buf(static_cast<size_t>(n));
  dq2.data = dq2_buf.data();
  dequantize_nvfp4_cuda(q.view(), dq2, nullptr);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());

  Nvfp4Tensor want = want_future.get();
  const Nvfp4Tensor got = q.download();
  out.diff = cudatest::compare_nvfp4(want, got, cudatest::transformed_operand(in.values, spec, rnd));
  cudatest::compare_nonfinite(want.nonfinite, cudatest::read_back(nonfinite), out.diff);
  if (tensor && float_bits(want.amax) != float_bits(cudatest::read_back(amax))) {
    out.diff.outer += 1;
    out.diff.note("tensor amax differs");
  }
  for (const DequantOutput* d : {&dq, &dq2}) {
    const DeviceBuffer<float>& buf = d == &dq ? dq_buf : dq2_buf;
    if (d->dtype == QuantIoType::kF32) {
      std::vector<float> w(n), gv(n);
      dequantize(want, w.data(), d->apply_tensor_scale);
      buf.download(gv.data(), gv.size());
      cudatest::compare_f32(w, gv, out.diff);
    } else {
      std::vector<uint16_t> w(n), gv(n);
      dequantize_bf16(want, w.data(), d->apply_tensor_scale);
      FP4_CUDA_CHECK(cudaMemcpy(gv.data(), buf.data(), n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
      cudatest::compare_bf16(w, gv, out.diff);
    }
  }
  out.elements = n;
  return out;
}

struct Mode {
  QuantSpec spec;
  QuantIoType dtype;
};

std::vector<Mode> all_modes() {
  std::vector<Mode> modes;
  for (QuantIoType dtype : {QuantIoType::kF32, QuantIoType::kBF16})
    for (BlockShape block : {BlockShape::k1x16, BlockShape::k16x16})
      for (OuterScale outer : {OuterScale::kTensor, OuterScale::kBlock128})
        for (Rounding rounding : {Rounding::kRtn, Rounding::kSr})
          for (bool fos : {false, true})
            for (int rht : {0, 16, 32, 64, 128}) {
              const QuantSpec spec = cudatest::nvfp4_spec(block, outer, rounding, rht, fos);
              if (cudatest::shape_ok(16, 128, spec)) modes.push_back({spec, dtype});
            }
  // sr_headroom (Quartet II target 6*16/17) with both outer scales.
  for (QuantIoType dtype : {QuantIoType::kF32, QuantIoType::kBF16})
    for (OuterScale outer : {OuterScale::kTensor, OuterScale::kBlock128})
      for (int rht : {0, 16}) {
        QuantSpec spec = cudatest::nvfp4_spec(BlockShape::k1x16, outer, Rounding::kSr, rht, false);
        spec.sr_headroom = true;
        modes.push_back({spec, dtype});
      }
  return modes;
}

TEST(QuantNvfp4Cuda, MatchesCpuReferenceInEveryMode) {
  const uint64_t seed = cudatest::test_seed();
  SCOPED_TRACE(cudatest::seed_note(seed));
  std::mt19937_64 g(seed);
  int failed = 0, mode_index = 0;
  const std::vector<Mode> modes = all_modes();
  for (const Mode& m : modes) {
    Diff total;
    int cases = 0;
    int64_t elements = 0;
    for (const Shape& shape : kShapes) {
      if (!cudatest::shape_ok(shape.rows, shape.cols, m.spec)) continue;
      const CaseResult r = run_case(g, m.spec, m.dtype, shape, mode_index + cases);
      if (r.diff.total() > 0)
        total.note(cudatest::shape_tag(shape.rows, shape.cols) + r.diff.first);
      total.add(r.diff);
      elements += r.elements;
      ++cases;
    }
    std::printf("[nvfp4] %-44s %-4s %d shapes %8lld elems: %s\n", describe(m.spec).c_str(), cudatest::io_name(m.dtype),
                cases, static_cast<long long>(elements), total.summary().c_str());
    EXPECT_GT(cases, 0) << describe(m.spec);
    EXPECT_EQ(total.total(), 0) << describe(m.spec) << " " << cudatest::io_name(m.dtype) << ": " << total.summary();
    failed += total.total() > 0 ? 1 : 0;
    ++mode_index;
  }
  std::printf("[nvfp4] %d of %zu modes identical to the CPU reference\n", static_cast<int>(modes.size()) - failed,
              modes.size());
}

// Degenerate tensors: all zeros (tensor amax 0: S_enc saturates at FLT_MAX; block128 s_out = 0 -> 1),
// all FP32 subnormals, and all NaN.
TEST(QuantNvfp4Cuda, MatchesCpuReferenceOnZeroSubnormalAndNanTensors) {
  const uint64_t seed = cudatest::test_seed();
  SCOPED_TRACE(cudatest::seed_note(seed));
  std::mt19937_64 g(seed);
  const float fills[] = {0.0f, -1e-40f, std::numeric_limits<float>::quiet_NaN()};
  for (float fill : fills)
    for (OuterScale outer : {OuterScale::kTensor, OuterScale::kBlock128})
      for (Rounding rounding : {Rounding::kRtn, Rounding::kSr}) {
        const QuantSpec spec = cudatest::nvfp4_spec(BlockShape::k1x16, outer, rounding, 16, false);
        HostInput in;
        in.rows = 32;
        in.cols = 256;
        in.dtype = QuantIoType::kF32;
        in.values.assign(in.rows * in.cols, fill);
        const QuantRandomness rnd = cudatest::randomness(g, 16);
        const Nvfp4Tensor want = quantize_nvfp4(in.values.data(), in.rows, in.cols, spec, rnd);
        const cudatest::DeviceCopy dx(in);
        Nvfp4DeviceTensor q(in.rows, in.cols, spec.block, spec.outer);
        DeviceBuffer<float> amax(1);
        DeviceBuffer<unsigned long long> nonfinite(1);
        FP4_CUDA_CHECK(cudaMemset(nonfinite.data(), 0, sizeof(unsigned long long)));
        if (outer == OuterScale::kTensor) amax_nvfp4_cuda(dx.input(), spec, rnd, amax.data(), nullptr);
        quantize_nvfp4_cuda(dx.input(), spec, rnd, q.view(), amax.data(), nonfinite.data(), DequantOutput{}, nullptr);
        FP4_CUDA_CHECK(cudaDeviceSynchronize());
        Diff d = cudatest::compare_nvfp4(want, q.download(), cudatest::transformed_operand(in.values, spec, rnd));
        cudatest::compare_nonfinite(want.nonfinite, cudatest::read_back(nonfinite), d);
        EXPECT_EQ(d.total(), 0) << "fill " << fill << " " << describe(spec) << ": " << d.summary();
      }
}

// A caller-given amax (e.g. all-reduced over ranks) is used as is: quantize with 4x the true amax.
TEST(QuantNvfp4Cuda, TensorModeUsesTheGivenAmax) {
  const uint64_t seed = cudatest::test_seed();
  SCOPED_TRACE(cudatest::seed_note(seed));
  std::mt19937_64 g(seed);
  const HostInput in = cudatest::random_input(g, 64, 256, QuantIoType::kF32, false);
  const QuantSpec spec = cudatest::nvfp4_spec(BlockShape::k1x16, OuterScale::kTensor, Rounding::kSr, 16, false);
  const QuantRandomness rnd = cudatest::randomness(g, 16);
  const float given = 4.0f * amax_nvfp4_input(in.values.data(), in.rows, in.cols, spec, rnd);
  const Nvfp4Tensor want = quantize_nvfp4(in.values.data(), in.rows, in.cols, spec, rnd, given);
  const cudatest::DeviceCopy dx(in);
  Nvfp4DeviceTensor q(in.rows, in.cols, spec.block, spec.outer);
  DeviceBuffer<float> amax(1);
  amax.upload(&given, 1);
  quantize_nvfp4_cuda(dx.input(), spec, rnd, q.view(), amax.data(), nullptr, DequantOutput{}, nullptr);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
  const Diff d = cudatest::compare_nvfp4(want, q.download(), cudatest::transformed_operand(in.values, spec, rnd));
  EXPECT_EQ(d.total(), 0) << d.summary();
}

// The work is queued on the caller's stream and nothing waits on the host until asked.
TEST(QuantNvfp4Cuda, RunsOnTheGivenStream) {
  const uint64_t seed = cudatest::test_seed();
  SCOPED_TRACE(cudatest::seed_note(seed));
  std::mt19937_64 g(seed);
  const HostInput in = cudatest::random_input(g, 256, 1024, QuantIoType::kBF16, true);
  const QuantSpec spec = cudatest::nvfp4_spec(BlockShape::k1x16, OuterScale::kTensor, Rounding::kRtn, 0, false);
  const QuantRandomness rnd = cudatest::randomness(g, 0);
  const Nvfp4Tensor want = quantize_nvfp4(in.values.data(), in.rows, in.cols, spec, rnd);
  cudaStream_t stream = nullptr;
  FP4_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const cudatest::DeviceCopy dx(in);
  Nvfp4DeviceTensor q(in.rows, in.cols, spec.block, spec.outer);
  DeviceBuffer<float> amax(1);
  amax_nvfp4_cuda(dx.input(), spec, rnd, amax.data(), stream);
  quantize_nvfp4_cuda(dx.input(), spec, rnd, q.view(), amax.data(), nullptr, DequantOutput{}, stream);
  FP4_CUDA_CHECK(cudaStreamSynchronize(stream));
  FP4_CUDA_CHECK(cudaStreamDestroy(stream));
  const Diff d = cudatest::compare_nvfp4(want, q.download(), in.values);
  EXPECT_EQ(d.total(), 0) << d.summary();
}

}  // namespace
}  // namespace fp4
