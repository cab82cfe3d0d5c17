#include "data/prepare.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <memory>
#include <regex>
#include <set>
#include <thread>

#include "core/error.h"
#include "data/read_file.h"
#include "data/shard.h"
#include "data/text_chunks.h"
#include "data/thread_pool.h"
#include "data/tokenizer.h"

namespace fp4 {
namespace fs = std::filesystem;

namespace {

bool is_text_input(const fs::path& p) {
  auto ext = p.extension().string();
  return ext == ".txt" || ext == ".xz";
}

std::string read_document(const fs::path& p) {
  return p.extension() == ".xz" ? read_xz_file(p) : read_whole_file(p);
}

// Accumulates a split's token stream and cuts it into shards of exactly shard_tokens (the last
// one shorter), so the files depend only on the stream.
class ShardSink {
 public:
  ShardSink(fs::path dir, std::string prefix, int64_t shard_tokens, int32_t vocab, ManifestSplit& split)
      : dir_(std::move(dir)),
        prefix_(std::move(prefix)),
        shard_tokens_(shard_tokens),
        vocab_(vocab),
        split_(split) {}

  void append(const std::vector<int32_t>& ids) {
    for (size_t i = 0; i < ids.size();) {
      size_t take = std::min(ids.size() - i, static_cast<size_t>(shard_tokens_) - buffer_.size());
      buffer_.insert(buffer_.end(), ids.begin() + i, ids.begin() + i + take);
      i += take;
      if (static_cast<int64_t>(buffer_.size()) == shard_tokens_) flush();
    }
    split_.tokens += static_cast<int64_t>(ids.size());
  }
  void finish() {
    if (!buffer_.empty()) flush();
  }
  std::vector<std::string> written() const {
    std::vector<std::string> names;
    for (const auto& s : split_.shards) names.push_back(s.file);
    return names;
  }

 private:
  void flush() {
    char name[64];
    std::snprintf(name, sizeof(name), "%s_%06zu.bin", prefix_.c_str(), split_.shards.size());
    ShardHeader h = write_shard(dir_ / name, buffer_, vocab_);
    split_.shards.push_back({name, static_cast<int64_t>(h.token_count), h.payload_fnv1a});
    buffer_.clear();
  }

