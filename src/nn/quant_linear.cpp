#include "nn/quant_linear.h"

#include "core/error.h"
#include "ops/ops.h"

namespace fp4 {
namespace {

bool uses_forward_values(QuantSource s) {
  return s != QuantSource::kOriginal;
}

}  // namespace

QuantLinearCpu::QuantLinearCpu(const LinearPolicy& policy, int in_features, int out_features,
                               uint32_t layer_id, std::string name)
    : policy_(policy), in_(in_features), out_(out_features), layer_id_(layer_id), name_(std::move(name)) {
  FP4_CHECK(policy[Operand::kQ1X].rht_n == 0 && policy[Operand::kQ2W].rht_n == 0, "linear ", name_,
            ": an RHT on the forward GEMM is not supported (the backward would need its inverse)");
}

QuantRandomness quant_randomness(const LinearPolicy& policy, const QuantContext& ctx, uint32_t layer_id,
                                 QuantPurpose sr, QuantPurpose rht, int rht_n) {
  const auto call = static_cast<uint32_t>(ctx.call);
  QuantRandomness r;
  r.sr = RngStream{ctx.seed, make_stream(layer_id, call, static_cast<uint32_t>(sr))};
  if (rht_n > 0) {
    if (policy.rht_fresh_signs)
      r.signs = rht_signs_from_seed(
          RngStream{ctx.seed, make_stream(layer_id, call, static_cast<uint32_t>(rht))}, rht_n);
    else if (rht_n == 16)
      r.signs = rht_signs_nvidia16();
    else  // fixed signs of another size: one vector for the whole run, the same in every layer
      r.signs =
          rht_signs_from_seed(RngStream{ctx.seed, make_stream(0, 0, static_cast<uint32_t>(rht))}, rht_n);
  }
  return r;
}

void QuantLinearCpu::forward(const float* x, const float* w, float* y, int n, const QuantContext& ctx) {
  if (channels_ && channels_->calibrating()) channels_->accumulate(x, n);
  split_ = channels_ && channels_->frozen();
  if (split_) {
    forward_split(x, w, y, n, ctx);
    return;
  }
  const auto& q1 = policy_[Operand::kQ1X];
  const auto& q2 = policy_[Operand::kQ2W];
  const auto& q4 = policy_[Operand::kQ4Wt];
  const auto& q6 = policy_[Operand::kQ6Xt];
  ctx_ = ctx;
  saved_n_ = n;
  const std::string xname = "linear " + name_ + " X", wname = "linear " + name_ + " W";
  QuantOperand xq(x, n, in_, q1, randomness(ctx, QuantPurpose::kSrQ1, QuantPurpose::kRhtDx, 0),
                  xname.c_str());
  QuantOperand wq(w, out_, in_, q2, randomness(ctx, QuantPurpose::kSrQ2, QuantPurpose::kRhtDx, 0),
                  wname.c_str());
  nonfinite_ = xq.nonfinite() + wq.nonfinite();
  const std::vector<float> x_hat = xq.values();
  const std::vector<float> w_hat = wq.values();
  cpu::gemm(false, true, n, out_, in_, 1.0f, x_hat.data(), in_, w_hat.data(), in_, 0.0f, y, out_);
  if (keep_forward_values_) {
    x_hat_ = x_hat;
    w_hat_ = w_hat;
  }
  if (ctx.inference) {
    drop_backward_operands();
    return;
  }

  // Backward operands, produced now so that neither X nor W is kept in high precision.
  const std::string q4name = "linear " + name_ + " W^T", q6name = "linear " + name_ + " X^T";
  if (q4.source == QuantSource::kReuse) {
    q4_ = std::move(wq);
  } else {
    const std::vector<float> src = transposed(uses_forward_values(q4.source) ? w_hat.data() : w, out_, in_);
    q4_ = QuantOperand(src.data(), in_, out_, q4,
                       randomness(ctx, QuantPurpose::kSrQ4, QuantPurpose::kRhtDx, q4.rht_n), q4name.c_str());
  }
  if (q6.source == QuantSource::kReuse) {
    q6_ = std::move(xq);
  } else {
    const std::vector<float> src = transposed(uses_forward_values(q6.source) ? x_hat.data() : x, n, in_);
    q6_ = QuantOperand(src.data(), in_, n, q6,
                       randomness(ctx, QuantPurpose::kSrQ6, QuantPurpose::kRhtDw, q6.rht_n), q6name.c_str());
  }
}

void QuantLinearCpu::drop_backward_operands() {
  q4_ = QuantOperand();
  q6_ = QuantOperand();
  x8t_ = Mxfp8Tensor();
  saved_n_ = -1;  // backward() refuses until the next training forward
}

void QuantLinearCpu::backward(const float* dy, float* dx, float* dw, int n, bool accumulate_dx) {
  FP4_CHECK(saved_n_ == n, "linear ", name_, ": backward over ", n,
            " rows without a matching training forward (an inference forward keeps no backward operands)");
  const auto& q3 = policy_[Operand::kQ3dY];
  const auto& q4 = policy_[Operand::kQ4Wt];
  const auto& q5 = policy_[Operand::kQ5dYt];
  const auto& q6 = policy_[Operand::kQ6Xt];
  const std::string q3name = "linear " + name_ + " dY", q5name = "linear " + name_ + " dY^T";

  // dX = Q3(dY) Q4(W^T)^T, reduction over out (both operands share the dX RHT signs).
  const QuantOperand dyq(
      dy, n, out_, q3, randomness(ctx_, QuantPurpose::kSrQ3, QuantPurpose::kRhtDx, q3.rht_n), q3name.c_str());
  const std::vector<float> a = dyq.values();
  const std::vector<float> b = q4_.values();
  if (q4.source == QuantSource::kReuse)  // b is Q2(W) [out x in]
    cpu::gemm(false, false, n, in_, out_, 1.0f, a.data(), out_, b.data(), in_, accumulate_dx ? 1.0f : 0.0f,
              dx, in_);
  else  // b is [in x out]
    cpu::gemm(false, true, n, in_, out_, 1.0f, a.data(), out_, b.data(), out_, accumulate_dx ? 1.0f : 0.0f,
              dx, in_);

  if (split_) {
    nonfinite_ += dyq.nonfinite();
    backward_split_dw(dy, dw, n);
    return;
  }
  // dW += Q5(dY^T) Q6(X^T)^T, reduction over n (shared dW RHT signs).
  const std::vector<float> dyt = transposed(dy, n, out_);
  const QuantOperand dytq(dyt.data(), out_, n, q5,
                          randomness(ctx_, QuantPurpose::kSrQ5, QuantPurpose::kRhtDw, q5.rht_n),
                          q5name.c_str());
  const std::vector<float> c = dytq.values();
  const std::vector<float> d = q6_.values();
  if (q6.source == QuantSource::kReuse)  // d is Q1(X) [n x in]
    cpu::gemm(false, false, out_, in_, n, 1.0f, c.data(), n, d.data(), in_, 1.0f, dw, in_);
  else  // d is [in x n]
    cpu::gemm(false, true, out_, in_, n, 1.0f, c.data(), n, d.data(), n, 1.0f, dw, in_);
  nonfinite_ += dyq.nonfinite() + dytq.nonfinite();
}

}  // namespace fp4
