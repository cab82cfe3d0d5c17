#include "train/evaluate.h"

#include <cmath>

#include "core/error.h"

namespace fp4 {

Batch batch_rows(const Batch& batch, int rank, int world) {
  Batch out;
  out.seq = batch.seq;
  const size_t seq = static_cast<size_t>(batch.seq);
  for (int row = rank; row < batch.batch; row += world) {
    const auto at = static_cast<ptrdiff_t>(static_cast<size_t>(row) * seq);
    out.tokens.insert(out.tokens.end(), batch.tokens.begin() + at, batch.tokens.begin() + at + batch.seq);
    out.targets.insert(out.targets.end(), batch.targets.begin() + at, batch.targets.begin() + at + batch.seq);
    ++out.batch;
  }
  return out;
}

EvalResult evaluate_split(TrainingEngine& engine, ValidationLoader& loader, int64_t max_batches,
                          Communicator* comm) {
  loader.reset();
  EvalResult r;
  double sums[3] = {0, 0, 0};  // loss-weighted tokens, tokens, non-finite batches
  Batch batch;
  while ((max_batches <= 0 || r.batches < max_batches) && loader.next(batch)) {
    const Batch mine = comm ? batch_rows(batch, comm->rank(), comm->world_size()) : batch;
    ++r.batches;
    if (mine.batch == 0) continue;
    const StepStats s = engine.evaluate(mine);
    if (!std::isfinite(s.loss)) {
      FP4_CHECK(comm, "validation batch ", r.batches - 1, ": loss is ", s.loss);
      sums[2] += 1;  // reported after the ranks agree, so none waits for a rank that stopped
      continue;
    }
    sums[0] += s.loss * static_cast<double>(s.tokens);
    sums[1] += static_cast<double>(s.tokens);
  }
  if (comm) comm->host_all_reduce_sum(sums, 3, CommType::kF64);
  FP4_CHECK(sums[2] == 0, "validation: the loss of ", sums[2], " batch slice(s) is not finite");
  r.tokens = static_cast<int64_t>(sums[1]);
  FP4_CHECK(r.tokens > 0, "validation: no target tokens were scored");
  r.loss = sums[0] / sums[1];
  r.perplexity = std::exp(r.loss);
  return r;
}

}  // namespace fp4
