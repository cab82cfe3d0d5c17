// CUDA engine tests (run on a GPU): every layer kernel against its CPU op (src/ops/cpu) on fresh
// random inputs, and the whole engine against the CPU reference engine: gradients at the same initial
// weights, a 20-step training curve, checkpoints moving between engines, errors.
// Inputs of the BF16 kernels are rounded to BF16 first, so both sides see the same values; tolerances
// are norm-wise relative errors sized for BF16 outputs (2^-9 relative rounding per element).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/cpu_engine.h"
#include "model/cuda/cuda_engine.h"
#include "model/olmo2.h"
#include "numerics/quantize.h"
#include "ops/cuda/adamw_cuda.h"
#include "ops/cuda/causal_sdpa_cuda.h"
#include "ops/cuda/cross_entropy_cuda.h"
#include "ops/cuda/embedding_cuda.h"
#include "ops/cuda/gemm_cublaslt.h"
#include "ops/cuda/rmsnorm_cuda.h"
#include "ops/cuda/rope_cuda.h"
#include "ops/cuda/swiglu_cuda.h"
#include "ops/ops.h"
#include "optim/grad_clip.h"
#include "optim/osci_reset.h"
#include "recipe/recipe_io.h"
#include "optimizer_test_util.h"

namespace fp4 {
namespace {

using cuda::bf16;

uint32_t fresh_seed() {
  static std::random_device rd;
  return rd();
}

std::vector<float> normal(std::mt19937& rng, size_t n, float std = 1.0f, float mean = 0.0f) {
  std::normal_distribution<float> dist(mean, std);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16(x));
}

std::vector<float> rounded(std::vector<float> v) {
  for (auto& x : v) x = round_bf16(x);
  return v;
}

std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16(v[i]);
  return out;
}

std::vector<float> to_f32(const std::vector<bf16>& v) {
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

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
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

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

int round_up8(int x) {
  return (x + 7) / 8 * 8;
}

// ---------------------------------------------------------------- GEMM

TEST(CudaGemm, MatchesCpuGemmForEveryTransposeAndOutputType) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
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
        EXPECT_LT(rel_err(columns(dc.get(), s.m, ldc, 0, s.n), columns(want, s.m, ldc, 0, s.n)), 1e-5);
        EXPECT_EQ(dc_in.get(), c_in);  // C_in is only read

        std::vector<float> want0(c_in.size(), 0.0f);
        cpu::gemm(ta, tb, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, want0.data(), ldc);
        Dev<bf16> dc16(std::vector<bf16>(c_in.size()));
        runner.gemm(ta, tb, s.m, s.n, s.k, 1.0f, da.p(), lda, db.p(), ldb, 0.0f, dc16.p(), ldc, nullptr);
        EXPECT_LT(rel_err(columns(to_f32(dc16.get()), s.m, ldc, 0, s.n), columns(want0, s.m, ldc, 0, s.n)),
                  1e-2);
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

TEST(CudaRmsNorm, ForwardWithResidualMatchesCpu) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
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
      EXPECT_LT(rel_err(got, want_res), 1e-5);
      EXPECT_LT(rel_err(drstd.get(), rstd), 1e-5);
      EXPECT_EQ(to_f32(dout16.get()), rounded(got));  // the BF16 copy is the FP32 output rounded

      // FP32 input, in place over the residual, no BF16 copy.
      const auto xf = normal(rng, static_cast<size_t>(n) * c);
      std::vector<float> want_f(xf.size()), rstd_f(static_cast<size_t>(n));
      cpu::rmsnorm_forward(want_f.data(), c, rstd_f.data(), xf.data(), c, w.data(), n, c, eps);
      cpu::add(want_f.data(), want_f.data(), res.data(), static_cast<int64_t>(xf.size()));
      Dev<float> dxf(xf), dinout(res);
      cuda::rmsnorm_forward(dxf.p(), dw.p(), dinout.p(), dinout.p(), nullptr, drstd.p(), n, c, eps, nullptr);
      EXPECT_LT(rel_err(dinout.get(), want_f), 1e-5);
      EXPECT_LT(rel_err(drstd.get(), rstd_f), 1e-5);
    }
  }
  Dev<float> dummy(8);
  EXPECT_NE(error_of([&] {
              cuda::rmsnorm_forward(dummy.p(), dummy.p(), nullptr, dummy.p(), nullptr, dummy.p(), 1, 7, 1e-6f,
                                    nullptr);
            }).find("even"),
            std::string::npos);
}

