// fp4train report over a damaged metrics.jsonl: a line that is not an object, or a record without the
// fields the report reads, is an fp4::Error naming the file, the line and the field (never a library
// exception, never silently skipped).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "../train/test_util.h"
#include "core/error.h"
#include "report/report.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;

// A run directory whose metrics.jsonl holds `good` valid train records, then `bad`, then one more.
fs::path run_with_line(const fs::path& root, int good, const std::string& bad, std::mt19937& rng) {
  const fs::path dir = root / ("run" + std::to_string(rng()));
  fs::create_directories(dir);
  std::ofstream m(dir / "metrics.jsonl");
  std::uniform_real_distribution<double> loss(1.0, 6.0);
  for (int step = 1; step <= good; ++step)
    m << "{\"type\":\"train\",\"step\":" << step << ",\"tokens\":" << step * 64 << ",\"loss\":" << loss(rng)
      << "}\n";
  m << bad << "\n";
  m << "{\"type\":\"train\",\"step\":" << good + 1 << ",\"tokens\":" << (good + 1) * 64 << ",\"loss\":2}\n";
  return dir;
}

struct BadLine {
  std::string text;
  std::string names;  // what the message must name besides file:line
};

TEST(ReportMetricsRecords, LineWithoutTheFieldsIsAnErrorNamingFileLineAndField) {
  std::mt19937 rng(std::random_device{}());
  fp4::testing::TempDir tmp;
  const std::vector<BadLine> cases = {
      {"{}", "\"type\""},
      {"{\"type\":\"train\"}", "\"step\""},
      {"{\"type\":\"train\",\"step\":3,\"tokens\":192}", "\"loss\""},
      {"{\"type\":\"train\",\"tokens\":5,\"loss\":1}", "\"step\""},
      {"{\"type\":\"train\",\"step\":\"3\",\"tokens\":5,\"loss\":1}", "\"step\""},
      {"{\"type\":\"train\",\"step\":-3,\"tokens\":5,\"loss\":1}", "\"step\""},
      {"{\"type\":\"train\",\"step\":3,\"tokens\":5.5,\"loss\":1}", "\"tokens\""},
      {"{\"type\":\"train\",\"step\":3,\"tokens\":5,\"loss\":\"low\"}", "\"loss\""},
      {"{\"type\":\"train\",\"step\":3,\"tokens\":5,\"loss\":1,\"tokens_per_s\":[]}", "\"tokens_per_s\""},
      {"{\"type\":7}", "\"type\""},
      {"{\"type\":\"eval\",\"tokens\":5}", "\"val_loss\""},
      {"{\"type\":\"eval\",\"tokens\":5,\"val_loss\":3}", "\"val_ppl\""},
      {"{\"type\":\"osci_reset\",\"step\":4}", "\"layers\""},
      {"{\"type\":\"osci_reset\",\"step\":4,\"layers\":{}}", "\"layers\""},
      {"{\"type\":\"osci_reset\",\"step\":4,\"layers\":[5]}", "\"layers\""},
      {"{\"type\":\"osci_reset\",\"step\":4,\"layers\":[{\"name\":\"w\"}]}", "\"tracked\""},
      {"{\"type\":\"osci_reset\",\"step\":4,\"layers\":[{\"name\":\"w\",\"tracked\":2,\"reset\":0,"
       "\"mean_risk\":1,\"flips\":3}]}",
       "\"flip_rate\""},
      {"{\"type\":\"osci_reset\",\"step\":4,\"layers\":[{\"name\":\"w\",\"tracked\":2,\"reset\":0,"
       "\"mean_risk\":1,\"flip_rate\":0.5}]}",
       "\"flips\""},
      {"{\"type\":\"osci_reset\",\"step\":4,\"layers\":[{\"name\":\"w\",\"tracked\":2,\"reset\":0,"
       "\"mean_risk\":1,\"flips\":-1,\"flip_rate\":0.5}]}",
       "\"flips\""},
      {"{\"type\":\"out_control\",\"step\":4,\"layers\":[{\"name\":\"w\",\"channels\":1,\"in_features\":8}]}",
       "\"share\""},
      {"5", "not a JSON object"},
      {"[1, 2]", "not a JSON object"},
      {"\"train\"", "not a JSON object"},
      {"null", "not a JSON object"},
      {"{\"type\":\"tr", "not valid JSON"},
  };
  std::uniform_int_distribution<int> good(0, 7);
  for (const BadLine& c : cases) {
    const int before = good(rng);
    const fs::path dir = run_with_line(tmp.path(), before, c.text, rng);
    const std::string where = (dir / "metrics.jsonl").string() + ":" + std::to_string(before + 1) + ":";
    try {
      summarize_run(dir);
      ADD_FAILURE() << "accepted " << c.text;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(where), std::string::npos) << c.text << " -> " << msg;
      EXPECT_NE(msg.find(c.names), std::string::npos) << c.text << " -> " << msg;
      EXPECT_NE(msg.find("accepted"), std::string::npos) << c.text << " -> " << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.text << " -> not an fp4::Error: " << e.what();
    }
  }
}

// What stays accepted: a diverged loss logged as null (read as NaN), records of types the report does
// not show (error, init_from, later versions) whatever their fields, empty lines.
TEST(ReportMetricsRecords, NullLossesOtherTypesAndEmptyLinesAreAccepted) {
  std::mt19937 rng(std::random_device{}());
  fp4::testing::TempDir tmp;
  const fs::path dir = run_with_line(tmp.path(), 3,
                                     "{\"type\":\"error\",\"message\":\"save failed\"}\n\n"
                                     "{\"type\":\"init_from\",\"step\":0}\n{\"type\":\"future\"}\n"
                                     "{\"type\":\"train\",\"step\":4,\"tokens\":256,\"loss\":null}",
                                     rng);
  const RunSummary s = summarize_run(dir);
  ASSERT_EQ(s.train_loss.size(), 5u);
  EXPECT_TRUE(std::isnan(s.train_loss[3]));
  EXPECT_EQ(s.last_step, 4);
  EXPECT_EQ(s.tokens, 256);
}

}  // namespace
}  // namespace fp4
