// CudaOlmo2: the OLMo-2 forward and hand-written backward on the GPU, the same computation as the CPU
// Olmo2Model (model/olmo2.h) with BF16 activations, FP32 residual stream and FP32 master weights.
// Per block: h = x + RMSNorm(Attn(x)), out = h + RMSNorm(MLP(h)); QK-norm over the full q and k, RoPE,
// causal attention, SwiGLU; final norm, untied LM head, cross-entropy + z-loss over the real vocabulary.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/cuda/activation_arena.h"
#include "model/cuda/batch_upload.h"
#include "nn/cuda/device_params.h"
#include "nn/cuda/linear_cuda.h"
#include "nn/cuda/lora_svd_linear_cuda.h"
#include "nn/cuda/q_attention_cuda.h"
#include "nn/quant_linear.h"
#include "ops/cuda/gemm_cublaslt.h"
#include "recipe/recipe.h"

namespace fp4::cuda {

class CudaOlmo2 {
 public:
  // The parameters must have the layout of Olmo2Model's ParameterSet for `cfg`.
  CudaOlmo2(const ModelConfig& cfg, const Recipe& recipe, DeviceParams& params, GemmRunner& gemm,
            cudaStream_t stream);

  // Forward through the final norm (sizes the activation arena for the batch's shape). An inference
  // forward (evaluation, generation) builds no backward operands: backward() is refused after it and any
  // sequence length runs with any recipe.
  void forward(const DeviceBatch& batch, ForwardMode mode = ForwardMode::kTraining);
  // LM head + cross-entropy over the forward's rows: sums[0] += sum of (ce + z-loss), sums[1] += sum of
  // ce. With backward, the LM head's gradient and the gradient at the final norm output are computed,
  // scaled by grad_scale, ready for backward().
  void loss(const DeviceBatch& batch, bool backward, float grad_scale, double* sums);
  // Backward from the final norm to the embedding; parameter gradients accumulate.
  void backward(const DeviceBatch& batch);
  // Logits of the last position of each sequence of the last forward into host `out` [b][vocab]
  // (FP32; padded ids get -inf). Synchronizes.
  void last_logits(std::span<float> out);

  // The first saved activation of the last forward holding a NaN/Inf, named as the CPU model names
  // it ("embedding output", "blocks.1.attn output", ...), or "". Synchronizes; for error messages.
  // A block input or mid-block residual that is not saved (its linear is quantized) is judged by the
  // output of the linear that read it, and the name says so.
  std::string first_nonfinite_activation() const;

  // Device memory the model holds beyond the parameter store, as of the last forward.
  struct MemoryReport {
    size_t arena_bytes = 0;             // the activation arena's allocation, all of the below included
    size_t saved_input_bytes = 0;       // per-layer BF16 linear inputs kept for BF16 linears' backward
    size_t linear_workspace_bytes = 0;  // quantized linears' transients (overlaying the logits)
    size_t linear_kept_bytes = 0;       // packed operands the quantized linears keep (outside the arena)
    size_t q_attn_bytes = 0;            // Q-Attn: kept packed Q^, K^ of every layer and the shared workspace
    size_t lora_svd_bytes = 0;          // LoRA-SVD: the shared FP32 wgrad, low-rank intermediate and split
  };
  MemoryReport memory_report() const;
  // One line for logs and benchmarks: the report in GiB.
  std::string memory_summary() const;
  // The buffers of the last forward (null before the first); for tests and tools.
  const Activations* activations() const { return acts_; }

  // The quantized linears' random streams: the run seed and a per-forward call index, set by the engine
  // before each forward exactly as the CPU engine sets Olmo2Model::quant_context().
  QuantContext& quant_context() { return quant_ctx_; }

  // OutControl's registry of the quantized linears when the recipe enables it (else null), as
  // Olmo2Model::out_control(); the layers measure on the device.
  OutControl* out_control() { return out_control_.get(); }
  const OutControl* out_control() const { return out_control_.get(); }
  // Adds every layer's device calibration sums of the step to the registry's step sums (synchronizes).
  void collect_out_control_sums();

  // Data parallelism: called by backward() on the host once the work completing a gradient bucket is
  // queued on the stream: -1 after the head (LM head, final norm), l after block l, n_layers after the
  // embedding (optim/grad_buckets.h numbers buckets the same way). Empty: not called.
  std::function<void(int bucket)> on_gradients_queued;

  // Whether the fused attention kernels take this head size (otherwise the plain fallback runs).
  static bool fused_attention_supports(int head_dim);

 private:
  struct BlockParams {
    int q_norm, k_norm, attn_norm, mlp_norm;
    std::unique_ptr<LinearCuda> qkv, wo, gate_up, down;
    std::array<LinearCuda*, 4> linears() const { return {qkv.get(), wo.get(), gate_up.get(), down.get()}; }
  };

  void block_forward(int l);
  void block_backward(int l, const float* dout, float* dx);
  void run_attention_forward(int l, const LayerActivations& la);
  void run_attention_backward(int l, const LayerActivations& la);
  size_t attention_workspace_bytes(int b, int t) const;
  size_t linear_workspace_bytes(int n) const;
  DeviceWeight weight(int i);

  ModelConfig cfg_;
  QuantContext quant_ctx_;
  std::unique_ptr<OutControl> out_control_;
  DeviceParams& params_;
  GemmRunner& gemm_;
  cudaStream_t stream_;
  int embed_ = -1, final_norm_ = -1, lm_head_ = -1;
  std::vector<BlockParams> blocks_;
  // attention.q_attn: one per block (its kept Q^, K^ and random streams) and their shared transients.
  std::vector<std::unique_ptr<QAttentionCuda>> q_attn_;
  std::unique_ptr<QAttnWorkspace> q_attn_ws_;
  // lora_svd: what the quantized linears' LoRA-SVD layers share (null when off).
  std::unique_ptr<LoraSvdCudaShared> lora_svd_;
  DeviceBuffer<float> rope_cos_, rope_sin_;  // [max_seq_len][head_dim / 2]
  std::unique_ptr<ActivationArena> arena_;   // laid out for the linears' saved inputs
  const Activations* acts_ = nullptr;        // of the last forward
};

}  // namespace fp4::cuda
