#include "data/bpe_tokenizer.h"

#include <cstdio>
#include <limits>
#include <queue>

#include "core/error.h"
#include "data/byte_unicode.h"
#include "data/fnv1a.h"

namespace fp4 {
namespace {

constexpr const char* kEotText = "<|endoftext|>";

std::string shown(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string out(1, '\'');
  out.append(s.substr(0, kMax));
  out.append(s.size() > kMax ? "...'" : "'");
  return out;
}

}  // namespace

BpeTokenizer::BpeTokenizer(const std::vector<std::pair<std::string, int32_t>>& vocab,
                           const std::vector<std::pair<std::string, std::string>>& merges,
                           const std::string& source)
    : source_(source) {
  FP4_CHECK(!vocab.empty(), source, ": the vocabulary is empty");
  // Ids must be dense 0..n-1 so that vocab_size() bounds every id.
  int32_t n = static_cast<int32_t>(vocab.size());
  id_bytes_.assign(n, {});
  std::vector<bool> seen(n, false);
  std::unordered_map<std::string, int32_t, PieceHash, std::equal_to<>> by_string;
  by_string.reserve(vocab.size());
  for (const auto& [token, id] : vocab) {
    FP4_CHECK(id >= 0 && id < n, source, ": token ", shown(token), " has id ", id, ", but ids must be 0..",
              n - 1, " for a vocabulary of ", n, " tokens");
    FP4_CHECK(!seen[id], source, ": id ", id, " is given to two tokens (one is ", shown(token), ")");
    seen[id] = true;
    auto bytes = vocab_string_to_bytes(token);
    FP4_CHECK(bytes.has_value(), source, ": token ", shown(token), " (id ", id,
              ") is not a byte-level vocabulary string (a character stands for no byte)");
    id_bytes_[id] = std::move(*bytes);
    FP4_CHECK(by_string.emplace(token, id).second, source, ": token ", shown(token), " appears twice");
  }
  for (int b = 0; b < 256; ++b) {
    auto it = by_string.find(bytes_to_vocab_string(std::string(1, static_cast<char>(b))));
    FP4_CHECK(it != by_string.end(), source, ": the vocabulary lacks the single-byte token of byte ", b,
              ", so not every text can be encoded");
    byte_id_[b] = it->second;
  }
  if (auto it = by_string.find(kEotText); it != by_string.end()) {
    eot_ = it->second;
  } else {
    eot_ = n;
    id_bytes_.emplace_back(kEotText);
  }
  merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    auto ia = by_string.find(a);
    auto ib = by_string.find(b);
    auto im = by_string.find(a + b);
    FP4_CHECK(ia != by_string.end(), source, ": merge ", r + 1, " (", shown(a), " ", shown(b),
              "): ", shown(a), " is not in the vocabulary");
    FP4_CHECK(ib != by_string.end(), source, ": merge ", r + 1, " (", shown(a), " ", shown(b),
              "): ", shown(b), " is not in the vocabulary");
    FP4_CHECK(im != by_string.end(), source, ": merge ", r + 1, " (", shown(a), " ", shown(b),
              "): the merged token ", shown(a + b), " is not in the vocabulary");
    // A repeated pair keeps its first (best) rank.
    merges_.emplace(pair_key(ia->second, ib->second), Merge{static_cast<int32_t>(r), im->second});
  }
  name_ = fingerprint(merges);
}

std::string BpeTokenizer::fingerprint(const std::vector<std::pair<std::string, std::string>>& merges) const {
  // Over each token's length and bytes in id order, then each merge's two parts in rank order.
  auto mix = [](uint64_t h, std::string_view s) {
    const uint64_t n = s.size();
    h = fnv1a64({reinterpret_cast<const uint8_t*>(&n), sizeof(n)}, h);
    return fnv1a64({reinterpret_cast<const uint8_t*>(s.data()), s.size()}, h);
  };
  uint64_t h = kFnvOffset;
  for (const auto& bytes : id_bytes_) h = mix(h, bytes);
  for (const auto& [a, b] : merges) h = mix(mix(h, a), b);
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return "bpe-" + std::to_string(vocab_size()) + "-" + hex;
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  const size_t n = piece.size();
  if (n == 0) return;
  if (n == 1) {
    out.push_back(byte_id_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  // Symbols in a linked list; a heap of candidate merges ordered by (rank, position) so the lowest
  // rank merges first and ties go to the leftmost pair. Stale entries are skipped when popped.
  std::vector<int32_t> id(n);
  std::vector<int32_t> next(n);
  std::vector<int32_t> prev(n);
  for (size_t i = 0; i < n; ++i) {
    id[i] = byte_id_[static_cast<uint8_t>(piece[i])];
    next[i] = static_cast<int32_t>(i) + 1;
    prev[i] = static_cast<int32_t>(i) - 1;
  }
  next[n - 1] = -1;
  struct Candidate {
    int32_t rank, left, left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto offer = [&](int32_t left) {
    if (left < 0 || next[left] < 0) return;
    auto it = merges_.find(pair_key(id[left], id[next[left]]));
    if (it != merges_.end()) heap.push({it->second.rank, left, id[left], id[next[left]]});
  };
  for (size_t i = 0; i + 1 < n; ++i) offer(static_cast<int32_t>(i));
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    int32_t right = next[c.left];
    if (id[c.left] != c.left_id || right < 0 || id[right] != c.right_id) continue;
    id[c.left] = merges_.find(pair_key(c.left_id, c.right_id))->second.result;
    id[right] = -1;  // dead; no live symbol links to it any more
    next[c.left] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.left;
    offer(prev[c.left]);
    offer(c.left);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 16);
  for (std::string_view piece : pretokenizer_.split(text)) {
    if (piece.size() == 1) {
      out.push_back(byte_id_[static_cast<uint8_t>(piece[0])]);
      continue;
    }
    CacheShard& shard = cache_[PieceHash{}(piece) % kCacheShards];
    {
      std::lock_guard lock(shard.mu);
      if (auto it = shard.map.find(piece); it != shard.map.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    size_t start = out.size();
    encode_piece(piece, out);
    std::lock_guard lock(shard.mu);
    if (shard.map.size() >= kCacheShardEntries) shard.map.clear();
    shard.map.emplace(std::string(piece), std::vector<int32_t>(out.begin() + start, out.end()));
  }
  return out;
}

std::string BpeTokenizer::token_bytes(int32_t id) const {
  FP4_CHECK(id >= 0 && id < vocab_size(), source_, ": token id ", id, " is outside [0, ", vocab_size(), ")");
  return id_bytes_[id];
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    FP4_CHECK(id >= 0 && id < vocab_size(), source_, ": token id ", id, " is outside [0, ", vocab_size(),
              ")");
    out += id_bytes_[id];
  }
  return out;
}

}  // namespace fp4
