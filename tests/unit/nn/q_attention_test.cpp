// QAttentionCpu (Q-Attn): the forward against a straightforward FP64 statement of the spec, the backward
// against the exact gradient of the quantized forward (dV exactly, dQ/dK unbiased over SR seeds), causal
// masking with odd sequence lengths, and the shape errors.
#include "nn/q_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "numerics/quantize.h"

namespace fp4 {
namespace {

std::vector<float> gaussian(size_t n, std::mt19937& rng, float std) {
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Q^ of the spec: NVFP4 1x16 along the row (head_dim inside each head), tensor scale, RTN.
std::vector<float> quantized_view(const std::vector<float>& x, int64_t rows, int64_t cols) {
  QuantSpec s;
  s.format = QuantFormat::kNvfp4;
  s.block = BlockShape::k1x16;
  s.outer = OuterScale::kTensor;
  s.rounding = Rounding::kRtn;
  const Nvfp4Tensor q = quantize_nvfp4(x.data(), rows, cols, s, QuantRandomness{});
  std::vector<float> out(x.size());
  dequantize(q, out.data());
  return out;
}

// The attention of the quantized views and everything the exact gradients need, in FP64.
struct Reference {
  std::vector<double> out, probs, dq, dk, dv;
};

Reference reference(const std::vector<float>& qh, const std::vector<float>& kh, const std::vector<float>& v,
                    const std::vector<float>& dout, const AttnShape& s) {
  const int t = s.t, hd = s.head_dim, d = s.width();
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  Reference r;
  const size_t nd = static_cast<size_t>(s.rows()) * d;
  r.out.assign(nd, 0.0);
  r.dq.assign(nd, 0.0);
  r.dk.assign(nd, 0.0);
  r.dv.assign(nd, 0.0);
  r.probs.assign(static_cast<size_t>(s.b) * s.heads * t * t, 0.0);
  auto at = [&](const std::vector<float>& x, int bi, int i, int h, int c) {
    return static_cast<double>(x[(static_cast<size_t>(bi) * t + i) * d + h * hd + c]);
  };
  auto idx = [&](int bi, int i, int h, int c) { return (static_cast<size_t>(bi) * t + i) * d + h * hd + c; };
  for (int bi = 0; bi < s.b; ++bi) {
    for (int h = 0; h < s.heads; ++h) {
      double* p = r.probs.data() + (static_cast<size_t>(bi) * s.heads + h) * t * t;
      std::vector<double> ds(static_cast<size_t>(t) * t, 0.0);
      for (int i = 0; i < t; ++i) {
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int c = 0; c < hd; ++c) dot += at(qh, bi, i, h, c) * at(kh, bi, j, h, c);
          p[i * t + j] = dot * scale;
          mx = std::max(mx, p[i * t + j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += (p[i * t + j] = std::exp(p[i * t + j] - mx));
        for (int j = 0; j <= i; ++j) p[i * t + j] /= sum;
        double rowdot = 0;
        for (int j = 0; j <= i; ++j) {
          double dp = 0;
          for (int c = 0; c < hd; ++c) {
            r.out[idx(bi, i, h, c)] += p[i * t + j] * at(v, bi, j, h, c);
            dp += at(dout, bi, i, h, c) * at(v, bi, j, h, c);
            r.dv[idx(bi, j, h, c)] += p[i * t + j] * at(dout, bi, i, h, c);
          }
          ds[i * t + j] = dp;
          rowdot += p[i * t + j] * dp;
        }
        for (int j = 0; j <= i; ++j) ds[i * t + j] = p[i * t + j] * (ds[i * t + j] - rowdot);
      }
      for (int i = 0; i < t; ++i)
        for (int j = 0; j <= i; ++j)
          for (int c = 0; c < hd; ++c) {
            r.dq[idx(bi, i, h, c)] += scale * ds[i * t + j] * at(kh, bi, j, h, c);
            r.dk[idx(bi, j, h, c)] += scale * ds[i * t + j] * at(qh, bi, i, h, c);
          }
    }
  }
  return r;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b, double* max_ref = nullptr) {
  double m = 0, mr = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::abs(a[i] - b[i]));
    mr = std::max(mr, std::abs(b[i]));
  }
  if (max_ref) *max_ref = mr;
  return m;
}

double rel_err(const std::vector<double>& sum, double count, const std::vector<double>& exact) {
  double num = 0, den = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    const double e = sum[i] / count - exact[i];
    num += e * e;
    den += exact[i] * exact[i];
  }
  return std::sqrt(num / den);
}

struct Inputs {
  AttnShape s;
  std::vector<float> q, k, v, dout;
};

Inputs random_inputs(const AttnShape& s, std::mt19937& rng) {
  const size_t nd = static_cast<size_t>(s.rows()) * s.width();
  // Scores of order 1-3 (as after QK-norm): q, k entries of about unit size.
  return {s, gaussian(nd, rng, 1.0f), gaussian(nd, rng, 1.0f), gaussian(nd, rng, 1.0f),
          gaussian(nd, rng, 0.1f)};
}

TEST(QAttention, ForwardEqualsTheSpecOnQuantizedViews) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (const AttnShape s :
       {AttnShape{2, 21, 3, 32}, AttnShape{1, 1, 2, 16}, AttnShape{1, 16, 1, 64}, AttnShape{3, 37, 2, 16}}) {
    SCOPED_TRACE("b " + std::to_string(s.b) + " t " + std::to_string(s.t) + " heads " +
                 std::to_string(s.heads) + " head_dim " + std::to_string(s.head_dim));
    const Inputs in = random_inputs(s, rng);
    const int d = s.width();
    QAttentionCpu att(3);
    std::vector<float> out(in.q.size()), probs(static_cast<size_t>(s.b) * s.heads * s.t * s.t, -1.0f);
    att.forward(out.data(), d, probs.data(), in.q.data(), in.k.data(), in.v.data(), d, s,
                QuantContext{seed, 0});
    const auto qh = quantized_view(in.q, s.rows(), d);
    const auto kh = quantized_view(in.k, s.rows(), d);
    ASSERT_EQ(att.q_hat(), qh);
    ASSERT_EQ(att.k_hat(), kh);
    EXPECT_NE(att.q_hat(), in.q);  // the scores really come from NVFP4 values
    const Reference ref = reference(qh, kh, in.v, in.dout, s);
    double mr = 0;
    EXPECT_LT(max_abs_diff(out, ref.out, &mr), 2e-6 * (1 + mr));
    EXPECT_LT(max_abs_diff(probs, ref.probs), 2e-6);
    for (int i = 0; i < s.t; ++i)  // causal: nothing above the diagonal
      for (int j = i + 1; j < s.t; ++j) ASSERT_EQ(probs[static_cast<size_t>(i) * s.t + j], 0.0f);
  }
}

