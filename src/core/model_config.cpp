#include "core/model_config.h"

#include <cmath>

#include "core/error.h"

namespace fp4 {

namespace {

struct Preset {
  const char* name;
  int n_layers, d_model, n_heads, d_ff;
};

// RECIPES.md section 9. Every d_model and d_ff is a multiple of 128 (block128 NVFP4 scaling).
constexpr Preset kPresets[] = {
    {"tiny", 2, 128, 4, 384},          {"olmo2-30m", 6, 384, 6, 1024},     {"olmo2-70m", 8, 512, 8, 1024},
    {"olmo2-150m", 12, 768, 12, 1536}, {"olmo2-370m", 16, 1024, 16, 4096}, {"olmo2-1b", 16, 2048, 16, 8192},
};

constexpr int kGpt2Vocab = 50257;
constexpr int kGpt2VocabPadded = 50304;  // next multiple of 64 (and of 128 / 2): friendlier GEMM shapes
constexpr int kByteVocab = 257;          // 256 byte values + end-of-text (id 256)
constexpr int kByteVocabPadded = 320;    // next multiple of 64

}  // namespace

int64_t ModelConfig::parameter_count() const {
  const int64_t d = d_model, ff = d_ff, v = vocab_size;
  const int64_t per_block = 3 * d * d              // fused qkv
                            + 2 * d                // q and k norms
                            + d * d                // attention output
                            + d                    // post-attention norm
                            + 2 * ff * d + d * ff  // fused gate+up, down
                            + d;                   // post-MLP norm
  return v * d /*embedding*/ + n_layers * per_block + d /*final norm*/ + v * d /*LM head*/;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

ModelConfig model_preset(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name != p.name) continue;
    ModelConfig cfg;
    cfg.name = p.name;
    cfg.n_layers = p.n_layers;
    cfg.d_model = p.d_model;
    cfg.n_heads = p.n_heads;
    cfg.d_ff = p.d_ff;
    if (name == "tiny") {
      cfg.vocab_real = kByteVocab;
      cfg.vocab_size = kByteVocabPadded;
      cfg.max_seq_len = 256;
    } else {
      cfg.vocab_real = kGpt2Vocab;
      cfg.vocab_size = kGpt2VocabPadded;
      cfg.max_seq_len = 4096;  // the authors' context; RoPE has no learned positions, this is a bound
    }
    validate(cfg);
    return cfg;
  }
  std::string known;
  for (const auto& p : kPresets) known += (known.empty() ? "" : ", ") + std::string(p.name);
  FP4_THROW("unknown model preset '", name, "' (known: ", known, ")");
}

void validate(const ModelConfig& cfg) {
  const std::string where = "model config '" + cfg.name + "': ";
  FP4_CHECK(cfg.n_layers > 0, where, "n_layers must be positive, got ", cfg.n_layers);
  FP4_CHECK(cfg.d_model > 0, where, "d_model must be positive, got ", cfg.d_model);
  FP4_CHECK(cfg.n_heads > 0, where, "n_heads must be positive, got ", cfg.n_heads);
  FP4_CHECK(cfg.d_model % cfg.n_heads == 0, where, "d_model ", cfg.d_model, " is not divisible by n_heads ",
            cfg.n_heads);
  FP4_CHECK(cfg.head_dim() % 2 == 0, where, "head_dim ", cfg.head_dim(), " must be even for RoPE");
  FP4_CHECK(cfg.d_ff > 0, where, "d_ff must be positive, got ", cfg.d_ff);
  FP4_CHECK(cfg.vocab_real > 0, where, "vocab_real must be positive, got ", cfg.vocab_real);
  FP4_CHECK(cfg.vocab_size >= cfg.vocab_real, where, "vocab_size ", cfg.vocab_size,
            " is smaller than vocab_real ", cfg.vocab_real);
  FP4_CHECK(cfg.max_seq_len > 0, where, "max_seq_len must be positive, got ", cfg.max_seq_len);
  FP4_CHECK(std::isfinite(cfg.rope_theta) && cfg.rope_theta > 1.0f, where, "rope_theta must be > 1, got ",
            cfg.rope_theta);
  FP4_CHECK(std::isfinite(cfg.norm_eps) && cfg.norm_eps > 0.0f, where, "norm_eps must be positive, got ",
            cfg.norm_eps);
  FP4_CHECK(std::isfinite(cfg.init_std) && cfg.init_std > 0.0f, where, "init_std must be positive, got ",
            cfg.init_std);
  FP4_CHECK(std::isfinite(cfg.z_loss) && cfg.z_loss >= 0.0f, where, "z_loss must be >= 0, got ", cfg.z_loss);
}

}  // namespace fp4
