#include "train/export_hf.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>

#include "core/error.h"
#include "data/manifest.h"
#include "data/tokenizer.h"
#include "numerics/formats.h"
#include "recipe/recipe_io.h"
#include "train/checkpoint.h"
#include "train/export_hf_tokenizer.h"
#include "train/file_io.h"
#include "train/run_config.h"
#include "train/safetensors.h"

namespace fp4 {
namespace fs = std::filesystem;

HfDtype parse_hf_dtype(const std::string& name) {
  if (name == "f32") return HfDtype::kF32;
  if (name == "bf16") return HfDtype::kBF16;
  FP4_THROW("export: unknown --dtype '", name, "' (known: f32, bf16)");
}

namespace {

// One HF tensor: rows [row0, row0 + rows) of one of our parameters.
struct Piece {
  std::string hf_name;
  std::string ours;
  int64_t row0 = 0;
  int64_t rows = 0;
};

struct Mapping {
  std::vector<std::pair<std::string, std::vector<int64_t>>> params;  // our names and shapes, in order
  std::vector<Piece> pieces;
};

Mapping olmo2_mapping(const ModelConfig& cfg) {
  const int64_t d = cfg.d_model, ff = cfg.d_ff, v = cfg.vocab_size;
  Mapping m;
  auto whole = [&](const std::string& ours, std::vector<int64_t> shape, const std::string& hf) {
    m.pieces.push_back({hf, ours, 0, shape[0]});
    m.params.emplace_back(ours, std::move(shape));
  };
  whole("embed", {v, d}, "model.embed_tokens.weight");
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string b = "blocks." + std::to_string(l), h = "model.layers." + std::to_string(l);
    // Y = X W^T: the fused output columns [q | k | v] are the weight's row blocks.
    m.params.emplace_back(b + ".attn.wqkv", std::vector<int64_t>{3 * d, d});
    m.pieces.push_back({h + ".self_attn.q_proj.weight", b + ".attn.wqkv", 0, d});
    m.pieces.push_back({h + ".self_attn.k_proj.weight", b + ".attn.wqkv", d, d});
    m.pieces.push_back({h + ".self_attn.v_proj.weight", b + ".attn.wqkv", 2 * d, d});
    whole(b + ".attn.q_norm", {d}, h + ".self_attn.q_norm.weight");
    whole(b + ".attn.k_norm", {d}, h + ".self_attn.k_norm.weight");
    whole(b + ".attn.wo", {d, d}, h + ".self_attn.o_proj.weight");
    // Our attn_norm / mlp_norm normalise the sublayer outputs before the residual add, as HF's
    // post_attention_layernorm / post_feedforward_layernorm do.
    whole(b + ".attn_norm", {d}, h + ".post_attention_layernorm.weight");
    m.params.emplace_back(b + ".mlp.w_gate_up", std::vector<int64_t>{2 * ff, d});
    m.pieces.push_back({h + ".mlp.gate_proj.weight", b + ".mlp.w_gate_up", 0, ff});
    m.pieces.push_back({h + ".mlp.up_proj.weight", b + ".mlp.w_gate_up", ff, ff});
    whole(b + ".mlp.w_down", {d, ff}, h + ".mlp.down_proj.weight");
    whole(b + ".mlp_norm", {d}, h + ".post_feedforward_layernorm.weight");
  }
  whole("final_norm", {d}, "model.norm.weight");
  whole("lm_head", {v, d}, "lm_head.weight");
  return m;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? " x " : "") + std::to_string(s[i]);
  return r + "]";
}

StateTensor slice_rows(const Piece& p, const StateTensor& src, HfDtype dtype) {
  const int64_t cols = src.shape.size() == 2 ? src.shape[1] : 1;
  std::vector<int64_t> shape = src.shape;
  shape[0] = p.rows;
  const size_t n = static_cast<size_t>(p.rows * cols);
  const float* from = reinterpret_cast<const float*>(src.bytes.data()) + p.row0 * cols;
  if (dtype == HfDtype::kF32) return make_f32_tensor(p.hf_name, shape, std::span<const float>(from, n));
  std::vector<uint16_t> bits(n);
  for (size_t i = 0; i < n; ++i) bits[i] = bf16_bits_rne(from[i]);
  StateTensor t{p.hf_name, "BF16", shape, std::vector<uint8_t>(n * 2)};
  std::memcpy(t.bytes.data(), bits.data(), t.bytes.size());
  return t;
}

