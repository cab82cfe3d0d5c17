// Tokenizer: the interface every tokenizer of fp4train implements, and the factory that builds one
// from a spec string. Implementations: ByteTokenizer (byte_tokenizer.h), BpeTokenizer (bpe_tokenizer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fp4 {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text (any bytes, UTF-8 expected but not required) -> token ids. Special tokens are never
  // recognised inside text: "<|endoftext|>" in a file is encoded as ordinary characters, and the
  // end-of-text id only enters a stream where prepare puts it (between documents).
  // Thread-safe: several threads may call encode on one tokenizer at once.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;

  // Token ids -> bytes. Ids decode to their raw bytes, so a cut in the middle of a UTF-8 character
  // gives the partial bytes; eot_id() decodes to its text form (e.g. "<|endoftext|>").
  // Throws fp4::Error naming the id when an id is outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  // The bytes of one token (for streaming output during sampling).
  virtual std::string token_bytes(int32_t id) const = 0;

  virtual int32_t vocab_size() const = 0;  // every id is < vocab_size(), eot_id() included
  virtual int32_t eot_id() const = 0;      // the document separator
  // Identifies the tokenizer by content: "bytes", or "bpe-<vocab>-<fingerprint>" for BPE, so two
  // specs naming the same files (relative vs absolute path, another machine) give the same name.
  virtual std::string name() const = 0;
};

// Builds a tokenizer from a spec:
//   "bytes"                      ByteTokenizer: ids 0..255 are bytes, 256 is end-of-text, vocab 257
//   a directory                  GPT-2 BPE from encoder.json|vocab.json + vocab.bpe|merges.txt in it,
//                                or from tokenizer.json in it
//   a path ending in .json       HF tokenizer.json (model.vocab + model.merges)
// Throws fp4::Error naming the spec or the file and what is wrong with it.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);

}  // namespace fp4
