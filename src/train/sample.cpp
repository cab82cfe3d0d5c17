#include "train/sample.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "numerics/philox.h"

namespace fp4 {

int32_t sample_token(std::span<const float> logits, int vocab_real, float temperature, int top_k, double u) {
  const int n = std::min<int>(vocab_real, static_cast<int>(logits.size()));
  FP4_CHECK(n > 0, "sample: no candidate tokens");
  FP4_CHECK(temperature >= 0 && std::isfinite(temperature), "sample: temperature must be >= 0, got ",
            temperature);
  FP4_CHECK(top_k >= 0, "sample: top_k must be >= 0, got ", top_k);
  for (int i = 0; i < n; ++i)
    FP4_CHECK(!std::isnan(logits[static_cast<size_t>(i)]), "sample: logit of token ", i, " is NaN");
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // Most likely first; equal logits keep the lower id first.
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (temperature == 0.0f) return order[0];
  const size_t k = top_k > 0 ? std::min<size_t>(static_cast<size_t>(top_k), order.size()) : order.size();
  const double top = logits[order[0]];
  FP4_CHECK(std::isfinite(top), "sample: the largest logit is ", top);
  std::vector<double> p(k);
  double total = 0;
  for (size_t i = 0; i < k; ++i) {
    p[i] = std::exp((static_cast<double>(logits[order[i]]) - top) / temperature);
    total += p[i];
  }
  const double target = u * total;
  double acc = 0;
  for (size_t i = 0; i < k; ++i) {
    acc += p[i];
    if (target < acc) return order[i];
  }
  // u * total can round up to total: the last candidate with non-zero weight.
  for (size_t i = k; i-- > 0;)
    if (p[i] > 0) return order[i];
  return order[0];
}

std::vector<int32_t> generate(TrainingEngine& engine, std::vector<int32_t> prompt, const SampleOptions& o,
                              const std::function<void(int32_t)>& on_token) {
  FP4_CHECK(!prompt.empty(), "sample: the prompt has no tokens");
  FP4_CHECK(o.context > 0, "sample: context must be positive");
  const auto& cfg = engine.config();
  for (int32_t id : prompt)
    FP4_CHECK(id >= 0 && id < cfg.vocab_real, "sample: prompt token ", id,
              " is outside the model's vocabulary (", cfg.vocab_real, ")");
  const int context = std::min(o.context, cfg.max_seq_len);
  const RngStream rng{o.seed, make_stream(0, 0, 0x5a)};
  std::vector<float> logits(static_cast<size_t>(cfg.vocab_size));
  std::vector<int32_t> out;
  for (int i = 0; i < o.max_new_tokens; ++i) {
    const size_t len = std::min(prompt.size(), static_cast<size_t>(context));
    Batch b;
    b.batch = 1;
    b.seq = static_cast<int>(len);
    b.tokens.assign(prompt.end() - static_cast<std::ptrdiff_t>(len), prompt.end());
    b.targets.assign(len, -1);
    engine.last_logits(b, logits);
    // 53 random bits from two Philox words.
    const uint64_t hi = philox_word(rng, 2 * static_cast<uint64_t>(i)) >> 5;
    const uint64_t lo = philox_word(rng, 2 * static_cast<uint64_t>(i) + 1) >> 6;
    const double u = static_cast<double>((hi << 26) | lo) * 0x1p-53;
    const int32_t id = sample_token(logits, cfg.vocab_real, o.temperature, o.top_k, u);
    prompt.push_back(id);
    out.push_back(id);
    if (on_token) on_token(id);
    if (id == o.stop_id) break;
  }
  return out;
}

}  // namespace fp4