TEST(CudaRmsNorm, BackwardMatchesCpuAndAccumulatesTheWeightGradient) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
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
      EXPECT_LT(rel_err(to_f32(ddx.get()), dx_want), 1e-2);
      EXPECT_LT(rel_err(ddw.get(), dw_want), 1e-5);

      // FP32 rows and FP32 dx (the final norm's form).
      Dev<float> dxf(x), ddxf(x.size()), ddw2(dw0);
      cuda::rmsnorm_backward(ddout.p(), dxf.p(), dw.p(), drstd.p(), ddxf.p(), ddw2.p(), scratch.p(), n, c,
                             nullptr);
      EXPECT_LT(rel_err(ddxf.get(), dx_want), 1e-5);
      EXPECT_LT(rel_err(ddw2.get(), dw_want), 1e-5);
    }
  }
}

// ---------------------------------------------------------------- QK-norm + RoPE

TEST(CudaQkNormRope, MatchesCpuNormThenRopeForwardAndBackward) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
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
    EXPECT_LT(rel_err(to_f32(columns(out, n, 3 * d, 0, d)), q), 1e-2);
    EXPECT_LT(rel_err(to_f32(columns(out, n, 3 * d, d, d)), k), 1e-2);
    EXPECT_EQ(to_f32(columns(out, n, 3 * d, 2 * d, d)), columns(qkv, n, 3 * d, 2 * d, d));  // v copied
    EXPECT_LT(rel_err(drq.get(), rq), 1e-5);
    EXPECT_LT(rel_err(drk.get(), rk), 1e-5);

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
    EXPECT_LT(rel_err(to_f32(columns(dgot, n, 3 * d, 0, d)), dxq), 1e-2);
    EXPECT_LT(rel_err(to_f32(columns(dgot, n, 3 * d, d, d)), dxk), 1e-2);
    EXPECT_EQ(to_f32(columns(dgot, n, 3 * d, 2 * d, d)),
              columns(g, n, 3 * d, 2 * d, d));  // v's gradient kept
    EXPECT_LT(rel_err(ddwq.get(), dwq_want), 1e-4);
    EXPECT_LT(rel_err(ddwk.get(), dwk_want), 1e-4);
  }
}

// ---------------------------------------------------------------- SwiGLU

TEST(CudaSwiglu, ForwardAndBackwardMatchCpu) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
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
    EXPECT_LT(rel_err(to_f32(dres.get()), out), 1e-2);
    EXPECT_LT(rel_err(to_f32(ddgu.get()), dgu), 1e-2);
  }
}

// ---------------------------------------------------------------- embedding

TEST(CudaEmbedding, ForwardCopiesRowsAndBackwardSumsEachTokenDeterministically) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
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
  EXPECT_EQ(dout.get(), want);
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
  EXPECT_LT(rel_err(runs[0], dwant), 1e-6);
  EXPECT_EQ(runs[0], runs[1]);  // deterministic: same bits every run
  for (int tok = 0; tok < vocab; ++tok) {
    if (std::find(tokens.begin(), tokens.end(), tok) != tokens.end()) continue;
    for (int j = 0; j < d; ++j)  // rows of absent tokens are untouched
      EXPECT_EQ(runs[0][static_cast<size_t>(tok) * d + j], dtable0[static_cast<size_t>(tok) * d + j]);
  }
}

// ---------------------------------------------------------------- cross-entropy

TEST(CudaCrossEntropy, LossAndInPlaceGradientMatchCpu) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
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
    EXPECT_NEAR(got[0] / 2, sums.loss, 1e-5 * sums.loss);
    EXPECT_NEAR(got[1] / 2, sums.ce, 1e-5 * sums.ce);
    const auto rl = row_loss.get();
    EXPECT_EQ(rl[1], 0.0f);
    const auto grad = to_f32(dl.get());
    EXPECT_LT(rel_err(grad, dwant), 1e-2);
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

