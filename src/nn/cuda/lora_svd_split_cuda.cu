#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/parallel_for.h"
#include "nn/cuda/lora_svd_split_cuda.h"
#include "nn/lora_svd.h"

namespace fp4::cuda {
namespace {

// gw[i] += dw[i] - p[i], in that order (as the CPU layer).
__global__ void add_residual_gradient_kernel(const float* dw, const float* p, float* gw, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    gw[i] = __fadd_rn(gw[i], __fsub_rn(dw[i], p[i]));
}

}  // namespace

void LoraSvdSplitWorkspace::ensure(int o, int i, int rank) {
  if (o == out && i == in && rank == r) return;
  out = o;
  in = i;
  r = rank;
  u = DeviceBuffer<float>(static_cast<size_t>(o) * rank);
  c = DeviceBuffer<float>(static_cast<size_t>(rank) * i);
  p = DeviceBuffer<float>(static_cast<size_t>(o) * i);
}

PinnedFloats::PinnedFloats(size_t count) {
  if (count > 0) FP4_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), count * sizeof(float)));
}
PinnedFloats::~PinnedFloats() {
  if (data_ != nullptr) cudaFreeHost(data_);  // a destructor cannot throw
}
PinnedFloats::PinnedFloats(PinnedFloats&& o) noexcept : data_(o.data_) {
  o.data_ = nullptr;
}

PinnedFloats& PinnedFloats::operator=(PinnedFloats&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = o.data_;
    o.data_ = nullptr;
  }
  return *this;
}

int LoraSvdBases::add_layer(int out, int r) {
  FP4_CHECK(out >= 1 && r >= 1 && r <= out, "LoraSvdBases: L2 [", out, " x ", r, "] needs 1 <= r <= out");
  Slot s;
  s.out = out;
  s.r = r;
  const size_t n = static_cast<size_t>(out) * r;
  s.l2_host = PinnedFloats(n);
  s.u_host = PinnedFloats(n);
  s.u = DeviceBuffer<float>(n);
  slots_.push_back(std::move(s));
  return static_cast<int>(slots_.size()) - 1;
}

void LoraSvdBases::queue_download(int slot, const float* l2_device, cudaStream_t stream) {
  FP4_CHECK(slot >= 0 && slot < static_cast<int>(slots_.size()), "LoraSvdBases: no slot ", slot);
  Slot& s = slots_[static_cast<size_t>(slot)];
  // The host reads l2_host only after basis() waited for the event recorded behind this copy, and no copy
  // into it is queued while the host works on it (both happen on this thread), so the buffer is never read
  // mid-copy.
  FP4_CUDA_CHECK(cudaMemcpyAsync(s.l2_host.data(), l2_device,
                                 static_cast<size_t>(s.out) * s.r * sizeof(float), cudaMemcpyDeviceToHost,
                                 stream));
  if (!downloaded_) downloaded_ = std::make_unique<Event>();
  FP4_CUDA_CHECK(cudaEventRecord(downloaded_->get(), stream));
  s.queued = true;
  pending_ = true;
}

const float* LoraSvdBases::basis(int slot, cudaStream_t stream) {
  FP4_CHECK(slot >= 0 && slot < static_cast<int>(slots_.size()), "LoraSvdBases: no slot ", slot);
  if (pending_) {
    // One wait for every queued L2 copy, and for the uploads of the previous round (queued before them on
    // the same stream), so u_host is free; not for the work queued after the last copy, which the GPU runs
    // while the host computes.
    FP4_CUDA_CHECK(cudaEventSynchronize(downloaded_->get()));
    // The layers' bases are independent host computations (about 1-3 ms each at r = 32, the whole model's
    // while the GPU waits), so they run on every host thread; each is the CPU function's, bit for bit.
    std::vector<Slot*> queued;
    for (Slot& s : slots_)
      if (s.queued) queued.push_back(&s);
    parallel_for(queued.size(), host_threads(), [&](size_t k) {
      Slot& s = *queued[k];
      const std::vector<float> u = cholesky_qr2(s.l2_host.data(), s.out, s.r);
      std::copy(u.begin(), u.end(), s.u_host.data());
    });
    for (Slot* s : queued) {
      const size_t n = static_cast<size_t>(s->out) * s->r;
      FP4_CUDA_CHECK(
          cudaMemcpyAsync(s->u.data(), s->u_host.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
      s->queued = false;
      s->ready = true;
    }
    pending_ = false;
  }
  const Slot& s = slots_[static_cast<size_t>(slot)];
  FP4_CHECK(s.ready, "LoraSvdBases: slot ", slot,
            " has no basis (its layer's backward ran before any forward)");
  return s.u.data();
}

size_t LoraSvdBases::bytes() const {
  size_t b = 0;
  for (const Slot& s : slots_) b += s.u.bytes();
  return b;
}

void lora_svd_split_gradient(const float* dw, const float* l1, const float* l2, int out, int in, int r,
                             float beta, float* grad_w_res, float* grad_l1, float* grad_l2,
                             LoraSvdSplitWorkspace& ws, GemmF32Runner& gemm, cudaStream_t stream) {
  FP4_CHECK(r >= 1 && r < std::min(out, in), "lora_svd_split_gradient: rank ", r, " for a [", out, " x ", in,
            "] layer: it must be at least 1 and below min(in, out) = ", std::min(out, in));
  ws.ensure(out, in, r);
  std::vector<float> l2_host(static_cast<size_t>(out) * r);
  FP4_CUDA_CHECK(
      cudaMemcpyAsync(l2_host.data(), l2, l2_host.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
  FP4_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> u = cholesky_qr2(l2_host.data(), out, r);
  FP4_CUDA_CHECK(
      cudaMemcpyAsync(ws.u.data(), u.data(), u.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
  FP4_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host U must outlive its upload
  lora_svd_split_gradient_with_basis(dw, ws.u.data(), l1, l2, out, in, r, beta, grad_w_res, grad_l1, grad_l2,
                                     ws, gemm, stream);
}

void lora_svd_split_gradient_with_basis(const float* dw, const float* u, const float* l1, const float* l2,
                                        int out, int in, int r, float beta, float* grad_w_res, float* grad_l1,
                                        float* grad_l2, LoraSvdSplitWorkspace& ws, GemmF32Runner& gemm,
                                        cudaStream_t stream) {
  FP4_CHECK(r >= 1 && r < std::min(out, in), "lora_svd_split_gradient: rank ", r, " for a [", out, " x ", in,
            "] layer: it must be at least 1 and below min(in, out) = ", std::min(out, in));
  ws.ensure(out, in, r);
  // P = U (U^T dW), then the factor gradients from P, as lora_svd_linear.cpp.
  gemm.gemm(true, false, r, in, out, 1.0f, u, r, dw, in, 0.0f, ws.c.data(), in, stream);
  gemm.gemm(false, false, out, in, r, 1.0f, u, r, ws.c.data(), in, 0.0f, ws.p.data(), in, stream);
  gemm.gemm(false, true, out, r, in, beta, ws.p.data(), in, l1, in, 1.0f, grad_l2, r, stream);
  gemm.gemm(true, false, r, in, out, beta, l2, r, ws.p.data(), in, 1.0f, grad_l1, in, stream);
  const int64_t count = static_cast<int64_t>(out) * in;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((count + 255) / 256, 4096));
  add_residual_gradient_kernel<<<grid, 256, 0, stream>>>(dw, ws.p.data(), grad_w_res, count);
  FP4_CUDA_CHECK_LAUNCH("add_residual_gradient_kernel");
}

}  // namespace fp4::cuda
