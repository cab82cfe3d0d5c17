// The checks every engine makes on a batch: random valid batches pass (ignored targets, the largest token
// and target ids, seq = max_seq_len), each kind of fault is named with its position; count_targets counts
// the targets >= 0.
#include "model/engine_common.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/error.h"

namespace fp4 {
namespace {

std::string error_of(const Batch& b, const ModelConfig& cfg, bool check_targets = true) {
  try {
    check_batch(b, cfg, "train batch", check_targets);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Batch random_batch(const ModelConfig& cfg, std::mt19937& rng) {
  Batch b;
  b.batch = 1 + static_cast<int>(rng() % 4);
  b.seq = 1 + static_cast<int>(rng() % cfg.max_seq_len);
  for (int i = 0; i < b.batch * b.seq; ++i) {
    b.tokens.push_back(static_cast<int32_t>(rng() % cfg.vocab_size));
    const bool ignored = rng() % 5 == 0;
    b.targets.push_back(ignored ? -1 - static_cast<int32_t>(rng() % 100)
                                : static_cast<int32_t>(rng() % cfg.vocab_real));
  }
  return b;
}

TEST(EngineCommon, RandomValidBatchesPassAndTargetsAreCounted) {
  std::mt19937 rng(std::random_device{}());
  const ModelConfig cfg;
  for (int trial = 0; trial < 200; ++trial) {
    Batch b = random_batch(cfg, rng);
    if (trial == 0) {  // the largest ids that fit
      b.tokens[0] = cfg.vocab_size - 1;
      b.targets[0] = cfg.vocab_real - 1;
    }
    EXPECT_EQ(error_of(b, cfg), "") << "trial " << trial;
    int64_t want = 0;
    for (const int32_t t : b.targets) want += t >= 0;
    EXPECT_EQ(count_targets(b), want);
  }
  Batch full;
  full.batch = 1;
  full.seq = cfg.max_seq_len;
  full.tokens.assign(cfg.max_seq_len, 0);
  full.targets.assign(cfg.max_seq_len, -1);
  EXPECT_EQ(error_of(full, cfg), "");
  EXPECT_EQ(count_targets(full), 0);
}

TEST(EngineCommon, EachFaultIsNamedWithItsPosition) {
  std::mt19937 rng(std::random_device{}());
  const ModelConfig cfg;
  const Batch good = random_batch(cfg, rng);
  const size_t at = rng() % good.tokens.size();
  const std::string pos = "at position " + std::to_string(at);
  auto expect = [&](const Batch& b, const std::string& says, bool check_targets = true) {
    const std::string msg = error_of(b, cfg, check_targets);
    EXPECT_EQ(msg.rfind("train batch: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(says), std::string::npos) << msg;
  };
  Batch b = good;
  b.tokens[at] = cfg.vocab_size;
  expect(b, "token " + std::to_string(cfg.vocab_size) + " " + pos + " is outside the embedding table");
  b.tokens[at] = -1;
  expect(b, "token -1 " + pos);
  b = good;
  b.targets[at] = cfg.vocab_real;  // a padded embedding row is never a target
  expect(b, "target " + std::to_string(cfg.vocab_real) + " " + pos + " is outside the vocabulary");
  EXPECT_EQ(error_of(b, cfg, /*check_targets=*/false), "");  // inference batches carry no targets
  b = good;
  b.targets.pop_back();
  expect(b, std::to_string(good.targets.size() - 1) + " targets for shape");
  b = good;
  b.tokens.push_back(0);
  expect(b, std::to_string(good.tokens.size() + 1) + " tokens for shape");
  b = good;
  b.seq = cfg.max_seq_len + 1;
  expect(b, "exceeds max_seq_len");
  b = good;
  b.batch = 0;
  expect(b, "empty batch shape 0 x");
}

}  // namespace
}  // namespace fp4
