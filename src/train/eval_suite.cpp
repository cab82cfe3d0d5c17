#include "train/eval_suite.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "data/read_file.h"

namespace fp4 {
namespace fs = std::filesystem;
namespace {

constexpr uint64_t kTaskSeed = 0x5EED22;  // fixed: the suite is the same on every run

// Sentence spans [begin, end) of text: runs ending at '.', '!' or '?' followed by whitespace, trimmed of
// leading whitespace, between 20 and 400 bytes, single-line-ish (at most one newline).
std::vector<std::pair<size_t, size_t>> sentences(const std::string& text) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t start = 0;
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    const char c = text[i];
    if ((c == '.' || c == '!' || c == '?') && std::isspace(static_cast<unsigned char>(text[i + 1]))) {
      size_t b = start;
      while (b < i && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
      const size_t e = i + 1;
      const auto newlines = std::count(text.begin() + static_cast<std::ptrdiff_t>(b),
                                       text.begin() + static_cast<std::ptrdiff_t>(e), '\n');
      if (e - b >= 20 && e - b <= 400 && newlines <= 1) out.emplace_back(b, e);
      start = e;
    }
  }
  return out;
}

std::vector<int32_t> tail(std::vector<int32_t> v, size_t n) {
  if (v.size() > n) v.erase(v.begin(), v.end() - static_cast<std::ptrdiff_t>(n));
  return v;
}

// The tokens of text[0, end) that fit n, encoded from a little before (so the cut is a clean start).
std::vector<int32_t> context_before(const Tokenizer& tok, const std::string& text, size_t end, int n) {
  const size_t from = end > static_cast<size_t>(n) * 8 ? end - static_cast<size_t>(n) * 8 : 0;
  return tail(tok.encode(std::string_view(text).substr(from, end - from)), static_cast<size_t>(n));
}

}  // namespace

