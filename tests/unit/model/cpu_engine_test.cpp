#include "model/cpu_engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "../ops/gradcheck.h"
#include "core/error.h"
#include "engine_parameters.h"

namespace fp4 {
namespace {

using testing::all_parameters;

ModelConfig small_config() {
  ModelConfig cfg;
  cfg.name = "small";
  cfg.n_layers = 2;
  cfg.d_model = 32;
  cfg.n_heads = 4;
  cfg.d_ff = 64;
  cfg.vocab_size = 64;
  cfg.vocab_real = 50;
  cfg.max_seq_len = 16;
  return cfg;
}

Batch random_batch(std::mt19937& rng, const ModelConfig& cfg, int b, int t, int n_ignored = 0) {
  std::uniform_int_distribution<int> tok(0, cfg.vocab_real - 1);
  Batch batch{b, t, std::vector<int32_t>(static_cast<size_t>(b) * t),
              std::vector<int32_t>(static_cast<size_t>(b) * t)};
  for (auto& x : batch.tokens) x = tok(rng);
  for (auto& x : batch.targets) x = tok(rng);
  for (int i = 0; i < n_ignored; ++i) batch.targets[static_cast<size_t>(i * 3) % batch.targets.size()] = -1;
  return batch;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CpuEngine, DescribesItsParameters) {
  const ModelConfig cfg = model_preset("tiny");
  auto e = make_cpu_engine(cfg, Recipe{}, 1);
  EXPECT_EQ(e->device_name().rfind("cpu (OpenBLAS ", 0), 0u) << e->device_name();
  EXPECT_EQ(e->config().name, "tiny");
  int64_t total = 0;
  for (const auto& p : e->parameters()) total += p.numel();
  EXPECT_EQ(total, cfg.parameter_count());
  std::vector<float> buf(3);
  EXPECT_NE(error_of([&] { e->read_parameter("blocks.9.attn.wqkv", buf); }).find("blocks.9.attn.wqkv"),
            std::string::npos);
  EXPECT_NE(error_of([&] { e->read_parameter("final_norm", buf); }).find("final_norm"), std::string::npos);
}

TEST(CpuEngine, TrainingOnARepeatedBatchLowersTheLoss) {
  std::mt19937 rng(test::fresh_seed());
  const ModelConfig cfg = model_preset("tiny");
  auto e = make_cpu_engine(cfg, Recipe{}, 3);
  const Batch batch = random_batch(rng, cfg, 2, 64);
  StepHyper h;
  h.lr = 3e-3f;
  std::vector<double> losses;
  for (int step = 0; step < 30; ++step) losses.push_back(e->train_step({&batch, 1}, h).loss);
  // At init every one of the 257 ids is about equally likely.
  EXPECT_NEAR(losses.front(), std::log(257.0), 0.2);
  EXPECT_LT(losses.back(), losses.front() - 1.5) << "first " << losses.front() << " last " << losses.back();
  EXPECT_LT(e->evaluate(batch).loss, losses.front() - 1.5);
}

TEST(CpuEngine, StepStatsAreConsistent) {
  std::mt19937 rng(test::fresh_seed());
  const ModelConfig cfg = small_config();
  auto e = make_cpu_engine(cfg, Recipe{}, 5);
  const Batch batch = random_batch(rng, cfg, 3, 7, 4);
  const StepStats ev = e->evaluate(batch);
  EXPECT_EQ(ev.tokens, 3 * 7 - 4);
  StepHyper h;
  h.grad_clip = 0.0f;
  const StepStats st = e->train_step({&batch, 1}, h);
  EXPECT_EQ(st.tokens, ev.tokens);
  EXPECT_DOUBLE_EQ(st.ce_loss, ev.loss);  // evaluate reports cross-entropy without the z-loss
  EXPECT_GT(st.loss, st.ce_loss);         // z-loss is positive
  EXPECT_NEAR(st.loss - st.ce_loss, 1e-5 * std::pow(std::log(50.0), 2), 1e-5);
  EXPECT_GT(st.grad_norm, 0.0);
}

// Two micro-batches give the same step as one batch holding both: the loss is averaged over tokens.
TEST(CpuEngine, MicroBatchesAccumulateLikeOneBatch) {
  std::mt19937 rng(test::fresh_seed());
  const ModelConfig cfg = small_config();
  const Batch a = random_batch(rng, cfg, 1, 9, 5), b = random_batch(rng, cfg, 2, 9, 1);
  Batch ab{3, 9, a.tokens, a.targets};
  ab.tokens.insert(ab.tokens.end(), b.tokens.begin(), b.tokens.end());
  ab.targets.insert(ab.targets.end(), b.targets.begin(), b.targets.end());
  auto e1 = make_cpu_engine(cfg, Recipe{}, 11);
  auto e2 = make_cpu_engine(cfg, Recipe{}, 11);
  StepHyper h;
  h.lr = 1e-2f;
  h.grad_clip = 0.5f;
  h.eps = 1.0f;  // update ~ lr * g: smooth in g, so summation-order rounding stays rounding-sized
  const std::vector<Batch> micro = {a, b};
  const auto p0 = all_parameters(*e1);
  const StepStats s1 = e1->train_step(micro, h);
  const StepStats s2 = e2->train_step({&ab, 1}, h);
  EXPECT_EQ(s1.tokens, s2.tokens);
  EXPECT_NEAR(s1.loss, s2.loss, 1e-6 * s2.loss);
  EXPECT_NEAR(s1.grad_norm, s2.grad_norm, 1e-5 * s2.grad_norm);
  const auto p1 = all_parameters(*e1), p2 = all_parameters(*e2);
  double num = 0, den = 0;
  for (size_t i = 0; i < p1.size(); ++i) {  // compare the updates, not the weights
    num += std::pow(static_cast<double>(p1[i]) - p2[i], 2);
    den += std::pow(static_cast<double>(p2[i]) - p0[i], 2);
  }
  EXPECT_LT(std::sqrt(num / den), 1e-4);
}

TEST(CpuEngine, SaveLoadResumesBitForBit) {
  std::mt19937 rng(test::fresh_seed());
  const ModelConfig cfg = small_config();
  const Batch batch = random_batch(rng, cfg, 2, 8, 2), next = random_batch(rng, cfg, 2, 8);
  StepHyper h;
  h.lr = 5e-3f;
  auto a = make_cpu_engine(cfg, Recipe{}, 21);
  for (int i = 0; i < 3; ++i) a->train_step({&batch, 1}, h);
  const auto state = a->save_state();
  auto b = make_cpu_engine(cfg, Recipe{}, 99);  // different weights until the load
  b->load_state(state);
  EXPECT_EQ(all_parameters(*a), all_parameters(*b));
  const StepStats sa = a->train_step({&next, 1}, h);
  const StepStats sb = b->train_step({&next, 1}, h);
  EXPECT_EQ(sa.loss, sb.loss);
  EXPECT_EQ(sa.grad_norm, sb.grad_norm);
  const auto pa = all_parameters(*a), pb = all_parameters(*b);
  ASSERT_EQ(pa.size(), pb.size());
  EXPECT_EQ(std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)), 0);
  // The step counter travelled too: both saved states now agree byte for byte.
  const auto s2a = a->save_state(), s2b = b->save_state();
  ASSERT_EQ(s2a.size(), s2b.size());
  for (size_t i = 0; i < s2a.size(); ++i) {
    EXPECT_EQ(s2a[i].name, s2b[i].name);
    EXPECT_EQ(s2a[i].bytes, s2b[i].bytes) << s2a[i].name;
  }
}

