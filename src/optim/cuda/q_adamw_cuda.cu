// Q-AdamW's device step. Bit-identity with the CPU (optim/q_adamw.cpp, optim/quantized_moments.cpp) rests
// on: the shared __host__ __device__ numerics (nvfp4_block.h, hadamard.h, philox.h, formats.h); every
// product that feeds an addition written as __fmul_rn / mul_rn, so nvcc cannot fuse it into an FMA where
// g++ (-ffp-contract=off) rounds twice; the tile mean summed in double in element order by one thread;
// the same Philox key per (tensor, step, moment) and the same stream (the tile) and word (the element in
// the tile) for every SR decision.
#include <cmath>

#include "core/error.h"
#include "numerics/formats.h"
#include "numerics/hadamard.h"
#include "numerics/nvfp4_block.h"
#include "numerics/philox.h"
#include "ops/cuda/cuda_check.h"
#include "optim/cuda/q_adamw_cuda.h"
#include "optim/q_adamw_keys.h"

namespace fp4::cuda {

namespace {

constexpr int kGroups = 8;  // 16-element groups per tile: one thread each
constexpr int kTilesPerBlock = 32;
constexpr int kThreads = kTilesPerBlock * kGroups;

// The piece holding state tile `tile` (binary search over first_tile).
__device__ int piece_of(const QAdamPiece* t, int n, int64_t tile) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (t[mid].first_tile <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Where a thread works: tile `tile` of piece `pi` (gt in the state buffers), which is tile `tensor_tile` of
// tensor `ti`; group g of the tile, and how many of the group's 16 elements and of the tile's 128 are data
// (the rest is zero padding).
struct Slot {
  bool live = false;
  int pi = 0, ti = 0, g = 0;
  int64_t gt = 0, tile = 0, tensor_tile = 0;
  int valid = 0, tile_count = 0;
};

__device__ Slot slot_of(const QAdamPiece* pieces, int n_pieces, int64_t total_tiles) {
  Slot s;
  s.g = static_cast<int>(threadIdx.x) % kGroups;
  s.gt = static_cast<int64_t>(blockIdx.x) * kTilesPerBlock + static_cast<int64_t>(threadIdx.x) / kGroups;
  if (s.gt >= total_tiles) return s;
  s.live = true;
  s.pi = piece_of(pieces, n_pieces, s.gt);
  const QAdamPiece& t = pieces[s.pi];
  s.ti = t.param;
  s.tile = s.gt - t.first_tile;
  s.tensor_tile = t.tile0 + s.tile;
  const int64_t left = t.numel - s.tile * kQAdamTileElements;
  s.tile_count = static_cast<int>(left < kQAdamTileElements ? left : kQAdamTileElements);
  const int64_t in_group = s.tile_count - s.g * 16;
  s.valid = static_cast<int>(in_group < 0 ? 0 : in_group > 16 ? 16 : in_group);
  return s;
}

// The H16-mixed group as dequantize() then mix() give it: (q * s_b) * S_dec, then H.
__device__ void decode_group(const QAdamPacked& st, int k, const Slot& s, float s_dec, float* x) {
  const uint8_t* c = st.codes[k] + s.gt * kQAdamCodeBytes + s.g * 8;
  const float sb = e4m3_decode(st.scales[k][s.gt * kQAdamScaleBytes + s.g]);
  uint2 w = *reinterpret_cast<const uint2*>(c);
  const uint8_t* b = reinterpret_cast<const uint8_t*>(&w);
  FP4_UNROLL
  for (int e = 0; e < 16; ++e) {
    const uint8_t code =
        (e & 1) ? static_cast<uint8_t>(b[e >> 1] >> 4) : static_cast<uint8_t>(b[e >> 1] & 0xF);
    x[e] = mul_rn(mul_rn(e2m1_decode(code), sb), s_dec);
  }
  rht_segment<16>(x, RhtSigns{});
}

// Decodes the group's m and v and runs cpu::adamw_update on its data elements: m, v receive the new
// moments and, with kWeights, p the new weights (entries past `valid` are left 0). The amax pass needs only
// the moments: without kWeights it reads no weights and skips the square root and the two divisions of
// the update (m and v do not depend on them).
template <bool kWeights>
__device__ void update_group(const float* values, const float* grads, const QAdamPacked& st,
                             const QAdamPiece& t, const Slot& s, const QAdamStepArgs& a, float clip, float* m,
                             float* v, float* p) {
  float xm[16], xr[16];
  decode_group(st, 0, s, st.scale[0][2 * s.ti], xm);
  decode_group(st, 1, s, st.scale[1][2 * s.ti], xr);
  const float mu = bf16_bits_to_float(st.mean[s.gt]);
  const int64_t base = t.offset + s.tile * kQAdamTileElements + s.g * 16;
  FP4_UNROLL
  for (int e = 0; e < 16; ++e) {
    m[e] = v[e] = p[e] = 0.0f;
    if (e >= s.valid) continue;
    const float u = __fadd_rn(xr[e], mu);  // decode_second_moment: (H(deq r) + mu) clamped at 0, squared
    const float uc = u > 0.0f ? u : 0.0f;
    const float vd = __fmul_rn(uc, uc);
    const float g = clip == 1.0f ? grads[base + e] : __fmul_rn(grads[base + e], clip);
    const float mi = __fadd_rn(__fmul_rn(xm[e], a.beta1), __fmul_rn(g, a.one_minus_beta1));
    const float vi = __fadd_rn(__fmul_rn(vd, a.beta2), __fmul_rn(__fmul_rn(g, g), a.one_minus_beta2));
    if constexpr (kWeights) {
      const float decay = t.decay ? a.decay_on : 1.0f;
      const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.bc2_sqrt), a.eps);
      const float r = __fdiv_rn(mi, denom);
      const float rc = r < -a.ratio_bound ? -a.ratio_bound : r > a.ratio_bound ? a.ratio_bound : r;
      p[e] = __fsub_rn(__fmul_rn(values[base + e], decay), __fmul_rn(a.step_size, rc));
    }
    m[e] = mi;
    v[e] = vi;
  }
}

// mix_first_moment / mix_second_moment of the group (zero padding included). The tile mean of sqrt(v) is
// summed in double in element order by the tile's group 0, as the CPU loop does; every thread of the block
// must call this (it synchronizes). Returns the new BF16 mean of the thread's tile.
__device__ uint16_t mix_group(const Slot& s, const float* m, const float* v, float* xm, float* xr,
                              float (*sh_u)[kQAdamTileElements], uint16_t* sh_mean) {
  const int lt = static_cast<int>(threadIdx.x) / kGroups;
  FP4_UNROLL
  for (int e = 0; e < 16; ++e) {
    xm[e] = e < s.valid ? m[e] : 0.0f;
    xr[e] = e < s.valid ? __fsqrt_rn(v[e]) : 0.0f;
    sh_u[lt][s.g * 16 + e] = xr[e];
  }
  rht_segment<16>(xm, RhtSigns{});
  __syncthreads();
  if (s.live && s.g == 0) {
    double sum = 0.0;
    for (int i = 0; i < s.tile_count; ++i) sum = __dadd_rn(sum, static_cast<double>(sh_u[lt][i]));
    const float mean = __double2float_rn(__ddiv_rn(sum, static_cast<double>(s.tile_count)));
    sh_mean[lt] = bf16_bits_rne(mean);
  }
  __syncthreads();
  const uint16_t mean_bits = sh_mean[lt];
  const float mu = bf16_bits_to_float(mean_bits);
  FP4_UNROLL
  for (int e = 0; e < 16; ++e)
    if (e < s.valid) xr[e] = __fsub_rn(xr[e], mu);
  rht_segment<16>(xr, RhtSigns{});
  return mean_bits;
}

__device__ float group_amax(const float* x) {
  float a = 0.0f;
  FP4_UNROLL
  for (int e = 0; e < 16; ++e) a = max_f(a, abs_f(x[e]));
  return a;
}

// quantize_nvfp4 of one 1x16 block of a tile (tensor scale from `amax`, Four Over Six, SR): element e of
// group g draws SR word g * 16 + e of the stream {key, tile}, tile counted in the tensor (philox_sr_word:
// Philox blocks 2g and 2g + 1).
// Writes the 8 code bytes and the scale.
__device__ void quantize_group(const float* x, float amax, uint64_t key, int64_t tile, uint8_t* codes,
                               uint8_t* scale) {
  const TensorScale ts = nvfp4_tensor_scale(amax, true, kNvfp4Target);
  bool bad = false;
  const float amax16 = amax_finite16(x, bad);
  const uint8_t sc = bad ? kE4m3Nan : nvfp4_scale_tensor_4o6(x, amax16, amax, ts);
  const float e_b = nvfp4_encode_multiplier(sc, ts.s_dec);
  const RngStream rs{key, static_cast<uint64_t>(tile)};
  const int g = static_cast<int>(threadIdx.x) % kGroups;
  uint8_t code[16];
  const Philox4 r[2] = {philox_block(rs, static_cast<uint64_t>(g * 2)),
                        philox_block(rs, static_cast<uint64_t>(g * 2 + 1))};
  FP4_UNROLL
  for (int i = 0; i < 16; ++i) code[i] = nvfp4_encode_tensor(x[i], e_b, true, sr16_word(r[i >> 3], i));
  uint2 w;
  uint8_t* b = reinterpret_cast<uint8_t*>(&w);
  FP4_UNROLL
  for (int i = 0; i < 8; ++i) b[i] = pack_e2m1(code[2 * i], code[2 * i + 1]);
  *reinterpret_cast<uint2*>(codes) = w;
  *scale = sc;
}

// Per tile (shared), then one atomic per tensor run in the block: the block's share of each tensor amax.
__device__ void reduce_amax(const Slot& s, float am, float av, float* amax, int* sh_ti, float (*sh_a)[2]) {
  const int lt = static_cast<int>(threadIdx.x) / kGroups;
  for (int o = kGroups / 2; o > 0; o >>= 1) {
    am = max_f(am, __shfl_xor_sync(0xFFFFFFFFu, am, o));
    av = max_f(av, __shfl_xor_sync(0xFFFFFFFFu, av, o));
  }
  if (s.g == 0) {
    sh_ti[lt] = s.live ? s.ti : -1;
    sh_a[lt][0] = am;
    sh_a[lt][1] = av;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  int cur = -1;
  float a[2] = {0.0f, 0.0f};
  for (int t = 0; t <= kTilesPerBlock; ++t) {
    const int ti = t < kTilesPerBlock ? sh_ti[t] : -1;
    if (ti != cur && cur >= 0) {
      // Non-negative floats order as their bits: an integer max is the float max.
      atomicMax(reinterpret_cast<unsigned*>(amax) + 2 * cur, float_bits(a[0]));
      atomicMax(reinterpret_cast<unsigned*>(amax) + 2 * cur + 1, float_bits(a[1]));
      a[0] = a[1] = 0.0f;
    }
    cur = ti;
    if (ti >= 0) {
      a[0] = max_f(a[0], sh_a[t][0]);
      a[1] = max_f(a[1], sh_a[t][1]);
    }
  }
}

// (A) The new moments' tensor amax, and the first non-finite moment (QAdamW's pass 1).
__global__ void __launch_bounds__(kThreads)
    amax_kernel(const float* __restrict__ grads, QAdamPacked st, const QAdamPiece* __restrict__ pieces,
                int n_pieces, int64_t total_tiles, QAdamStepArgs a, const StepControl* __restrict__ control,
                float* amax, uint32_t* fault) {
  __shared__ float sh_u[kTilesPerBlock][kQAdamTileElements];
  __shared__ uint16_t sh_mean[kTilesPerBlock];
  __shared__ int sh_ti[kTilesPerBlock];
  __shared__ float sh_a[kTilesPerBlock][2];
  if (control->skip) return;  // the same for every thread: no barrier is left waiting
  const Slot s = slot_of(pieces, n_pieces, total_tiles);
  float m[16] = {}, v[16] = {}, p[16];
  if (s.live) {
    update_group<false>(nullptr, grads, st, pieces[s.pi], s, a, control->clip_coef, m, v, p);
    bool bad_m = false, bad_v = false;
    // Loops over a group run all 16 entries with a predicate: a run-time trip count would put the group's
    // arrays in local memory.
    FP4_UNROLL
    for (int e = 0; e < 16; ++e) {
      if (e >= s.valid) continue;
      bad_m |= !is_finite_f(m[e]);
      bad_v |= !(v[e] >= 0.0f && is_finite_f(v[e]));
    }
    if (bad_m || bad_v) atomicMin(fault, 2u * static_cast<uint32_t>(s.ti) + (bad_m ? 0u : 1u));
    // Non-finite values would poison the mean and the amax; the step is abandoned anyway.
    FP4_UNROLL
    for (int e = 0; e < 16; ++e) {
      if (!is_finite_f(m[e])) m[e] = 0.0f;
      if (!(v[e] >= 0.0f && is_finite_f(v[e]))) v[e] = 0.0f;
    }
  }
  float xm[16], xr[16];
  mix_group(s, m, v, xm, xr, sh_u, sh_mean);
  float am = s.live ? group_amax(xm) : 0.0f, av = s.live ? group_amax(xr) : 0.0f;
  // The mixing can overflow finite moments; quantize_tiles refuses an infinite amax.
  if (!is_finite_f(am) || !is_finite_f(av)) {
    atomicMin(fault, 2u * static_cast<uint32_t>(s.ti) + (is_finite_f(am) ? 1u : 0u));
    am = is_finite_f(am) ? am : 0.0f;
    av = is_finite_f(av) ? av : 0.0f;
  }
  reduce_amax(s, am, av, amax, sh_ti, sh_a);
}

// (B) The weights and the packed moments of the step (QAdamW's pass 2).
__global__ void __launch_bounds__(kThreads)
    write_kernel(float* __restrict__ values, const float* __restrict__ grads, bf16* __restrict__ values_bf16,
                 QAdamPacked st, const QAdamPiece* __restrict__ pieces, int n_pieces, int64_t total_tiles,
                 QAdamStepArgs a, const StepControl* __restrict__ control, const float* __restrict__ amax,
                 const uint32_t* __restrict__ fault) {
  __shared__ float sh_u[kTilesPerBlock][kQAdamTileElements];
  __shared__ uint16_t sh_mean[kTilesPerBlock];
  if (control->skip || *fault != kQAdamNoFault) return;
  const Slot s = slot_of(pieces, n_pieces, total_tiles);
  float m[16] = {}, v[16] = {}, p[16] = {};
  if (s.live) update_group<true>(values, grads, st, pieces[s.pi], s, a, control->clip_coef, m, v, p);
  float xm[16], xr[16];
  // Every read of the old state (this tile's codes, scales and mean) happens before the barriers in here.
  const uint16_t mean_bits = mix_group(s, m, v, xm, xr, sh_u, sh_mean);
  if (!s.live) return;
  const QAdamPiece& t = pieces[s.pi];
  const int64_t base = t.offset + s.tile * kQAdamTileElements + s.g * 16;
  FP4_UNROLL
  for (int e = 0; e < 16; ++e) {
    if (e >= s.valid) continue;
    values[base + e] = p[e];
    if (values_bf16 != nullptr) values_bf16[base + e] = __float2bfloat16_rn(p[e]);
  }
  const float* x[2] = {xm, xr};
  FP4_UNROLL
  for (int k = 0; k < 2; ++k)
    quantize_group(x[k], amax[2 * s.ti + k], q_adamw_sr_key(a.seed, a.step, s.ti, k), s.tensor_tile,
                   st.codes[k] + s.gt * kQAdamCodeBytes + s.g * 8,
                   st.scales[k] + s.gt * kQAdamScaleBytes + s.g);
  if (s.g == 0) st.mean[s.gt] = mean_bits;
}

// (C) Each tensor's S_dec and amax, once every tile has read the old ones. control and fault may be null.
__global__ void scale_kernel(QAdamPacked st, int n_tensors, const float* __restrict__ amax,
                             const StepControl* __restrict__ control, const uint32_t* __restrict__ fault) {
  if ((control != nullptr && control->skip) || (fault != nullptr && *fault != kQAdamNoFault)) return;
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n_tensors) return;
  for (int k = 0; k < 2; ++k) {
    const float a = amax[2 * i + k];
    st.scale[k][2 * i] = nvfp4_tensor_scale(a, true, kNvfp4Target).s_dec;
    st.scale[k][2 * i + 1] = a;
  }
}

// The zero state: every group quantized from zeros with amax 0, key 0, and the mean of zeros.
__global__ void __launch_bounds__(kThreads)
    init_kernel(QAdamPacked st, const QAdamPiece* __restrict__ pieces, int n_pieces, int64_t total_tiles) {
  const Slot s = slot_of(pieces, n_pieces, total_tiles);
  if (!s.live) return;
  const float zero[16] = {};
  for (int k = 0; k < 2; ++k)
    quantize_group(zero, 0.0f, 0, s.tensor_tile, st.codes[k] + s.gt * kQAdamCodeBytes + s.g * 8,
                   st.scales[k] + s.gt * kQAdamScaleBytes + s.g);
  if (s.g == 0) st.mean[s.gt] = bf16_bits_rne(0.0f);  // the mean of zeros
}

unsigned blocks_for(int64_t tiles) {
  return static_cast<unsigned>((tiles + kTilesPerBlock - 1) / kTilesPerBlock);
}

// This rank's amax and fault into its row of the all-reduce slots (the other rows are zero).
__global__ void pack_slots_kernel(const float* __restrict__ amax, const uint32_t* __restrict__ fault,
                                  int n_tensors, int rank, double* slots) {
  const int row = 2 * n_tensors + 1;
  double* mine = slots + static_cast<int64_t>(rank) * row;
  for (int j = static_cast<int>(threadIdx.x); j < 2 * n_tensors; j += static_cast<int>(blockDim.x))
    mine[j] = static_cast<double>(amax[j]);
  if (threadIdx.x == 0)
    mine[2 * n_tensors] = *fault == kQAdamNoFault ? 0.0 : static_cast<double>(*fault) + 1.0;
}

// The job's amax of each tensor (max over the rows) and its first fault (the smallest over the rows).
__global__ void unpack_slots_kernel(const double* __restrict__ slots, int n_tensors, int world, float* amax,
                                    uint32_t* fault) {
  const int row = 2 * n_tensors + 1;
  for (int j = static_cast<int>(threadIdx.x); j < 2 * n_tensors; j += static_cast<int>(blockDim.x)) {
    float a = 0.0f;
    for (int r = 0; r < world; ++r)
      a = max_f(a, static_cast<float>(slots[static_cast<int64_t>(r) * row + j]));
    amax[j] = a;
  }
  if (threadIdx.x == 0) {
    uint32_t f = kQAdamNoFault;
    for (int r = 0; r < world; ++r) {
      const double code = slots[static_cast<int64_t>(r) * row + 2 * n_tensors];
      if (code > 0.0 && static_cast<uint32_t>(code - 1.0) < f) f = static_cast<uint32_t>(code - 1.0);
    }
    *fault = f;
  }
}

}  // namespace

