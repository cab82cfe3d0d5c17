// `fp4train export --format hf`: a checkpoint becomes a Hugging Face transformers directory that
// Olmo2ForCausalLM.from_pretrained() loads (config.json, model.safetensors, generation_config.json and
// the run's tokenizer files). docs/EXPORT.md has the name mapping and the conventions it relies on.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/engine.h"
#include "recipe/recipe.h"

namespace fp4 {

enum class HfDtype { kF32, kBF16 };
// "f32" or "bf16"; anything else throws fp4::Error naming the option.
HfDtype parse_hf_dtype(const std::string& name);

// The Hugging Face Olmo2 tensors for our parameters (F32, as in model.safetensors of a checkpoint):
// the fused QKV [3d x d] splits into q/k/v_proj (rows [q; k; v]), the fused gate+up [2ff x d] into
// gate_proj/up_proj (rows [gate; up]); BF16 rounds to nearest even. Throws fp4::Error naming `origin`
// and the tensor for a missing parameter, a wrong shape or dtype, a non-finite value, or a parameter
// Olmo2 has no place for.
std::vector<StateTensor> hf_olmo2_tensors(const ModelConfig& cfg, const std::vector<StateTensor>& params,
                                          HfDtype dtype, const std::string& origin);

// The special token ids the exported files name: end-of-text closes documents and, as in GPT-2, also
// starts generation (our sampler starts an empty prompt with it).
struct HfTokenIds {
  int eos = 0;
  int bos = 0;
};

// config.json of Olmo2ForCausalLM. vocab_size is the padded embedding size (its extra rows exported).
nlohmann::json hf_olmo2_config(const ModelConfig& cfg, const HfTokenIds& ids, HfDtype dtype);
// generation_config.json: the special ids, and the padded ids suppressed (our engine never predicts them).
nlohmann::json hf_generation_config(const ModelConfig& cfg, const HfTokenIds& ids);

// LoRA-SVD checkpoints hold W_res as `<name>` beside `<name>.lora_l1` [r x in] and `<name>.lora_l2`
// [out x r]: returns the parameters with each such triple merged into `<name>` = W_res + beta L2 L1
// (accumulated in double, rounded once). Throws fp4::Error naming `origin` and the tensor for a factor
// without its partner or its weight, or shapes that do not chain.
std::vector<StateTensor> merge_low_rank(const std::vector<StateTensor>& params, double beta,
                                        const std::string& origin);

// A note (empty if none) on what the exported model computes differently from the recipe's: the
// quantized forward (NVFP4 linears or attention) is not exported, only the full-precision weights.
std::string hf_recipe_note(const Recipe& recipe, int n_layers);

struct ExportArgs {
  std::filesystem::path checkpoint;  // a checkpoint directory, or a run directory (its latest)
  std::filesystem::path out;
  std::string format = "hf";
  std::string dtype = "f32";
  std::string tokenizer;  // tokenizer spec; empty: the run's (data.tokenizer, else its data manifest's)
  bool force = false;     // replace a non-empty `out`
};

struct ExportResult {
  std::filesystem::path checkpoint;  // the checkpoint exported
  std::filesystem::path out;
  std::vector<std::string> files;  // written into out, sorted
  std::vector<std::string> notes;  // what the user should know (no HF tokenizer, quantized forward)
};

// Writes the directory atomically (a temp directory beside `out`, fsynced, renamed into place). Refuses
// a non-empty `out` without force, and an `out` that holds the checkpoint.
ExportResult export_command(const ExportArgs& args);

}  // namespace fp4
