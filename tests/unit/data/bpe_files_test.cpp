// Loading BpeTokenizer from files: GPT-2 encoder.json + vocab.bpe (with a #version line, CRLF endings and
// blank lines) and Hugging Face tokenizer.json (string and pair merges, added tokens) give the same
// tokenizer on random text; malformed files are errors naming the file and the place.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data_test_util.h"
#include "gpt2_files_test_util.h"

namespace fp4 {
namespace {

using testing::error_of;
using testing::hf_json;
using testing::TempDir;
using testing::write_file;
using testing::write_gpt2_files;

TEST(BpeFiles, Gpt2FilesAndTokenizerJsonAgreeOnRandomText) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  const auto h = write_gpt2_files(dir / "gpt2");
  const auto ref = BpeTokenizer::from_gpt2_files(dir / "gpt2" / "encoder.json", dir / "gpt2" / "vocab.bpe");
  // The same merges with CRLF line endings and blank lines.
  std::string crlf = "#version: 0.2\r\n\r\n";
  for (const auto& [a, b] : h.merges) crlf += a + " " + b + "\r\n" + (rng() % 3 == 0 ? "\r\n" : "");
  write_file(dir / "crlf.bpe", crlf);
  write_file(dir / "strings.json", hf_json(h, false, false).dump());
  write_file(dir / "pairs-added.json", hf_json(h, true, true).dump());
  const auto from_crlf = BpeTokenizer::from_gpt2_files(dir / "gpt2" / "encoder.json", dir / "crlf.bpe");
  const auto strings = BpeTokenizer::from_hf_json(dir / "strings.json");
  const auto pairs = BpeTokenizer::from_hf_json(dir / "pairs-added.json");
  for (int i = 0; i < 20; ++i) {
    const std::string text = i == 0 ? "hello world" : testing::random_text(rng, 1 + rng() % 200);
    const auto ids = ref->encode(text);
    EXPECT_EQ(from_crlf->encode(text), ids);
    EXPECT_EQ(strings->encode(text), ids);
    EXPECT_EQ(pairs->encode(text), ids);
    EXPECT_EQ(ref->decode(ids), text);
    if (i == 0) {
      EXPECT_EQ(ids.size(), 2u);  // "hello", " world": the merges were read
    }
  }
  for (const auto* t : {from_crlf.get(), strings.get(), pairs.get()}) {
    EXPECT_EQ(t->vocab_size(), ref->vocab_size());
    EXPECT_EQ(t->eot_id(), ref->eot_id());
  }
}

TEST(BpeFiles, MalformedFilesAreNamedWithThePlace) {
  TempDir dir;
  const auto h = write_gpt2_files(dir.path());
  const auto vocab = dir / "encoder.json";
  auto gpt2_error = [&](const std::string& merges) {
    write_file(dir / "m.bpe", merges);
    return error_of([&] { BpeTokenizer::from_gpt2_files(vocab, dir / "m.bpe"); });
  };
  // One token, three tokens, a leading space: each names its line (the #version line and blank lines
  // count, a CR is stripped).
  for (const char* bad : {"#version: 0.2\r\nh e\r\nll\r\n", "h e\n\nl l x\n", "h e\n\n l\n"}) {
    const std::string msg = gpt2_error(bad);
    EXPECT_NE(msg.find("m.bpe line 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("two tokens separated by one space"), std::string::npos) << msg;
  }
  write_file(dir / "v.json", R"({"a": 0, "b": "one"})");
  std::string msg = error_of([&] { BpeTokenizer::from_gpt2_files(dir / "v.json", dir / "m.bpe"); });
  EXPECT_NE(msg.find("the id of token 'b' is not an integer"), std::string::npos) << msg;
  write_file(dir / "v.json", "[1, 2]");
  msg = error_of([&] { BpeTokenizer::from_gpt2_files(dir / "v.json", dir / "m.bpe"); });
  EXPECT_NE(msg.find("must be a JSON object"), std::string::npos) << msg;
  msg = error_of([&] { BpeTokenizer::from_gpt2_files(vocab, dir / "absent.bpe"); });
  EXPECT_NE(msg.find("absent.bpe"), std::string::npos) << msg;

  auto hf_error = [&](const nlohmann::json& j) {
    write_file(dir / "t.json", j.dump());
    return error_of([&] { BpeTokenizer::from_hf_json(dir / "t.json"); });
  };
  nlohmann::json j = hf_json(h, true, false);
  j["model"]["merges"][4] = nlohmann::json::array({"a"});
  msg = hf_error(j);
  EXPECT_NE(msg.find("model.merges[4] is neither"), std::string::npos) << msg;
  j = hf_json(h, false, false);
  j["model"]["merges"][2] = "ab";
  msg = hf_error(j);
  EXPECT_NE(msg.find("model.merges[2]: expected two tokens"), std::string::npos) << msg;
  j = hf_json(h, true, true);
  // <|endoftext|> in model.vocab and among the added tokens, with two different ids.
  j["model"]["vocab"]["<|endoftext|>"] = 265;
  j["added_tokens"][0]["id"] = 3;
  msg = hf_error(j);
  EXPECT_NE(msg.find("added token '<|endoftext|>' has id 3 but model.vocab gives it 265"), std::string::npos)
      << msg;
  j = hf_json(h, true, true);
  j["added_tokens"][0].erase("content");
  msg = hf_error(j);
  EXPECT_NE(msg.find("lacks an integer id or a string content"), std::string::npos) << msg;
  msg = hf_error(nlohmann::json::array());
  EXPECT_NE(msg.find("no \"model\" object"), std::string::npos) << msg;
  write_file(dir / "cut.json", hf_json(h, true, false).dump().substr(0, 100));
  msg = error_of([&] { BpeTokenizer::from_hf_json(dir / "cut.json"); });
  EXPECT_NE(msg.find("cut.json is not valid JSON"), std::string::npos) << msg;
}

}  // namespace
}  // namespace fp4
