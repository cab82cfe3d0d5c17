#include <cmath>

#include "core/error.h"
#include "ops/cuda/attention/causal_sdpa_cuda.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/elementwise_cuda.cuh"

namespace fp4::cuda {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kWarpsPerBlock = 4;
constexpr int kDimsPerLane = kSdpaMaxHeadDim / 32;  // lane l holds dims l, l + 32, ...

// (sequence, head, position) of the warp's row; row index into [B][H][T] arrays.
struct RowId {
  int b, h, i;
  long long row;
};
__device__ __forceinline__ bool warp_row(int B, int T, int H, RowId& id) {
  const long long w = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (w >= static_cast<long long>(B) * H * T) return false;
  id.row = w;
  id.i = static_cast<int>(w % T);
  id.h = static_cast<int>((w / T) % H);
  id.b = static_cast<int>(w / (static_cast<long long>(T) * H));
  return true;
}

// Pointer to head h of token (b, i) in a [B*T][ld] matrix.
__device__ __forceinline__ const bf16* at(const bf16* x, int ld, int b, int i, int T, int h, int D) {
  return x + (static_cast<long long>(b) * T + i) * ld + static_cast<long long>(h) * D;
}

__device__ __forceinline__ void load_head(const bf16* p, int D, float* r) {
  const int lane = threadIdx.x & 31;
  for (int e = 0; e < kDimsPerLane; ++e) {
    const int c = lane + 32 * e;
    r[e] = c < D ? __bfloat162float(p[c]) : 0.0f;
  }
}

__device__ __forceinline__ float dot_head(const float* r, const bf16* p, int D) {
  const int lane = threadIdx.x & 31;
  float s = 0.0f;
  for (int e = 0; e < kDimsPerLane; ++e) {
    const int c = lane + 32 * e;
    if (c < D) s += r[e] * __bfloat162float(p[c]);
  }
  return warp_sum(s);
}

__global__ void sdpa_forward_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                    const bf16* __restrict__ v, int ld_qkv, bf16* __restrict__ out,
                                    int ld_out, float* __restrict__ lse, int B, int T, int H, int D,
                                    float scale) {
  RowId id;
  if (!warp_row(B, T, H, id)) return;  // warp-uniform
  const int lane = threadIdx.x & 31;
  float qr[kDimsPerLane], o[kDimsPerLane];
  load_head(at(q, ld_qkv, id.b, id.i, T, id.h, D), D, qr);
  for (int e = 0; e < kDimsPerLane; ++e) o[e] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j <= id.i; ++j) {
    const float s = scale * dot_head(qr, at(k, ld_qkv, id.b, j, T, id.h, D), D);
    const float mn = fmaxf(m, s);
    const float corr = m == mn ? 1.0f : expf(m - mn), p = expf(s - mn);
    l = l * corr + p;
    const bf16* vj = at(v, ld_qkv, id.b, j, T, id.h, D);
    for (int e = 0; e < kDimsPerLane; ++e) {
      const int c = lane + 32 * e;
      if (c < D) o[e] = o[e] * corr + p * __bfloat162float(vj[c]);
    }
    m = mn;
  }
  bf16* orow = out + (static_cast<long long>(id.b) * T + id.i) * ld_out + static_cast<long long>(id.h) * D;
  for (int e = 0; e < kDimsPerLane; ++e) {
    const int c = lane + 32 * e;
    if (c < D) orow[c] = __float2bfloat16_rn(o[e] / l);
  }
  if (lane == 0) lse[id.row] = m + logf(l);
}

// delta[row] = sum_c dout[c] * out[c] for each query row.
__global__ void sdpa_delta_kernel(const bf16* __restrict__ out, const bf16* __restrict__ dout, int ld_out,
                                  float* __restrict__ delta, int B, int T, int H, int D) {
  RowId id;
  if (!warp_row(B, T, H, id)) return;
  float r[kDimsPerLane];
  load_head(at(out, ld_out, id.b, id.i, T, id.h, D), D, r);
  const float s = dot_head(r, at(dout, ld_out, id.b, id.i, T, id.h, D), D);
  if ((threadIdx.x & 31) == 0) delta[id.row] = s;
}

// One warp per query i: dq_i = scale * sum_{j <= i} p_ij (dp_ij - delta_i) k_j.
__global__ void sdpa_dq_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                               const bf16* __restrict__ v, int ld_qkv, const bf16* __restrict__ dout,
                               int ld_out, const float* __restrict__ lse, const float* __restrict__ delta,
                               bf16* __restrict__ dq, int ld_dqkv, int B, int T, int H, int D, float scale) {
  RowId id;
  if (!warp_row(B, T, H, id)) return;
  const int lane = threadIdx.x & 31;
  float qr[kDimsPerLane], dor[kDimsPerLane], acc[kDimsPerLane];
  load_head(at(q, ld_qkv, id.b, id.i, T, id.h, D), D, qr);
  load_head(at(dout, ld_out, id.b, id.i, T, id.h, D), D, dor);
  for (int e = 0; e < kDimsPerLane; ++e) acc[e] = 0.0f;
  const float lse_i = lse[id.row], delta_i = delta[id.row];
  for (int j = 0; j <= id.i; ++j) {
    const bf16* kj = at(k, ld_qkv, id.b, j, T, id.h, D);
    const float p = expf(scale * dot_head(qr, kj, D) - lse_i);
    const float ds = p * (dot_head(dor, at(v, ld_qkv, id.b, j, T, id.h, D), D) - delta_i);
    for (int e = 0; e < kDimsPerLane; ++e) {
      const int c = lane + 32 * e;
      if (c < D) acc[e] += ds * __bfloat162float(kj[c]);
    }
  }
  bf16* row = dq + (static_cast<long long>(id.b) * T + id.i) * ld_dqkv + static_cast<long long>(id.h) * D;
  for (int e = 0; e < kDimsPerLane; ++e) {
    const int c = lane + 32 * e;
    if (c < D) row[c] = __float2bfloat16_rn(scale * acc[e]);
  }
}

