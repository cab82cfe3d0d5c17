// NVFP4 quantizer of one operand along its rows (quantize.h's quantize_nvfp4): 1x16 or 16x16 blocks,
// tensor or block128 outer scales, RTN or SR, Four Over Six, RHT16..128, optional dequantized output.
//
// A thread block covers 64 rows x 128 columns; a thread holds one 16-element block of two rows (r and
// r + 32), so 8 neighbouring lanes hold one 128-wide row segment (block128 amax and RHT > 16 reduce over
// them by shuffles), and a warp holds 4 rows. 16x16 tiles combine 4 warps through shared memory.
#include "ops/cuda/quant_common.cuh"
#include "ops/cuda/quant_launch.cuh"

namespace fp4 {
namespace {

using qk::Raw16;

constexpr int kThreads = 256;
constexpr int kItems = 2;                          // rows per thread
constexpr int kRowsPerItem = kThreads / 8;         // 32
constexpr int kTileRows = kRowsPerItem * kItems;   // 64
constexpr int kTileCols = 128;

struct QuantArgs {
  const void* x;
  int64_t rows, cols;
  qk::Nvfp4Params p;
  bool tile16x16;
  int rht_n;
  RhtSigns signs;
  const float* amax;
  Nvfp4DeviceView out;
  unsigned long long* nonfinite;
  void* dq;
  bool dq_bf16, dq_apply;
};

// Stores of one quantized block: codes, scale, block128 outer scale, optional dequantized values.
__device__ __forceinline__ void store_block(const QuantArgs& a, int64_t i0, int j, uint2 codes, uint8_t scale,
                                            float outer) {
  *reinterpret_cast<uint2*>(a.out.codes + i0 / 2) = codes;
  a.out.scales[i0 / 16] = scale;
  if (a.p.block128 && j == 0) a.out.outer[i0 / 128] = outer;
  if (a.dq != nullptr) {
    float d[16];
    qk::decode16(codes, scale, outer, a.p.block128, a.dq_apply, d);
    if (a.dq_bf16)
      qk::store16<QuantIoType::kBF16>(a.dq, i0, d);
    else
      qk::store16<QuantIoType::kF32>(a.dq, i0, d);
  }
}

// kTile16x16: one scale per 16x16 tile (tensor outer scale only), else 1x16 blocks.
template <QuantIoType T, bool kTile16x16>
__global__ void __launch_bounds__(kThreads, 2) quantize_nvfp4_kernel(QuantArgs a) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, j = lane & 7;
  const int64_t col_tiles = qk::ceil_div(a.cols, kTileCols);
  const int64_t tc = blockIdx.x % col_tiles, tr = blockIdx.x / col_tiles;
  const int64_t c0 = tc * kTileCols + 16 * j;
  qk::Nvfp4Params p = a.p;
  if (!p.block128) qk::load_tensor_scale(p, a.amax);

  // Issue every load of the thread before using any.
  Raw16<T> raw[kItems];
  int64_t row[kItems];
  bool active[kItems];
#pragma unroll
  for (int s = 0; s < kItems; ++s) {
    row[s] = tr * kTileRows + s * kRowsPerItem + warp * 4 + (lane >> 3);
    active[s] = row[s] < a.rows && c0 < a.cols;
    if (active[s])
      qk::load_raw16<T>(a.x, row[s] * a.cols + c0, raw[s]);
    else
      qk::zero_raw16<T>(raw[s]);
  }

