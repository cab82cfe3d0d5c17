#include <algorithm>
#include <string>

#include "core/error.h"
#include "nn/cuda/quant_linear_cuda.h"
#include "nn/cuda/quant_linear_split_cuda.h"
#include "nn/quant_linear.h"
#include "ops/cuda/out_control_cuda.h"
#include "ops/cuda/quant/quantize_cuda.h"
#include "tensor/carver.h"

namespace fp4::cuda {
namespace {

// The transients of one forward or backward over n rows, carved in one order from one region; each piece
// is sized for the larger of its two uses, so forward and backward share the layout.
struct Transients {
  float* amax = nullptr;       // 4 tensor amax values
  bf16* a = nullptr;           // [n x max(in, out)]: X^ (forward); Q3(dY) values, then Q6 values (backward)
  bf16* b = nullptr;           // [out x n]: Q5(dY^T) values, written by the dual quantizer (backward)
  bf16* w = nullptr;           // [out x in]: W^ (forward); Q4 or Q2 values (backward)
  uint8_t* codes_a = nullptr;  // packed Q1 [n x in] (forward), Q3 [n x out] (backward)
  uint8_t* scales_a = nullptr;
  float* outer_a = nullptr;
  uint8_t* codes_b = nullptr;  // packed Q2 [out x in] (forward, aligned Q4), Q5 [out x n] (backward)
  uint8_t* scales_b = nullptr;
  float* outer_b = nullptr;
  size_t bytes = 0;
};

Transients carve_transients(uint8_t* base, int64_t n, int64_t in, int64_t out, const LinearPolicy& p) {
  const auto na = static_cast<size_t>(n * std::max(in, out)),
             nb = static_cast<size_t>(std::max(out * in, out * n));
  const auto nw = static_cast<size_t>(out * in);
  const auto outer_a = static_cast<size_t>(std::max(nvfp4_outer_count(n, in, p[Operand::kQ1X].outer),
                                                    nvfp4_outer_count(n, out, p[Operand::kQ3dY].outer)));
  const auto outer_b = static_cast<size_t>(std::max(nvfp4_outer_count(out, in, p[Operand::kQ2W].outer),
                                                    nvfp4_outer_count(out, n, p[Operand::kQ5dYt].outer)));
  Carver c(base);
  Transients t;
  t.amax = c.take<float>(4);
  t.a = c.take<bf16>(na);
  t.b = c.take<bf16>(static_cast<size_t>(out * n));
  t.w = c.take<bf16>(nw);
  t.codes_a = c.take<uint8_t>(na / 2);
  t.scales_a = c.take<uint8_t>(na / 16);
  t.outer_a = c.take<float>(outer_a);
  t.codes_b = c.take<uint8_t>(nb / 2);
  t.scales_b = c.take<uint8_t>(nb / 16);
  t.outer_b = c.take<float>(outer_b);
  t.bytes = c.used();
  return t;
}

// Where layers without a lent workspace carve their transients: one growing region shared by all of them
// (they run one after another on one stream), for standalone use; the engine lends a piece of its arena.
uint8_t* fallback_workspace(size_t bytes) {
  static DeviceBuffer<uint8_t> region;
  if (region.size() < bytes) region = DeviceBuffer<uint8_t>(bytes);
  return region.data();
}

// Device storage of one packed operand that a layer keeps from forward to backward.
struct PackedOperand {
  DeviceBuffer<uint8_t> codes, scales;
  DeviceBuffer<float> outer;
  Nvfp4DeviceView view(int64_t rows, int64_t cols, const QuantSpec& spec) {
    const size_t n = static_cast<size_t>(rows * cols);
    if (codes.size() < n / 2) codes = DeviceBuffer<uint8_t>(n / 2);
    if (scales.size() < n / 16) scales = DeviceBuffer<uint8_t>(n / 16);
    const auto nouter = static_cast<size_t>(nvfp4_outer_count(rows, cols, spec.outer));
    if (outer.size() < nouter) outer = DeviceBuffer<float>(nouter);
    return Nvfp4DeviceView{codes.data(), scales.data(), outer.data(), rows, cols, spec.block, spec.outer};
  }
  size_t bytes() const { return codes.bytes() + scales.bytes() + outer.bytes(); }
};

// A [rows x cols] operand view over transient storage.
Nvfp4DeviceView transient_view(uint8_t* codes, uint8_t* scales, float* outer, int64_t rows, int64_t cols,
                               const QuantSpec& spec) {
  return Nvfp4DeviceView{codes, scales, outer, rows, cols, spec.block, spec.outer};
}

DequantOutput bf16_out(bf16* p) {
  return DequantOutput{p, QuantIoType::kBF16, true};
}

class QuantLinearCudaImpl final : public LinearCuda, public OutControlLinear {
 public:
  QuantLinearCudaImpl(LinearSpec spec, const DeviceWeight& w, GemmRunner& gemm, cudaStream_t stream)
      : LinearCuda(std::move(spec)), w_(w), gemm_(gemm), stream_(stream), p_(spec_.policy) {
    if (OutControl* oc = spec_.quant_ctx ? spec_.quant_ctx->out_control : nullptr) {  // as the CPU layer
      split_ = std::make_unique<QuantLinearSplitCuda>(spec_, w_, gemm_, stream_);
      channels_ = oc->add(spec_.name, spec_.in_features);
    }
  }

