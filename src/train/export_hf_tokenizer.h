// The tokenizer of an exported model in the Hugging Face `tokenizers` format (tokenizer.json) and the
// tokenizer_config.json transformers reads beside it. Both fp4train tokenizers are byte-level BPE in
// tokenizers' terms: GPT-2 BPE is its vocabulary and merges under the ByteLevel pre-tokenizer (GPT-2's
// split pattern, bytes as printable characters) and decoder; the byte tokenizer is the same with the 256
// single-byte tokens as the vocabulary and no merges, so every byte stays its own token with id = byte.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"

namespace fp4 {

struct ByteLevelBpe {
  std::vector<std::pair<std::string, int32_t>> vocab;       // byte-to-unicode strings and ids
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::string eot = "<|endoftext|>";                        // the end-of-text token (special)
  int32_t eot_id = 0;
};

// The byte tokenizer's form: ids 0..255 the bytes, eot_id = 256, no merges.
ByteLevelBpe byte_tokenizer_bpe();

// GPT-2 files (encoder.json|vocab.json: token -> id; vocab.bpe|merges.txt: one "a b" per line, a first
// "#version" line skipped). The end-of-text token gets the next free id when the vocabulary lacks it (as
// fp4train's BpeTokenizer does). Throws fp4::Error naming the file and line on malformed input.
ByteLevelBpe read_gpt2_bpe(const std::string& vocab_json, const std::string& merges_txt);

// tokenizer.json: version 1.0, the end-of-text as a special added token, no normalizer, ByteLevel
// pre-tokenizer (no prefix space, GPT-2 regex), ByteLevel post-processor and decoder, BPE model with the
// vocabulary (in id order) and merges as ["a", "b"] pairs.
nlohmann::ordered_json hf_tokenizer_json(const ByteLevelBpe& bpe);

// tokenizer_config.json for transformers' fast tokenizer: end-of-text as bos/eos/unk, no tokens added
// around a text, and split_special_tokens so that "<|endoftext|>" inside a text is ordinary characters,
// as fp4train encodes it.
nlohmann::ordered_json hf_tokenizer_config(const std::string& eot, const ModelConfig& cfg);

// The tokenizer files of an export for tokenizer spec `spec` (load_tokenizer's forms): tokenizer.json
// (written for GPT-2 files and the byte tokenizer, copied when the spec is a tokenizer.json) and
// tokenizer_config.json; GPT-2 directories also give vocab.json and merges.txt for tools that read those.
// Throws fp4::Error when the tokenizer cannot be loaded or has more ids than cfg.vocab_real.
struct HfTokenizerFiles {
  std::vector<std::pair<std::string, std::string>> files;  // name -> content
  int32_t eot = 0;                                         // the end-of-text id
};
HfTokenizerFiles hf_tokenizer_files(const std::string& spec, const ModelConfig& cfg);

}  // namespace fp4
