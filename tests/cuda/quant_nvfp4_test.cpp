// quantize_nvfp4_cuda, amax_nvfp4_cuda and dequantize_nvfp4_cuda against the CPU reference, byte for
// byte, in every valid mode: block 1x16 / 16x16, outer tensor / block128, RTN / SR, Four Over Six,
// sr_headroom, RHT 0 / 16 / 32 / 64 / 128, FP32 / BF16 input, on fresh random tensors of several shapes
// with zeros, huge, tiny, subnormal, NaN and Inf values planted.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <future>
#include <limits>
#include <vector>

#include "numerics/nvfp4_block.h"
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
const Shape kShapes[] = {{16, 128, false},   {16, 128, true},   {48, 384, true}, {128, 4096, false},
                         {1000, 2048, true}, {1008, 640, true}, {32, 144, true}};

struct CaseResult {
  Diff diff;
  int64_t elements = 0;
};

// One shape of one mode: CPU reference (on a worker thread) and GPU, compared.
CaseResult run_case(std::mt19937_64& g, const QuantSpec& spec, QuantIoType dtype, const Shape& shape,
                    int variant) {
  CaseResult out;
  const HostInput in = cudatest::random_input(g, shape.rows, shape.cols, dtype, shape.specials);
  const QuantRandomness rnd = cudatest::randomness(g, spec.rht_n);
  auto want_future = std::async(
      std::launch::async, [&] { return quantize_nvfp4(in.values.data(), in.rows, in.cols, spec, rnd); });

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
  quantize_nvfp4_cuda(dx.input(), spec, rnd, q.view(), tensor ? amax.data() : nullptr, nonfinite.data(), dq,
                      nullptr);
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
      if (r.diff.total() > 0) total.note(cudatest::shape_tag(shape.rows, shape.cols) + r.diff.first);
      total.add(r.diff);
      elements += r.elements;
      ++cases;
    }
    std::printf("[nvfp4] %-44s %-4s %d shapes %8lld elems: %s\n", describe(m.spec).c_str(),
                cudatest::io_name(m.dtype), cases, static_cast<long long>(elements), total.summary().c_str());
    EXPECT_GT(cases, 0) << describe(m.spec);
    EXPECT_EQ(total.total(), 0) << describe(m.spec) << " " << cudatest::io_name(m.dtype) << ": "
                                << total.summary();
    failed += total.total() > 0 ? 1 : 0;
    ++mode_index;
  }
  std::printf("[nvfp4] %d of %zu modes identical to the CPU reference\n",
              static_cast<int>(modes.size()) - failed, modes.size());
}

// ------------------------------------------------------------------ crafted rounding ties
// Random data almost never lands exactly on a rounding tie, where the kernels' comparison-free E4M3 and
// E2M1 rounding (magic-number additions) must still round to even like the reference.

// A float a near `guess` whose product / quotient f(a) is exactly `want`, or guess itself.
template <typename F>
float solve_near(float guess, float want, F f, int& hits) {
  float a = guess;
  for (int k = 0; k < 12; ++k) a = std::nextafter(a, 0.0f);
  for (int k = 0; k < 25; ++k, a = std::nextafter(a, INFINITY))
    if (f(a) == want) {
      ++hits;
      return a;
    }
  return guess;
}

// Every E4M3 rounding point up to 448: each code's value and each midpoint between neighbours (ties to
// even), with their float neighbours; then values past 448 (saturation).
std::vector<float> e4m3_rounding_points() {
  std::vector<float> pts;
  for (int c = 1; c < 0x7E; ++c) {
    const float lo = e4m3_decode(static_cast<uint8_t>(c)), hi = e4m3_decode(static_cast<uint8_t>(c + 1));
    for (float y : {lo, 0.5f * (lo + hi)})
      for (float z : {y, std::nextafter(y, 0.0f), std::nextafter(y, INFINITY)}) pts.push_back(z);
  }
  for (float y : {0.0009765625f, 448.0f, 456.0f, 464.0f, 1000.0f}) pts.push_back(y);
  return pts;
}

// The E2M1 midpoints (ties) and their float neighbours, as multiples of the block's unit.
std::vector<float> e2m1_ties() {
  std::vector<float> t;
  for (float m : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f})
    for (float z : {m, std::nextafter(m, 0.0f), std::nextafter(m, INFINITY)}) t.push_back(z);
  return t;
}

