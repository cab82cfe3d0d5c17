#include "nn/workspace.h"

#include "ops/ops.h"

namespace fp4 {

void Workspace::resize(const ModelConfig& cfg, int b, int t) {
  const int64_t n = static_cast<int64_t>(b) * t, d = cfg.d_model, ff = cfg.d_ff;
  dqkv.resize({n, 3 * d});
  dq.resize({n, d});
  dk.resize({n, d});
  datt.resize({n, d});
  dprobs.resize({t, t});
  dy.resize({n, d});
  dh.resize({n, d});
  dgu.resize({n, 2 * ff});
  dact.resize({n, ff});
}

void RopeTables::resize(const ModelConfig& cfg, int new_t) {
  if (new_t == t) return;
  t = new_t;
  cos.resize({t, cfg.head_dim() / 2});
  sin.resize({t, cfg.head_dim() / 2});
  cpu::rope_tables(cos.data(), sin.data(), t, cfg.head_dim(), cfg.rope_theta);
}

}  // namespace fp4
