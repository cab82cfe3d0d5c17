// Tests of the fused CUDA attention (ops/cuda/attention/attention_cuda.h) against causal softmax attention
// computed in double on the CPU from the same BF16-rounded inputs: output, LSE and the three gradients for
// ragged T, several B/H, both head sizes, strided (fused QKV) and padded layouts, every compiled tile
// configuration, large scores, causality, workspace reuse and argument errors. Outputs are poisoned with NaN
// before each call so an element never written fails, and padding columns must come back untouched.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ops/cuda/attention/attention_cuda.h"
#include "ops/cuda/attention/attention_variants.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_stream.h"

namespace fp4::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr uint16_t kPoisonBits = 0x7FC1;  // a BF16 NaN that no kernel produces by arithmetic
constexpr double kOutTol = 1e-2, kGradTol = 2e-2, kLseTol = 1e-4;

struct Shape {
  int B, T, H, D;
};

// Extra columns past each matrix's heads: the kernels must neither read (they hold NaN) nor write them.
struct Layout {
  int qkv_pad = 0, out_pad = 0, dqkv_pad = 0;
};

bf16 from_bits(uint16_t b) {
  bf16 x;
  std::memcpy(&x, &b, sizeof(b));
  return x;
}
uint16_t to_bits(bf16 x) {
  uint16_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}
float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16(x));
}

// Q, K, V, dO as [B][T][H][D] floats, every value exactly representable in BF16.
struct Inputs {
  Shape s;
  std::vector<float> q, k, v, dout;
  size_t at(int b, int t, int h, int d) const {
    return ((static_cast<size_t>(b) * s.T + t) * s.H + h) * s.D + d;
  }
};

// qk_std scales Q and K: scores have standard deviation qk_std^2 (scale = 1/sqrt(D)).
Inputs make_inputs(Shape s, uint32_t seed, float qk_std) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  const size_t n = static_cast<size_t>(s.B) * s.T * s.H * s.D;
  Inputs in{s, std::vector<float>(n), std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  for (size_t i = 0; i < n; ++i) {
    in.q[i] = round_bf16(qk_std * normal(rng));
    in.k[i] = round_bf16(qk_std * normal(rng));
    in.v[i] = round_bf16(normal(rng));
    in.dout[i] = round_bf16(normal(rng));
  }
  return in;
}

// Causal attention and its analytical gradients in double: out, dq, dk, dv [B][T][H][D], lse [B][H][T].
struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
  double max_abs_score = 0;
};

Reference reference_attention(const Inputs& in) {
  const Shape& s = in.s;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));
  const size_t n = in.q.size();
  Reference r{std::vector<double>(n), std::vector<double>(static_cast<size_t>(s.B) * s.H * s.T),
              std::vector<double>(n), std::vector<double>(n), std::vector<double>(n)};
  std::vector<double> p(s.T), dp(s.T);
  auto dot = [&](const std::vector<float>& a, size_t ia, const std::vector<float>& b, size_t ib) {
    double acc = 0;
    for (int d = 0; d < s.D; ++d) acc += static_cast<double>(a[ia + d]) * b[ib + d];
    return acc;
  };
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.H; ++h)
      for (int i = 0; i < s.T; ++i) {
        const size_t qi = in.at(b, i, h, 0);
        double m = -std::numeric_limits<double>::infinity();
        for (int j = 0; j <= i; ++j) {
          p[j] = scale * dot(in.q, qi, in.k, in.at(b, j, h, 0));
          m = std::max(m, p[j]);
          r.max_abs_score = std::max(r.max_abs_score, std::fabs(p[j]));
        }
        double l = 0;
        for (int j = 0; j <= i; ++j) l += std::exp(p[j] - m);
        const double lse = m + std::log(l);
        r.lse[(static_cast<size_t>(b) * s.H + h) * s.T + i] = lse;
        double delta = 0;
        for (int j = 0; j <= i; ++j) {
          p[j] = std::exp(p[j] - lse);
          dp[j] = dot(in.dout, qi, in.v, in.at(b, j, h, 0));
          delta += p[j] * dp[j];
        }
        for (int j = 0; j <= i; ++j) {
          const size_t kj = in.at(b, j, h, 0);
          const double ds = p[j] * (dp[j] - delta);
          for (int d = 0; d < s.D; ++d) {
            r.out[qi + d] += p[j] * in.v[kj + d];
            r.dq[qi + d] += scale * ds * in.k[kj + d];
            r.dk[kj + d] += scale * ds * in.q[qi + d];
            r.dv[kj + d] += p[j] * in.dout[qi + d];
          }
        }
      }
  return r;
}

// ||got - want|| / ||want|| (the absolute norm when want is all zero, e.g. dq and dk for T = 1).
double rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = got[i] - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The two passes, through the public entry points or one tile configuration.
struct Launchers {
  std::function<void(const bf16*, const bf16*, const bf16*, int, bf16*, int, float*, const Shape&, float,
                     cudaStream_t)>
      forward;
  std::function<void(const bf16*, const bf16*, const bf16*, int, const bf16*, const bf16*, int, const float*,
                     bf16*, bf16*, bf16*, int, const Shape&, float, void*, cudaStream_t)>
      backward;
};

