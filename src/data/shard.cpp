#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cstring>
#include <string>

#include "core/error.h"

namespace fp4 {

static_assert(std::endian::native == std::endian::little, "shards are little-endian; add byte swaps here");

namespace {

template <typename T>
void put(uint8_t* dst, T v) {
  std::memcpy(dst, &v, sizeof(T));
}
template <typename T>
T get(const uint8_t* src) {
  T v;
  std::memcpy(&v, src, sizeof(T));
  return v;
}

void encode_header(const ShardHeader& h, uint8_t* out) {
  std::memset(out, 0, kShardHeaderBytes);
  std::memcpy(out, kShardMagic, 8);
  put<uint32_t>(out + 8, h.version);
  put<uint32_t>(out + 12, h.token_bytes);
  put<uint64_t>(out + 16, h.token_count);
  put<uint32_t>(out + 24, h.vocab_size);
  put<uint64_t>(out + 32, h.payload_fnv1a);
  put<uint64_t>(out + 40, fnv1a64({out, 40}));
}

// Writes all bytes or throws naming the path.
void write_all(int fd, const uint8_t* data, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    FP4_CHECK(w > 0, "cannot write shard ", path, ": ", std::strerror(errno));
    data += w;
    n -= static_cast<size_t>(w);
  }
}

// Closes a descriptor and removes the temp file unless released: nothing half-written stays behind.
struct TempFile {
  int fd = -1;
  std::string path;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!path.empty()) ::unlink(path.c_str());
  }
};

std::atomic<uint64_t> temp_counter{0};

}  // namespace

ShardHeader write_shard(const std::filesystem::path& path, std::span<const int32_t> tokens,
                        int32_t vocab_size) {
  const std::string name = path.string();
  FP4_CHECK(vocab_size > 0, "shard ", name, ": vocab size must be positive, got ", vocab_size);
  ShardHeader h;
  h.token_bytes = vocab_size <= 65536 ? 2 : 4;
  h.token_count = tokens.size();
  h.vocab_size = static_cast<uint32_t>(vocab_size);
  std::vector<uint8_t> payload(tokens.size() * h.token_bytes);
  for (size_t i = 0; i < tokens.size(); ++i) {
    int32_t t = tokens[i];
    FP4_CHECK(t >= 0 && t < vocab_size, "shard ", name, ": token ", i, " is ", t, ", outside [0, ",
              vocab_size, ")");
    if (h.token_bytes == 2) {
      put<uint16_t>(payload.data() + 2 * i, static_cast<uint16_t>(t));
    } else {
      put<uint32_t>(payload.data() + 4 * i, static_cast<uint32_t>(t));
    }
  }
  h.payload_fnv1a = fnv1a64(payload);
  uint8_t header[kShardHeaderBytes];
  encode_header(h, header);

  TempFile tmp;
  tmp.path = name + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(temp_counter++);
  tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FP4_CHECK(tmp.fd >= 0, "cannot create ", tmp.path, ": ", std::strerror(errno));
  write_all(tmp.fd, header, sizeof(header), name);
  write_all(tmp.fd, payload.data(), payload.size(), name);
  FP4_CHECK(::fsync(tmp.fd) == 0, "cannot sync shard ", name, ": ", std::strerror(errno));
  FP4_CHECK(::close(tmp.fd) == 0, "cannot close shard ", name, ": ", std::strerror(errno));
  tmp.fd = -1;
  FP4_CHECK(::rename(tmp.path.c_str(), name.c_str()) == 0, "cannot rename ", tmp.path, " to ", name, ": ",
            std::strerror(errno));
  tmp.path.clear();
  return h;
}

