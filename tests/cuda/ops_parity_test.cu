// Parity of every CUDA op with its CPU reference, one table (kRows below): each row names the kernel, the
// CPU function it must match and, per output, the bound it is held to: 0 means bit for bit, otherwise a
// norm-wise relative error (a relative error for scalars, an absolute one where the row says so). Each run
// draws fresh random inputs (the seed is printed; FP4_TEST_SEED replays one) over the row's shapes, odd
// ones included. Inputs of BF16 kernels are rounded to BF16 first, so both sides see the same values; the
// BF16 bounds are sized for BF16 outputs (2^-9 relative rounding per element). Quantization is bit-exact.
//
// Adding a kernel: write its run_<op>(Parity&, std::mt19937&) next to the others and add a row
// (docs/ARCHITECTURE.md, "Adding a kernel").
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "cuda_test_util.h"
#include "numerics/formats.h"
#include "numerics/quantize.h"
#include "ops/cuda/attention/causal_sdpa_cuda.h"
#include "ops/cuda/cross_entropy_cuda.h"
#include "ops/cuda/elementwise_cuda.h"
#include "ops/cuda/embedding_cuda.h"
#include "ops/cuda/gemm_cublaslt.h"
#include "ops/cuda/gemm_f32_cublaslt.h"
#include "ops/cuda/quant/quantize_cuda.h"
#include "ops/cuda/rmsnorm_cuda.h"
#include "ops/cuda/rope_cuda.h"
#include "ops/cuda/swiglu_cuda.h"
#include "ops/ops.h"
#include "optim/cuda/adamw_cuda.h"
#include "quant_test_util.h"

namespace fp4 {
namespace {

using namespace cudatest;  // NOLINT: the test helpers
using cuda::bf16;

struct ParityRow;

// The comparisons of one row, each held to the row's bound for that output.
class Parity {
 public:
  explicit Parity(const ParityRow& row) : row_(row) {}

  // A vector output: bit for bit when its bound is 0, else norm-wise relative error below the bound.
  void near(const std::string& output, const std::vector<float>& got, const std::vector<float>& want);
  // A scalar output: |got - want| <= bound * |want| (bit for bit when the bound is 0).
  void scalar(const std::string& output, double got, double want);
  // A scalar output held to an absolute bound.
  void absolute(const std::string& output, double got, double want);
  // A quantized output: the mismatch count of codes, scales, outer scales, non-finite counts and
  // dequantized values (cudatest::Diff) must be 0; the bound must be 0.
  void quantized(const std::string& output, const Diff& diff);

 private:
  double bound(const std::string& output) const;
  const ParityRow& row_;
};

struct ParityRow {
  const char* op;                                      // the CUDA entry points
  const char* reference;                               // the CPU functions they must match
  std::vector<std::pair<std::string, double>> bounds;  // per output; 0 = bit for bit
  void (*run)(Parity&, std::mt19937&);
};

double Parity::bound(const std::string& output) const {
  for (const auto& [name, b] : row_.bounds)
    if (name == output) return b;
  ADD_FAILURE() << row_.op << ": output '" << output << "' has no bound in its row";
  return 0;
}

void Parity::near(const std::string& output, const std::vector<float>& got, const std::vector<float>& want) {
  const double b = bound(output);
  ASSERT_EQ(got.size(), want.size()) << row_.op << " " << output;
  if (b == 0) {
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && differ++ == 0) first = i;
    EXPECT_EQ(differ, 0u) << row_.op << " " << output << ": " << differ << " of " << got.size()
                          << " values differ from " << row_.reference << ", first at " << first << " (got "
                          << (differ ? got[first] : 0.f) << ", want " << (differ ? want[first] : 0.f) << ")";
    return;
  }
  const double e = rel_err(got, want);
  EXPECT_LT(e, b) << row_.op << " " << output << ": relative error " << e << " against " << row_.reference
                  << " (bound " << b << ")";
}

void Parity::scalar(const std::string& output, double got, double want) {
  const double b = bound(output);
  if (b == 0) {
    EXPECT_EQ(got, want) << row_.op << " " << output;
    return;
  }
  EXPECT_LE(std::fabs(got - want), b * std::fabs(want))
      << row_.op << " " << output << ": got " << got << ", " << row_.reference << " gives " << want
      << " (bound " << b << " relative)";
}

void Parity::absolute(const std::string& output, double got, double want) {
  const double b = bound(output);
  EXPECT_LE(std::fabs(got - want), b) << row_.op << " " << output << ": got " << got << ", " << row_.reference
                                      << " gives " << want << " (bound " << b << " absolute)";
}

void Parity::quantized(const std::string& output, const Diff& diff) {
  EXPECT_EQ(bound(output), 0) << row_.op << " " << output << ": quantization is held bit for bit";
  EXPECT_EQ(diff.total(), 0) << row_.op << " " << output << " against " << row_.reference << ": "
                             << diff.summary();
}

// ---------------------------------------------------------------- the rows' runs
// ---------------------------------------------------------------- GEMM

// Formerly CudaGemm.MatchesCpuGemmForEveryTransposeAndOutputType in engine_test.cu.
void run_gemm(Parity& par, std::mt19937& rng) {
  cuda::GemmRunner runner;
  struct Shape {
    int m, n, k;
  };
  for (const Shape s : {Shape{21, 40, 24}, Shape{64, 48, 200}, Shape{1, 72, 16}, Shape{130, 8, 31}}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        SCOPED_TRACE("m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
                     " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
        // Stored shapes with padded row strides (the padding holds garbage the GEMM must not read).
        const int a_rows = ta ? s.k : s.m, a_cols = ta ? s.m : s.k, lda = round_up8(a_cols) + 8;
        const int b_rows = tb ? s.n : s.k, b_cols = tb ? s.k : s.n, ldb = round_up8(b_cols) + 8;
        const int ldc = round_up8(s.n) + 8;
        const auto a = rounded(normal(rng, static_cast<size_t>(a_rows) * lda));
        const auto b = rounded(normal(rng, static_cast<size_t>(b_rows) * ldb));
        const auto c_in = normal(rng, static_cast<size_t>(s.m) * ldc);
        const float alpha = 0.75f, beta = 0.5f;
        std::vector<float> want = c_in;
        cpu::gemm(ta, tb, s.m, s.n, s.k, alpha, a.data(), lda, b.data(), ldb, beta, want.data(), ldc);
        Dev<bf16> da(to_bf16(a)), db(to_bf16(b));
        Dev<float> dc_in(c_in), dc(std::vector<float>(c_in.size(), 0.0f));
        runner.gemm(ta, tb, s.m, s.n, s.k, alpha, da.p(), lda, db.p(), ldb, beta, dc.p(), ldc, nullptr,
                    dc_in.p());
        par.near("C (FP32)", columns(dc.get(), s.m, ldc, 0, s.n), columns(want, s.m, ldc, 0, s.n));
        EXPECT_EQ(dc_in.get(), c_in);  // C_in is only read

        std::vector<float> want0(c_in.size(), 0.0f);
        cpu::gemm(ta, tb, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, want0.data(), ldc);
        Dev<bf16> dc16(std::vector<bf16>(c_in.size()));
        runner.gemm(ta, tb, s.m, s.n, s.k, 1.0f, da.p(), lda, db.p(), ldb, 0.0f, dc16.p(), ldc, nullptr);
        par.near("C (BF16)", columns(to_f32(dc16.get()), s.m, ldc, 0, s.n), columns(want0, s.m, ldc, 0, s.n));
      }
    }
  }
  // The same shapes again reuse the cached plans.
  const size_t plans = runner.cached_plans();
  EXPECT_GT(plans, 0u);
  Dev<bf16> x(std::vector<bf16>(64 * 64)), w(std::vector<bf16>(64 * 64));
  Dev<float> y(64 * 64);
  runner.gemm(false, true, 64, 64, 64, 1.0f, x.p(), 64, w.p(), 64, 0.0f, y.p(), 64, nullptr);
  runner.gemm(false, true, 64, 64, 64, 1.0f, x.p(), 64, w.p(), 64, 0.0f, y.p(), 64, nullptr);
  EXPECT_EQ(runner.cached_plans(), plans + 1);
  EXPECT_NE(error_of([&] {
              runner.gemm(false, false, 4, 4, 8, 1.0f, x.p(), 4, w.p(), 4, 0.0f, y.p(), 4, nullptr);
            }).find("lda"),
            std::string::npos);
}

