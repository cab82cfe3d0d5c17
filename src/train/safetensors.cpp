#include "train/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "train/file_io.h"
#include "train/sha256.h"
#include "train/unique_fd.h"

namespace fp4 {

// The format is little-endian; raw tensor bytes are copied as they are in memory.
static_assert(std::endian::native == std::endian::little, "fp4train assumes a little-endian host");

namespace {

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
// Tensor data is read (and hashed) in pieces of this size, each hashed while still in cache.
constexpr size_t kReadPiece = size_t{1} << 20;

// The element count, or -1 when it exceeds 2^56 (8-byte elements then still fit in 64 bits; a header naming a
// [2^32, 2^32] tensor must not overflow).
int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > (int64_t{1} << 56) / d)) return -1;
    n *= d;
  }
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

const StateTensor& SafetensorsContent::get(const std::string& name, const std::string& file) const {
  for (const auto& t : tensors)
    if (t.name == name) return t;
  FP4_THROW(file, ": tensor '", name, "' is missing");
}

size_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> kSizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I64", 8}, {"I32", 4},
      {"I16", 2}, {"I8", 1},  {"U64", 8}, {"U32", 4},  {"U16", 2},     {"U8", 1},      {"BOOL", 1}};
  const auto it = kSizes.find(dtype);
  FP4_CHECK(it != kSizes.end(), "unknown safetensors dtype '", dtype, "'");
  return it->second;
}

uint64_t safetensors_data_bytes(const SafetensorsEntry& entry, const std::filesystem::path& path) {
  for (int64_t d : entry.shape)
    FP4_CHECK(d >= 0, path.string(), ": tensor '", entry.name, "' has a negative dimension");
  FP4_CHECK(element_count(entry.shape) >= 0, path.string(), ": tensor '", entry.name,
            "' has more than 2^56 elements");
  size_t elem = 0;
  try {
    elem = safetensors_dtype_size(entry.dtype);
  } catch (const Error& e) {
    FP4_THROW(path.string(), ": tensor '", entry.name, "': ", e.what());
  }
  return static_cast<uint64_t>(element_count(entry.shape)) * elem;
}

std::string safetensors_header(const std::filesystem::path& path, std::span<const SafetensorsEntry> entries,
                               const SafetensorsMetadata& metadata) {
  nlohmann::json header = nlohmann::json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& e : entries) {
    FP4_CHECK(e.name != "__metadata__" && !e.name.empty(), path.string(), ": invalid tensor name '", e.name,
              "'");
    FP4_CHECK(names.insert(e.name).second, path.string(), ": duplicate tensor '", e.name, "'");
    const uint64_t bytes = safetensors_data_bytes(e, path);
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + text;
}

namespace {

// The header of tensors that hold their bytes, checking each byte count against dtype and shape.
std::string header_of_tensors(const std::filesystem::path& path, std::span<const StateTensor* const> tensors,
                              const SafetensorsMetadata& metadata) {
  std::vector<SafetensorsEntry> entries;
  entries.reserve(tensors.size());
  for (const StateTensor* t : tensors) {
    entries.push_back({t->name, t->dtype, t->shape});
    const uint64_t expected = safetensors_data_bytes(entries.back(), path);
    FP4_CHECK(expected == t->bytes.size(), path.string(), ": tensor '", t->name, "' ", t->dtype,
              shape_text(t->shape), " needs ", expected, " bytes, has ", t->bytes.size());
  }
  return safetensors_header(path, entries, metadata);
}

// The byte ranges of the whole file, in order, over `head` and the tensors' own buffers.
std::vector<std::span<const uint8_t>> file_parts(const std::string& head,
                                                 std::span<const StateTensor* const> tensors) {
  std::vector<std::span<const uint8_t>> parts;
  parts.emplace_back(reinterpret_cast<const uint8_t*>(head.data()), head.size());
  for (const StateTensor* t : tensors) parts.emplace_back(t->bytes.data(), t->bytes.size());
  return parts;
}

std::vector<const StateTensor*> pointers_to(std::span<const StateTensor> tensors) {
  std::vector<const StateTensor*> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(&t);
  return out;
}

}  // namespace

