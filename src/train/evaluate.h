// Validation loss and perplexity over the held-out split.
#pragma once

#include <cstdint>

#include "data/loader.h"
#include "dist/communicator.h"
#include "model/engine.h"

namespace fp4 {

struct EvalResult {
  double loss = 0;        // token-weighted mean cross-entropy
  double perplexity = 0;  // exp(loss)
  int64_t tokens = 0;
  int64_t batches = 0;
};

// Evaluates the first max_batches batches of the loader (0: all of them), from its start, so every
// call sees the same tokens. Throws fp4::Error when the loss is not finite or no token was scored.
// With comm (collective), every rank scores rows rank, rank + world, ... of each batch and the sums
// are combined: the result is the single-process one up to summation order, on every rank.
EvalResult evaluate_split(TrainingEngine& engine, ValidationLoader& loader, int64_t max_batches,
                          Communicator* comm = nullptr);

// Rows rank, rank + world, ... of a batch (possibly none).
Batch batch_rows(const Batch& batch, int rank, int world);

}  // namespace fp4
