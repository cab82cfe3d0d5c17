#include "train/sample.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "model/cpu_engine.h"
#include "test_util.h"

namespace fp4 {
namespace {

std::vector<float> random_logits(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> d(0, 2);
  std::vector<float> l(n);
  for (auto& x : l) x = d(rng);
  return l;
}

TEST(SampleToken, GreedyAndTopOneAreTheArgmax) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 50; ++trial) {
    const auto l = random_logits(rng, rng() % 300 + 1);
    const auto best = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    EXPECT_EQ(sample_token(l, static_cast<int>(l.size()), 0.0f, 0, u), best);
    EXPECT_EQ(sample_token(l, static_cast<int>(l.size()), 1.0f, 1, u), best);
  }
  // Ties go to the lower id.
  EXPECT_EQ(sample_token(std::vector<float>{1, 3, 3, 0}, 4, 0.0f, 0, 0.5), 1);
}

// With u on a fine grid the chosen frequencies are the softmax(l / T) probabilities.
TEST(SampleToken, FrequenciesFollowTheSoftmax) {
  std::mt19937_64 rng(std::random_device{}());
  const auto l = random_logits(rng, 6);
  const float temp = 0.7f;
  std::vector<double> p(l.size());
  double z = 0;
  for (size_t i = 0; i < l.size(); ++i) z += p[i] = std::exp(l[i] / temp);
  std::vector<int> count(l.size());
  const int n = 100000;
  for (int i = 0; i < n; ++i) ++count[sample_token(l, 6, temp, 0, (i + 0.5) / n)];
  for (size_t i = 0; i < l.size(); ++i) EXPECT_NEAR(count[i] / double(n), p[i] / z, 2e-4) << i;
}

TEST(SampleToken, TopKAndPaddedIdsAreNeverChosen) {
  std::mt19937_64 rng(std::random_device{}());
  auto l = random_logits(rng, 64);
  l[60] = 100;  // a padded id (>= vocab_real 50) with a huge logit
  std::vector<int32_t> order(50);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
  const std::set<int32_t> top5(order.begin(), order.begin() + 5);
  for (int i = 0; i < 2000; ++i) {
    const int32_t id = sample_token(l, 50, 1.5f, 5, (i + 0.5) / 2000);
    EXPECT_TRUE(top5.count(id)) << id;
  }
  EXPECT_LT(sample_token(l, 50, 0.0f, 0, 0.5), 50);
  EXPECT_THROW(sample_token(std::vector<float>{NAN, 1}, 2, 1.0f, 0, 0.5), Error);
  EXPECT_THROW(sample_token(l, 50, -1.0f, 0, 0.5), Error);
}

TEST(Generate, SeededAndStopsAtTheStopToken) {
  auto engine = make_cpu_engine(testing::small_model(), Recipe{}, std::random_device{}());
  SampleOptions o;
  o.max_new_tokens = 20;
  o.temperature = 1.0f;
  o.top_k = 0;
  o.context = 8;
  const std::vector<int32_t> prompt = {72, 101, 108, 108, 111};
  std::vector<int32_t> streamed;
  const auto a = generate(*engine, prompt, o, [&](int32_t id) { streamed.push_back(id); });
  EXPECT_EQ(a.size(), 20u);
  EXPECT_EQ(streamed, a);
  EXPECT_EQ(generate(*engine, prompt, o), a);
  for (int32_t id : a) EXPECT_LT(id, 257);
  o.seed = 2;
  const auto b = generate(*engine, prompt, o);
  EXPECT_NE(b, a);  // 20 draws from a near-uniform 257-way distribution
  o.seed = 1;
  o.stop_id = a[3];
  const auto stopped = generate(*engine, prompt, o);
  EXPECT_LE(stopped.size(), 4u);
  EXPECT_EQ(stopped.back(), a[3]);
  EXPECT_THROW(generate(*engine, {}, o), Error);
  EXPECT_THROW(generate(*engine, {300}, o), Error);
}

}  // namespace
}  // namespace fp4
