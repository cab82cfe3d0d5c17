// QAttentionCuda's fused form (q_attention_cuda.h): the fused attention forward on Q^'s and K^'s q * s_b
// values with the scale read on the device, and the backward through ops/cuda/attention/q_attn_cuda.h.
#include <cmath>

#include "core/error.h"
#include "nn/cuda/q_attention_cuda.h"
#include "ops/cuda/attention/attention_cuda.h"
#include "ops/cuda/attention/q_attn_cuda.h"

namespace fp4::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

// out[0] = s * (S_dec(Q^) * S_dec(K^)) * log2(e): the sliced form's softmax scale, in base 2.
__global__ void scale_log2_kernel(float softmax_scale, const float* sdec_q, const float* sdec_k, float* out) {
  out[0] = softmax_scale * (sdec_q[0] * sdec_k[0]) * kLog2e;
}

void queue_scale_log2(float softmax_scale, const float* sdec_q, const float* sdec_k, float* out,
                      cudaStream_t stream) {
  scale_log2_kernel<<<1, 1, 0, stream>>>(softmax_scale, sdec_q, sdec_k, out);
  FP4_CUDA_CHECK_LAUNCH("scale_log2_kernel");
}

float softmax_scale_of(int head_dim) {
  return 1.0f / std::sqrt(static_cast<float>(head_dim));
}

}  // namespace

void QAttentionCuda::forward_fused(const bf16* v, int ld_qkv, bf16* out, int ld_out, float* lse,
                                   QAttnWorkspace& ws, cudaStream_t stream) {
  const AttnShape& s = shape_;
  const int d = s.width();
  const size_t row_bytes = static_cast<size_t>(d) * sizeof(bf16),
               pitch = static_cast<size_t>(ld_qkv) * sizeof(bf16);
  FP4_CUDA_CHECK(cudaMemcpy2DAsync(ws.v_copy.data(), row_bytes, v, pitch, row_bytes,
                                   static_cast<size_t>(s.rows()), cudaMemcpyDeviceToDevice, stream));
  queue_scale_log2(softmax_scale_of(s.head_dim), q_.outer.data(), k_.outer.data(), ws.scale_log2.data(),
                   stream);
  attention_forward_device_scale(ws.q_bar.data(), ws.k_bar.data(), ws.v_copy.data(), d, out, ld_out, lse, s.b,
                                 s.t, s.heads, s.head_dim, ws.scale_log2.data(), stream);
}

void QAttentionCuda::backward_fused(const bf16* v, int ld_qkv, const bf16* out, const float* lse,
                                    const bf16* dout, int ld_out, bf16* dq, bf16* dk, bf16* dv, int ld_dqkv,
                                    QAttnWorkspace& ws, cudaStream_t stream) {
  const AttnShape& s = shape_;
  const int d = s.width();
  const float softmax_scale = softmax_scale_of(s.head_dim);
  // The forward's operands again (the workspace is shared by the layers): q * s_b of Q^, K^ and the scale.
  dequantize_nvfp4_cuda(q_.view(), DequantOutput{ws.q_bar.data(), QuantIoType::kBF16, false}, stream);
  dequantize_nvfp4_cuda(k_.view(), DequantOutput{ws.k_bar.data(), QuantIoType::kBF16, false}, stream);
  queue_scale_log2(softmax_scale, q_.outer.data(), k_.outer.data(), ws.scale_log2.data(), stream);
  // Q^^T and K^^T: Q^ = q_bar * S_dec exactly (q * s_b has at most 6 significant bits), re-quantized along
  // the sequence with the CPU's streams.
  q_attention_requantize_along_sequence(ws.q_bar.data(), d, q_.outer.data(), s.b, s.t, s.heads, s.head_dim,
                                        q_attn_randomness(ctx_, layer_, 0, QAttnPurpose::kSrQt).sr,
                                        ws.qt_bar.data(), ws.sdec_qt.data(), ws.slice_amax.data(), stream);
  q_attention_requantize_along_sequence(ws.k_bar.data(), d, k_.outer.data(), s.b, s.t, s.heads, s.head_dim,
                                        q_attn_randomness(ctx_, layer_, 0, QAttnPurpose::kSrKt).sr,
                                        ws.kt_bar.data(), ws.sdec_kt.data(), ws.slice_amax.data(), stream);
  QAttnBackwardArgs a;
  a.B = s.b;
  a.T = s.t;
  a.H = s.heads;
  a.D = s.head_dim;
  a.scale = softmax_scale;
  a.q_bar = ws.q_bar.data();
  a.k_bar = ws.k_bar.data();
  a.qt_bar = ws.qt_bar.data();
  a.kt_bar = ws.kt_bar.data();
  a.ld_qk = d;
  a.sdec_qt = ws.sdec_qt.data();
  a.sdec_kt = ws.sdec_kt.data();
  a.scale_log2 = ws.scale_log2.data();
  a.v = v;
  a.ld_v = ld_qkv;
  a.out = out;
  a.dout = dout;
  a.ld_out = ld_out;
  a.lse = lse;
  a.dq = dq;
  a.dk = dk;
  a.dv = dv;
  a.ld_dqkv = ld_dqkv;
  a.ds_rows = q_attn_randomness(ctx_, layer_, 0, QAttnPurpose::kSrDsRows).sr;
  a.ds_cols = q_attn_randomness(ctx_, layer_, 0, QAttnPurpose::kSrDsCols).sr;
  a.workspace = ws.backward.data();
  a.debug_ds = debug_.ds;
  a.debug_ds_rows = debug_.ds_rows;
  a.debug_ds_cols = debug_.ds_cols;
  q_attention_backward(a, stream);
}

}  // namespace fp4::cuda
