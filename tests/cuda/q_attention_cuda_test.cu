// Q-Attn on the GPU (nn/cuda/q_attention_cuda.h), both forms, against the CPU reference QAttentionCpu on
// the same BF16-representable inputs, seeds and call counter. Sliced form: the quantized Q^, K^ and the last
// slice's four backward operands (dS, dS^T, K^^T, Q^^T: their FP32 inputs re-quantized on the CPU) bit for
// bit; the backward's recomputed probabilities equal the forward's. Fused form: Q^, K^, every slice's K^^T
// and Q^^T, and the Q(dS), Q(dS^T) the kernel made from its own FP32 dS (the CPU quantizer on that dS, with
// the CPU's streams) bit for bit. Both: the output and the three gradients within stated tolerances (BF16
// probabilities in P V and P^T dO, BF16 outputs), the random bits follow the call counter; errors; and the
// CUDA engine training small models with attention.q_attn on (head_dim 32: sliced; 64: fused).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "model/cpu_engine.h"
#include "model/cuda/cuda_engine.h"
#include "nn/cuda/q_attention_cuda.h"
#include "nn/q_attention.h"
#include "numerics/quantize.h"
#include "ops/ops.h"
#include "optimizer_test_util.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

using cuda::bf16;
using testing::fresh_seed;

// Norm-wise relative tolerances against the CPU reference. Output and dV: P is rounded to BF16 for the two
// high-precision GEMMs and the results to BF16 (2^-9 relative per element). dQ, dK: the same random bits
// on both sides, so they differ only where the GPU's FP32 dS (BF16 GEMM inputs, another summation order)
// moves a value across a rounding decision, plus the BF16 output; one SR draw is several percent off the
// unquantized gradient, far outside this bound.
constexpr double kOutTol = 1e-2, kGradTol = 2e-2;

uint16_t bits_of(bf16 x) {
  uint16_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}
uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}

template <typename T>
std::vector<T> download(const T* p, size_t n) {
  std::vector<T> v(n);
  FP4_CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

double rel_err(const std::vector<float>& want, const std::vector<float>& got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = static_cast<double>(got[i]) - want[i];
    num += e * e;
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Equal bit patterns, the first difference reported.
template <typename T>
void expect_same_bits(const std::vector<T>& want, const std::vector<T>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    if (bits_of(want[i]) != bits_of(got[i])) {
      ADD_FAILURE() << what << ": element " << i << " differs (want " << static_cast<double>(want[i])
                    << ", got " << static_cast<double>(got[i]) << ")";
      return;
    }
}

// The device operand op equals the CPU quantization of its own FP32 input with spec and rnd: codes, scales,
// S_dec and the q * s_b values, bit for bit.
void expect_operand_matches_cpu(cuda::QAttnOperand& op, const QuantSpec& spec, const QuantRandomness& rnd,
                                const std::string& what) {
  const size_t count = static_cast<size_t>(op.rows * op.cols);
  const std::vector<float> input = download(op.input.data(), count);
  const Nvfp4Tensor want = quantize_nvfp4(input.data(), op.rows, op.cols, spec, rnd);
  EXPECT_EQ(want.codes, download(op.codes.data(), count / 2)) << what << " codes";
  EXPECT_EQ(want.scales, download(op.scales.data(), count / 16)) << what << " scales";
  expect_same_bits(want.outer_scales, download(op.outer.data(), 1), what + " S_dec");
  std::vector<uint16_t> bar(count);
  dequantize_bf16(want, bar.data(), false);
  const std::vector<bf16> got = download(op.bar.data(), count);
  std::vector<uint16_t> got_bits(count);
  for (size_t i = 0; i < count; ++i) got_bits[i] = bits_of(got[i]);
  EXPECT_EQ(bar, got_bits) << what << " q * s_b values";
}

float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16(x));
}

std::vector<float> bf16_normal(std::mt19937& rng, size_t n, float std) {
  std::normal_distribution<float> dist(0.0f, std);
  std::vector<float> v(n);
  for (auto& x : v) x = round_bf16(dist(rng));
  return v;
}

std::vector<float> to_float(const std::vector<bf16>& x) {
  std::vector<float> v(x.size());
  for (size_t i = 0; i < x.size(); ++i) v[i] = __bfloat162float(x[i]);
  return v;
}

// Columns [col, col + width) of the rows of a [rows x ld] BF16 matrix, as floats.
std::vector<float> columns(const std::vector<bf16>& m, int64_t rows, int ld, int col, int width) {
  std::vector<float> v(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < width; ++c)
      v[static_cast<size_t>(r * width + c)] = __bfloat162float(m[r * ld + col + c]);
  return v;
}