// A float as the double of its shortest decimal form, so config.json says 1e-06, not 9.99999997e-07.
double json_number(float x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), x);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

}  // namespace

std::vector<StateTensor> hf_olmo2_tensors(const ModelConfig& cfg, const std::vector<StateTensor>& params,
                                          HfDtype dtype, const std::string& origin) {
  validate(cfg);
  const Mapping m = olmo2_mapping(cfg);
  std::map<std::string, const StateTensor*> by_name;
  for (const auto& t : params) by_name[t.name] = &t;
  for (const auto& t : params) {
    const bool known =
        std::any_of(m.params.begin(), m.params.end(), [&](const auto& p) { return p.first == t.name; });
    FP4_CHECK(known, origin, ": parameter ", t.name, " ", shape_str(t.shape),
              " has no place in Hugging Face's Olmo2ForCausalLM (export knows the OLMo-2 parameters only)");
  }
  for (const auto& [name, shape] : m.params) {
    const auto it = by_name.find(name);
    FP4_CHECK(it != by_name.end(), origin, ": parameter ", name, " is missing");
    const StateTensor& t = *it->second;
    FP4_CHECK(t.dtype == "F32", origin, ": parameter ", name, " has dtype ", t.dtype, ", expected F32");
    FP4_CHECK(t.shape == shape, origin, ": parameter ", name, " has shape ", shape_str(t.shape),
              " but the model config gives ", shape_str(shape));
    const std::vector<float> v = f32_values(t);
    const auto bad = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
    FP4_CHECK(bad == v.end(), origin, ": parameter ", name, " holds a non-finite value at element ",
              bad - v.begin());
  }
  std::vector<StateTensor> out;
  out.reserve(m.pieces.size());
  for (const auto& p : m.pieces) out.push_back(slice_rows(p, *by_name.at(p.ours), dtype));
  return out;
}

nlohmann::json hf_olmo2_config(const ModelConfig& cfg, const HfTokenIds& ids, HfDtype dtype) {
  nlohmann::json j;
  j["architectures"] = {"Olmo2ForCausalLM"};
  j["model_type"] = "olmo2";
  j["vocab_size"] = cfg.vocab_size;
  j["hidden_size"] = cfg.d_model;
  j["intermediate_size"] = cfg.d_ff;
  j["num_hidden_layers"] = cfg.n_layers;
  j["num_attention_heads"] = cfg.n_heads;
  j["num_key_value_heads"] = cfg.n_heads;
  j["head_dim"] = cfg.head_dim();
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = cfg.max_seq_len;
  j["initializer_range"] = json_number(cfg.init_std);
  j["rms_norm_eps"] = json_number(cfg.norm_eps);
  j["rope_theta"] = json_number(cfg.rope_theta);
  j["rope_scaling"] = nullptr;
  // transformers 5 reads RoPE from rope_parameters; 4.x from rope_theta.
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", json_number(cfg.rope_theta)}};
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["tie_word_embeddings"] = false;
  j["use_cache"] = true;
  j["bos_token_id"] = ids.bos;
  j["eos_token_id"] = ids.eos;
  // No pad id: HF would make it the embedding's padding_idx (a row without gradient when fine-tuning).
  j["pad_token_id"] = nullptr;
  j["torch_dtype"] = dtype == HfDtype::kF32 ? "float32" : "bfloat16";
  return j;
}

nlohmann::json hf_generation_config(const ModelConfig& cfg, const HfTokenIds& ids) {
  nlohmann::json j;
  j["bos_token_id"] = ids.bos;
  j["eos_token_id"] = ids.eos;
  j["pad_token_id"] = ids.eos;  // batched generation pads finished rows with end-of-text
  std::vector<int> padded;
  for (int id = cfg.vocab_real; id < cfg.vocab_size; ++id) padded.push_back(id);
  j["suppress_tokens"] = padded;
  return j;
}

