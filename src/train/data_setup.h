// The run's data: prepares the default corpus on first use and checks that the shards fit the model.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "data/manifest.h"
#include "train/run_config.h"

namespace fp4 {

// The paths of a data.train_text / data.val_text value: files or folders separated by commas (empty
// entries skipped), e.g. "data/corpus/train/gcide,data/corpus/train/gutenberg".
std::vector<std::filesystem::path> text_paths(const std::string& list);

// Returns the manifest of data.train_dir. When that directory has no manifest.json yet and
// data.train_text is set, prepares it first (train_text -> split "train", val_text -> split "val")
// with data.tokenizer, telling `log` what it does. Throws fp4::Error with what to run when the
// text is missing too (scripts/fetch_corpus.sh for the default corpus).
Manifest ensure_prepared_data(const RunConfig& cfg, const std::function<void(const std::string&)>& log);

// Throws fp4::Error when the shards' tokenizer is not data.tokenizer (when set) or its vocabulary
// does not fit model.vocab_real. `which` names the directory in messages.
void check_data_fits(const RunConfig& cfg, const Manifest& manifest, const std::string& which);

}  // namespace fp4