Launchers public_launchers() {
  return Launchers{[](const bf16* q, const bf16* k, const bf16* v, int ld, bf16* out, int ld_out, float* lse,
                      const Shape& s, float scale, cudaStream_t st) {
                     attention_forward(q, k, v, ld, out, ld_out, lse, s.B, s.T, s.H, s.D, scale, st);
                   },
                   [](const bf16* q, const bf16* k, const bf16* v, int ld, const bf16* out, const bf16* dout,
                      int ld_out, const float* lse, bf16* dq, bf16* dk, bf16* dv, int ld_d, const Shape& s,
                      float scale, void* ws, cudaStream_t st) {
                     attention_backward(q, k, v, ld, out, dout, ld_out, lse, dq, dk, dv, ld_d, s.B, s.T, s.H,
                                        s.D, scale, ws, st);
                   }};
}

Launchers variant_launchers(const attn::FwdVariant& fv, const attn::BwdVariant& bv) {
  return Launchers{
      [&fv](const bf16* q, const bf16* k, const bf16* v, int ld, bf16* out, int ld_out, float* lse,
            const Shape& s, float scale, cudaStream_t st) {
        fv.launch(attn::FwdParams{q, k, v, ld, out, ld_out, lse, s.B, s.T, s.H, scale * attn::kLog2e}, st);
      },
      [&bv](const bf16* q, const bf16* k, const bf16* v, int ld, const bf16* out, const bf16* dout,
            int ld_out, const float* lse, bf16* dq, bf16* dk, bf16* dv, int ld_d, const Shape& s, float scale,
            void* ws, cudaStream_t st) {
        bv.launch(attn::make_bwd_args(q, k, v, ld, out, dout, ld_out, lse, dq, dk, dv, ld_d, s.B, s.T, s.H,
                                      s.D, scale, ws),
                  st);
      }};
}

// Results in [B][T][H][D] (lse [B][H][T]), plus what the poison checks found.
struct GpuResult {
  std::vector<float> out, lse, dq, dk, dv;
  int64_t unwritten = 0;        // output elements still NaN (or otherwise non-finite)
  int64_t padding_touched = 0;  // padding elements that lost their poison
};

// Problem buffers on the device in the engine's layout: fused QKV [B*T][3HD + pad], out and dO
// [B*T][HD + pad], fused dQKV [B*T][3HD + pad], lse [B][H][T], the backward workspace.
class DeviceProblem {
 public:
  DeviceProblem(const Inputs& in, Layout lay)
      : s_(in.s),
        rows_(static_cast<int64_t>(s_.B) * s_.T),
        hd_(s_.H * s_.D),
        ld_qkv_(3 * hd_ + lay.qkv_pad),
        ld_out_(hd_ + lay.out_pad),
        ld_dqkv_(3 * hd_ + lay.dqkv_pad),
        qkv_(rows_ * ld_qkv_),
        out_(rows_ * ld_out_),
        dout_(rows_ * ld_out_),
        dqkv_(rows_ * ld_dqkv_),
        lse_(static_cast<size_t>(s_.B) * s_.H * s_.T),
        ws_(attention_backward_workspace_bytes(s_.B, s_.T, s_.H, s_.D)) {
    upload_inputs(in);
  }

  void upload_inputs(const Inputs& in) {
    std::vector<bf16> qkv(qkv_.size(), from_bits(kPoisonBits)), dout(dout_.size(), from_bits(kPoisonBits));
    for_each_element([&](int64_t row, int col, size_t i) {
      qkv[row * ld_qkv_ + col] = __float2bfloat16(in.q[i]);
      qkv[row * ld_qkv_ + hd_ + col] = __float2bfloat16(in.k[i]);
      qkv[row * ld_qkv_ + 2 * hd_ + col] = __float2bfloat16(in.v[i]);
      dout[row * ld_out_ + col] = __float2bfloat16(in.dout[i]);
    });
    qkv_.upload(qkv.data(), qkv.size());
    dout_.upload(dout.data(), dout.size());
  }

  // Poisons every output, runs forward then backward on one stream, and reads everything back.
  GpuResult run(const Launchers& l) {
    poison();
    const float scale = 1.f / std::sqrt(static_cast<float>(s_.D));
    Stream stream;
    const bf16* q = qkv_.data();
    l.forward(q, q + hd_, q + 2 * hd_, ld_qkv_, out_.data(), ld_out_, lse_.data(), s_, scale, stream.get());
    l.backward(q, q + hd_, q + 2 * hd_, ld_qkv_, out_.data(), dout_.data(), ld_out_, lse_.data(),
               dqkv_.data(), dqkv_.data() + hd_, dqkv_.data() + 2 * hd_, ld_dqkv_, s_, scale, ws_.data(),
               stream.get());
    FP4_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    return read_back();
  }

  // Only the backward again, on whatever the workspace holds from before.
  GpuResult rerun_backward(const Launchers& l) {
    const std::vector<bf16> poison(dqkv_.size(), from_bits(kPoisonBits));
    dqkv_.upload(poison.data(), poison.size());
    const float scale = 1.f / std::sqrt(static_cast<float>(s_.D));
    const bf16* q = qkv_.data();
    l.backward(q, q + hd_, q + 2 * hd_, ld_qkv_, out_.data(), dout_.data(), ld_out_, lse_.data(),
               dqkv_.data(), dqkv_.data() + hd_, dqkv_.data() + 2 * hd_, ld_dqkv_, s_, scale, ws_.data(),
               nullptr);
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    return read_back();
  }

