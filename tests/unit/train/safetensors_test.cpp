#include "train/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "test_util.h"
#include "train/file_io.h"

namespace fp4 {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using testing::TempDir;

StateTensor random_tensor(std::mt19937_64& rng, const std::string& name, const std::string& dtype,
                          std::vector<int64_t> shape) {
  StateTensor t{name, dtype, std::move(shape), {}};
  int64_t n = 1;
  for (auto d : t.shape) n *= d;
  t.bytes.resize(static_cast<size_t>(n) * safetensors_dtype_size(dtype));
  for (auto& b : t.bytes) b = static_cast<uint8_t>(rng());
  return t;
}

std::vector<StateTensor> random_tensors(std::mt19937_64& rng) {
  std::vector<StateTensor> ts;
  ts.push_back(random_tensor(rng, "blocks.0.attn.wqkv", "F32", {static_cast<int64_t>(rng() % 7 + 1), 5}));
  ts.push_back(random_tensor(rng, "scalar", "I64", {}));
  ts.push_back(random_tensor(rng, "empty", "F32", {0, 3}));
  ts.push_back(random_tensor(rng, "moments.q", "U8", {static_cast<int64_t>(rng() % 33)}));
  ts.push_back(random_tensor(rng, "half", "BF16", {2, 3, 4}));
  return ts;
}

TEST(Safetensors, RoundTripKeepsBytesShapesOrderAndMetadata) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  const auto tensors = random_tensors(rng);
  const SafetensorsMetadata meta = {{"format", "pt"}, {"step", std::to_string(rng() % 1000)}};
  write_safetensors(dir / "a.safetensors", tensors, meta);
  const auto back = read_safetensors(dir / "a.safetensors");
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].name, tensors[i].name);
    EXPECT_EQ(back.tensors[i].dtype, tensors[i].dtype);
    EXPECT_EQ(back.tensors[i].shape, tensors[i].shape);
    EXPECT_EQ(back.tensors[i].bytes, tensors[i].bytes);
  }
  EXPECT_EQ(back.metadata, meta);
  EXPECT_EQ(&back.get("half", "a"), &back.tensors[4]);
}

// An empty tensor before, between and after others (its data offsets equal its neighbour's): all read back,
// in the order written. Its name sorts after the others: the header lists tensors by name, and the reader
// once ordered them by start offset alone, so the empty one stayed after the non-empty one at its offset and
// was reported as overlapping it.
TEST(Safetensors, EmptyTensorsAnywhereRoundTrip) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  for (int empty_at = 0; empty_at < 4; ++empty_at) {
    std::vector<StateTensor> ts;
    const char* names[] = {"t0", "t1", "t2"};
    for (int i = 0; i < 3; ++i) ts.push_back(random_tensor(rng, names[i], "F32", {i + 1, 2}));
    ts.insert(ts.begin() + empty_at, random_tensor(rng, "z_empty", "U8", {0}));
    write_safetensors(dir / "e.safetensors", ts, {});
    const auto back = read_safetensors(dir / "e.safetensors");
    ASSERT_EQ(back.tensors.size(), ts.size());
    for (size_t i = 0; i < ts.size(); ++i) {
      EXPECT_EQ(back.tensors[i].name, ts[i].name) << "empty tensors at " << empty_at;
      EXPECT_EQ(back.tensors[i].shape, ts[i].shape);
      EXPECT_EQ(back.tensors[i].bytes, ts[i].bytes);
    }
  }
}

