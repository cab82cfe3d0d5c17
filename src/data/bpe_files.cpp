// Loading BpeTokenizer from GPT-2 files and from Hugging Face tokenizer.json.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/read_file.h"

namespace fp4 {
namespace {

using Vocab = std::vector<std::pair<std::string, int32_t>>;
using Merges = std::vector<std::pair<std::string, std::string>>;

nlohmann::json parse_json(const std::filesystem::path& path) {
  std::string text = read_whole_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    FP4_THROW(path.string(), " is not valid JSON: ", e.what());
  }
}

Vocab vocab_from_object(const nlohmann::json& obj, const std::string& where) {
  FP4_CHECK(obj.is_object(), where, " must be a JSON object mapping tokens to ids");
  Vocab vocab;
  vocab.reserve(obj.size());
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    FP4_CHECK(it.value().is_number_integer(), where, ": the id of token '", it.key(), "' is not an integer");
    vocab.emplace_back(it.key(), it.value().get<int32_t>());
  }
  return vocab;
}

// "a b" -> (a, b); tokens of byte-level vocabularies never contain a space.
std::pair<std::string, std::string> split_merge(std::string_view line, const std::string& where) {
  auto sp = line.find(' ');
  FP4_CHECK(sp != std::string_view::npos && sp > 0 && sp + 1 < line.size() &&
                line.find(' ', sp + 1) == std::string_view::npos,
            where, ": expected two tokens separated by one space, got '", std::string(line.substr(0, 80)),
            "'");
  return {std::string(line.substr(0, sp)), std::string(line.substr(sp + 1))};
}

}  // namespace

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_gpt2_files(const std::filesystem::path& vocab_json,
                                                            const std::filesystem::path& merges_txt) {
  Vocab vocab = vocab_from_object(parse_json(vocab_json), vocab_json.string());
  std::string text = read_whole_file(merges_txt);
  Merges merges;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    merges.push_back(split_merge(line, merges_txt.string() + " line " + std::to_string(line_no)));
  }
  return std::make_unique<BpeTokenizer>(vocab, merges, vocab_json.parent_path().string());
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_hf_json(const std::filesystem::path& tokenizer_json) {
  const std::string where = tokenizer_json.string();
  nlohmann::json j = parse_json(tokenizer_json);
  FP4_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), where,
            ": no \"model\" object (is this a Hugging Face tokenizer.json?)");
  const auto& model = j["model"];
  if (model.contains("type") && !model["type"].is_null()) {
    FP4_CHECK(model["type"] == "BPE", where, ": model.type is ", model["type"].dump(),
              ", only BPE is supported");
  }
  FP4_CHECK(model.contains("vocab"), where, ": model.vocab is missing");
  FP4_CHECK(model.contains("merges") && model["merges"].is_array(), where,
            ": model.merges is missing or not an array");
  Vocab vocab = vocab_from_object(model["vocab"], where + ": model.vocab");
  // Added tokens (e.g. <|endoftext|> in some files) extend the vocabulary when not already in it.
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    std::unordered_map<std::string, int32_t> have(vocab.begin(), vocab.end());
    for (const auto& t : j["added_tokens"]) {
      FP4_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
                    t["content"].is_string(),
                where, ": added_tokens entry ", t.dump(), " lacks an integer id or a string content");
      auto content = t["content"].get<std::string>();
      auto id = t["id"].get<int32_t>();
      auto it = have.find(content);
      if (it == have.end()) {
        vocab.emplace_back(content, id);
        have.emplace(content, id);
      } else {
        FP4_CHECK(it->second == id, where, ": added token '", content, "' has id ", id,
                  " but model.vocab gives it ", it->second);
      }
    }
  }
  Merges merges;
  merges.reserve(model["merges"].size());
  size_t index = 0;
  for (const auto& m : model["merges"]) {
    ++index;
    std::string at = where + ": model.merges[" + std::to_string(index - 1) + "]";
    if (m.is_string()) {
      merges.push_back(split_merge(m.get<std::string>(), at));
    } else {
      FP4_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), at,
                " is neither \"a b\" nor [\"a\", \"b\"]: ", m.dump());
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
  return std::make_unique<BpeTokenizer>(vocab, merges, where);
}

}  // namespace fp4