// Inputs in the engine's layout: fused QKV [n x 3d] and dO [n x d] on the device, the same values as floats.
struct Problem {
  AttnShape s;
  std::vector<float> q, k, v, dout;  // [n x d]
  DeviceBuffer<bf16> qkv, dout_dev, out, dqkv;
  int d() const { return s.width(); }

  Problem(const AttnShape& shape, std::mt19937& rng) : s(shape) {
    const int64_t n = s.rows();
    const size_t nd = static_cast<size_t>(n * d());
    q = bf16_normal(rng, nd, 1.5f);
    k = bf16_normal(rng, nd, 1.5f);
    v = bf16_normal(rng, nd, 1.0f);
    dout = bf16_normal(rng, nd, 1.0f);
    std::vector<bf16> host(static_cast<size_t>(n) * 3 * d()), dh(nd);
    for (int64_t r = 0; r < n; ++r)
      for (int c = 0; c < d(); ++c) {
        const size_t i = static_cast<size_t>(r * d() + c);
        host[static_cast<size_t>(r * 3 * d() + c)] = __float2bfloat16(q[i]);
        host[static_cast<size_t>(r * 3 * d() + d() + c)] = __float2bfloat16(k[i]);
        host[static_cast<size_t>(r * 3 * d() + 2 * d() + c)] = __float2bfloat16(v[i]);
        dh[i] = __float2bfloat16(dout[i]);
      }
    qkv = DeviceBuffer<bf16>(host.size());
    qkv.upload(host.data(), host.size());
    dout_dev = DeviceBuffer<bf16>(nd);
    dout_dev.upload(dh.data(), nd);
    out = DeviceBuffer<bf16>(nd);
    dqkv = DeviceBuffer<bf16>(host.size());
  }

  DeviceBuffer<float> lse{static_cast<size_t>(s.rows()) * s.heads};

  void forward(cuda::QAttentionCuda& qa, const QuantContext& ctx, cuda::QAttnWorkspace& ws,
               cuda::GemmRunner& gemm) {
    const bf16* p = qkv.data();
    qa.forward(p, p + d(), p + 2 * d(), 3 * d(), out.data(), d(), lse.data(), s, ctx, ws, gemm, nullptr);
  }
  void backward(cuda::QAttentionCuda& qa, cuda::QAttnWorkspace& ws, cuda::GemmRunner& gemm) {
    bf16* g = dqkv.data();
    qa.backward(qkv.data() + 2 * d(), 3 * d(), out.data(), lse.data(), dout_dev.data(), d(), g, g + d(),
                g + 2 * d(), 3 * d(), s, ws, gemm, nullptr);
  }
};

// The CPU reference's results for pr's inputs, and the norm-wise errors of the device's against them.
struct CpuResults {
  std::vector<float> out, probs, dq, dk, dv;
};
CpuResults run_cpu(QAttentionCpu& cpu, const Problem& pr, const QuantContext& ctx) {
  const AttnShape& s = pr.s;
  const size_t nd = static_cast<size_t>(s.rows() * pr.d());
  CpuResults r{std::vector<float>(nd), std::vector<float>(static_cast<size_t>(s.b) * s.heads * s.t * s.t),
               std::vector<float>(nd), std::vector<float>(nd), std::vector<float>(nd)};
  cpu.forward(r.out.data(), pr.d(), r.probs.data(), pr.q.data(), pr.k.data(), pr.v.data(), pr.d(), s, ctx);
  cpu.backward(r.dq.data(), r.dk.data(), r.dv.data(), pr.d(), pr.dout.data(), pr.d(), r.probs.data(),
               pr.v.data(), pr.d(), s);
  return r;
}

// The exact gradients of the quantized forward (dS K^, dS^T Q^ with FP32 operands): what one SR draw
// estimates.
struct ExactGrads {
  std::vector<float> dq, dk;
};
ExactGrads exact_grads(const Problem& pr, const CpuResults& cpu_res, const QAttentionCpu& cpu) {
  const AttnShape& s = pr.s;
  const int d = pr.d();
  const size_t nd = static_cast<size_t>(s.rows() * d);
  ExactGrads e{std::vector<float>(nd), std::vector<float>(nd)};
  std::vector<float> ev(nd), scratch(static_cast<size_t>(s.t) * s.t);
  cpu::attention_backward(e.dq.data(), d, e.dk.data(), d, ev.data(), d, scratch.data(), pr.dout.data(), d,
                          cpu_res.probs.data(), cpu.q_hat().data(), d, cpu.k_hat().data(), d, pr.v.data(), d,
                          s.b, s.t, s.heads, s.head_dim);
  return e;
}