  unsigned nonfinite = 0;
  if constexpr (!kTile16x16) {
#pragma unroll
    for (int s = 0; s < kItems; ++s) {
      float v[16];
      qk::convert16<T>(raw[s], v);
      if (a.rht_n > 0) qk::rht_block16(v, a.signs, a.rht_n, c0);
      bool bad = false;
      const float amax16 = amax_finite16(v, bad);
      if (bad) nonfinite += qk::count_nonfinite16(v);
      const int64_t i0 = row[s] * a.cols + c0;
      uint8_t scale;
      float outer;
      const uint2 codes = qk::quantize_block16(p, v, amax16, bad, static_cast<uint64_t>(i0), scale, outer);
      if (active[s]) store_block(a, i0, j, codes, scale, outer);
    }
  } else {
    // The 16 rows of a tile are 4 lanes of each of 4 warps (warps 0-3: rows 0-15 of an item, warps 4-7:
    // rows 16-31). Key = amax bits, or ~0 when the tile holds a non-finite value (wins the max).
    __shared__ uint32_t tile_key[kItems][kThreads / 32][8];
    float v[kItems][16];
#pragma unroll
    for (int s = 0; s < kItems; ++s) {
      qk::convert16<T>(raw[s], v[s]);
      if (a.rht_n > 0) qk::rht_block16(v[s], a.signs, a.rht_n, c0);
      bool bad = false;
      const float amax16 = amax_finite16(v[s], bad);
      if (bad) nonfinite += qk::count_nonfinite16(v[s]);
      uint32_t key = bad ? 0xFFFFFFFFu : float_bits(amax16);
      key = max(key, __shfl_xor_sync(qk::kFullMask, key, 8));
      key = max(key, __shfl_xor_sync(qk::kFullMask, key, 16));
      if (lane < 8) tile_key[s][warp][j] = key;
    }
    __syncthreads();
#pragma unroll
    for (int s = 0; s < kItems; ++s) {
      const int w0 = warp & ~3;
      uint32_t key = tile_key[s][w0][j];
#pragma unroll
      for (int w = 1; w < 4; ++w) key = max(key, tile_key[s][w0 + w][j]);
      const bool bad = key == 0xFFFFFFFFu;
      const uint8_t scale = bad ? kE4m3Nan : nvfp4_scale_tensor(bits_float(key), p.ts, p.target);
      const int64_t i0 = row[s] * a.cols + c0;
      const uint2 codes = qk::encode16(p, v[s], scale, p.ts.s_dec, static_cast<uint64_t>(i0));
      if (active[s]) store_block(a, i0, j, codes, scale, p.ts.s_dec);
    }
  }
  if (!p.block128 && blockIdx.x == 0 && threadIdx.x == 0) a.out.outer[0] = p.ts.s_dec;
  if (a.nonfinite != nullptr) qk::warp_count_add(nonfinite, a.nonfinite);
}

template <QuantIoType T>
void launch_quantize(const QuantArgs& a, unsigned grid, cudaStream_t stream) {
  if (a.tile16x16)
    quantize_nvfp4_kernel<T, true><<<grid, kThreads, 0, stream>>>(a);
  else
    quantize_nvfp4_kernel<T, false><<<grid, kThreads, 0, stream>>>(a);
}

}  // namespace

void quantize_nvfp4_cuda(const DeviceInput& x, const QuantSpec& spec, const QuantRandomness& rnd,
                         const Nvfp4DeviceView& out, const float* amax_device, unsigned long long* nonfinite_device,
                         const DequantOutput& dequant, cudaStream_t stream) {
  constexpr const char* kWhat = "quantize_nvfp4_cuda";
  qk::check_nvfp4_spec(x.rows, x.cols, spec, rnd, kWhat);
  qk::check_input(x, kWhat);
  qk::check_view(out, x.rows, x.cols, spec, kWhat);
  qk::check_dequant(dequant, kWhat);
  if (spec.outer == OuterScale::kTensor) qk::check_aligned(amax_device, 4, kWhat, "amax (tensor outer scale)");
  if (nonfinite_device != nullptr) qk::check_aligned(nonfinite_device, 8, kWhat, "non-finite counter");

  QuantArgs a{};
  a.x = x.data;
  a.rows = x.rows;
  a.cols = x.cols;
  a.p = qk::make_params(spec, rnd);
  a.tile16x16 = spec.block == BlockShape::k16x16;
  a.rht_n = spec.rht_n;
  a.signs = rnd.signs;
  a.amax = amax_device;
  a.out = out;
  a.nonfinite = nonfinite_device;
  a.dq = dequant.data;
  a.dq_bf16 = dequant.dtype == QuantIoType::kBF16;
  a.dq_apply = dequant.apply_tensor_scale;

  const int64_t tiles = qk::ceil_div(x.rows, kTileRows) * qk::ceil_div(x.cols, kTileCols);
  FP4_CHECK(tiles < (int64_t{1} << 31), kWhat, ": tensor [", x.rows, " x ", x.cols, "] is too large for one launch");
  const unsigned grid = static_cast<unsigned>(tiles);
  if (x.dtype == QuantIoType::kF32)
    launch_quantize<QuantIoType::kF32>(a, grid, stream);
  else
    launch_quantize<QuantIoType::kBF16>(a, grid, stream);
  FP4_CUDA_CHECK_LAUNCH("quantize_nvfp4_kernel");
}

}  // namespace fp4
