#include "train/export_hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "data/byte_unicode.h"
#include "data/tokenizer.h"
#include "train/file_io.h"

namespace fp4 {
namespace fs = std::filesystem;

namespace {

fs::path first_present(const fs::path& dir, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (fs::is_regular_file(dir / n)) return dir / n;
  return {};
}

// GPT-2 files as transformers' GPT2Tokenizer reads them: it drops the first and the last line of
// merges.txt (a "#version" header and the empty string after the final newline), and needs the
// end-of-text token in vocab.json (our tokenizer gives it the next id when the file lacks it).
std::vector<std::pair<std::string, std::string>> gpt2_files(const fs::path& vocab, const fs::path& merges,
                                                            const std::string& eot, int eot_id) {
  std::string vocab_text = read_file(vocab);
  nlohmann::json v;
  try {
    v = nlohmann::json::parse(vocab_text);
  } catch (const nlohmann::json::exception& e) {
    FP4_THROW(vocab.string(), " is not valid JSON: ", e.what());
  }
  if (!v.contains(eot)) {
    v[eot] = eot_id;
    vocab_text = v.dump();
  }
  std::string merges_text = read_file(merges);
  if (!merges_text.starts_with("#version")) merges_text = "#version: 0.2\n" + merges_text;
  if (!merges_text.ends_with('\n')) merges_text += '\n';
  return {{"vocab.json", vocab_text}, {"merges.txt", merges_text}};
}

}  // namespace

ByteLevelBpe byte_tokenizer_bpe() {
  ByteLevelBpe b;
  for (int i = 0; i < 256; ++i)
    b.vocab.emplace_back(bytes_to_vocab_string(std::string(1, static_cast<char>(i))), i);
  b.eot_id = 256;
  b.vocab.emplace_back(b.eot, b.eot_id);
  return b;
}

ByteLevelBpe read_gpt2_bpe(const std::string& vocab_json, const std::string& merges_txt) {
  nlohmann::json v;
  try {
    v = nlohmann::json::parse(vocab_json);
  } catch (const nlohmann::json::exception& e) {
    FP4_THROW("GPT-2 vocabulary is not valid JSON: ", e.what());
  }
  FP4_CHECK(v.is_object(), "GPT-2 vocabulary must be a JSON object mapping tokens to ids");
  ByteLevelBpe b;
  int32_t next = 0;
  for (auto it = v.begin(); it != v.end(); ++it) {
    FP4_CHECK(it.value().is_number_integer(), "GPT-2 vocabulary: the id of token '", it.key(),
              "' is not an integer");
    const auto id = it.value().get<int32_t>();
    b.vocab.emplace_back(it.key(), id);
    next = std::max(next, id + 1);
  }
  std::sort(b.vocab.begin(), b.vocab.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
  if (auto it = v.find(b.eot); it != v.end()) {
    b.eot_id = it.value().get<int32_t>();
  } else {
    b.eot_id = next;
    b.vocab.emplace_back(b.eot, next);
  }
  size_t pos = 0, line_no = 0;
  while (pos < merges_txt.size()) {
    size_t end = merges_txt.find('\n', pos);
    if (end == std::string::npos) end = merges_txt.size();
    std::string_view line(merges_txt.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const size_t sp = line.find(' ');
    FP4_CHECK(sp != std::string_view::npos && sp > 0 && sp + 1 < line.size() &&
                  line.find(' ', sp + 1) == std::string_view::npos,
              "GPT-2 merges line ", line_no, ": expected two tokens separated by one space, got '",
              std::string(line.substr(0, 80)), "'");
    b.merges.emplace_back(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
  }
  return b;
}

nlohmann::ordered_json hf_tokenizer_json(const ByteLevelBpe& bpe) {
  using J = nlohmann::ordered_json;
  const J byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  J vocab = J::object();
  for (const auto& [token, id] : bpe.vocab) {
    FP4_CHECK(!vocab.contains(token), "tokenizer.json: token '", token, "' appears twice in the vocabulary");
    vocab[token] = id;
  }
  J merges = J::array();
  for (const auto& [a, b] : bpe.merges) merges.push_back(J::array({a, b}));
  J j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = J::array({J{{"id", bpe.eot_id},
                                  {"content", bpe.eot},
                                  {"single_word", false},
                                  {"lstrip", false},
                                  {"rstrip", false},
                                  {"normalized", false},
                                  {"special", true}}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = byte_level;
  J post = byte_level;
  post["trim_offsets"] = false;
  j["post_processor"] = post;
  j["decoder"] = byte_level;
  j["model"] = J{{"type", "BPE"},
                 {"dropout", nullptr},
                 {"unk_token", nullptr},
                 {"continuing_subword_prefix", ""},
                 {"end_of_word_suffix", ""},
                 {"fuse_unk", false},
                 {"byte_fallback", false},
                 {"ignore_merges", false},
                 {"vocab", vocab},
                 {"merges", merges}};
  return j;
}

nlohmann::ordered_json hf_tokenizer_config(const std::string& eot, const ModelConfig& cfg) {
  return {{"tokenizer_class", "PreTrainedTokenizerFast"},
          {"bos_token", eot},
          {"eos_token", eot},
          {"unk_token", eot},
          {"add_bos_token", false},
          {"add_eos_token", false},
          {"add_prefix_space", false},
          {"split_special_tokens", true},
          {"model_max_length", cfg.max_seq_len},
          {"clean_up_tokenization_spaces", false}};
}

// The run's tokenizer as transformers loads it: tokenizer.json (written for GPT-2 files and the byte
// tokenizer, copied when the run used a tokenizer.json) and tokenizer_config.json. GPT-2 runs also get
// vocab.json and merges.txt, for tools that read those (GPT2Tokenizer drops their first and last lines, so
// merges.txt starts with "#version" and ends with a newline).
HfTokenizerFiles hf_tokenizer_files(const std::string& spec, const ModelConfig& cfg) {
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = load_tokenizer(spec);
  } catch (const Error& e) {
    FP4_THROW("export: the run's tokenizer cannot be loaded (", e.what(),
              "); pass --tokenizer with its location here");
  }
  FP4_CHECK(tok->vocab_size() <= cfg.vocab_real, "export: tokenizer ", spec, " has ", tok->vocab_size(),
            " ids but the model only ", cfg.vocab_real, " (model.vocab_real)");
  HfTokenizerFiles t;
  t.eot = tok->eot_id();
  const std::string eot = tok->token_bytes(t.eot);
  const std::string config = hf_tokenizer_config(eot, cfg).dump(2) + "\n";
  if (spec == "bytes") {
    t.files = {{"tokenizer.json", hf_tokenizer_json(byte_tokenizer_bpe()).dump(1) + "\n"},
               {"tokenizer_config.json", config}};
    return t;
  }
  const fs::path p(spec);
  fs::path hf_json = p.extension() == ".json" && !fs::is_directory(p) ? p : fs::path();
  if (fs::is_directory(p)) {
    const fs::path vocab = first_present(p, {"encoder.json", "vocab.json"});
    const fs::path merges = first_present(p, {"vocab.bpe", "merges.txt"});
    if (!vocab.empty() && !merges.empty()) {
      const std::string vocab_text = read_file(vocab), merges_text = read_file(merges);
      ByteLevelBpe bpe;
      try {
        bpe = read_gpt2_bpe(vocab_text, merges_text);
      } catch (const Error& e) {
        FP4_THROW("export: ", vocab.string(), " / ", merges.string(), ": ", e.what());
      }
      FP4_CHECK(bpe.eot_id == t.eot, "export: ", vocab.string(), " gives end-of-text the id ", bpe.eot_id,
                ", the run's tokenizer ", t.eot);
      t.files = gpt2_files(vocab, merges, eot, t.eot);
      t.files.emplace_back("tokenizer.json", hf_tokenizer_json(bpe).dump(1) + "\n");
      t.files.emplace_back("tokenizer_config.json", config);
      return t;
    }
    hf_json = first_present(p, {"tokenizer.json"});
  }
  FP4_CHECK(!hf_json.empty(), "export: tokenizer ", spec, " names no tokenizer files");
  t.files = {{"tokenizer.json", read_file(hf_json)}, {"tokenizer_config.json", config}};
  return t;
}

}  // namespace fp4