// ---------------------------------------------------------------- RMSNorm

// Formerly CudaRmsNorm.ForwardWithResidualMatchesCpu in engine_test.cu.
void run_rmsnorm_forward(Parity& par, std::mt19937& rng) {
  const float eps = 1e-6f;
  for (const int c : {34, 128, 4096}) {
    for (const int n : {1, 37, 2500}) {  // 2500: several rows per block
      SCOPED_TRACE("n=" + std::to_string(n) + " c=" + std::to_string(c));
      const auto x = rounded(normal(rng, static_cast<size_t>(n) * c, 2.0f));
      const auto w = normal(rng, static_cast<size_t>(c), 0.1f, 1.0f);
      const auto res = normal(rng, static_cast<size_t>(n) * c);
      std::vector<float> want(x.size()), rstd(static_cast<size_t>(n));
      cpu::rmsnorm_forward(want.data(), c, rstd.data(), x.data(), c, w.data(), n, c, eps);
      std::vector<float> want_res(x.size());
      cpu::add(want_res.data(), want.data(), res.data(), static_cast<int64_t>(x.size()));

      Dev<bf16> dx(to_bf16(x));
      Dev<float> dw(w), dres(res), dout(x.size()), drstd(static_cast<size_t>(n));
      Dev<bf16> dout16(x.size());
      cuda::rmsnorm_forward(dx.p(), dw.p(), dres.p(), dout.p(), dout16.p(), drstd.p(), n, c, eps, nullptr);
      const auto got = dout.get();
      par.near("out", got, want_res);
      par.near("rstd", drstd.get(), rstd);
      EXPECT_EQ(to_f32(dout16.get()), rounded(got));  // the BF16 copy is the FP32 output rounded

      // FP32 input, in place over the residual, no BF16 copy.
      const auto xf = normal(rng, static_cast<size_t>(n) * c);
      std::vector<float> want_f(xf.size()), rstd_f(static_cast<size_t>(n));
      cpu::rmsnorm_forward(want_f.data(), c, rstd_f.data(), xf.data(), c, w.data(), n, c, eps);
      cpu::add(want_f.data(), want_f.data(), res.data(), static_cast<int64_t>(xf.size()));
      Dev<float> dxf(xf), dinout(res);
      cuda::rmsnorm_forward(dxf.p(), dw.p(), dinout.p(), dinout.p(), nullptr, drstd.p(), n, c, eps, nullptr);
      par.near("out", dinout.get(), want_f);
      par.near("rstd", drstd.get(), rstd_f);
    }
  }
  Dev<float> dummy(8);
  EXPECT_NE(error_of([&] {
              cuda::rmsnorm_forward(dummy.p(), dummy.p(), nullptr, dummy.p(), nullptr, dummy.p(), 1, 7, 1e-6f,
                                    nullptr);
            }).find("even"),
            std::string::npos);
}

// Formerly CudaRmsNorm.BackwardMatchesCpuAndAccumulatesTheWeightGradient in engine_test.cu.
void run_rmsnorm_backward(Parity& par, std::mt19937& rng) {
  for (const int c : {34, 384, 4096}) {
    for (const int n : {1, 37, 2500}) {  // 2500: several rows per block
      SCOPED_TRACE("n=" + std::to_string(n) + " c=" + std::to_string(c));
      const auto x = rounded(normal(rng, static_cast<size_t>(n) * c, 1.5f));
      const auto w = normal(rng, static_cast<size_t>(c), 0.1f, 1.0f);
      const auto dout = normal(rng, static_cast<size_t>(n) * c);
      const auto dw0 = normal(rng, static_cast<size_t>(c));
      std::vector<float> y(x.size()), rstd(static_cast<size_t>(n));
      cpu::rmsnorm_forward(y.data(), c, rstd.data(), x.data(), c, w.data(), n, c, 1e-6f);
      std::vector<float> dx_want(x.size()), dw_want = dw0;
      cpu::rmsnorm_backward(dx_want.data(), c, dw_want.data(), dout.data(), c, x.data(), c, w.data(),
                            rstd.data(), n, c, false);

      Dev<float> ddout(dout), dw(w), drstd(rstd), ddw(dw0), scratch(cuda::norm_backward_scratch_floats(n, c));
      Dev<bf16> dx(to_bf16(x)), ddx(x.size());
      cuda::rmsnorm_backward(ddout.p(), dx.p(), dw.p(), drstd.p(), ddx.p(), ddw.p(), scratch.p(), n, c,
                             nullptr);
      par.near("dx (BF16)", to_f32(ddx.get()), dx_want);
      par.near("dw", ddw.get(), dw_want);

      // FP32 rows and FP32 dx (the final norm's form).
      Dev<float> dxf(x), ddxf(x.size()), ddw2(dw0);
      cuda::rmsnorm_backward(ddout.p(), dxf.p(), dw.p(), drstd.p(), ddxf.p(), ddw2.p(), scratch.p(), n, c,
                             nullptr);
      par.near("dx (FP32)", ddxf.get(), dx_want);
      par.near("dw", ddw2.get(), dw_want);
    }
  }
}