  void forward(const bf16* x, bf16* y, int n) override {
    FP4_CHECK(spec_.quant_ctx != nullptr, "linear ", spec_.name, ": no quantization context");
    ctx_ = *spec_.quant_ctx;
    saved_n_ = n;
    const int in = spec_.in_features, out = spec_.out_features;
    if (channels_ && channels_->calibrating()) measure(x, n);
    split_active_ = channels_ && channels_->frozen();
    if (split_active_) {
      split_->forward(*channels_, x, y, n, ctx_, split_workspace(n));
      if (ctx_.inference) saved_n_ = -1;
      return;
    }
    const Transients s = transients(n);
    if (ctx_.inference) {
      forward_inference(s, x, y, n);
      return;
    }
    float* amax = s.amax;
    bf16* x_hat = s.a;

    // X: Q1 along in (the forward operand, dequantized for the GEMM) and Q6 = X^T along n, in one pass.
    {
      const DeviceInput xin{x, QuantIoType::kBF16, n, in};
      DualOperand rows{p_[Operand::kQ1X], rnd(QuantPurpose::kSrQ1, QuantPurpose::kRhtDx, 0),
                       transient_view(s.codes_a, s.scales_a, s.outer_a, n, in, p_[Operand::kQ1X]), amax + 0,
                       nullptr};
      DualOperand cols{p_[Operand::kQ6Xt],
                       rnd(QuantPurpose::kSrQ6, QuantPurpose::kRhtDw, p_[Operand::kQ6Xt].rht_n),
                       q6_.view(in, n, p_[Operand::kQ6Xt]), amax + 1, nullptr};
      if (rows.spec.outer == OuterScale::kTensor || cols.spec.outer == OuterScale::kTensor)
        amax_dual_cuda(xin, rows, cols, amax + 0, amax + 1, stream_);
      quantize_dual_cuda(xin, rows, cols, bf16_out(x_hat), stream_);
    }
    // W (the FP32 master): Q2 along in, and Q4 = W^T along out (aligned), or W^ itself (reuse, 16x16).
    const DeviceInput win{w_.master, QuantIoType::kF32, out, in};
    const QuantSpec& q2 = p_[Operand::kQ2W];
    bf16* w_hat = s.w;
    if (p_[Operand::kQ4Wt].source == QuantSource::kReuse) {
      // Q2 is kept packed: the backward dequantizes it again (the same BF16 bits, 4.5 bits a weight).
      const QuantRandomness r2 = rnd(QuantPurpose::kSrQ2, QuantPurpose::kRhtDx, 0);
      if (q2.outer == OuterScale::kTensor) amax_nvfp4_cuda(win, q2, r2, amax + 2, stream_);
      quantize_nvfp4_cuda(win, q2, r2, q2_.view(out, in, q2), amax + 2, nullptr, bf16_out(w_hat), stream_);
    } else {
      DualOperand rows{q2, rnd(QuantPurpose::kSrQ2, QuantPurpose::kRhtDx, 0),
                       transient_view(s.codes_b, s.scales_b, s.outer_b, out, in, q2), amax + 2, nullptr};
      DualOperand cols{p_[Operand::kQ4Wt],
                       rnd(QuantPurpose::kSrQ4, QuantPurpose::kRhtDx, p_[Operand::kQ4Wt].rht_n),
                       q4_.view(in, out, p_[Operand::kQ4Wt]), amax + 3, nullptr};
      if (rows.spec.outer == OuterScale::kTensor || cols.spec.outer == OuterScale::kTensor)
        amax_dual_cuda(win, rows, cols, amax + 2, amax + 3, stream_);
      quantize_dual_cuda(win, rows, cols, bf16_out(w_hat), stream_);
    }
    gemm_.gemm(false, true, n, out, in, 1.0f, x_hat, in, w_hat, in, 0.0f, y, out, stream_);
  }