// One warp per key j: dk_j = scale * sum_{i >= j} ds_ij q_i, dv_j = sum_{i >= j} p_ij dout_i.
__global__ void sdpa_dkv_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                const bf16* __restrict__ v, int ld_qkv, const bf16* __restrict__ dout,
                                int ld_out, const float* __restrict__ lse, const float* __restrict__ delta,
                                bf16* __restrict__ dk, bf16* __restrict__ dv, int ld_dqkv, int B, int T,
                                int H, int D, float scale) {
  RowId id;
  if (!warp_row(B, T, H, id)) return;
  const int lane = threadIdx.x & 31, j = id.i;
  float kr[kDimsPerLane], vr[kDimsPerLane], dk_acc[kDimsPerLane], dv_acc[kDimsPerLane];
  load_head(at(k, ld_qkv, id.b, j, T, id.h, D), D, kr);
  load_head(at(v, ld_qkv, id.b, j, T, id.h, D), D, vr);
  for (int e = 0; e < kDimsPerLane; ++e) dk_acc[e] = dv_acc[e] = 0.0f;
  const long long row0 = id.row - j;  // [b][h][0]
  for (int i = j; i < T; ++i) {
    const bf16* qi = at(q, ld_qkv, id.b, i, T, id.h, D);
    const bf16* doi = at(dout, ld_out, id.b, i, T, id.h, D);
    const float p = expf(scale * dot_head(kr, qi, D) - lse[row0 + i]);
    const float ds = p * (dot_head(vr, doi, D) - delta[row0 + i]);
    for (int e = 0; e < kDimsPerLane; ++e) {
      const int c = lane + 32 * e;
      if (c < D) {
        dk_acc[e] += ds * __bfloat162float(qi[c]);
        dv_acc[e] += p * __bfloat162float(doi[c]);
      }
    }
  }
  const long long off = (static_cast<long long>(id.b) * T + j) * ld_dqkv + static_cast<long long>(id.h) * D;
  for (int e = 0; e < kDimsPerLane; ++e) {
    const int c = lane + 32 * e;
    if (c < D) {
      dk[off + c] = __float2bfloat16_rn(scale * dk_acc[e]);
      dv[off + c] = __float2bfloat16_rn(dv_acc[e]);
    }
  }
}

void check_shape(int B, int T, int H, int D, int ld_qkv, int ld_out, const char* what) {
  FP4_CHECK(B > 0 && T > 0 && H > 0, what, ": bad shape B=", B, " T=", T, " H=", H);
  FP4_CHECK(D > 0 && D % 2 == 0 && D <= kSdpaMaxHeadDim, what, ": head size ", D, " is not even or exceeds ",
            kSdpaMaxHeadDim);
  FP4_CHECK(ld_qkv >= H * D && ld_out >= H * D, what, ": row strides ", ld_qkv, ", ", ld_out,
            " are smaller than H*D = ", H * D);
}

int blocks_for(int B, int T, int H) {
  const long long warps = static_cast<long long>(B) * H * T;
  return static_cast<int>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

void causal_sdpa_forward(const bf16* q, const bf16* k, const bf16* v, int ld_qkv, bf16* out, int ld_out,
                         float* lse, int B, int T, int H, int D, float scale, cudaStream_t stream) {
  check_shape(B, T, H, D, ld_qkv, ld_out, "causal_sdpa_forward");
  sdpa_forward_kernel<<<blocks_for(B, T, H), 32 * kWarpsPerBlock, 0, stream>>>(q, k, v, ld_qkv, out, ld_out,
                                                                               lse, B, T, H, D, scale);
  FP4_CUDA_CHECK_LAUNCH("sdpa_forward_kernel");
}

size_t causal_sdpa_backward_workspace_bytes(int B, int T, int H, int /*D*/) {
  return static_cast<size_t>(B) * H * T * sizeof(float);
}

void causal_sdpa_backward(const bf16* q, const bf16* k, const bf16* v, int ld_qkv, const bf16* out,
                          const bf16* dout, int ld_out, const float* lse, bf16* dq, bf16* dk, bf16* dv,
                          int ld_dqkv, int B, int T, int H, int D, float scale, void* workspace,
                          cudaStream_t stream) {
  check_shape(B, T, H, D, ld_qkv, ld_out, "causal_sdpa_backward");
  FP4_CHECK(ld_dqkv >= H * D, "causal_sdpa_backward: gradient row stride ", ld_dqkv, " is smaller than H*D");
  float* delta = static_cast<float*>(workspace);
  const int blocks = blocks_for(B, T, H), threads = 32 * kWarpsPerBlock;
  sdpa_delta_kernel<<<blocks, threads, 0, stream>>>(out, dout, ld_out, delta, B, T, H, D);
  FP4_CUDA_CHECK_LAUNCH("sdpa_delta_kernel");
  sdpa_dq_kernel<<<blocks, threads, 0, stream>>>(q, k, v, ld_qkv, dout, ld_out, lse, delta, dq, ld_dqkv, B, T,
                                                 H, D, scale);
  FP4_CUDA_CHECK_LAUNCH("sdpa_dq_kernel");
  sdpa_dkv_kernel<<<blocks, threads, 0, stream>>>(q, k, v, ld_qkv, dout, ld_out, lse, delta, dk, dv, ld_dqkv,
                                                  B, T, H, D, scale);
  FP4_CUDA_CHECK_LAUNCH("sdpa_dkv_kernel");
}

}  // namespace fp4::cuda
