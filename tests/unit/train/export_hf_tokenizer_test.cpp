// tokenizer.json of an export: the structure transformers' fast tokenizer reads, the vocabulary and merges
// round-tripped, and, loaded back by fp4train's own BPE, the same ids as the run's tokenizer on random text
// (any bytes, invalid UTF-8, the end-of-text string written out, whitespace runs).
#include "train/export_hf_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/byte_tokenizer.h"
#include "data/byte_unicode.h"
#include "data/read_file.h"
#include "test_util.h"

namespace fp4 {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Random text over pieces the merges below act on, plus arbitrary bytes (some invalid UTF-8).
std::string random_text(std::mt19937_64& rng, size_t pieces) {
  static const std::vector<std::string> words = {
      "the", " the", " The", "ab", "abab", " a", "b", "th",     "e",    "  ",
      "\n",  "\n\n", "\t",   "'s", " 42",  "7",  "é", " naïve", "中文", "<|endoftext|>",
      "!?",  " ..."};
  std::string s;
  for (size_t i = 0; i < pieces; ++i) {
    if (rng() % 8 == 0)
      s += static_cast<char>(rng() % 256);
    else
      s += words[rng() % words.size()];
  }
  return s;
}

ByteLevelBpe small_gpt2() {
  nlohmann::json vocab;
  for (int b = 0; b < 256; ++b) vocab[bytes_to_vocab_string(std::string(1, static_cast<char>(b)))] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"t", "h"}, {"h", "e"}, {"Ġ", "t"}, {"Ġt", "he"}, {"a", "b"}, {"ab", "ab"}, {"Ġ", "a"}, {"Ã", "©"}};
  int id = 256;
  std::string merges_txt = "#version: 0.2\n";
  for (const auto& [a, b] : merges) {
    vocab[a + b] = id++;
    merges_txt += a + " " + b + "\n";
  }
  return read_gpt2_bpe(vocab.dump(), merges_txt);
}

fs::path write_json(const fs::path& dir, const std::string& name, const nlohmann::ordered_json& j) {
  fs::create_directories(dir);
  const fs::path p = dir / name;
  std::ofstream(p) << j.dump(1);
  return p;
}

TEST(ExportTokenizer, StructureIsTokenizersByteLevelBpe) {
  const ByteLevelBpe bpe = small_gpt2();
  const auto j = hf_tokenizer_json(bpe);
  EXPECT_EQ(j["version"], "1.0");
  EXPECT_EQ(j["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ(j["pre_tokenizer"]["add_prefix_space"], false);
  EXPECT_EQ(j["pre_tokenizer"]["use_regex"], true);
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  EXPECT_TRUE(j["normalizer"].is_null());
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_TRUE(j["model"]["unk_token"].is_null());
  EXPECT_EQ(j["model"]["byte_fallback"], false);
  ASSERT_EQ(j["added_tokens"].size(), 1u);
  EXPECT_EQ(j["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(j["added_tokens"][0]["id"], 264);  // the next free id: the vocabulary had no end-of-text
  EXPECT_EQ(j["added_tokens"][0]["special"], true);
  // Vocabulary in id order and complete; merges as pairs in rank order.
  ASSERT_EQ(j["model"]["vocab"].size(), bpe.vocab.size());
  int32_t expect = 0;
  for (const auto& [token, id] : j["model"]["vocab"].items()) EXPECT_EQ(id.get<int32_t>(), expect++) << token;
  ASSERT_EQ(j["model"]["merges"].size(), bpe.merges.size());
  for (size_t i = 0; i < bpe.merges.size(); ++i) {
    EXPECT_EQ(j["model"]["merges"][i][0], bpe.merges[i].first);
    EXPECT_EQ(j["model"]["merges"][i][1], bpe.merges[i].second);
  }
  const auto c = hf_tokenizer_config("<|endoftext|>", model_preset("tiny"));
  EXPECT_EQ(c["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(c["eos_token"], "<|endoftext|>");
  EXPECT_EQ(c["split_special_tokens"], true);
  EXPECT_EQ(c["model_max_length"], model_preset("tiny").max_seq_len);
}

TEST(ExportTokenizer, ByteTokenizerIsBpeWithoutMerges) {
  const auto j = hf_tokenizer_json(byte_tokenizer_bpe());
  EXPECT_TRUE(j["model"]["merges"].empty());
  ASSERT_EQ(j["model"]["vocab"].size(), 257u);
  for (int b = 0; b < 256; ++b)
    EXPECT_EQ(j["model"]["vocab"][bytes_to_vocab_string(std::string(1, static_cast<char>(b)))], b);
  EXPECT_EQ(j["added_tokens"][0]["id"], ByteTokenizer::kEot);
}

// Loaded back by fp4train's BPE, the written file encodes and decodes exactly as the source tokenizer.
TEST(ExportTokenizer, RoundTripThroughOurBpeGivesTheSameIds) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  testing::TempDir tmp;
  const ByteTokenizer bytes;
  const auto from_bytes = BpeTokenizer::from_hf_json(
      write_json(tmp.path(), "bytes.json", hf_tokenizer_json(byte_tokenizer_bpe())));
  EXPECT_EQ(from_bytes->vocab_size(), bytes.vocab_size());
  EXPECT_EQ(from_bytes->eot_id(), bytes.eot_id());

  const ByteLevelBpe gpt2 = small_gpt2();
  const fs::path gdir = tmp.path() / "gpt2";
  fs::create_directories(gdir);
  nlohmann::json vocab;
  for (const auto& [t, id] : gpt2.vocab)
    if (t != gpt2.eot) vocab[t] = id;
  std::ofstream(gdir / "encoder.json") << vocab.dump();
  std::string merges_txt;
  for (const auto& [a, b] : gpt2.merges) merges_txt += a + " " + b + "\n";
  std::ofstream(gdir / "vocab.bpe") << merges_txt;
  const auto original = BpeTokenizer::from_gpt2_files(gdir / "encoder.json", gdir / "vocab.bpe");
  const auto from_json =
      BpeTokenizer::from_hf_json(write_json(tmp.path(), "gpt2.json", hf_tokenizer_json(gpt2)));
  EXPECT_EQ(from_json->name(), original->name());  // same vocabulary and merges
  EXPECT_EQ(from_json->eot_id(), original->eot_id());

  for (int trial = 0; trial < 300; ++trial) {
    const std::string text = trial == 0 ? std::string() : random_text(rng, rng() % 60 + 1);
    const auto ids = bytes.encode(text);
    ASSERT_EQ(from_bytes->encode(text), ids) << "text: " << text;
    ASSERT_EQ(from_bytes->decode(ids), text);
    const auto gids = original->encode(text);
    ASSERT_EQ(from_json->encode(text), gids) << "text: " << text;
    ASSERT_EQ(from_json->decode(gids), text);
  }
}

TEST(ExportTokenizer, MalformedGpt2FilesAreNamed) {
  const std::string vocab = R"({"a": 0, "b": 1})";
  EXPECT_THROW(read_gpt2_bpe("{not json", "a b\n"), Error);
  try {
    read_gpt2_bpe(vocab, "#version: 0.2\na b\nab\n");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("line 3"));
  }
  try {
    read_gpt2_bpe(R"({"a": "x"})", "");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("token 'a'"));
  }
  // An end-of-text already in the vocabulary keeps its id.
  EXPECT_EQ(read_gpt2_bpe(R"({"a": 0, "<|endoftext|>": 5})", "").eot_id, 5);
}

}  // namespace
}  // namespace fp4
