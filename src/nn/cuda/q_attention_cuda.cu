#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "nn/cuda/q_attention_cuda.h"
#include "ops/cuda/attention/q_attn_cuda.h"

namespace fp4::cuda {
namespace {

constexpr int kRowThreads = 256;  // one block per score row; a power of two for the tree reductions

int round_up16(int x) {
  return (x + 15) / 16 * 16;
}

// Block-wide reductions in a fixed order (strided per-thread partials, then a shared-memory tree), so a
// recomputation gives the same bits.
template <typename T>
__device__ T block_max(T v, T* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) sh[threadIdx.x] = fmax(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  const T r = sh[0];
  __syncthreads();
  return r;
}

template <typename T>
__device__ T block_sum(T v, T* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) sh[threadIdx.x] = sh[threadIdx.x] + sh[threadIdx.x + s];
    __syncthreads();
  }
  const T r = sh[0];
  __syncthreads();
  return r;
}

// Row i of P = causal softmax(scale S) with scale = softmax_scale * S_decQ * S_decK; columns i+1 .. tp-1
// get 0. probs (FP32) may be null; probs_bf16 is always written.
__global__ void causal_softmax_kernel(const float* scores, int tp, float softmax_scale, const float* sdec_q,
                                      const float* sdec_k, float* probs, bf16* probs_bf16) {
  __shared__ float sh[kRowThreads];
  const int i = static_cast<int>(blockIdx.x);
  const float scale = softmax_scale * (sdec_q[0] * sdec_k[0]);
  const float* row = scores + static_cast<int64_t>(i) * tp;
  float m = -INFINITY;
  for (int j = static_cast<int>(threadIdx.x); j <= i; j += blockDim.x) m = fmaxf(m, scale * row[j]);
  m = block_max(m, sh);
  float l = 0.0f;
  for (int j = static_cast<int>(threadIdx.x); j <= i; j += blockDim.x) l += expf(scale * row[j] - m);
  l = block_sum(l, sh);
  for (int j = static_cast<int>(threadIdx.x); j < tp; j += blockDim.x) {
    const float p = j <= i ? expf(scale * row[j] - m) / l : 0.0f;
    const int64_t at = static_cast<int64_t>(i) * tp + j;
    if (probs != nullptr) probs[at] = p;
    probs_bf16[at] = __float2bfloat16(p);
  }
}

// Row i of dS = P * (dP - rowsum(P * dP)) on the causal triangle (the row sum in double, as the CPU
// reference), zero elsewhere up to column tp.
__global__ void softmax_grad_kernel(const float* probs, const float* dp, int tp, float* ds) {
  __shared__ double sh[kRowThreads];
  const int i = static_cast<int>(blockIdx.x);
  const float* p = probs + static_cast<int64_t>(i) * tp;
  const float* g = dp + static_cast<int64_t>(i) * tp;
  double dot = 0;
  for (int j = static_cast<int>(threadIdx.x); j <= i; j += blockDim.x)
    dot += static_cast<double>(p[j]) * static_cast<double>(g[j]);
  const float fdot = static_cast<float>(block_sum(dot, sh));
  for (int j = static_cast<int>(threadIdx.x); j < tp; j += blockDim.x)
    ds[static_cast<int64_t>(i) * tp + j] = j <= i ? __fmul_rn(p[j], __fsub_rn(g[j], fdot)) : 0.0f;
}

// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols, through a 32x32 shared tile.
__global__ void transpose_kernel(const float* src, int64_t lds, int rows, int cols, float* dst, int64_t ldd) {
  __shared__ float tile[32][33];
  const int c0 = static_cast<int>(blockIdx.x) * 32, r0 = static_cast<int>(blockIdx.y) * 32;
  for (int k = static_cast<int>(threadIdx.y); k < 32; k += blockDim.y) {
    const int r = r0 + k, c = c0 + static_cast<int>(threadIdx.x);
    if (r < rows && c < cols) tile[k][threadIdx.x] = src[r * lds + c];
  }
  __syncthreads();
  for (int k = static_cast<int>(threadIdx.y); k < 32; k += blockDim.y) {
    const int c = c0 + k, r = r0 + static_cast<int>(threadIdx.x);
    if (r < rows && c < cols) dst[c * ldd + r] = tile[threadIdx.x][k];
  }
}

