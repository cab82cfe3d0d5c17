#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/elementwise_cuda.cuh"
#include "ops/cuda/rmsnorm_cuda.h"

namespace fp4::cuda {

namespace {

constexpr int kForwardThreads = 256;  // 8 rows per block

template <typename XT>
__global__ void rmsnorm_forward_kernel(const XT* __restrict__ x, const float* __restrict__ w,
                                       const float* residual, float* out_f32, bf16* __restrict__ out_bf16,
                                       float* __restrict__ rstd, int n, int c, float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (row >= n) return;  // warp-uniform
  const size_t base = static_cast<size_t>(row) * c;
  const int pairs = c / 2;
  float ss = 0.0f;
  for (int p = lane; p < pairs; p += 32) {
    const float2 v = load2(x + base + 2 * p);
    ss += v.x * v.x + v.y * v.y;
  }
  ss = warp_sum(ss);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(c) + eps);
  if (lane == 0) rstd[row] = r;
  for (int p = lane; p < pairs; p += 32) {
    const float2 v = load2(x + base + 2 * p), g = load2(w + 2 * p);
    float2 o = make_float2((v.x * r) * g.x, (v.y * r) * g.y);
    if (residual != nullptr) {
      const float2 res = load2(residual + base + 2 * p);
      o.x += res.x;
      o.y += res.y;
    }
    if (out_f32 != nullptr) store2(out_f32 + base + 2 * p, o);
    if (out_bf16 != nullptr) store2(out_bf16 + base + 2 * p, o);
  }
}

template <typename XT, typename DXT>
__global__ void rmsnorm_backward_kernel(const float* __restrict__ dout, const XT* __restrict__ x,
                                        const float* __restrict__ w, const float* __restrict__ rstd,
                                        DXT* __restrict__ dx, float* __restrict__ partials, int n, int c,
                                        int rows_per_block) {
  __shared__ float scratch[32];
  const int pairs = c / 2;
  float2 acc[kNormPairsPerThread];
  for (int i = 0; i < kNormPairsPerThread; ++i) acc[i] = make_float2(0.0f, 0.0f);
  const int r0 = blockIdx.x * rows_per_block, r1 = min(n, r0 + rows_per_block);
  for (int r = r0; r < r1; ++r) {
    const size_t base = static_cast<size_t>(r) * c;
    float dot = 0.0f;
    for (int i = 0; i < kNormPairsPerThread; ++i) {
      const int p = threadIdx.x + i * kNormThreads;
      if (p < pairs) {
        const float2 g = load2(dout + base + 2 * p), v = load2(x + base + 2 * p), ww = load2(w + 2 * p);
        dot += g.x * ww.x * v.x + g.y * ww.y * v.y;
      }
    }
    dot = block_sum(dot, scratch);
    const float rs = rstd[r];
    const float k = dot / static_cast<float>(c) * rs * rs * rs;
    for (int i = 0; i < kNormPairsPerThread; ++i) {
      const int p = threadIdx.x + i * kNormThreads;
      if (p < pairs) {
        const float2 g = load2(dout + base + 2 * p), v = load2(x + base + 2 * p), ww = load2(w + 2 * p);
        store2(dx + base + 2 * p, make_float2(g.x * ww.x * rs - v.x * k, g.y * ww.y * rs - v.y * k));
        acc[i].x += g.x * (v.x * rs);
        acc[i].y += g.y * (v.y * rs);
      }
    }
  }
  for (int i = 0; i < kNormPairsPerThread; ++i) {
    const int p = threadIdx.x + i * kNormThreads;
    if (p < pairs) store2(partials + static_cast<size_t>(blockIdx.x) * c + 2 * p, acc[i]);
  }
}

__global__ void reduce_partials_kernel(const float* __restrict__ partials, int blocks, int width, int split,
                                       float* dw_a, float* dw_b) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= width) return;
  float s = 0.0f;
  for (int b = 0; b < blocks; ++b) s += partials[static_cast<size_t>(b) * width + j];
  if (j < split)
    dw_a[j] += s;
  else
    dw_b[j - split] += s;
}

