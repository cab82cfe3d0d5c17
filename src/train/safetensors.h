// The safetensors format, written and read by hand:
//   8 bytes   little-endian u64 N, the length of the JSON header
//   N bytes   JSON: {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//             "__metadata__": {"<key>": "<string>"}}, padded with spaces to a multiple of 8
//   ...       the data; offsets are relative to its start, tensors cover it without gaps or overlap
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "model/engine.h"
#include "train/file_io.h"

namespace fp4 {

using SafetensorsMetadata = std::map<std::string, std::string>;

struct SafetensorsContent {
  std::vector<StateTensor> tensors;  // in data order
  SafetensorsMetadata metadata;

  // The tensor of that name; throws fp4::Error naming `file` and the tensor when absent.
  const StateTensor& get(const std::string& name, const std::string& file) const;
};

// Bytes per element of a safetensors dtype ("F32" -> 4, "BF16" -> 2, "U8" -> 1, ...); throws
// fp4::Error for an unknown dtype.
size_t safetensors_dtype_size(const std::string& dtype);

// What a header says of one tensor, without its data.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
};
// Bytes of the entry's data; throws fp4::Error naming path and tensor for an unknown dtype or a
// negative dimension.
uint64_t safetensors_data_bytes(const SafetensorsEntry& entry, const std::filesystem::path& path);
// The first bytes of a file holding these tensors' data in this order: the u64 header length and the
// padded JSON header. For writers that stream the data (SyncedFileWriter); errors name path and tensor.
std::string safetensors_header(const std::filesystem::path& path, std::span<const SafetensorsEntry> entries,
                               const SafetensorsMetadata& metadata = {});

// Writes and fsyncs the file. Throws fp4::Error naming the tensor whose byte count disagrees with
// its dtype and shape, or a duplicate name.
void write_safetensors(const std::filesystem::path& path, std::span<const StateTensor> tensors,
                       const SafetensorsMetadata& metadata = {});

// The same, returning the file's size and SHA-256, hashed from memory as the bytes are written.
FileDigest write_safetensors_hashed(const std::filesystem::path& path, std::span<const StateTensor> tensors,
                                    const SafetensorsMetadata& metadata = {});
// The same over tensors held elsewhere (a selection of a longer list, written without copying it).
FileDigest write_safetensors_hashed(const std::filesystem::path& path,
                                    std::span<const StateTensor* const> tensors,
                                    const SafetensorsMetadata& metadata = {});

// Reads and validates the whole file: every fault (truncated, bad header, unknown dtype, offsets
// out of range, gaps, overlaps, trailing bytes) throws fp4::Error naming the file and the tensor.
// The file is read once, straight into the tensors' buffers.
SafetensorsContent read_safetensors(const std::filesystem::path& path);

// read_safetensors, also hashing every byte of the file in order as it is read (its size and
// SHA-256 are those of the whole file). A corrupt file may fail the structure checks first.
struct HashedSafetensors {
  SafetensorsContent content;
  FileDigest digest;
};
HashedSafetensors read_safetensors_hashed(const std::filesystem::path& path);

// An F32 tensor from floats, and the floats back (checking dtype F32 and the element count).
StateTensor make_f32_tensor(const std::string& name, std::vector<int64_t> shape,
                            std::span<const float> values);
std::vector<float> f32_values(const StateTensor& t);

}  // namespace fp4