// Output and gradients of pr (after a backward) against the CPU's, and dQ, dK visibly quantized (one SR draw
// is far from the exact gradient of the quantized forward). Sliced form: dQ, dK within kGradTol of the CPU's
// (the same FP32 dS up to summation order, so the same SR decisions almost everywhere). Fused form: its dS
// differs from the CPU's in the last bits (ex2.approx, Delta from the BF16 output), and a stochastic rounding
// turns an input change delta into a flipped decision with probability delta / step, so the two draws
// differ by about sqrt(delta * step), far more than delta: bounded instead by half the CPU draw's own
// distance to the exact gradient (two independent draws would differ by about 1.4 times that).
void expect_results_near_cpu(Problem& pr, const CpuResults& want, const QAttentionCpu& cpu, const char* form,
                             bool fused) {
  const AttnShape& s = pr.s;
  const int64_t n = s.rows();
  const int d = pr.d();
  const size_t nd = static_cast<size_t>(n * d);
  const std::vector<bf16> g = download(pr.dqkv.data(), static_cast<size_t>(n) * 3 * d);
  const std::vector<float> got_dq = columns(g, n, 3 * d, 0, d), got_dk = columns(g, n, 3 * d, d, d);
  const double e_out = rel_err(want.out, to_float(download(pr.out.data(), nd)));
  const double e_dq = rel_err(want.dq, got_dq), e_dk = rel_err(want.dk, got_dk);
  const double e_dv = rel_err(want.dv, columns(g, n, 3 * d, 2 * d, d));
  const ExactGrads exact = exact_grads(pr, want, cpu);
  const double noise_dq = rel_err(exact.dq, want.dq), noise_dk = rel_err(exact.dk, want.dk);
  std::cout << form << " b " << s.b << " t " << s.t << " heads " << s.heads << " hd " << s.head_dim
            << ": rel err out " << e_out << " dq " << e_dq << " dk " << e_dk << " dv " << e_dv
            << " (CPU draw vs exact: dq " << noise_dq << " dk " << noise_dk << ")\n";
  EXPECT_LT(e_out, kOutTol);
  EXPECT_LT(e_dv, kOutTol);
  if (fused && s.t >= 16) {
    EXPECT_LT(e_dq, 0.5 * noise_dq);
    EXPECT_LT(e_dk, 0.5 * noise_dk);
  } else {
    EXPECT_LT(e_dq, kGradTol);
    EXPECT_LT(e_dk, kGradTol);
  }
  if (s.t >= 16) {
    EXPECT_GT(rel_err(exact.dq, got_dq), 0.01) << "dQ looks unquantized";
    EXPECT_GT(rel_err(exact.dk, got_dk), 0.01) << "dK looks unquantized";
  }
}

class QAttnCudaVsCpu : public ::testing::TestWithParam<std::tuple<int, int, int, int>> {};

