#include "nn/q_attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "nn/quant_operand.h"
#include "ops/ops.h"

namespace fp4 {
namespace {

int64_t round_up16(int64_t x) {
  return (x + 15) / 16 * 16;
}

// dst [cols x ld] (zero padded past rows) = the transpose of src [rows x cols] (row stride lds).
void transpose_padded(float* dst, int64_t ld, const float* src, int64_t lds, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ld + r] = src[r * lds + c];
}

}  // namespace

QuantSpec q_attn_spec(Rounding rounding) {
  QuantSpec s;
  s.format = QuantFormat::kNvfp4;
  s.block = BlockShape::k1x16;
  s.outer = OuterScale::kTensor;
  s.rounding = rounding;
  // SR operands target 6*16/17: a block maximum whose E4M3 scale rounded down would otherwise saturate at
  // 6, a bias that averaging over seeds never removes (the expectation is the point of SR here).
  s.sr_headroom = rounding == Rounding::kSr;
  return s;
}

QuantRandomness q_attn_randomness(const QuantContext& ctx, int layer, int slice, QAttnPurpose purpose) {
  const uint32_t id = (static_cast<uint32_t>(layer) << 16) | static_cast<uint32_t>(slice);
  QuantRandomness r;
  r.sr =
      RngStream{ctx.seed, make_stream(id, static_cast<uint32_t>(ctx.call), static_cast<uint32_t>(purpose))};
  return r;
}

QAttentionCpu::QAttentionCpu(int layer) : layer_(layer) {
  FP4_CHECK(layer >= 0 && layer < 256, "q_attn: block index ", layer, " does not fit the random-stream id");
}

void QAttentionCpu::forward(float* out, int ldo, float* probs, const float* q, const float* k, const float* v,
                            int ldv, const AttnShape& shape, const QuantContext& ctx) {
  FP4_CHECK(shape.head_dim % 16 == 0, "q_attn: head_dim ", shape.head_dim,
            " must be a multiple of 16 (NVFP4 1x16 blocks must not straddle heads)");
  FP4_CHECK(static_cast<int64_t>(shape.b) * shape.heads <= 65536, "q_attn: batch ", shape.b, " x heads ",
            shape.heads, " exceeds the 65536 (batch, head) random streams of a layer");
  const int64_t n = shape.rows();
  const int d = shape.width();
  const QuantSpec rtn = q_attn_spec(Rounding::kRtn);
  const QuantOperand qq(q, n, d, rtn, QuantRandomness{}, "q_attn Q");
  const QuantOperand kq(k, n, d, rtn, QuantRandomness{}, "q_attn K");
  nonfinite_ = qq.nonfinite() + kq.nonfinite();
  q_hat_ = qq.values();
  k_hat_ = kq.values();
  cpu::attention_forward(out, ldo, probs, q_hat_.data(), d, k_hat_.data(), d, v, ldv, shape.b, shape.t,
                         shape.heads, shape.head_dim);
  shape_ = shape;
  ctx_ = ctx;
  have_forward_ = true;
}

void QAttentionCpu::backward(float* dq, float* dk, float* dv, int lddv, const float* dout, int lddo,
                             const float* probs, const float* v, int ldv, const AttnShape& shape) {
  FP4_CHECK(have_forward_ && shape.b == shape_.b && shape.t == shape_.t && shape.heads == shape_.heads &&
                shape.head_dim == shape_.head_dim,
            "q_attn: backward without a matching forward");
  const int t = shape.t, hd = shape.head_dim, d = shape.width();
  const int64_t tp = round_up16(t);  // the reduction dims (keys, queries) padded with zeros to whole blocks
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const QuantSpec sr = q_attn_spec(Rounding::kSr);
  std::vector<float> ds(static_cast<size_t>(t * tp)), dst(ds.size());
  std::vector<float> kt(static_cast<size_t>(hd * tp)), qt(kt.size());
  for (int bi = 0; bi < shape.b; ++bi) {
    for (int h = 0; h < shape.heads; ++h) {
      const int slice = bi * shape.heads + h;
      const int64_t row0 = static_cast<int64_t>(bi) * t;
      const int64_t col = static_cast<int64_t>(h) * hd;
      const float* doh = dout + row0 * lddo + col;
      const float* vh = v + row0 * ldv + col;
      const float* p = probs + static_cast<int64_t>(slice) * t * t;
      // dP = dO V^T, then dS = P * (dP - rowsum(P * dP)) on the causal triangle, exactly as the plain path.
      std::fill(ds.begin(), ds.end(), 0.0f);
      cpu::gemm(false, true, t, t, hd, 1.0f, doh, lddo, vh, ldv, 0.0f, ds.data(), static_cast<int>(tp));
      for (int i = 0; i < t; ++i) {
        const float* pi = p + static_cast<int64_t>(i) * t;
        float* di = ds.data() + i * tp;
        double dot = 0;
        for (int j = 0; j <= i; ++j) dot += static_cast<double>(pi[j]) * di[j];
        const float fdot = static_cast<float>(dot);
        for (int j = 0; j <= i; ++j) di[j] = pi[j] * (di[j] - fdot);
        std::fill(di + i + 1, di + tp, 0.0f);
      }
      cpu::gemm(true, false, t, hd, t, 1.0f, p, t, doh, lddo, 0.0f, dv + row0 * lddv + col, lddv);

      // dQ = s Q(dS) Q(K^^T)^T, reduction over keys.
      std::fill(kt.begin(), kt.end(), 0.0f);
      transpose_padded(kt.data(), tp, k_hat_.data() + row0 * d + col, d, t, hd);
      const QuantOperand dsq(ds.data(), t, tp, sr,
                             q_attn_randomness(ctx_, layer_, slice, QAttnPurpose::kSrDsRows), "q_attn dS");
      const QuantOperand ktq(kt.data(), hd, tp, sr,
                             q_attn_randomness(ctx_, layer_, slice, QAttnPurpose::kSrKt), "q_attn K^T");
      const std::vector<float> a = dsq.values(), b = ktq.values();
      cpu::gemm(false, true, t, hd, static_cast<int>(tp), scale, a.data(), static_cast<int>(tp), b.data(),
                static_cast<int>(tp), 0.0f, dq + row0 * d + col, d);

      // dK = s Q(dS^T) Q(Q^^T)^T, reduction over queries.
      std::fill(dst.begin(), dst.end(), 0.0f);
      transpose_padded(dst.data(), tp, ds.data(), tp, t, t);
      std::fill(qt.begin(), qt.end(), 0.0f);
      transpose_padded(qt.data(), tp, q_hat_.data() + row0 * d + col, d, t, hd);
      const QuantOperand dstq(dst.data(), t, tp, sr,
                              q_attn_randomness(ctx_, layer_, slice, QAttnPurpose::kSrDsCols), "q_attn dS^T");
      const QuantOperand qtq(qt.data(), hd, tp, sr,
                             q_attn_randomness(ctx_, layer_, slice, QAttnPurpose::kSrQt), "q_attn Q^T");
      const std::vector<float> c = dstq.values(), e = qtq.values();
      cpu::gemm(false, true, t, hd, static_cast<int>(tp), scale, c.data(), static_cast<int>(tp), e.data(),
                static_cast<int>(tp), 0.0f, dk + row0 * d + col, d);
      nonfinite_ += dsq.nonfinite() + ktq.nonfinite() + dstq.nonfinite() + qtq.nonfinite();
    }
  }
}

}  // namespace fp4
