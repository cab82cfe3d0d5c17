#include <algorithm>

#include "core/error.h"
#include "data/loader.h"
#include "data/manifest.h"

namespace fp4 {

TokenStream::TokenStream(const std::filesystem::path& dir_or_manifest, const std::string& split,
                         bool verify_payload) {
  Manifest m = read_manifest(dir_or_manifest);
  const ManifestSplit& s = m.split(split);
  const auto dir = manifest_dir(dir_or_manifest);
  FP4_CHECK(!s.shards.empty(), "data ", dir_or_manifest.string(), " has no ", split, " shards");
  vocab_size_ = m.vocab_size;
  for (const auto& entry : s.shards) {
    ShardFile shard(dir / entry.file, verify_payload);
    const auto& h = shard.header();
    // The manifest and the shard must agree, or the shard is from another run.
    FP4_CHECK(shard.size() == entry.tokens && h.payload_fnv1a == entry.payload_fnv1a, "shard ",
              shard.path().string(), " does not match its manifest entry (", shard.size(),
              " tokens, checksum ", h.payload_fnv1a, " vs ", entry.tokens, " tokens, checksum ",
              entry.payload_fnv1a, "): it was rewritten by another prepare run");
    FP4_CHECK(static_cast<int32_t>(h.vocab_size) == m.vocab_size, "shard ", shard.path().string(),
              " has vocab ", h.vocab_size, " but the manifest says ", m.vocab_size);
    offsets_.push_back(total_);
    total_ += shard.size();
    shards_.push_back(std::move(shard));
  }
}

void TokenStream::copy(int64_t start, std::span<int32_t> out) const {
  const auto n = static_cast<int64_t>(out.size());
  FP4_CHECK(start >= 0 && start + n <= total_, "token stream: tokens [", start, ", ", start + n,
            ") are outside [0, ", total_, ")");
  int64_t done = 0;
  // The last shard whose first token is <= start.
  size_t s =
      static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), start) - offsets_.begin()) - 1;
  while (done < n) {
    int64_t local = start + done - offsets_[s];
    int64_t take = std::min(n - done, shards_[s].size() - local);
    shards_[s].copy(local, out.subspan(done, take));
    done += take;
    ++s;
  }
}

}  // namespace fp4
