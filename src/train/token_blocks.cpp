#include "train/token_blocks.h"

#include "core/error.h"

namespace fp4 {

void check_micro_batch_tokens(const Recipe& recipe, int batch, int seq, int world) {
  constexpr int kTokenGroup = 128;
  for (Operand o : {Operand::kQ5dYt, Operand::kQ6Xt}) {
    const QuantSpec& q = recipe.linear[o];
    if (!q.quantized() || q.outer != OuterScale::kBlock128) continue;
    for (int rank = 0; rank < world; ++rank) {
      const long long tokens = static_cast<long long>((batch - rank + world - 1) / world) * seq;
      FP4_CHECK(
          tokens % kTokenGroup == 0, "recipe '", recipe.name,
          "': ", o == Operand::kQ5dYt ? "linear.q5 (dY^T)" : "linear.q6 (X^T)",
          " uses block128 outer scales over the tokens, so each micro-batch needs a multiple of 128 tokens; ",
          world > 1 ? "rank " + std::to_string(rank) + " of " + std::to_string(world) + " gets "
                    : std::string(),
          tokens, " (data.batch = ", batch, ", data.seq = ", seq,
          "): make data.seq a multiple of 128, or choose data.batch so every rank's rows x data.seq is one");
    }
  }
}

}  // namespace fp4
