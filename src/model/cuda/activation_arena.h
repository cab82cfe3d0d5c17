// ActivationArena: every activation and backward buffer of the CUDA model carved from one device
// allocation, laid out for a micro-batch of b x t tokens. The allocation grows only when a larger
// micro-batch arrives; nothing is allocated inside a training step otherwise.
//
// Precisions: the residual stream and its gradient are FP32 (two [n][d] buffers each, not saved per
// layer); everything saved for the backward is BF16 except the norms' 1/rms and the attention
// log-sum-exp (FP32); the logits and their gradient share one BF16 [n][vocab] buffer.
//
// Overlays (pieces whose lives never meet share bytes):
// - A block's linear inputs x, h, act are saved per layer only for a linear whose backward reads them
//   (BF16); for a quantized one (it keeps its packed X^T) they point to one transient buffer that every
//   such layer reuses in the forward. That buffer overlays the backward-only buffers (dres ... attn
//   workspace), dead during the forward.
// - The quantized linears' workspace (lent through LinearCuda::lend_workspace) overlays the logits, which
//   live only from the LM head GEMM to the end of the loss, while the workspace lives only inside one
//   linear's forward or backward.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "ops/cuda/cuda_check.h"

namespace fp4::cuda {

using bf16 = __nv_bfloat16;

// Which of a block's linear inputs are saved per layer: those whose linear's backward reads them.
struct SavedInputs {
  bool x = true;    // input of wqkv
  bool h = true;    // input of w_gate_up
  bool act = true;  // input of w_down
};

// What one block saves for its backward (n = b*t rows). x, h, act point to the shared transient buffer
// when `saved` says they are not kept: valid only from their write to their linear's forward.
struct LayerActivations {
  SavedInputs saved;
  bf16* x = nullptr;           // [n][d] block input (BF16 copy of the residual stream), input of wqkv
  bf16* qkv = nullptr;         // [n][3d] raw q | k | v projections
  bf16* qkv_rot = nullptr;     // [n][3d] q, k normed and rotated, v copied: the attention's input
  float* rstd_q = nullptr;     // [n]
  float* rstd_k = nullptr;     // [n]
  bf16* att = nullptr;         // [n][d] attention output, input of wo
  float* lse = nullptr;        // [b][heads][t]
  bf16* y_attn = nullptr;      // [n][d] wo output (before attn_norm)
  float* rstd_attn = nullptr;  // [n]
  bf16* h = nullptr;           // [n][d] mid-block residual (BF16 copy), input of w_gate_up
  bf16* gu = nullptr;          // [n][2 ff] gate | up
  bf16* act = nullptr;         // [n][ff] silu(gate) * up, input of w_down
  bf16* y_mlp = nullptr;       // [n][d] w_down output (before mlp_norm)
  float* rstd_mlp = nullptr;   // [n]
};

struct Activations {
  int b = 0, t = 0, n = 0;
  std::vector<LayerActivations> layers;
  float* res = nullptr;              // [n][d] FP32 residual stream: block input, then block output in place
  float* mid = nullptr;              // [n][d] FP32 mid-block residual
  bf16* xf = nullptr;                // [n][d] final norm output, input of the LM head
  float* rstd_f = nullptr;           // [n]
  bf16* logits = nullptr;            // [n][vocab] logits, then their gradient in place
  void* linear_workspace = nullptr;  // the quantized linears' transients, over the logits (null: none)
  size_t linear_workspace_bytes = 0;
  bf16* transient_input = nullptr;  // [n][max(d, ff)] unsaved x / h / act, over the backward buffers
  size_t saved_input_bytes = 0;     // bytes of the per-layer saved x / h / act
  float* row_loss = nullptr;        // [n]
  float* row_ce = nullptr;          // [n]
  // backward (shared by all blocks)
  float* dres[2] = {nullptr, nullptr};  // [n][d] FP32 gradient of the residual stream (ping-pong)
  float* dmid = nullptr;                // [n][d] FP32 gradient at the mid-block residual
  bf16* dy = nullptr;                   // [n][d] gradient of a sublayer output before its norm
  bf16* dact = nullptr;                 // [n][ff]
  bf16* dgu = nullptr;                  // [n][2 ff]
  bf16* datt = nullptr;                 // [n][d]
  bf16* dqkv = nullptr;                 // [n][3d]
  float* norm_scratch = nullptr;        // norm weight-gradient partial sums
  void* attn_workspace = nullptr;
  // last_logits
  bf16* last_x = nullptr;        // [b][d]
  float* last_logits = nullptr;  // [b][vocab]
};

// What the model's layers need beyond the activations for a b x t micro-batch.
struct ArenaNeeds {
  size_t attn_workspace_bytes = 0;    // the attention backward's workspace
  size_t linear_workspace_bytes = 0;  // the largest quantized linear's transients (0: no such layer)
};

class ActivationArena {
 public:
  // saved: per layer (cfg.n_layers entries), which linear inputs are kept for the backward.
  ActivationArena(const ModelConfig& cfg, std::vector<SavedInputs> saved);

  // The buffers for b x t (valid until the next call).
  const Activations& ensure(int b, int t, const ArenaNeeds& needs);
  size_t capacity_bytes() const { return buffer_.bytes(); }
  // The bytes ensure(b, t, needs) would hold, without allocating.
  size_t bytes_for(int b, int t, const ArenaNeeds& needs) const;

 private:
  size_t lay_out(int b, int t, const ArenaNeeds& needs, uint8_t* base, Activations& a) const;

  ModelConfig cfg_;
  std::vector<SavedInputs> saved_;
  DeviceBuffer<uint8_t> buffer_;
  Activations acts_;
};

}  // namespace fp4::cuda