 private:
  template <typename F>
  void for_each_element(F&& f) const {
    for (int b = 0; b < s_.B; ++b)
      for (int t = 0; t < s_.T; ++t)
        for (int h = 0; h < s_.H; ++h)
          for (int d = 0; d < s_.D; ++d)
            f(static_cast<int64_t>(b) * s_.T + t, h * s_.D + d,
              ((static_cast<size_t>(b) * s_.T + t) * s_.H + h) * s_.D + d);
  }

  void poison() {
    const std::vector<bf16> p_out(out_.size(), from_bits(kPoisonBits)),
        p_dqkv(dqkv_.size(), from_bits(kPoisonBits));
    out_.upload(p_out.data(), p_out.size());
    dqkv_.upload(p_dqkv.data(), p_dqkv.size());
    const std::vector<float> p_lse(lse_.size(), std::numeric_limits<float>::quiet_NaN());
    lse_.upload(p_lse.data(), p_lse.size());
    FP4_CUDA_CHECK(cudaMemset(ws_.data(), 0xFF, ws_.size()));  // NaN floats: the backward must zero its own
  }

  // Gathers `count` head blocks of width hd starting at col0 of a [rows][ld] matrix; counts non-finite
  // values inside and padding columns (from cols_used on) that lost the poison.
  void gather(const std::vector<bf16>& m, int64_t ld, int col0, std::vector<float>& dst, GpuResult& r) const {
    dst.assign(static_cast<size_t>(rows_) * hd_, 0.f);
    for_each_element([&](int64_t row, int col, size_t i) {
      dst[i] = __bfloat162float(m[row * ld + col0 + col]);
      if (!std::isfinite(dst[i])) ++r.unwritten;
    });
  }
  void count_padding(const std::vector<bf16>& m, int64_t ld, int64_t cols_used, GpuResult& r) const {
    for (int64_t row = 0; row < rows_; ++row)
      for (int64_t c = cols_used; c < ld; ++c)
        if (to_bits(m[row * ld + c]) != kPoisonBits) ++r.padding_touched;
  }

  GpuResult read_back() const {
    GpuResult r;
    std::vector<bf16> out(out_.size()), dqkv(dqkv_.size());
    out_.download(out.data(), out.size());
    dqkv_.download(dqkv.data(), dqkv.size());
    r.lse.resize(lse_.size());
    lse_.download(r.lse.data(), r.lse.size());
    for (float x : r.lse)
      if (!std::isfinite(x)) ++r.unwritten;
    gather(out, ld_out_, 0, r.out, r);
    gather(dqkv, ld_dqkv_, 0, r.dq, r);
    gather(dqkv, ld_dqkv_, hd_, r.dk, r);
    gather(dqkv, ld_dqkv_, 2 * hd_, r.dv, r);
    count_padding(out, ld_out_, hd_, r);
    count_padding(dqkv, ld_dqkv_, 3 * hd_, r);
    return r;
  }

  Shape s_;
  int64_t rows_;
  int hd_, ld_qkv_, ld_out_, ld_dqkv_;
  DeviceBuffer<bf16> qkv_, out_, dout_, dqkv_;
  DeviceBuffer<float> lse_;
  DeviceBuffer<unsigned char> ws_;
};

std::string describe(const Shape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
         " D=" + std::to_string(s.D);
}

void expect_matches(const GpuResult& g, const Reference& ref, double grad_tol = kGradTol) {
  EXPECT_EQ(g.unwritten, 0) << "outputs left NaN/non-finite";
  EXPECT_EQ(g.padding_touched, 0) << "writes outside the heads' columns";
  EXPECT_LT(rel_error(g.out, ref.out), kOutTol) << "out";
  EXPECT_LT(rel_error(g.lse, ref.lse), kLseTol) << "lse";
  EXPECT_LT(rel_error(g.dq, ref.dq), grad_tol) << "dq";
  EXPECT_LT(rel_error(g.dk, ref.dk), grad_tol) << "dk";
  EXPECT_LT(rel_error(g.dv, ref.dv), grad_tol) << "dv";
}

struct Case {
  Shape s;
  Layout lay;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << describe(c.s) << " pads qkv/out/dqkv " << c.lay.qkv_pad << "/" << c.lay.out_pad << "/"
      << c.lay.dqkv_pad;
}

class AttentionShapes : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionShapes, MatchesDoubleReference) {
  const Case c = GetParam();
  const uint32_t seed = 1000u + static_cast<uint32_t>(c.s.B * 7919 + c.s.T * 131 + c.s.H * 17 + c.s.D);
  SCOPED_TRACE(describe(c.s) + " seed=" + std::to_string(seed));
  const Inputs in = make_inputs(c.s, seed, 1.f);
  DeviceProblem dev(in, c.lay);
  expect_matches(dev.run(public_launchers()), reference_attention(in));
}

