// NVFP4 quantizer of one operand along its rows (quantize.h's quantize_nvfp4): 1x16 or 16x16 blocks,
// tensor or block128 outer scales, RTN or SR, Four Over Six, RHT16..128, optional dequantized output.
//
// Every mode is its own kernel (dtype, outer scale, rounding, RHT width class, Four Over Six), so the element
// loop holds no run-time selects. 1x16: the operand is a flat array of 16-element blocks (cols is a multiple
// of 16, of 128 for block128 and of rht_n, so no 128-element or RHT segment crosses a row, and an element's
// flat index is its SR word index); a thread holds one block per item, a warp 32 consecutive blocks, so the 8
// lanes of a 128-element segment reduce its amax and the wide RHT by shuffles. 16x16: a thread block covers
// 64 rows x 128 columns, a tile's 16 rows are 4 lanes of each of 4 warps, combined through shared memory.
#include <type_traits>

#include "ops/cuda/quant/quant_common.cuh"
#include "ops/cuda/quant/quant_launch.cuh"

namespace fp4 {
namespace {

using qk::Raw16;

constexpr int kThreads = 256;
constexpr int kTileItems = 2;  // 16x16 kernel: rows per thread

// 1x16 kernel: blocks per thread, all loads issued before any block is used (the per-thread set-up is then
// shared by more elements): 128 bytes of input either way.
constexpr int rows_items(QuantIoType t) {
  return t == QuantIoType::kBF16 ? 4 : 2;
}

struct QuantArgs {
  const void* x;
  int64_t rows, cols;
  qk::Nvfp4Params p;
  int rht_n;
  RhtSigns signs;
  Rht16SignWords rht16_signs;  // rht_n == 16: the signs as xor words on the input (convert16_rht16)
  const float* amax;
  Nvfp4DeviceView out;
  unsigned long long* nonfinite;
  void* dq;
  bool dq_bf16, dq_apply;
  bool ctr32;  // fewer than 2^34 elements: SR words by philox_block32 (encode16_direct)
};

// Per-thread constants of a tensor-outer-scale launch: the scale multiplier, whether the fast E4M3
// encoder applies (a finite positive multiplier: any device amax; a caller's amax may be anything), and
// the encode multiplier e_b of every scale code, in shared memory.
struct TensorCtx {
  float mult = 0.0f;
  bool fast = false;
  const float* e_table = nullptr;
};

__device__ __forceinline__ TensorCtx tensor_ctx(qk::Nvfp4Params& p, const float* amax, float* e_table) {
  qk::load_tensor_scale(p, amax);
  const uint32_t code = threadIdx.x;  // nvfp4_encode_multiplier(code, s_dec)
  const float s_b = code == kE4m3Nan ? e4m3_decode(kE4m3Nan) : qk::e4m3_value(code);
  e_table[code] = min_f(1.0f / __fmul_rn(s_b, p.ts.s_dec), kFloatMax);
  TensorCtx t;
  t.mult = __fmul_rn(p.ts.s_enc, p.inv_target);  // as nvfp4_scale_tensor forms it
  t.fast = t.mult > 0.0f && t.mult <= kFloatMax;
  t.e_table = e_table;
  __syncthreads();
  return t;
}

// Scale of a 1x16 block or 16x16 tile with amax16 under a tensor outer scale (nvfp4_scale_tensor).
__device__ __forceinline__ uint8_t tensor_scale(const qk::Nvfp4Params& p, const TensorCtx& t, float amax16) {
  return t.fast ? static_cast<uint8_t>(qk::e4m3_code_nonneg(__fmul_rn(amax16, t.mult)))
                : nvfp4_scale_tensor(amax16, p.ts, p.target);
}

// Codes, scale, block128 outer scale and optional dequantized values of block b (elements 16 b ..).
__device__ __forceinline__ void store_block(const QuantArgs& a, int64_t b, bool block128, uint2 codes,
                                            uint8_t scale, float outer) {
  *reinterpret_cast<uint2*>(a.out.codes + 8 * b) = codes;
  a.out.scales[b] = scale;
  if (block128 && (b & 7) == 0) a.out.outer[b >> 3] = outer;
  if (a.dq != nullptr) {
    float d[16];
    qk::decode16(codes, scale, outer, block128, a.dq_apply, d);
    if (a.dq_bf16)
      qk::store16<QuantIoType::kBF16>(a.dq, 16 * b, d);
    else
      qk::store16<QuantIoType::kF32>(a.dq, 16 * b, d);
  }
}

// The transformed values of a block, their finite amax, whether one is NaN or inf, and their sign nibbles.
// BF16 input without RHT takes amax and signs from the raw words (two values per instruction).
template <QuantIoType T, int kRht>
__device__ __forceinline__ float prepare16(const QuantArgs& a, const Raw16<T>& raw, int64_t i0,
                                           float (&v)[16], uint2& signs, bool& bad) {
  if constexpr (kRht == 16) {
    qk::convert16_rht16<T>(raw, a.rht16_signs, v);
  } else {
    qk::convert16<T>(raw, v);
    if constexpr (kRht != 0) qk::rht_block16(v, a.signs, a.rht_n, i0);
  }
  if constexpr (T == QuantIoType::kBF16 && kRht == 0) {
    signs = make_uint2(qk::sign_nibbles_bf16(raw.w[0].x, raw.w[0].y, raw.w[0].z, raw.w[0].w),
                       qk::sign_nibbles_bf16(raw.w[1].x, raw.w[1].y, raw.w[1].z, raw.w[1].w));
    return qk::amax16_bf16(raw.w, v, bad);
  } else {
    signs = make_uint2(qk::sign_nibbles8(v), qk::sign_nibbles8(v + 8));
    return qk::amax16_of(v, bad);
  }
}

// Thread blocks per SM the 1x16 kernel is compiled for. Block128 RTN on BF16 (with or without RHT16) waits
// on its loads, not on issue (ncu, docs/BENCHMARKS.md, quantizers), and fits 64 registers without
// spills: four blocks per SM there, three elsewhere (the SR and Four Over Six forms would spill at 64).
constexpr int rows_min_blocks(QuantIoType t, bool block128, bool sr, int rht, bool fos) {
  return t == QuantIoType::kBF16 && block128 && !sr && !fos && (rht == 0 || rht == 16) ? 4 : 3;
}

// 1x16 blocks. kRht: 0, 16, or -1 for a run-time width of 32..128.
template <QuantIoType T, bool kBlock128, bool kSr, int kRht, bool kFos>
__global__ void __launch_bounds__(kThreads, rows_min_blocks(T, kBlock128, kSr, kRht, kFos))
    quantize_rows_kernel(QuantArgs a) {
  constexpr int kItems = rows_items(T);
  __shared__ float e_table[kBlock128 ? 1 : 256];
  const int64_t nblocks = a.rows * a.cols / 16;
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * (kItems * kThreads) + threadIdx.x;
  // Modes with SR, an RHT, Four Over Six or block128 scales run the item loop rolled: unrolled, every warp
  // streamed 6,000-17,000 distinct instructions once through the instruction caches (the dual quantizer's
  // ncu profile, docs/BENCHMARKS.md, quantizers). Rolled, two items' loads are in flight (the one being
  // quantized and the next), one with Four Over Six (its candidate encodings need the registers): within
  // three thread blocks per SM without spills. FP32 input (two items) stays unrolled: rolled, its block128
  // RTN form took 29.6 us instead of 27.0 us on 4096 x 4096 (docs/BENCHMARKS.md, quantizers: tried and not
  // kept).
  constexpr bool kRolled = T == QuantIoType::kBF16 && (kBlock128 || kSr || kRht != 0 || kFos);
  constexpr int kAhead = !kRolled ? kItems : kFos ? 1 : 2;
  auto load_item = [&](int s, Raw16<T>& raw) {
    if (b0 + s * kThreads < nblocks)
      qk::load_raw16<T>(a.x, 16 * (b0 + s * kThreads), raw);
    else
      qk::zero_raw16<T>(raw);
  };
  Raw16<T> raw[kAhead];
#pragma unroll
  for (int s = 0; s < kAhead; ++s) load_item(s, raw[s]);
  qk::Nvfp4Params p = a.p;
  TensorCtx t;
  if constexpr (!kBlock128) t = tensor_ctx(p, a.amax, e_table);

  unsigned nonfinite = 0;
  auto quantize_item = [&](const Raw16<T>& raw, int s) {
    const int64_t b = b0 + s * kThreads, i0 = 16 * b;
    float v[16];
    uint2 signs;
    bool bad = false;
    const float amax16 = prepare16<T, kRht>(a, raw, i0, v, signs, bad);
    if (bad) nonfinite += qk::count_nonfinite16(v);
    uint8_t scale;
    float outer;
    uint2 codes;
    if constexpr (kBlock128) {
      const float amax128 = qk::max8_lanes(amax16);
      const bool direct_words = !kSr || a.ctr32;  // encode16_direct's SR words need a 32-bit counter
      // Ordinary blocks (nearly all) take the fast scale steps and the direct encoder with one branch; the
      // others, and every Four Over Six block, the general steps below (none of the non-ordinary blocks
      // without Four Over Six is one block128_direct admits: a tiny amax128 or quotient gives a tiny p or a
      // subnormal scale, a non-finite block the NaN scale).
      bool done = false;
      if constexpr (!kFos) {
        const qk::Block128Ordinary o = qk::block128_ordinary(amax16, amax128, bad, p);
        if (o.ok && direct_words) {
          outer = o.outer;
          scale = o.scale;
          codes = qk::encode16_direct<kSr>(v, block128_encode_multiplier(o.prod), signs, p.philox,
                                           static_cast<uint32_t>(i0 >> 2));
          done = true;
        }
      }
      if (!done) {
        outer = qk::block128_outer_fast(amax128, p);
        if constexpr (kFos)
          scale = bad ? kE4m3Nan : nvfp4_scale_block128_4o6(v, amax16, outer);
        else
          scale = bad ? kE4m3Nan : qk::block128_scale_fast(amax16, outer, p);
        const float prod = bad ? e4m3_decode(kE4m3Nan) : __fmul_rn(qk::e4m3_value(scale), outer);
        if (kFos && qk::block128_direct(scale, prod) && direct_words) {
          codes = qk::encode16_direct<kSr>(v, block128_encode_multiplier(prod), signs, p.philox,
                                           static_cast<uint32_t>(i0 >> 2));
        } else if (!bad) {
          codes = qk::encode16_fast<kSr>(v, block128_encode_multiplier(prod), signs, p.rng,
                                         static_cast<uint64_t>(i0));
        } else {  // a non-finite block (NaN scale): the reference encoder, element by element
          codes = qk::encode16_mode<true, kSr>(v, prod, p.rng, static_cast<uint64_t>(i0));
        }
      }
    } else {
      outer = p.ts.s_dec;
      if constexpr (kFos)
        scale = bad ? kE4m3Nan : nvfp4_scale_tensor_4o6(v, amax16, p.amax, p.ts);
      else
        scale = bad ? kE4m3Nan : tensor_scale(p, t, amax16);
      // A NaN scale gives e_b = NaN and every product NaN: code 0x7 whatever the element's sign.
      if (bad) signs = make_uint2(0, 0);
      codes = qk::encode16_fast<kSr>(v, t.e_table[scale], signs, p.rng, static_cast<uint64_t>(i0));
    }
    if (b < nblocks) store_block(a, b, kBlock128, codes, scale, outer);
  };
  if constexpr (kRolled && kAhead == 2) {
    // Two items per iteration, each buffer refilled right after its item: no register copies between them
    // (a one-item loop moved the second buffer into the first, 16 moves per item).
    static_assert(kItems % 2 == 0, "items come in pairs");
#pragma unroll 1
    for (int s = 0; s < kItems; s += 2) {
      quantize_item(raw[0], s);
      if (s + 2 < kItems) load_item(s + 2, raw[0]);
      quantize_item(raw[1], s + 1);
      if (s + 3 < kItems) load_item(s + 3, raw[1]);
    }
  } else if constexpr (kRolled) {
#pragma unroll 1
    for (int s = 0; s < kItems; ++s) {
      quantize_item(raw[0], s);
      if (s + 1 < kItems) load_item(s + 1, raw[0]);
    }
  } else {
#pragma unroll
    for (int s = 0; s < kItems; ++s) quantize_item(raw[s], s);
  }
  if (!kBlock128 && blockIdx.x == 0 && threadIdx.x == 0) a.out.outer[0] = p.ts.s_dec;
  if (a.nonfinite != nullptr) qk::warp_count_add(nonfinite, a.nonfinite);
}

// 16x16 tiles (tensor outer scale): a thread block covers 64 rows x 128 columns, a thread one 16-column
// block of rows r and r + 32. The 16 rows of a tile are 4 lanes of each of 4 warps (warps 0-3: rows 0-15
// of an item, warps 4-7: rows 16-31). Key = amax bits, or ~0 when the tile holds a non-finite value.
template <QuantIoType T, bool kSr, int kRht>
__global__ void __launch_bounds__(kThreads, 2) quantize_tiles_kernel(QuantArgs a) {
  constexpr int kItems = kTileItems, kRowsPerItem = kThreads / 8, kTileRows = kRowsPerItem * kItems;
  constexpr int kTileCols = 128;
  __shared__ float e_table[256];
  __shared__ uint32_t tile_key[kItems][kThreads / 32][8];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, j = lane & 7;
  const int64_t col_tiles = qk::ceil_div(a.cols, kTileCols);
  const int64_t tc = blockIdx.x % col_tiles, tr = blockIdx.x / col_tiles;
  const int64_t c0 = tc * kTileCols + 16 * j;

  Raw16<T> raw[kItems];
  int64_t row[kItems];
#pragma unroll
  for (int s = 0; s < kItems; ++s) {
    row[s] = tr * kTileRows + s * kRowsPerItem + warp * 4 + (lane >> 3);
    if (row[s] < a.rows && c0 < a.cols)
      qk::load_raw16<T>(a.x, row[s] * a.cols + c0, raw[s]);
    else
      qk::zero_raw16<T>(raw[s]);
  }
  qk::Nvfp4Params p = a.p;
  const TensorCtx t = tensor_ctx(p, a.amax, e_table);

  unsigned nonfinite = 0;
  float v[kItems][16];
  uint2 signs[kItems];
#pragma unroll
  for (int s = 0; s < kItems; ++s) {
    bool bad = false;
    const float amax16 = prepare16<T, kRht>(a, raw[s], row[s] * a.cols + c0, v[s], signs[s], bad);
    if (bad) nonfinite += qk::count_nonfinite16(v[s]);
    uint32_t key = bad ? 0xFFFFFFFFu : __float_as_uint(amax16);
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
    const uint8_t scale = bad ? kE4m3Nan : tensor_scale(p, t, __uint_as_float(key));
    const int64_t i0 = row[s] * a.cols + c0;
    const uint2 codes = qk::encode16_fast<kSr>(v[s], t.e_table[scale], bad ? make_uint2(0, 0) : signs[s],
                                               p.rng, static_cast<uint64_t>(i0));
    if (row[s] < a.rows && c0 < a.cols) store_block(a, i0 / 16, false, codes, scale, p.ts.s_dec);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) a.out.outer[0] = p.ts.s_dec;
  if (a.nonfinite != nullptr) qk::warp_count_add(nonfinite, a.nonfinite);
}

// Run-time flags to compile-time kernel parameters.
template <typename F>
void with_bool(bool v, F&& f) {
  if (v)
    f(std::true_type{});
  else
    f(std::false_type{});
}

template <typename F>
void with_rht(int n, F&& f) {
  if (n == 0)
    f(std::integral_constant<int, 0>{});
  else if (n == 16)
    f(std::integral_constant<int, 16>{});
  else
    f(std::integral_constant<int, -1>{});
}

template <QuantIoType T>
void launch_quantize(const QuantArgs& a, const QuantSpec& spec, cudaStream_t stream) {
  const bool sr = spec.rounding == Rounding::kSr;
  if (spec.block == BlockShape::k16x16) {
    const int64_t tiles = qk::ceil_div(a.rows, 64) * qk::ceil_div(a.cols, 128);
    FP4_CHECK(tiles < (int64_t{1} << 31), "quantize_nvfp4_cuda: tensor [", a.rows, " x ", a.cols,
              "] is too large for one launch");
    with_bool(sr, [&](auto kSr) {
      with_rht(spec.rht_n, [&](auto kRht) {
        quantize_tiles_kernel<T, kSr(), kRht()><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(a);
      });
    });
    return;
  }
  const int64_t groups = qk::ceil_div(a.rows * a.cols / 16, rows_items(T) * kThreads);
  FP4_CHECK(groups < (int64_t{1} << 31), "quantize_nvfp4_cuda: tensor [", a.rows, " x ", a.cols,
            "] is too large for one launch");
  const auto grid = static_cast<unsigned>(groups);
  with_bool(spec.outer == OuterScale::kBlock128, [&](auto kB128) {
    with_bool(sr, [&](auto kSr) {
      with_rht(spec.rht_n, [&](auto kRht) {
        with_bool(spec.four_over_six == FourOverSix::kMse, [&](auto kFos) {
          quantize_rows_kernel<T, kB128(), kSr(), kRht(), kFos()><<<grid, kThreads, 0, stream>>>(a);
        });
      });
    });
  });
}

}  // namespace

void quantize_nvfp4_cuda(const DeviceInput& x, const QuantSpec& spec, const QuantRandomness& rnd,
                         const Nvfp4DeviceView& out, const float* amax_device,
                         unsigned long long* nonfinite_device, const DequantOutput& dequant,
                         cudaStream_t stream) {
  constexpr const char* kWhat = "quantize_nvfp4_cuda";
  qk::check_nvfp4_spec(x.rows, x.cols, spec, rnd, kWhat);
  qk::check_input(x, kWhat);
  qk::check_view(out, x.rows, x.cols, spec, kWhat);
  qk::check_dequant(dequant, kWhat);
  if (spec.outer == OuterScale::kTensor)
    qk::check_aligned(amax_device, 4, kWhat, "amax (tensor outer scale)");
  if (nonfinite_device != nullptr) qk::check_aligned(nonfinite_device, 8, kWhat, "non-finite counter");

  QuantArgs a{};
  a.x = x.data;
  a.rows = x.rows;
  a.cols = x.cols;
  a.p = qk::make_params(spec, rnd);
  a.rht_n = spec.rht_n;
  a.signs = rnd.signs;
  if (spec.rht_n == 16) a.rht16_signs = rht16_sign_words(rnd.signs, x.dtype == QuantIoType::kBF16);
  a.amax = amax_device;
  a.out = out;
  a.nonfinite = nonfinite_device;
  a.dq = dequant.data;
  a.dq_bf16 = dequant.dtype == QuantIoType::kBF16;
  a.dq_apply = dequant.apply_tensor_scale;
  a.ctr32 = x.rows * x.cols < (int64_t{1} << 34);
  if (x.dtype == QuantIoType::kF32)
    launch_quantize<QuantIoType::kF32>(a, spec, stream);
  else
    launch_quantize<QuantIoType::kBF16>(a, spec, stream);
  FP4_CUDA_CHECK_LAUNCH("quantize_nvfp4_kernel");
}

}  // namespace fp4