TEST(CudaAdamW, UpdateIsBitIdenticalToCpu) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
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
  EXPECT_EQ(std::memcmp(gpu.values.data(), cpu_case.values.data(), gpu.values.size() * 4), 0);
  EXPECT_EQ(std::memcmp(gpu.m.data(), cpu_case.m.data(), gpu.m.size() * 4), 0);
  EXPECT_EQ(std::memcmp(gpu.v.data(), cpu_case.v.data(), gpu.v.size() * 4), 0);
  EXPECT_EQ(vb, rounded(gpu.values));
  double total = 0;
  for (size_t p = 0; p < gpu.sizes.size(); ++p) {
    const double want = cpu::sum_squares(gpu.grads.data() + gpu.offsets[p], gpu.sizes[p]);
    EXPECT_NEAR(sumsq[p], want, 1e-12 * want);
    total += want;
  }
  EXPECT_NEAR(ctl.grad_norm, std::sqrt(total), 1e-12 * std::sqrt(total));
}

TEST(CudaAdamW, ClipsByTheGlobalNormAndSkipsNonFiniteSteps) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
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
  EXPECT_NEAR(ctl.clip_coef, c, 1e-6 * c);
  EXPECT_LT(rel_err(gpu.values, cpu_case.values), 1e-6);
  EXPECT_LT(rel_err(gpu.m, cpu_case.m), 1e-5);

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

TEST(CudaCausalSdpa, MatchesCpuAttention) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
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
    EXPECT_LT(rel_err(out_gpu, out), 1e-2);
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
      EXPECT_NEAR(lse.get()[static_cast<size_t>((bi * h + hi) * t + i)], mx + std::log(sum), 1e-4);
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
    EXPECT_LT(rel_err(columns(grad, n, ld, 0, d), dq), 2e-2);
    EXPECT_LT(rel_err(columns(grad, n, ld, d, d), dk), 2e-2);
    EXPECT_LT(rel_err(columns(grad, n, ld, 2 * d, d), dv), 2e-2);
  }
}

// ---------------------------------------------------------------- the engine against the CPU engine

ModelConfig engine_config(const std::string& name) {
  if (name == "tiny") return model_preset("tiny");  // head_dim 32: the fallback attention
  return testing::small64_config();                 // head_dim 64: the fused attention kernels
}

Batch random_batch(std::mt19937& rng, const ModelConfig& cfg, int b, int t, double ignored = 0.1) {
  std::uniform_int_distribution<int> tok(0, cfg.vocab_real - 1);
  std::bernoulli_distribution skip(ignored);
  Batch batch{b, t, std::vector<int32_t>(static_cast<size_t>(b) * t),
              std::vector<int32_t>(static_cast<size_t>(b) * t)};
  for (auto& x : batch.tokens) x = tok(rng);
  for (auto& x : batch.targets) x = skip(rng) ? -1 : tok(rng);
  return batch;
}

std::vector<float> read_param(const TrainingEngine& e, const ParameterInfo& p) {
  std::vector<float> v(static_cast<size_t>(p.numel()));
  e.read_parameter(p.name, v);
  return v;
}

// A model config and a recipe, with the tolerances of that recipe against the CPU engine. Quantized
// recipes use the same random bits on both engines, but BF16 activations move some values across an FP4
// rounding boundary, so their bounds are wider.
struct EngineCase {
  const char* config;
  const char* recipe;
  double loss_tol, grad_tol, curve_tol;
};