// The layout other readers expect: u64 little-endian length, 8-byte aligned JSON header, offsets
// relative to the data start.
TEST(Safetensors, LayoutFollowsTheFormat) {
  TempDir dir;
  const std::vector<float> values = {1.5f, -2.0f, 3.25f};
  write_safetensors(dir / "b.safetensors", std::vector{make_f32_tensor("w", {3}, values)});
  const std::string raw = read_file(dir / "b.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(raw.size(), 8 + n + 12);
  const auto header = nlohmann::json::parse(raw.substr(8, n));
  EXPECT_EQ(header["w"]["dtype"], "F32");
  EXPECT_EQ(header["w"]["shape"], nlohmann::json({3}));
  EXPECT_EQ(header["w"]["data_offsets"], nlohmann::json({0, 12}));
  float back[3];
  std::memcpy(back, raw.data() + 8 + n, 12);
  EXPECT_EQ(std::vector<float>(back, back + 3), values);
}

TEST(Safetensors, EveryTruncationIsDetected) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  write_safetensors(dir / "c.safetensors", random_tensors(rng));
  const std::string raw = read_file(dir / "c.safetensors");
  // Every cut point, from nothing to one byte short.
  for (size_t len = 0; len < raw.size(); len += 1 + rng() % 7) {
    write_file_synced(dir / "cut.safetensors", std::string_view(raw).substr(0, len));
    const std::string msg = error_of([&] { read_safetensors(dir / "cut.safetensors"); });
    EXPECT_THAT(msg, HasSubstr("cut.safetensors")) << len;
    EXPECT_THAT(msg, ::testing::AnyOf(HasSubstr("truncated"), HasSubstr("not valid JSON"))) << len;
  }
}

// Writes a file with a hand-made header (and `data_bytes` zero data bytes).
void write_raw(const std::filesystem::path& path, const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  out += header;
  out.append(data_bytes, '\0');
  write_file_synced(path, out);
}

TEST(Safetensors, MalformedHeadersNameTheFault) {
  TempDir dir;
  const auto p = dir / "bad.safetensors";
  write_raw(p, R"({"w": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}})", 8);
  EXPECT_THAT(error_of([&] { read_safetensors(p); }), HasSubstr("unknown safetensors dtype 'F33'"));
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8);
  EXPECT_THAT(error_of([&] { read_safetensors(p); }), HasSubstr("tensor 'w': F32[3] needs 12 bytes"));
  write_raw(p, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                   "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
            12);
  EXPECT_THAT(error_of([&] { read_safetensors(p); }), HasSubstr("overlapping"));
  write_raw(p, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12);
  EXPECT_THAT(error_of([&] { read_safetensors(p); }), HasSubstr("gap"));
  write_raw(p, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 11);
  EXPECT_THAT(error_of([&] { read_safetensors(p); }), HasSubstr("3 trailing bytes"));
  write_raw(p, R"({"a": {"dtype": "F32", "shape": [2]}})", 8);
  EXPECT_THAT(error_of([&] { read_safetensors(p); }), HasSubstr("missing data_offsets"));
  write_raw(p, R"([1, 2])", 0);
  EXPECT_THAT(error_of([&] { read_safetensors(p); }), HasSubstr("not a JSON object"));
  std::string huge(8, '\xff');
  write_file_synced(p, huge + "{}");
  EXPECT_THAT(error_of([&] { read_safetensors(p); }), HasSubstr("implausible"));
  EXPECT_THAT(error_of([&] { read_safetensors(dir / "absent.safetensors"); }), HasSubstr("missing"));
}

TEST(Safetensors, WriterRejectsInconsistentTensors) {
  TempDir dir;
  StateTensor t{"w", "F32", {2, 2}, std::vector<uint8_t>(15)};
  EXPECT_THAT(error_of([&] { write_safetensors(dir / "x", std::vector{t}); }),
              HasSubstr("needs 16 bytes, has 15"));
  t.bytes.resize(16);
  EXPECT_THAT(error_of([&] {
                write_safetensors(dir / "x", std::vector{t, t});
              }),
              HasSubstr("duplicate tensor 'w'"));
  const SafetensorsContent c{{t}, {}};
  EXPECT_THAT(error_of([&] { c.get("v", "f.safetensors"); }),
              HasSubstr("f.safetensors: tensor 'v' is missing"));
}

TEST(Safetensors, F32Helpers) {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> dist;
  std::vector<float> v(static_cast<size_t>(rng() % 100));
  for (auto& x : v) x = dist(rng);
  const auto t = make_f32_tensor("v", {static_cast<int64_t>(v.size())}, v);
  EXPECT_EQ(f32_values(t), v);
  EXPECT_THROW(make_f32_tensor("v", {static_cast<int64_t>(v.size()) + 1}, v), Error);
  StateTensor u = t;
  u.dtype = "BF16";
  EXPECT_THROW(f32_values(u), Error);
}

}  // namespace
}  // namespace fp4