void write_safetensors(const std::filesystem::path& path, std::span<const StateTensor> tensors,
                       const SafetensorsMetadata& metadata) {
  const auto pointers = pointers_to(tensors);
  const std::string head = header_of_tensors(path, pointers, metadata);
  write_file_synced(path, file_parts(head, pointers));
}

FileDigest write_safetensors_hashed(const std::filesystem::path& path, std::span<const StateTensor> tensors,
                                    const SafetensorsMetadata& metadata) {
  return write_safetensors_hashed(path, pointers_to(tensors), metadata);
}

FileDigest write_safetensors_hashed(const std::filesystem::path& path,
                                    std::span<const StateTensor* const> tensors,
                                    const SafetensorsMetadata& metadata) {
  const std::string head = header_of_tensors(path, tensors, metadata);
  return write_file_synced_hashed(path, file_parts(head, tensors));
}

namespace {

// Reads until `out` is full or the file ends; returns the bytes read.
size_t read_up_to(int fd, const std::string& file, std::span<uint8_t> out) {
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    FP4_CHECK(n > 0, file, ": read error: ", std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  return got;
}

// The tensors a header describes, in data order, with their byte buffers sized but not filled.
// Checks everything the header alone decides: dtypes, shapes, offsets within the data_bytes the
// file holds, and that the tensors cover the data without gaps, overlaps or trailing bytes.
SafetensorsContent parse_header(std::string_view text, uint64_t data_bytes, const std::string& file) {
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    FP4_THROW(file, ": header is not valid JSON: ", e.what());
  }
  FP4_CHECK(header.is_object(), file, ": header is not a JSON object");
  SafetensorsContent content;
  struct Range {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      FP4_CHECK(entry.is_object(), file, ": __metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        FP4_CHECK(v.is_string(), file, ": __metadata__ value of '", k, "' is not a string");
        content.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = file + ": tensor '" + name + "'";
    FP4_CHECK(entry.is_object(), where, ": entry is not an object");
    FP4_CHECK(entry.contains("dtype") && entry["dtype"].is_string(), where, ": missing dtype");
    FP4_CHECK(entry.contains("shape") && entry["shape"].is_array(), where, ": missing shape");
    FP4_CHECK(entry.contains("data_offsets") && entry["data_offsets"].is_array() &&
                  entry["data_offsets"].size() == 2,
              where, ": missing data_offsets [begin, end]");
    StateTensor t;
    t.name = name;
    t.dtype = entry["dtype"].get<std::string>();
    size_t elem = 0;
    try {
      elem = safetensors_dtype_size(t.dtype);
    } catch (const Error& e) {
      FP4_THROW(where, ": ", e.what());
    }
    for (const auto& d : entry["shape"]) {
      FP4_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= (uint64_t{1} << 62), where,
                ": shape entries must be integers in [0, 2^62], got ", d.dump());
      t.shape.push_back(d.get<int64_t>());
    }
    FP4_CHECK(element_count(t.shape) >= 0, where, ": shape ", shape_text(t.shape),
              " has more than 2^56 elements");
    const auto& off = entry["data_offsets"];
    FP4_CHECK(off[0].is_number_unsigned() && off[1].is_number_unsigned(), where,
              ": data_offsets must be integers");
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    FP4_CHECK(begin <= end, where, ": data_offsets [", begin, ", ", end, "] are reversed");
    FP4_CHECK(end <= data_bytes, file, ": truncated: tensor '", name, "' ends at data byte ", end,
              " but the file has ", data_bytes, " data bytes");
    const uint64_t expected = static_cast<uint64_t>(element_count(t.shape)) * elem;
    FP4_CHECK(end - begin == expected, where, ": ", t.dtype, shape_text(t.shape), " needs ", expected,
              " bytes but data_offsets span ", end - begin);
    ranges.push_back({begin, end, content.tensors.size()});
    content.tensors.push_back(std::move(t));
  }
  // Empty tensors share their offset with the tensor after them: order by (begin, end), so [b, b] comes
  // before [b, e), and stably, so equal ranges keep the header's order.
  std::stable_sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (const auto& r : ranges) {
    FP4_CHECK(r.begin == covered, file, ": tensor '", content.tensors[r.index].name, "' starts at data byte ",
              r.begin,
              r.begin < covered ? ", overlapping the previous tensor"
                                : ", leaving a gap after the previous tensor");
    covered = r.end;
  }
  FP4_CHECK(covered == data_bytes, file, ": ", data_bytes - covered, " trailing bytes after the last tensor");
  // Data order, so a round trip gives the tensors back in the order they were written. Sizing the
  // buffers is safe: together they are exactly the file's data bytes.
  std::vector<StateTensor> ordered;
  ordered.reserve(ranges.size());
  for (const auto& r : ranges) {
    ordered.push_back(std::move(content.tensors[r.index]));
    ordered.back().bytes.resize(r.end - r.begin);
  }
  content.tensors = std::move(ordered);
  return content;
}

// Reads the file straight into the tensors' buffers (no copy of the whole file in memory), passing
// every byte in file order to `hasher` when given, a piece at a time right after it is read.
SafetensorsContent read_into_tensors(const std::filesystem::path& path, Sha256* hasher,
                                     uint64_t* file_bytes) {
  const std::string file = path.string();
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));  // a FIFO is refused, not waited on
  FP4_CHECK(fd.get() >= 0, file, ": missing or unreadable: ", std::strerror(errno));
  struct stat st {};
  FP4_CHECK(::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode), file, ": not a readable regular file");
  const auto size = static_cast<uint64_t>(st.st_size);
  const auto consume = [&](std::span<uint8_t> out, const char* what) {
    const size_t got = read_up_to(fd.get(), file, out);
    FP4_CHECK(got == out.size(), file, ": truncated while reading ", what,
              " (the file shrank while being read)");
    if (hasher) hasher->update(out);
  };

  uint8_t length[8] = {};
  FP4_CHECK(size >= 8, file, ": truncated: ", size, " bytes, shorter than the 8-byte header length");
  consume(length, "the header length");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, length, 8);
  FP4_CHECK(header_bytes <= kMaxHeaderBytes, file, ": header length ", header_bytes,
            " is implausible (corrupt file)");
  FP4_CHECK(header_bytes <= size - 8, file, ": truncated: header says ", header_bytes,
            " bytes but the file has ", size - 8, " after the length");
  std::string text(header_bytes, '\0');
  consume(std::span(reinterpret_cast<uint8_t*>(text.data()), text.size()), "the header");

  SafetensorsContent content = parse_header(text, size - 8 - header_bytes, file);
  for (auto& t : content.tensors)
    for (size_t at = 0; at < t.bytes.size(); at += kReadPiece)
      consume(std::span(t.bytes).subspan(at, std::min(kReadPiece, t.bytes.size() - at)), "tensor data");
  uint8_t extra = 0;
  FP4_CHECK(read_up_to(fd.get(), file, std::span(&extra, 1)) == 0, file,
            ": grew while being read (more than the ", size, " bytes it had)");
  if (file_bytes) *file_bytes = size;
  return content;
}

}  // namespace