void check_width(int n, int c, const char* what) {
  FP4_CHECK(n >= 0 && c > 0 && c % 2 == 0, what, ": rows must have an even positive width, got n=", n,
            " c=", c);
}

template <typename XT>
void forward_impl(const XT* x, const float* w, const float* residual, float* out_f32, bf16* out_bf16,
                  float* rstd, int n, int c, float eps, cudaStream_t stream) {
  check_width(n, c, "rmsnorm_forward");
  FP4_CHECK(out_f32 != nullptr || out_bf16 != nullptr, "rmsnorm_forward: no output");
  if (n == 0) return;
  const int rows_per_block = kForwardThreads / 32;
  rmsnorm_forward_kernel<XT><<<(n + rows_per_block - 1) / rows_per_block, kForwardThreads, 0, stream>>>(
      x, w, residual, out_f32, out_bf16, rstd, n, c, eps);
  FP4_CUDA_CHECK_LAUNCH("rmsnorm_forward_kernel");
}

template <typename XT, typename DXT>
void backward_impl(const float* dout, const XT* x, const float* w, const float* rstd, DXT* dx, float* dw,
                   float* scratch, int n, int c, cudaStream_t stream) {
  check_width(n, c, "rmsnorm_backward");
  FP4_CHECK(c <= kNormMaxWidth, "rmsnorm_backward: width ", c, " exceeds the kernel's limit ", kNormMaxWidth);
  if (n == 0) return;
  const NormTiling t = norm_backward_tiling(n);
  rmsnorm_backward_kernel<XT, DXT>
      <<<t.blocks, kNormThreads, 0, stream>>>(dout, x, w, rstd, dx, scratch, n, c, t.rows_per_block);
  FP4_CUDA_CHECK_LAUNCH("rmsnorm_backward_kernel");
  reduce_norm_partials(scratch, t.blocks, c, c, dw, nullptr, stream);
}

}  // namespace

NormTiling norm_backward_tiling(int n) {
  NormTiling t;
  t.rows_per_block = n <= kNormTargetBlocks ? 1 : (n + kNormTargetBlocks - 1) / kNormTargetBlocks;
  t.blocks = n <= 0 ? 1 : (n + t.rows_per_block - 1) / t.rows_per_block;
  return t;
}

size_t norm_backward_scratch_floats(int n, int width) {
  return static_cast<size_t>(norm_backward_tiling(n).blocks) * static_cast<size_t>(width);
}

void reduce_norm_partials(const float* partials, int blocks, int width, int split, float* dw_a, float* dw_b,
                          cudaStream_t stream) {
  constexpr int kThreads = 256;
  reduce_partials_kernel<<<(width + kThreads - 1) / kThreads, kThreads, 0, stream>>>(partials, blocks, width,
                                                                                     split, dw_a, dw_b);
  FP4_CUDA_CHECK_LAUNCH("reduce_partials_kernel");
}

void rmsnorm_forward(const bf16* x, const float* w, const float* residual, float* out_f32, bf16* out_bf16,
                     float* rstd, int n, int c, float eps, cudaStream_t stream) {
  forward_impl(x, w, residual, out_f32, out_bf16, rstd, n, c, eps, stream);
}

void rmsnorm_forward(const float* x, const float* w, const float* residual, float* out_f32, bf16* out_bf16,
                     float* rstd, int n, int c, float eps, cudaStream_t stream) {
  forward_impl(x, w, residual, out_f32, out_bf16, rstd, n, c, eps, stream);
}

void rmsnorm_backward(const float* dout, const bf16* x, const float* w, const float* rstd, bf16* dx,
                      float* dw, float* scratch, int n, int c, cudaStream_t stream) {
  backward_impl(dout, x, w, rstd, dx, dw, scratch, n, c, stream);
}

void rmsnorm_backward(const float* dout, const float* x, const float* w, const float* rstd, float* dx,
                      float* dw, float* scratch, int n, int c, cudaStream_t stream) {
  backward_impl(dout, x, w, rstd, dx, dw, scratch, n, c, stream);
}

}  // namespace fp4::cuda
