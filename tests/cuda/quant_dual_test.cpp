// quantize_dual_cuda (and its amax pre-pass amax_dual_cuda) against the CPU quantize_dual, byte for byte:
// both operands (row-wise and transposed column-wise), every column spec (tensor / block128, RTN / SR,
// RHT 0..128, original / aligned source) under several row specs, FP32 and BF16 input, partial tiles,
// and the recipes' production combinations on large tensors with planted NaN / Inf / huge / tiny values.
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <vector>

#include "quant_test_util.h"

namespace fp4 {
namespace {

using cudatest::Diff;
using cudatest::HostInput;

struct DualCase {
  QuantSpec rows, cols;
  QuantIoType dtype;
};

std::string describe_case(const DualCase& c) {
  return "rows{" + describe(c.rows) + "} cols{" + describe(c.cols) + "} " + cudatest::io_name(c.dtype);
}

// One shape of one combination: CPU quantize_dual on a worker thread, the GPU's amax pre-pass and fused
// quantizer, everything compared (codes, scales, outer scales, amax, non-finite counts, dequant output).
// Multiplies rows [r0, r1) and columns [c0, c1) of the input by `factor` (BF16 inputs are re-rounded).
struct Rescale {
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
  float factor = 1.0f;
};

void apply_rescale(HostInput& in, const Rescale& s) {
  for (int64_t r = 0; r < in.rows; ++r)
    for (int64_t c = 0; c < in.cols; ++c) {
      if (!((r >= s.r0 && r < s.r1) || (c >= s.c0 && c < s.c1))) continue;
      float& v = in.values[r * in.cols + c];
      v *= s.factor;
      if (in.dtype == QuantIoType::kBF16) {
        in.bf16[r * in.cols + c] = bf16_bits_rne(v);
        v = bf16_bits_to_float(in.bf16[r * in.cols + c]);
      }
    }
}

// A dequantized operand written by the GPU against the CPU's dequantize of the reference operand.
void compare_dequant(const Nvfp4Tensor& want, const DequantOutput& out, const DeviceBuffer<float>& buf,
                     Diff& d, const char* which) {
  if (out.data == nullptr) return;
  const size_t n = static_cast<size_t>(want.rows * want.cols);
  const int64_t before = d.dequant;
  if (out.dtype == QuantIoType::kF32) {
    std::vector<float> w(n), gv(n);
    dequantize(want, w.data(), out.apply_tensor_scale);
    buf.download(gv.data(), gv.size());
    cudatest::compare_f32(w, gv, d);
  } else {
    std::vector<uint16_t> w(n), gv(n);
    dequantize_bf16(want, w.data(), out.apply_tensor_scale);
    FP4_CUDA_CHECK(cudaMemcpy(gv.data(), buf.data(), gv.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    cudatest::compare_bf16(w, gv, d);
  }
  if (d.dequant != before) d.note(std::string(which) + " operand's dequantized values differ");
}

Diff run_dual(std::mt19937_64& g, const DualCase& c, int64_t rows, int64_t cols, bool specials, int variant,
              const Rescale& rescale = {}) {
  HostInput in = cudatest::random_input(g, rows, cols, c.dtype, specials);
  apply_rescale(in, rescale);
  const QuantRandomness rnd_r = cudatest::randomness(g, c.rows.rht_n);
  const QuantRandomness rnd_c = cudatest::randomness(g, c.cols.rht_n);
  auto want_future = std::async(std::launch::async, [&] {
    return quantize_dual(in.values.data(), rows, cols, c.rows, rnd_r, c.cols, rnd_c);
  });

  const cudatest::DeviceCopy dx(in);
  Nvfp4DeviceTensor q_rows(rows, cols, c.rows.block, c.rows.outer),
      q_cols(cols, rows, c.cols.block, c.cols.outer);
  DeviceBuffer<float> amax(2);
  DeviceBuffer<unsigned long long> nonfinite(2);
  FP4_CUDA_CHECK(cudaMemset(nonfinite.data(), 0, 2 * sizeof(unsigned long long)));
  DualOperand op_r{c.rows, rnd_r, q_rows.view(), amax.data(), nonfinite.data()};
  DualOperand op_c{c.cols, rnd_c, q_cols.view(), amax.data() + 1, nonfinite.data() + 1};
  amax_dual_cuda(dx.input(), op_r, op_c, amax.data(), amax.data() + 1, nullptr);
  DequantOutput dq;
  DeviceBuffer<float> dq_buf;
  if (variant % 3 != 0) {  // the optional dequantized row operand, FP32 or BF16
    dq_buf = DeviceBuffer<float>(static_cast<size_t>(rows * cols));
    dq.data = dq_buf.data();
    dq.dtype = variant % 3 == 1 ? QuantIoType::kF32 : QuantIoType::kBF16;
    dq.apply_tensor_scale = (variant & 4) == 0;
  }
  // The optional dequantized column operand, with the other dtype and tensor-scale flag than the rows'.
  DequantOutput dq_c;
  DeviceBuffer<float> dq_c_buf;
  if (variant % 5 != 0) {
    dq_c_buf = DeviceBuffer<float>(static_cast<size_t>(rows * cols));
    dq_c.data = dq_c_buf.data();
    dq_c.dtype = variant % 5 == 1 ? QuantIoType::kF32 : QuantIoType::kBF16;
    dq_c.apply_tensor_scale = (variant & 8) == 0;
  }
  quantize_dual_cuda(dx.input(), op_r, op_c, dq, dq_c, nullptr);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());

  DualQuant want = want_future.get();
  Diff d = cudatest::compare_nvfp4(want.rows, q_rows.download(),
                                   cudatest::transformed_operand(in.values, c.rows, rnd_r));
  std::vector<float> src = in.values;
  if (c.cols.source == QuantSource::kAligned) dequantize(want.rows, src.data());
  const std::vector<float> t = cudatest::transpose(src, rows, cols);
  const Diff dc =
      cudatest::compare_nvfp4(want.cols, q_cols.download(), cudatest::transformed_operand(t, c.cols, rnd_c));
  if (dc.total() > 0) d.note("column operand: " + dc.first);
  d.add(dc);
  std::vector<unsigned long long> nf(2);
  nonfinite.download(nf.data(), 2);
  cudatest::compare_nonfinite(want.rows.nonfinite, nf[0], d);
  cudatest::compare_nonfinite(want.cols.nonfinite, nf[1], d);
  std::vector<float> am(2);
  amax.download(am.data(), 2);
  if (c.rows.outer == OuterScale::kTensor && float_bits(am[0]) != float_bits(want.rows.amax)) {
    d.outer += 1;
    d.note("row amax differs");
  }
  if (c.cols.outer == OuterScale::kTensor && float_bits(am[1]) != float_bits(want.cols.amax)) {
    d.outer += 1;
    d.note("column amax differs");
  }
  compare_dequant(want.rows, dq, dq_buf, d, "row");
  compare_dequant(want.cols, dq_c, dq_c_buf, d, "column");
  return d;
}

bool dual_ok(const DualCase& c, int64_t rows, int64_t cols) {
  return cudatest::shape_ok(rows, cols, c.rows) && cudatest::shape_ok(cols, rows, c.cols);
}

QuantSpec spec(OuterScale outer, Rounding rounding, int rht, bool fos = false,
               QuantSource source = QuantSource::kOriginal) {
  return cudatest::nvfp4_spec(BlockShape::k1x16, outer, rounding, rht, fos, source);
}

// Every column spec under five row specs, on small shapes: whole tiles, a partial tile in both
// directions (144 x 400), a single 16-row strip, and both orientations of a non-square matrix.
TEST(QuantDualCuda, MatchesCpuReferenceForEveryColumnSpec) {
  const uint64_t seed = cudatest::test_seed();
  SCOPED_TRACE(cudatest::seed_note(seed));
  std::mt19937_64 g(seed);
  const QuantSpec row_specs[] = {
      spec(OuterScale::kBlock128, Rounding::kRtn, 0), spec(OuterScale::kTensor, Rounding::kRtn, 0),
      spec(OuterScale::kBlock128, Rounding::kSr, 16), spec(OuterScale::kTensor, Rounding::kSr, 128),
      spec(OuterScale::kBlock128, Rounding::kRtn, 32, true)};
  const int64_t shapes[][2] = {{256, 384}, {384, 256}, {144, 400}, {16, 128}, {128, 128}};
  int combos = 0, failed = 0, variant = 0;
  for (const QuantSpec& rs : row_specs)
    for (QuantSource source : {QuantSource::kOriginal, QuantSource::kAligned})
      for (OuterScale outer : {OuterScale::kTensor, OuterScale::kBlock128})
        for (Rounding rounding : {Rounding::kRtn, Rounding::kSr})
          for (int rht : {0, 16, 32, 64, 128}) {
            Diff total;
            int cases = 0;
            for (QuantIoType dtype : {QuantIoType::kF32, QuantIoType::kBF16}) {
              const DualCase c{rs, spec(outer, rounding, rht, false, source), dtype};
              for (const auto& s : shapes) {
                if (!dual_ok(c, s[0], s[1])) continue;
                const Diff d = run_dual(g, c, s[0], s[1], (cases & 1) == 1, variant++);
                if (d.total() > 0)
                  total.note(describe_case(c) + " " + cudatest::shape_tag(s[0], s[1]) + d.first);
                total.add(d);
                ++cases;
              }
            }
            const DualCase c{rs, spec(outer, rounding, rht, false, source), QuantIoType::kF32};
            std::printf("[dual] rows{%s} cols{%s} f32+bf16 %2d cases: %s\n", describe(rs).c_str(),
                        describe(c.cols).c_str(), cases, total.summary().c_str());
            EXPECT_GT(cases, 0);
            EXPECT_EQ(total.total(), 0) << total.summary();
            ++combos;
            failed += total.total() > 0 ? 1 : 0;
          }
  // Four Over Six on the column operand as well.
  for (OuterScale outer : {OuterScale::kTensor, OuterScale::kBlock128})
    for (QuantSource source : {QuantSource::kOriginal, QuantSource::kAligned}) {
      const DualCase c{row_specs[0], spec(outer, Rounding::kRtn, 16, true, source), QuantIoType::kBF16};
      const Diff d = run_dual(g, c, 256, 384, true, variant++);
      std::printf("[dual] %s: %s\n", describe_case(c).c_str(), d.summary().c_str());
      EXPECT_EQ(d.total(), 0) << describe_case(c) << ": " << d.summary();
      ++combos;
      failed += d.total() > 0 ? 1 : 0;
    }
  std::printf("[dual] %d of %d spec combinations identical to the CPU reference\n", combos - failed, combos);
}

// The recipes' backward operands on large tensors (several hundred tiles; 1008 rows leaves a partial
// tile for the tensor-scale ones), FP32 and BF16, with special values planted.
TEST(QuantDualCuda, MatchesCpuReferenceForRecipeOperandsOnLargeTensors) {
  const uint64_t seed = cudatest::test_seed();
  SCOPED_TRACE(cudatest::seed_note(seed));
  std::mt19937_64 g(seed);
  const QuantSource kAligned = QuantSource::kAligned;
  struct Named {
    const char* name;
    QuantSpec rows, cols;
    int64_t r, c;
  };
  const Named cases[] = {
      {"tetrajet Q1/Q6 (X, aligned X^T)", spec(OuterScale::kBlock128, Rounding::kRtn, 0),
       spec(OuterScale::kBlock128, Rounding::kSr, 16, false, kAligned), 1024, 2048},
      {"tetrajet Q3/Q5 (dY, dY^T)", spec(OuterScale::kBlock128, Rounding::kSr, 16),
       spec(OuterScale::kBlock128, Rounding::kSr, 16), 2048, 1024},
      {"nvidia Q1/Q6 (X, X^T rht16)", spec(OuterScale::kTensor, Rounding::kRtn, 0),
       spec(OuterScale::kTensor, Rounding::kRtn, 16), 1008, 2048},
      {"nvidia Q3/Q5 (dY, dY^T rht16)", spec(OuterScale::kTensor, Rounding::kSr, 0),
       spec(OuterScale::kTensor, Rounding::kSr, 16), 1008, 1536},
      {"tensor rows, aligned tensor cols", spec(OuterScale::kTensor, Rounding::kRtn, 0),
       spec(OuterScale::kTensor, Rounding::kSr, 16, false, kAligned), 1008, 1024},
      // The specialized kernel's tensor-scale pairs with partial tiles in both directions (T's scale rows
      // then are not 8-byte aligned), and its block128 pairs over odd tile counts.
      {"nvidia Q3/Q5, partial tiles", spec(OuterScale::kTensor, Rounding::kSr, 0),
       spec(OuterScale::kTensor, Rounding::kSr, 16), 1040, 1168},
      {"nvidia Q1/Q6, partial tiles", spec(OuterScale::kTensor, Rounding::kRtn, 0),
       spec(OuterScale::kTensor, Rounding::kRtn, 16), 272, 1040},
      {"tetrajet Q1/Q6, odd tiles", spec(OuterScale::kBlock128, Rounding::kRtn, 0),
       spec(OuterScale::kBlock128, Rounding::kSr, 16, false, kAligned), 384, 1152},
      {"tetrajet Q3/Q5, odd tiles", spec(OuterScale::kBlock128, Rounding::kSr, 16),
       spec(OuterScale::kBlock128, Rounding::kSr, 16), 640, 1408},
  };
  int variant = 1;
  for (const Named& n : cases)
    for (QuantIoType dtype : {QuantIoType::kF32, QuantIoType::kBF16}) {
      const DualCase c{n.rows, n.cols, dtype};
      const Diff d = run_dual(g, c, n.r, n.c, true, variant++);
      std::printf("[dual] %-34s [%lld x %lld] %-4s: %s\n", n.name, static_cast<long long>(n.r),
                  static_cast<long long>(n.c), cudatest::io_name(dtype), d.summary().c_str());
      EXPECT_EQ(d.total(), 0) << n.name << " " << cudatest::io_name(dtype) << ": " << d.summary();
    }
}

// Tile bands scaled by 2^-120, so that whole 128-blocks along either dimension hold values near and below
// FP32's normal range: block128 divisors p = s_in * s_out become subnormal or zero, the rare path of the
// specialized kernel's encoder (and of the reference's division), for every operand pair of the recipes.
TEST(QuantDualCuda, MatchesCpuReferenceWhereBlockDivisorsUnderflow) {
  const uint64_t seed = cudatest::test_seed();
  SCOPED_TRACE(cudatest::seed_note(seed));
  std::mt19937_64 g(seed);
  const QuantSource kAligned = QuantSource::kAligned;
  const DualCase cases[] = {
      {spec(OuterScale::kBlock128, Rounding::kRtn, 0),
       spec(OuterScale::kBlock128, Rounding::kSr, 16, false, kAligned), QuantIoType::kBF16},
      {spec(OuterScale::kBlock128, Rounding::kRtn, 0),
       spec(OuterScale::kBlock128, Rounding::kSr, 16, false, kAligned), QuantIoType::kF32},
      {spec(OuterScale::kBlock128, Rounding::kSr, 16), spec(OuterScale::kBlock128, Rounding::kSr, 16),
       QuantIoType::kBF16},
      {spec(OuterScale::kTensor, Rounding::kSr, 0), spec(OuterScale::kTensor, Rounding::kSr, 16),
       QuantIoType::kBF16},
  };
  const Rescale band{128, 256, 128, 256, std::ldexp(1.0f, -120)};
  int variant = 1;
  for (const DualCase& c : cases) {
    const Diff d = run_dual(g, c, 384, 512, false, variant++, band);
    std::printf("[dual] tiny bands %s: %s\n", describe_case(c).c_str(), d.summary().c_str());
    EXPECT_EQ(d.total(), 0) << describe_case(c) << ": " << d.summary();
  }
}

}  // namespace
}  // namespace fp4