TEST_P(QAttnCudaVsCpu, QuantizedOperandsBitIdenticalAndResultsWithinTolerance) {
  const auto [b, t, heads, hd] = GetParam();
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", b " + std::to_string(b) + " t " + std::to_string(t) +
               " heads " + std::to_string(heads) + " head_dim " + std::to_string(hd));
  std::mt19937 rng(seed);
  const AttnShape s{b, t, heads, hd};
  Problem pr(s, rng);
  const int64_t n = s.rows();
  const int d = s.width();
  const size_t nd = static_cast<size_t>(n * d);
  const int layer = 5;
  QuantContext ctx;
  ctx.seed = seed;
  ctx.call = 7;

  cuda::GemmRunner gemm;
  cuda::QAttnWorkspace ws;
  cuda::QAttentionCuda qa(layer, cuda::QAttnKernel::kSliced);
  pr.forward(qa, ctx, ws, gemm);
  const size_t tt = static_cast<size_t>(t) * ws.tp;
  const std::vector<bf16> fwd_probs = download(ws.probs_bf16.data(), tt);  // the last slice's
  pr.backward(qa, ws, gemm);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());

  QAttentionCpu cpu(layer);
  std::vector<float> out(nd), probs(static_cast<size_t>(b) * heads * t * t), dq(nd), dk(nd), dv(nd);
  cpu.forward(out.data(), d, probs.data(), pr.q.data(), pr.k.data(), pr.v.data(), d, s, ctx);
  cpu.backward(dq.data(), dk.data(), dv.data(), d, pr.dout.data(), d, probs.data(), pr.v.data(), d, s);

  // Q^ and K^: the packed forward operands dequantize to the CPU's views bit for bit.
  for (auto [view, want, name] :
       {std::tuple{qa.q_quantized(), &cpu.q_hat(), "Q^"}, std::tuple{qa.k_quantized(), &cpu.k_hat(), "K^"}}) {
    DeviceBuffer<float> deq(nd);
    dequantize_nvfp4_cuda(view, DequantOutput{deq.data(), QuantIoType::kF32, true}, nullptr);
    expect_same_bits(*want, download(deq.data(), nd), name);
  }
  expect_same_bits(cpu.q_hat(), download(ws.q_hat.data(), nd), "backward's Q^");
  expect_same_bits(cpu.k_hat(), download(ws.k_hat.data(), nd), "backward's K^");

  // The backward recomputed exactly the forward's probabilities.
  const std::vector<bf16> bwd_probs = download(ws.probs_bf16.data(), tt);
  std::vector<uint16_t> fb(tt), bb(tt);
  for (size_t i = 0; i < tt; ++i) {
    fb[i] = bits_of(fwd_probs[i]);
    bb[i] = bits_of(bwd_probs[i]);
  }
  EXPECT_EQ(fb, bb) << "probabilities of the backward's recomputation";

  // The last slice's backward operands, laid out as the CPU's: dS^T is dS transposed, K^^T and Q^^T are the
  // CPU's views transposed (zero padding to tp); each quantization equals the CPU quantizer's.
  const int tp = ws.tp, last = b * heads - 1, bl = b - 1, hl = heads - 1;
  const std::vector<float> ds = download(ws.ds.input.data(), tt), dst = download(ws.dst.input.data(), tt);
  const std::vector<float> kt = download(ws.kt.input.data(), static_cast<size_t>(hd) * tp);
  const std::vector<float> qt = download(ws.qt.input.data(), static_cast<size_t>(hd) * tp);
  bool layout_ok = true;
  for (int i = 0; i < t && layout_ok; ++i)
    for (int j = 0; j < tp; ++j) {
      const float want_ds = j < t ? ds[static_cast<size_t>(i) * tp + j] : 0.0f;
      if (j > i && ds[static_cast<size_t>(i) * tp + j] != 0.0f) layout_ok = false;  // the causal zeros
      if (j < t && bits_of(dst[static_cast<size_t>(j) * tp + i]) != bits_of(want_ds)) layout_ok = false;
    }
  for (int c = 0; c < hd && layout_ok; ++c)
    for (int j = 0; j < tp; ++j) {
      const size_t src = (static_cast<size_t>(bl) * t + j) * d + static_cast<size_t>(hl) * hd + c;
      const float want_k = j < t ? cpu.k_hat()[src] : 0.0f, want_q = j < t ? cpu.q_hat()[src] : 0.0f;
      if (bits_of(kt[static_cast<size_t>(c) * tp + j]) != bits_of(want_k) ||
          bits_of(qt[static_cast<size_t>(c) * tp + j]) != bits_of(want_q))
        layout_ok = false;
    }
  EXPECT_TRUE(layout_ok) << "dS^T, K^^T or Q^^T is not the transposed, zero-padded operand";
  const QuantSpec sr = q_attn_spec(Rounding::kSr);
  expect_operand_matches_cpu(ws.ds, sr, q_attn_randomness(ctx, layer, last, QAttnPurpose::kSrDsRows), "dS");
  expect_operand_matches_cpu(ws.dst, sr, q_attn_randomness(ctx, layer, last, QAttnPurpose::kSrDsCols),
                             "dS^T");
  expect_operand_matches_cpu(ws.kt, sr, q_attn_randomness(ctx, layer, last, QAttnPurpose::kSrKt), "K^^T");
  expect_operand_matches_cpu(ws.qt, sr, q_attn_randomness(ctx, layer, last, QAttnPurpose::kSrQt), "Q^^T");

  expect_results_near_cpu(pr, CpuResults{out, probs, dq, dk, dv}, cpu, "sliced", false);
}

// (b, t, heads, head_dim): odd and short sequences, both fused-kernel head sizes and the tiny model's 32.
INSTANTIATE_TEST_SUITE_P(Shapes, QAttnCudaVsCpu,
                         ::testing::Values(std::tuple{2, 37, 3, 64}, std::tuple{1, 1, 2, 128},
                                           std::tuple{2, 21, 2, 32}, std::tuple{1, 130, 2, 128},
                                           std::tuple{3, 16, 1, 64}));

