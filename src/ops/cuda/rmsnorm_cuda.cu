#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/elementwise_cuda.cuh"
#include "ops/cuda/rmsnorm_cuda.cuh"
#include "ops/cuda/rmsnorm_cuda.h"

namespace fp4::cuda {

namespace {

constexpr int kForwardThreads = 256;  // 8 rows per block, one warp each

// ---------------------------------------------------------------- vectorized paths
// Rows of c = 8 * chunks columns (c <= 256 * kC), 16-byte aligned: lane l holds the chunks
// l, l + 32, ... (kC of them) of its row in registers from the load through the output.

template <typename XT, int kC>
__global__ void __launch_bounds__(kForwardThreads)
    rmsnorm_forward_vec_kernel(const XT* __restrict__ x, const float* __restrict__ w, const float* residual,
                               float* out_f32, bf16* __restrict__ out_bf16, float* __restrict__ rstd, int n,
                               int c, float eps) {
  const int row = blockIdx.x * (kForwardThreads / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (row >= n) return;  // warp-uniform
  const size_t base = static_cast<size_t>(row) * c;
  const int chunks = c / 8;
  float v[kC][8], res[kC][8];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kC; ++i) {
    const int j = lane + 32 * i;
    if (j < chunks) {
      load8(x + base + 8 * j, v[i]);
      if (residual != nullptr) load8(residual + base + 8 * j, res[i]);  // issued before the reduction
#pragma unroll
      for (int e = 0; e < 8; ++e) ss += v[i][e] * v[i][e];
    }
  }
  ss = warp_sum(ss);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(c) + eps);
  if (lane == 0) rstd[row] = r;
#pragma unroll
  for (int i = 0; i < kC; ++i) {
    const int j = lane + 32 * i;
    if (j < chunks) {
      float g[8], o[8];
      load8(w + 8 * j, g);
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = (v[i][e] * r) * g[e] + (residual != nullptr ? res[i][e] : 0.0f);
      if (out_f32 != nullptr) store8(out_f32 + base + 8 * j, o);
      if (out_bf16 != nullptr) store8(out_bf16 + base + 8 * j, o);
    }
  }
}

// A block's warps walk rows r0 + warp, r0 + warp + 8, ...; each lane sums dout * x * rstd of its columns
// in registers, and the block leaves one partial weight-gradient row (warps summed in a fixed order).
template <typename XT, typename DXT, int kC>
__global__ void __launch_bounds__(kNormRowThreads)
    rmsnorm_backward_vec_kernel(const float* __restrict__ dout, const XT* __restrict__ x,
                                const float* __restrict__ w, const float* __restrict__ rstd,
                                DXT* __restrict__ dx, float* __restrict__ partials, int n, int c,
                                int rows_per_block) {
  __shared__ float buf[kC * 8 * 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, chunks = c / 8;
  float acc[kC * 8];
#pragma unroll
  for (int i = 0; i < kC * 8; ++i) acc[i] = 0.0f;
  const int r0 = blockIdx.x * rows_per_block, r1 = min(n, r0 + rows_per_block);
  for (int r = r0 + warp; r < r1; r += kNormRowWarps) {
    const size_t base = static_cast<size_t>(r) * c;
    float g[kC][8];
    Held8<XT> xh[kC];
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      const int j = lane + 32 * i;
      if (j < chunks) {
        load8(dout + base + 8 * j, g[i]);
        xh[i].load(x + base + 8 * j);
      }
    }
    const float rs = rstd[r];
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      const int j = lane + 32 * i;
      if (j < chunks) {
        float ww[8], xv[8];
        load8(w + 8 * j, ww);
        xh[i].get(xv);
#pragma unroll
        for (int e = 0; e < 8; ++e) dot += g[i][e] * ww[e] * xv[e];
      }
    }
    dot = warp_sum(dot);
    const float k = dot / static_cast<float>(c) * rs * rs * rs;
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      const int j = lane + 32 * i;
      if (j < chunks) {
        float ww[8], xv[8], o[8];
        load8(w + 8 * j, ww);
        xh[i].get(xv);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          o[e] = g[i][e] * ww[e] * rs - xv[e] * k;
          acc[i * 8 + e] += g[i][e] * (xv[e] * rs);
        }
        store8(dx + base + 8 * j, o);
      }
    }
  }
  sum_over_warps<kC * 8>(acc, buf);
  if (warp != 0) return;