std::string case_name(const ::testing::TestParamInfo<EngineCase>& info) {
  std::string s = std::string(info.param.config) + "_" + info.param.recipe;
  for (auto& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

struct CpuGradients {
  double loss = 0, ce = 0, norm = 0;
  int64_t tokens = 0;
  std::vector<std::vector<float>> grads;  // per parameter, in order
};

// The CPU model's gradients for the micro-batches of step 1, as CpuEngine::train_step computes them
// (same loss scaling, same quantization context).
// With weight_noise > 0 every weight is first scaled by (1 + weight_noise * u), u uniform in [-1, 1]: how
// much the reference itself moves under a perturbation the size of BF16 rounding.
CpuGradients cpu_gradients(const ModelConfig& cfg, const Recipe& recipe, uint64_t seed,
                           const std::vector<Batch>& batches, double weight_noise = 0.0) {
  Olmo2Model ref(cfg, recipe);
  ref.init_parameters(seed);
  ref.quant_context().seed = seed;
  if (weight_noise > 0) {
    std::mt19937 rng(static_cast<uint32_t>(seed) ^ 0x5eedu);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& w : ref.params().values()) w *= 1.0f + static_cast<float>(weight_noise) * u(rng);
  }
  CpuGradients out;
  for (const auto& b : batches)
    for (int32_t t : b.targets) out.tokens += t >= 0;
  ref.params().zero_grads();
  for (size_t i = 0; i < batches.size(); ++i) {
    const Batch& b = batches[i];
    ref.quant_context().call = (uint64_t{1} << 8) | i;
    ref.forward(b.tokens.data(), b.batch, b.seq);
    const auto s =
        ref.loss(b.targets.data(), true, static_cast<float>(1.0 / static_cast<double>(out.tokens)));
    out.loss += s.loss;
    out.ce += s.ce;
    ref.backward();
  }
  out.loss /= static_cast<double>(out.tokens);
  out.ce /= static_cast<double>(out.tokens);
  out.norm = global_grad_norm(ref.params());
  for (int i = 0; i < ref.params().size(); ++i) {
    const auto g = ref.params().grad(i);
    out.grads.emplace_back(g.begin(), g.end());
  }
  return out;
}

class CudaEngineVsCpu : public ::testing::TestWithParam<EngineCase> {};

TEST_P(CudaEngineVsCpu, SameInitialWeightsAndGradientsAtTheSameWeights) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const EngineCase ec = GetParam();
  const ModelConfig cfg = engine_config(ec.config);
  const Recipe recipe = load_recipe(ec.recipe);
  auto gpu = make_cuda_engine(cfg, recipe, seed);
  auto cpu = make_cpu_engine(cfg, recipe, seed);
  EXPECT_NE(gpu->device_name().find("cuda:0"), std::string::npos);
  const auto params = cpu->parameters();
  const auto gparams = gpu->parameters();
  ASSERT_EQ(params.size(), gparams.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(gparams[i].name, params[i].name);
    EXPECT_EQ(gparams[i].shape, params[i].shape);
    EXPECT_EQ(gparams[i].weight_decay, params[i].weight_decay);
    EXPECT_EQ(read_param(*gpu, gparams[i]), read_param(*cpu, params[i])) << params[i].name;
  }
  // Two micro-batches of different shapes (accumulation, arena growth), some ignored targets. NVFP4's
  // weight-gradient GEMM reduces over the tokens: a multiple of 128 for the block128 scales.
  const bool quantized = recipe.linear.quantized();
  const std::vector<Batch> batches = {random_batch(rng, cfg, 1, quantized ? 128 : 48),
                                      random_batch(rng, cfg, 2, quantized ? 128 : 64)};
  auto* probe = dynamic_cast<GradientProbe*>(gpu.get());
  ASSERT_NE(probe, nullptr);
  const StepStats gs = probe->compute_gradients(batches);
  const CpuGradients ref = cpu_gradients(cfg, recipe, seed, batches);
  // An NVFP4 network is chaotic under BF16-sized changes (RTN codes flip at grid boundaries): on the CPU
  // alone, weights perturbed by 2^-9 move the gradients by 0.3-0.6 relative (measured 2026-11-29; BF16: 0.01).
  // The CUDA engine (BF16 activations) is held to 1.5x that self-sensitivity, plus the BF16 tolerance.
  double grad_tol = ec.grad_tol;
  std::vector<double> self_sens;
  if (quantized) {
    const CpuGradients moved = cpu_gradients(cfg, recipe, seed, batches, std::ldexp(1.0, -9));
    for (size_t i = 0; i < params.size(); ++i) self_sens.push_back(rel_err(moved.grads[i], ref.grads[i]));
  }
  const std::string tag = "[" + cfg.name + ", " + recipe.name + "] ";
  std::cout << tag << "loss cuda " << gs.loss << " cpu " << ref.loss << ", grad norm cuda " << gs.grad_norm
            << " cpu " << ref.norm << "\n";
  EXPECT_EQ(gs.tokens, ref.tokens);
  EXPECT_NEAR(gs.loss, ref.loss, ec.loss_tol * ref.loss);
  EXPECT_NEAR(gs.ce_loss, ref.ce, ec.loss_tol * ref.ce);
  EXPECT_NEAR(gs.grad_norm, ref.norm, ec.grad_tol * ref.norm);
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> g(static_cast<size_t>(params[i].numel()));
    probe->read_gradient(params[i].name, g);
    const double e = rel_err(g, ref.grads[i]);
    const double tol = quantized ? 1.5 * self_sens[i] + grad_tol : grad_tol;
    EXPECT_LT(e, tol) << "gradient of " << params[i].name
                      << (quantized ? " (CPU self-sensitivity " + std::to_string(self_sens[i]) + ")" : "");
    if (e > worst) {
      worst = e;
      worst_name = params[i].name;
    }
  }
  std::cout << tag << "worst gradient relative error " << worst << " (" << worst_name << ")\n";
}