// One block per E4M3 rounding point: element 0 sets the block amax so that the scale argument (tensor:
// amax16 * multiplier; block128: amax16 / s_out / t, with the segment's first block holding the segment
// amax) is that point; the other 15 elements sit on E2M1 ties of the block's encode step. Returns the
// number of exact hits.
int craft_ties(std::mt19937_64& g, OuterScale outer, float tensor_amax, std::vector<float>& x, int64_t& rows,
               int64_t cols) {
  const std::vector<float> pts = e4m3_rounding_points(), ties = e2m1_ties();
  const TensorScale ts = nvfp4_tensor_scale(tensor_amax, false, kNvfp4Target);
  const float mult = ts.s_enc * (1.0f / kNvfp4Target);
  const int64_t per_row = cols / 16;
  rows = (static_cast<int64_t>(pts.size()) * 8 / 7 + per_row) / per_row + 1;
  x.assign(rows * cols, 0.0f);
  std::uniform_int_distribution<int> sign(0, 1);
  int hits = 0;
  size_t next = 0;
  for (int64_t b = 0; b < rows * per_row; ++b) {
    float* v = &x[b * 16];
    const float seg_amax = 1.0f;  // block128: the first block of each 128 segment holds the segment amax
    const float s_out = nvfp4_block128_outer(seg_amax, false, kNvfp4Target);
    float a;
    if (outer == OuterScale::kBlock128 && b % 8 == 0) {
      a = seg_amax;
    } else {
      const float y = pts[next++ % pts.size()];
      if (outer == OuterScale::kTensor) {
        a = solve_near(
            y / mult, y, [&](float c) { return c * mult; }, hits);
      } else {
        a = solve_near(
            y * kNvfp4Target * s_out, y, [&](float c) { return c / s_out / kNvfp4Target; }, hits);
        a = std::min(a, seg_amax);
      }
    }
    // The element step: x * e_b (tensor) or x / p (block128) is the E2M1 argument.
    const bool tensor = outer == OuterScale::kTensor;
    const float e_b = nvfp4_encode_multiplier(nvfp4_scale_tensor(a, ts, kNvfp4Target), ts.s_dec);
    const float p = e4m3_decode(nvfp4_scale_block128(a, s_out, kNvfp4Target)) * s_out;
    v[0] = sign(g) ? -a : a;
    for (int i = 1; i < 16; ++i) {
      const float t = ties[(b + i) % ties.size()];
      float e = tensor ? solve_near(
                             t / e_b, t, [&](float c) { return c * e_b; }, hits)
                       : solve_near(
                             t * p, t, [&](float c) { return c / p; }, hits);
      if (!(std::fabs(e) <= a)) e = 0.5f * a;
      v[i] = sign(g) ? -e : e;
    }
  }
  return hits;
}

TEST(QuantNvfp4Cuda, MatchesCpuReferenceAtEveryRoundingTie) {
  const uint64_t seed = cudatest::test_seed();
  SCOPED_TRACE(cudatest::seed_note(seed));
  std::mt19937_64 g(seed);
  for (OuterScale outer : {OuterScale::kTensor, OuterScale::kBlock128})
    for (Rounding rounding : {Rounding::kRtn, Rounding::kSr}) {
      const QuantSpec spec = cudatest::nvfp4_spec(BlockShape::k1x16, outer, rounding, 0, false);
      HostInput in;
      in.cols = 256;
      in.dtype = QuantIoType::kF32;
      const float tensor_amax = 6.0f * 448.0f / 1024.0f;  // S_enc = 1024
      const int hits = craft_ties(g, outer, tensor_amax, in.values, in.rows, in.cols);
      EXPECT_GT(hits, static_cast<int>(in.rows * in.cols) / 2) << "too few exact ties were constructed";
      const QuantRandomness rnd = cudatest::randomness(g, 0);
      const std::optional<float> given =
          outer == OuterScale::kTensor ? std::optional<float>(tensor_amax) : std::nullopt;
      const Nvfp4Tensor want = quantize_nvfp4(in.values.data(), in.rows, in.cols, spec, rnd, given);
      const cudatest::DeviceCopy dx(in);
      Nvfp4DeviceTensor q(in.rows, in.cols, spec.block, spec.outer);
      DeviceBuffer<float> amax(1);
      if (given) amax.upload(&*given, 1);
      quantize_nvfp4_cuda(dx.input(), spec, rnd, q.view(), given ? amax.data() : nullptr, nullptr,
                          DequantOutput{}, nullptr);
      FP4_CUDA_CHECK(cudaDeviceSynchronize());
      const Diff d = cudatest::compare_nvfp4(want, q.download(), in.values);
      EXPECT_EQ(d.total(), 0) << describe(spec) << " (" << hits << " exact ties): " << d.summary();
    }
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
        quantize_nvfp4_cuda(dx.input(), spec, rnd, q.view(), amax.data(), nonfinite.data(), DequantOutput{},
                            nullptr);
        FP4_CUDA_CHECK(cudaDeviceSynchronize());
        Diff d =
            cudatest::compare_nvfp4(want, q.download(), cudatest::transformed_operand(in.values, spec, rnd));
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
  const QuantSpec spec =
      cudatest::nvfp4_spec(BlockShape::k1x16, OuterScale::kTensor, Rounding::kSr, 16, false);
  const QuantRandomness rnd = cudatest::randomness(g, 16);
  const float given = 4.0f * amax_nvfp4_input(in.values.data(), in.rows, in.cols, spec, rnd);
  const Nvfp4Tensor want = quantize_nvfp4(in.values.data(), in.rows, in.cols, spec, rnd, given);
  const cudatest::DeviceCopy dx(in);
  Nvfp4DeviceTensor q(in.rows, in.cols, spec.block, spec.outer);
  DeviceBuffer<float> amax(1);
  amax.upload(&given, 1);
  quantize_nvfp4_cuda(dx.input(), spec, rnd, q.view(), amax.data(), nullptr, DequantOutput{}, nullptr);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
  const Diff d =
      cudatest::compare_nvfp4(want, q.download(), cudatest::transformed_operand(in.values, spec, rnd));
  EXPECT_EQ(d.total(), 0) << d.summary();
}

// The work is queued on the caller's stream and nothing waits on the host until asked.
TEST(QuantNvfp4Cuda, RunsOnTheGivenStream) {
  const uint64_t seed = cudatest::test_seed();
  SCOPED_TRACE(cudatest::seed_note(seed));
  std::mt19937_64 g(seed);
  const HostInput in = cudatest::random_input(g, 256, 1024, QuantIoType::kBF16, true);
  const QuantSpec spec =
      cudatest::nvfp4_spec(BlockShape::k1x16, OuterScale::kTensor, Rounding::kRtn, 0, false);
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
