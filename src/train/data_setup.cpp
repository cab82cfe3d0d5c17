#include "train/data_setup.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "data/prepare.h"
#include "data/tokenizer.h"

namespace fp4 {
namespace fs = std::filesystem;

std::vector<fs::path> text_paths(const std::string& list) {
  std::vector<fs::path> paths;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start) paths.emplace_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return paths;
}

Manifest ensure_prepared_data(const RunConfig& cfg, const std::function<void(const std::string&)>& log) {
  const auto& d = cfg.data;
  const fs::path dir = d.train_dir;
  if (fs::exists(dir / kManifestName)) return read_manifest(dir);

  const std::vector<fs::path> train = text_paths(d.train_text), val = text_paths(d.val_text);
  FP4_CHECK(!train.empty(), "data.train_dir ", dir.string(), " is not prepared (no ", kManifestName,
            "): run `fp4train prepare --input <text files> --tokenizer <spec> --out ", dir.string(),
            "` or set data.train_text");
  for (const fs::path& p : train)
    FP4_CHECK(fs::exists(p), "data.train_dir ", dir.string(), " is not prepared and the corpus ", p.string(),
              " is missing: run scripts/fetch_corpus.sh to build the default corpus, or point "
              "data.train_dir at a prepared directory");
  FP4_CHECK(!d.tokenizer.empty(), "data.tokenizer must be set to prepare ", dir.string(), " from ",
            d.train_text);

  PrepareOptions o;
  o.inputs = train;
  if (!val.empty()) {
    for (const fs::path& p : val)
      FP4_CHECK(fs::exists(p), "the validation text ", p.string(),
                " is missing: run scripts/fetch_corpus.sh, or set data.val_text = \"\" to hold out 5% of the "
                "training documents");
    o.val_inputs = val;
  } else {
    o.val_fraction = 0.05;
  }
  o.tokenizer = d.tokenizer;
  o.out_dir = dir;
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  o.progress = [&](int64_t done, int64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (done == total || now - last > std::chrono::seconds(5)) {
      log("prepare: " + std::to_string(done) + "/" + std::to_string(total) + " documents");
      last = now;
    }
  };
  log("preparing " + dir.string() + " from " + d.train_text +
      (d.val_text.empty() ? "" : " and " + d.val_text) + " (tokenizer " + d.tokenizer + ")");
  Manifest m = prepare_shards(o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log("prepared " + std::to_string(m.train.tokens) + " train and " + std::to_string(m.val.tokens) +
      " validation tokens in " + std::to_string(static_cast<int>(secs)) + "s");
  return m;
}

void check_data_fits(const RunConfig& cfg, const Manifest& m, const std::string& which) {
  const auto& spec = cfg.data.tokenizer;
  if (!spec.empty() && spec != m.tokenizer) {
    // The same tokenizer may be spelled differently (relative vs absolute path): compare what it is.
    const auto tok = load_tokenizer(spec);
    FP4_CHECK(tok->name() == m.tokenizer_name && tok->vocab_size() == m.vocab_size, which,
              " was prepared with tokenizer '", m.tokenizer, "' (", m.tokenizer_name, ", vocab ",
              m.vocab_size, ") but data.tokenizer is '", spec, "' (", tok->name(), ", vocab ",
              tok->vocab_size(), ")");
  }
  FP4_CHECK(m.vocab_size <= cfg.model.vocab_real, which, ": the tokenizer's vocabulary (", m.vocab_size,
            ") does not fit model.vocab_real ", cfg.model.vocab_real, " (model '", cfg.model.name, "')");
}

}  // namespace fp4