// out[r * ld_out + c] = bf16(acc[r * cols + c] * scale * S_dec_a * S_dec_b): the two NVFP4 operands' tensor
// scales applied to the FP32 product of their q * s_b values.
__global__ void scale_to_bf16_kernel(const float* acc, int rows, int cols, float scale, const float* sdec_a,
                                     const float* sdec_b, bf16* out, int ld_out) {
  const float f = scale * (sdec_a[0] * sdec_b[0]);
  const int64_t count = static_cast<int64_t>(rows) * cols;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / cols, c = idx % cols;
    out[r * ld_out + c] = __float2bfloat16(acc[idx] * f);
  }
}

void transpose(const float* src, int64_t lds, int rows, int cols, float* dst, int64_t ldd,
               cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>((rows + 31) / 32));
  transpose_kernel<<<grid, dim3(32, 8), 0, stream>>>(src, lds, rows, cols, dst, ldd);
  FP4_CUDA_CHECK_LAUNCH("transpose_kernel");
}

void scale_to_bf16(const float* acc, int rows, int cols, float scale, const float* sdec_a,
                   const float* sdec_b, bf16* out, int ld_out, cudaStream_t stream) {
  const int64_t count = static_cast<int64_t>(rows) * cols;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((count + 255) / 256, 4096));
  scale_to_bf16_kernel<<<grid, 256, 0, stream>>>(acc, rows, cols, scale, sdec_a, sdec_b, out, ld_out);
  FP4_CUDA_CHECK_LAUNCH("scale_to_bf16_kernel");
}

// amax and quantization of op.input (or `in`) into op, with its q * s_b values into op.bar.
void quantize_operand(QAttnOperand& op, const DeviceInput& in, const QuantSpec& spec,
                      const QuantRandomness& rnd, cudaStream_t stream) {
  amax_nvfp4_cuda(in, spec, rnd, op.amax.data(), stream);
  quantize_nvfp4_cuda(in, spec, rnd, op.view(), op.amax.data(), nullptr,
                      DequantOutput{op.bar.data(), QuantIoType::kBF16, false}, stream);
}

void check_layout(const AttnShape& s, int ld_qkv, int ld_out, const char* what) {
  FP4_CHECK(s.b > 0 && s.t > 0 && s.heads > 0 && s.head_dim > 0, "q_attn CUDA ", what, ": shape (b ", s.b,
            ", t ", s.t, ", heads ", s.heads, ", head_dim ", s.head_dim, ") must be positive");
  FP4_CHECK(s.head_dim % 16 == 0, "q_attn CUDA ", what, ": head_dim ", s.head_dim,
            " must be a multiple of 16 (NVFP4 1x16 blocks must not straddle heads)");
  FP4_CHECK(static_cast<int64_t>(s.b) * s.heads <= 65536, "q_attn CUDA ", what, ": batch ", s.b, " x heads ",
            s.heads, " exceeds the 65536 (batch, head) random streams of a layer");
  FP4_CHECK(ld_qkv % 8 == 0 && ld_qkv >= s.width() && ld_out % 8 == 0 && ld_out >= s.width(), "q_attn CUDA ",
            what, ": row strides (", ld_qkv, ", ", ld_out,
            ") must be multiples of 8 and at least heads*head_dim (", s.width(), ")");
}

void check_aligned16(const void* p, const char* name) {
  FP4_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0, "q_attn CUDA: ", name, " must be 16-byte aligned");
}

}  // namespace

void QAttnOperand::ensure(int64_t r, int64_t c, bool with_input, bool with_bar) {
  if (r == rows && c == cols && (input.size() > 0) == with_input && (bar.size() > 0) == with_bar) return;
  rows = r;
  cols = c;
  const auto count = static_cast<size_t>(r * c);
  input = with_input ? DeviceBuffer<float>(count) : DeviceBuffer<float>();
  codes = DeviceBuffer<uint8_t>(count / 2);
  scales = DeviceBuffer<uint8_t>(count / 16);
  outer = DeviceBuffer<float>(1);
  amax = DeviceBuffer<float>(1);
  bar = with_bar ? DeviceBuffer<bf16>(count) : DeviceBuffer<bf16>();
}