class QAttnFusedVsCpu : public ::testing::TestWithParam<std::tuple<int, int, int, int>> {};

TEST_P(QAttnFusedVsCpu, QuantizedOperandsBitIdenticalAndResultsWithinTolerance) {
  const auto [b, t, heads, hd] = GetParam();
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", b " + std::to_string(b) + " t " + std::to_string(t) +
               " heads " + std::to_string(heads) + " head_dim " + std::to_string(hd));
  std::mt19937 rng(seed);
  const AttnShape s{b, t, heads, hd};
  Problem pr(s, rng);
  const int64_t n = s.rows();
  const int d = s.width(), tp = (t + 15) / 16 * 16, slices = b * heads;
  const size_t nd = static_cast<size_t>(n * d), per_slice = static_cast<size_t>(t) * tp;
  const int layer = 9;
  QuantContext ctx;
  ctx.seed = seed;
  ctx.call = 11;

  cuda::GemmRunner gemm;
  cuda::QAttnWorkspace ws;
  cuda::QAttentionCuda qa(layer, cuda::QAttnKernel::kFused);
  DeviceBuffer<float> dbg_ds(per_slice * slices);
  DeviceBuffer<bf16> dbg_rows(per_slice * slices), dbg_cols(per_slice * slices);
  FP4_CUDA_CHECK(cudaMemset(dbg_ds.data(), 0, dbg_ds.bytes()));
  FP4_CUDA_CHECK(cudaMemset(dbg_rows.data(), 0, dbg_rows.bytes()));
  FP4_CUDA_CHECK(cudaMemset(dbg_cols.data(), 0, dbg_cols.bytes()));
  qa.set_fused_debug({dbg_ds.data(), dbg_rows.data(), dbg_cols.data()});
  pr.forward(qa, ctx, ws, gemm);
  pr.backward(qa, ws, gemm);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
  ASSERT_TRUE(ws.fused);

  QAttentionCpu cpu(layer);
  const CpuResults want = run_cpu(cpu, pr, ctx);
  for (auto [view, ref, name] :
       {std::tuple{qa.q_quantized(), &cpu.q_hat(), "Q^"}, std::tuple{qa.k_quantized(), &cpu.k_hat(), "K^"}}) {
    DeviceBuffer<float> deq(nd);
    dequantize_nvfp4_cuda(view, DequantOutput{deq.data(), QuantIoType::kF32, true}, nullptr);
    expect_same_bits(*ref, download(deq.data(), nd), name);
  }

  // Every slice's K^^T and Q^^T: the CPU quantizer on the transposed, zero-padded views with its streams.
  const QuantSpec sr = q_attn_spec(Rounding::kSr);
  const std::vector<bf16> kt_bar = download(ws.kt_bar.data(), nd), qt_bar = download(ws.qt_bar.data(), nd);
  const std::vector<float> sdec_kt = download(ws.sdec_kt.data(), static_cast<size_t>(slices)),
                           sdec_qt = download(ws.sdec_qt.data(), static_cast<size_t>(slices));
  for (int slice = 0; slice < slices; ++slice) {
    const int bi = slice / heads, h = slice % heads;
    for (auto [hat, bar, sdec, purpose, name] :
         {std::tuple{&cpu.k_hat(), &kt_bar, &sdec_kt, QAttnPurpose::kSrKt, "K^^T"},
          std::tuple{&cpu.q_hat(), &qt_bar, &sdec_qt, QAttnPurpose::kSrQt, "Q^^T"}}) {
      std::vector<float> op(static_cast<size_t>(hd) * tp, 0.0f);
      for (int c = 0; c < hd; ++c)
        for (int j = 0; j < t; ++j)
          op[static_cast<size_t>(c) * tp + j] = (*hat)[(static_cast<size_t>(bi) * t + j) * d + h * hd + c];
      const Nvfp4Tensor q =
          quantize_nvfp4(op.data(), hd, tp, sr, q_attn_randomness(ctx, layer, slice, purpose));
      std::vector<uint16_t> ref(op.size());
      dequantize_bf16(q, ref.data(), false);
      bool same = bits_of(q.outer_scales[0]) == bits_of((*sdec)[static_cast<size_t>(slice)]);
      for (int c = 0; c < hd && same; ++c)
        for (int j = 0; j < t && same; ++j)
          same = ref[static_cast<size_t>(c) * tp + j] ==
                 bits_of((*bar)[(static_cast<size_t>(bi) * t + j) * d + h * hd + c]);
      EXPECT_TRUE(same) << name << " of slice " << slice << " differs from the CPU quantizer's";
    }
  }

  // Q(dS) and Q(dS^T) as the kernel made them, against the CPU quantizer on the kernel's own FP32 dS.
  const std::vector<float> ds_all = download(dbg_ds.data(), per_slice * slices);
  const std::vector<bf16> rows_all = download(dbg_rows.data(), per_slice * slices),
                          cols_all = download(dbg_cols.data(), per_slice * slices);
  double ds_norm = 0;
  for (int slice = 0; slice < slices; ++slice) {
    const size_t off = static_cast<size_t>(slice) * per_slice;
    std::vector<float> ds(ds_all.begin() + off, ds_all.begin() + off + per_slice), dst(per_slice, 0.0f);
    for (int i = 0; i < t; ++i)
      for (int j = 0; j < t; ++j) {
        dst[static_cast<size_t>(j) * tp + i] = ds[static_cast<size_t>(i) * tp + j];
        ds_norm +=
            static_cast<double>(ds[static_cast<size_t>(i) * tp + j]) * ds[static_cast<size_t>(i) * tp + j];
        if (j > i && ds[static_cast<size_t>(i) * tp + j] != 0.0f) ADD_FAILURE() << "dS above the diagonal";
      }
    for (auto [input, got_all, purpose, name] :
         {std::tuple{&ds, &rows_all, QAttnPurpose::kSrDsRows, "Q(dS)"},
          std::tuple{&dst, &cols_all, QAttnPurpose::kSrDsCols, "Q(dS^T)"}}) {
      const Nvfp4Tensor q =
          quantize_nvfp4(input->data(), t, tp, sr, q_attn_randomness(ctx, layer, slice, purpose));
      std::vector<uint16_t> ref(per_slice);
      dequantize_bf16(q, ref.data(), false);
      size_t first_diff = per_slice;
      for (int i = 0; i < t && first_diff == per_slice; ++i)
        for (int j = 0; j < t; ++j) {  // the kernel writes columns below t; the padding is zero on both sides
          const size_t at = static_cast<size_t>(i) * tp + j;
          if (ref[at] != bits_of((*got_all)[off + at])) {
            first_diff = at;
            break;
          }
        }
      EXPECT_EQ(first_diff, per_slice) << name << " of slice " << slice << " differs at row "
                                       << first_diff / tp << ", column " << first_diff % tp;
    }
  }
  if (t >= 2) EXPECT_GT(ds_norm, 0.0) << "the debug dS was never written";

  expect_results_near_cpu(pr, want, cpu, "fused", true);
}