  void backward(const bf16* dy, const LinearGradOut& dx, int n) override {
    FP4_CHECK(saved_n_ == n, "linear ", spec_.name, ": backward over ", n,
              " rows without a matching training forward (an inference forward keeps no backward operands)");
    FP4_CHECK((dx.bf16_out != nullptr) != (dx.f32_out != nullptr), "linear ", spec_.name,
              ": backward needs exactly one dX output (BF16 or FP32)");
    FP4_CHECK(dx.add == nullptr || dx.f32_out != nullptr, "linear ", spec_.name,
              ": adding into dX needs the FP32 output");
    const int in = spec_.in_features, out = spec_.out_features;
    const Transients s = transients(n);
    float* amax = s.amax;
    // dY: Q3 along out (for dX) and Q5 = dY^T along n (for dW) in one pass; the values of both land in
    // BF16 (the GEMMs' operands), Q3's in a, Q5's in b.
    bf16* dy_hat = s.a;
    bf16* dyt = s.b;
    const DeviceInput yin{dy, QuantIoType::kBF16, n, out};
    DualOperand rows{
        p_[Operand::kQ3dY], rnd(QuantPurpose::kSrQ3, QuantPurpose::kRhtDx, p_[Operand::kQ3dY].rht_n),
        transient_view(s.codes_a, s.scales_a, s.outer_a, n, out, p_[Operand::kQ3dY]), amax + 0, nullptr};
    DualOperand cols{
        p_[Operand::kQ5dYt], rnd(QuantPurpose::kSrQ5, QuantPurpose::kRhtDw, p_[Operand::kQ5dYt].rht_n),
        transient_view(s.codes_b, s.scales_b, s.outer_b, out, n, p_[Operand::kQ5dYt]), amax + 1, nullptr};
    if (rows.spec.outer == OuterScale::kTensor || cols.spec.outer == OuterScale::kTensor)
      amax_dual_cuda(yin, rows, cols, amax + 0, amax + 1, stream_);
    quantize_dual_cuda(yin, rows, cols, bf16_out(dy_hat), bf16_out(dyt), stream_);

    // dX = Q3(dY) Q4(W^T)^T over out; W^T's BF16 values go to w.
    bf16* b = s.w;
    const float beta = dx.add ? 1.0f : 0.0f;
    if (p_[Operand::kQ4Wt].source == QuantSource::kReuse) {  // W^ [out x in], from the kept 16x16 Q2
      dequantize_nvfp4_cuda(q2_.view(out, in, p_[Operand::kQ2W]), bf16_out(b), stream_);
      if (dx.bf16_out)
        gemm_.gemm(false, false, n, in, out, 1.0f, dy_hat, out, b, in, 0.0f, dx.bf16_out, in, stream_);
      else
        gemm_.gemm(false, false, n, in, out, 1.0f, dy_hat, out, b, in, beta, dx.f32_out, in, stream_, dx.add);
    } else {  // Q4 [in x out]; after the OutControl freeze the split's, from the assembled W^
      dequantize_nvfp4_cuda(split_active_ ? split_->q4() : q4_.view(in, out, p_[Operand::kQ4Wt]), bf16_out(b),
                            stream_);
      if (dx.bf16_out)
        gemm_.gemm(false, true, n, in, out, 1.0f, dy_hat, out, b, out, 0.0f, dx.bf16_out, in, stream_);
      else
        gemm_.gemm(false, true, n, in, out, 1.0f, dy_hat, out, b, out, beta, dx.f32_out, in, stream_, dx.add);
    }
    if (split_active_) {  // dW per channel set, after the split's transients
      split_->backward_dw(dy, dyt, n, split_workspace(n));
      return;
    }
    // dW += Q5(dY^T) Q6(X^T)^T over n: both as BF16 values, X^T [in x n] over Q3's in a (the dX GEMM,
    // queued before on the same stream, was their last reader).
    bf16* xt = s.a;
    dequantize_nvfp4_cuda(q6_.view(in, n, p_[Operand::kQ6Xt]), bf16_out(xt), stream_);
    gemm_.gemm(false, true, out, in, n, 1.0f, dyt, n, xt, n, 1.0f, w_.grad, in, stream_);
  }

