// BpeTokenizer: GPT-2 style byte-level BPE. Loads encoder.json|vocab.json + vocab.bpe|merges.txt
// or a Hugging Face tokenizer.json (model.vocab + model.merges, merges as "a b" or ["a", "b"]).
#pragma once

#include <array>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/pretokenizer.h"
#include "data/tokenizer.h"

namespace fp4 {

class BpeTokenizer final : public Tokenizer {
 public:
  // vocab: vocabulary strings (byte-to-unicode form) and ids; merges: pairs of vocabulary strings
  // in rank order. `source` names where they came from, for error messages. Every
  // single-byte token must be in the vocab; each merge's parts and result must be too. The
  // end-of-text token is "<|endoftext|>"; when the vocab lacks it, it gets the id vocab_size.
  BpeTokenizer(const std::vector<std::pair<std::string, int32_t>>& vocab,
               const std::vector<std::pair<std::string, std::string>>& merges, const std::string& source);

  // GPT-2 files: a JSON object token -> id, and merges one "a b" per line ("#version" lines skipped).
  static std::unique_ptr<BpeTokenizer> from_gpt2_files(const std::filesystem::path& vocab_json,
                                                       const std::filesystem::path& merges_txt);
  // HF tokenizer.json; "<|endoftext|>" may also come from added_tokens.
  static std::unique_ptr<BpeTokenizer> from_hf_json(const std::filesystem::path& tokenizer_json);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  std::string token_bytes(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(id_bytes_.size()); }
  int32_t eot_id() const override { return eot_; }
  // "bpe-<vocab>-<16 hex digits>": a fingerprint of the vocabulary and merges, so the same files
  // give the same name wherever they are and however the path is spelled.
  std::string name() const override { return name_; }
  const std::string& source() const { return source_; }

  // The BPE of one pre-tokenized piece (no cache), appended to out.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  std::string fingerprint(const std::vector<std::pair<std::string, std::string>>& merges) const;
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  // Piece -> ids, sharded so threads rarely wait on each other; a shard is cleared when full.
  static constexpr size_t kCacheShards = 64;
  static constexpr size_t kCacheShardEntries = 1 << 14;
  struct PieceHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct CacheShard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, PieceHash, std::equal_to<>> map;
  };

  std::string source_;
  std::string name_;
  std::vector<std::string> id_bytes_;           // id -> raw bytes
  std::array<int32_t, 256> byte_id_{};          // byte -> id of its single-byte token
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank and merged id
  int32_t eot_ = -1;
  Pretokenizer pretokenizer_;
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace fp4