TEST_P(CudaEngineVsCpu, TwentyStepsLowerTheLossAndTrackTheCpuCurve) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const EngineCase ec = GetParam();
  const ModelConfig cfg = engine_config(ec.config);
  const Recipe recipe = load_recipe(ec.recipe);
  auto gpu = make_cuda_engine(cfg, recipe, seed);
  auto cpu = make_cpu_engine(cfg, recipe, seed);
  // A small pool of batches seen again and again: the loss must fall well below its initial value.
  std::vector<std::vector<Batch>> pool;
  for (int i = 0; i < 2; ++i) pool.push_back({random_batch(rng, cfg, 2, 64), random_batch(rng, cfg, 2, 64)});
  StepHyper h;
  h.lr = 3e-3f;
  std::vector<double> lg, lc;
  const std::string tag = "[" + cfg.name + ", " + recipe.name + "] ";
  for (int step = 0; step < 20; ++step) {
    const auto& mb = pool[static_cast<size_t>(step) % pool.size()];
    const StepStats sg = gpu->train_step(mb, h), sc = cpu->train_step(mb, h);
    lg.push_back(sg.loss);
    lc.push_back(sc.loss);
    std::cout << tag << "step " << step << " loss cuda " << sg.loss << " cpu " << sc.loss
              << " grad norm cuda " << sg.grad_norm << " cpu " << sc.grad_norm << "\n";
    // BF16 and FP32 trajectories separate as a memorising run sharpens (seen on the H200: 6-8% apart by
    // step 18 at lr 3e-3), so only the first steps are held to the tight bound ...
    if (step < 5) EXPECT_NEAR(sg.loss, sc.loss, ec.curve_tol * sc.loss) << "step " << step;
  }
  // ... and the second half of the curve to a looser one, on its average (an FP4 recipe's SR flips wherever
  // the two engines' values differ by an ulp, so single late steps of a memorising run scatter: nvidia-nvfp4
  // on the H200, steps 15-19 averaged 0.46 vs 0.38, steps 10-19 1.07 vs 0.98).
  double half_g = 0, half_c = 0, tail_c = 0;
  for (int i = 10; i < 20; ++i) half_g += lg[static_cast<size_t>(i)] / 10, half_c += lc[static_cast<size_t>(i)] / 10;
  for (int i = 15; i < 20; ++i) tail_c += lc[static_cast<size_t>(i)] / 5;
  EXPECT_NEAR(half_g, half_c, 3 * ec.curve_tol * half_c);
  EXPECT_LT(lg.back(), lg.front() - 0.5);
  EXPECT_LT(lc.back(), lc.front() - 0.5);
  // The engine's evaluation agrees with the CPU engine's after the same training. Near zero a memorised
  // loss differs by a large factor between two trajectories (FP4 on the H200: 0.082 vs 0.111), so the
  // bound is in units of the loss level of the last five steps, or twice the widest gap the two training
  // curves themselves showed there, whichever is larger (bf16 on tiny, H200: steps 15-19 up to 0.15 apart,
  // evaluation 1.52 vs 1.73). A broken evaluation still fails: it owes nothing to the training curves.
  double tail_gap = 0;
  for (size_t i = 15; i < 20; ++i) tail_gap = std::max(tail_gap, std::abs(lg[i] - lc[i]));
  const Batch& eb = pool[0][0];
  const StepStats eg = gpu->evaluate(eb), ecpu = cpu->evaluate(eb);
  EXPECT_EQ(eg.tokens, ecpu.tokens);
  EXPECT_NEAR(eg.loss, ecpu.loss, std::max(3 * ec.curve_tol * tail_c, 2 * tail_gap));
}

