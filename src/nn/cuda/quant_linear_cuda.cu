#include <algorithm>
#include <string>

#include "core/error.h"
#include "nn/cuda/quant_linear_cuda.h"
#include "nn/quant_linear.h"
#include "ops/cuda/quantize_cuda.h"

namespace fp4::cuda {
namespace {

// Transient buffers shared by every quantized layer: all run one after another on one stream, so one
// growing allocation per role serves them all.
template <typename T>
T* scratch(DeviceBuffer<T>& buf, size_t count) {
  if (buf.size() < count) buf = DeviceBuffer<T>(count);
  return buf.data();
}

struct Scratch {
  DeviceBuffer<bf16> a, b;        // BF16 GEMM operands
  DeviceBuffer<uint8_t> codes_a, scales_a, codes_b, scales_b;
  DeviceBuffer<float> outer_a, outer_b, amax;
};
Scratch& shared_scratch() {
  static Scratch s;
  return s;
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
};

Nvfp4DeviceView scratch_view(DeviceBuffer<uint8_t>& codes, DeviceBuffer<uint8_t>& scales, DeviceBuffer<float>& outer,
                             int64_t rows, int64_t cols, const QuantSpec& spec) {
  const size_t n = static_cast<size_t>(rows * cols);
  return Nvfp4DeviceView{scratch(codes, n / 2), scratch(scales, n / 16),
                         scratch(outer, static_cast<size_t>(nvfp4_outer_count(rows, cols, spec.outer))), rows,
                         cols, spec.block, spec.outer};
}

DequantOutput bf16_out(bf16* p) { return DequantOutput{p, QuantIoType::kBF16, true}; }

class QuantLinearCudaImpl final : public LinearCuda {
 public:
  QuantLinearCudaImpl(LinearSpec spec, const DeviceWeight& w, GemmRunner& gemm, cudaStream_t stream)
      : LinearCuda(std::move(spec)), w_(w), gemm_(gemm), stream_(stream), p_(spec_.policy) {}

  void forward(const bf16* x, bf16* y, int n) override {
    FP4_CHECK(spec_.quant_ctx != nullptr, "linear ", spec_.name, ": no quantization context");
    ctx_ = *spec_.quant_ctx;
    saved_n_ = n;
    const int in = spec_.in_features, out = spec_.out_features;
    Scratch& s = shared_scratch();
    float* amax = scratch(s.amax, 4);
    bf16* x_hat = scratch(s.a, static_cast<size_t>(n) * in);
    bf16* w_hat_tmp = scratch(s.b, static_cast<size_t>(out) * in);

    // X: Q1 along in (the forward operand, dequantized for the GEMM) and Q6 = X^T along n, in one pass.
    {
      const DeviceInput xin{x, QuantIoType::kBF16, n, in};
      DualOperand rows{p_[Operand::kQ1X], rnd(QuantPurpose::kSrQ1, QuantPurpose::kRhtDx, 0),
                       scratch_view(s.codes_a, s.scales_a, s.outer_a, n, in, p_[Operand::kQ1X]), amax + 0, nullptr};
      DualOperand cols{p_[Operand::kQ6Xt], rnd(QuantPurpose::kSrQ6, QuantPurpose::kRhtDw, p_[Operand::kQ6Xt].rht_n),
                       q6_.view(in, n, p_[Operand::kQ6Xt]), amax + 1, nullptr};
      if (rows.spec.outer == OuterScale::kTensor || cols.spec.outer == OuterScale::kTensor)
        amax_dual_cuda(xin, rows, cols, amax + 0, amax + 1, stream_);
      quantize_dual_cuda(xin, rows, cols, bf16_out(x_hat), stream_);
    }
    // W (the FP32 master): Q2 along in, and Q4 = W^T along out (aligned), or W^ itself (reuse, 16x16).
    const DeviceInput win{w_.master, QuantIoType::kF32, out, in};
    const QuantSpec& q2 = p_[Operand::kQ2W];
    if (p_[Operand::kQ4Wt].source == QuantSource::kReuse) {
      const Nvfp4DeviceView v = scratch_view(s.codes_b, s.scales_b, s.outer_b, out, in, q2);
      const QuantRandomness r2 = rnd(QuantPurpose::kSrQ2, QuantPurpose::kRhtDx, 0);
      if (q2.outer == OuterScale::kTensor) amax_nvfp4_cuda(win, q2, r2, amax + 2, stream_);
      bf16* w_hat = scratch(w_hat_keep_, static_cast<size_t>(out) * in);
      quantize_nvfp4_cuda(win, q2, r2, v, amax + 2, nullptr, bf16_out(w_hat), stream_);
      gemm_.gemm(false, true, n, out, in, 1.0f, x_hat, in, w_hat, in, 0.0f, y, out, stream_);
    } else {
      DualOperand rows{q2, rnd(QuantPurpose::kSrQ2, QuantPurpose::kRhtDx, 0),
                       scratch_view(s.codes_b, s.scales_b, s.outer_b, out, in, q2), amax + 2, nullptr};
      DualOperand cols{p_[Operand::kQ4Wt], rnd(QuantPurpose::kSrQ4, QuantPurpose::kRhtDx, p_[Operand::kQ4Wt].rht_n),
                       q4_.view(in, out, p_[Operand::kQ4Wt]), amax + 3, nullptr};
      if (rows.spec.outer == OuterScale::kTensor || cols.spec.outer == OuterScale::kTensor)
        amax_dual_cuda(win, rows, cols, amax + 2, amax + 3, stream_);
      quantize_dual_cuda(win, rows, cols, bf16_out(w_hat_tmp), stream_);
      gemm_.gemm(false, true, n, out, in, 1.0f, x_hat, in, w_hat_tmp, in, 0.0f, y, out, stream_);
    }
  }