// ---------------------------------------------------------------- QK-norm + RoPE

// Formerly CudaQkNormRope.MatchesCpuNormThenRopeForwardAndBackward in engine_test.cu.
void run_qk_norm_rope(Parity& par, std::mt19937& rng) {
  const float eps = 1e-6f, theta = 500000.0f;
  struct Case {
    int b, t, h, hd;
  };
  for (const Case cs :
       {Case{2, 19, 4, 32}, Case{1, 7, 2, 64}, Case{8, 300, 3, 128}}) {  // the last: several rows per block
    SCOPED_TRACE("b=" + std::to_string(cs.b) + " t=" + std::to_string(cs.t) +
                 " heads=" + std::to_string(cs.h) + " head_dim=" + std::to_string(cs.hd));
    const int n = cs.b * cs.t, d = cs.h * cs.hd, half = cs.hd / 2;
    const auto qkv = rounded(normal(rng, static_cast<size_t>(n) * 3 * d, 1.5f));
    const auto wq = normal(rng, static_cast<size_t>(d), 0.2f, 1.0f),
               wk = normal(rng, static_cast<size_t>(d), 0.2f, 1.0f);
    std::vector<float> cos_t(static_cast<size_t>(cs.t) * half), sin_t(cos_t.size());
    cpu::rope_tables(cos_t.data(), sin_t.data(), cs.t, cs.hd, theta);
    std::vector<float> q(static_cast<size_t>(n) * d), k(q.size()), rq(static_cast<size_t>(n)), rk(rq.size());
    cpu::rmsnorm_forward(q.data(), d, rq.data(), qkv.data(), 3 * d, wq.data(), n, d, eps);
    cpu::rmsnorm_forward(k.data(), d, rk.data(), qkv.data() + d, 3 * d, wk.data(), n, d, eps);
    cpu::rope_forward(q.data(), d, cos_t.data(), sin_t.data(), cs.b, cs.t, cs.h, cs.hd);
    cpu::rope_forward(k.data(), d, cos_t.data(), sin_t.data(), cs.b, cs.t, cs.h, cs.hd);

    Dev<bf16> dqkv_in(to_bf16(qkv)), dout(qkv.size());
    Dev<float> dwq(wq), dwk(wk), dcos(cos_t), dsin(sin_t), drq(rq.size()), drk(rk.size());
    cuda::qk_norm_rope_forward(dqkv_in.p(), dout.p(), dwq.p(), dwk.p(), dcos.p(), dsin.p(), drq.p(), drk.p(),
                               n, cs.t, d, cs.hd, eps, nullptr);
    const auto out = dout.get();
    par.near("q, k (BF16)", to_f32(columns(out, n, 3 * d, 0, d)), q);
    par.near("q, k (BF16)", to_f32(columns(out, n, 3 * d, d, d)), k);
    EXPECT_EQ(to_f32(columns(out, n, 3 * d, 2 * d, d)), columns(qkv, n, 3 * d, 2 * d, d));  // v copied
    par.near("rstd", drq.get(), rq);
    par.near("rstd", drk.get(), rk);

    // Backward from a gradient with respect to the rotated q, k (and an untouched v part).
    const auto g = rounded(normal(rng, qkv.size()));
    auto gq = columns(g, n, 3 * d, 0, d), gk = columns(g, n, 3 * d, d, d);
    cpu::rope_backward(gq.data(), d, cos_t.data(), sin_t.data(), cs.b, cs.t, cs.h, cs.hd);
    cpu::rope_backward(gk.data(), d, cos_t.data(), sin_t.data(), cs.b, cs.t, cs.h, cs.hd);
    const auto dwq0 = normal(rng, static_cast<size_t>(d)), dwk0 = normal(rng, static_cast<size_t>(d));
    std::vector<float> dxq(q.size()), dxk(q.size()), dwq_want = dwq0, dwk_want = dwk0;
    cpu::rmsnorm_backward(dxq.data(), d, dwq_want.data(), gq.data(), d, qkv.data(), 3 * d, wq.data(),
                          rq.data(), n, d, false);
    cpu::rmsnorm_backward(dxk.data(), d, dwk_want.data(), gk.data(), d, qkv.data() + d, 3 * d, wk.data(),
                          rk.data(), n, d, false);
    Dev<bf16> dg(to_bf16(g));
    Dev<float> ddwq(dwq0), ddwk(dwk0), scratch(cuda::norm_backward_scratch_floats(n, 2 * d));
    cuda::qk_norm_rope_backward(dg.p(), dqkv_in.p(), dwq.p(), dwk.p(), dcos.p(), dsin.p(), drq.p(), drk.p(),
                                ddwq.p(), ddwk.p(), scratch.p(), n, cs.t, d, cs.hd, nullptr);
    const auto dgot = dg.get();
    par.near("dq, dk (BF16)", to_f32(columns(dgot, n, 3 * d, 0, d)), dxq);
    par.near("dq, dk (BF16)", to_f32(columns(dgot, n, 3 * d, d, d)), dxk);
    EXPECT_EQ(to_f32(columns(dgot, n, 3 * d, 2 * d, d)),
              columns(g, n, 3 * d, 2 * d, d));  // v's gradient kept
    par.near("dw", ddwq.get(), dwq_want);
    par.near("dw", ddwk.get(), dwk_want);
  }
}

// ---------------------------------------------------------------- SwiGLU