// OsciReset on the CUDA engine: the trainer drives it through read_parameter / write_parameter. With
// threshold 0 every tracked element is reset when the window closes, so each tracked weight read back from
// the device must be Q(w) of the weights just before (the forward quantizer, scales recomputed), bit for bit;
// training then goes on with finite losses.
TEST(CudaEngine, OsciResetWritesGridPointsThroughTheEngine) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = engine_config("small64");
  const Recipe recipe = load_recipe("tetrajet-v2-base");
  auto gpu = make_cuda_engine(cfg, recipe, seed);
  OsciResetConfig oc;
  oc.enabled = true;
  oc.window = 2;
  oc.period = 4;
  oc.start = 2;
  oc.threshold = 1e-30;  // the smallest risk that counts: every element whose grid point moved is reset
  OsciReset osci(oc, 12, osci_targets(gpu->parameters(), recipe, cfg.n_layers));
  ASSERT_FALSE(osci.targets().empty());
  EngineWeightAccess weights(*gpu);
  StepHyper h;
  h.lr = 3e-3f;
  int windows = 0;
  int64_t total_reset = 0;
  for (int step = 1; step <= 8; ++step) {
    const Batch batch = random_batch(rng, cfg, 2, 64);  // 128 tokens: block128 scaling along the tokens
    ASSERT_TRUE(std::isfinite(gpu->train_step({&batch, 1}, h).loss)) << "step " << step;
    std::vector<std::vector<float>> before;
    for (const OsciTarget& t : osci.targets()) {
      before.emplace_back(static_cast<size_t>(t.rows * t.cols));
      gpu->read_parameter(t.name, before.back());
    }
    const std::optional<OsciResetReport> report = osci.after_step(step, weights);
    if (!report) continue;
    ++windows;
    for (size_t i = 0; i < osci.targets().size(); ++i) {
      const OsciTarget& t = osci.targets()[i];
      const Nvfp4Tensor q = quantize_nvfp4(before[i].data(), t.rows, t.cols, t.q2, QuantRandomness{});
      std::vector<float> want(before[i].size()), got(before[i].size());
      dequantize(q, want.data());
      gpu->read_parameter(t.name, got);
      // Each element is either its grid point Q(w) (reset) or untouched; where the two differ the engine's
      // value says which, and those counts bound the report's (an element already on its grid point can be
      // reset without a visible change).
      int64_t surely_reset = 0, reset_or_kept = 0, wrong = 0;
      for (size_t e = 0; e < got.size(); ++e) {
        const bool is_want = std::memcmp(&got[e], &want[e], sizeof(float)) == 0;
        const bool is_before = std::memcmp(&got[e], &before[i][e], sizeof(float)) == 0;
        surely_reset += is_want && !is_before;
        reset_or_kept += is_want && is_before;
        wrong += !is_want && !is_before;
      }
      EXPECT_EQ(wrong, 0) << t.name << " at step " << step << ": elements neither reset nor kept";
      EXPECT_GE(report->layers[i].reset, surely_reset) << t.name;
      EXPECT_LE(report->layers[i].reset, surely_reset + reset_or_kept) << t.name;
      total_reset += surely_reset;
    }
  }
  EXPECT_EQ(windows, 2);  // windows close after steps 4 and 8
  EXPECT_GT(total_reset, 0) << "no weight moved to its grid point: the reset never reached the engine";
}

// tiny: head size 32 (the fallback attention); small64: head size 64 (the fused attention kernels).
INSTANTIATE_TEST_SUITE_P(Recipes, CudaEngineVsCpu,
                         ::testing::Values(EngineCase{"tiny", "bf16", 1e-2, 3e-2, 3e-2},
                                           EngineCase{"small64", "bf16", 1e-2, 3e-2, 3e-2},
                                           EngineCase{"small64", "nvidia-nvfp4", 2e-2, 5e-2, 5e-2},
                                           EngineCase{"small64", "tetrajet-v2-base", 2e-2, 5e-2, 5e-2}),
                         case_name);

