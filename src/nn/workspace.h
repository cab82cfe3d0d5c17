// Workspace: the backward's temporary buffers, shared by all blocks (only one block runs its
// backward at a time). Sized once per (batch, seq).
#pragma once

#include "core/model_config.h"
#include "tensor/tensor.h"

namespace fp4 {

struct Workspace {
  Tensor dqkv;    // [n][3d]
  Tensor dq, dk;  // [n][d] gradients of the rotated q and k
  Tensor datt;    // [n][d] gradient of the attention output (input of wo)
  Tensor dprobs;  // [t][t] one (batch, head) at a time
  Tensor dy;      // [n][d] gradient of a sublayer output before its norm
  Tensor dh;      // [n][d] gradient at the mid-block residual
  Tensor dgu;     // [n][2 ff]
  Tensor dact;    // [n][ff]

  void resize(const ModelConfig& cfg, int b, int t);
};

// cos/sin of the rotary angles for positions 0..t-1: [t][head_dim/2] each.
struct RopeTables {
  Tensor cos, sin;
  int t = 0;
  void resize(const ModelConfig& cfg, int t);
};

}  // namespace fp4
