// checkpoint_logits: the CPU engine's logits for a checkpoint, at every position of random token rows,
// for tests/reference/check_export_hf.py to compare with its Hugging Face-style forward of the export.
// The engine only gives the last position's logits, so each prefix length is one call.
//   checkpoint_logits --checkpoint DIR --out FILE [--rows N] [--seq T] [--seed S]
// FILE (safetensors): tokens I32 [N x T] (ids below vocab_real, end-of-text included) and
// logits F32 [N x T x vocab_size] (padded ids -inf, as the engine gives them).
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/commands.h"
#include "train/safetensors.h"

namespace fp4 {
namespace {

int run(int argc, char** argv) {
  std::string checkpoint, out;
  int rows = 3, seq = 24;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    FP4_CHECK(i + 1 < argc, "checkpoint_logits: ", a, " needs a value");
    if (a == "--checkpoint")
      checkpoint = argv[++i];
    else if (a == "--out")
      out = argv[++i];
    else if (a == "--rows")
      rows = std::stoi(argv[++i]);
    else if (a == "--seq")
      seq = std::stoi(argv[++i]);
    else if (a == "--seed")
      seed = std::stoull(argv[++i]);
    else
      FP4_THROW("checkpoint_logits: unknown argument ", a);
  }
  FP4_CHECK(!checkpoint.empty() && !out.empty(), "checkpoint_logits: --checkpoint and --out are required");
  FP4_CHECK(rows > 0 && seq > 0, "checkpoint_logits: --rows and --seq must be positive");
  LoadedModel m = load_model(checkpoint, "cpu");
  const ModelConfig& cfg = m.engine->config();
  std::mt19937_64 rng(seed);
  std::vector<int32_t> tokens(static_cast<size_t>(rows) * seq);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(cfg.vocab_real));
  tokens[0] = cfg.vocab_real - 1;  // the highest real id (end-of-text for the byte tokenizer)

  const size_t v = static_cast<size_t>(cfg.vocab_size);
  std::vector<float> logits(tokens.size() * v);
  std::vector<float> last(static_cast<size_t>(rows) * v);
  for (int t = 1; t <= seq; ++t) {
    Batch b;
    b.batch = rows;
    b.seq = t;
    for (int r = 0; r < rows; ++r)
      b.tokens.insert(b.tokens.end(), tokens.begin() + r * seq, tokens.begin() + r * seq + t);
    b.targets.assign(b.tokens.size(), -1);
    m.engine->last_logits(b, last);
    for (int r = 0; r < rows; ++r)
      std::copy_n(last.begin() + r * v, v, logits.begin() + (static_cast<size_t>(r) * seq + t - 1) * v);
  }
  StateTensor tok{"tokens", "I32", {rows, seq}, std::vector<uint8_t>(tokens.size() * 4)};
  std::memcpy(tok.bytes.data(), tokens.data(), tok.bytes.size());
  const std::vector<StateTensor> tensors = {tok,
                                            make_f32_tensor("logits", {rows, seq, cfg.vocab_size}, logits)};
  write_safetensors(out, tensors);
  std::cerr << "checkpoint_logits: " << m.checkpoint.string() << " -> " << out << " (" << rows << " x " << seq
            << ")\n";
  return 0;
}

}  // namespace
}  // namespace fp4

int main(int argc, char** argv) {
  try {
    return fp4::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "checkpoint_logits: " << e.what() << "\n";
    return 1;
  }
}