TEST(CudaEngine, EvaluateAndLastLogitsMatchCpu) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = engine_config("small64");
  auto gpu = make_cuda_engine(cfg, Recipe{}, seed);
  auto cpu = make_cpu_engine(cfg, Recipe{}, seed);
  const Batch batch = random_batch(rng, cfg, 3, 40, 0.3);
  const StepStats eg = gpu->evaluate(batch), ec = cpu->evaluate(batch);
  EXPECT_EQ(eg.tokens, ec.tokens);
  EXPECT_NEAR(eg.loss, ec.loss, 1e-2 * ec.loss);
  EXPECT_EQ(eg.loss, eg.ce_loss);
  std::vector<float> lg(static_cast<size_t>(3) * cfg.vocab_size), lc(lg.size());
  gpu->last_logits(batch, lg);
  cpu->last_logits(batch, lc);
  std::vector<float> real_g, real_c;
  for (int b = 0; b < 3; ++b)
    for (int j = 0; j < cfg.vocab_size; ++j) {
      const size_t i = static_cast<size_t>(b) * cfg.vocab_size + j;
      if (j >= cfg.vocab_real) {
        EXPECT_EQ(lg[i], -std::numeric_limits<float>::infinity());
      } else {
        real_g.push_back(lg[i]);
        real_c.push_back(lc[i]);
      }
    }
  EXPECT_LT(rel_err(real_g, real_c), 3e-2);
  std::vector<float> small(3);
  EXPECT_NE(error_of([&] { gpu->last_logits(batch, small); }).find("need"), std::string::npos);
}

TEST(CudaEngine, StateMovesBetweenCudaAndCpuEngines) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = engine_config("tiny");
  const Batch batch = random_batch(rng, cfg, 2, 32), next = random_batch(rng, cfg, 2, 32);
  StepHyper h;
  h.lr = 5e-3f;
  auto gpu = make_cuda_engine(cfg, Recipe{}, seed);
  for (int i = 0; i < 3; ++i) gpu->train_step({&batch, 1}, h);
  const auto state = gpu->save_state();

  auto cpu = make_cpu_engine(cfg, Recipe{}, seed + 1);
  cpu->load_state(state);
  const auto back = cpu->save_state();  // the CPU engine writes exactly what it read
  ASSERT_EQ(back.size(), state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    EXPECT_EQ(back[i].name, state[i].name);
    EXPECT_EQ(back[i].dtype, state[i].dtype);
    EXPECT_EQ(back[i].shape, state[i].shape);
    EXPECT_EQ(back[i].bytes, state[i].bytes) << state[i].name;
  }

  auto gpu2 = make_cuda_engine(cfg, Recipe{}, seed + 2);
  gpu2->load_state(back);
  for (const auto& p : gpu->parameters()) EXPECT_EQ(read_param(*gpu2, p), read_param(*gpu, p)) << p.name;
  const StepStats a = gpu->train_step({&next, 1}, h), b = gpu2->train_step({&next, 1}, h);
  const StepStats c = cpu->train_step({&next, 1}, h);
  EXPECT_EQ(a.loss, b.loss);  // same state, same kernels: the resumed engine repeats the step exactly
  EXPECT_EQ(a.grad_norm, b.grad_norm);
  for (const auto& p : gpu->parameters()) EXPECT_EQ(read_param(*gpu2, p), read_param(*gpu, p)) << p.name;
  EXPECT_NEAR(c.loss, a.loss, 2e-2 * a.loss);  // the CPU engine continues the same training
  const auto s2 = gpu2->save_state();
  int64_t step = 0;
  std::memcpy(&step, s2.back().bytes.data(), sizeof(step));
  EXPECT_EQ(s2.back().name, "adamw.step");
  EXPECT_EQ(step, 4);

  // A state missing a tensor or with a wrong shape is refused and changes nothing.
  auto broken = state;
  broken.erase(broken.begin() + 1);
  EXPECT_NE(error_of([&] { gpu2->load_state(broken); }).find("is missing"), std::string::npos);
  broken = state;
  broken[0].shape = {1, 2};
  EXPECT_NE(error_of([&] { gpu2->load_state(broken); }).find("has shape"), std::string::npos);
  for (const auto& p : gpu->parameters()) EXPECT_EQ(read_param(*gpu2, p), read_param(*gpu, p)) << p.name;
}