SafetensorsContent read_safetensors(const std::filesystem::path& path) {
  return read_into_tensors(path, nullptr, nullptr);
}

HashedSafetensors read_safetensors_hashed(const std::filesystem::path& path) {
  Sha256 hasher;
  HashedSafetensors out;
  out.content = read_into_tensors(path, &hasher, &out.digest.bytes);
  out.digest.sha256 = hasher.hex();
  return out;
}

StateTensor make_f32_tensor(const std::string& name, std::vector<int64_t> shape,
                            std::span<const float> values) {
  FP4_CHECK(element_count(shape) == static_cast<int64_t>(values.size()), "tensor '", name, "': shape ",
            shape_text(shape), " does not match ", values.size(), " values");
  StateTensor t{name, "F32", std::move(shape), {}};
  t.bytes.resize(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

std::vector<float> f32_values(const StateTensor& t) {
  FP4_CHECK(t.dtype == "F32", "tensor '", t.name, "' has dtype ", t.dtype, ", expected F32");
  FP4_CHECK(t.bytes.size() == static_cast<size_t>(element_count(t.shape)) * 4, "tensor '", t.name, "' has ",
            t.bytes.size(), " bytes for shape ", shape_text(t.shape));
  std::vector<float> v(t.bytes.size() / 4);
  if (!v.empty()) std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

}  // namespace fp4
