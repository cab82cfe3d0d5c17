// The evaluation suite of `fp4train eval` beyond the pooled validation loss, built from the held-out text
// itself (the data manifest's val_inputs, re-read and tokenized with the run's tokenizer), so it needs no
// download and gives the same items on every run:
//   - loss and perplexity per validation source (each held-out file: a book, a group of speeches);
//   - last-word prediction (LAMBADA-style): a passage ending before the last word of a sentence; correct
//     when greedy decoding (teacher-forced, token by token) gives exactly that word's tokens;
//   - next-sentence multiple choice: a passage and four candidates, the true next sentence and three
//     sentences of other sources; correct when the true one has the highest mean log-likelihood per token.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "model/engine.h"

namespace fp4 {

struct HeldOutSource {
  std::string name;  // the file's parent folder and stem, e.g. "gutenberg/carroll-alice"
  std::string text;
};

// The held-out files' text, in the manifest's order. Files that no longer exist are skipped and named in
// `missing` (when not null). .xz inputs are decompressed.
std::vector<HeldOutSource> read_held_out_sources(const std::vector<std::string>& val_inputs,
                                                 std::vector<std::string>* missing = nullptr);

struct SourceLoss {
  std::string name;
  double loss = 0, perplexity = 0;
  int64_t tokens = 0;
};
// Mean cross-entropy over the first max_windows non-overlapping windows of seq + 1 tokens of each source
// (0: all), batch rows at a time. Sources shorter than one window are scored over what they have.
std::vector<SourceLoss> per_source_loss(TrainingEngine& engine, const Tokenizer& tok,
                                        const std::vector<HeldOutSource>& sources, int batch, int seq,
                                        int64_t max_windows);

// One item: a context and candidate continuations (token ids), the correct one first.
struct ZeroShotItem {
  std::string source;
  std::vector<int32_t> context;
  std::vector<std::vector<int32_t>> choices;
};
struct ZeroShotTask {
  std::string name;  // "last_word" or "next_sentence"
  std::vector<ZeroShotItem> items;
};
// Up to items_per_source items of each task from each source, positions drawn from a fixed seed, so the
// same text always gives the same items. Contexts hold at most max_context tokens and every context plus
// candidate fits max_len tokens.
std::vector<ZeroShotTask> build_zero_shot_tasks(const Tokenizer& tok,
                                                const std::vector<HeldOutSource>& sources,
                                                int items_per_source, int max_context, int max_len);

struct ZeroShotResult {
  std::string name;
  int64_t items = 0, correct = 0;
  double accuracy() const { return items ? static_cast<double>(correct) / static_cast<double>(items) : 0.0; }
};
ZeroShotResult score_zero_shot(TrainingEngine& engine, const ZeroShotTask& task);

// Mean log-likelihood per token of `continuation` after `context` (one forward).
double mean_log_likelihood(TrainingEngine& engine, const std::vector<int32_t>& context,
                           const std::vector<int32_t>& continuation);

// eval.json: {"checkpoint", "val": {"loss", "perplexity", "tokens"}, "sources": [...], "zero_shot": [...]}.
nlohmann::json eval_suite_json(const std::string& checkpoint, double val_loss, double val_ppl,
                               int64_t val_tokens, const std::vector<SourceLoss>& sources,
                               const std::vector<ZeroShotResult>& tasks);

}  // namespace fp4