// T = 1, tile remainders (17, 100, 1000), exact tiles (64, 128, 256), B 1..3, H 1..4, both head sizes; the
// padded layouts put NaN in every column the kernels must not read.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionShapes,
                         ::testing::Values(Case{{1, 1, 1, 64}, {}}, Case{{2, 1, 4, 128}, {}},
                                           Case{{1, 17, 2, 64}, {}}, Case{{1, 17, 1, 128}, {8, 8, 8}},
                                           Case{{2, 100, 3, 64}, {8, 16, 24}}, Case{{2, 100, 2, 128}, {}},
                                           Case{{1, 64, 1, 64}, {}}, Case{{1, 128, 2, 128}, {}},
                                           Case{{3, 256, 4, 64}, {}}, Case{{3, 256, 2, 128}, {0, 8, 0}},
                                           Case{{1, 1000, 2, 64}, {}}, Case{{1, 1000, 1, 128}, {16, 0, 8}},
                                           Case{{2, 193, 3, 64}, {}}, Case{{1, 333, 2, 128}, {}}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return "B" + std::to_string(c.s.B) + "T" + std::to_string(c.s.T) + "H" +
                                  std::to_string(c.s.H) + "D" + std::to_string(c.s.D) +
                                  (c.lay.qkv_pad + c.lay.out_pad + c.lay.dqkv_pad > 0 ? "Padded" : "");
                         });

// Every compiled tile configuration (not only the defaults the entry points use) on ragged shapes.
TEST(AttentionVariants, EveryTileConfigurationMatchesReference) {
  for (const int D : {64, 128}) {
    for (const Shape s : {Shape{2, 200, 3, D}, Shape{1, 777, 1, D}, Shape{1, 5, 2, D}}) {
      const Inputs in = make_inputs(s, 77u + static_cast<uint32_t>(s.T + D), 1.f);
      const Reference ref = reference_attention(in);
      DeviceProblem dev(in, Layout{});
      for (const attn::FwdVariant& fv : attn::forward_variants()) {
        if (fv.head_dim != D) continue;
        SCOPED_TRACE(describe(s) + " " + fv.name);
        expect_matches(dev.run(variant_launchers(fv, attn::default_backward_variant(D))), ref);
      }
      for (const attn::BwdVariant& bv : attn::backward_variants()) {
        if (bv.head_dim != D || (bv.wgmma && !attn::device_has_wgmma())) continue;
        SCOPED_TRACE(describe(s) + " " + bv.name);
        expect_matches(dev.run(variant_launchers(attn::default_forward_variant(D), bv)), ref);
      }
    }
  }
}

// The wgmma backward (the default on Hopper) on the shapes that stress its tiling: 128-key CTAs of two
// 64-key warpgroups and 64-query steps, so T = 1, T just under / at / over 64 and 128, odd T, several B and
// H, padded layouts; each compared with the double reference and with the mma.sync fallback kernel.
TEST(AttentionWgmma, BackwardMatchesReferenceAndFallback) {
  if (!attn::device_has_wgmma()) GTEST_SKIP() << "no sm_90 device";
  for (const attn::BwdVariant& bv : attn::backward_variants()) {
    if (!bv.wgmma) continue;
    const int D = bv.head_dim;
    const attn::BwdVariant* fallback = nullptr;
    for (const attn::BwdVariant& other : attn::backward_variants())
      if (!other.wgmma && other.head_dim == D && fallback == nullptr) fallback = &other;
    ASSERT_NE(fallback, nullptr);
    for (const Case c : {Case{{1, 1, 1, D}, {}}, Case{{2, 63, 2, D}, {}}, Case{{1, 64, 1, D}, {8, 8, 8}},
                         Case{{1, 65, 3, D}, {}}, Case{{3, 127, 2, D}, {}}, Case{{1, 128, 1, D}, {}},
                         Case{{2, 129, 1, D}, {0, 16, 8}}, Case{{1, 191, 2, D}, {}}, Case{{2, 256, 2, D}, {}},
                         Case{{1, 555, 1, D}, {}}, Case{{1, 1024, 2, D}, {}}}) {
      SCOPED_TRACE(describe(c.s) + " " + bv.name);
      const Inputs in =
          make_inputs(c.s, 3100u + static_cast<uint32_t>(c.s.T * 7 + c.s.B * 3 + c.s.H + D), 1.f);
      const Reference ref = reference_attention(in);
      DeviceProblem dev(in, c.lay);
      const GpuResult fast = dev.run(variant_launchers(attn::default_forward_variant(D), bv));
      expect_matches(fast, ref);
      const GpuResult slow = dev.run(variant_launchers(attn::default_forward_variant(D), *fallback));
      // Same products in another order: the two kernels agree far more closely than either with the
      // reference.
      EXPECT_LT(rel_error(fast.dk, std::vector<double>(slow.dk.begin(), slow.dk.end())), 5e-3)
          << "dk vs fallback";
      EXPECT_LT(rel_error(fast.dv, std::vector<double>(slow.dv.begin(), slow.dv.end())), 5e-3)
          << "dv vs fallback";
      EXPECT_LT(rel_error(fast.dq, std::vector<double>(slow.dq.begin(), slow.dq.end())), 5e-3)
          << "dq vs fallback";
    }
  }
}

// Large scores through the wgmma backward (the public entry point picks it on Hopper), and the environment
// switch FP4_ATTENTION_BWD=mma selects the mma.sync fallback instead.
TEST(AttentionWgmma, DefaultOnHopperAndEnvironmentFallback) {
  if (!attn::device_has_wgmma()) GTEST_SKIP() << "no sm_90 device";
  for (const int D : {64, 128}) {
    EXPECT_TRUE(attn::default_backward_variant(D).wgmma) << "D=" << D;
    ASSERT_EQ(setenv("FP4_ATTENTION_BWD", "mma", 1), 0);
    EXPECT_FALSE(attn::default_backward_variant(D).wgmma) << "D=" << D;
    ASSERT_EQ(unsetenv("FP4_ATTENTION_BWD"), 0);
    const Shape s{2, 333, 2, D};
    const Inputs in = make_inputs(s, 6060u + static_cast<uint32_t>(D), 4.f);
    const Reference ref = reference_attention(in);
    DeviceProblem dev(in, Layout{});
    expect_matches(dev.run(public_launchers()), ref);
  }
}

