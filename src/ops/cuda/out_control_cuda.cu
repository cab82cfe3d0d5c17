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

template <typename E>
__device__ E column_or_zero(const E* row, const int32_t* idx, int64_t j, int64_t k) {
  return j < k ? row[idx[j]] : E{0};
}

// Block per row (grid-stride): dst_a's row then dst_b's, so the source row is read from cache once.
template <typename E>
__global__ void gather_column_sets_kernel(const E* src, int64_t rows, int64_t cols, const int32_t* idx,
                                          int64_t ka, int64_t pa, E* dst_a, int64_t kb, int64_t pb,
                                          E* dst_b) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const E* row = src + r * cols;
    for (int64_t j = threadIdx.x; j < pa; j += blockDim.x)
      dst_a[r * pa + j] = column_or_zero(row, idx, j, ka);
    for (int64_t j = threadIdx.x; j < pb; j += blockDim.x)
      dst_b[r * pb + j] = column_or_zero(row, idx + ka, j, kb);
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

__device__ __nv_bfloat16 bf16_at(const void* p, QuantIoType t, int64_t i) {
  if (t == QuantIoType::kBF16) return static_cast<const __nv_bfloat16*>(p)[i];
  return __float2bfloat16_rn(static_cast<const float*>(p)[i]);
}

// Block per row (grid-stride).
__global__ void concat_columns_kernel(const void* a, QuantIoType ta, int64_t ca, const void* b,
                                      QuantIoType tb, int64_t cb, int64_t rows, __nv_bfloat16* dst) {
  const int64_t width = ca + cb;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    for (int64_t j = threadIdx.x; j < width; j += blockDim.x)
      dst[r * width + j] = j < ca ? bf16_at(a, ta, r * ca + j) : bf16_at(b, tb, r * cb + (j - ca));
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

void gather_column_sets_cuda(const void* src, QuantIoType dtype, int64_t rows, int64_t cols,
                             const int32_t* idx, int64_t ka, int64_t pa, void* dst_a, int64_t kb, int64_t pb,
                             void* dst_b, cudaStream_t stream) {
  FP4_CHECK(ka >= 0 && kb >= 0 && ka <= pa && kb <= pb && ka + kb <= cols, "gather_column_sets_cuda: ", ka,
            " and ", kb, " of ", cols, " columns into ", pa, " and ", pb);
  FP4_CHECK((pa == 0 || dst_a != nullptr) && (pb == 0 || dst_b != nullptr),
            "gather_column_sets_cuda: a null destination");
  if (rows == 0 || pa + pb == 0) return;
  const auto grid = static_cast<unsigned>(std::min<int64_t>(rows, int64_t{1} << 16));
  if (dtype == QuantIoType::kF32)
    gather_column_sets_kernel<float><<<grid, 256, 0, stream>>>(static_cast<const float*>(src), rows, cols,
                                                               idx, ka, pa, static_cast<float*>(dst_a), kb,
                                                               pb, static_cast<float*>(dst_b));
  else
    gather_column_sets_kernel<uint16_t>
        <<<grid, 256, 0, stream>>>(static_cast<const uint16_t*>(src), rows, cols, idx, ka, pa,
                                   static_cast<uint16_t*>(dst_a), kb, pb, static_cast<uint16_t*>(dst_b));
  FP4_CUDA_CHECK_LAUNCH("gather_column_sets_kernel");
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

void concat_columns_bf16_cuda(const void* a, QuantIoType ta, int64_t ca, const void* b, QuantIoType tb,
                              int64_t cb, int64_t rows, uint16_t* dst, cudaStream_t stream) {
  if (rows * (ca + cb) == 0) return;
  const auto grid = static_cast<unsigned>(std::min<int64_t>(rows, int64_t{1} << 16));
  concat_columns_kernel<<<grid, 256, 0, stream>>>(a, ta, ca, b, tb, cb, rows,
                                                  reinterpret_cast<__nv_bfloat16*>(dst));
  FP4_CUDA_CHECK_LAUNCH("concat_columns_kernel");
}

}  // namespace fp4::cuda