  bool backward_reads_input() const override { return false; }  // it reads its packed Q6 = X^T
  size_t kept_bytes() const override {
    return q6_.bytes() + q4_.bytes() + q2_.bytes() + (split_ ? split_->kept_bytes() : 0);
  }
  size_t workspace_bytes(int n) const override {
    const size_t plain = carve_transients(nullptr, n, spec_.in_features, spec_.out_features, p_).bytes;
    if (!channels_ || !channels_->frozen()) return plain;
    return split_offset(n) + split_->workspace_bytes(*channels_, n);
  }

  OutChannels* out_channels() override { return channels_; }

  void collect_out_control_sums() override {
    if (!calib_pending_) return;
    calib_pending_ = false;
    std::vector<double> h(calib_.size());
    FP4_CUDA_CHECK(cudaMemcpyAsync(h.data(), calib_.data(), calib_.bytes(), cudaMemcpyDeviceToHost, stream_));
    FP4_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const std::span<double> step = channels_->step_sums();
    FP4_CHECK(step.size() == h.size(), "linear ", spec_.name, ": out_control step sums hold ", step.size(),
              " values, the device measured ", h.size(), " (collect before the step ends)");
    for (size_t i = 0; i < h.size(); ++i) step[i] += h[i];
  }

  SplitOperands split_operands() const override {
    FP4_CHECK(split_ != nullptr, "linear ", spec_.name, ": out_control is off");
    return split_->operands();
  }

 private:
  QuantRandomness rnd(QuantPurpose sr, QuantPurpose rht, int rht_n) const {
    return quant_randomness(p_, ctx_, spec_.layer_id, sr, rht, rht_n);
  }

  // Evaluation and generation: only the forward operands Q1(X), Q2(W), both along in, with the training
  // forward's random bits (the same Y); no Q4, Q6 (Q6 runs along n, so any n works), backward refused.
  void forward_inference(const Transients& s, const bf16* x, bf16* y, int n) {
    saved_n_ = -1;
    const int in = spec_.in_features, out = spec_.out_features;
    const QuantSpec& q1 = p_[Operand::kQ1X];
    const QuantSpec& q2 = p_[Operand::kQ2W];
    const DeviceInput xin{x, QuantIoType::kBF16, n, in};
    const QuantRandomness r1 = rnd(QuantPurpose::kSrQ1, QuantPurpose::kRhtDx, 0);
    if (q1.outer == OuterScale::kTensor) amax_nvfp4_cuda(xin, q1, r1, s.amax + 0, stream_);
    quantize_nvfp4_cuda(xin, q1, r1, transient_view(s.codes_a, s.scales_a, s.outer_a, n, in, q1), s.amax + 0,
                        nullptr, bf16_out(s.a), stream_);
    const DeviceInput win{w_.master, QuantIoType::kF32, out, in};
    const QuantRandomness r2 = rnd(QuantPurpose::kSrQ2, QuantPurpose::kRhtDx, 0);
    if (q2.outer == OuterScale::kTensor) amax_nvfp4_cuda(win, q2, r2, s.amax + 2, stream_);
    quantize_nvfp4_cuda(win, q2, r2, transient_view(s.codes_b, s.scales_b, s.outer_b, out, in, q2),
                        s.amax + 2, nullptr, bf16_out(s.w), stream_);
    gemm_.gemm(false, true, n, out, in, 1.0f, s.a, in, s.w, in, 0.0f, y, out, stream_);
  }