QAdamStepArgs q_adamw_step_args(const cpu::AdamWArgs& args, uint64_t seed, int64_t step) {
  QAdamStepArgs a;
  // As cpu::adamw_update forms them (host arithmetic, no contraction).
  a.decay_on = 1.0f - args.lr * args.weight_decay;
  a.step_size = args.lr / args.bias_correction1;
  a.bc2_sqrt = std::sqrt(args.bias_correction2);
  a.beta1 = args.beta1;
  a.beta2 = args.beta2;
  a.one_minus_beta1 = 1.0f - args.beta1;
  a.one_minus_beta2 = 1.0f - args.beta2;
  a.eps = args.eps;
  a.ratio_bound = args.ratio_bound;
  a.seed = seed;
  a.step = step;
  return a;
}

void q_adamw_init(const QAdamPacked& state, const QAdamPiece* pieces, int n_pieces, int64_t total_tiles,
                  int n_tensors, float* amax, cudaStream_t stream) {
  FP4_CHECK(n_tensors > 0 && n_pieces >= 0 && total_tiles >= 0, "q_adamw_init: ", n_tensors, " tensors, ",
            n_pieces, " pieces, ", total_tiles, " tiles");
  if (total_tiles > 0) {  // a rank whose shard is empty has no tiles, only the tensor scales
    init_kernel<<<blocks_for(total_tiles), kThreads, 0, stream>>>(state, pieces, n_pieces, total_tiles);
    FP4_CUDA_CHECK_LAUNCH("q-adamw init_kernel");
  }
  FP4_CUDA_CHECK(cudaMemsetAsync(amax, 0, 2 * static_cast<size_t>(n_tensors) * sizeof(float), stream));
  scale_kernel<<<(n_tensors + 127) / 128, 128, 0, stream>>>(state, n_tensors, amax, nullptr, nullptr);
  FP4_CUDA_CHECK_LAUNCH("q-adamw scale_kernel");
}

