// Q-Attn (RECIPES.md section 8.4) on the GPU: the CUDA counterpart of QAttentionCpu (nn/q_attention.h), with
// the same quantizers, scales and random streams, so the quantized operands are bit-identical to the CPU
// reference's for the same FP32 inputs. Algorithm and numerics: docs/Q_ATTN.md. Two forms:
//
// Fused (the default for head_dim 64 and 128): no T x T matrix in memory. The forward is the fused BF16
// attention on Q^'s and K^'s q * s_b values (exact in BF16) with the softmax scale times both S_dec read on
// the device; it saves the LSE. The backward re-quantizes Q^ and K^ along the sequence (one kernel each) and
// runs ops/cuda/attention/q_attn_cuda.h's two-pass kernel: dS recomputed per tile, its slice amax first, then
// dS and dS^T quantized in registers with the CPU's SR bits for dQ and dK; dV = P^T dO in BF16.
//
// Sliced (the first form; any head_dim, and the reference the fused form is tested against): each (batch,
// head) slice's scores materialized, cuBLASLt GEMMs on the BF16 q * s_b operands with FP32 accumulation,
// simple kernels for the softmax and dS, one slice at a time:
//   forward   Q^, K^ = Q4(Q), Q4(K) (RTN, one tensor amax each, codes kept for the backward);
//             S = (q s_b)_Q (q s_b)_K^T, P = causal softmax(s S_decQ S_decK S) in FP32, O = bf16(P) V.
//   backward  S and P recomputed by the same GEMM and kernel (bit for bit the forward's), dP = dO V^T,
//             dS = P (dP - rowsum(P dP)), dV = bf16(P)^T dO; dQ = s Q4sr(dS) Q4sr(K^^T)^T and
//             dK = s Q4sr(dS^T) Q4sr(Q^^T)^T with the NVFP4 operands as BF16 q * s_b and the two S_dec in
//             the FP32 epilogue.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "nn/q_attention.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/gemm_cublaslt.h"
#include "ops/cuda/quant/quantize_cuda.h"

namespace fp4::cuda {

// One NVFP4 operand [rows x cols] on the device: packed codes, E4M3 scales, S_dec, its amax and the BF16
// q * s_b values a GEMM multiplies; `input` holds the FP32 matrix it was quantized from (per-slice operands).
struct QAttnOperand {
  int64_t rows = 0, cols = 0;
  DeviceBuffer<float> input;
  DeviceBuffer<uint8_t> codes, scales;
  DeviceBuffer<float> outer, amax;
  DeviceBuffer<bf16> bar;

  // Allocates for [rows x cols] when the shape changes; `input` and `bar` only when asked for.
  void ensure(int64_t rows, int64_t cols, bool with_input, bool with_bar);
  Nvfp4DeviceView view();
  size_t bytes() const;
};

enum class QAttnKernel {
  kAuto,   // fused where the fused attention kernels take the head size (64, 128), sliced otherwise
  kFused,  // head_dim 64 or 128 only (fp4::Error otherwise)
  kSliced,
};

// Transients shared by every layer (the layers run one at a time on one stream), for the form in use.
// Sliced: after a backward the slice operands hold the last slice's (batch b-1, head heads-1) values, which
// the tests compare with the CPU reference.
struct QAttnWorkspace {
  int64_t n = 0;
  int d = 0, t = 0, tp = 0, head_dim = 0, slices = 0;
  bool fused = false;
  DeviceBuffer<bf16> q_in, k_in;    // [n x d] contiguous copies of Q, K (the quantizer reads contiguous rows)
  DeviceBuffer<bf16> q_bar, k_bar;  // [n x d] q * s_b of Q^, K^ (no S_dec): the S products' operands
  // Fused form.
  DeviceBuffer<bf16> v_copy;          // [n x d] V with the row stride of q_bar (the forward kernel takes one)
  DeviceBuffer<bf16> qt_bar, kt_bar;  // [n x d] q * s_b of Q^^T, K^^T at Q's, K's positions
  DeviceBuffer<float> sdec_qt, sdec_kt, slice_amax;  // [b * heads]
  DeviceBuffer<float> scale_log2;                    // [1] s * S_dec(Q^) * S_dec(K^) * log2(e)
  DeviceBuffer<uint8_t> backward;                    // q_attention_backward's workspace
  // Sliced form.
  DeviceBuffer<float> q_hat, k_hat;       // [n x d] Q^, K^ in FP32 with S_dec: the backward re-quantizes them
  DeviceBuffer<float> scores, probs, dp;  // [t x tp] S (unscaled), P (FP32), dP
  DeviceBuffer<bf16> probs_bf16;          // [t x tp] bf16(P) for P V and P^T dO
  DeviceBuffer<float> acc;                // [t x head_dim] FP32 dQ / dK of a slice before its scale
  QAttnOperand ds, dst, kt, qt;           // [t x tp], [t x tp], [head_dim x tp], [head_dim x tp]

