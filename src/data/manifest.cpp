#include "data/manifest.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/read_file.h"

namespace fp4 {
namespace {

nlohmann::json split_to_json(const ManifestSplit& s) {
  nlohmann::json shards = nlohmann::json::array();
  for (const auto& sh : s.shards) {
    shards.push_back({{"file", sh.file}, {"tokens", sh.tokens}, {"payload_fnv1a", sh.payload_fnv1a}});
  }
  return {{"documents", s.documents}, {"bytes", s.bytes}, {"tokens", s.tokens}, {"shards", shards}};
}

// Reads j[key] as T, or throws naming the manifest and the field.
template <typename T>
T field(const nlohmann::json& j, const char* key, const std::string& where) {
  FP4_CHECK(j.is_object() && j.contains(key), where, ": field \"", key, "\" is missing");
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    FP4_THROW(where, ": field \"", key, "\" has the wrong type (", j.at(key).dump(), ")");
  }
}

// Reads j[key] as a JSON integer in [lo, hi]: a boolean, a fraction (257.9) or a value that would wrap
// when narrowed (2^40 as an int32) is an error naming the field and the range.
int64_t int_field(const nlohmann::json& j, const char* key, const std::string& where, int64_t lo,
                  int64_t hi) {
  FP4_CHECK(j.is_object() && j.contains(key), where, ": field \"", key, "\" is missing");
  const auto& v = j.at(key);
  const bool in_range =
      (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(hi) &&
       static_cast<int64_t>(v.get<uint64_t>()) >= lo) ||
      (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi);
  FP4_CHECK(in_range, where, ": field \"", key, "\" must be an integer in [", lo, ", ", hi, "], got ",
            v.dump());
  return v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
}

constexpr int64_t kMaxCount = int64_t{1} << 62;  // documents, bytes and tokens of a split
constexpr int64_t kMaxVocab = int64_t{1} << 24;

ManifestSplit split_from_json(const nlohmann::json& j, const std::string& where) {
  ManifestSplit s;
  s.documents = int_field(j, "documents", where, 0, kMaxCount);
  s.bytes = int_field(j, "bytes", where, 0, kMaxCount);
  s.tokens = int_field(j, "tokens", where, 0, kMaxCount);
  auto shards = field<nlohmann::json>(j, "shards", where);
  FP4_CHECK(shards.is_array(), where, ": field \"shards\" is not an array");
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string at = where + ".shards[" + std::to_string(i) + "]";
    FP4_CHECK(shards[i].is_object() && shards[i].contains("payload_fnv1a") &&
                  shards[i]["payload_fnv1a"].is_number_unsigned(),
              at, ": field \"payload_fnv1a\" must be an unsigned 64-bit integer");
    s.shards.push_back({field<std::string>(shards[i], "file", at),
                        int_field(shards[i], "tokens", at, 0, kMaxCount),
                        shards[i]["payload_fnv1a"].get<uint64_t>()});
  }
  int64_t sum = 0;
  for (const auto& sh : s.shards) {
    FP4_CHECK(sum <= kMaxCount - sh.tokens, where, ": the shards' token counts exceed 2^62");
    sum += sh.tokens;
  }
  FP4_CHECK(sum == s.tokens, where, ": \"tokens\" is ", s.tokens, " but its shards hold ", sum, " tokens");
  return s;
}

}  // namespace

const ManifestSplit& Manifest::split(const std::string& name) const {
  if (name == "train") return train;
  if (name == "val") return val;
  FP4_THROW("unknown data split '", name, "': expected \"train\" or \"val\"");
}

std::filesystem::path manifest_dir(const std::filesystem::path& dir_or_file) {
  std::error_code ec;
  return std::filesystem::is_directory(dir_or_file, ec) ? dir_or_file : dir_or_file.parent_path();
}

void write_manifest(const std::filesystem::path& dir, const Manifest& m) {
  nlohmann::json j = {{"format_version", m.format_version},
                      {"tokenizer", m.tokenizer},
                      {"tokenizer_name", m.tokenizer_name},
                      {"vocab_size", m.vocab_size},
                      {"eot_id", m.eot_id},
                      {"inputs", m.inputs},
                      {"val_inputs", m.val_inputs},
                      {"train", split_to_json(m.train)},
                      {"val", split_to_json(m.val)}};
  auto path = dir / kManifestName;
  auto tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    FP4_CHECK(out.good(), "cannot create ", tmp.string());
    out << j.dump(2) << '\n';
    out.close();
    FP4_CHECK(out.good(), "cannot write ", tmp.string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  FP4_CHECK(!ec, "cannot rename ", tmp.string(), " to ", path.string(), ": ", ec.message());
}

Manifest read_manifest(const std::filesystem::path& dir_or_file) {
  std::error_code ec;
  auto path = std::filesystem::is_directory(dir_or_file, ec) ? dir_or_file / kManifestName : dir_or_file;
  const std::string where = path.string();
  FP4_CHECK(std::filesystem::is_regular_file(path, ec), "no data manifest at ", where,
            " (run `fp4train prepare` to create one)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_whole_file(path));
  } catch (const nlohmann::json::exception& e) {
    FP4_THROW(where, " is not valid JSON: ", e.what());
  }
  Manifest m;
  FP4_CHECK(j.is_object() && j.contains("format_version") && j["format_version"].is_number_integer() &&
                j["format_version"] == 1,
            where, ": unsupported format_version ",
            j.is_object() ? j.value("format_version", nlohmann::json()).dump() : "", " (this build reads 1)");
  m.format_version = 1;
  m.tokenizer = field<std::string>(j, "tokenizer", where);
  m.tokenizer_name = field<std::string>(j, "tokenizer_name", where);
  m.vocab_size = static_cast<int32_t>(int_field(j, "vocab_size", where, 1, kMaxVocab));
  m.eot_id = static_cast<int32_t>(int_field(j, "eot_id", where, 0, m.vocab_size - 1));
  m.inputs = field<std::vector<std::string>>(j, "inputs", where);
  m.val_inputs = field<std::vector<std::string>>(j, "val_inputs", where);
  m.train = split_from_json(field<nlohmann::json>(j, "train", where), where + ": train");
  m.val = split_from_json(field<nlohmann::json>(j, "val", where), where + ": val");
  return m;
}

}  // namespace fp4
