// Block scales in cuBLASLt's VEC16/VEC32 scale layout (quantize.h's to_cublaslt_scale_layout): thread per
// output byte, so the writes (padding zeros included) are coalesced.
#include "ops/cuda/quant/quant_launch.cuh"

namespace fp4 {
namespace {

constexpr int kThreads = 256;

// Inverse of cublaslt_scale_offset: tiles of 128 rows x 4 scale columns, 512 bytes each, row-major over
// tiles; inside a tile byte (r % 32) * 16 + ((r % 128) / 32) * 4 + (c % 4).
__global__ void __launch_bounds__(kThreads)
    cublaslt_scale_layout_kernel(const uint8_t* scales, int64_t rows, int64_t scale_cols, int64_t total,
                                 uint8_t* out) {
  const int64_t col_tiles = (scale_cols + 3) / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; o < total; o += stride) {
    const int64_t tile = o / 512, within = o % 512;
    const int64_t r = (tile / col_tiles) * 128 + ((within % 16) / 4) * 32 + within / 16;
    const int64_t c = (tile % col_tiles) * 4 + within % 4;
    out[o] = (r < rows && c < scale_cols) ? scales[r * scale_cols + c] : uint8_t{0};
  }
}

}  // namespace

int64_t cublaslt_scale_layout_bytes(int64_t rows, int64_t scale_cols) {
  return qk::ceil_div(rows, 128) * 128 * qk::ceil_div(scale_cols, 4) * 4;
}

void to_cublaslt_scale_layout_cuda(const uint8_t* scales, int64_t rows, int64_t scale_cols, uint8_t* out,
                                   cudaStream_t stream) {
  constexpr const char* kWhat = "to_cublaslt_scale_layout_cuda";
  FP4_CHECK(rows > 0 && scale_cols > 0, kWhat, ": empty scale matrix [", rows, " x ", scale_cols, "]");
  qk::check_aligned(scales, 1, kWhat, "scales");
  qk::check_aligned(out, 1, kWhat, "output");
  const int64_t total = cublaslt_scale_layout_bytes(rows, scale_cols);
  cublaslt_scale_layout_kernel<<<qk::grid_for(total, kThreads, 8), kThreads, 0, stream>>>(
      scales, rows, scale_cols, total, out);
  FP4_CUDA_CHECK_LAUNCH("cublaslt_scale_layout_kernel");
}

}  // namespace fp4
