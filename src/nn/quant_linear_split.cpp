// OutControl's split linear layer (RECIPES.md section 7), the CPU reference:
//   Y = Q1(X[:, C4]) Q2(W[:, C4])^T + MX8(X[:, C8]) MX8(W[:, C8])^T
//   dX = Q3(dY) Q4(W^T)^T with W^ assembled from both parts (so dX stays FP4, RHT16 + SR as usual)
//   dW[:, C4] = Q5(dY^T) Q6(X[:, C4]^T)^T;  dW[:, C8] = MX8(dY^T) MX8(dequant(MX8(X[:, C8]))^T)^T.
// Gathered channel sets are zero-padded to whole blocks (128 for NVFP4, 32 for MXFP8): zero columns
// change neither an amax nor a product.
#include "core/error.h"
#include "nn/quant_linear.h"
#include "numerics/mxfp8.h"
#include "ops/ops.h"

namespace fp4 {
namespace {

int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

// src [rows x cols] columns idx into [rows x padded], zeros beyond idx.size().
std::vector<float> gather_columns(const float* src, int64_t rows, int64_t cols,
                                  const std::vector<int32_t>& idx, int64_t padded) {
  std::vector<float> out(static_cast<size_t>(rows * padded), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < idx.size(); ++j) out[static_cast<size_t>(r * padded) + j] = src[r * cols + idx[j]];
  return out;
}

// dst [rows x cols] columns idx = (or +=) src [rows x stride] columns 0..idx.size()-1.
void scatter_columns(const float* src, int64_t stride, float* dst, int64_t rows, int64_t cols,
                     const std::vector<int32_t>& idx, bool add) {
  for (int64_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < idx.size(); ++j) {
      float& d = dst[r * cols + idx[j]];
      const float v = src[r * stride + static_cast<int64_t>(j)];
      d = add ? d + v : v;
    }
}

// MXFP8 of x [rows x cols] along cols, zero-padded to a multiple of 32 columns.
Mxfp8Tensor mx8_padded(const float* x, int64_t rows, int64_t cols) {
  const int64_t padded = round_up(cols, kMxfp8Block);
  if (padded == cols) return quantize_mxfp8(x, rows, cols);
  std::vector<float> p(static_cast<size_t>(rows * padded), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) p[static_cast<size_t>(r * padded + c)] = x[r * cols + c];
  return quantize_mxfp8(p.data(), rows, padded);
}

std::vector<float> values(const Mxfp8Tensor& q) {
  std::vector<float> v(static_cast<size_t>(q.rows * q.cols));
  dequantize(q, v.data());
  return v;
}

}  // namespace

void QuantLinearCpu::forward_split(const float* x, const float* w, float* y, int n, const QuantContext& ctx) {
  const auto& q1 = policy_[Operand::kQ1X];
  const auto& q2 = policy_[Operand::kQ2W];
  const auto& q4 = policy_[Operand::kQ4Wt];
  const auto& q6 = policy_[Operand::kQ6Xt];
  FP4_CHECK(q4.source != QuantSource::kReuse && q6.source != QuantSource::kReuse, "linear ", name_,
            ": out_control needs Q4 and Q6 re-quantized, not reused");
  FP4_CHECK(channels_->in_features() == in_, "linear ", name_, ": out_control state for ",
            channels_->in_features(), " channels, layer has ", in_);
  ctx_ = ctx;
  saved_n_ = n;
  const std::vector<int32_t>& c4 = channels_->c4();
  const std::vector<int32_t>& c8 = channels_->c8();
  const auto k4 = static_cast<int64_t>(c4.size()), k8 = static_cast<int64_t>(c8.size());
  const int64_t p4 = round_up(k4, 128), p8 = round_up(k8, kMxfp8Block);

  // FP4 part over C4.
  const std::string xname = "linear " + name_ + " X[:, C4]", wname = "linear " + name_ + " W[:, C4]";
  const std::vector<float> x4 = gather_columns(x, n, in_, c4, p4);
  const std::vector<float> w4 = gather_columns(w, out_, in_, c4, p4);
  const QuantOperand xq(x4.data(), n, p4, q1, randomness(ctx, QuantPurpose::kSrQ1, QuantPurpose::kRhtDx, 0),
                        xname.c_str());
  const QuantOperand wq(w4.data(), out_, p4, q2,
                        randomness(ctx, QuantPurpose::kSrQ2, QuantPurpose::kRhtDx, 0), wname.c_str());
  nonfinite_ = xq.nonfinite() + wq.nonfinite();
  const std::vector<float> x4_hat = xq.values(), w4_hat = wq.values();
  cpu::gemm(false, true, n, out_, static_cast<int>(p4), 1.0f, x4_hat.data(), static_cast<int>(p4),
            w4_hat.data(), static_cast<int>(p4), 0.0f, y, out_);

  // FP8 part over C8.
  const std::vector<float> x8 = gather_columns(x, n, in_, c8, p8);
  const std::vector<float> w8 = gather_columns(w, out_, in_, c8, p8);
  const Mxfp8Tensor x8q = quantize_mxfp8(x8.data(), n, p8), w8q = quantize_mxfp8(w8.data(), out_, p8);
  nonfinite_ += x8q.nonfinite + w8q.nonfinite;
  const std::vector<float> x8_hat = values(x8q), w8_hat = values(w8q);
  cpu::gemm(false, true, n, out_, static_cast<int>(p8), 1.0f, x8_hat.data(), static_cast<int>(p8),
            w8_hat.data(), static_cast<int>(p8), 1.0f, y, out_);

  // W^ in the original channel order, from both parts: the dX operand stays a single FP4 tensor.
  std::vector<float> w_hat(static_cast<size_t>(out_) * in_);
  scatter_columns(w4_hat.data(), p4, w_hat.data(), out_, in_, c4, false);
  scatter_columns(w8_hat.data(), p8, w_hat.data(), out_, in_, c8, false);
  if (ctx.inference) {
    drop_backward_operands();
  } else {
    build_split_backward_operands(x4, x4_hat, x8_hat, w_hat, w, n, ctx);
  }
  if (keep_forward_values_) {
    x_hat_.assign(static_cast<size_t>(n) * in_, 0.0f);
    scatter_columns(x4_hat.data(), p4, x_hat_.data(), n, in_, c4, false);
    scatter_columns(x8_hat.data(), p8, x_hat_.data(), n, in_, c8, false);
    w_hat_ = w_hat;
  }
}

void QuantLinearCpu::build_split_backward_operands(const std::vector<float>& x4,
                                                   const std::vector<float>& x4_hat,
                                                   const std::vector<float>& x8_hat,
                                                   const std::vector<float>& w_hat, const float* w, int n,
                                                   const QuantContext& ctx) {
  const auto& q4 = policy_[Operand::kQ4Wt];
  const auto& q6 = policy_[Operand::kQ6Xt];
  const auto k4 = static_cast<int64_t>(channels_->c4().size()),
             k8 = static_cast<int64_t>(channels_->c8().size());
  const int64_t p4 = round_up(k4, 128), p8 = round_up(k8, kMxfp8Block);
  const std::string q4name = "linear " + name_ + " W^T", q6name = "linear " + name_ + " X[:, C4]^T";
  {
    const std::vector<float> src =
        transposed(q4.source == QuantSource::kAligned ? w_hat.data() : w, out_, in_);
    q4_ = QuantOperand(src.data(), in_, out_, q4,
                       randomness(ctx, QuantPurpose::kSrQ4, QuantPurpose::kRhtDx, q4.rht_n), q4name.c_str());
  }
  {
    // Q6 over the k4 real channels: the aligned source is X^[:, C4], the original X[:, C4].
    const float* src4 = q6.source == QuantSource::kAligned ? x4_hat.data() : x4.data();  // [n x p4]
    std::vector<float> t(static_cast<size_t>(k4 * n));  // its first k4 columns, transposed
    for (int64_t c = 0; c < k4; ++c)
      for (int64_t r = 0; r < n; ++r) t[static_cast<size_t>(c * n + r)] = src4[r * p4 + c];
    q6_ = QuantOperand(t.data(), k4, n, q6,
                       randomness(ctx, QuantPurpose::kSrQ6, QuantPurpose::kRhtDw, q6.rht_n), q6name.c_str());
  }
  // dW[:, C8]'s X operand: the forward's FP8 values, re-quantized along n.
  const std::vector<float> x8t = transposed(x8_hat.data(), n, p8);  // [p8 x n]; rows k8.. are zero
  x8t_ = mx8_padded(x8t.data(), k8, n);
}

void QuantLinearCpu::backward_split_dw(const float* dy, float* dw, int n) {
  const auto& q5 = policy_[Operand::kQ5dYt];
  const std::vector<int32_t>& c4 = channels_->c4();
  const std::vector<int32_t>& c8 = channels_->c8();
  const auto k4 = static_cast<int>(c4.size()), k8 = static_cast<int>(c8.size());
  const std::string q5name = "linear " + name_ + " dY^T";
  const std::vector<float> dyt = transposed(dy, n, out_);  // [out x n]

  // dW[:, C4] = Q5(dY^T) Q6^T, as in the layer's recipe.
  const QuantOperand dytq(dyt.data(), out_, n, q5,
                          randomness(ctx_, QuantPurpose::kSrQ5, QuantPurpose::kRhtDw, q5.rht_n),
                          q5name.c_str());
  const std::vector<float> c = dytq.values(), d = q6_.values();  // [out x n], [k4 x n]
  std::vector<float> dw4(static_cast<size_t>(out_) * k4);
  cpu::gemm(false, true, out_, k4, n, 1.0f, c.data(), n, d.data(), n, 0.0f, dw4.data(), k4);
  scatter_columns(dw4.data(), k4, dw, out_, in_, c4, true);

  // dW[:, C8] = MX8(dY^T) (no RHT) times the saved FP8 X^T, both along n (padded alike).
  const Mxfp8Tensor dyt8 = mx8_padded(dyt.data(), out_, n);
  const std::vector<float> a = values(dyt8), b = values(x8t_);
  const auto pn = static_cast<int>(dyt8.cols);
  std::vector<float> dw8(static_cast<size_t>(out_) * k8);
  cpu::gemm(false, true, out_, k8, pn, 1.0f, a.data(), pn, b.data(), pn, 0.0f, dw8.data(), k8);
  scatter_columns(dw8.data(), k8, dw, out_, in_, c8, true);
  nonfinite_ += dytq.nonfinite() + dyt8.nonfinite;
}

}  // namespace fp4