  void backward(const bf16* dy, const LinearGradOut& dx, int n) override {
    FP4_CHECK(saved_n_ == n, "linear ", spec_.name, ": backward over ", n, " rows without a matching forward");
    FP4_CHECK((dx.bf16_out != nullptr) != (dx.f32_out != nullptr), "linear ", spec_.name,
              ": backward needs exactly one dX output (BF16 or FP32)");
    FP4_CHECK(dx.add == nullptr || dx.f32_out != nullptr, "linear ", spec_.name,
              ": adding into dX needs the FP32 output");
    const int in = spec_.in_features, out = spec_.out_features;
    Scratch& s = shared_scratch();
    float* amax = scratch(s.amax, 4);
    // dY: Q3 along out (for dX) and Q5 = dY^T along n (for dW) in one pass; Q3's values land in BF16.
    const size_t ny = static_cast<size_t>(n) * out;
    bf16* dy_hat = scratch(s.a, std::max(ny, static_cast<size_t>(n) * in));
    const DeviceInput yin{dy, QuantIoType::kBF16, n, out};
    DualOperand rows{p_[Operand::kQ3dY], rnd(QuantPurpose::kSrQ3, QuantPurpose::kRhtDx, p_[Operand::kQ3dY].rht_n),
                     scratch_view(s.codes_a, s.scales_a, s.outer_a, n, out, p_[Operand::kQ3dY]), amax + 0, nullptr};
    DualOperand cols{p_[Operand::kQ5dYt], rnd(QuantPurpose::kSrQ5, QuantPurpose::kRhtDw, p_[Operand::kQ5dYt].rht_n),
                     scratch_view(s.codes_b, s.scales_b, s.outer_b, out, n, p_[Operand::kQ5dYt]), amax + 1, nullptr};
    if (rows.spec.outer == OuterScale::kTensor || cols.spec.outer == OuterScale::kTensor)
      amax_dual_cuda(yin, rows, cols, amax + 0, amax + 1, stream_);
    quantize_dual_cuda(yin, rows, cols, bf16_out(dy_hat), stream_);

    // dX = Q3(dY) Q4(W^T)^T over out.
    bf16* b = scratch(s.b, std::max(static_cast<size_t>(in) * out, static_cast<size_t>(out) * n +
                                                                         static_cast<size_t>(in) * n));
    const float beta = dx.add ? 1.0f : 0.0f;
    if (p_[Operand::kQ4Wt].source == QuantSource::kReuse) {  // W^ [out x in]
      if (dx.bf16_out)
        gemm_.gemm(false, false, n, in, out, 1.0f, dy_hat, out, w_hat_keep_.data(), in, 0.0f, dx.bf16_out, in, stream_);
      else
        gemm_.gemm(false, false, n, in, out, 1.0f, dy_hat, out, w_hat_keep_.data(), in, beta, dx.f32_out, in, stream_,
                   dx.add);
    } else {  // Q4 [in x out]
      dequantize_nvfp4_cuda(q4_.view(in, out, p_[Operand::kQ4Wt]), bf16_out(b), stream_);
      if (dx.bf16_out)
        gemm_.gemm(false, true, n, in, out, 1.0f, dy_hat, out, b, out, 0.0f, dx.bf16_out, in, stream_);
      else
        gemm_.gemm(false, true, n, in, out, 1.0f, dy_hat, out, b, out, beta, dx.f32_out, in, stream_, dx.add);
    }
    // dW += Q5(dY^T) Q6(X^T)^T over n: both dequantized to BF16 (dY^T [out x n], X^T [in x n]).
    bf16* dyt = b;
    bf16* xt = b + static_cast<size_t>(out) * n;
    dequantize_nvfp4_cuda(cols.out, bf16_out(dyt), stream_);
    dequantize_nvfp4_cuda(q6_.view(in, n, p_[Operand::kQ6Xt]), bf16_out(xt), stream_);
    gemm_.gemm(false, true, out, in, n, 1.0f, dyt, n, xt, n, 1.0f, w_.grad, in, stream_);
  }