// Formerly CudaSwiglu.ForwardAndBackwardMatchCpu in engine_test.cu.
void run_swiglu(Parity& par, std::mt19937& rng) {
  for (const int f : {2, 384, 1030}) {
    const int n = 33;
    SCOPED_TRACE("f=" + std::to_string(f));
    const auto gu = rounded(normal(rng, static_cast<size_t>(n) * 2 * f, 2.0f));
    const auto dout = rounded(normal(rng, static_cast<size_t>(n) * f));
    std::vector<float> out(static_cast<size_t>(n) * f), dgu(gu.size());
    cpu::swiglu_forward(out.data(), gu.data(), n, f);
    cpu::swiglu_backward(dgu.data(), dout.data(), gu.data(), n, f);
    Dev<bf16> dg(to_bf16(gu)), dout_d(to_bf16(dout)), dres(out.size()), ddgu(gu.size());
    cuda::swiglu_forward(dg.p(), dres.p(), n, f, nullptr);
    cuda::swiglu_backward(dout_d.p(), dg.p(), ddgu.p(), n, f, nullptr);
    par.near("out (BF16)", to_f32(dres.get()), out);
    par.near("dgu (BF16)", to_f32(ddgu.get()), dgu);
  }
}

// ---------------------------------------------------------------- embedding

// Formerly CudaEmbedding.ForwardCopiesRowsAndBackwardSumsEachTokenDeterministically in engine_test.cu.
void run_embedding(Parity& par, std::mt19937& rng) {
  const int vocab = 50, d = 64, n = 300;
  // Heavily repeated ids (as in real text) plus a few rare ones.
  std::geometric_distribution<int> geo(0.3);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = std::min(geo(rng), vocab - 1);
  const auto table = normal(rng, static_cast<size_t>(vocab) * d);
  std::vector<float> want(static_cast<size_t>(n) * d);
  cpu::embedding_forward(want.data(), tokens.data(), table.data(), n, d);
  Dev<int32_t> dtok(tokens);
  Dev<float> dtable(table), dout(want.size());
  Dev<bf16> dout16(want.size());
  cuda::embedding_forward(dtok.p(), dtable.p(), dout.p(), dout16.p(), n, d, nullptr);
  par.near("out", dout.get(), want);
  EXPECT_EQ(to_f32(dout16.get()), rounded(want));

  cuda::TokenGroups groups;
  cuda::group_tokens(tokens.data(), n, groups);
  ASSERT_EQ(groups.offsets.size(), groups.ids.size() + 1);
  EXPECT_EQ(groups.offsets.back(), n);
  for (int g = 0; g < groups.groups(); ++g) {
    if (g > 0) EXPECT_LT(groups.ids[static_cast<size_t>(g) - 1], groups.ids[static_cast<size_t>(g)]);
    for (int i = groups.offsets[static_cast<size_t>(g)]; i < groups.offsets[static_cast<size_t>(g) + 1];
         ++i) {
      EXPECT_EQ(tokens[static_cast<size_t>(groups.positions[static_cast<size_t>(i)])],
                groups.ids[static_cast<size_t>(g)]);
      if (i > groups.offsets[static_cast<size_t>(g)])
        EXPECT_LT(groups.positions[static_cast<size_t>(i) - 1], groups.positions[static_cast<size_t>(i)]);
    }
  }

  const auto g = normal(rng, want.size());
  const auto dtable0 = normal(rng, table.size());
  std::vector<float> dwant = dtable0;
  cpu::embedding_backward(dwant.data(), g.data(), tokens.data(), n, d);
  Dev<float> dg(g);
  Dev<int32_t> ids(groups.ids), offsets(groups.offsets), positions(groups.positions);
  std::vector<std::vector<float>> runs;
  for (int rep = 0; rep < 2; ++rep) {
    Dev<float> dt(dtable0);
    cuda::embedding_backward(dg.p(), ids.p(), offsets.p(), positions.p(), groups.groups(), dt.p(), d,
                             nullptr);
    runs.push_back(dt.get());
  }
  par.near("dtable", runs[0], dwant);
  EXPECT_EQ(runs[0], runs[1]);  // deterministic: same bits every run
  for (int tok = 0; tok < vocab; ++tok) {
    if (std::find(tokens.begin(), tokens.end(), tok) != tokens.end()) continue;
    for (int j = 0; j < d; ++j)  // rows of absent tokens are untouched
      EXPECT_EQ(runs[0][static_cast<size_t>(tok) * d + j], dtable0[static_cast<size_t>(tok) * d + j]);
  }
}

// ---------------------------------------------------------------- cross-entropy

// Formerly CudaCrossEntropy.LossAndInPlaceGradientMatchCpu in engine_test.cu.
void run_cross_entropy(Parity& par, std::mt19937& rng) {
  struct Case {
    int n, v, v_real;
  };
  // 320 and 50304: the 16-byte vector path; 66: the scalar path.
  for (const Case cs : {Case{40, 320, 257}, Case{23, 66, 61}, Case{6, 50304, 50257}}) {
    SCOPED_TRACE("v=" + std::to_string(cs.v) + " v_real=" + std::to_string(cs.v_real));
    auto logits = normal(rng, static_cast<size_t>(cs.n) * cs.v, 3.0f);
    for (int j = 0; j < cs.v; ++j) logits[static_cast<size_t>(j)] *= 10.0f;  // one row with a wide spread
    logits = rounded(logits);
    std::uniform_int_distribution<int> tok(0, cs.v_real - 1);
    std::vector<int32_t> targets(static_cast<size_t>(cs.n));
    for (auto& t : targets) t = tok(rng);
    targets[1] = -1;
    targets[static_cast<size_t>(cs.n) - 1] = -1;
    targets[0] = cs.v_real - 1;  // the last real id
    int64_t count = 0;
    for (int32_t t : targets) count += t >= 0;
    const float z = 1e-3f, scale = 1.0f / static_cast<float>(count);
    std::vector<float> dwant(logits.size());
    const auto sums =
        cpu::cross_entropy(dwant.data(), logits.data(), targets.data(), cs.n, cs.v, cs.v_real, z, scale);

    Dev<bf16> dl(to_bf16(logits));
    Dev<int32_t> dt(targets);
    Dev<float> row_loss(static_cast<size_t>(cs.n)), row_ce(static_cast<size_t>(cs.n));
    Dev<double> dsums(std::vector<double>{0.0, 0.0});
    cuda::cross_entropy(dl.p(), dt.p(), row_loss.p(), row_ce.p(), cs.n, cs.v, cs.v_real, z, scale, false,
                        nullptr);
    EXPECT_EQ(to_f32(dl.get()), logits);  // no gradient asked: logits untouched
    cuda::cross_entropy(dl.p(), dt.p(), row_loss.p(), row_ce.p(), cs.n, cs.v, cs.v_real, z, scale, true,
                        nullptr);
    cuda::accumulate_loss_sums(row_loss.p(), row_ce.p(), cs.n, dsums.p(), nullptr);
    cuda::accumulate_loss_sums(row_loss.p(), row_ce.p(), cs.n, dsums.p(), nullptr);  // accumulates
    const auto got = dsums.get();
    par.scalar("loss sums", got[0] / 2, sums.loss);
    par.scalar("loss sums", got[1] / 2, sums.ce);
    const auto rl = row_loss.get();
    EXPECT_EQ(rl[1], 0.0f);
    const auto grad = to_f32(dl.get());
    par.near("dlogits (BF16)", grad, dwant);
    for (int i = 0; i < cs.n; ++i)
      for (int j = 0; j < cs.v; ++j) {
        const bool zero = targets[static_cast<size_t>(i)] < 0 || j >= cs.v_real;
        if (zero) ASSERT_EQ(grad[static_cast<size_t>(i) * cs.v + j], 0.0f) << "row " << i << " column " << j;
      }
  }
}

