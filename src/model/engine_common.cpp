#include "model/engine_common.h"

#include "core/error.h"

namespace fp4 {

void check_batch(const Batch& b, const ModelConfig& cfg, const std::string& what, bool check_targets) {
  FP4_CHECK(b.batch > 0 && b.seq > 0, what, ": empty batch shape ", b.batch, " x ", b.seq);
  FP4_CHECK(b.seq <= cfg.max_seq_len, what, ": seq ", b.seq, " exceeds max_seq_len ", cfg.max_seq_len);
  const size_t n = static_cast<size_t>(b.batch) * static_cast<size_t>(b.seq);
  FP4_CHECK(b.tokens.size() == n, what, ": ", b.tokens.size(), " tokens for shape ", b.batch, " x ", b.seq);
  for (size_t i = 0; i < n; ++i)
    FP4_CHECK(b.tokens[i] >= 0 && b.tokens[i] < cfg.vocab_size, what, ": token ", b.tokens[i],
              " at position ", i, " is outside the embedding table (", cfg.vocab_size, " rows)");
  if (!check_targets) return;
  FP4_CHECK(b.targets.size() == n, what, ": ", b.targets.size(), " targets for shape ", b.batch, " x ",
            b.seq);
  for (size_t i = 0; i < n; ++i)
    FP4_CHECK(b.targets[i] < cfg.vocab_real, what, ": target ", b.targets[i], " at position ", i,
              " is outside the vocabulary (", cfg.vocab_real, " ids)");
}

int64_t count_targets(const Batch& b) {
  int64_t n = 0;
  for (int32_t t : b.targets) n += t >= 0;
  return n;
}

}  // namespace fp4
