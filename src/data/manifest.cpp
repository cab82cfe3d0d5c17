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

ManifestSplit split_from_json(const nlohmann::json& j, const std::string& where) {
  ManifestSplit s;
  s.documents = field<int64_t>(j, "documents", where);
  s.bytes = field<int64_t>(j, "bytes", where);
  s.tokens = field<int64_t>(j, "tokens", where);
  auto shards = field<nlohmann::json>(j, "shards", where);
  FP4_CHECK(shards.is_array(), where, ": field \"shards\" is not an array");
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string at = where + ".shards[" + std::to_string(i) + "]";
    s.shards.push_back({field<std::string>(shards[i], "file", at), field<int64_t>(shards[i], "tokens", at),
                        field<uint64_t>(shards[i], "payload_fnv1a", at)});
  }
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
  m.format_version = field<int>(j, "format_version", where);
  FP4_CHECK(m.format_version == 1, where, ": unsupported format_version ", m.format_version);
  m.tokenizer = field<std::string>(j, "tokenizer", where);
  m.tokenizer_name = field<std::string>(j, "tokenizer_name", where);
  m.vocab_size = field<int32_t>(j, "vocab_size", where);
  m.eot_id = field<int32_t>(j, "eot_id", where);
  m.inputs = field<std::vector<std::string>>(j, "inputs", where);
  m.val_inputs = field<std::vector<std::string>>(j, "val_inputs", where);
  m.train = split_from_json(field<nlohmann::json>(j, "train", where), where + ": train");
  m.val = split_from_json(field<nlohmann::json>(j, "val", where), where + ": val");
  return m;
}

}  // namespace fp4