void q_adamw_measure(const float* grads, const QAdamPacked& state, const QAdamPiece* pieces, int n_pieces,
                     int64_t total_tiles, int n_tensors, const QAdamStepArgs& args,
                     const StepControl* control, float* amax, uint32_t* fault, cudaStream_t stream) {
  FP4_CHECK(n_tensors > 0 && n_pieces >= 0 && total_tiles >= 0, "q_adamw_measure: ", n_tensors, " tensors, ",
            n_pieces, " pieces, ", total_tiles, " tiles");
  FP4_CUDA_CHECK(cudaMemsetAsync(amax, 0, 2 * static_cast<size_t>(n_tensors) * sizeof(float), stream));
  FP4_CUDA_CHECK(cudaMemsetAsync(fault, 0xFF, sizeof(uint32_t), stream));
  if (total_tiles == 0) return;
  amax_kernel<<<blocks_for(total_tiles), kThreads, 0, stream>>>(grads, state, pieces, n_pieces, total_tiles,
                                                                args, control, amax, fault);
  FP4_CUDA_CHECK_LAUNCH("q-adamw amax_kernel");
}

void q_adamw_all_reduce_amax(float* amax, uint32_t* fault, int n_tensors, double* slots, Communicator& comm,
                             cudaStream_t stream) {
  const int world = comm.world_size();
  const int64_t count = static_cast<int64_t>(world) * (2 * n_tensors + 1);
  FP4_CUDA_CHECK(cudaMemsetAsync(slots, 0, static_cast<size_t>(count) * sizeof(double), stream));
  pack_slots_kernel<<<1, 256, 0, stream>>>(amax, fault, n_tensors, comm.rank(), slots);
  FP4_CUDA_CHECK_LAUNCH("q-adamw pack_slots_kernel");
  comm.all_reduce_sum(slots, count, CommType::kF64, stream);
  unpack_slots_kernel<<<1, 256, 0, stream>>>(slots, n_tensors, world, amax, fault);
  FP4_CUDA_CHECK_LAUNCH("q-adamw unpack_slots_kernel");
}

void q_adamw_write(float* values, const float* grads, bf16* values_bf16, const QAdamPacked& state,
                   const QAdamPiece* pieces, int n_pieces, int64_t total_tiles, int n_tensors,
                   const QAdamStepArgs& args, const StepControl* control, const float* amax,
                   const uint32_t* fault, cudaStream_t stream) {
  FP4_CHECK(n_tensors > 0 && n_pieces >= 0 && total_tiles >= 0, "q_adamw_write: ", n_tensors, " tensors, ",
            n_pieces, " pieces, ", total_tiles, " tiles");
  if (total_tiles > 0) {
    write_kernel<<<blocks_for(total_tiles), kThreads, 0, stream>>>(
        values, grads, values_bf16, state, pieces, n_pieces, total_tiles, args, control, amax, fault);
    FP4_CUDA_CHECK_LAUNCH("q-adamw write_kernel");
  }
  scale_kernel<<<(n_tensors + 127) / 128, 128, 0, stream>>>(state, n_tensors, amax, control, fault);
  FP4_CUDA_CHECK_LAUNCH("q-adamw scale_kernel");
}

}  // namespace fp4::cuda
