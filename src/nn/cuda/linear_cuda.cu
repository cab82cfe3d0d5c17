#include "core/error.h"
#include "nn/cuda/linear_cuda.h"
#include "nn/cuda/quant_linear_cuda.h"

namespace fp4::cuda {

namespace {

class Bf16Linear final : public LinearCuda {
 public:
  Bf16Linear(LinearSpec spec, const DeviceWeight& w, GemmRunner& gemm, cudaStream_t stream)
      : LinearCuda(std::move(spec)), w_(w), gemm_(gemm), stream_(stream) {}

  void forward(const bf16* x, bf16* y, int n) override {
    saved_x_ = x;
    saved_n_ = n;
    const int in = spec_.in_features, out = spec_.out_features;
    gemm_.gemm(false, true, n, out, in, 1.0f, x, in, w_.value, in, 0.0f, y, out, stream_);
  }

  void backward(const bf16* dy, const LinearGradOut& dx, int n) override {
    FP4_CHECK(saved_x_ != nullptr && saved_n_ == n, "linear ", spec_.name, ": backward over ", n,
              " rows without a matching forward");
    FP4_CHECK((dx.bf16_out != nullptr) != (dx.f32_out != nullptr), "linear ", spec_.name,
              ": backward needs exactly one dX output (BF16 or FP32)");
    FP4_CHECK(dx.add == nullptr || dx.f32_out != nullptr, "linear ", spec_.name,
              ": adding into dX needs the FP32 output");
    const int in = spec_.in_features, out = spec_.out_features;
    if (dx.bf16_out != nullptr)
      gemm_.gemm(false, false, n, in, out, 1.0f, dy, out, w_.value, in, 0.0f, dx.bf16_out, in, stream_);
    else
      gemm_.gemm(false, false, n, in, out, 1.0f, dy, out, w_.value, in, dx.add ? 1.0f : 0.0f, dx.f32_out, in,
                 stream_, dx.add);
    gemm_.gemm(true, false, out, in, n, 1.0f, dy, out, saved_x_, in, 1.0f, w_.grad, in, stream_);
  }

  bool backward_reads_input() const override { return true; }  // dW = dY^T X reads the caller's X
  size_t kept_bytes() const override { return 0; }
  size_t workspace_bytes(int /*n*/) const override { return 0; }

 private:
  DeviceWeight w_;
  GemmRunner& gemm_;
  cudaStream_t stream_;
  const bf16* saved_x_ = nullptr;
  int saved_n_ = 0;
};

}  // namespace

std::unique_ptr<LinearCuda> make_linear_cuda(const LinearSpec& spec, const DeviceWeight& weight,
                                             GemmRunner& gemm, cudaStream_t stream) {
  FP4_CHECK(spec.in_features > 0 && spec.out_features > 0, "linear ", spec.name, ": bad shape [",
            spec.out_features, ", ", spec.in_features, "]");
  FP4_CHECK(weight.value != nullptr && weight.grad != nullptr, "linear ", spec.name,
            ": weight not on the device");
  // Quantized policies: the NVFP4 layer (quant_linear_cuda.h), which names what it cannot run.
  if (spec.policy.quantized()) return make_quant_linear_cuda(spec, weight, gemm, stream);
  return std::make_unique<Bf16Linear>(spec, weight, gemm, stream);
}

}  // namespace fp4::cuda