Nvfp4DeviceView QAttnOperand::view() {
  return Nvfp4DeviceView{codes.data(), scales.data(),     outer.data(),       rows,
                         cols,         BlockShape::k1x16, OuterScale::kTensor};
}

size_t QAttnOperand::bytes() const {
  return input.bytes() + codes.bytes() + scales.bytes() + outer.bytes() + amax.bytes() + bar.bytes();
}

void QAttnWorkspace::ensure(const AttnShape& s, bool use_fused) {
  if (s.rows() == n && s.width() == d && s.t == t && s.head_dim == head_dim && s.b * s.heads == slices &&
      use_fused == fused)
    return;
  *this = QAttnWorkspace{};  // frees the other form's buffers first
  n = s.rows();
  d = s.width();
  t = s.t;
  tp = round_up16(s.t);
  head_dim = s.head_dim;
  slices = s.b * s.heads;
  fused = use_fused;
  const auto nd = static_cast<size_t>(n * d), tt = static_cast<size_t>(t) * static_cast<size_t>(tp);
  q_in = DeviceBuffer<bf16>(nd);
  k_in = DeviceBuffer<bf16>(nd);
  q_bar = DeviceBuffer<bf16>(nd);
  k_bar = DeviceBuffer<bf16>(nd);
  if (fused) {
    v_copy = DeviceBuffer<bf16>(nd);
    qt_bar = DeviceBuffer<bf16>(nd);
    kt_bar = DeviceBuffer<bf16>(nd);
    sdec_qt = DeviceBuffer<float>(static_cast<size_t>(slices));
    sdec_kt = DeviceBuffer<float>(static_cast<size_t>(slices));
    slice_amax = DeviceBuffer<float>(static_cast<size_t>(slices));
    scale_log2 = DeviceBuffer<float>(1);
    backward = DeviceBuffer<uint8_t>(q_attention_backward_workspace_bytes(s.b, s.t, s.heads, s.head_dim));
    return;
  }
  q_hat = DeviceBuffer<float>(nd);
  k_hat = DeviceBuffer<float>(nd);
  scores = DeviceBuffer<float>(tt);
  probs = DeviceBuffer<float>(tt);
  dp = DeviceBuffer<float>(tt);
  probs_bf16 = DeviceBuffer<bf16>(tt);
  acc = DeviceBuffer<float>(static_cast<size_t>(t) * static_cast<size_t>(head_dim));
  ds.ensure(t, tp, true, true);
  dst.ensure(t, tp, true, true);
  kt.ensure(head_dim, tp, true, true);
  qt.ensure(head_dim, tp, true, true);
}

size_t QAttnWorkspace::bytes() const {
  return q_in.bytes() + k_in.bytes() + q_bar.bytes() + k_bar.bytes() + v_copy.bytes() + qt_bar.bytes() +
         kt_bar.bytes() + sdec_qt.bytes() + sdec_kt.bytes() + slice_amax.bytes() + scale_log2.bytes() +
         backward.bytes() + q_hat.bytes() + k_hat.bytes() + scores.bytes() + probs.bytes() + dp.bytes() +
         probs_bf16.bytes() + acc.bytes() + ds.bytes() + dst.bytes() + kt.bytes() + qt.bytes();
}

QAttentionCuda::QAttentionCuda(int layer, QAttnKernel kernel) : layer_(layer), kernel_(kernel) {
  FP4_CHECK(layer >= 0 && layer < 256, "q_attn CUDA: block index ", layer,
            " does not fit the random-stream id");
}