// (b, t, heads, head_dim): one token, lengths below, at and across the kernels' 64- and 128-row tiles.
INSTANTIATE_TEST_SUITE_P(Shapes, QAttnFusedVsCpu,
                         ::testing::Values(std::tuple{2, 37, 3, 64}, std::tuple{1, 1, 2, 128},
                                           std::tuple{1, 130, 2, 128}, std::tuple{3, 16, 1, 64},
                                           std::tuple{1, 200, 2, 64}, std::tuple{2, 128, 2, 64}));

// The fused backward is an unbiased estimate of the exact gradient of the quantized forward: the mean of
// dQ, dK over n call counters approaches s dS K^, s dS^T Q^ (the CPU's FP32 products) at about the 1/sqrt(n)
// rate, down to the floor of the fused dS's last-bit differences.
TEST(QAttnFused, MeanOverCallsApproachesTheExactGradientOfTheQuantizedForward) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const AttnShape s{2, 45, 2, 64};
  Problem pr(s, rng);
  const int64_t n = s.rows();
  const int d = s.width();
  const size_t nd = static_cast<size_t>(n * d);
  QuantContext ctx;
  ctx.seed = seed;
  QAttentionCpu cpu(3);
  const CpuResults want = run_cpu(cpu, pr, ctx);
  const ExactGrads exact = exact_grads(pr, want, cpu);
  cuda::GemmRunner gemm;
  cuda::QAttnWorkspace ws;
  cuda::QAttentionCuda qa(3, cuda::QAttnKernel::kFused);
  constexpr int kCalls = 256;
  std::vector<double> sum_dq(nd, 0.0), sum_dk(nd, 0.0);
  double one_dq = 0, one_dk = 0, at16_dq = 0;
  for (int call = 1; call <= kCalls; ++call) {
    ctx.call = static_cast<uint64_t>(call);
    pr.forward(qa, ctx, ws, gemm);
    pr.backward(qa, ws, gemm);
    const std::vector<bf16> g = download(pr.dqkv.data(), static_cast<size_t>(n) * 3 * d);
    const std::vector<float> dq = columns(g, n, 3 * d, 0, d), dk = columns(g, n, 3 * d, d, d);
    for (size_t i = 0; i < nd; ++i) {
      sum_dq[i] += dq[i];
      sum_dk[i] += dk[i];
    }
    auto mean_err = [&](const std::vector<double>& sum, const std::vector<float>& ref) {
      std::vector<float> mean(nd);
      for (size_t i = 0; i < nd; ++i) mean[i] = static_cast<float>(sum[i] / call);
      return rel_err(ref, mean);
    };
    if (call == 1) {
      one_dq = mean_err(sum_dq, exact.dq);
      one_dk = mean_err(sum_dk, exact.dk);
    }
    if (call == 16) at16_dq = mean_err(sum_dq, exact.dq);
    if (call == kCalls) {
      const double all_dq = mean_err(sum_dq, exact.dq), all_dk = mean_err(sum_dk, exact.dk);
      std::cout << "fused Q-Attn: mean over calls vs exact, dq 1: " << one_dq << ", 16: " << at16_dq << ", "
                << kCalls << ": " << all_dq << "; dk 1: " << one_dk << ", " << kCalls << ": " << all_dk
                << "\n";
      // 1/sqrt(256) = 1/16 of one draw's error when unbiased; a bias would stall it.
      EXPECT_LT(all_dq, one_dq / 8);
      EXPECT_LT(all_dk, one_dk / 8);
      EXPECT_LT(at16_dq, one_dq / 2.5);
    }
  }
}