// ---------------------------------------------------------------- AdamW and clipping

struct AdamCase {
  std::vector<int64_t> offsets{0, 40000}, sizes{40000, 100};  // several chunks, then a small tensor
  std::vector<uint8_t> decay{1, 0};
  std::vector<float> values, grads, m, v;
  int64_t total() const { return offsets.back() + sizes.back(); }
  explicit AdamCase(std::mt19937& rng) {
    values = normal(rng, static_cast<size_t>(total()));
    grads = normal(rng, static_cast<size_t>(total()), 0.01f);
    m = normal(rng, static_cast<size_t>(total()), 0.01f);
    v = normal(rng, static_cast<size_t>(total()), 1e-4f);
    for (auto& x : v) x = std::fabs(x);
  }
};

cpu::AdamWArgs adam_args(int step) {
  cpu::AdamWArgs a{};
  a.lr = 1e-3f;
  a.beta1 = 0.9f;
  a.beta2 = 0.95f;
  a.eps = 1e-8f;
  a.weight_decay = 0.1f;
  a.bias_correction1 = static_cast<float>(1.0 - std::pow(0.9, step));
  a.bias_correction2 = static_cast<float>(1.0 - std::pow(0.95, step));
  return a;
}

// Runs the device norm/clip and AdamW over `c`; returns the control.
cuda::StepControl run_device_adamw(AdamCase& c, float max_norm, double loss_sum, std::vector<double>* sumsq,
                                   std::vector<float>* bf16_values) {
  std::vector<int32_t> first;
  const auto chunks = cuda::make_param_chunks(c.offsets, c.sizes, first);
  Dev<cuda::ParamChunk> dchunks(chunks);
  Dev<int32_t> dfirst(first);
  Dev<uint8_t> dflags(c.decay);
  Dev<double> partials(chunks.size()), dsumsq(c.sizes.size()), loss(std::vector<double>{loss_sum});
  Dev<cuda::StepControl> ctl(1);
  Dev<float> values(c.values), grads(c.grads), m(c.m), v(c.v);
  Dev<bf16> vb(c.values.size());
  cuda::grad_norm_and_clip(grads.p(), dchunks.p(), static_cast<int>(chunks.size()), dfirst.p(),
                           static_cast<int>(c.sizes.size()), partials.p(), dsumsq.p(), loss.p(), max_norm,
                           ctl.p(), nullptr);
  cuda::adamw_step(values.p(), m.p(), v.p(), grads.p(), vb.p(), dchunks.p(), static_cast<int>(chunks.size()),
                   dflags.p(), adam_args(3), ctl.p(), nullptr);
  c.values = values.get();
  c.m = m.get();
  c.v = v.get();
  if (sumsq) *sumsq = dsumsq.get();
  if (bf16_values) *bf16_values = to_f32(vb.get());
  return ctl.get()[0];
}

// Formerly CudaAdamW.UpdateIsBitIdenticalToCpu in engine_test.cu.
void run_adamw_update(Parity& par, std::mt19937& rng) {
  AdamCase gpu(rng);
  AdamCase cpu_case = gpu;
  for (size_t p = 0; p < cpu_case.sizes.size(); ++p) {
    cpu::AdamWArgs a = adam_args(3);
    a.weight_decay = cpu_case.decay[p] ? a.weight_decay : 0.0f;
    const auto off = static_cast<size_t>(cpu_case.offsets[p]);
    cpu::adamw_update(cpu_case.values.data() + off, cpu_case.m.data() + off, cpu_case.v.data() + off,
                      cpu_case.grads.data() + off, cpu_case.sizes[p], a);
  }
  std::vector<double> sumsq;
  std::vector<float> vb;
  const auto ctl = run_device_adamw(gpu, 0.0f, 1.0, &sumsq, &vb);
  EXPECT_EQ(ctl.skip, 0);
  EXPECT_EQ(ctl.clip_coef, 1.0f);
  par.near("values, m, v", gpu.values, cpu_case.values);
  par.near("values, m, v", gpu.m, cpu_case.m);
  par.near("values, m, v", gpu.v, cpu_case.v);
  EXPECT_EQ(vb, rounded(gpu.values));
  double total = 0;
  for (size_t p = 0; p < gpu.sizes.size(); ++p) {
    const double want = cpu::sum_squares(gpu.grads.data() + gpu.offsets[p], gpu.sizes[p]);
    par.scalar("sum of squares", sumsq[p], want);
    total += want;
  }
  par.scalar("grad norm", ctl.grad_norm, std::sqrt(total));
}

