#include "train/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "test_util.h"
#include "train/file_io.h"

namespace fp4 {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

std::string captured(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

TEST(MetricsFile, RecordsRoundTripExactly) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(0, 10);
  std::vector<TrainRecord> written;
  {
    MetricsFile m(dir / "metrics.jsonl", 0);
    for (int s = 1; s <= 20; ++s) {
      TrainRecord r{s, s * 128, u(rng), u(rng), u(rng) * 1e-4, u(rng), u(rng) * 1e4, u(rng)};
      m.write(to_json(r));
      written.push_back(r);
    }
    m.write(to_json(EvalRecord{20, 2560, 1.25, std::exp(1.25), 4096, 3.5}));
  }
  const auto back = read_metrics(dir / "metrics.jsonl");
  ASSERT_EQ(back.size(), 21u);
  for (size_t i = 0; i < written.size(); ++i) {
    EXPECT_EQ(back[i]["type"], "train");
    EXPECT_EQ(back[i]["step"], written[i].step);
    EXPECT_EQ(back[i]["loss"].get<double>(), written[i].loss);  // shortest round-trip text: exact
    EXPECT_EQ(back[i]["grad_norm"].get<double>(), written[i].grad_norm);
  }
  EXPECT_EQ(back[20]["type"], "eval");
  EXPECT_EQ(back[20]["val_ppl"].get<double>(), std::exp(1.25));
}

// A resumed run keeps what its checkpoint had seen and drops later lines and a torn last line.
TEST(MetricsFile, ResumeKeepsStepsUpToTheCheckpoint) {
  TempDir dir;
  {
    MetricsFile m(dir / "metrics.jsonl", 0);
    for (int s = 1; s <= 9; ++s) m.write(to_json(TrainRecord{s, s, 1.0 / s}));
    m.write(to_json(EvalRecord{6, 6, 0.5, 1.6}));
  }
  {
    std::ofstream torn(dir / "metrics.jsonl", std::ios::app);
    torn << R"({"type": "train", "step": 10, "lo)";
  }
  MetricsFile m(dir / "metrics.jsonl", 6);
  m.write(to_json(TrainRecord{7, 7, 0.25}));
  const auto back = read_metrics(dir / "metrics.jsonl");
  ASSERT_EQ(back.size(), 8u);
  for (int s = 0; s < 6; ++s) EXPECT_EQ(back[s]["step"], s + 1);
  EXPECT_EQ(back[6]["type"], "eval");
  EXPECT_EQ(back[7]["loss"], 0.25);
  // A fresh run (keep 0) starts the file over.
  MetricsFile fresh(dir / "metrics.jsonl", 0);
  EXPECT_TRUE(read_metrics(dir / "metrics.jsonl").empty());
}

TEST(MetricsFile, BadLineIsNamed) {
  TempDir dir;
  write_file_synced(dir / "m.jsonl", "{\"step\": 1}\nnot json\n");
  try {
    read_metrics(dir / "m.jsonl");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("m.jsonl:2"));
  }
}

TEST(Format, DurationsAndCounts) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(59.4), "59s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(7620), "2h07m");
  EXPECT_EQ(format_duration(NAN), "?");
  EXPECT_EQ(format_count(950), "950");
  EXPECT_EQ(format_count(35240), "35.2k");
  EXPECT_EQ(format_count(1.48e6), "1.48M");
}

TEST(Progress, PlainLinesAtLogSteps) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::tmpfile(), &std::fclose);
  {
    Progress p(0, 100, /*bar=*/false, f.get());
    p.step(TrainRecord{1, 10, 3.0}, false);
    p.step(TrainRecord{10, 100, 2.5, 2.5, 1e-3, 0.5, 35240, 12}, true);
    p.eval(EvalRecord{10, 100, 2.0, std::exp(2.0), 5000, 13});
    p.message("saved checkpoint x");
  }
  const std::string out = captured(f.get());
  EXPECT_EQ(out.find("step 1/"), std::string::npos);
  EXPECT_THAT(out, HasSubstr("step 10/100 | loss 2.5000 | lr 1.000e-03 | grad norm 0.500 | 35.2k tok/s"));
  EXPECT_THAT(out, HasSubstr("eval step 10 | val loss 2.0000 | val ppl 7.389"));
  EXPECT_THAT(out, HasSubstr("saved checkpoint x\n"));
  EXPECT_EQ(out.find('\r'), std::string::npos);
}

TEST(Progress, BarRedrawsInPlace) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::tmpfile(), &std::fclose);
  {
    Progress p(50, 100, /*bar=*/true, f.get());
    p.step(TrainRecord{75, 0, 1.5, 1.5, 1e-3, 1, 2000}, true);
    p.message("eval line");
  }
  const std::string out = captured(f.get());
  EXPECT_THAT(out,
              HasSubstr("\r\033[2K[##################......] step 75/100 | 2.0k tok/s | loss 1.5000 | ETA"));
  // The message clears the bar, prints, and redraws it; finishing ends the line.
  EXPECT_THAT(out, HasSubstr("\r\033[2Keval line\n\r\033[2K[####"));
  EXPECT_EQ(out.back(), '\n');
}

}  // namespace
}  // namespace fp4
