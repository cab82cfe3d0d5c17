#include <algorithm>
#include <string>

#include "core/error.h"
#include "nn/cuda/lora_svd_linear_cuda.h"
#include "nn/cuda/quant_linear_cuda.h"

namespace fp4::cuda {

bf16* LoraSvdCudaShared::low_rank(size_t count) {
  if (low_.size() < count) low_ = DeviceBuffer<bf16>(count);
  return low_.data();
}

namespace {

class LoraSvdLinearCuda final : public LinearCuda, public OutControlLinear {
 public:
  LoraSvdLinearCuda(const LinearSpec& spec, const DeviceWeight& w_res, const LoraSvdFactors& f,
                    LoraSvdCudaShared& shared, GemmRunner& gemm, cudaStream_t stream)
      : LinearCuda(spec),
        w_res_(w_res),
        f_(f),
        shared_(shared),
        gemm_(gemm),
        stream_(stream),
        basis_slot_(shared.bases().add_layer(spec.out_features, f.rank)) {
    // The NVFP4 layer accumulates its wgrad into the shared buffer, which backward() zeroes and splits.
    inner_ =
        make_quant_linear_cuda(spec_, DeviceWeight{w_res.master, w_res.value, shared_.dw()}, gemm_, stream_);
  }

  void forward(const bf16* x, bf16* y, int n) override {
    const int in = spec_.in_features, out = spec_.out_features, r = f_.rank;
    inner_->lend_workspace(workspace_, workspace_size_);
    inner_->forward(x, y, n);
    shared_.bases().queue_download(basis_slot_, f_.l2.master, stream_);  // for this micro-batch's backward
    bf16* xl1 = shared_.low_rank(static_cast<size_t>(n) * r);
    gemm_.gemm(false, true, n, r, in, 1.0f, x, in, f_.l1.value, in, 0.0f, xl1, r, stream_);
    gemm_.gemm(false, true, n, out, r, f_.beta, xl1, r, f_.l2.value, r, 1.0f, y, out, stream_);
  }

  void backward(const bf16* dy, const LinearGradOut& dx, int n) override {
    const int in = spec_.in_features, out = spec_.out_features, r = f_.rank;
    inner_->lend_workspace(workspace_, workspace_size_);
    FP4_CUDA_CHECK(cudaMemsetAsync(shared_.dw(), 0, static_cast<size_t>(out) * in * sizeof(float), stream_));
    inner_->backward(dy, dx, n);
    // dX += beta (dY L2) L1, into whichever output the NVFP4 layer wrote.
    bf16* dyl2 = shared_.low_rank(static_cast<size_t>(n) * r);
    gemm_.gemm(false, false, n, r, out, 1.0f, dy, out, f_.l2.value, r, 0.0f, dyl2, r, stream_);
    if (dx.bf16_out)
      gemm_.gemm(false, false, n, in, r, f_.beta, dyl2, r, f_.l1.value, in, 1.0f, dx.bf16_out, in, stream_);
    else
      gemm_.gemm(false, false, n, in, r, f_.beta, dyl2, r, f_.l1.value, in, 1.0f, dx.f32_out, in, stream_);
    const float* u = shared_.bases().basis(basis_slot_, stream_);
    lora_svd_split_gradient_with_basis(shared_.dw(), u, f_.l1.master, f_.l2.master, out, in, r, f_.beta,
                                       w_res_.grad, f_.l1.grad, f_.l2.grad, shared_.split(),
                                       shared_.gemm_f32(), stream_);
  }

  bool backward_reads_input() const override { return false; }  // the NVFP4 layer keeps its packed X^T
  size_t kept_bytes() const override { return inner_->kept_bytes(); }
  size_t workspace_bytes(int n) const override { return inner_->workspace_bytes(n); }

  OutChannels* out_channels() override { return oc()->out_channels(); }
  void collect_out_control_sums() override { oc()->collect_out_control_sums(); }
  SplitOperands split_operands() const override {
    return dynamic_cast<const OutControlLinear&>(*inner_).split_operands();
  }

 private:
  OutControlLinear* oc() { return dynamic_cast<OutControlLinear*>(inner_.get()); }

  DeviceWeight w_res_;
  LoraSvdFactors f_;
  LoraSvdCudaShared& shared_;
  GemmRunner& gemm_;
  cudaStream_t stream_;
  int basis_slot_;  // this layer's U in shared_.bases()
  std::unique_ptr<LinearCuda> inner_;
};

}  // namespace

std::unique_ptr<LinearCuda> make_lora_svd_linear_cuda(const LinearSpec& spec, const DeviceWeight& w_res,
                                                      const LoraSvdFactors& factors,
                                                      LoraSvdCudaShared& shared, GemmRunner& gemm,
                                                      cudaStream_t stream) {
  const int in = spec.in_features, out = spec.out_features;
  FP4_CHECK(factors.rank >= 1 && factors.rank < std::min(in, out), "lora_svd.rank ", factors.rank,
            " does not fit linear ", spec.name, " [", out, " x ", in,
            "]: it must be at least 1 and below min(in, out) = ", std::min(in, out));
  FP4_CHECK(static_cast<size_t>(out) * in <= shared.dw_capacity(), "linear ", spec.name, " [", out, " x ", in,
            "]: the shared LoRA-SVD wgrad buffer holds only ", shared.dw_capacity(), " elements");
  for (const DeviceWeight* w : {&w_res, &factors.l1, &factors.l2})
    FP4_CHECK(w->master != nullptr && w->value != nullptr && w->grad != nullptr, "linear ", spec.name,
              ": a LoRA-SVD weight is not on the device");
  return std::make_unique<LoraSvdLinearCuda>(spec, w_res, factors, shared, gemm, stream);
}

}  // namespace fp4::cuda