// The same call counter gives the same bits (dK, dV; dQ within the run-to-run spread of the fused kernel's
// float atomics), another counter other bits, in both forms.
class QAttnCudaForms : public ::testing::TestWithParam<cuda::QAttnKernel> {};

TEST_P(QAttnCudaForms, SameCallSameBitsOtherCallOtherBits) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const AttnShape s{2, 33, 2, 64};
  Problem pr(s, rng);
  cuda::GemmRunner gemm;
  cuda::QAttnWorkspace ws;
  cuda::QAttentionCuda qa(0, GetParam());
  const int64_t n = s.rows();
  const int d = s.width();
  auto grads = [&](uint64_t call) {
    QuantContext ctx;
    ctx.seed = seed;
    ctx.call = call;
    pr.forward(qa, ctx, ws, gemm);
    pr.backward(qa, ws, gemm);
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    return download(pr.dqkv.data(), pr.dqkv.size());
  };
  auto bits = [&](const std::vector<bf16>& g, int part) {
    std::vector<uint16_t> r;
    for (int64_t row = 0; row < n; ++row)
      for (int c = 0; c < d; ++c) r.push_back(bits_of(g[static_cast<size_t>(row * 3 * d + part * d + c)]));
    return r;
  };
  const auto a = grads(1), again = grads(1), other = grads(2);
  EXPECT_EQ(bits(a, 1), bits(again, 1)) << "dK";
  EXPECT_EQ(bits(a, 2), bits(again, 2)) << "dV";
  if (GetParam() == cuda::QAttnKernel::kSliced)
    EXPECT_EQ(bits(a, 0), bits(again, 0)) << "dQ";
  else
    EXPECT_LT(rel_err(columns(a, n, 3 * d, 0, d), columns(again, n, 3 * d, 0, d)), 1e-2) << "dQ";
  EXPECT_NE(bits(a, 1), bits(other, 1)) << "dK with another call counter";
  EXPECT_NE(bits(a, 0), bits(other, 0)) << "dQ with another call counter";
}

INSTANTIATE_TEST_SUITE_P(Forms, QAttnCudaForms,
                         ::testing::Values(cuda::QAttnKernel::kFused, cuda::QAttnKernel::kSliced));

