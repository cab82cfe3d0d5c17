// OsciReset's OutControl hook (OsciTarget::fp4_columns): after the freeze only the NVFP4 columns are
// quantized, tracked and reset, with Q(w) the quantizer over the gathered columns as the split layer sees
// them.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "../optim/memory_weights.h"
#include "core/error.h"
#include "nn/out_control.h"
#include "numerics/quantize.h"
#include "optim/osci_reset.h"

namespace fp4 {
namespace {

using testing::MemoryWeights;

TEST(OutControlOsciReset, OnlyFp4ColumnsAreTrackedAndResetToTheirGatheredGridPoints) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int64_t rows = 16, cols = 256;
  QuantSpec q2;
  q2.format = QuantFormat::kNvfp4;
  q2.outer = OuterScale::kBlock128;
  std::vector<double> score(cols);
  for (auto& s : score) s = std::uniform_real_distribution<double>(0, 1)(rng);
  const std::vector<int32_t> c8 = select_top_channels(score, 32), c4 = complement_channels(c8, cols);

  OsciResetConfig cfg;
  cfg.enabled = true;
  cfg.window = 4;
  cfg.period = 4;
  cfg.start = 1;
  cfg.threshold = 1e-6;  // every element whose grid point moved at all is reset
  OsciReset osci(cfg, 100, {OsciTarget{"w", rows, cols, q2, {}}});
  osci.set_fp4_columns("w", c4);
  EXPECT_THROW(osci.set_fp4_columns("nope", c4), Error);
  EXPECT_THROW(osci.set_fp4_columns("w", {0, int32_t(cols)}), Error);

  MemoryWeights mem;
  std::normal_distribution<float> d(0.0f, 1.0f);
  mem.w["w"].resize(size_t(rows * cols));
  for (auto& v : mem.w["w"]) v = d(rng);
  std::optional<OsciResetReport> report;
  std::vector<float> before;
  for (int64_t step = 1; step <= 5 && !report; ++step) {
    if (step > 1)
      for (auto& v : mem.w["w"]) v += 0.05f * d(rng);  // a random walk: many grid points change
    before = mem.w["w"];
    report = osci.after_step(step, mem);
  }
  ASSERT_TRUE(report.has_value());
  ASSERT_EQ(report->layers.size(), 1u);
  EXPECT_EQ(report->layers[0].tracked, rows * int64_t(c4.size()));
  EXPECT_GT(report->layers[0].reset, 0);

  // A reset element takes its grid point under the quantizer of the gathered C4 columns (zero-padded to
  // 128) of this step's weights; FP8 columns are never touched.
  const int64_t padded = (int64_t(c4.size()) + 127) / 128 * 128;
  std::vector<float> g(size_t(rows * padded), 0.0f), gq(g.size());
  for (int64_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < c4.size(); ++j) g[size_t(r * padded) + j] = before[size_t(r * cols + c4[j])];
  dequantize(quantize_nvfp4(g.data(), rows, padded, q2, QuantRandomness{}), gq.data());
  const std::vector<float>& after = mem.w["w"];
  int64_t changed = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int32_t c : c8)
      ASSERT_EQ(after[size_t(r * cols + c)], before[size_t(r * cols + c)]) << "FP8 column " << c;
    for (size_t j = 0; j < c4.size(); ++j) {
      const size_t e = size_t(r * cols + c4[j]);
      if (after[e] == before[e]) continue;
      ++changed;
      ASSERT_EQ(after[e], gq[size_t(r * padded) + j]) << "row " << r << " column " << c4[j];
    }
  }
  EXPECT_GT(changed, 0);
  EXPECT_LE(changed, report->layers[0].reset);
}

}  // namespace
}  // namespace fp4