std::vector<HeldOutSource> read_held_out_sources(const std::vector<std::string>& val_inputs,
                                                 std::vector<std::string>* missing) {
  std::vector<HeldOutSource> out;
  for (const std::string& in : val_inputs) {
    const fs::path p(in);
    if (!fs::is_regular_file(p)) {
      if (missing) missing->push_back(in);
      continue;
    }
    const bool xz = p.extension() == ".xz";
    const fs::path stem = xz ? p.stem().stem() : p.stem();
    HeldOutSource s;
    s.name =
        p.parent_path().filename().empty() ? stem.string() : (p.parent_path().filename() / stem).string();
    s.text = xz ? read_xz_file(p) : read_whole_file(p);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<SourceLoss> per_source_loss(TrainingEngine& engine, const Tokenizer& tok,
                                        const std::vector<HeldOutSource>& sources, int batch, int seq,
                                        int64_t max_windows) {
  FP4_CHECK(batch > 0 && seq > 0, "eval: batch ", batch, " and seq ", seq, " must be positive");
  std::vector<SourceLoss> out;
  for (const HeldOutSource& s : sources) {
    const std::vector<int32_t> ids = tok.encode(s.text);
    if (ids.size() < 2) continue;
    int64_t windows = static_cast<int64_t>((ids.size() - 1) / static_cast<size_t>(seq));
    const int len = windows == 0 ? static_cast<int>(ids.size() - 1) : seq;
    windows = std::max<int64_t>(windows, 1);
    if (max_windows > 0) windows = std::min(windows, max_windows);
    double ce = 0;
    int64_t tokens = 0;
    for (int64_t w0 = 0; w0 < windows; w0 += batch) {
      const int rows = static_cast<int>(std::min<int64_t>(batch, windows - w0));
      Batch b{rows, len, {}, {}};
      for (int r = 0; r < rows; ++r) {
        const auto at = ids.begin() + (w0 + r) * len;
        b.tokens.insert(b.tokens.end(), at, at + len);
        b.targets.insert(b.targets.end(), at + 1, at + len + 1);
      }
      const StepStats st = engine.evaluate(b);
      ce += st.ce_loss * static_cast<double>(st.tokens);
      tokens += st.tokens;
    }
    SourceLoss l{s.name, ce / static_cast<double>(tokens), 0, tokens};
    l.perplexity = std::exp(l.loss);
    FP4_CHECK(std::isfinite(l.loss), "eval: the loss on source ", s.name, " is not finite");
    out.push_back(l);
  }
  return out;
}

std::vector<ZeroShotTask> build_zero_shot_tasks(const Tokenizer& tok,
                                                const std::vector<HeldOutSource>& sources,
                                                int items_per_source, int max_context, int max_len) {
  FP4_CHECK(max_context > 0 && max_len > max_context, "eval: zero-shot context ", max_context,
            " must be positive and below the length limit ", max_len);
  ZeroShotTask last{"last_word", {}}, next{"next_sentence", {}};
  std::vector<std::vector<std::pair<size_t, size_t>>> spans;
  for (const auto& s : sources) spans.push_back(sentences(s.text));
  std::mt19937_64 rng(kTaskSeed);
  for (size_t si = 0; si < sources.size(); ++si) {
    const std::string& text = sources[si].text;
    const auto& sp = spans[si];
    if (sp.size() < 4) continue;
    std::vector<size_t> order(sp.size() - 1);
    for (size_t i = 0; i < order.size(); ++i) order[i] = i + 1;  // sentence 0 has no context before it
    std::shuffle(order.begin(), order.end(), rng);
    int made_last = 0, made_next = 0;
    for (size_t k : order) {
      if (made_last >= items_per_source && made_next >= items_per_source) break;
      const auto [b, e] = sp[k];
      // Last word: the sentence's final word (letters only), with its leading space.
      size_t we = e - 1;  // the punctuation
      size_t ws = we;
      while (ws > b && std::isalpha(static_cast<unsigned char>(text[ws - 1]))) --ws;
      if (made_last < items_per_source && we - ws >= 3 && ws > b && text[ws - 1] == ' ') {
        const std::vector<int32_t> word = tok.encode(std::string_view(text).substr(ws - 1, we - ws + 1));
        const int room = std::min<int>(max_context, max_len - static_cast<int>(word.size()));
        if (room > 8 && !word.empty()) {
          last.items.push_back({sources[si].name, context_before(tok, text, ws - 1, room), {word}});
          ++made_last;
        }
      }
      // Next sentence: the context ends with sentence k - 1; distractors from three other sources.
      if (made_next < items_per_source && sources.size() >= 4) {
        ZeroShotItem item{sources[si].name, {}, {}};
        auto candidate = [&](size_t src, size_t idx) {
          const auto [cb, ce] = spans[src][idx];
          return tok.encode(" " + sources[src].text.substr(cb, ce - cb));
        };
        item.choices.push_back(candidate(si, k));
        std::vector<size_t> others;
        for (size_t o = 0; o < sources.size(); ++o)
          if (o != si && spans[o].size() >= 1) others.push_back(o);
        if (others.size() < 3) continue;
        std::shuffle(others.begin(), others.end(), rng);
        for (int d = 0; d < 3; ++d)
          item.choices.push_back(candidate(others[d], rng() % spans[others[d]].size()));
        size_t longest = 0;
        for (const auto& c : item.choices) longest = std::max(longest, c.size());
        const int room = std::min<int>(max_context, max_len - static_cast<int>(longest));
        if (room <= 8) continue;
        item.context = context_before(tok, text, sp[k - 1].second, room);
        next.items.push_back(std::move(item));
        ++made_next;
      }
    }
  }
  return {last, next};
}

double mean_log_likelihood(TrainingEngine& engine, const std::vector<int32_t>& context,
                           const std::vector<int32_t>& continuation) {
  FP4_CHECK(!context.empty() && !continuation.empty(), "eval: empty context or continuation");
  std::vector<int32_t> all = context;
  all.insert(all.end(), continuation.begin(), continuation.end());
  const int t = static_cast<int>(all.size()) - 1;
  Batch b{1, t, std::vector<int32_t>(all.begin(), all.end() - 1), std::vector<int32_t>(t, -1)};
  for (size_t i = 0; i < continuation.size(); ++i) b.targets[context.size() - 1 + i] = continuation[i];
  return -engine.evaluate(b).ce_loss;
}

ZeroShotResult score_zero_shot(TrainingEngine& engine, const ZeroShotTask& task) {
  ZeroShotResult r{task.name, 0, 0};
  const int v = engine.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(v));
  for (const ZeroShotItem& item : task.items) {
    bool correct = true;
    if (task.name == "last_word") {  // greedy, teacher-forced: every token of the word is the argmax
      std::vector<int32_t> ctx = item.context;
      for (int32_t want : item.choices[0]) {
        engine.last_logits(Batch{1, static_cast<int>(ctx.size()), ctx, {}}, logits);
        const auto best =
            static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        if (best != want) {
          correct = false;
          break;
        }
        ctx.push_back(want);
      }
    } else {
      const double truth = mean_log_likelihood(engine, item.context, item.choices[0]);
      for (size_t c = 1; c < item.choices.size() && correct; ++c)
        correct = truth > mean_log_likelihood(engine, item.context, item.choices[c]);
    }
    ++r.items;
    r.correct += correct ? 1 : 0;
  }
  return r;
}

nlohmann::json eval_suite_json(const std::string& checkpoint, double val_loss, double val_ppl,
                               int64_t val_tokens, const std::vector<SourceLoss>& sources,
                               const std::vector<ZeroShotResult>& tasks) {
  nlohmann::json j;
  j["checkpoint"] = checkpoint;
  j["val"] = {{"loss", val_loss}, {"perplexity", val_ppl}, {"tokens", val_tokens}};
  j["sources"] = nlohmann::json::array();
  for (const auto& s : sources)
    j["sources"].push_back(
        {{"name", s.name}, {"loss", s.loss}, {"perplexity", s.perplexity}, {"tokens", s.tokens}});
  j["zero_shot"] = nlohmann::json::array();
  for (const auto& t : tasks)
    j["zero_shot"].push_back(
        {{"task", t.name}, {"items", t.items}, {"correct", t.correct}, {"accuracy", t.accuracy()}});
  return j;
}

}  // namespace fp4
