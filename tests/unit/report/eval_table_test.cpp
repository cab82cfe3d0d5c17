// fp4train report's evaluation-suite table: one row per run with an eval.json, every task and source a
// column (a dash where a run lacks it), nothing without eval.json, a clear error for a malformed one.
#include "report/eval_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "train/eval_suite.h"

namespace fp4 {
namespace {
namespace fs = std::filesystem;

TEST(EvalTable, RowsPerRunColumnsPerTaskAndSource) {
  const fs::path root =
      fs::temp_directory_path() / ("fp4_eval_table_" + std::to_string(std::random_device{}()));
  fs::create_directories(root / "a");
  fs::create_directories(root / "b");
  fs::create_directories(root / "c");
  std::ofstream(root / "a" / "eval.json")
      << eval_suite_json("ck", 2.0, 7.389, 100, {{"books/x", 2.1, 8.166, 50}}, {{"last_word", 40, 10}});
  std::ofstream(root / "b" / "eval.json")
      << eval_suite_json("ck", 2.5, 12.18, 100, {{"speech/y", 2.4, 11.02, 50}}, {{"next_sentence", 20, 5}});
  const std::string t =
      eval_suite_table({(root / "a").string(), (root / "b").string(), (root / "c").string()},
                       {"bf16", "tetrajet-v2-base", "none"});
  EXPECT_THAT(t, ::testing::HasSubstr("| run | val ppl | last_word acc (items) | next_sentence acc (items) | "
                                      "books/x ppl | speech/y ppl |"));
  EXPECT_THAT(t, ::testing::HasSubstr("| bf16 | 7.389 | 0.250 (40) | - | 8.166 | - |"));
  EXPECT_THAT(t, ::testing::HasSubstr("| tetrajet-v2-base | 12.180 | - | 0.250 (20) | - | 11.020 |"));
  EXPECT_THAT(t, ::testing::Not(::testing::HasSubstr("none")));
  EXPECT_EQ(eval_suite_table({(root / "c").string()}, {"none"}), "");
  std::ofstream(root / "c" / "eval.json") << "{\"val\": 1}";
  EXPECT_THROW(eval_suite_table({(root / "c").string()}, {"none"}), Error);
  fs::remove_all(root);
}

}  // namespace
}  // namespace fp4