// ---- pipelined wgmma backward (attention_bwd_wgmma_pipe.cuh) ----

// The first backward configuration of each kind for head size D: the pipelined wgmma kernel (the default on
// Hopper) and the mma.sync kernel (the default with FP4_ATTENTION_BWD=mma).
struct BwdKinds {
  const attn::BwdVariant* pipe = nullptr;
  const attn::BwdVariant* mma = nullptr;
};

BwdKinds backward_kinds(int D) {
  BwdKinds k;
  for (const attn::BwdVariant& v : attn::backward_variants()) {
    if (v.head_dim != D) continue;
    const attn::BwdVariant*& slot = v.wgmma ? k.pipe : k.mma;
    if (slot == nullptr) slot = &v;
  }
  return k;
}

// The message of the fp4::Error that default_backward_variant(D) throws; empty if it returns.
std::string backward_selection_error(int D) {
  try {
    attn::default_backward_variant(D);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

double rel_diff(const std::vector<float>& got, const std::vector<float>& want) {
  return rel_error(got, std::vector<double>(want.begin(), want.end()));
}

// Elements of two results that are not bit-identical.
int64_t bit_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

// The pipelined backward on the shapes that stress its schedule: 128-key CTAs (one or two warpgroups with
// keys past T), the diagonal step that warpgroup 1 skips, 3-stage query tiles and two dS^T buffers (T from 1
// to several hundred steps' worth: 1, 2, 3, 4 and more query tiles per CTA), T < 64, T a multiple of 64 but
// not of 128, T not a multiple of 64, several B and H, padded layouts, large scores. Each result is compared
// with the double reference and with the mma.sync kernel (the same products summed in another order), and
// run twice: dK and dV (no atomics) must repeat bit for bit, which a race on a stage or a dS^T buffer would
// break.
TEST(AttentionWgmmaPipe, BackwardMatchesReferenceMmaKernelAndRepeats) {
  if (!attn::device_has_wgmma()) GTEST_SKIP() << "no sm_90 device";
  struct PipeCase {
    Case c;
    float qk_std;
  };
  for (const int D : {64, 128}) {
    const BwdKinds kinds = backward_kinds(D);
    ASSERT_NE(kinds.pipe, nullptr) << "D=" << D;
    ASSERT_NE(kinds.mma, nullptr) << "D=" << D;
    const attn::FwdVariant& fv = attn::default_forward_variant(D);
    for (const PipeCase pc : {PipeCase{{{1, 1, 1, D}, {}}, 1.f}, PipeCase{{{3, 5, 2, D}, {8, 8, 8}}, 1.f},
                              PipeCase{{{2, 40, 3, D}, {}}, 1.f}, PipeCase{{{1, 63, 1, D}, {}}, 1.f},
                              PipeCase{{{2, 64, 2, D}, {}}, 1.f}, PipeCase{{{1, 65, 1, D}, {0, 8, 16}}, 1.f},
                              PipeCase{{{2, 100, 3, D}, {}}, 1.f}, PipeCase{{{1, 127, 2, D}, {}}, 1.f},
                              PipeCase{{{1, 129, 1, D}, {}}, 1.f}, PipeCase{{{2, 192, 2, D}, {8, 0, 0}}, 1.f},
                              PipeCase{{{1, 200, 1, D}, {}}, 4.f}, PipeCase{{{2, 320, 2, D}, {}}, 1.f},
                              PipeCase{{{1, 449, 3, D}, {}}, 1.f}, PipeCase{{{1, 700, 2, D}, {}}, 4.f},
                              PipeCase{{{1, 1201, 1, D}, {}}, 1.f}}) {
      const Case& c = pc.c;
      const uint32_t seed = 9300u + static_cast<uint32_t>(c.s.T * 11 + c.s.B * 7 + c.s.H * 5 + D);
      SCOPED_TRACE(describe(c.s) + " qk_std=" + std::to_string(pc.qk_std) + " seed=" + std::to_string(seed));
      const Inputs in = make_inputs(c.s, seed, pc.qk_std);
      const Reference ref = reference_attention(in);
      DeviceProblem dev(in, c.lay);
      const GpuResult fast = dev.run(variant_launchers(fv, *kinds.pipe));
      expect_matches(fast, ref);
      const GpuResult again = dev.run(variant_launchers(fv, *kinds.pipe));
      EXPECT_EQ(bit_mismatches(fast.dk, again.dk), 0) << "dk differs between two runs";
      EXPECT_EQ(bit_mismatches(fast.dv, again.dv), 0) << "dv differs between two runs";
      EXPECT_LT(rel_diff(fast.dq, again.dq), 1e-3) << "dq differs between two runs beyond atomic reordering";
      SCOPED_TRACE(kinds.mma->name);
      const GpuResult slow = dev.run(variant_launchers(fv, *kinds.mma));
      EXPECT_LT(rel_diff(fast.dk, slow.dk), 5e-3) << "dk";
      EXPECT_LT(rel_diff(fast.dv, slow.dv), 5e-3) << "dv";
      EXPECT_LT(rel_diff(fast.dq, slow.dq), 5e-3) << "dq";
    }
  }
}

// FP4_ATTENTION_BWD selects: unset (or empty) -> the pipelined kernel, mma -> the mma.sync kernel (each
// checked through the entry point against a direct launch); anything else, including wgmma1 (the retired
// first wgmma kernel), throws an error naming the variable, from the entry point too.
TEST(AttentionWgmmaPipe, EnvironmentSelectsTheKernel) {
  if (!attn::device_has_wgmma()) GTEST_SKIP() << "no sm_90 device";
  for (const int D : {64, 128}) {
    SCOPED_TRACE("D=" + std::to_string(D));
    const BwdKinds kinds = backward_kinds(D);
    ASSERT_NE(kinds.pipe, nullptr);
    ASSERT_NE(kinds.mma, nullptr);
    EXPECT_EQ(&attn::default_backward_variant(D), kinds.pipe);
    const Shape s{1, 333, 2, D};
    const Inputs in = make_inputs(s, 9900u + static_cast<uint32_t>(D), 1.f);
    DeviceProblem dev(in, Layout{});
    const attn::FwdVariant& fv = attn::default_forward_variant(D);
    for (const auto& [value, want] : {std::pair<const char*, const attn::BwdVariant*>{"", kinds.pipe},
                                      std::pair<const char*, const attn::BwdVariant*>{"mma", kinds.mma}}) {
      SCOPED_TRACE(value);
      ASSERT_EQ(setenv("FP4_ATTENTION_BWD", value, 1), 0);
      EXPECT_EQ(&attn::default_backward_variant(D), want);
      const GpuResult via_entry = dev.run(public_launchers());
      ASSERT_EQ(unsetenv("FP4_ATTENTION_BWD"), 0);
      const GpuResult direct = dev.run(variant_launchers(fv, *want));
      // dK and dV carry no atomics: the entry point ran exactly the selected kernel.
      EXPECT_EQ(bit_mismatches(via_entry.dk, direct.dk), 0);
      EXPECT_EQ(bit_mismatches(via_entry.dv, direct.dv), 0);
    }
    for (const char* value : {"wgmma1", "wgmma9", "MMA", "mma "}) {
      SCOPED_TRACE(std::string("FP4_ATTENTION_BWD='") + value + "'");
      ASSERT_EQ(setenv("FP4_ATTENTION_BWD", value, 1), 0);
      const std::string msg = backward_selection_error(D);
      const std::string named = "FP4_ATTENTION_BWD=" + std::string(value);
      const size_t at = msg.find(named);
      ASSERT_NE(at, std::string::npos) << msg;
      EXPECT_NE(msg.find("mma", at + named.size()), std::string::npos) << "no accepted value named: " << msg;
      EXPECT_THROW(dev.run(public_launchers()), Error);  // the entry point does not fall back silently
      ASSERT_EQ(unsetenv("FP4_ATTENTION_BWD"), 0);
    }
    EXPECT_EQ(&attn::default_backward_variant(D), kinds.pipe);
  }
}

// Scores up to about 50 in magnitude: the online softmax must rescale without overflow or loss.
TEST(AttentionCuda, LargeScoresStayAccurate) {
  for (const Shape s : {Shape{1, 500, 2, 64}, Shape{2, 300, 1, 128}}) {
    SCOPED_TRACE(describe(s));
    const Inputs in = make_inputs(s, 4242u + static_cast<uint32_t>(s.D), 4.f);
    const Reference ref = reference_attention(in);
    EXPECT_GT(ref.max_abs_score, 40.0) << "inputs do not reach large scores";
    DeviceProblem dev(in, Layout{});
    expect_matches(dev.run(public_launchers()), ref);
  }
}

// Changing the keys and values of later tokens (to values that would dominate any softmax that saw them)
// leaves earlier outputs unchanged; changing earlier queries and output gradients leaves later keys'
// gradients unchanged.
TEST(AttentionCuda, IsCausal) {
  const Shape s{2, 300, 2, 64};
  const int t0 = 150;
  const Inputs base = make_inputs(s, 99u, 1.f);
  Inputs changed = base;
  for (int b = 0; b < s.B; ++b)
    for (int t = 0; t < s.T; ++t)
      for (int h = 0; h < s.H; ++h)
        for (int d = 0; d < s.D; ++d) {
          const size_t i = base.at(b, t, h, d);
          if (t >= t0) {
            changed.k[i] =
                round_bf16(-4.f * base.q[base.at(b, t0 - 1, h, d)]);  // score ~ +32 with query t0-1
            changed.v[i] = 100.f;
          } else {
            changed.q[i] = round_bf16(-base.q[i]);
            changed.dout[i] = 50.f;
          }
        }
  DeviceProblem dev_a(base, Layout{}), dev_b(changed, Layout{});
  const GpuResult a = dev_a.run(public_launchers()), b = dev_b.run(public_launchers());
  // The forward of queries < t0 sees only unchanged keys (its queries changed too, so compare the run of
  // `changed` against a third run whose later keys are unchanged).
  Inputs early_only = base;
  early_only.q = changed.q;
  early_only.dout = changed.dout;
  DeviceProblem dev_c(early_only, Layout{});
  const GpuResult c = dev_c.run(public_launchers());
  int64_t fwd_diff = 0, bwd_diff = 0;
  for (int bb = 0; bb < s.B; ++bb)
    for (int t = 0; t < s.T; ++t)
      for (int h = 0; h < s.H; ++h) {
        for (int d = 0; d < s.D; ++d) {
          const size_t i = base.at(bb, t, h, d);
          auto differs = [](float x, float y) { return std::fabs(x - y) > 1e-3f * (1.f + std::fabs(x)); };
          if (t < t0 && differs(b.out[i], c.out[i])) ++fwd_diff;
          if (t >= t0 && (differs(a.dk[i], c.dk[i]) || differs(a.dv[i], c.dv[i]))) ++bwd_diff;
        }
      }
  EXPECT_EQ(fwd_diff, 0) << "outputs of early tokens depend on later keys/values";
  EXPECT_EQ(bwd_diff, 0) << "gradients of later keys/values depend on earlier queries/output gradients";
  // And the change is real: the later outputs did move.
  EXPECT_GT(rel_error(b.out, std::vector<double>(c.out.begin(), c.out.end())), 0.1);
}

// The backward zeroes its own dq accumulator: a second call on the same workspace gives the same gradients.
TEST(AttentionCuda, BackwardReusesWorkspace) {
  const Shape s{2, 260, 2, 64};
  const Inputs in = make_inputs(s, 5150u, 1.f);
  DeviceProblem dev(in, Layout{});
  const GpuResult first = dev.run(public_launchers());
  const GpuResult second = dev.rerun_backward(public_launchers());
  EXPECT_EQ(second.unwritten, 0);
  EXPECT_LT(rel_error(second.dq, std::vector<double>(first.dq.begin(), first.dq.end())), 1e-3);
  EXPECT_LT(rel_error(second.dk, std::vector<double>(first.dk.begin(), first.dk.end())), 1e-6);
  EXPECT_LT(rel_error(second.dv, std::vector<double>(first.dv.begin(), first.dv.end())), 1e-6);
}

// ---- wgmma forward (attention_fwd_wgmma.cuh) ----

std::vector<double> as_double(const std::vector<float>& x) {
  return std::vector<double>(x.begin(), x.end());
}

// The mma.sync forward for D (the fallback), which the wgmma configurations are compared with.
const attn::FwdVariant& mma_forward_variant(int D) {
  for (const attn::FwdVariant& v : attn::forward_variants())
    if (v.head_dim == D && !attn::forward_variant_uses_wgmma(v)) return v;
  FP4_THROW("no mma.sync forward configuration for D=", D);
}

// LSE elements of two forwards that differ by more than FP32 reordering allows.
int64_t lse_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= 1e-5 * (1.0 + std::fabs(b[i])))) ++n;
  return n;
}

