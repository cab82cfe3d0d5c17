#include "data/prepare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "core/error.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "data_test_util.h"

namespace fp4 {
namespace {

using testing::TempDir;
using testing::write_file;

// Random documents in a nested folder, with some files prepare must ignore.
struct Corpus {
  TempDir dir;
  std::vector<std::pair<std::string, std::string>> docs;  // name relative to dir, text (sorted by name)

  explicit Corpus(std::mt19937_64& rng, int n = 12) {
    for (int i = 0; i < n; ++i) {
      std::string name =
          (i % 3 == 0 ? "sub/" : "") + std::string("doc") + static_cast<char>('a' + i) + ".txt";
      std::string text = testing::random_text(rng, 20 + rng() % 600);
      if (i == 4) text.clear();  // an empty document still gets its end-of-text
      docs.emplace_back(name, text);
      write_file(dir / name, text);
    }
    write_file(dir / "README.md", "not a document");
    std::sort(docs.begin(), docs.end());
  }
};

std::vector<int32_t> read_split(const Manifest& m, const std::filesystem::path& out, const ManifestSplit& s) {
  std::vector<int32_t> all;
  for (const auto& sh : s.shards) {
    auto t = ShardFile(out / sh.file).read_all();
    EXPECT_EQ(static_cast<int64_t>(t.size()), sh.tokens);
    EXPECT_LE(sh.tokens, int64_t{1} << 30);
    all.insert(all.end(), t.begin(), t.end());
  }
  EXPECT_EQ(static_cast<int64_t>(all.size()), s.tokens);
  (void)m;
  return all;
}

TEST(Prepare, StreamIsTheDocumentsInOrderEachFollowedByEot) {
  uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Corpus corpus(rng);
  TempDir out;
  PrepareOptions o;
  o.inputs = {corpus.dir.path()};
  o.out_dir = out.path();
  o.shard_tokens = 97;
  o.threads = 3;
  o.chunk_bytes = 50;
  int64_t last_progress = 0;
  o.progress = [&](int64_t done, int64_t total) {
    EXPECT_EQ(done, last_progress + 1);
    EXPECT_EQ(total, static_cast<int64_t>(corpus.docs.size()));
    last_progress = done;
  };
  Manifest m = prepare_shards(o);
  EXPECT_EQ(last_progress, static_cast<int64_t>(corpus.docs.size()));
  auto tok = load_tokenizer("bytes");
  std::vector<int32_t> expected;
  int64_t bytes = 0;
  for (const auto& [name, text] : corpus.docs) {
    auto ids = tok->encode(text);
    expected.insert(expected.end(), ids.begin(), ids.end());
    expected.push_back(tok->eot_id());
    bytes += static_cast<int64_t>(text.size());
  }
  EXPECT_EQ(read_split(m, out.path(), m.train), expected);
  EXPECT_EQ(m.train.documents, static_cast<int64_t>(corpus.docs.size()));
  EXPECT_EQ(m.train.bytes, bytes);
  EXPECT_TRUE(m.val.shards.empty());
  EXPECT_EQ(m.vocab_size, 257);
  EXPECT_EQ(m.eot_id, 256);
  // Every shard but the last holds exactly shard_tokens.
  for (size_t i = 0; i + 1 < m.train.shards.size(); ++i) EXPECT_EQ(m.train.shards[i].tokens, 97);
  EXPECT_EQ(m.train.shards[0].file, "train_000000.bin");
  // The manifest on disk says the same.
  Manifest back = read_manifest(out.path());
  EXPECT_EQ(back.train.shards.size(), m.train.shards.size());
  EXPECT_EQ(back.train.tokens, m.train.tokens);
  EXPECT_EQ(back.inputs, m.inputs);
  EXPECT_EQ(back.tokenizer, "bytes");
}

// Everything prepare wrote, file name -> bytes.
std::map<std::string, std::string> snapshot(const std::filesystem::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    files[e.path().filename().string()] = testing::read_file(e.path());
  }
  return files;
}

TEST(Prepare, OutputDoesNotDependOnThreadsOrChunking) {
  uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Corpus corpus(rng, 20);
  // A BPE tokenizer in tokenizer.json form, so chunking meets real merges.
  TempDir tokdir;
  auto h =
      testing::make_hand_bpe({{"t", "h"}, {"th", "e"}, {" ", "the"}, {"\n", "\n"}, {" ", " "}, {"a", "b"}});
  nlohmann::json vocab = nlohmann::json::object();
  for (const auto& [t, id] : h.vocab) vocab[t] = id;
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [a, b] : h.merges) merges.push_back({a, b});
  write_file(tokdir / "tokenizer.json",
             nlohmann::json({{"model", {{"vocab", vocab}, {"merges", merges}}}}).dump());