#pragma unroll
  for (int i = 0; i < kC; ++i) {
    const int j = lane + 32 * i;
    if (j < chunks) {
      float p[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) p[e] = buf[(i * 8 + e) * 32 + lane];
      store8(partials + static_cast<size_t>(blockIdx.x) * c + 8 * j, p);
    }
  }
}

// ---------------------------------------------------------------- general paths (any even width)

template <typename XT>
__global__ void rmsnorm_forward_pairs_kernel(const XT* __restrict__ x, const float* __restrict__ w,
                                             const float* residual, float* out_f32,
                                             bf16* __restrict__ out_bf16, float* __restrict__ rstd, int n,
                                             int c, float eps) {
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

// A block of kNormThreads threads walks its rows one at a time (block-wide reductions); widths up to
// kNormMaxWidth.
template <typename XT, typename DXT>
__global__ void rmsnorm_backward_block_kernel(const float* __restrict__ dout, const XT* __restrict__ x,
                                              const float* __restrict__ w, const float* __restrict__ rstd,
                                              DXT* __restrict__ dx, float* __restrict__ partials, int n,
                                              int c, int rows_per_block) {
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

// ---------------------------------------------------------------- partial rows -> weight gradient

// A block owns 32 columns; its 32 row groups each sum every 32nd partial row, then one warp adds the
// groups in order (fixed order: deterministic).
constexpr int kReduceCols = 32, kReduceGroups = 32;

__global__ void reduce_partials_kernel(const float* __restrict__ partials, int blocks, int width, int split,
                                       float* dw_a, float* dw_b) {
  __shared__ float part[kReduceGroups][kReduceCols + 1];
  const int tx = threadIdx.x, ty = threadIdx.y, j = blockIdx.x * kReduceCols + tx;
  float s = 0.0f;
  if (j < width) {
#pragma unroll 8
    for (int b = ty; b < blocks; b += kReduceGroups) s += partials[static_cast<size_t>(b) * width + j];
  }
  part[ty][tx] = s;
  __syncthreads();
  if (ty != 0 || j >= width) return;
  float total = 0.0f;
  for (int g = 0; g < kReduceGroups; ++g) total += part[g][tx];
  if (j < split)
    dw_a[j] += total;
  else
    dw_b[j - split] += total;
}

// ---------------------------------------------------------------- dispatch

void check_width(int n, int c, const char* what) {
  FP4_CHECK(n >= 0 && c > 0 && c % 2 == 0, what, ": rows must have an even positive width, got n=", n,
            " c=", c);
}

// Chunks of 8 columns per lane of the vectorized kernels for width c, or 0 where only the general path
// applies (c not a multiple of 8, or wider than 2048).
int chunks_per_lane(int c) {
  if (c % 8 != 0) return 0;
  for (int k = 1; k <= 8; k *= 2)
    if (c <= 256 * k) return k;
  return 0;
}

template <typename XT, int kC>
void forward_vec(const XT* x, const float* w, const float* residual, float* out_f32, bf16* out_bf16,
                 float* rstd, int n, int c, float eps, cudaStream_t stream) {
  const int rows_per_block = kForwardThreads / 32;
  rmsnorm_forward_vec_kernel<XT, kC>
      <<<(n + rows_per_block - 1) / rows_per_block, kForwardThreads, 0, stream>>>(x, w, residual, out_f32,
                                                                                  out_bf16, rstd, n, c, eps);
  FP4_CUDA_CHECK_LAUNCH("rmsnorm_forward_vec_kernel");
}

template <typename XT>
void forward_impl(const XT* x, const float* w, const float* residual, float* out_f32, bf16* out_bf16,
                  float* rstd, int n, int c, float eps, cudaStream_t stream) {
  check_width(n, c, "rmsnorm_forward");
  FP4_CHECK(out_f32 != nullptr || out_bf16 != nullptr, "rmsnorm_forward: no output");
  if (n == 0) return;
  const bool aligned =
      aligned16(x) && aligned16(w) && aligned16(residual) && aligned16(out_f32) && aligned16(out_bf16);
  switch (aligned ? chunks_per_lane(c) : 0) {
    case 1:
      return forward_vec<XT, 1>(x, w, residual, out_f32, out_bf16, rstd, n, c, eps, stream);
    case 2:
      return forward_vec<XT, 2>(x, w, residual, out_f32, out_bf16, rstd, n, c, eps, stream);
    case 4:
      return forward_vec<XT, 4>(x, w, residual, out_f32, out_bf16, rstd, n, c, eps, stream);
    case 8:
      return forward_vec<XT, 8>(x, w, residual, out_f32, out_bf16, rstd, n, c, eps, stream);
    default:
      break;
  }
  const int rows_per_block = kForwardThreads / 32;
  rmsnorm_forward_pairs_kernel<XT><<<(n + rows_per_block - 1) / rows_per_block, kForwardThreads, 0, stream>>>(
      x, w, residual, out_f32, out_bf16, rstd, n, c, eps);
  FP4_CUDA_CHECK_LAUNCH("rmsnorm_forward_pairs_kernel");
}

template <typename XT, typename DXT, int kC>
void backward_vec(const float* dout, const XT* x, const float* w, const float* rstd, DXT* dx, float* dw,
                  float* scratch, int n, int c, cudaStream_t stream) {
  constexpr auto kKernel = rmsnorm_backward_vec_kernel<XT, DXT, kC>;
  const NormTiling t = resident_norm_tiling<kKernel>(n);
  kKernel<<<t.blocks, kNormRowThreads, 0, stream>>>(dout, x, w, rstd, dx, scratch, n, c, t.rows_per_block);
  FP4_CUDA_CHECK_LAUNCH("rmsnorm_backward_vec_kernel");
  reduce_norm_partials(scratch, t.blocks, c, c, dw, nullptr, stream);
}

template <typename XT, typename DXT>
void backward_impl(const float* dout, const XT* x, const float* w, const float* rstd, DXT* dx, float* dw,
                   float* scratch, int n, int c, cudaStream_t stream) {
  check_width(n, c, "rmsnorm_backward");
  FP4_CHECK(c <= kNormMaxWidth, "rmsnorm_backward: width ", c, " exceeds the kernel's limit ", kNormMaxWidth);
  if (n == 0) return;
  const bool aligned = aligned16(dout) && aligned16(x) && aligned16(w) && aligned16(dx) && aligned16(scratch);
  switch (aligned ? chunks_per_lane(c) : 0) {
    case 1:
      return backward_vec<XT, DXT, 1>(dout, x, w, rstd, dx, dw, scratch, n, c, stream);
    case 2:
      return backward_vec<XT, DXT, 2>(dout, x, w, rstd, dx, dw, scratch, n, c, stream);
    case 4:
      return backward_vec<XT, DXT, 4>(dout, x, w, rstd, dx, dw, scratch, n, c, stream);
    case 8:
      return backward_vec<XT, DXT, 8>(dout, x, w, rstd, dx, dw, scratch, n, c, stream);
    default:
      break;
  }
  const NormTiling t = norm_backward_tiling(n);
  rmsnorm_backward_block_kernel<XT, DXT>
      <<<t.blocks, kNormThreads, 0, stream>>>(dout, x, w, rstd, dx, scratch, n, c, t.rows_per_block);
  FP4_CUDA_CHECK_LAUNCH("rmsnorm_backward_block_kernel");
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
  const dim3 threads(kReduceCols, kReduceGroups);
  reduce_partials_kernel<<<(width + kReduceCols - 1) / kReduceCols, threads, 0, stream>>>(
      partials, blocks, width, split, dw_a, dw_b);
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
