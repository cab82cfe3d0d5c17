// Text generation from a trained model: temperature and top-k sampling with the counter-based RNG.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/engine.h"

namespace fp4 {

struct SampleOptions {
  int max_new_tokens = 200;
  float temperature = 0.8f;  // 0: greedy (argmax)
  int top_k = 40;            // keep the k most likely tokens; 0: all
  uint64_t seed = 1;
  int context = 256;     // at most this many most recent tokens are fed to the model
  int32_t stop_id = -1;  // generation ends after this token (e.g. end-of-text); -1: never
};

// Picks the next token from logits (only ids < vocab_real are candidates) with uniform draw u in
// [0, 1). Ties in greedy mode and at the top-k boundary go to the lower id.
int32_t sample_token(std::span<const float> logits, int vocab_real, float temperature, int top_k, double u);

// Generates up to max_new_tokens after `prompt` (not empty), calling on_token for each new token.
// Returns the new tokens. The i-th draw uses Philox (seed, stream "sample", index i), so a seed
// gives the same text on every run.
std::vector<int32_t> generate(TrainingEngine& engine, std::vector<int32_t> prompt,
                              const SampleOptions& options,
                              const std::function<void(int32_t)>& on_token = {});

}  // namespace fp4
