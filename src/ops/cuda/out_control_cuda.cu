#include <cuda_bf16.h>

#include <algorithm>

#include "core/error.h"
#include "ops/cuda/out_control_cuda.h"

namespace fp4::cuda {
namespace {

constexpr int kTile = 32;  // columns per block (one warp wide)
constexpr int kLanes = 8;  // row lanes per block

__device__ float load_value(const void* p, QuantIoType t, int64_t i) {
  if (t == QuantIoType::kF32) return static_cast<const float*>(p)[i];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

// One block per 32 columns: each row lane sums its rows' squares in FP64, then lane 0 adds the lanes.
__global__ void column_norm_sums_kernel(const uint16_t* x, int64_t rows, int64_t cols, double* sums) {
  __shared__ double part[kLanes][kTile];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  double acc = 0.0;
  if (c < cols)
    for (int64_t r = threadIdx.y; r < rows; r += kLanes) {
      const double v = __bfloat162float(__ushort_as_bfloat16(x[r * cols + c]));
      acc += v * v;
    }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  double sq = 0.0;
  for (int l = 0; l < kLanes; ++l) sq += part[l][threadIdx.x];
  sums[c] += sqrt(sq);
  sums[cols + c] += sq;
}

__global__ void gather_columns_kernel(const void* src, QuantIoType t, int64_t rows, int64_t cols,
                                      const int32_t* idx, int64_t k, int64_t padded, float* dst) {
  const int64_t total = rows * padded;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / padded, j = i % padded;
    dst[i] = j < k ? load_value(src, t, r * cols + idx[j]) : 0.0f;
  }
}

__global__ void scatter_columns_kernel(const float* src, int64_t src_ld, int64_t rows, const int32_t* idx,
                                       int64_t k, float* dst, int64_t cols, bool add) {
  const int64_t total = rows * k;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / k, j = i % k;
    float& d = dst[r * cols + idx[j]];
    const float v = src[r * src_ld + j];
    d = add ? d + v : v;
  }
}

// 32x32 tiles through shared memory: reads along src rows, writes along dst rows.
__global__ void transpose_kernel(const void* src, QuantIoType t, int64_t rows, int64_t cols, int64_t src_ld,
                                 float* dst, int64_t dst_ld) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile, c0 = static_cast<int64_t>(blockIdx.y) * kTile;
  for (int y = threadIdx.y; y < kTile; y += kLanes) {
    const int64_t r = r0 + y, c = c0 + threadIdx.x;
    tile[y][threadIdx.x] = (r < rows && c < cols) ? load_value(src, t, r * src_ld + c) : 0.0f;
  }
  __syncthreads();
  for (int y = threadIdx.y; y < kTile; y += kLanes) {
    const int64_t c = c0 + y, r = r0 + threadIdx.x;
    if (c < cols && r < dst_ld) dst[c * dst_ld + r] = tile[threadIdx.x][y];
  }
}

__global__ void concat_columns_kernel(const float* a, int64_t ca, const float* b, int64_t cb, int64_t rows,
                                      __nv_bfloat16* dst) {
  const int64_t width = ca + cb, total = rows * width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / width, j = i % width;
    dst[i] = __float2bfloat16_rn(j < ca ? a[r * ca + j] : b[r * cb + (j - ca)]);
  }
}

unsigned grid_1d(int64_t items) {
  return static_cast<unsigned>(std::clamp<int64_t>((items + 255) / 256, 1, int64_t{1} << 16));
}

}  // namespace

void column_norm_sums_cuda(const uint16_t* x, int64_t rows, int64_t cols, double* sums, cudaStream_t stream) {
  FP4_CHECK(rows >= 0 && cols > 0, "column_norm_sums_cuda: bad shape [", rows, " x ", cols, "]");
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile)), block(kTile, kLanes);
  column_norm_sums_kernel<<<grid, block, 0, stream>>>(x, rows, cols, sums);
  FP4_CUDA_CHECK_LAUNCH("column_norm_sums_kernel");
}

void gather_columns_cuda(const void* src, QuantIoType dtype, int64_t rows, int64_t cols, const int32_t* idx,
                         int64_t k, int64_t padded, float* dst, cudaStream_t stream) {
  FP4_CHECK(k >= 0 && k <= padded && k <= cols, "gather_columns_cuda: ", k, " of ", cols, " columns into ",
            padded);
  if (rows * padded == 0) return;
  gather_columns_kernel<<<grid_1d(rows * padded), 256, 0, stream>>>(src, dtype, rows, cols, idx, k, padded,
                                                                    dst);
  FP4_CUDA_CHECK_LAUNCH("gather_columns_kernel");
}

void scatter_columns_cuda(const float* src, int64_t src_ld, int64_t rows, const int32_t* idx, int64_t k,
                          float* dst, int64_t cols, bool add, cudaStream_t stream) {
  FP4_CHECK(k >= 0 && k <= src_ld && k <= cols, "scatter_columns_cuda: ", k, " columns of ", src_ld, " into ",
            cols);
  if (rows * k == 0) return;
  scatter_columns_kernel<<<grid_1d(rows * k), 256, 0, stream>>>(src, src_ld, rows, idx, k, dst, cols, add);
  FP4_CUDA_CHECK_LAUNCH("scatter_columns_kernel");
}

void transpose_cuda(const void* src, QuantIoType dtype, int64_t rows, int64_t cols, int64_t src_ld,
                    float* dst, int64_t dst_ld, cudaStream_t stream) {
  FP4_CHECK(cols <= src_ld && rows <= dst_ld, "transpose_cuda: [", rows, " x ", cols, "] with strides ",
            src_ld, ", ", dst_ld);
  if (cols == 0 || dst_ld == 0) return;
  const dim3 grid(static_cast<unsigned>((dst_ld + kTile - 1) / kTile),
                  static_cast<unsigned>((cols + kTile - 1) / kTile));
  transpose_kernel<<<grid, dim3(kTile, kLanes), 0, stream>>>(src, dtype, rows, cols, src_ld, dst, dst_ld);
  FP4_CUDA_CHECK_LAUNCH("transpose_kernel");
}

void concat_columns_bf16_cuda(const float* a, int64_t ca, const float* b, int64_t cb, int64_t rows,
                              uint16_t* dst, cudaStream_t stream) {
  if (rows * (ca + cb) == 0) return;
  concat_columns_kernel<<<grid_1d(rows * (ca + cb)), 256, 0, stream>>>(a, ca, b, cb, rows,
                                                                       reinterpret_cast<__nv_bfloat16*>(dst));
  FP4_CUDA_CHECK_LAUNCH("concat_columns_kernel");
}

}  // namespace fp4::cuda