TEST(CpuEngine, LoadStateRejectsMissingOrMismatchedTensors) {
  const ModelConfig cfg = small_config();
  auto e = make_cpu_engine(cfg, Recipe{}, 1);
  const auto good = e->save_state();
  auto missing = good;
  missing.erase(missing.begin() + 3);
  EXPECT_NE(error_of([&] { e->load_state(missing); }).find(good[3].name), std::string::npos);
  auto bad_shape = good;
  bad_shape[0].shape = {1, 2};
  EXPECT_NE(error_of([&] { e->load_state(bad_shape); }).find("'embed' has shape [1, 2]"), std::string::npos);
  auto bad_dtype = good;
  bad_dtype.back().dtype = "F32";
  EXPECT_NE(error_of([&] { e->load_state(bad_dtype); }).find("adamw.step"), std::string::npos);
  // A failed load leaves the engine unchanged.
  const auto before = all_parameters(*e);
  auto bad_last = good;
  for (auto& t : bad_last) std::fill(t.bytes.begin(), t.bytes.end(), 0);
  bad_last.back().shape = {2};
  EXPECT_THROW(e->load_state(bad_last), Error);
  EXPECT_EQ(all_parameters(*e), before);
}

TEST(CpuEngine, NanWeightGivesAClearError) {
  std::mt19937 rng(test::fresh_seed());
  const ModelConfig cfg = small_config();
  auto e = make_cpu_engine(cfg, Recipe{}, 2);
  const Batch batch = random_batch(rng, cfg, 2, 6);
  StepHyper h;
  e->train_step({&batch, 1}, h);
  std::vector<float> w(32 * 64);
  e->read_parameter("blocks.1.mlp.w_down", w);
  w[77] = std::numeric_limits<float>::quiet_NaN();
  e->write_parameter("blocks.1.mlp.w_down", w);
  const auto before = all_parameters(*e);
  const std::string msg = error_of([&] { e->train_step({&batch, 1}, h); });
  EXPECT_NE(msg.find("train step 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("blocks.1.mlp.w_down"), std::string::npos) << msg;
  EXPECT_NE(msg.find("element 77"), std::string::npos) << msg;
  // Nothing was updated.
  const auto after = all_parameters(*e);
  EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)), 0);
}