// Formerly CudaAdamW.ClipsByTheGlobalNormAndSkipsNonFiniteSteps in engine_test.cu.
void run_adamw_clip(Parity& par, std::mt19937& rng) {
  AdamCase gpu(rng);
  AdamCase cpu_case = gpu;
  const double norm = std::sqrt(cpu::sum_squares(gpu.grads.data(), gpu.total()));
  const float max_norm = static_cast<float>(norm * 0.3);
  const auto c = static_cast<float>(max_norm / (norm + 1e-6));
  cpu::scale(cpu_case.grads.data(), cpu_case.total(), c);
  for (size_t p = 0; p < cpu_case.sizes.size(); ++p) {
    cpu::AdamWArgs a = adam_args(3);
    a.weight_decay = cpu_case.decay[p] ? a.weight_decay : 0.0f;
    const auto off = static_cast<size_t>(cpu_case.offsets[p]);
    cpu::adamw_update(cpu_case.values.data() + off, cpu_case.m.data() + off, cpu_case.v.data() + off,
                      cpu_case.grads.data() + off, cpu_case.sizes[p], a);
  }
  const auto ctl = run_device_adamw(gpu, max_norm, 1.0, nullptr, nullptr);
  EXPECT_EQ(ctl.skip, 0);
  par.scalar("clip factor", ctl.clip_coef, c);
  par.near("values", gpu.values, cpu_case.values);
  par.near("m", gpu.m, cpu_case.m);

  // A NaN gradient, or a NaN loss: no update at all.
  for (int which = 0; which < 2; ++which) {
    AdamCase bad(rng);
    const AdamCase before = bad;
    if (which == 0) bad.grads[40005] = std::numeric_limits<float>::quiet_NaN();
    std::vector<double> sumsq;
    const auto skipped = run_device_adamw(bad, 1.0f, which == 1 ? std::nan("") : 1.0, &sumsq, nullptr);
    EXPECT_EQ(skipped.skip, 1) << "case " << which;
    if (which == 0) {
      EXPECT_TRUE(std::isfinite(sumsq[0]));
      EXPECT_TRUE(std::isnan(sumsq[1]));
    }
    EXPECT_EQ(std::memcmp(bad.values.data(), before.values.data(), bad.values.size() * 4), 0);
    EXPECT_EQ(std::memcmp(bad.m.data(), before.m.data(), bad.m.size() * 4), 0);
  }
}

// ---------------------------------------------------------------- fallback attention

// Formerly CudaCausalSdpa.MatchesCpuAttention in engine_test.cu.
void run_causal_sdpa(Parity& par, std::mt19937& rng) {
  for (const int hd : {32, 64}) {
    const int b = 2, t = 37, h = 3, d = h * hd, n = b * t, ld = 3 * d;
    SCOPED_TRACE("head_dim " + std::to_string(hd));
    const auto qkv = rounded(normal(rng, static_cast<size_t>(n) * ld, 1.5f));
    std::vector<float> out(static_cast<size_t>(n) * d), probs(static_cast<size_t>(b) * h * t * t);
    cpu::attention_forward(out.data(), d, probs.data(), qkv.data(), ld, qkv.data() + d, ld,
                           qkv.data() + 2 * d, ld, b, t, h, hd);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    Dev<bf16> dqkv(to_bf16(qkv)), dout(out.size());
    Dev<float> lse(static_cast<size_t>(b) * h * t);
    cuda::causal_sdpa_forward(dqkv.p(), dqkv.p() + d, dqkv.p() + 2 * d, ld, dout.p(), d, lse.p(), b, t, h, hd,
                              scale, nullptr);
    const auto out_gpu = to_f32(dout.get());
    par.near("out (BF16)", out_gpu, out);
    // lse of (batch 1, head 2, position t-1), recomputed here in double.
    {
      const int bi = 1, hi = 2, i = t - 1;
      double mx = -1e300;
      std::vector<double> s(static_cast<size_t>(i) + 1);
      for (int j = 0; j <= i; ++j) {
        double acc = 0;
        for (int c = 0; c < hd; ++c)
          acc += static_cast<double>(qkv[static_cast<size_t>(bi * t + i) * ld + hi * hd + c]) *
                 qkv[static_cast<size_t>(bi * t + j) * ld + d + hi * hd + c];
        s[static_cast<size_t>(j)] = acc * scale;
        mx = std::max(mx, s[static_cast<size_t>(j)]);
      }
      double sum = 0;
      for (double x : s) sum += std::exp(x - mx);
      par.absolute("lse", lse.get()[static_cast<size_t>((bi * h + hi) * t + i)], mx + std::log(sum));
    }
    const auto g = rounded(normal(rng, out.size()));
    std::vector<float> dq(out.size()), dk(out.size()), dv(out.size()), scratch(static_cast<size_t>(t) * t);
    cpu::attention_backward(dq.data(), d, dk.data(), d, dv.data(), d, scratch.data(), g.data(), d,
                            probs.data(), qkv.data(), ld, qkv.data() + d, ld, qkv.data() + 2 * d, ld, b, t, h,
                            hd);
    Dev<bf16> dg(to_bf16(g)), dgrad(qkv.size());
    Dev<uint8_t> ws(cuda::causal_sdpa_backward_workspace_bytes(b, t, h, hd));
    cuda::causal_sdpa_backward(dqkv.p(), dqkv.p() + d, dqkv.p() + 2 * d, ld, dout.p(), dg.p(), d, lse.p(),
                               dgrad.p(), dgrad.p() + d, dgrad.p() + 2 * d, ld, b, t, h, hd, scale, ws.p(),
                               nullptr);
    const auto grad = to_f32(dgrad.get());
    par.near("dq, dk, dv (BF16)", columns(grad, n, ld, 0, d), dq);
    par.near("dq, dk, dv (BF16)", columns(grad, n, ld, d, d), dk);
    par.near("dq, dk, dv (BF16)", columns(grad, n, ld, 2 * d, d), dv);
  }
}
// ---------------------------------------------------------------- FP32 GEMM and the small kernels

int round_up4(int x) {
  return (x + 3) / 4 * 4;
}

// The Newton-Schulz GEMMs: FP32 operands and accumulation (never TF32), padded strides, C_in.
void run_gemm_f32(Parity& par, std::mt19937& rng) {
  cuda::GemmF32Runner runner;
  struct Shape {
    int m, n, k;
  };
  for (const Shape s : {Shape{21, 40, 24}, Shape{64, 48, 200}, Shape{1, 72, 16}, Shape{130, 7, 31}}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        SCOPED_TRACE("m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
                     " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
        // Padded row strides (16-byte multiples; the padding holds values the GEMM must not read).
        const int a_rows = ta ? s.k : s.m, a_cols = ta ? s.m : s.k, lda = round_up4(a_cols) + 4;
        const int b_rows = tb ? s.n : s.k, b_cols = tb ? s.k : s.n, ldb = round_up4(b_cols) + 4;
        const int ldc = round_up4(s.n) + 4;
        const auto a = normal(rng, static_cast<size_t>(a_rows) * lda);
        const auto b = normal(rng, static_cast<size_t>(b_rows) * ldb);
        const auto c_in = normal(rng, static_cast<size_t>(s.m) * ldc);
        const float alpha = -1.25f, beta = 0.5f;
        std::vector<float> want = c_in;
        cpu::gemm(ta, tb, s.m, s.n, s.k, alpha, a.data(), lda, b.data(), ldb, beta, want.data(), ldc);
        Dev<float> da(a), db(b), dc_in(c_in), dc(std::vector<float>(c_in.size(), 0.0f));
        runner.gemm(ta, tb, s.m, s.n, s.k, alpha, da.p(), lda, db.p(), ldb, beta, dc.p(), ldc, nullptr,
                    dc_in.p());
        par.near("C", columns(dc.get(), s.m, ldc, 0, s.n), columns(want, s.m, ldc, 0, s.n));
      }
    }
  }
}