std::vector<StateTensor> merge_low_rank(const std::vector<StateTensor>& params, double beta,
                                        const std::string& origin) {
  auto find = [&](const std::string& name) -> const StateTensor* {
    for (const auto& t : params)
      if (t.name == name) return &t;
    return nullptr;
  };
  std::vector<StateTensor> out;
  for (const auto& t : params) {
    for (const char* suffix : {".lora_l1", ".lora_l2"})
      if (t.name.ends_with(suffix)) {
        const std::string base = t.name.substr(0, t.name.size() - std::strlen(suffix));
        FP4_CHECK(find(base) && find(base + ".lora_l1") && find(base + ".lora_l2"), origin, ": ", t.name,
                  " needs ", base, ", ", base, ".lora_l1 and ", base, ".lora_l2");
      }
    if (t.name.ends_with(".lora_l1") || t.name.ends_with(".lora_l2")) continue;
    const StateTensor* l1 = find(t.name + ".lora_l1");
    const StateTensor* l2 = find(t.name + ".lora_l2");
    if (!l1 || !l2) {
      out.push_back(t);
      continue;
    }
    FP4_CHECK(t.shape.size() == 2 && l1->shape.size() == 2 && l2->shape.size() == 2 &&
                  l1->shape[1] == t.shape[1] && l2->shape[0] == t.shape[0] && l2->shape[1] == l1->shape[0],
              origin, ": LoRA-SVD factors of ", t.name, " ", shape_str(t.shape), " do not chain: lora_l2 ",
              shape_str(l2->shape), " x lora_l1 ", shape_str(l1->shape));
    const int64_t rows = t.shape[0], cols = t.shape[1], r = l1->shape[0];
    const auto w = f32_values(t), a = f32_values(*l1), b = f32_values(*l2);
    std::vector<float> merged(w.size());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        double low = 0;
        for (int64_t k = 0; k < r; ++k) low += static_cast<double>(b[i * r + k]) * a[k * cols + j];
        merged[i * cols + j] = static_cast<float>(w[i * cols + j] + beta * low);
      }
    out.push_back(make_f32_tensor(t.name, t.shape, merged));
  }
  return out;
}

std::string hf_recipe_note(const Recipe& recipe, int n_layers) {
  bool quantized = recipe.attention.q_attn;
  for (int l = 0; l < n_layers; ++l)
    for (int k = 0; k < kNumLinearKinds; ++k)
      quantized = quantized || recipe.policy_for(l, n_layers, static_cast<LinearKind>(k)).quantized();
  std::string note;
  if (quantized)
    note = "recipe " + recipe.name +
           " quantizes the forward (NVFP4 linears or attention); the exported model holds the full-precision "
           "master weights and computes without quantization, so its logits differ from the quantized "
           "forward of `fp4train eval` by the quantization error";
  if (recipe.lora_svd.enabled)
    note += std::string(note.empty() ? "" : "; ") + "its LoRA-SVD factors are merged: W = W_res + beta L2 L1";
  return note;
}

