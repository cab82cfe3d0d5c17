// Helpers shared by the tokenizer-file tests: a hand-made BPE written as GPT-2 files (encoder.json and
// vocab.bpe) and as a Hugging Face tokenizer.json.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "data_test_util.h"

namespace fp4::testing {

inline const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"h", "e"}, {"l", "l"},   {"he", "ll"},   {"hell", "o"}, {" ", "w"},
    {"o", "r"}, {" w", "or"}, {" wor", "ld"}, {"l", "d"}};

// Writes encoder.json + vocab.bpe of the hand-made vocabulary into dir.
inline HandBpe write_gpt2_files(const std::filesystem::path& dir,
                                const std::string& vocab_name = "encoder.json",
                                const std::string& merges_name = "vocab.bpe") {
  auto h = make_hand_bpe(kMerges, /*with_eot=*/true);
  nlohmann::json vocab = nlohmann::json::object();
  for (const auto& [tok, id] : h.vocab) vocab[tok] = id;
  write_file(dir / vocab_name, vocab.dump());
  std::string merges = "#version: 0.2\n";
  for (const auto& [a, b] : h.merges) merges += a + " " + b + "\n";
  write_file(dir / merges_name, merges);
  return h;
}

inline nlohmann::json hf_json(const HandBpe& h, bool pair_merges, bool eot_as_added) {
  nlohmann::json vocab = nlohmann::json::object();
  nlohmann::json added = nlohmann::json::array();
  for (const auto& [tok, id] : h.vocab) {
    if (eot_as_added && tok == "<|endoftext|>") {
      added.push_back({{"id", id}, {"content", tok}, {"special", true}});
    } else {
      vocab[tok] = id;
    }
  }
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [a, b] : h.merges) {
    if (pair_merges) {
      merges.push_back({a, b});
    } else {
      merges.push_back(a + " " + b);
    }
  }
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

}  // namespace fp4::testing