bool QAttentionCuda::fused_for(int head_dim) const {
  const bool supported = head_dim == 64 || head_dim == 128;
  FP4_CHECK(kernel_ != QAttnKernel::kFused || supported,
            "q_attn CUDA: the fused form takes head_dim 64 or 128, ", "not ", head_dim,
            " (use the sliced form)");
  return kernel_ == QAttnKernel::kFused || (kernel_ == QAttnKernel::kAuto && supported);
}

size_t QAttentionCuda::kept_bytes() const {
  return q_.bytes() + k_.bytes();
}

void QAttentionCuda::slice_probs(QAttnWorkspace& ws, int64_t offset, float* probs, GemmRunner& gemm,
                                 cudaStream_t stream) {
  const int t = ws.t, hd = ws.head_dim;
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  gemm.gemm(false, true, t, t, hd, 1.0f, ws.q_bar.data() + offset, ws.d, ws.k_bar.data() + offset, ws.d, 0.0f,
            ws.scores.data(), ws.tp, stream);
  causal_softmax_kernel<<<static_cast<unsigned>(t), kRowThreads, 0, stream>>>(
      ws.scores.data(), ws.tp, softmax_scale, q_.outer.data(), k_.outer.data(), probs, ws.probs_bf16.data());
  FP4_CUDA_CHECK_LAUNCH("causal_softmax_kernel");
}

void QAttentionCuda::forward(const bf16* q, const bf16* k, const bf16* v, int ld_qkv, bf16* out, int ld_out,
                             float* lse, const AttnShape& shape, const QuantContext& ctx, QAttnWorkspace& ws,
                             GemmRunner& gemm, cudaStream_t stream) {
  check_layout(shape, ld_qkv, ld_out, "forward");
  for (const auto& [p, name] :
       {std::pair<const void*, const char*>{q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}})
    check_aligned16(p, name);
  const bool fused = fused_for(shape.head_dim);
  FP4_CHECK(!fused || lse != nullptr, "q_attn CUDA forward: the fused form needs the lse buffer");
  ws.ensure(shape, fused);
  quantize_inputs(q, k, ld_qkv, shape, ws, stream);
  shape_ = shape;
  ctx_ = ctx;
  fused_ = fused;
  if (fused)
    forward_fused(v, ld_qkv, out, ld_out, lse, ws, stream);
  else
    forward_sliced(v, ld_qkv, out, ld_out, ws, gemm, stream);
  have_forward_ = true;
}

void QAttentionCuda::quantize_inputs(const bf16* q, const bf16* k, int ld_qkv, const AttnShape& shape,
                                     QAttnWorkspace& ws, cudaStream_t stream) {
  const int64_t n = shape.rows();
  const int d = shape.width();
  q_.ensure(n, d, false, false);
  k_.ensure(n, d, false, false);
  const size_t row_bytes = static_cast<size_t>(d) * sizeof(bf16),
               pitch = static_cast<size_t>(ld_qkv) * sizeof(bf16);
  FP4_CUDA_CHECK(cudaMemcpy2DAsync(ws.q_in.data(), row_bytes, q, pitch, row_bytes, static_cast<size_t>(n),
                                   cudaMemcpyDeviceToDevice, stream));
  FP4_CUDA_CHECK(cudaMemcpy2DAsync(ws.k_in.data(), row_bytes, k, pitch, row_bytes, static_cast<size_t>(n),
                                   cudaMemcpyDeviceToDevice, stream));
  const QuantSpec rtn = q_attn_spec(Rounding::kRtn);
  const DeviceInput qin{ws.q_in.data(), QuantIoType::kBF16, n, d},
      kin{ws.k_in.data(), QuantIoType::kBF16, n, d};
  amax_nvfp4_cuda(qin, rtn, QuantRandomness{}, q_.amax.data(), stream);
  quantize_nvfp4_cuda(qin, rtn, QuantRandomness{}, q_.view(), q_.amax.data(), nullptr,
                      DequantOutput{ws.q_bar.data(), QuantIoType::kBF16, false}, stream);
  amax_nvfp4_cuda(kin, rtn, QuantRandomness{}, k_.amax.data(), stream);
  quantize_nvfp4_cuda(kin, rtn, QuantRandomness{}, k_.view(), k_.amax.data(), nullptr,
                      DequantOutput{ws.k_bar.data(), QuantIoType::kBF16, false}, stream);
}

