// ModelConfig: the OLMo-2 architecture hyper-parameters (RECIPES.md section 9) and named presets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp4 {

struct ModelConfig {
  std::string name = "tiny";
  int n_layers = 2;
  int d_model = 128;
  int n_heads = 4;
  int d_ff = 384;        // SwiGLU inner size
  int vocab_size = 320;  // embedding rows (padded); tokens >= vocab_real are never targets
  int vocab_real = 257;  // the tokenizer's vocabulary (tiny: 256 bytes + end-of-text 256)
  int max_seq_len = 256;
  float rope_theta = 500000.0f;
  float norm_eps = 1e-6f;
  float init_std = 0.02f;  // normal, truncated at 3 sigma
  float z_loss = 1e-5f;

  int head_dim() const { return d_model / n_heads; }
  int64_t parameter_count() const;
};

// Presets: tiny, olmo2-30m, olmo2-70m, olmo2-150m, olmo2-370m, olmo2-1b. Throws fp4::Error for an
// unknown name, listing the known ones.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// Throws fp4::Error naming the field when the config is not a valid model (d_model % n_heads, even
// head_dim for RoPE, positive sizes, ...).
void validate(const ModelConfig& cfg);

}  // namespace fp4