TEST(QAttention, FutureValuesDoNotReachEarlierOutputs) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const AttnShape s{2, 19, 2, 16};
  Inputs in = random_inputs(s, rng);
  const int d = s.width(), cut = 11;
  std::vector<float> a(in.q.size()), b(in.q.size()), probs(static_cast<size_t>(s.b) * s.heads * s.t * s.t);
  QAttentionCpu att(0);
  att.forward(a.data(), d, probs.data(), in.q.data(), in.k.data(), in.v.data(), d, s, QuantContext{seed, 0});
  for (int bi = 0; bi < s.b; ++bi)  // V is not quantized, so changing its later rows leaves Q^, K^ alone
    for (int i = cut; i < s.t; ++i)
      for (int c = 0; c < d; ++c) in.v[(static_cast<size_t>(bi) * s.t + i) * d + c] += 5.0f;
  att.forward(b.data(), d, probs.data(), in.q.data(), in.k.data(), in.v.data(), d, s, QuantContext{seed, 0});
  for (int bi = 0; bi < s.b; ++bi)
    for (int i = 0; i < s.t; ++i)
      for (int c = 0; c < d; ++c) {
        const size_t e = (static_cast<size_t>(bi) * s.t + i) * d + c;
        if (i < cut)
          ASSERT_EQ(a[e], b[e]) << "row " << i;
        else
          ASSERT_NE(a[e], b[e]) << "row " << i;
      }
}