void QAttentionCuda::forward_sliced(const bf16* v, int ld_qkv, bf16* out, int ld_out, QAttnWorkspace& ws,
                                    GemmRunner& gemm, cudaStream_t stream) {
  const AttnShape& shape = shape_;
  const int d = shape.width(), t = shape.t, hd = shape.head_dim;
  for (int bi = 0; bi < shape.b; ++bi)
    for (int h = 0; h < shape.heads; ++h) {
      const int64_t row0 = static_cast<int64_t>(bi) * t, col = static_cast<int64_t>(h) * hd;
      slice_probs(ws, row0 * d + col, nullptr, gemm, stream);
      gemm.gemm(false, false, t, hd, t, 1.0f, ws.probs_bf16.data(), ws.tp, v + row0 * ld_qkv + col, ld_qkv,
                0.0f, out + row0 * ld_out + col, ld_out, stream);
    }
}

void QAttentionCuda::backward(const bf16* v, int ld_qkv, const bf16* out, const float* lse, const bf16* dout,
                              int ld_out, bf16* dq, bf16* dk, bf16* dv, int ld_dqkv, const AttnShape& shape,
                              QAttnWorkspace& ws, GemmRunner& gemm, cudaStream_t stream) {
  FP4_CHECK(have_forward_ && shape.b == shape_.b && shape.t == shape_.t && shape.heads == shape_.heads &&
                shape.head_dim == shape_.head_dim,
            "q_attn CUDA: backward without a matching forward");
  check_layout(shape, ld_qkv, ld_out, "backward");
  FP4_CHECK(ld_dqkv % 8 == 0 && ld_dqkv >= shape.width(), "q_attn CUDA backward: gradient row stride ",
            ld_dqkv, " must be a multiple of 8 and at least heads*head_dim (", shape.width(), ")");
  for (const auto& [p, name] :
       {std::pair<const void*, const char*>{v, "v"}, {dout, "dout"}, {dq, "dq"}, {dk, "dk"}, {dv, "dv"}})
    check_aligned16(p, name);
  ws.ensure(shape, fused_);
  if (fused_) {
    FP4_CHECK(out != nullptr && lse != nullptr,
              "q_attn CUDA backward: the fused form needs the forward's out and lse");
    backward_fused(v, ld_qkv, out, lse, dout, ld_out, dq, dk, dv, ld_dqkv, ws, stream);
  } else {
    backward_sliced(v, ld_qkv, dout, ld_out, dq, dk, dv, ld_dqkv, ws, gemm, stream);
  }
}