struct FwdCase {
  Case c;
  float qk_std;
};

// Every wgmma forward configuration on the shapes that stress its tiling (64-row warpgroups, query tiles of
// 128 or 192 rows, key tiles of 64 or 128; a warpgroup may have no row below T): T = 1, T < 64, T just under,
// at and over 64, 128, 192, 256 and 384, several B and H, padded layouts, large scores. Each is compared with
// the double reference (out, LSE, and the gradients of the default backward run on its out and LSE) and
// with the mma.sync forward: the same numerics, so out agrees within BF16 rounding of P and O and the LSE
// within FP32 reordering.
TEST(AttentionWgmmaForward, MatchesReferenceAndFallback) {
  if (!attn::device_has_wgmma()) GTEST_SKIP() << "no sm_90 device";
  for (const int D : {64, 128}) {
    const attn::FwdVariant& slow_fv = mma_forward_variant(D);
    const attn::BwdVariant& bv = attn::default_backward_variant(D);
    for (const FwdCase fc : {FwdCase{{{1, 1, 1, D}, {}}, 1.f}, FwdCase{{{2, 1, 3, D}, {8, 8, 8}}, 1.f},
                             FwdCase{{{2, 17, 3, D}, {}}, 1.f}, FwdCase{{{1, 63, 2, D}, {}}, 1.f},
                             FwdCase{{{1, 64, 1, D}, {8, 16, 0}}, 1.f}, FwdCase{{{2, 65, 2, D}, {}}, 1.f},
                             FwdCase{{{3, 127, 2, D}, {}}, 1.f}, FwdCase{{{1, 128, 1, D}, {16, 8, 8}}, 1.f},
                             FwdCase{{{2, 129, 1, D}, {}}, 1.f}, FwdCase{{{1, 191, 2, D}, {}}, 1.f},
                             FwdCase{{{2, 192, 1, D}, {}}, 1.f}, FwdCase{{{1, 193, 3, D}, {}}, 1.f},
                             FwdCase{{{2, 255, 1, D}, {}}, 1.f}, FwdCase{{{1, 256, 2, D}, {}}, 1.f},
                             FwdCase{{{1, 257, 1, D}, {0, 8, 0}}, 1.f}, FwdCase{{{2, 383, 2, D}, {}}, 1.f},
                             FwdCase{{{1, 385, 1, D}, {}}, 4.f}, FwdCase{{{2, 333, 2, D}, {}}, 4.f},
                             FwdCase{{{1, 1100, 2, D}, {}}, 1.f}}) {
      const Case& c = fc.c;
      const uint32_t seed = 7100u + static_cast<uint32_t>(c.s.T * 13 + c.s.B * 5 + c.s.H * 3 + D);
      SCOPED_TRACE(describe(c.s) + " qk_std=" + std::to_string(fc.qk_std) + " seed=" + std::to_string(seed));
      const Inputs in = make_inputs(c.s, seed, fc.qk_std);
      const Reference ref = reference_attention(in);
      DeviceProblem dev(in, c.lay);
      const GpuResult slow = dev.run(variant_launchers(slow_fv, bv));
      int n_wgmma = 0;
      for (const attn::FwdVariant& fv : attn::forward_variants()) {
        if (fv.head_dim != D || !attn::forward_variant_uses_wgmma(fv)) continue;
        ++n_wgmma;
        SCOPED_TRACE(fv.name);
        const GpuResult fast = dev.run(variant_launchers(fv, bv));
        expect_matches(fast, ref);
        EXPECT_LT(rel_error(fast.out, as_double(slow.out)), 4e-3) << "out vs the mma.sync forward";
        EXPECT_EQ(lse_mismatches(fast.lse, slow.lse), 0) << "lse vs the mma.sync forward";
      }
      EXPECT_GE(n_wgmma, 1) << "no wgmma forward configuration for D=" << D;
    }
  }
}

