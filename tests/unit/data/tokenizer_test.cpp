// load_tokenizer: the spec forms, the file formats, their errors, and the real GPT-2 files.
#include "data/tokenizer.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "data_test_util.h"
#include "gpt2_files_test_util.h"

namespace fp4 {
namespace {

using testing::hf_json;
using testing::TempDir;
using testing::write_file;
using testing::write_gpt2_files;
using Ids = std::vector<int32_t>;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LoadTokenizer, BytesSpecIsTheByteTokenizer) {
  auto t = load_tokenizer("bytes");
  EXPECT_EQ(t->name(), "bytes");
  EXPECT_EQ(t->vocab_size(), 257);
  EXPECT_EQ(t->eot_id(), 256);
  EXPECT_EQ(t->encode("A\xFF"), (Ids{65, 255}));
}

TEST(LoadTokenizer, Gpt2FilesInADirectory) {
  TempDir dir;
  write_gpt2_files(dir.path());
  auto t = load_tokenizer(dir.path().string());
  EXPECT_EQ(t->vocab_size(), 256 + 9 + 1);
  EXPECT_EQ(t->eot_id(), 265);
  auto ids = t->encode("hello world");
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_EQ(t->decode(ids), "hello world");
  EXPECT_EQ(t->token_bytes(ids[1]), " world");
}

TEST(LoadTokenizer, HfVocabAndMergesNames) {
  TempDir dir;
  write_gpt2_files(dir.path(), "vocab.json", "merges.txt");
  auto t = load_tokenizer(dir.path().string());
  EXPECT_EQ(t->encode("hello world").size(), 2u);
}

TEST(LoadTokenizer, HfTokenizerJsonWithBothMergeFormsAgrees) {
  TempDir dir;
  auto h = write_gpt2_files(dir / "gpt2");
  write_file(dir / "strings.json", hf_json(h, false, false).dump());
  write_file(dir / "pairs.json", hf_json(h, true, true).dump());
  write_file(dir / "indir" / "tokenizer.json", hf_json(h, true, false).dump());
  auto ref = load_tokenizer((dir / "gpt2").string());
  std::mt19937_64 rng(testing::fresh_seed());
  std::string text = "hello world, hello  worlds\n" + testing::random_text(rng, 300);
  for (const auto& spec : {dir / "strings.json", dir / "pairs.json", dir / "indir"}) {
    auto t = load_tokenizer(spec.string());
    EXPECT_EQ(t->encode(text), ref->encode(text)) << spec;
    EXPECT_EQ(t->eot_id(), ref->eot_id()) << spec;
    EXPECT_EQ(t->vocab_size(), ref->vocab_size()) << spec;
    EXPECT_EQ(t->name(), ref->name()) << spec;  // same content, same name
  }
  EXPECT_EQ(ref->name().rfind("bpe-266-", 0), 0u) << ref->name();
  // The name follows the content: other merges, another name.
  auto reordered = h;
  std::swap(reordered.merges[0], reordered.merges[1]);
  write_file(dir / "reordered.json", hf_json(reordered, true, false).dump());
  EXPECT_NE(load_tokenizer((dir / "reordered.json").string())->name(), ref->name());
}

TEST(LoadTokenizer, ErrorsNameTheSpecOrFile) {
  TempDir dir;
  auto msg = error_of([&] { load_tokenizer((dir / "nope").string()); });
  EXPECT_NE(msg.find("unknown tokenizer"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no such file"), std::string::npos) << msg;

  msg = error_of([&] { load_tokenizer(dir.path().string()); });
  EXPECT_NE(msg.find("holds neither"), std::string::npos) << msg;

  write_file(dir / "only" / "encoder.json", "{}");
  msg = error_of([&] { load_tokenizer((dir / "only").string()); });
  EXPECT_NE(msg.find("no merges file"), std::string::npos) << msg;

  write_gpt2_files(dir / "corrupt");
  write_file(dir / "corrupt" / "encoder.json", "{\"a\": 0, ");
  msg = error_of([&] { load_tokenizer((dir / "corrupt").string()); });
  EXPECT_NE(msg.find("encoder.json is not valid JSON"), std::string::npos) << msg;

  write_gpt2_files(dir / "badmerge");
  write_file(dir / "badmerge" / "vocab.bpe", "#version: 0.2\nh e\nll\n");
  msg = error_of([&] { load_tokenizer((dir / "badmerge").string()); });
  EXPECT_NE(msg.find("vocab.bpe line 3"), std::string::npos) << msg;

  write_file(dir / "notbpe.json", R"({"model": {"type": "WordPiece", "vocab": {}}})");
  msg = error_of([&] { load_tokenizer((dir / "notbpe.json").string()); });
  EXPECT_NE(msg.find("only BPE"), std::string::npos) << msg;

  write_file(dir / "nomerges.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}}})");
  msg = error_of([&] { load_tokenizer((dir / "nomerges.json").string()); });
  EXPECT_NE(msg.find("model.merges is missing"), std::string::npos) << msg;

  msg = error_of([&] { load_tokenizer((dir / "absent.json").string()); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

// The real GPT-2 files, when scripts/fetch_corpus.sh has put them in data/tokenizers/gpt2.
class Gpt2Files : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(FP4_SOURCE_DIR) / "data" / "tokenizers" / "gpt2";
    if (!std::filesystem::exists(dir_ / "encoder.json") || !std::filesystem::exists(dir_ / "vocab.bpe")) {
      GTEST_SKIP() << "GPT-2 files not found in " << dir_ << ": run scripts/fetch_corpus.sh to fetch them";
    }
    tok_ = load_tokenizer(dir_.string());
  }
  std::filesystem::path dir_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(Gpt2Files, HelloWorld) {
  EXPECT_EQ(tok_->encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(tok_->vocab_size(), 50257);
  EXPECT_EQ(tok_->eot_id(), 50256);
  EXPECT_EQ(tok_->decode(Ids{15496, 995, 50256}), "Hello world<|endoftext|>");
}

// Ids from the gpt-3-encoder@1.1.4 JavaScript encoder on the same strings.
TEST_F(Gpt2Files, AgreesWithTheReferenceEncoder) {
  EXPECT_EQ(tok_->encode("The quick brown fox jumps over the lazy dog."),
            (Ids{464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13}));
  EXPECT_EQ(
      tok_->encode("I'm here, they've  gone!\n\n  ok 123 h\xC3\xA9llo \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E"),
      (Ids{40,    1101, 994,  11,    484,   1053, 220, 3750,  0,   628,   220, 12876,
           17031, 289,  2634, 18798, 10545, 245,  98,  17312, 105, 45739, 252}));
  EXPECT_EQ(tok_->encode("    indented\tcode();\r\n"),
            (Ids{220, 220, 220, 773, 4714, 197, 8189, 9783, 201, 198}));
  EXPECT_EQ(tok_->encode("<|endoftext|>"), (Ids{27, 91, 437, 1659, 5239, 91, 29}));
}

TEST_F(Gpt2Files, RoundTripsRandomBytes) {
  uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 100; ++i) {
    std::string s = i % 2 ? testing::random_bytes(rng, rng() % 400) : testing::random_text(rng, rng() % 200);
    ASSERT_EQ(tok_->decode(tok_->encode(s)), s);
  }
}

}  // namespace
}  // namespace fp4