ShardFile::ShardFile(const std::filesystem::path& path, bool verify_payload) : path_(path) {
  const std::string name = path.string();
  // O_NONBLOCK: a FIFO named as a shard must not block the open until a writer appears.
  int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FP4_CHECK(fd >= 0, "cannot open shard ", name, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    FP4_THROW("cannot stat shard ", name, ": ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    FP4_THROW("shard ", name, " is not a regular file");
  }
  const auto file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < kShardHeaderBytes) {
    ::close(fd);
    FP4_THROW("shard ", name, " is truncated: expected at least ", kShardHeaderBytes, " header bytes, got ",
              file_bytes);
  }
  void* m = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  ::close(fd);  // the mapping stays valid without the descriptor
  FP4_CHECK(m != MAP_FAILED, "cannot map shard ", name, ": ", std::strerror(map_errno));
  map_ = static_cast<const uint8_t*>(m);
  map_bytes_ = file_bytes;
  try {
    FP4_CHECK(std::memcmp(map_, kShardMagic, 8) == 0, "shard ", name,
              " has the wrong magic (not an fp4train shard)");
    header_.version = get<uint32_t>(map_ + 8);
    FP4_CHECK(header_.version == kShardVersion, "shard ", name, " has unsupported format version ",
              header_.version, " (this build reads version ", kShardVersion, ")");
    FP4_CHECK(get<uint64_t>(map_ + 40) == fnv1a64({map_, 40}), "shard ", name,
              " has a corrupt header (checksum mismatch)");
    // The reserved bytes are outside the header checksum: they must read as written, zero.
    for (const auto& [at, bytes] : {std::pair<size_t, size_t>{28, 4}, {48, 16}})
      for (size_t i = at; i < at + bytes; ++i)
        FP4_CHECK(map_[i] == 0, "shard ", name, " has a corrupt header: reserved byte ", i, " is ",
                  static_cast<int>(map_[i]), ", expected 0");
    header_.token_bytes = get<uint32_t>(map_ + 12);
    header_.token_count = get<uint64_t>(map_ + 16);
    header_.vocab_size = get<uint32_t>(map_ + 24);
    header_.payload_fnv1a = get<uint64_t>(map_ + 32);
    FP4_CHECK(header_.token_bytes == 2 || header_.token_bytes == 4, "shard ", name, " has token size ",
              header_.token_bytes, " bytes, expected 2 or 4");
    FP4_CHECK(header_.token_count < (uint64_t{1} << 60), "shard ", name,
              " has a corrupt header: token count ", header_.token_count, " is impossible");
    const uint64_t expected = kShardHeaderBytes + header_.token_count * header_.token_bytes;
    FP4_CHECK(file_bytes >= expected, "shard ", name, " is truncated: expected ", expected, " bytes, got ",
              file_bytes);
    FP4_CHECK(file_bytes == expected, "shard ", name, " has ", file_bytes - expected,
              " trailing bytes: expected ", expected, " bytes, got ", file_bytes);
    if (verify_payload) {
      std::span<const uint8_t> payload(map_ + kShardHeaderBytes, expected - kShardHeaderBytes);
      FP4_CHECK(fnv1a64(payload) == header_.payload_fnv1a, "shard ", name,
                " is corrupt: payload checksum mismatch");
      for (int64_t i = 0; i < size(); ++i) {
        int32_t t = at(i);
        FP4_CHECK(t >= 0 && static_cast<uint32_t>(t) < header_.vocab_size, "shard ", name, ": token ", i,
                  " is ", t, ", outside the vocabulary of ", header_.vocab_size);
      }
    }
  } catch (...) {
    unmap();
    throw;
  }
}

ShardFile::ShardFile(ShardFile&& other) noexcept
    : path_(std::move(other.path_)), header_(other.header_), map_(other.map_), map_bytes_(other.map_bytes_) {
  other.map_ = nullptr;
  other.map_bytes_ = 0;
}

ShardFile& ShardFile::operator=(ShardFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    header_ = other.header_;
    map_ = other.map_;
    map_bytes_ = other.map_bytes_;
    other.map_ = nullptr;
    other.map_bytes_ = 0;
  }
  return *this;
}

ShardFile::~ShardFile() {
  unmap();
}

void ShardFile::unmap() noexcept {
  if (map_ != nullptr) ::munmap(const_cast<uint8_t*>(map_), map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

int32_t ShardFile::at(int64_t i) const {
  FP4_CHECK(i >= 0 && i < size(), "shard ", path_.string(), ": token index ", i, " is outside [0, ", size(),
            ")");
  const uint8_t* p = map_ + kShardHeaderBytes + static_cast<size_t>(i) * header_.token_bytes;
  return header_.token_bytes == 2 ? static_cast<int32_t>(get<uint16_t>(p))
                                  : static_cast<int32_t>(get<uint32_t>(p));
}

void ShardFile::copy(int64_t start, std::span<int32_t> out) const {
  const auto n = static_cast<int64_t>(out.size());
  FP4_CHECK(start >= 0 && start + n <= size(), "shard ", path_.string(), ": tokens [", start, ", ", start + n,
            ") are outside [0, ", size(), ")");
  const uint8_t* p = map_ + kShardHeaderBytes + static_cast<size_t>(start) * header_.token_bytes;
  if (header_.token_bytes == 2) {
    for (int64_t i = 0; i < n; ++i) out[i] = get<uint16_t>(p + 2 * i);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(get<uint32_t>(p + 4 * i));
  }
}

std::vector<int32_t> ShardFile::read_all() const {
  std::vector<int32_t> out(static_cast<size_t>(size()));
  copy(0, out);
  return out;
}

}  // namespace fp4