TEST(CudaEngine, NonFiniteLossThrowsNamingTheParameterAndChangesNothing) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = engine_config("tiny");
  auto gpu = make_cuda_engine(cfg, Recipe{}, seed);
  const Batch batch = random_batch(rng, cfg, 2, 16);
  StepHyper h;
  const auto params = gpu->parameters();
  std::vector<std::vector<float>> before;
  for (const auto& p : params) before.push_back(read_param(*gpu, p));
  auto head = before.back();
  ASSERT_EQ(params.back().name, "lm_head");
  head[5] = std::numeric_limits<float>::quiet_NaN();
  gpu->write_parameter("lm_head", head);
  const std::string msg = error_of([&] { gpu->train_step({&batch, 1}, h); });
  EXPECT_NE(msg.find("train step 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lm_head"), std::string::npos) << msg;
  for (size_t i = 0; i + 1 < params.size(); ++i)
    EXPECT_EQ(read_param(*gpu, params[i]), before[i]) << params[i].name;
  gpu->write_parameter("lm_head", before.back());
  const StepStats ok = gpu->train_step({&batch, 1}, h);
  EXPECT_TRUE(std::isfinite(ok.loss));
  const auto st = gpu->save_state();
  int64_t step = 0;
  std::memcpy(&step, st.back().bytes.data(), sizeof(step));
  EXPECT_EQ(step, 1);  // the failed step was not counted
}

TEST(CudaEngine, RefusesBadBatchesRecipesAndDevices) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ModelConfig cfg = engine_config("tiny");
  auto gpu = make_cuda_engine(cfg, Recipe{}, seed);
  StepHyper h;
  Batch bad = random_batch(rng, cfg, 1, 8);
  bad.tokens[3] = cfg.vocab_size;
  EXPECT_NE(error_of([&] {
              gpu->train_step({&bad, 1}, h);
            }).find("outside the embedding table"),
            std::string::npos);
  bad = random_batch(rng, cfg, 1, 8);
  bad.targets[2] = cfg.vocab_real;
  EXPECT_NE(error_of([&] {
              gpu->train_step({&bad, 1}, h);
            }).find("outside the vocabulary"),
            std::string::npos);
  bad = random_batch(rng, cfg, 1, cfg.max_seq_len + 1);
  EXPECT_NE(error_of([&] { gpu->evaluate(bad); }).find("max_seq_len"), std::string::npos);
  bad = random_batch(rng, cfg, 1, 8, 1.0);
  EXPECT_NE(error_of([&] { gpu->train_step({&bad, 1}, h); }).find("no target tokens"), std::string::npos);
  h.lr = -1.0f;
  const Batch good = random_batch(rng, cfg, 1, 8);
  EXPECT_NE(error_of([&] { gpu->train_step({&good, 1}, h); }).find("learning rate"), std::string::npos);

  Recipe quant;
  quant.name = "nvfp4-test";
  quant.linear[Operand::kQ1X].format = QuantFormat::kNvfp4;
  // A mixed BF16/NVFP4 operand set is not something the CUDA NVFP4 layer runs: refused, naming the layer.
  const std::string msg = error_of([&] { make_cuda_engine(cfg, quant, seed); });
  EXPECT_NE(msg.find("blocks.0.attn.wqkv"), std::string::npos) << msg;
  Recipe unknown;  // the recipe loader refuses unknown names too; the engine checks a Recipe built in code
  unknown.optimizer = "sgd";
  EXPECT_NE(error_of([&] { make_cuda_engine(cfg, unknown, seed); }).find("not available in the CUDA engine"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_cuda_engine(cfg, Recipe{}, seed, 999); }).find("does not exist"),
            std::string::npos);
}

}  // namespace
}  // namespace fp4