// dV is the exact P^T dO; dQ and dK average over SR seeds to s dS K^ and s dS^T Q^.
TEST(QAttention, BackwardIsTheExactGradientOfTheQuantizedForwardInExpectation) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const AttnShape s{2, 29, 2, 32};  // odd t: the reduction dims are padded to 32
  const Inputs in = random_inputs(s, rng);
  const int d = s.width();
  const size_t nd = in.q.size();
  QAttentionCpu att(5);
  std::vector<float> out(nd), probs(static_cast<size_t>(s.b) * s.heads * s.t * s.t);
  std::vector<float> dq(nd), dk(nd), dv(nd);
  std::vector<double> sum_dq(nd, 0.0), sum_dk(nd, 0.0);
  Reference ref;
  const std::vector<int> cps = {16, 64, 256, 1024};
  std::vector<double> err_q, err_k;
  int done = 0;
  for (int target : cps) {
    for (; done < target; ++done) {
      att.forward(out.data(), d, probs.data(), in.q.data(), in.k.data(), in.v.data(), d, s,
                  QuantContext{seed, static_cast<uint64_t>(done)});
      att.backward(dq.data(), dk.data(), dv.data(), d, in.dout.data(), d, probs.data(), in.v.data(), d, s);
      if (done == 0) {
        ref = reference(att.q_hat(), att.k_hat(), in.v, in.dout, s);
        double mr = 0;
        EXPECT_LT(max_abs_diff(dv, ref.dv, &mr), 2e-6 * (1 + mr));
        // One draw is a noisy estimate: quantization really happened.
        std::vector<double> one(dq.begin(), dq.end());
        EXPECT_GT(rel_err(one, 1.0, ref.dq), 0.02);
      }
      for (size_t i = 0; i < nd; ++i) {
        sum_dq[i] += dq[i];
        sum_dk[i] += dk[i];
      }
    }
    err_q.push_back(rel_err(sum_dq, done, ref.dq));
    err_k.push_back(rel_err(sum_dk, done, ref.dk));
    std::cout << "q_attn calls " << done << ": rel err dQ " << err_q.back() << ", dK " << err_k.back()
              << "\n";
  }
  // 64x more samples: an unbiased mean's error shrinks 8x; allow for noise in the estimate.
  EXPECT_LT(err_q.back(), err_q.front() / 5.0);
  EXPECT_LT(err_k.back(), err_k.front() / 5.0);
  for (size_t i = 1; i < cps.size(); ++i) {
    EXPECT_LT(err_q[i], err_q[i - 1] * 0.75);
    EXPECT_LT(err_k[i], err_k[i - 1] * 0.75);
  }
}

TEST(QAttention, SameCallSameBitsOtherCallOtherBits) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const AttnShape s{1, 24, 2, 16};
  const Inputs in = random_inputs(s, rng);
  const int d = s.width();
  const size_t nd = in.q.size();
  std::vector<float> out(nd), probs(static_cast<size_t>(s.heads) * s.t * s.t);
  auto run = [&](uint64_t call) {
    QAttentionCpu att(1);
    std::vector<float> dq(nd), dk(nd), dv(nd);
    att.forward(out.data(), d, probs.data(), in.q.data(), in.k.data(), in.v.data(), d, s,
                QuantContext{seed, call});
    att.backward(dq.data(), dk.data(), dv.data(), d, in.dout.data(), d, probs.data(), in.v.data(), d, s);
    dq.insert(dq.end(), dk.begin(), dk.end());
    return dq;
  };
  EXPECT_EQ(run(4), run(4));  // a resumed run draws the same bits
  EXPECT_NE(run(4), run(5));
}

TEST(QAttention, ShapeErrorsAreNamed) {
  const AttnShape s{1, 8, 2, 8};  // head_dim 8: a 16-block would straddle two heads
  std::vector<float> x(static_cast<size_t>(8 * 16), 0.5f), out(x.size()), probs(2 * 8 * 8);
  QAttentionCpu att(0);
  try {
    att.forward(out.data(), 16, probs.data(), x.data(), x.data(), x.data(), 16, s, QuantContext{});
    FAIL() << "no error for head_dim 8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim 8 must be a multiple of 16"), std::string::npos)
        << e.what();
  }
  QAttentionCpu fresh(0);
  std::vector<float> g(x.size());
  EXPECT_THROW(fresh.backward(g.data(), g.data(), g.data(), 16, x.data(), 16, probs.data(), x.data(), 16,
                              AttnShape{1, 8, 1, 16}),
               Error);
  EXPECT_THROW(QAttentionCpu(256), Error);
}

}  // namespace
}  // namespace fp4