  // The transients for n rows: in the lent workspace, else in the shared fallback region.
  Transients transients(int n) const {
    return carve_transients(workspace_base(n), n, spec_.in_features, spec_.out_features, p_);
  }
  uint8_t* workspace_base(int n) const {
    const size_t need = workspace_bytes(n);
    if (workspace_ == nullptr) return fallback_workspace(need);
    FP4_CHECK(workspace_size_ >= need, "linear ", spec_.name, ": the lent workspace holds ", workspace_size_,
              " bytes, ", n, " rows need ", need);
    return workspace_;
  }
  // The split's transients follow the plain ones (its backward reads the plain dY operands).
  size_t split_offset(int n) const {
    const size_t plain = carve_transients(nullptr, n, spec_.in_features, spec_.out_features, p_).bytes;
    return (plain + kCarveAlign - 1) / kCarveAlign * kCarveAlign;
  }
  uint8_t* split_workspace(int n) const { return workspace_base(n) + split_offset(n); }

  // OutControl calibration: this step's per-channel sums of ||X[:, i]|| and ||X[:, i]||^2, on the device.
  void measure(const bf16* x, int n) {
    const auto need = 2 * static_cast<size_t>(spec_.in_features);
    if (calib_.size() != need) calib_ = DeviceBuffer<double>(need);
    if (!calib_pending_) FP4_CUDA_CHECK(cudaMemsetAsync(calib_.data(), 0, calib_.bytes(), stream_));
    calib_pending_ = true;
    column_norm_sums_cuda(reinterpret_cast<const uint16_t*>(x), n, spec_.in_features, calib_.data(), stream_);
  }

  DeviceWeight w_;
  GemmRunner& gemm_;
  cudaStream_t stream_;
  LinearPolicy p_;
  QuantContext ctx_;
  int saved_n_ = -1;
  // Kept from forward to backward, packed: Q6 = X^T; Q4 = W^T (aligned) or the 16x16 Q2 itself (reuse).
  PackedOperand q6_, q4_, q2_;
  // OutControl (null when off): the channel state, the split form, and the calibration sums.
  OutChannels* channels_ = nullptr;
  std::unique_ptr<QuantLinearSplitCuda> split_;
  bool split_active_ = false;  // the last forward was the split
  DeviceBuffer<double> calib_;
  bool calib_pending_ = false;
};

void check_supported(const LinearSpec& spec) {
  const LinearPolicy& p = spec.policy;
  const std::string where = "linear " + spec.name + " (recipe " + spec.recipe_name + ") on CUDA";
  for (int i = 0; i < kNumOperands; ++i)
    FP4_CHECK(p.q[static_cast<size_t>(i)].format == QuantFormat::kNvfp4, where, ": Q", i + 1,
              " must be NVFP4 here (mixed BF16/NVFP4 operand sets run on the CPU engine)");
  FP4_CHECK(p[Operand::kQ4Wt].source != QuantSource::kOriginal, where,
            ": Q4 source = original is not supported here (use aligned or reuse)");
  FP4_CHECK(p[Operand::kQ6Xt].source != QuantSource::kReuse, where,
            ": Q6 source = reuse is not supported here");
  for (Operand o : {Operand::kQ1X, Operand::kQ3dY, Operand::kQ5dYt, Operand::kQ6Xt})
    FP4_CHECK(p[o].block == BlockShape::k1x16, where,
              ": the fused dual quantizer takes 1x16 blocks only for X, dY");
  FP4_CHECK(p[Operand::kQ4Wt].source == QuantSource::kReuse || p[Operand::kQ2W].block == BlockShape::k1x16,
            where, ": Q2 16x16 needs Q4 source = reuse");
}

}  // namespace

std::unique_ptr<LinearCuda> make_quant_linear_cuda(const LinearSpec& spec, const DeviceWeight& weight,
                                                   GemmRunner& gemm, cudaStream_t stream) {
  check_supported(spec);
  FP4_CHECK(weight.master != nullptr && weight.grad != nullptr, "linear ", spec.name,
            ": weight not on the device");
  return std::make_unique<QuantLinearCudaImpl>(spec, weight, gemm, stream);
}

}  // namespace fp4::cuda
