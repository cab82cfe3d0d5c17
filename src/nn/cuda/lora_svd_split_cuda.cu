#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/error.h"
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
  // P = U (U^T dW), then the factor gradients from P, as lora_svd_linear.cpp.
  gemm.gemm(true, false, r, in, out, 1.0f, ws.u.data(), r, dw, in, 0.0f, ws.c.data(), in, stream);
  gemm.gemm(false, false, out, in, r, 1.0f, ws.u.data(), r, ws.c.data(), in, 0.0f, ws.p.data(), in, stream);
  gemm.gemm(false, true, out, r, in, beta, ws.p.data(), in, l1, in, 1.0f, grad_l2, r, stream);
  gemm.gemm(true, false, r, in, out, beta, l2, r, ws.p.data(), in, 1.0f, grad_l1, in, stream);
  const int64_t count = static_cast<int64_t>(out) * in;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((count + 255) / 256, 4096));
  add_residual_gradient_kernel<<<grid, 256, 0, stream>>>(dw, ws.p.data(), grad_w_res, count);
  FP4_CUDA_CHECK_LAUNCH("add_residual_gradient_kernel");
}

}  // namespace fp4::cuda
