// The run's data setup, without a trainer: text lists split on commas, a prepared directory is read as it
// is, an unprepared one is prepared from the text (with log lines) or refused with what to run, and shards
// whose tokenizer or vocabulary do not fit the run are named.
#include "train/data_setup.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "data/manifest.h"
#include "test_util.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using ::testing::HasSubstr;
using testing::TempDir;

TEST(DataSetup, TextPathsSplitOnCommasAndSkipEmptyEntries) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<fs::path> want;
    std::string list;
    for (int k = static_cast<int>(rng() % 6); k > 0; --k) {
      if (!list.empty() || rng() % 3 == 0) list += ',';
      for (int e = static_cast<int>(rng() % 3); e > 0 && rng() % 2; --e) list += ',';  // empty entries
      std::string p = rng() % 2 ? "data/corpus/" : "/abs/";
      for (int c = 1 + static_cast<int>(rng() % 8); c > 0; --c) p += static_cast<char>('a' + rng() % 26);
      list += p;
      want.emplace_back(p);
    }
    if (rng() % 2) list += ',';
    EXPECT_EQ(text_paths(list), want) << "'" << list << "'";
  }
  EXPECT_TRUE(text_paths("").empty());
  EXPECT_TRUE(text_paths(",,,").empty());
}

TEST(DataSetup, PreparedDirectoriesAreReadAndTextIsPreparedOnFirstUse) {
  TempDir tmp;
  testing::prepare_corpus(tmp.path());
  RunConfig c = testing::small_run_config(tmp.path(), "run", 2, 1, 2, 2);
  std::vector<std::string> log;
  const auto keep = [&](const std::string& s) { log.push_back(s); };
  // Already prepared: read as it is, nothing logged.
  const Manifest have = ensure_prepared_data(c, keep);
  EXPECT_TRUE(log.empty());
  EXPECT_EQ(have.train.tokens, read_manifest(tmp / "shards").train.tokens);
  EXPECT_NO_THROW(check_data_fits(c, have, "data.train_dir"));
  // Not yet: prepared from the text lists, saying so.
  c.data.train_dir = (tmp / "fresh").string();
  c.data.train_text = (tmp / "text/train").string();
  c.data.val_text = (tmp / "text/val").string();
  c.data.tokenizer = "bytes";
  const Manifest made = ensure_prepared_data(c, keep);
  EXPECT_TRUE(fs::exists(tmp / "fresh" / kManifestName));
  EXPECT_EQ(made.train.tokens, have.train.tokens);  // the same text, the same tokens
  EXPECT_EQ(made.val.tokens, have.val.tokens);
  ASSERT_GE(log.size(), 2u);
  EXPECT_THAT(log.front(), HasSubstr("preparing " + (tmp / "fresh").string()));
  EXPECT_THAT(log.back(), HasSubstr("prepared " + std::to_string(made.train.tokens) + " train"));
  // Without val_text 5% of the documents are held out.
  c.data.train_dir = (tmp / "holdout").string();
  c.data.val_text = "";
  const Manifest held = ensure_prepared_data(c, keep);
  EXPECT_GT(held.val.tokens, 0);
  EXPECT_LT(held.val.tokens, held.train.tokens);
}

TEST(DataSetup, MissingDataAndMisfitsAreNamed) {
  TempDir tmp;
  testing::prepare_corpus(tmp.path());
  RunConfig c = testing::small_run_config(tmp.path(), "run", 2, 1, 2, 2);
  const auto quiet = [](const std::string&) {};
  c.data.train_dir = (tmp / "none").string();
  EXPECT_THAT(error_of([&] { ensure_prepared_data(c, quiet); }), HasSubstr("fp4train prepare"));
  c.data.train_text = (tmp / "no-corpus").string();
  EXPECT_THAT(error_of([&] { ensure_prepared_data(c, quiet); }), HasSubstr("no-corpus is missing"));
  c.data.train_text = (tmp / "text/train").string();
  c.data.val_text = (tmp / "no-val").string();
  c.data.tokenizer = "bytes";
  EXPECT_THAT(error_of([&] { ensure_prepared_data(c, quiet); }), HasSubstr("no-val is missing"));
  c.data.val_text = "";
  c.data.tokenizer = "";
  EXPECT_THAT(error_of([&] { ensure_prepared_data(c, quiet); }), HasSubstr("data.tokenizer must be set"));
  EXPECT_FALSE(fs::exists(tmp / "none"));  // nothing was written by the refusals

  const Manifest m = read_manifest(tmp / "shards");
  RunConfig small = c;
  small.model.vocab_real = 200;
  EXPECT_THAT(
      error_of([&] { check_data_fits(small, m, "data.train_dir"); }),
      HasSubstr("data.train_dir: the tokenizer's vocabulary (257) does not fit model.vocab_real 200"));
  // Another tokenizer than the shards': a hand-made BPE of another vocabulary.
  Manifest other = m;
  other.tokenizer = "gpt2-files";
  other.tokenizer_name = "bpe-1000-abc";
  other.vocab_size = 1000;
  RunConfig bytes = c;
  bytes.data.tokenizer = "bytes";
  EXPECT_THAT(error_of([&] { check_data_fits(bytes, other, "data.val_dir"); }),
              HasSubstr("data.val_dir was prepared with tokenizer 'gpt2-files'"));
}

}  // namespace
}  // namespace fp4