  std::map<std::string, std::string> first;
  int run = 0;
  for (auto [threads, chunk] :
       {std::pair{1, int64_t{1} << 20}, std::pair{4, int64_t{16}}, std::pair{2, int64_t{1}}}) {
    TempDir out;
    PrepareOptions o;
    o.inputs = {corpus.dir.path()};
    o.tokenizer = (tokdir / "tokenizer.json").string();
    o.out_dir = out.path();
    o.shard_tokens = 150;
    o.threads = threads;
    o.chunk_bytes = chunk;
    o.val_fraction = 0.3;
    prepare_shards(o);
    auto files = snapshot(out.path());
    // The manifest names the inputs by path, which is the same for every run here.
    if (run++ == 0) {
      first = files;
      EXPECT_GT(first.size(), 3u);
    } else {
      EXPECT_EQ(files, first) << "threads " << threads << ", chunk " << chunk;
    }
  }
}

TEST(Prepare, ValFractionAndValInputsSplitByDocument) {
  std::mt19937_64 rng(testing::fresh_seed());
  Corpus corpus(rng, 30);
  TempDir out;
  PrepareOptions o;
  o.inputs = {corpus.dir.path()};
  o.out_dir = out.path();
  o.val_fraction = 0.25;
  Manifest m = prepare_shards(o);
  EXPECT_GT(m.val.documents, 0);
  EXPECT_GT(m.train.documents, 0);
  EXPECT_EQ(m.val.documents + m.train.documents, 30);
  EXPECT_EQ(static_cast<int64_t>(m.val_inputs.size()), m.val.documents);
  for (const auto& v : m.val_inputs) EXPECT_EQ(std::count(m.inputs.begin(), m.inputs.end(), v), 0) << v;

  TempDir val;
  write_file(val / "held.txt", "held out text");
  TempDir out2;
  o.val_fraction = 0;
  o.val_inputs = {val / "held.txt"};
  o.out_dir = out2.path();
  Manifest m2 = prepare_shards(o);
  EXPECT_EQ(m2.val.documents, 1);
  EXPECT_EQ(m2.val.tokens, static_cast<int64_t>(std::string("held out text").size()) + 1);
  EXPECT_EQ(m2.train.documents, 30);

  o.val_inputs = {corpus.dir / corpus.docs[0].first};
  EXPECT_THROW(prepare_shards(o), Error);  // a document may not be in both splits
}

// The streams between eot tokens, as byte strings (bytes tokenizer: id = byte).
std::vector<std::string> segments(const std::vector<int32_t>& ids, int32_t eot) {
  std::vector<std::string> out(1);
  for (int32_t id : ids) {
    if (id == eot) {
      out.emplace_back();
    } else {
      out.back() += static_cast<char>(id);
    }
  }
  EXPECT_TRUE(out.back().empty()) << "the stream must end with eot";
  out.pop_back();
  return out;
}

TEST(Prepare, ValSampleHoldsOutPiecesOfEveryDocumentInOrder) {
  uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  TempDir corpus;
  std::vector<std::string> texts;
  for (int i = 0; i < 8; ++i) {
    // Lines "x...y": each '\n' between 'y' and 'x' is a place where a piece may end.
    std::string text;
    const int lines = i == 3 ? 0 : 150 + static_cast<int>(rng() % 150);  // one empty document
    for (int l = 0; l < lines; ++l) text += (l ? "\nx" : "x") + testing::random_text(rng, 12) + "y";
    texts.push_back(text);
    write_file(corpus / ("doc" + std::to_string(i) + ".txt"), text);
  }
  auto run = [&](int threads, int64_t chunk) {
    TempDir out;
    PrepareOptions o;
    o.inputs = {corpus.path()};
    o.out_dir = out.path();
    o.threads = threads;
    o.chunk_bytes = chunk;
    o.shard_tokens = 1000;
    o.val_sample = 0.3;
    o.val_piece_bytes = 200;
    Manifest m = prepare_shards(o);
    return std::tuple{m, snapshot(out.path()), segments(read_split(m, out.path(), m.train), m.eot_id),
                      segments(read_split(m, out.path(), m.val), m.eot_id)};
  };
  auto [m, files, train, val] = run(3, 50);
  // Each document is its runs of train and val pieces, in order, each run closed by eot.
  size_t ti = 0, vi = 0, docs_with_val = 0;
  int64_t val_bytes = 0, all_bytes = 0;
  for (const std::string& text : texts) {
    size_t at = 0;
    bool any_val = false;
    if (text.empty()) {
      ASSERT_LT(ti, train.size());
      EXPECT_EQ(train[ti++], "");
    }
    while (at < text.size()) {
      auto starts_here = [&](const std::vector<std::string>& segs, size_t i) {
        return i < segs.size() && !segs[i].empty() && text.compare(at, segs[i].size(), segs[i]) == 0;
      };
      if (starts_here(train, ti)) {
        at += train[ti++].size();
      } else if (starts_here(val, vi)) {
        at += val[vi].size();
        val_bytes += static_cast<int64_t>(val[vi++].size());
        any_val = true;
      } else {
        FAIL() << "document bytes at " << at << " are in neither split's next run";
      }
    }
    all_bytes += static_cast<int64_t>(text.size());
    docs_with_val += any_val;
  }
  EXPECT_EQ(ti, train.size());
  EXPECT_EQ(vi, val.size());
  EXPECT_EQ(m.val.bytes, val_bytes);
  EXPECT_EQ(m.train.bytes + m.val.bytes, all_bytes);
  EXPECT_EQ(m.train.documents + m.val.documents, static_cast<int64_t>(train.size() + val.size()));
  // ~30% of ~40 pieces per document: every non-empty document gives some, the share is near 0.3.
  EXPECT_EQ(docs_with_val, 7u);
  EXPECT_GT(val_bytes, all_bytes / 8);
  EXPECT_LT(val_bytes, all_bytes / 2);
  // The pieces do not depend on the tokenizer chunking or the thread count.
  EXPECT_EQ(std::get<1>(run(1, int64_t{1} << 20)), files);
}