 private:
  QuantRandomness rnd(QuantPurpose sr, QuantPurpose rht, int rht_n) const {
    return quant_randomness(p_, ctx_, spec_.layer_id, sr, rht, rht_n);
  }

  DeviceWeight w_;
  GemmRunner& gemm_;
  cudaStream_t stream_;
  LinearPolicy p_;
  QuantContext ctx_;
  int saved_n_ = -1;
  PackedOperand q6_, q4_;           // kept from forward to backward
  DeviceBuffer<bf16> w_hat_keep_;   // NVIDIA's re-used 16x16 W^ (BF16)
};

void check_supported(const LinearSpec& spec) {
  const LinearPolicy& p = spec.policy;
  const std::string where = "linear " + spec.name + " (recipe " + spec.recipe_name + ") on CUDA";
  for (int i = 0; i < kNumOperands; ++i)
    FP4_CHECK(p.q[static_cast<size_t>(i)].format == QuantFormat::kNvfp4, where, ": Q", i + 1,
              " must be NVFP4 here (mixed BF16/NVFP4 operand sets run on the CPU engine)");
  FP4_CHECK(p[Operand::kQ4Wt].source != QuantSource::kOriginal, where,
            ": Q4 source = original is not supported here (use aligned or reuse)");
  FP4_CHECK(p[Operand::kQ6Xt].source != QuantSource::kReuse, where, ": Q6 source = reuse is not supported here");
  for (Operand o : {Operand::kQ1X, Operand::kQ3dY, Operand::kQ5dYt, Operand::kQ6Xt})
    FP4_CHECK(p[o].block == BlockShape::k1x16, where, ": the fused dual quantizer takes 1x16 blocks only for X, dY");
  FP4_CHECK(p[Operand::kQ4Wt].source == QuantSource::kReuse || p[Operand::kQ2W].block == BlockShape::k1x16, where,
            ": Q2 16x16 needs Q4 source = reuse");
}

}  // namespace

std::unique_ptr<LinearCuda> make_quant_linear_cuda(const LinearSpec& spec, const DeviceWeight& weight,
                                                   GemmRunner& gemm, cudaStream_t stream) {
  check_supported(spec);
  FP4_CHECK(weight.master != nullptr && weight.grad != nullptr, "linear ", spec.name, ": weight not on the device");
  return std::make_unique<QuantLinearCudaImpl>(spec, weight, gemm, stream);
}

}  // namespace fp4::cuda