// On Hopper the entry point runs the first wgmma configuration for D (bit for bit, and twice the same bits:
// no race), and FP4_ATTENTION_FWD=mma selects the mma.sync forward instead.
TEST(AttentionWgmmaForward, DefaultOnHopperAndEnvironmentFallback) {
  if (!attn::device_has_wgmma()) GTEST_SKIP() << "no sm_90 device";
  ASSERT_EQ(unsetenv("FP4_ATTENTION_FWD"), 0);  // the test sets the switch itself
  for (const int D : {64, 128}) {
    SCOPED_TRACE("D=" + std::to_string(D));
    const attn::FwdVariant& fast_fv = attn::default_forward_variant(D);
    EXPECT_TRUE(attn::forward_variant_uses_wgmma(fast_fv));
    ASSERT_EQ(setenv("FP4_ATTENTION_FWD", "mma", 1), 0);
    const attn::FwdVariant& slow_fv = attn::default_forward_variant(D);
    const Shape s{2, 301, 3, D};
    const Inputs in = make_inputs(s, 8080u + static_cast<uint32_t>(D), 1.f);
    DeviceProblem dev(in, Layout{});
    const GpuResult public_mma = dev.run(public_launchers());
    ASSERT_EQ(setenv("FP4_ATTENTION_FWD", "wgmma", 1), 0);  // not a choice: an error, not a silent default
    EXPECT_THROW(attn::default_forward_variant(D), Error);
    ASSERT_EQ(unsetenv("FP4_ATTENTION_FWD"), 0);
    EXPECT_FALSE(attn::forward_variant_uses_wgmma(slow_fv));
    EXPECT_EQ(&slow_fv, &mma_forward_variant(D));
    const attn::BwdVariant& bv = attn::default_backward_variant(D);
    const GpuResult public_fast = dev.run(public_launchers());
    const GpuResult again = dev.run(public_launchers());
    EXPECT_EQ(public_fast.out, dev.run(variant_launchers(fast_fv, bv)).out)
        << "entry point is not the wgmma kernel";
    EXPECT_EQ(public_mma.out, dev.run(variant_launchers(slow_fv, bv)).out)
        << "FP4_ATTENTION_FWD=mma is ignored";
    EXPECT_EQ(public_fast.out, again.out) << "two runs differ";
    EXPECT_EQ(public_fast.lse, again.lse) << "two runs differ";
    expect_matches(public_fast, reference_attention(in));
  }
}

