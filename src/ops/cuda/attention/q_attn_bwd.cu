// Q-Attn's fused backward (q_attn_cuda.h): argument checks, workspace, the launches of Delta, the amax pass,
// the main pass and the dQ conversion, and the re-quantization of Q^ and K^ along the sequence.
#include <algorithm>
#include <utility>

#include "core/error.h"
#include "ops/cuda/attention/attention_args.cuh"
#include "ops/cuda/attention/q_attn_bwd.cuh"
#include "ops/cuda/attention/q_attn_cuda.h"

namespace fp4::cuda {
namespace {

using attn::bf16;

int round_up16(int x) {
  return (x + 15) / 16 * 16;
}

size_t align16(size_t bytes) {
  return (bytes + 15) / 16 * 16;
}

// Workspace: the FP32 dQ accumulator [B][H][T][D], Delta [B][H][T], dS amax [B*H].
struct Workspace {
  float* dq_accum;
  float* delta;
  unsigned* ds_amax;
};

size_t dq_accum_bytes(int B, int T, int H, int D) {
  return align16(static_cast<size_t>(B) * H * T * D * sizeof(float));
}
size_t delta_bytes(int B, int T, int H) {
  return align16(static_cast<size_t>(B) * H * T * sizeof(float));
}

Workspace carve(void* base, int B, int T, int H, int D) {
  char* p = static_cast<char*>(base);
  Workspace w{};
  w.dq_accum = reinterpret_cast<float*>(p);
  w.delta = reinterpret_cast<float*>(p + dq_accum_bytes(B, T, H, D));
  w.ds_amax = reinterpret_cast<unsigned*>(p + dq_accum_bytes(B, T, H, D) + delta_bytes(B, T, H));
  return w;
}

template <int kD, int kWarps, int kBlockM, int kMinBlocks>
void launch(const QAttnBackwardArgs& a, const Workspace& w, cudaStream_t stream) {
  using Tile = attn::QAttnBwdTile<kD, kWarps, kBlockM>;
  const int64_t rows = static_cast<int64_t>(a.B) * a.T * a.H;
  constexpr int kBlock = 256;
  FP4_CUDA_CHECK(cudaMemsetAsync(w.dq_accum, 0, dq_accum_bytes(a.B, a.T, a.H, kD), stream));
  FP4_CUDA_CHECK(cudaMemsetAsync(w.ds_amax, 0, static_cast<size_t>(a.B) * a.H * sizeof(unsigned), stream));
  const int64_t row_threads = rows * (kD / 8);
  const auto row_blocks = static_cast<unsigned>((row_threads + kBlock - 1) / kBlock);
  attn::attention_bwd_delta_kernel<kD>
      <<<row_blocks, kBlock, 0, stream>>>(a.out, a.dout, a.ld_out, w.delta, a.B, a.T, a.H);
  FP4_CUDA_CHECK_LAUNCH("attention_bwd_delta_kernel (q_attn)");

  const attn::BwdParams p{a.q_bar, a.k_bar, nullptr,    a.ld_qk, a.dout, a.ld_out,
                          a.lse,   w.delta, w.dq_accum, a.dk,    a.dv,   a.ld_dqkv,
                          a.B,     a.T,     a.H,        a.scale, 0.f};
  const attn::QAttnBwdExtra x{
      a.qt_bar,     a.kt_bar,  a.v,       a.ld_v,          a.sdec_qt,  a.sdec_kt,       w.ds_amax,
      a.scale_log2, a.ds_rows, a.ds_cols, round_up16(a.T), a.debug_ds, a.debug_ds_rows, a.debug_ds_cols};
  const dim3 grid(static_cast<unsigned>(a.B * a.H),
                  static_cast<unsigned>((a.T + Tile::kBlockN - 1) / Tile::kBlockN));
  const auto amax_kernel = attn::q_attn_bwd_kernel<kD, kWarps, kBlockM, kMinBlocks, true>;
  const auto main_kernel = attn::q_attn_bwd_kernel<kD, kWarps, kBlockM, kMinBlocks, false>;
  FP4_CUDA_CHECK(
      cudaFuncSetAttribute(amax_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
  FP4_CUDA_CHECK(
      cudaFuncSetAttribute(main_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
  amax_kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p, x);
  FP4_CUDA_CHECK_LAUNCH("q_attn_bwd_kernel (amax pass)");
  main_kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p, x);
  FP4_CUDA_CHECK_LAUNCH("q_attn_bwd_kernel");
  attn::q_attn_dq_kernel<kD><<<row_blocks, kBlock, 0, stream>>>(w.dq_accum, w.ds_amax, a.sdec_kt, a.dq,
                                                                a.ld_dqkv, a.B, a.T, a.H, a.scale);
  FP4_CUDA_CHECK_LAUNCH("q_attn_dq_kernel");
}

constexpr int kAmaxThreads = 256;

// amax[slice] = max over the slice's finite |bar * S_dec| (one CTA per slice, a fixed-order tree).
__global__ void slice_amax_kernel(const bf16* bar, int64_t ld, const float* sdec, int T, int H, int D,
                                  float* amax) {
  __shared__ float sh[kAmaxThreads];
  const int bh = static_cast<int>(blockIdx.x), b = bh / H, h = bh % H;
  const float s = sdec[0];
  float m = 0.f;
  for (int64_t i = threadIdx.x; i < static_cast<int64_t>(T) * D; i += blockDim.x) {
    const int64_t tok = i / D;
    const int c = static_cast<int>(i % D);
    const float x = __bfloat162float(bar[(static_cast<int64_t>(b) * T + tok) * ld + h * D + c]) * s;
    if (is_finite_f(x)) m = max_f(m, abs_f(x));
  }
  sh[threadIdx.x] = m;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half)
      sh[threadIdx.x] = max_f(sh[threadIdx.x], sh[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0) amax[bh] = sh[0];
}

// One thread per (slice, column c, 16-token block): the block of X^'s column c quantized with SR along the
// sequence (the CPU's [D x tp] operand: element c * tp + token), q * s_b written back at X's positions.
__global__ void requantize_along_sequence_kernel(const bf16* bar, int64_t ld, const float* sdec, int B, int T,
                                                 int H, int D, RngStream slice0, const float* amax,
                                                 bf16* out_bar, float* out_sdec) {
  const int n_blocks = (T + 15) / 16, tp = n_blocks * 16;
  const int64_t total = static_cast<int64_t>(B) * H * n_blocks * D;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (gid >= total) return;
  const int c = static_cast<int>(gid % D);  // fastest: neighbouring threads read neighbouring columns
  const int64_t rest = gid / D;
  const int blk = static_cast<int>(rest % n_blocks);
  const int bh = static_cast<int>(rest / n_blocks), b = bh / H, h = bh % H;
  const TensorScale ts = nvfp4_tensor_scale(amax[bh], false, kNvfp4HeadroomTarget);
  if (c == 0 && blk == 0) out_sdec[bh] = ts.s_dec;
  const float s = sdec[0];
  const int64_t base = (static_cast<int64_t>(b) * T) * ld + h * D + c;
  float v[16];
  bool bad = false;
#pragma unroll
  for (int r = 0; r < 16; ++r) {
    const int tok = blk * 16 + r;
    v[r] = tok < T ? __bfloat162float(bar[base + tok * ld]) * s : 0.f;
  }
  const float amax16 = amax_finite16(v, bad);
  const uint8_t code = bad ? kE4m3Nan : nvfp4_scale_tensor(amax16, ts, kNvfp4HeadroomTarget);
  const float e_b = nvfp4_encode_multiplier(code, ts.s_dec), s_b = e4m3_decode(code);
  const RngStream stream{slice0.seed, slice0.stream + (static_cast<uint64_t>(bh) << 32)};
  const uint64_t idx0 = static_cast<uint64_t>(c) * tp + blk * 16;  // a multiple of 16: two Philox blocks
  const Philox4 r0 = philox_block(stream, idx0 >> 3), r1 = philox_block(stream, (idx0 >> 3) + 1);
#pragma unroll
  for (int r = 0; r < 16; ++r) {
    const int tok = blk * 16 + r;
    const uint32_t word = sr16_word(r < 8 ? r0 : r1, r & 7);
    const float q = e2m1_decode(nvfp4_encode_tensor(v[r], e_b, true, word)) * s_b;
    if (tok < T) out_bar[base + tok * ld] = __float2bfloat16(q);
  }
}

void check_args(const QAttnBackwardArgs& a) {
  constexpr const char* kWhat = "q_attention_backward";
  attn::check_shape(kWhat, a.B, a.T, a.H, a.D, a.scale);
  FP4_CHECK(static_cast<int64_t>(a.B) * a.H <= 65536, kWhat, ": B*H=", static_cast<int64_t>(a.B) * a.H,
            " exceeds the 65536 (batch, head) random streams of a layer");
  const int64_t tp = round_up16(a.T);
  FP4_CHECK(a.T * tp / 8 < (int64_t{1} << 32), kWhat, ": T=", a.T,
            " exceeds the random streams' block index");
  struct Matrix {
    const void* ptr;
    int ld;
    const char* name;
  };
  const Matrix matrices[] = {
      {a.q_bar, a.ld_qk, "q_bar"},   {a.k_bar, a.ld_qk, "k_bar"}, {a.qt_bar, a.ld_qk, "qt_bar"},
      {a.kt_bar, a.ld_qk, "kt_bar"}, {a.v, a.ld_v, "v"},          {a.out, a.ld_out, "out"},
      {a.dout, a.ld_out, "dout"},    {a.dq, a.ld_dqkv, "dq"},     {a.dk, a.ld_dqkv, "dk"},
      {a.dv, a.ld_dqkv, "dv"}};
  for (const Matrix& m : matrices) attn::check_matrix(kWhat, m.name, m.ptr, m.ld, a.H, a.D);
  for (const auto& [ptr, name] : {std::pair{static_cast<const void*>(a.lse), "lse"},
                                  std::pair{static_cast<const void*>(a.workspace), "workspace"}})
    attn::check_pointer(kWhat, name, ptr);
  for (const auto& [ptr, name] : {std::pair{a.sdec_qt, "sdec_qt"}, std::pair{a.sdec_kt, "sdec_kt"},
                                  std::pair{a.scale_log2, "scale_log2"}})
    FP4_CHECK(ptr != nullptr, kWhat, ": ", name, " is a null pointer");
}

}  // namespace

size_t q_attention_backward_workspace_bytes(int B, int T, int H, int D) {
  attn::check_shape("q_attention_backward_workspace_bytes", B, T, H, D, 1.f);
  return dq_accum_bytes(B, T, H, D) + delta_bytes(B, T, H) +
         align16(static_cast<size_t>(B) * H * sizeof(unsigned));
}

void q_attention_backward(const QAttnBackwardArgs& a, cudaStream_t stream) {
  check_args(a);
  const Workspace w = carve(a.workspace, a.B, a.T, a.H, a.D);
  // D = 64: 8 warps of 16 keys, 64-query steps (as the plain mma.sync default); D = 128: 4 warps, 32-query
  // steps (dK and dV take 128 FP32 registers a thread). One CTA per SM: the quantization needs registers.
  if (a.D == 64)
    launch<64, 8, 64, 1>(a, w, stream);
  else
    launch<128, 4, 32, 1>(a, w, stream);
}

void q_attention_requantize_along_sequence(const bf16* bar, int ld, const float* sdec, int B, int T, int H,
                                           int D, RngStream slice0, bf16* out_bar, float* out_sdec,
                                           float* amax, cudaStream_t stream) {
  constexpr const char* kWhat = "q_attention_requantize_along_sequence";
  FP4_CHECK(B >= 1 && T >= 1 && H >= 1 && D >= 16 && D % 16 == 0, kWhat, ": B=", B, ", T=", T, ", H=", H,
            ", D=", D, " (positive, D a multiple of 16)");
  FP4_CHECK(ld >= static_cast<int64_t>(H) * D, kWhat, ": row stride ", ld, " below H*D = ", H * D);
  FP4_CHECK(bar && sdec && out_bar && out_sdec && amax, kWhat, ": a null pointer");
  slice_amax_kernel<<<static_cast<unsigned>(B * H), kAmaxThreads, 0, stream>>>(bar, ld, sdec, T, H, D, amax);
  FP4_CUDA_CHECK_LAUNCH("slice_amax_kernel");
  const int64_t total = static_cast<int64_t>(B) * H * ((T + 15) / 16) * D;
  constexpr int kBlock = 256;
  requantize_along_sequence_kernel<<<static_cast<unsigned>((total + kBlock - 1) / kBlock), kBlock, 0,
                                     stream>>>(bar, ld, sdec, B, T, H, D, slice0, amax, out_bar, out_sdec);
  FP4_CUDA_CHECK_LAUNCH("requantize_along_sequence_kernel");
}

}  // namespace fp4::cuda