  void ensure(const AttnShape& shape, bool fused);
  size_t bytes() const;
};

class QAttentionCuda {
 public:
  // layer: the block index, as QAttentionCpu's (it separates the layers' random streams).
  explicit QAttentionCuda(int layer, QAttnKernel kernel = QAttnKernel::kAuto);

  // Whether a forward of this head size runs the fused form.
  bool fused_for(int head_dim) const;

  // q, k, v: [b*t][ld_qkv] BF16 (head h at columns h*head_dim of each); out [b*t][ld_out]; lse [b][heads][t]
  // FP32 (written by the fused form, for its backward; unused by the sliced one). Keeps Q^, K^ packed
  // (codes, scales, S_dec) and ctx (seed, call) for the backward.
  void forward(const bf16* q, const bf16* k, const bf16* v, int ld_qkv, bf16* out, int ld_out, float* lse,
               const AttnShape& shape, const QuantContext& ctx, QAttnWorkspace& ws, GemmRunner& gemm,
               cudaStream_t stream);
  // v as given to forward; out and lse as the forward wrote them (the fused form's Delta and probabilities);
  // dout [b*t][ld_out]; dq, dk, dv [b*t][ld_dqkv] are overwritten.
  void backward(const bf16* v, int ld_qkv, const bf16* out, const float* lse, const bf16* dout, int ld_out,
                bf16* dq, bf16* dk, bf16* dv, int ld_dqkv, const AttnShape& shape, QAttnWorkspace& ws,
                GemmRunner& gemm, cudaStream_t stream);

  // Tests only: the fused backward's per-slice dS (FP32, [b*heads][t][tp]) and the q * s_b values of Q(dS)
  // ([..][query][key]) and Q(dS^T) ([..][key][query]), into these zeroed device arrays when set.
  struct FusedDebug {
    float* ds = nullptr;
    bf16* ds_rows = nullptr;
    bf16* ds_cols = nullptr;
  };
  void set_fused_debug(const FusedDebug& d) { debug_ = d; }

  // The forward's Q^, K^ [b*t x heads*head_dim] (for tests and the memory report).
  Nvfp4DeviceView q_quantized() { return q_.view(); }
  Nvfp4DeviceView k_quantized() { return k_.view(); }
  // Device bytes kept between the forward and the backward.
  size_t kept_bytes() const;

 private:
  // S of the slice at element `offset` of Q~, K~ into ws.scores, then P into ws.probs_bf16 (and into probs
  // when not null): the same calls in the forward and the backward, so the backward sees the forward's P.
  void slice_probs(QAttnWorkspace& ws, int64_t offset, float* probs, GemmRunner& gemm, cudaStream_t stream);
  // Q^, K^ of contiguous copies of q, k (codes kept, q * s_b into ws.q_bar / ws.k_bar): both forms.
  void quantize_inputs(const bf16* q, const bf16* k, int ld_qkv, const AttnShape& shape, QAttnWorkspace& ws,
                       cudaStream_t stream);
  void forward_sliced(const bf16* v, int ld_qkv, bf16* out, int ld_out, QAttnWorkspace& ws, GemmRunner& gemm,
                      cudaStream_t stream);
  void backward_sliced(const bf16* v, int ld_qkv, const bf16* dout, int ld_out, bf16* dq, bf16* dk, bf16* dv,
                       int ld_dqkv, QAttnWorkspace& ws, GemmRunner& gemm, cudaStream_t stream);
  // q_attention_fused.cu
  void forward_fused(const bf16* v, int ld_qkv, bf16* out, int ld_out, float* lse, QAttnWorkspace& ws,
                     cudaStream_t stream);
  void backward_fused(const bf16* v, int ld_qkv, const bf16* out, const float* lse, const bf16* dout,
                      int ld_out, bf16* dq, bf16* dk, bf16* dv, int ld_dqkv, QAttnWorkspace& ws,
                      cudaStream_t stream);

  int layer_;
  QAttnKernel kernel_;
  FusedDebug debug_;
  bool fused_ = false;  // the form of the last forward
  AttnShape shape_;
  QuantContext ctx_;
  bool have_forward_ = false;
  QAttnOperand q_, k_;  // [n x d] packed only (no input, no bar)
};

}  // namespace fp4::cuda
