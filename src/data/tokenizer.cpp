#include "data/tokenizer.h"

#include <filesystem>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/byte_tokenizer.h"

namespace fp4 {
namespace {

// The first of `names` present in dir, or an empty path.
std::filesystem::path first_present(const std::filesystem::path& dir,
                                    std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (std::filesystem::is_regular_file(dir / n)) return dir / n;
  }
  return {};
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec == "bytes") return std::make_unique<ByteTokenizer>();
  std::filesystem::path p(spec);
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec)) {
    auto vocab = first_present(p, {"encoder.json", "vocab.json"});
    auto merges = first_present(p, {"vocab.bpe", "merges.txt"});
    if (!vocab.empty() && !merges.empty()) return BpeTokenizer::from_gpt2_files(vocab, merges);
    auto hf = first_present(p, {"tokenizer.json"});
    if (!hf.empty()) return BpeTokenizer::from_hf_json(hf);
    FP4_THROW("tokenizer directory ", spec,
              " holds neither encoder.json|vocab.json with vocab.bpe|merges.txt", " nor tokenizer.json",
              vocab.empty() ? "" : " (found the vocabulary but no merges file)",
              merges.empty() ? "" : " (found the merges but no vocabulary file)");
  }
  if (p.extension() == ".json") {
    FP4_CHECK(std::filesystem::is_regular_file(p, ec), "tokenizer file ", spec, " does not exist");
    return BpeTokenizer::from_hf_json(p);
  }
  FP4_THROW("unknown tokenizer '", spec,
            "': expected \"bytes\", a directory with GPT-2 files (encoder.json + vocab.bpe), or a "
            "tokenizer.json path",
            std::filesystem::exists(p, ec) ? "" : " (no such file or directory)");
}

}  // namespace fp4