TEST(CpuEngine, InfiniteNormWeightIsNamedInTheBackward) {
  // An infinite entry in a padded LM-head row leaves the loss finite (padded ids are masked out), but
  // 0 * inf makes the backward NaN from the final norm on: the error names final_norm, the first
  // parameter in backward order whose gradient is not finite.
  std::mt19937 rng(test::fresh_seed());
  const ModelConfig cfg = small_config();
  auto e = make_cpu_engine(cfg, Recipe{}, 2);
  Batch batch = random_batch(rng, cfg, 1, 4);
  std::vector<float> head(64 * 32);
  e->read_parameter("lm_head", head);
  head[60 * 32 + 1] = std::numeric_limits<float>::infinity();  // a padded row: masked out of the loss
  e->write_parameter("lm_head", head);
  StepHyper h;
  const std::string msg = error_of([&] { e->train_step({&batch, 1}, h); });
  EXPECT_NE(msg.find("train step 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("non-finite gradient"), std::string::npos) << msg;
  EXPECT_NE(msg.find("final_norm"), std::string::npos) << msg;
}

TEST(CpuEngine, LastLogitsMatchTheLossAndMaskPaddedIds) {
  std::mt19937 rng(test::fresh_seed());
  const ModelConfig cfg = small_config();
  auto e = make_cpu_engine(cfg, Recipe{}, 4);
  Batch batch = random_batch(rng, cfg, 3, 5);
  // Only the last position of each row has a target: its loss is computed from the last logits.
  for (int r = 0; r < 3; ++r)
    for (int t = 0; t < 4; ++t) batch.targets[static_cast<size_t>(r * 5 + t)] = -1;
  std::vector<float> logits(3 * 64);
  e->last_logits(batch, logits);
  double ce = 0;
  for (int r = 0; r < 3; ++r) {
    double sum = 0;
    for (int j = 0; j < 64; ++j) {
      if (j >= 50) {
        EXPECT_EQ(logits[r * 64 + j], -std::numeric_limits<float>::infinity());
        continue;
      }
      EXPECT_TRUE(std::isfinite(logits[r * 64 + j]));
      sum += std::exp(static_cast<double>(logits[r * 64 + j]));
    }
    ce += std::log(sum) - logits[r * 64 + batch.targets[static_cast<size_t>(r * 5 + 4)]];
  }
  const StepStats ev = e->evaluate(batch);
  EXPECT_EQ(ev.tokens, 3);
  EXPECT_NEAR(ev.loss, ce / 3, 1e-5);
  std::vector<float> small(10);
  EXPECT_THROW(e->last_logits(batch, small), Error);
}

TEST(CpuEngine, BadInputsAreRejectedWithTheirPosition) {
  std::mt19937 rng(test::fresh_seed());
  const ModelConfig cfg = small_config();
  auto e = make_cpu_engine(cfg, Recipe{}, 1);
  StepHyper h;
  Batch batch = random_batch(rng, cfg, 2, 4);
  batch.tokens[5] = 64;
  EXPECT_NE(error_of([&] {
              e->train_step({&batch, 1}, h);
            }).find("token 64 at position 5"),
            std::string::npos);
  batch = random_batch(rng, cfg, 2, 4);
  batch.targets[6] = 50;
  EXPECT_NE(error_of([&] {
              e->train_step({&batch, 1}, h);
            }).find("target 50 at position 6"),
            std::string::npos);
  batch = random_batch(rng, cfg, 1, 17);
  EXPECT_NE(error_of([&] { e->evaluate(batch); }).find("max_seq_len"), std::string::npos);
  batch = random_batch(rng, cfg, 2, 4);
  batch.tokens.pop_back();
  EXPECT_THROW(e->train_step({&batch, 1}, h), Error);
  batch = random_batch(rng, cfg, 2, 4);
  std::fill(batch.targets.begin(), batch.targets.end(), -1);
  EXPECT_NE(error_of([&] { e->train_step({&batch, 1}, h); }).find("no target tokens"), std::string::npos);
  EXPECT_EQ(e->evaluate(batch).tokens, 0);
}

TEST(CpuEngine, UnknownOptimizersAreRefused) {
  Recipe muon;
  muon.optimizer = "muon";
  const std::string msg = error_of([&] { make_cpu_engine(small_config(), muon, 1); });
  EXPECT_NE(msg.find("optimizer 'muon'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace fp4
