#include "train/evaluate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "model/cpu_engine.h"
#include "test_util.h"

namespace fp4 {
namespace {

// The result is the token-weighted mean of the per-batch losses, and repeating it gives the same bits.
TEST(EvaluateSplit, TokenWeightedMeanOverTheLoader) {
  testing::TempDir tmp;
  testing::prepare_corpus(tmp.path());
  auto engine = make_cpu_engine(testing::small_model(), Recipe{}, std::random_device{}());
  LoaderOptions o;
  o.data = tmp / "shards";
  o.split = "val";
  o.batch = 3;
  o.seq = 16;
  ValidationLoader loader(o);
  double weighted = 0;
  int64_t tokens = 0, batches = 0;
  Batch b;
  while (loader.next(b) && batches < 5) {
    const StepStats s = engine->evaluate(b);
    weighted += s.loss * static_cast<double>(s.tokens);
    tokens += s.tokens;
    ++batches;
  }
  const EvalResult r = evaluate_split(*engine, loader, 5);  // resets the loader itself
  EXPECT_EQ(r.batches, 5);
  EXPECT_EQ(r.tokens, tokens);
  EXPECT_DOUBLE_EQ(r.loss, weighted / static_cast<double>(tokens));
  EXPECT_DOUBLE_EQ(r.perplexity, std::exp(r.loss));
  const EvalResult again = evaluate_split(*engine, loader, 5);
  EXPECT_EQ(again.loss, r.loss);
  const EvalResult all = evaluate_split(*engine, loader, 0);
  EXPECT_EQ(all.batches, loader.batches());
  // An untrained model is close to uniform over the 257 real ids.
  EXPECT_NEAR(all.loss, std::log(257.0), 0.3);
}

TEST(EvaluateSplit, NonFiniteLossIsAnError) {
  testing::TempDir tmp;
  testing::prepare_corpus(tmp.path());
  auto engine = make_cpu_engine(testing::small_model(), Recipe{}, 3);
  const auto p = engine->parameters().back();
  engine->write_parameter(p.name, std::vector<float>(static_cast<size_t>(p.numel()), std::nanf("")));
  LoaderOptions o;
  o.data = tmp / "shards";
  o.split = "val";
  o.batch = 2;
  o.seq = 16;
  ValidationLoader loader(o);
  EXPECT_THROW(evaluate_split(*engine, loader, 2), Error);
}

}  // namespace
}  // namespace fp4