TEST(QAttnCuda, ShapeErrorsAreNamed) {
  cuda::GemmRunner gemm;
  cuda::QAttnWorkspace ws;
  cuda::QAttentionCuda qa(0);
  DeviceBuffer<bf16> buf(4096);
  const bf16* p = buf.data();
  const std::string hd8 = testing::error_of([&] {
    qa.forward(p, p, p, 32, buf.data(), 32, nullptr, AttnShape{1, 4, 4, 8}, QuantContext{}, ws, gemm,
               nullptr);
  });
  EXPECT_NE(hd8.find("head_dim 8 must be a multiple of 16"), std::string::npos) << hd8;
  const std::string no_fwd = testing::error_of([&] {
    qa.backward(p, 32, p, nullptr, p, 32, buf.data(), buf.data(), buf.data(), 32, AttnShape{1, 4, 2, 16}, ws,
                gemm, nullptr);
  });
  EXPECT_NE(no_fwd.find("backward without a matching forward"), std::string::npos) << no_fwd;
  const std::string stride = testing::error_of([&] {
    qa.forward(p, p, p, 20, buf.data(), 32, nullptr, AttnShape{1, 4, 1, 16}, QuantContext{}, ws, gemm,
               nullptr);
  });
  EXPECT_NE(stride.find("row strides (20, 32) must be multiples of 8"), std::string::npos) << stride;
  EXPECT_NE(
      testing::error_of([] { cuda::QAttentionCuda bad(256); }).find("does not fit the random-stream id"),
      std::string::npos);
  cuda::QAttentionCuda fused(0, cuda::QAttnKernel::kFused);
  DeviceBuffer<float> lse(64);
  const std::string hd32 = testing::error_of([&] {
    fused.forward(p, p, p, 32, buf.data(), 32, lse.data(), AttnShape{1, 4, 1, 32}, QuantContext{}, ws, gemm,
                  nullptr);
  });
  EXPECT_NE(hd32.find("the fused form takes head_dim 64 or 128, not 32"), std::string::npos) << hd32;
  cuda::QAttentionCuda any(0);
  const std::string no_lse = testing::error_of([&] {
    any.forward(p, p, p, 64, buf.data(), 64, nullptr, AttnShape{1, 4, 1, 64}, QuantContext{}, ws, gemm,
                nullptr);
  });
  EXPECT_NE(no_lse.find("the fused form needs the lse buffer"), std::string::npos) << no_lse;
}

// The CUDA engine trains with attention.q_attn on: the loss falls, the first step's loss equals the CPU
// engine's (same weights, same Q-Attn) within the engines' usual bound, and the switch changes the attention
// without changing the model.
TEST(QAttnCudaEngine, ModelsTrainWithQAttnAndStartAtTheCpuLoss) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // tiny: head_dim 32; small64: head_dim 64. t not a multiple of 16; block128 linears need b*t % 128 == 0.
  // loss_tol: the CPU-engine bounds of engine_test.cu's CudaEngineVsCpu (BF16 activations; FP4 decisions).
  for (const auto& [model, base, b, t, loss_tol] :
       {std::tuple{"tiny", "bf16", 4, 63, 1e-2}, std::tuple{"small64", "bf16", 2, 77, 1e-2},
        std::tuple{"small64", "tetrajet-v2-base", 16, 40, 2e-2}}) {
    SCOPED_TRACE(std::string(model) + " " + base);
    const ModelConfig cfg = std::string(model) == "tiny" ? model_preset("tiny") : testing::small64_config();
    const Recipe recipe = load_recipe(base, {"attention.q_attn=true"});
    auto gpu = make_cuda_engine(cfg, recipe, seed);
    auto cpu = make_cpu_engine(cfg, recipe, seed);
    auto plain = make_cuda_engine(cfg, load_recipe(base), seed);
    const std::vector<Batch> mb = {testing::next_token_batch(cfg, b, t, seed)};
    StepHyper hyper;
    hyper.lr = 3e-3f;
    const double cpu_first = cpu->train_step(mb, hyper).loss;
    std::vector<double> l;
    double plain_third = 0;
    for (int step = 1; step <= 20; ++step) {
      const StepStats st = gpu->train_step(mb, hyper);
      ASSERT_TRUE(std::isfinite(st.loss)) << "step " << step;
      l.push_back(st.loss);
      if (step <= 3) plain_third = plain->train_step(mb, hyper).loss;
    }
    std::cout << model << " " << base << " + q_attn on CUDA: loss " << l.front() << " -> " << l.back()
              << " (CPU first step " << cpu_first << ", plain attention step 3 " << plain_third << " vs "
              << l[2] << ")\n";
    EXPECT_LT(l.back(), l.front() - 1.0);
    EXPECT_NEAR(l.front(), cpu_first, loss_tol * cpu_first);
    EXPECT_NE(l[2], plain_third);
    EXPECT_LT(std::abs(l[2] - plain_third), 0.05 * plain_third);
  }
}

}  // namespace
}  // namespace fp4
