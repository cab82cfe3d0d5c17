#include "data/manifest.h"

#include <gtest/gtest.h>

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
    EXPECT_NE(std::string(e.what()).find("\"vocab_size\" has the wrong type"), std::string::npos) << e.what();
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

}  // namespace
}  // namespace fp4