// f32_to_bf16 (round to nearest even, specials included), gather_last_positions, mask_padded_logits.
void run_elementwise(Parity& par, std::mt19937& rng) {
  for (const int64_t n : {int64_t{1}, int64_t{17}, int64_t{4099}}) {
    auto x = normal(rng, static_cast<size_t>(n), 100.0f);
    const float specials[] = {0.0f,
                              -0.0f,
                              1e-40f,
                              3.4e38f,
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              1.00390625f,
                              1.01171875f};
    for (size_t i = 0; i < std::size(specials) && i < x.size(); ++i) x[i] = specials[i];
    std::vector<float> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = bf16_bits_to_float(bf16_bits_rne(x[i]));
    Dev<float> dx(x);
    Dev<bf16> dout(x.size());
    cuda::f32_to_bf16(dx.p(), dout.p(), n, nullptr);
    par.near("f32_to_bf16", to_f32(dout.get()), want);
  }
  for (const auto [b, t, d] : {std::array<int, 3>{1, 1, 8}, std::array<int, 3>{3, 7, 66}}) {
    const auto x = rounded(normal(rng, static_cast<size_t>(b) * t * d));
    std::vector<float> want;
    for (int s = 0; s < b; ++s)
      want.insert(want.end(), x.begin() + static_cast<int64_t>(s * t + t - 1) * d,
                  x.begin() + static_cast<int64_t>(s * t + t) * d);
    Dev<bf16> dx(to_bf16(x)), dout(static_cast<size_t>(b) * d);
    cuda::gather_last_positions(dx.p(), dout.p(), b, t, d, nullptr);
    par.near("gather_last_positions", to_f32(dout.get()), want);
  }
  for (const auto [rows, v, v_real] : {std::array<int, 3>{1, 64, 64}, std::array<int, 3>{5, 320, 257}}) {
    const auto logits = normal(rng, static_cast<size_t>(rows) * v);
    std::vector<float> want = logits;
    for (int r = 0; r < rows; ++r)
      for (int j = v_real; j < v; ++j)
        want[static_cast<size_t>(r) * v + j] = -std::numeric_limits<float>::infinity();
    Dev<float> dl(logits);
    cuda::mask_padded_logits(dl.p(), rows, v, v_real, nullptr);
    par.near("mask_padded_logits", dl.get(), want);
  }
}

// ---------------------------------------------------------------- quantization

// NVFP4: a sample of the modes (block, outer scale, rounding, RHT, Four Over Six) at odd shapes, with
// zeros, huge, tiny, subnormal, NaN and Inf values planted; quant_nvfp4_test.cpp sweeps every mode.
void run_quantize_nvfp4(Parity& par, std::mt19937& rng) {
  std::mt19937_64 g((static_cast<uint64_t>(rng()) << 32) ^ rng());
  struct Mode {
    BlockShape block;
    OuterScale outer;
    Rounding rounding;
    int rht;
    bool fos;
  };
  const Mode modes[] = {{BlockShape::k1x16, OuterScale::kTensor, Rounding::kRtn, 0, false},
                        {BlockShape::k1x16, OuterScale::kBlock128, Rounding::kSr, 16, false},
                        {BlockShape::k16x16, OuterScale::kTensor, Rounding::kRtn, 0, true},
                        {BlockShape::k1x16, OuterScale::kTensor, Rounding::kSr, 128, false}};
  const int64_t shapes[][2] = {{16, 128}, {48, 384}, {1000, 2048}, {32, 144}};
  for (const QuantIoType dtype : {QuantIoType::kF32, QuantIoType::kBF16})
    for (const Mode& m : modes)
      for (const auto& s : shapes) {
        const QuantSpec spec = nvfp4_spec(m.block, m.outer, m.rounding, m.rht, m.fos);
        if (!shape_ok(s[0], s[1], spec)) continue;
        SCOPED_TRACE(shape_tag(s[0], s[1]) + io_name(dtype) + " " + describe(spec));
        const HostInput in = random_input(g, s[0], s[1], dtype, true);
        const QuantRandomness rnd = randomness(g, spec.rht_n);
        const Nvfp4Tensor want = quantize_nvfp4(in.values.data(), in.rows, in.cols, spec, rnd);
        const DeviceCopy dx(in);
        Nvfp4DeviceTensor q(in.rows, in.cols, spec.block, spec.outer);
        DeviceBuffer<float> amax(1);
        DeviceBuffer<unsigned long long> nonfinite(1);
        FP4_CUDA_CHECK(cudaMemset(nonfinite.data(), 0, sizeof(unsigned long long)));
        const bool tensor = spec.outer == OuterScale::kTensor;
        if (tensor) amax_nvfp4_cuda(dx.input(), spec, rnd, amax.data(), nullptr);
        const int64_t n = in.rows * in.cols;
        DeviceBuffer<float> dq_buf(static_cast<size_t>(n));
        DequantOutput dq;
        dq.dtype = QuantIoType::kF32;
        dq.apply_tensor_scale = true;
        dq.data = dq_buf.data();
        quantize_nvfp4_cuda(dx.input(), spec, rnd, q.view(), tensor ? amax.data() : nullptr, nonfinite.data(),
                            dq, nullptr);
        FP4_CUDA_CHECK(cudaDeviceSynchronize());
        Diff d = compare_nvfp4(want, q.download(), transformed_operand(in.values, spec, rnd));
        compare_nonfinite(want.nonfinite, read_back(nonfinite), d);
        if (tensor && float_bits(want.amax) != float_bits(read_back(amax))) {
          d.outer += 1;
          d.note("tensor amax differs");
        }
        std::vector<float> w(static_cast<size_t>(n)), gv(static_cast<size_t>(n));
        dequantize(want, w.data(), true);
        dq_buf.download(gv.data(), gv.size());
        compare_f32(w, gv, d);
        par.quantized("codes, scales, amax, dequantized", d);
      }
}

