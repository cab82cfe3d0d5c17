#include "data/read_file.h"

#include <cstdio>
#include <fstream>
#include <memory>

#include "core/error.h"

namespace fp4 {

std::string read_whole_file(const std::filesystem::path& path) {
  std::error_code ec;
  FP4_CHECK(std::filesystem::is_regular_file(path, ec), "cannot read ", path.string(), ": no such file");
  std::ifstream in(path, std::ios::binary);
  FP4_CHECK(in.good(), "cannot open ", path.string());
  std::string data;
  auto size = std::filesystem::file_size(path, ec);
  FP4_CHECK(!ec, "cannot read the size of ", path.string(), ": ", ec.message());
  data.resize(size);
  in.read(data.data(), static_cast<std::streamsize>(size));
  FP4_CHECK(static_cast<uint64_t>(in.gcount()) == size, "cannot read ", path.string(), ": expected ", size,
            " bytes, got ", in.gcount());
  return data;
}

namespace {
// Single-quotes a path for the shell.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}
}  // namespace

std::string read_xz_file(const std::filesystem::path& path) {
  std::error_code ec;
  FP4_CHECK(std::filesystem::is_regular_file(path, ec), "cannot read ", path.string(), ": no such file");
  std::string cmd = "xz -dc -- " + shell_quote(path.string()) + " 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), &pclose);
  FP4_CHECK(pipe != nullptr, "cannot run xz to read ", path.string());
  std::string data;
  char buf[1 << 16];
  size_t got;
  while ((got = fread(buf, 1, sizeof(buf), pipe.get())) > 0) data.append(buf, got);
  int status = pclose(pipe.release());
  FP4_CHECK(status == 0, "cannot decompress ", path.string(), ": xz -dc failed (status ", status,
            "; is xz installed and the file a valid .xz?)");
  return data;
}

}  // namespace fp4
