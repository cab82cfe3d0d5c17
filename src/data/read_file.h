// Whole-file reads with errors that name the file.
#pragma once

#include <filesystem>
#include <string>

namespace fp4 {

// The bytes of a file; throws fp4::Error naming the path when it is missing or unreadable.
std::string read_whole_file(const std::filesystem::path& path);

// The bytes of an .xz file, decompressed with `xz -dc`; throws fp4::Error naming the path when xz
// fails or is missing.
std::string read_xz_file(const std::filesystem::path& path);

}  // namespace fp4