// MXFP8 (E4M3 codes, E8M0 scales per 32) and its dequantizers, at odd shapes with specials planted.
void run_quantize_mxfp8(Parity& par, std::mt19937& rng) {
  std::mt19937_64 g((static_cast<uint64_t>(rng()) << 32) ^ rng());
  const int64_t shapes[][2] = {{1, 32}, {3, 96}, {77, 4096}};
  for (const QuantIoType dtype : {QuantIoType::kF32, QuantIoType::kBF16})
    for (const auto& s : shapes) {
      const int64_t rows = s[0], cols = s[1], n = rows * cols;
      SCOPED_TRACE(shape_tag(rows, cols) + io_name(dtype));
      const HostInput in = random_input(g, rows, cols, dtype, true);
      const Mxfp8Tensor want = quantize_mxfp8(in.values.data(), rows, cols);
      const DeviceCopy dx(in);
      DeviceBuffer<uint8_t> codes(n), scales(n / 32);
      DeviceBuffer<unsigned long long> nonfinite(1);
      FP4_CUDA_CHECK(cudaMemset(nonfinite.data(), 0, sizeof(unsigned long long)));
      const Mxfp8DeviceView view{codes.data(), scales.data(), rows, cols};
      quantize_mxfp8_cuda(dx.input(), view, nonfinite.data(), nullptr);
      DeviceBuffer<float> out_f32(n);
      dequantize_mxfp8_cuda(view, out_f32.data(), QuantIoType::kF32, nullptr);
      FP4_CUDA_CHECK(cudaDeviceSynchronize());
      Diff d;
      compare_mxfp8(want, codes, scales, d);
      compare_nonfinite(want.nonfinite, read_back(nonfinite), d);
      std::vector<float> w(n), gf(n);
      dequantize(want, w.data());
      out_f32.download(gf.data(), n);
      compare_f32(w, gf, d);
      par.quantized("codes, scales, dequantized", d);
    }
}

// ---------------------------------------------------------------- the table

const ParityRow kRows[] = {
    {"gemm (cuBLASLt, BF16 operands)", "cpu::gemm", {{"C (FP32)", 1e-5}, {"C (BF16)", 1e-2}}, run_gemm},
    {"gemm_f32 (cuBLASLt, FP32 operands, Newton-Schulz)", "cpu::gemm", {{"C", 1e-5}}, run_gemm_f32},
    {"f32_to_bf16, gather_last_positions, mask_padded_logits",
     "round to nearest even (numerics/formats.h), row gather, -inf mask",
     {{"f32_to_bf16", 0}, {"gather_last_positions", 0}, {"mask_padded_logits", 0}},
     run_elementwise},
    {"rmsnorm_forward",
     "cpu::rmsnorm_forward + cpu::add",
     {{"out", 1e-5}, {"rstd", 1e-5}},
     run_rmsnorm_forward},
    {"rmsnorm_backward",
     "cpu::rmsnorm_backward",
     {{"dx (BF16)", 1e-2}, {"dx (FP32)", 1e-5}, {"dw", 1e-5}},
     run_rmsnorm_backward},
    {"qk_norm_rope_forward/backward",
     "cpu::rmsnorm_* then cpu::rope_*",
     {{"q, k (BF16)", 1e-2}, {"rstd", 1e-5}, {"dq, dk (BF16)", 1e-2}, {"dw", 1e-4}},
     run_qk_norm_rope},
    {"swiglu_forward/backward", "cpu::swiglu_*", {{"out (BF16)", 1e-2}, {"dgu (BF16)", 1e-2}}, run_swiglu},
    {"embedding_forward/backward", "cpu::embedding_*", {{"out", 0}, {"dtable", 1e-6}}, run_embedding},
    {"cross_entropy + accumulate_loss_sums",
     "cpu::cross_entropy",
     {{"loss sums", 1e-5}, {"dlogits (BF16)", 1e-2}},
     run_cross_entropy},
    {"grad_norm_and_clip + adamw_step",
     "cpu::adamw_update, cpu::sum_squares",
     {{"values, m, v", 0}, {"sum of squares", 1e-12}, {"grad norm", 1e-12}},
     run_adamw_update},
    {"grad_norm_and_clip + adamw_step (clipping)",
     "cpu::scale then cpu::adamw_update",
     {{"clip factor", 1e-6}, {"values", 1e-6}, {"m", 1e-5}},
     run_adamw_clip},
    {"causal_sdpa_forward/backward",
     "cpu::attention_*",
     {{"out (BF16)", 1e-2}, {"lse", 1e-4}, {"dq, dk, dv (BF16)", 2e-2}},
     run_causal_sdpa},
    {"amax/quantize_nvfp4_cuda",
     "quantize_nvfp4, dequantize",
     {{"codes, scales, amax, dequantized", 0}},
     run_quantize_nvfp4},
    {"quantize/dequantize_mxfp8_cuda",
     "quantize_mxfp8, dequantize",
     {{"codes, scales, dequantized", 0}},
     run_quantize_mxfp8},
};

class OpsParity : public ::testing::TestWithParam<size_t> {};

TEST_P(OpsParity, MatchesTheCpuReference) {
  const ParityRow& row = kRows[GetParam()];
  const uint32_t seed = [] {
    if (const char* s = std::getenv("FP4_TEST_SEED")) return static_cast<uint32_t>(std::stoull(s));
    return fresh_seed();
  }();
  SCOPED_TRACE(std::string(row.op) + ", seed " + std::to_string(seed) +
               " (replay with FP4_TEST_SEED=" + std::to_string(seed) + ")");
  std::mt19937 rng(seed);
  Parity par(row);
  row.run(par, rng);
}

std::string row_name(const ::testing::TestParamInfo<size_t>& info) {
  std::string s = kRows[info.param].op;
  s = s.substr(0, s.find(' '));
  for (auto& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return std::to_string(info.param) + "_" + s;
}

INSTANTIATE_TEST_SUITE_P(EveryCudaOp, OpsParity, ::testing::Range<size_t>(0, std::size(kRows)), row_name);

}  // namespace
}  // namespace fp4
