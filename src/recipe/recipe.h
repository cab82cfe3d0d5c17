// Recipe: the per-layer precision policy of the quantized linear layers (RECIPES.md section 4),
// plus layer features and the optimizer choice. Presets are TOML files in configs/recipes/.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "numerics/quant_spec.h"

namespace fp4 {

// The six quantizers of a linear layer Y = X W^T:
// Q1 X (fwd), Q2 W (fwd), Q3 dY (for dX), Q4 W^T (for dX), Q5 dY^T (for dW), Q6 X^T (for dW).
enum class Operand : uint8_t { kQ1X, kQ2W, kQ3dY, kQ4Wt, kQ5dYt, kQ6Xt };
inline constexpr int kNumOperands = 6;

struct LinearPolicy {
  std::array<QuantSpec, kNumOperands> q{};  // indexed by Operand
  // RHT signs: "fixed" (one sign vector for the run, NVIDIA) or "per_call" (fresh per call, TetraJet-v2)
  bool rht_fresh_signs = false;

  const QuantSpec& operator[](Operand o) const { return q[static_cast<int>(o)]; }
  QuantSpec& operator[](Operand o) { return q[static_cast<int>(o)]; }
  bool quantized() const;  // any of the six quantized
};

// Which linears of a block a policy applies to.
enum class LinearKind : uint8_t { kQkv, kAttnOut, kGateUp, kDown };
inline constexpr int kNumLinearKinds = 4;
std::string to_string(LinearKind k);

// OsciReset (RECIPES.md section 6; optim/osci_reset.h). Off unless enabled.
struct OsciResetConfig {
  bool enabled = false;
  int window = 50;         // optimizer steps of one detection window
  double threshold = 8.0;  // reset where dist_Q / dist_M >= threshold
  int period = 200;        // steps from one window's start to the next
  double start = 0.65;     // first window: a fraction of the run (< 1) or a step number (>= 1)
  // < 1: the memory-efficient variant, tracking only this fraction of each weight's elements, those
  // closest to a bin edge at the window's snapshot; 1 tracks every element.
  double track_fraction = 1.0;
};

// OutControl's static outlier-channel retention (RECIPES.md section 7; nn/out_control.h). Off unless enabled.
struct OutControlConfig {
  bool enabled = false;
  int calib_start = 501;  // first optimizer step (1-based) whose forwards are measured
  int calib_steps = 50;   // steps measured; the channels freeze at the end of the last one
  double ratio = 0.1;     // share of a layer's input channels kept in MXFP8, in (0, 1)
  int round_to = 128;     // channel count rounded up to a multiple of this (a multiple of 16)
};

// Mixed-precision attention (RECIPES.md section 8.4; nn/q_attention.h): QK^T, dQ and dK in NVFP4, the
// P/V/dO products in high precision. Off unless enabled.
struct AttentionConfig {
  bool q_attn = false;
};

// LoRA-SVD projections (RECIPES.md section 8.1; nn/lora_svd.h): each quantized linear holds W = W_res + beta
// L2 L1, the low-rank path in high precision, realigned by a randomized SVD every realign_every steps. Off
// unless enabled.
struct LoraSvdConfig {
  bool enabled = false;
  int rank = 32;             // r: L2 [out x r], L1 [r x in]; must stay below min(in, out) of every layer
  double beta = 1.0;         // scale of the low-rank path (finite, nonzero)
  int realign_every = 2048;  // optimizer steps between realignments
};

struct Recipe {
  std::string name = "bf16";
  std::string description;
  LinearPolicy linear;              // applied to every quantized linear
  std::vector<int> bf16_layers;     // block indices kept in BF16; negative counts from the end
  std::string optimizer = "adamw";  // adamw, q-adamw, root, root-bf16 or q-root (optim/optimizer.h)
  OsciResetConfig osci_reset;
  OutControlConfig out_control;
  AttentionConfig attention;
  LoraSvdConfig lora_svd;

  // The policy for linear `kind` of block `layer` in a model of `n_layers` blocks.
  LinearPolicy policy_for(int layer, int n_layers, LinearKind kind) const;
};

}  // namespace fp4