void QAttentionCuda::backward_sliced(const bf16* v, int ld_qkv, const bf16* dout, int ld_out, bf16* dq,
                                     bf16* dk, bf16* dv, int ld_dqkv, QAttnWorkspace& ws, GemmRunner& gemm,
                                     cudaStream_t stream) {
  const AttnShape& shape = shape_;
  const int d = shape.width(), t = shape.t, hd = shape.head_dim, tp = ws.tp;
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // The forward's views, exactly: q * s_b for the S GEMM, Q^ and K^ with S_dec (the CPU's q_hat, k_hat) for
  // the re-quantization along keys / queries.
  dequantize_nvfp4_cuda(q_.view(), DequantOutput{ws.q_bar.data(), QuantIoType::kBF16, false}, stream);
  dequantize_nvfp4_cuda(k_.view(), DequantOutput{ws.k_bar.data(), QuantIoType::kBF16, false}, stream);
  dequantize_nvfp4_cuda(q_.view(), DequantOutput{ws.q_hat.data(), QuantIoType::kF32, true}, stream);
  dequantize_nvfp4_cuda(k_.view(), DequantOutput{ws.k_hat.data(), QuantIoType::kF32, true}, stream);
  const QuantSpec sr = q_attn_spec(Rounding::kSr);
  const size_t tt_bytes = static_cast<size_t>(t) * tp * sizeof(float);
  const size_t ht_bytes = static_cast<size_t>(hd) * tp * sizeof(float);
  auto input_of = [](QAttnOperand& op) {
    return DeviceInput{op.input.data(), QuantIoType::kF32, op.rows, op.cols};
  };
  for (int bi = 0; bi < shape.b; ++bi)
    for (int h = 0; h < shape.heads; ++h) {
      const int slice = bi * shape.heads + h;
      const int64_t row0 = static_cast<int64_t>(bi) * t, col = static_cast<int64_t>(h) * hd;
      const int64_t offset = row0 * d + col;
      const bf16* vh = v + row0 * ld_qkv + col;
      const bf16* doh = dout + row0 * ld_out + col;
      slice_probs(ws, offset, ws.probs.data(), gemm, stream);
      gemm.gemm(false, true, t, t, hd, 1.0f, doh, ld_out, vh, ld_qkv, 0.0f, ws.dp.data(), tp, stream);
      softmax_grad_kernel<<<static_cast<unsigned>(t), kRowThreads, 0, stream>>>(ws.probs.data(), ws.dp.data(),
                                                                                tp, ws.ds.input.data());
      FP4_CUDA_CHECK_LAUNCH("softmax_grad_kernel");
      gemm.gemm(true, false, t, hd, t, 1.0f, ws.probs_bf16.data(), tp, doh, ld_out, 0.0f,
                dv + row0 * ld_dqkv + col, ld_dqkv, stream);

      // The four operands of the NVFP4 products, laid out as the CPU reference's (reduction dims padded
      // with zeros to tp): dS [t x tp], dS^T [t x tp], K^^T and Q^^T [hd x tp].
      FP4_CUDA_CHECK(cudaMemsetAsync(ws.dst.input.data(), 0, tt_bytes, stream));
      transpose(ws.ds.input.data(), tp, t, t, ws.dst.input.data(), tp, stream);
      FP4_CUDA_CHECK(cudaMemsetAsync(ws.kt.input.data(), 0, ht_bytes, stream));
      transpose(ws.k_hat.data() + offset, d, t, hd, ws.kt.input.data(), tp, stream);
      FP4_CUDA_CHECK(cudaMemsetAsync(ws.qt.input.data(), 0, ht_bytes, stream));
      transpose(ws.q_hat.data() + offset, d, t, hd, ws.qt.input.data(), tp, stream);
      quantize_operand(ws.ds, input_of(ws.ds), sr,
                       q_attn_randomness(ctx_, layer_, slice, QAttnPurpose::kSrDsRows), stream);
      quantize_operand(ws.kt, input_of(ws.kt), sr,
                       q_attn_randomness(ctx_, layer_, slice, QAttnPurpose::kSrKt), stream);
      quantize_operand(ws.dst, input_of(ws.dst), sr,
                       q_attn_randomness(ctx_, layer_, slice, QAttnPurpose::kSrDsCols), stream);
      quantize_operand(ws.qt, input_of(ws.qt), sr,
                       q_attn_randomness(ctx_, layer_, slice, QAttnPurpose::kSrQt), stream);

      // dQ = s dS~ K~ (reduction over keys), dK = s dS~^T Q~ (over queries), the S_dec in the epilogue.
      gemm.gemm(false, true, t, hd, tp, 1.0f, ws.ds.bar.data(), tp, ws.kt.bar.data(), tp, 0.0f, ws.acc.data(),
                hd, stream);
      scale_to_bf16(ws.acc.data(), t, hd, softmax_scale, ws.ds.outer.data(), ws.kt.outer.data(),
                    dq + row0 * ld_dqkv + col, ld_dqkv, stream);
      gemm.gemm(false, true, t, hd, tp, 1.0f, ws.dst.bar.data(), tp, ws.qt.bar.data(), tp, 0.0f,
                ws.acc.data(), hd, stream);
      scale_to_bf16(ws.acc.data(), t, hd, softmax_scale, ws.dst.outer.data(), ws.qt.outer.data(),
                    dk + row0 * ld_dqkv + col, ld_dqkv, stream);
    }
}

}  // namespace fp4::cuda
