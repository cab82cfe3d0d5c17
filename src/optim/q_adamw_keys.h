// The two Q-AdamW quantities the CPU QAdamW (optim/q_adamw.cpp) and its device form
// (optim/cuda/q_adamw_cuda.h) must agree on bit for bit: the Philox key of a tensor's moment at a step, and
// the bound on the normalized step.
#pragma once

#include <cstdint>

#include "numerics/hd.h"
#include "numerics/philox.h"

namespace fp4 {

inline constexpr uint32_t kQAdamSrPurpose = 0xA0;  // + 0 for m, + 1 for v

// The Philox key of tensor `param`'s moment `k` (0: m, 1: v) at `step` (1-based), from the run seed; tile t
// of the tensor rounds with the stream {key, t}.
FP4_HD uint64_t q_adamw_sr_key(uint64_t seed, int64_t step, int param, int k) {
  const Philox4 b =
      philox_block(RngStream{seed, make_stream(static_cast<uint32_t>(param), static_cast<uint32_t>(step),
                                               kQAdamSrPurpose + static_cast<uint32_t>(k))},
                   0);
  return static_cast<uint64_t>(b.v[0]) | (static_cast<uint64_t>(b.v[1]) << 32);
}

// The largest |m_t| / (sqrt(v_t / bc2)) exact AdamW reaches after t steps (q_adamw.cpp says why it is
// applied); infinity when beta2 = 0.
float q_adamw_ratio_bound(double b1, double b2, int64_t t);

}  // namespace fp4
