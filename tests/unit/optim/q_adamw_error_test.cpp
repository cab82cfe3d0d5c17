// The CPU measurements of Q-AdamW's claims (fp4train optim-claims): the second moment's errors under the
// codec and plain NVFP4 storage, and the state bytes.
#include "optim/q_adamw_error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/model_config.h"
#include "optim/quantized_moments.h"

namespace fp4 {
namespace {

TEST(QAdamWClaims, StateBytesAreThePackedMoments) {
  std::mt19937 rng(std::random_device{}());
  for (int64_t n : {int64_t{1}, int64_t{16}, int64_t{127}, int64_t{128}, int64_t{129}, int64_t{5000},
                    static_cast<int64_t>(1 + rng() % 20000)}) {
    std::vector<float> m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
    std::normal_distribution<float> g;
    for (size_t i = 0; i < m.size(); ++i) m[i] = g(rng), v[i] = m[i] * m[i];
    EXPECT_EQ(q_adamw_state_bytes(n), encode_first_moment(m, RngStream{1, 0}).packed_bytes() +
                                          encode_second_moment(v, RngStream{1, 1}).packed_bytes())
        << n;
  }
}

TEST(QAdamWClaims, PlainStorageFlushesTheSmallSecondMomentsTheCodecKeeps) {
  // Two populations 2^-20 apart in one 16-block: plain NVFP4 (E2M1 x E4M3 block scale) cannot hold both,
  // the codec stores sqrt(v) and so needs only 2^-10.
  std::vector<float> v(4096);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 16 == 0) ? 1.0f : 1e-6f * (1 + (i % 7) * 0.1f);
  const SecondMomentErrors e = second_moment_errors(v, 1e-8f, 3);
  EXPECT_GT(e.plain_flushed, 0.9);
  EXPECT_LT(e.codec_flushed, e.plain_flushed);
  EXPECT_LT(e.codec_step_err, e.plain_step_err);
  // Exact zeros stay zero and do not count as flushed.
  std::vector<float> z(256, 0.0f);
  z[3] = 1.0f;
  const SecondMomentErrors ze = second_moment_errors(z, 1e-8f, 3);
  EXPECT_EQ(ze.plain_flushed, 0.0);
  EXPECT_LT(ze.plain_rel_l2, 1e-6);
}

// The synthetic second moment: the size asked for, v >= 0, a pure function of the seed, and heavy-tailed
// (the row and column scales spread it over decades).
TEST(QAdamWClaims, SyntheticSecondMomentIsSeededNonNegativeAndSpread) {
  std::mt19937 rng(std::random_device{}());
  const int64_t rows = 1 + rng() % 40, cols = 16 * (1 + rng() % 8);
  const uint64_t seed = rng();
  const std::vector<float> v = synthetic_second_moment(rows, cols, seed);
  ASSERT_EQ(static_cast<int64_t>(v.size()), rows * cols);
  for (const float x : v) ASSERT_TRUE(std::isfinite(x) && x >= 0) << x;
  EXPECT_EQ(synthetic_second_moment(rows, cols, seed), v);
  EXPECT_NE(synthetic_second_moment(rows, cols, seed + 1), v);
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  if (rows * cols >= 256) {
    EXPECT_GT(*hi, 100 * *lo) << "not spread";
  }
}

// The memory table: one row per model whose FP32 and BF16 columns are 8 and 4 bytes per parameter, and
// Q-AdamW below BF16-state AdamW.
TEST(QAdamWClaims, MemoryTableRowsFollowTheParameterCounts) {
  std::vector<ModelConfig> models;
  for (const std::string& name : model_preset_names()) models.push_back(model_preset(name));
  ASSERT_FALSE(models.empty());
  const std::string t = optimizer_memory_table(models);
  for (const ModelConfig& m : models) {
    const size_t at = t.find("| " + m.name + " |");
    ASSERT_NE(at, std::string::npos) << m.name << "\n" << t;
    const std::string row = t.substr(at, t.find('\n', at) - at);
    const double p = static_cast<double>(m.parameter_count());
    char want[128];
    std::snprintf(want, sizeof want, "| %.2fM | %.1f MiB | %.1f MiB |", p / 1e6, 8 * p / 1048576,
                  4 * p / 1048576);
    EXPECT_NE(row.find(want), std::string::npos) << row;
    EXPECT_NE(row.find("| -"), std::string::npos) << "Q-AdamW should need less than BF16 state: " << row;
  }
  EXPECT_EQ(std::count(t.begin(), t.end(), '\n'), static_cast<long>(models.size()) + 2);
}

}  // namespace
}  // namespace fp4
