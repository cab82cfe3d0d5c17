#include "data/manifest.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data_test_util.h"

namespace fp4 {
namespace {

using testing::TempDir;

Manifest sample() {
  Manifest m;
  m.tokenizer = "data/tokenizers/gpt2";
  m.tokenizer_name = "bpe:data/tokenizers/gpt2";
  m.vocab_size = 50257;
  m.eot_id = 50256;
  m.train.shards = {{"train_000000.bin", 100, 0xFFFFFFFFFFFFFFFFull}, {"train_000001.bin", 7, 42}};
  m.train.documents = 3;
  m.train.bytes = 400;
  m.train.tokens = 107;
  m.val.shards = {{"val_000000.bin", 5, 9}};
  m.val.documents = 1;
  m.val.bytes = 20;
  m.val.tokens = 5;
  m.inputs = {"a.txt", "b.txt", "c.txt"};
  m.val_inputs = {"v.txt"};
  return m;
}

TEST(Manifest, RoundTripsThroughTheFile) {
  TempDir dir;
  Manifest m = sample();
  write_manifest(dir.path(), m);
  for (const auto& where : {dir.path(), dir / kManifestName}) {
    Manifest back = read_manifest(where);
    EXPECT_EQ(back.tokenizer, m.tokenizer);
    EXPECT_EQ(back.vocab_size, 50257);
    EXPECT_EQ(back.eot_id, 50256);
    ASSERT_EQ(back.train.shards.size(), 2u);
    EXPECT_EQ(back.train.shards[0].payload_fnv1a, 0xFFFFFFFFFFFFFFFFull);  // full 64 bits survive JSON
    EXPECT_EQ(back.train.shards[1].file, "train_000001.bin");
    EXPECT_EQ(back.split("val").tokens, 5);
    EXPECT_EQ(back.inputs, m.inputs);
    EXPECT_EQ(back.val_inputs, m.val_inputs);
    EXPECT_EQ(manifest_dir(where), dir.path());
  }
  EXPECT_THROW(m.split("test"), Error);
}

TEST(Manifest, MissingOrMistypedFieldsAreNamed) {
  TempDir dir;
  write_manifest(dir.path(), sample());
  auto j = nlohmann::json::parse(testing::read_file(dir / kManifestName));
  j["train"]["shards"][1].erase("tokens");
  testing::write_file(dir / kManifestName, j.dump());
  try {
    read_manifest(dir.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.shards[1]: field \"tokens\" is missing"), std::string::npos)
        << e.what();
  }
  j = nlohmann::json::parse(testing::read_file(dir / kManifestName));
  j["vocab_size"] = "big";
  testing::write_file(dir / kManifestName, j.dump());
  try {
    read_manifest(dir.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("field \"vocab_size\" must be an integer in [1, 16777216], got \"big\""),
        std::string::npos)
        << e.what();
  }
  testing::write_file(dir / kManifestName, "{");
  EXPECT_THROW(read_manifest(dir.path()), Error);
  std::filesystem::remove(dir / kManifestName);
  try {
    read_manifest(dir.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no data manifest"), std::string::npos) << e.what();
  }
}

// Numbers a corrupted or hand-edited manifest can get wrong are refused naming the field and the range:
// no truncation (257.9), no wrap (2^40), no boolean read as 1, no token count the shards do not hold.
TEST(Manifest, NumbersAreCheckedWhereTheyAreRead) {
  TempDir dir;
  write_manifest(dir.path(), sample());
  const auto original = nlohmann::json::parse(testing::read_file(dir / kManifestName));
  const auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& expected) {
    auto j = original;
    edit(j);
    testing::write_file(dir / kManifestName, j.dump());
    try {
      read_manifest(dir.path());
      ADD_FAILURE() << "accepted: " << j.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  const int vocab = original["vocab_size"].get<int>();
  for (const nlohmann::json& bad : {nlohmann::json(vocab), nlohmann::json(999999), nlohmann::json(-1),
                                    nlohmann::json(int64_t{1} << 40), nlohmann::json(1.5)})
    refused([&](nlohmann::json& j) { j["eot_id"] = bad; },
            "\"eot_id\" must be an integer in [0, " + std::to_string(vocab - 1) + "]");
  for (const nlohmann::json& bad :
       {nlohmann::json(257.9), nlohmann::json(int64_t{1} << 40), nlohmann::json(0), nlohmann::json(true)})
    refused([&](nlohmann::json& j) { j["vocab_size"] = bad; },
            "\"vocab_size\" must be an integer in [1, 16777216]");
  for (const nlohmann::json& bad :
       {nlohmann::json(true), nlohmann::json(1.0), nlohmann::json(2), nlohmann::json("1")})
    refused([&](nlohmann::json& j) { j["format_version"] = bad; }, "unsupported format_version");
  const int64_t tokens = original["train"]["tokens"].get<int64_t>();
  for (int64_t bad : {int64_t{1}, tokens + 1, int64_t{1000000000000000}})
    refused([&](nlohmann::json& j) { j["train"]["tokens"] = bad; },
            "\"tokens\" is " + std::to_string(bad) + " but its shards hold " + std::to_string(tokens));
  refused([](nlohmann::json& j) { j["train"]["tokens"] = -5; }, "\"tokens\" must be an integer in [0, ");
  refused([](nlohmann::json& j) { j["val"]["shards"][0]["tokens"] = -1; },
          "\"tokens\" must be an integer in [0, ");
  refused([](nlohmann::json& j) { j["train"]["shards"][0]["payload_fnv1a"] = -1; }, "payload_fnv1a");
}

}  // namespace
}  // namespace fp4
