// The held-out evaluation suite: per-source losses equal the engine's loss over the same windows, the
// zero-shot items are deterministic and well-formed (the last word really ends a sentence right after its
// context; the true next sentence is the first choice), and the log-likelihood is the engine's.
#include "train/eval_suite.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "data/byte_tokenizer.h"
#include "model/cpu_engine.h"
#include "recipe/recipe_io.h"

namespace fp4 {
namespace {

std::vector<HeldOutSource> synthetic_sources(std::mt19937_64& rng, int n) {
  static const std::vector<std::string> words = {"alpha", "beta",  "gamma", "delta", "river", "stone",
                                                 "light", "house", "water", "north", "quiet", "table"};
  std::vector<HeldOutSource> out;
  for (int s = 0; s < n; ++s) {
    std::string text;
    for (int sent = 0; sent < 40; ++sent) {
      const int len = 4 + static_cast<int>(rng() % 8);
      for (int w = 0; w < len; ++w) text += (w ? " " : "") + words[rng() % words.size()];
      text += sent % 7 == 6 ? ".\n" : ". ";
    }
    out.push_back({"src/" + std::to_string(s), text});
  }
  return out;
}

TEST(EvalSuite, ZeroShotItemsAreDeterministicAndWellFormed) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto sources = synthetic_sources(rng, 5);
  const ByteTokenizer tok;
  const auto a = build_zero_shot_tasks(tok, sources, 6, 96, 128);
  const auto b = build_zero_shot_tasks(tok, sources, 6, 96, 128);
  ASSERT_EQ(a.size(), 2u);
  for (size_t t = 0; t < a.size(); ++t) {
    ASSERT_EQ(a[t].items.size(), b[t].items.size());
    EXPECT_EQ(a[t].items.size(), 30u) << a[t].name;  // 6 per source
    for (size_t i = 0; i < a[t].items.size(); ++i) {
      const ZeroShotItem& it = a[t].items[i];
      EXPECT_EQ(it.context, b[t].items[i].context);
      EXPECT_EQ(it.choices, b[t].items[i].choices);
      ASSERT_FALSE(it.context.empty());
      EXPECT_LE(it.context.size(), 96u);
      for (const auto& c : it.choices) EXPECT_LE(it.context.size() + c.size(), 128u);
      const std::string ctx = tok.decode(it.context), first = tok.decode(it.choices[0]);
      const std::string& text = sources[std::stoul(it.source.substr(4))].text;
      if (a[t].name == "last_word") {
        ASSERT_EQ(it.choices.size(), 1u);
        ASSERT_GE(first.size(), 4u);
        EXPECT_EQ(first[0], ' ');
        // Context then word, then the sentence's full stop, is a passage of the source.
        EXPECT_NE(text.find(ctx + first + "."), std::string::npos) << ctx << "|" << first;
      } else {
        ASSERT_EQ(it.choices.size(), 4u);
        EXPECT_NE(text.find(ctx), std::string::npos);
        // The first choice continues the context in the source (after one whitespace character).
        const size_t at = text.find(ctx);
        EXPECT_EQ(text.substr(at + ctx.size() + 1, first.size() - 1), first.substr(1));
      }
    }
  }
}

TEST(EvalSuite, PerSourceLossAndLikelihoodAreTheEngines) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto sources = synthetic_sources(rng, 2);
  const ByteTokenizer tok;
  const ModelConfig cfg = model_preset("tiny");
  auto engine = make_cpu_engine(cfg, load_recipe("bf16"), seed);
  const int seq = 32;
  const auto losses = per_source_loss(*engine, tok, sources, 3, seq, 4);
  ASSERT_EQ(losses.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    const auto ids = tok.encode(sources[s].text);
    double ce = 0;
    for (int w = 0; w < 4; ++w) {
      Batch b{1,
              seq,
              {ids.begin() + w * seq, ids.begin() + (w + 1) * seq},
              {ids.begin() + w * seq + 1, ids.begin() + (w + 1) * seq + 1}};
      ce += engine->evaluate(b).ce_loss * seq;
    }
    EXPECT_EQ(losses[s].tokens, 4 * seq);
    EXPECT_NEAR(losses[s].loss, ce / (4 * seq), 1e-6);
    EXPECT_NEAR(losses[s].perplexity, std::exp(losses[s].loss), 1e-9 * losses[s].perplexity);
    EXPECT_EQ(losses[s].name, sources[s].name);
  }
  // One continuation token: the log-softmax of last_logits at that id.
  const std::vector<int32_t> ctx = {72, 101, 108, 108};
  std::vector<float> logits(static_cast<size_t>(cfg.vocab_size));
  engine->last_logits(Batch{1, 4, ctx, {}}, logits);
  double z = 0;
  for (int v = 0; v < cfg.vocab_real; ++v) z += std::exp(static_cast<double>(logits[v]));
  EXPECT_NEAR(mean_log_likelihood(*engine, ctx, {111}), logits[111] - std::log(z), 1e-4);
  // Scores are counts over the items.
  const auto tasks = build_zero_shot_tasks(tok, synthetic_sources(rng, 4), 2, 48, 64);
  for (const auto& t : tasks) {
    const ZeroShotResult r = score_zero_shot(*engine, t);
    EXPECT_EQ(r.items, static_cast<int64_t>(t.items.size()));
    EXPECT_LE(r.correct, r.items);
  }
}

}  // namespace
}  // namespace fp4