namespace {

// The checkpoint a path names: itself when it has a manifest, else a run directory's latest.
fs::path resolve_checkpoint(const fs::path& path) {
  if (fs::exists(path / "manifest.json")) return path;
  const auto latest = latest_checkpoint(path);
  FP4_CHECK(latest, "export: ", path.string(),
            ": neither a checkpoint (no manifest.json) nor a run directory with checkpoints");
  return *latest;
}

bool non_empty_dir(const fs::path& p) {
  return fs::is_directory(p) && !fs::is_empty(p);
}

// True when `inner` is `outer` or lies below it (compared canonically, existing or not).
bool is_within(const fs::path& inner, const fs::path& outer) {
  const fs::path rel = fs::weakly_canonical(inner).lexically_relative(fs::weakly_canonical(outer));
  return !rel.empty() && *rel.begin() != "..";
}

// A directory beside `out` that is removed unless it was renamed into place.
class StagingDir {
 public:
  explicit StagingDir(const fs::path& out) {
    std::random_device rd;
    path_ = out.parent_path() / ("." + out.filename().string() + ".export-" + std::to_string(getpid()) + "-" +
                                 std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~StagingDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;
  const fs::path& path() const { return path_; }

  // Moves the staged directory to `out`, replacing an empty or (force) non-empty one.
  void commit(const fs::path& out, bool force) {
    fs::path old;
    if (fs::exists(out)) {
      FP4_CHECK(fs::is_directory(out), "export: --out ", out.string(), " exists and is not a directory");
      FP4_CHECK(force || fs::is_empty(out), "export: --out ", out.string(),
                " is not empty (pass --force to replace it)");
      old = path_;
      old += ".old";
      fs::rename(out, old);
    }
    fs::rename(path_, out);
    path_.clear();
    fsync_directory(out.parent_path());
    std::error_code ec;
    if (!old.empty()) fs::remove_all(old, ec);
  }

 private:
  fs::path path_;
};

}  // namespace

ExportResult export_command(const ExportArgs& args) {
  FP4_CHECK(args.format == "hf", "export: unknown --format '", args.format, "' (known: hf)");
  const HfDtype dtype = parse_hf_dtype(args.dtype);
  FP4_CHECK(!args.out.empty(), "export: --out is required");
  const fs::path out = fs::absolute(args.out).lexically_normal();
  FP4_CHECK(!fs::exists(out) || fs::is_directory(out), "export: --out ", out.string(),
            " exists and is not a directory");
  FP4_CHECK(args.force || !non_empty_dir(out), "export: --out ", out.string(),
            " is not empty (pass --force to replace it)");

  ExportResult r;
  r.checkpoint = resolve_checkpoint(args.checkpoint);
  r.out = out;
  FP4_CHECK(!is_within(r.checkpoint, out), "export: --out ", out.string(), " holds the checkpoint ",
            r.checkpoint.string(), "; choose another directory");
  const Checkpoint ckpt = load_checkpoint(r.checkpoint, /*with_state=*/false);
  const std::string trainer_file = (r.checkpoint / "trainer.json").string();
  FP4_CHECK(ckpt.trainer.contains("config") && ckpt.trainer.contains("recipe_toml"), trainer_file,
            ": missing the run config or the recipe");
  const RunConfig config = run_config_from_json(ckpt.trainer["config"], trainer_file);
  const Recipe recipe =
      parse_recipe(ckpt.trainer["recipe_toml"].get<std::string>(), trainer_file + " (recipe_toml)");
  const ModelConfig& cfg = config.model;
  if (auto note = hf_recipe_note(recipe, cfg.n_layers); !note.empty()) r.notes.push_back(note);

  const std::string model_file = (r.checkpoint / "model.safetensors").string();
  const auto tensors = hf_olmo2_tensors(
      cfg,
      recipe.lora_svd.enabled ? merge_low_rank(ckpt.model, recipe.lora_svd.beta, model_file) : ckpt.model,
      dtype, model_file);
  std::string spec = args.tokenizer.empty() ? config.data.tokenizer : args.tokenizer;
  if (spec.empty()) spec = read_manifest(config.data.train_dir).tokenizer;
  const HfTokenizerFiles tok = hf_tokenizer_files(spec, cfg);
  const HfTokenIds ids{tok.eot, tok.eot};

  std::vector<std::pair<std::string, std::string>> texts = tok.files;
  texts.emplace_back("config.json", hf_olmo2_config(cfg, ids, dtype).dump(2) + "\n");
  texts.emplace_back("generation_config.json", hf_generation_config(cfg, ids).dump(2) + "\n");
  fs::create_directories(out.parent_path());
  StagingDir stage(out);
  write_safetensors(stage.path() / "model.safetensors", tensors, {{"format", "pt"}});
  r.files.push_back("model.safetensors");
  for (const auto& [name, text] : texts) {
    write_file_synced(stage.path() / name, text);
    r.files.push_back(name);
  }
  fsync_directory(stage.path());
  stage.commit(out, args.force);
  std::sort(r.files.begin(), r.files.end());
  return r;
}

}  // namespace fp4
