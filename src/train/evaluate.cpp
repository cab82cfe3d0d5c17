#include "train/evaluate.h"

#include <cmath>

#include "core/error.h"

namespace fp4 {

EvalResult evaluate_split(TrainingEngine& engine, ValidationLoader& loader, int64_t max_batches) {
  loader.reset();
  EvalResult r;
  double weighted = 0;
  Batch batch;
  while ((max_batches <= 0 || r.batches < max_batches) && loader.next(batch)) {
    const StepStats s = engine.evaluate(batch);
    FP4_CHECK(std::isfinite(s.loss), "validation batch ", r.batches, ": loss is ", s.loss);
    weighted += s.loss * static_cast<double>(s.tokens);
    r.tokens += s.tokens;
    ++r.batches;
  }
  FP4_CHECK(r.tokens > 0, "validation: no target tokens were scored");
  r.loss = weighted / static_cast<double>(r.tokens);
  r.perplexity = std::exp(r.loss);
  return r;
}

}  // namespace fp4