TEST(Prepare, ValSampleErrorsNameTheProblem) {
  std::mt19937_64 rng(testing::fresh_seed());
  Corpus corpus(rng, 3);
  TempDir out;
  PrepareOptions o;
  o.inputs = {corpus.dir.path()};
  o.out_dir = out.path();
  o.val_sample = 1.0;
  auto message = [&] {
    try {
      prepare_shards(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message().find("val_sample must be in [0, 1)"), std::string::npos) << message();
  o.val_sample = 1e-12;  // three short documents: no piece falls below this
  EXPECT_NE(message().find("chose none of the training pieces"), std::string::npos) << message();
  o.val_sample = 0.5;
  o.val_piece_bytes = 0;
  EXPECT_NE(message().find("val_piece_bytes must be positive"), std::string::npos) << message();
}

TEST(Prepare, RerunReplacesShardsAndRemovesStaleOnes) {
  std::mt19937_64 rng(testing::fresh_seed());
  Corpus corpus(rng);
  TempDir out;
  PrepareOptions o;
  o.inputs = {corpus.dir.path()};
  o.out_dir = out.path();
  o.shard_tokens = 50;
  Manifest many = prepare_shards(o);
  ASSERT_GT(many.train.shards.size(), 2u);
  write_file(out / "notes.txt", "mine");
  o.shard_tokens = 1 << 20;
  Manifest one = prepare_shards(o);
  EXPECT_EQ(one.train.shards.size(), 1u);
  auto files = snapshot(out.path());
  EXPECT_EQ(files.size(), 3u);  // train_000000.bin, manifest.json, notes.txt
  EXPECT_TRUE(files.contains("notes.txt"));
}

TEST(Prepare, ReadsXzInputs) {
  if (std::system("xz --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "xz is not installed";
  TempDir in;
  write_file(in / "a.txt", "compressed text\n");
  ASSERT_EQ(std::system(("xz " + (in / "a.txt").string()).c_str()), 0);  // leaves only a.txt.xz
  TempDir out;
  PrepareOptions o;
  o.inputs = {in.path()};
  o.out_dir = out.path();
  Manifest m = prepare_shards(o);
  ASSERT_EQ(m.train.documents, 1);
  auto ids = ShardFile(out / "train_000000.bin").read_all();
  EXPECT_EQ(load_tokenizer("bytes")->decode(ids), "compressed text\n<|endoftext|>");

  write_file(in / "bad.xz", "not xz at all");
  auto msg = [&] {
    try {
      prepare_shards(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_NE(msg.find("bad.xz"), std::string::npos) << msg;
}

TEST(Prepare, ErrorsNameTheProblem) {
  TempDir empty;
  TempDir out;
  PrepareOptions o;
  o.inputs = {empty.path()};
  o.out_dir = out.path();
  EXPECT_THROW(prepare_shards(o), Error);
  o.inputs = {empty / "missing.txt"};
  try {
    prepare_shards(o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.txt does not exist"), std::string::npos) << e.what();
  }
}

// Out-of-range options are refused before any work, NaN included (it passes every comparison-based range
// check written the other way round), and a thread count the system cannot give is refused by number.
TEST(Prepare, OptionRangesAreCheckedNaNAndHugeThreadCountsIncluded) {
  std::mt19937_64 rng(std::random_device{}());
  Corpus corpus(rng, 3);
  TempDir out;
  const auto message = [&](const std::function<void(PrepareOptions&)>& edit) {
    PrepareOptions o;
    o.inputs = {corpus.dir.path()};
    o.out_dir = out / "shards";
    o.tokenizer = "bytes";
    edit(o);
    try {
      prepare_shards(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const double nan = std::nan("");
  for (double f : {nan, -0.5, 1.0, HUGE_VAL}) {
    EXPECT_NE(message([&](PrepareOptions& o) { o.val_fraction = f; }).find("val_fraction must be in [0, 1)"),
              std::string::npos)
        << f;
    EXPECT_NE(message([&](PrepareOptions& o) { o.val_sample = f; }).find("val_sample must be in [0, 1)"),
              std::string::npos)
        << f;
  }
  for (int t : {-1, kMaxPrepareThreads + 1, 100000})
    EXPECT_NE(message([&](PrepareOptions& o) { o.threads = t; }).find("threads must be in [0, 1024]"),
              std::string::npos)
        << t;
  EXPECT_FALSE(std::filesystem::exists(out / "shards"));
  EXPECT_EQ(message([](PrepareOptions& o) { o.threads = 3; }), "no error");
}

}  // namespace
}  // namespace fp4