TEST(AttentionCuda, RejectsBadArguments) {
  DeviceBuffer<bf16> buf(4096);
  DeviceBuffer<float> lse(64);
  bf16* p = buf.data();
  const int ld = 3 * 64;
  EXPECT_THROW(attention_forward(p, p, p, ld, p, ld, lse.data(), 1, 4, 1, 96, 0.1f, nullptr), Error);    // D
  EXPECT_THROW(attention_forward(p, p, p, ld, p, ld, lse.data(), 0, 4, 1, 64, 0.125f, nullptr), Error);  // B
  EXPECT_THROW(attention_forward(p, p, p, 60, p, ld, lse.data(), 1, 4, 1, 64, 0.125f, nullptr),
               Error);  // ld < HD
  EXPECT_THROW(attention_forward(p, p, p, 68, p, ld, lse.data(), 1, 4, 1, 64, 0.125f, nullptr),
               Error);  // ld % 8
  EXPECT_THROW(attention_forward(p + 1, p, p, ld, p, ld, lse.data(), 1, 4, 1, 64, 0.125f, nullptr),
               Error);                                                                                // align
  EXPECT_THROW(attention_forward(p, p, p, ld, p, ld, nullptr, 1, 4, 1, 64, 0.125f, nullptr), Error);  // lse
  EXPECT_THROW(attention_forward(p, p, p, ld, p, ld, lse.data(), 1, 4, 1, 64, -1.f, nullptr),
               Error);  // scale
  EXPECT_THROW(attention_backward(p, p, p, ld, p, p, ld, lse.data(), p, p, p, ld, 1, 4, 1, 64, 0.125f,
                                  nullptr, nullptr),
               Error);  // workspace
  EXPECT_THROW(attention_backward_workspace_bytes(1, 4, 1, 32), Error);
}

}  // namespace
}  // namespace fp4::cuda