  fs::path dir_;
  std::string prefix_;
  int64_t shard_tokens_;
  int32_t vocab_;
  ManifestSplit& split_;
  std::vector<int32_t> buffer_;
};

// A number in [0, 1) from the FNV-1a hash of a key: the same wherever the corpus lives. `mixed` adds
// the SplitMix64 finalizer, without which keys that differ only in their last characters (piece
// numbers) get correlated top bits.
double hash_unit(const std::string& key, bool mixed = false) {
  uint64_t h = fnv1a64({reinterpret_cast<const uint8_t*>(key.data()), key.size()});
  if (mixed) {
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

// A document's text as runs of consecutive pieces that go to the same split.
struct SplitRun {
  std::string_view text;
  bool val;
};

std::vector<SplitRun> split_runs(std::string_view text, const fs::path& path, bool doc_val,
                                 const PrepareOptions& o) {
  if (doc_val || o.val_sample <= 0) return {{text, doc_val}};
  std::vector<SplitRun> runs;
  const std::string name = path.filename().string();
  const auto pieces = split_for_tokenization(text, o.val_piece_bytes);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const bool val = hash_unit(name + "#" + std::to_string(i), true) < o.val_sample;
    if (!runs.empty() && runs.back().val == val) {  // pieces are contiguous views of text
      runs.back().text =
          std::string_view(runs.back().text.data(), runs.back().text.size() + pieces[i].size());
    } else {
      runs.push_back({pieces[i], val});
    }
  }
  return runs;
}

struct Document {
  fs::path path;
  bool val = false;
};

std::vector<Document> plan_documents(const PrepareOptions& o) {
  std::vector<Document> docs;
  for (const auto& p : expand_inputs(o.inputs)) docs.push_back({p, false});
  if (!o.val_inputs.empty()) {
    std::set<fs::path> train_set;
    for (const auto& d : docs) train_set.insert(fs::weakly_canonical(d.path));
    for (const auto& p : expand_inputs(o.val_inputs)) {
      FP4_CHECK(!train_set.contains(fs::weakly_canonical(p)), "prepare: ", p.string(),
                " is both a training and a validation input");
      docs.push_back({p, true});
    }
  } else if (o.val_fraction > 0) {
    FP4_CHECK(o.val_fraction < 1, "prepare: val_fraction must be in [0, 1), got ", o.val_fraction);
    // A document goes to validation when the hash of its file name falls below the fraction, so the
    // choice does not depend on where the corpus lives or on the other files.
    auto unit = [](const fs::path& p) { return hash_unit(p.filename().string()); };
    size_t best = 0;
    bool any = false;
    for (size_t i = 0; i < docs.size(); ++i) {
      docs[i].val = unit(docs[i].path) < o.val_fraction;
      any = any || docs[i].val;
      if (unit(docs[i].path) < unit(docs[best].path)) best = i;
    }
    if (!any && docs.size() > 1) docs[best].val = true;  // a fraction > 0 means at least one
    std::stable_partition(docs.begin(), docs.end(), [](const Document& d) { return !d.val; });
  }
  FP4_CHECK(!docs.empty(), "prepare: no input documents (.txt or .xz files) found");
  return docs;
}

// Removes shards of an earlier run that this run did not write, so the directory matches the manifest.
void remove_stale_shards(const fs::path& dir, const std::set<std::string>& keep) {
  static const std::regex kShardName(R"((train|val)_\d{6}\.bin)");
  for (const auto& e : fs::directory_iterator(dir)) {
    auto name = e.path().filename().string();
    if (e.is_regular_file() && std::regex_match(name, kShardName) && !keep.contains(name))
      fs::remove(e.path());
  }
}

}  // namespace

std::vector<fs::path> expand_inputs(const std::vector<fs::path>& inputs) {
  std::vector<fs::path> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<fs::path> found;
      for (const auto& e :
           fs::recursive_directory_iterator(in, fs::directory_options::follow_directory_symlink)) {
        if (e.is_regular_file() && is_text_input(e.path())) found.push_back(e.path());
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      FP4_CHECK(fs::is_regular_file(in, ec), "prepare: input ", in.string(), " does not exist");
      files.push_back(in);
    }
  }
  return files;
}

Manifest prepare_shards(const PrepareOptions& o) {
  FP4_CHECK(!o.out_dir.empty(), "prepare: no output directory given");
  // NaN compares false with every bound, so the ranges are written to fail for it.
  FP4_CHECK(o.val_fraction >= 0 && o.val_fraction < 1, "prepare: val_fraction must be in [0, 1), got ",
            o.val_fraction);
  FP4_CHECK(o.val_sample >= 0 && o.val_sample < 1, "prepare: val_sample must be in [0, 1), got ",
            o.val_sample);
  FP4_CHECK(o.threads >= 0 && o.threads <= kMaxPrepareThreads, "prepare: threads must be in [0, ",
            kMaxPrepareThreads, "] (0: all cores), got ", o.threads);
  FP4_CHECK(o.shard_tokens > 0, "prepare: shard_tokens must be positive, got ", o.shard_tokens);
  auto tokenizer = load_tokenizer(o.tokenizer);
  std::vector<Document> docs = plan_documents(o);
  FP4_CHECK(o.val_sample >= 0 && o.val_sample < 1, "prepare: val_sample must be in [0, 1), got ",
            o.val_sample);
  FP4_CHECK(o.val_piece_bytes > 0, "prepare: val_piece_bytes must be positive, got ", o.val_piece_bytes);

  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  FP4_CHECK(fs::is_directory(o.out_dir), "prepare: cannot create output directory ", o.out_dir.string(), ": ",
            ec.message());
  fs::remove(o.out_dir / kManifestName, ec);  // an interrupted run leaves no manifest over new shards

  Manifest m;
  m.tokenizer = o.tokenizer;
  m.tokenizer_name = tokenizer->name();
  m.vocab_size = tokenizer->vocab_size();
  m.eot_id = tokenizer->eot_id();
  for (const auto& d : docs) (d.val ? m.val_inputs : m.inputs).push_back(d.path.string());
  ShardSink train(o.out_dir, "train", o.shard_tokens, m.vocab_size, m.train);
  ShardSink val(o.out_dir, "val", o.shard_tokens, m.vocab_size, m.val);

  int threads =
      o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool pool(threads);
  // Chunks in flight, in stream order; the writer takes them from the front, so the output order
  // is the document order whatever the thread count. A bounded window keeps memory flat.
  struct Pending {
    std::future<std::vector<int32_t>> ids;
    size_t doc;
    bool val;
    bool last;  // the last chunk of a run of pieces: eot follows
    bool doc_end;
  };
  std::deque<Pending> window;
  const size_t max_in_flight = static_cast<size_t>(threads) * 4;
  int64_t done = 0;
  auto drain_one = [&] {
    Pending p = std::move(window.front());
    window.pop_front();
    ShardSink& sink = p.val ? val : train;
    sink.append(p.ids.get());
    if (p.last) {
      sink.append({tokenizer->eot_id()});
      (p.val ? m.val : m.train).documents += 1;
    }
    if (p.doc_end && o.progress) o.progress(++done, static_cast<int64_t>(docs.size()));
  };
  for (size_t d = 0; d < docs.size(); ++d) {
    auto text = std::make_shared<const std::string>(read_document(docs[d].path));
    const auto runs = split_runs(*text, docs[d].path, docs[d].val, o);
    for (size_t r = 0; r < runs.size(); ++r) {
      (runs[r].val ? m.val : m.train).bytes += static_cast<int64_t>(runs[r].text.size());
      auto chunks = split_for_tokenization(runs[r].text, o.chunk_bytes);
      for (size_t c = 0; c < chunks.size(); ++c) {
        while (window.size() >= max_in_flight) drain_one();
        const Tokenizer* tok = tokenizer.get();
        std::string_view chunk = chunks[c];
        const bool last = c + 1 == chunks.size();
        window.push_back({pool.submit([tok, text, chunk] { return tok->encode(chunk); }), d, runs[r].val,
                          last, last && r + 1 == runs.size()});
      }
    }
  }
  while (!window.empty()) drain_one();
  FP4_CHECK(o.val_sample <= 0 || m.val.tokens > 0, "prepare: val_sample ", o.val_sample,
            " chose none of the training pieces of ~", o.val_piece_bytes,
            " bytes for validation: raise val_sample or lower val_piece_bytes");
  train.finish();
  val.finish();

  std::set<std::string> keep;
  for (const auto& n : train.written()) keep.insert(n);
  for (const auto& n : val.written()) keep.insert(n);
  remove_stale_shards(o.out_dir, keep);
  write_manifest(o.out_dir, m);
  return m;
}

}  // namespace fp4
