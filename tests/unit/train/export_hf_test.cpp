#include "train/export_hf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "data/byte_unicode.h"
#include "recipe/recipe_io.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/file_io.h"
#include "train/safetensors.h"
#include "train/trainer.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using ::testing::HasSubstr;
using testing::TempDir;

// One small trained run shared by the tests (training is the slow part); each test exports it afresh.
class ExportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    testing::prepare_corpus(tmp_->path());
    RunConfig c = testing::small_run_config(tmp_->path(), "run", 4, std::random_device{}(), 4, 4);
    c.model.n_layers = 2;
    c.model.d_ff = 48;  // d_ff != d_model, so a split at the wrong row count cannot pass
    c.model.vocab_real =
        258;  // room for the test's GPT-2-style tokenizer (256 bytes, one merge, end-of-text)
    c.train.eval_every = 0;
    c.train.eval_batches = 1;
    TrainerOptions o;
    run_ = new TrainResult(Trainer(c, o).run());
  }
  static void TearDownTestSuite() {
    delete run_;
    delete tmp_;
  }

  ExportArgs args(const std::string& out, const std::string& dtype = "f32") const {
    ExportArgs a;
    a.checkpoint = run_->run_dir;
    a.out = tmp_->path() / out;
    a.dtype = dtype;
    return a;
  }
  static const Checkpoint& checkpoint() {
    static const Checkpoint c = load_checkpoint(run_->last_checkpoint, false);
    return c;
  }
  static ModelConfig model() {
    return run_config_from_json(checkpoint().trainer["config"], "trainer.json").model;
  }
  static std::vector<float> param(const std::string& name) {
    for (const auto& t : checkpoint().model)
      if (t.name == name) return f32_values(t);
    ADD_FAILURE() << "no parameter " << name;
    return {};
  }

  static TempDir* tmp_;
  static TrainResult* run_;
};
TempDir* ExportTest::tmp_ = nullptr;
TrainResult* ExportTest::run_ = nullptr;

// Rows [r0, r0 + rows) of a row-major matrix with `cols` columns.
std::vector<float> rows_of(const std::vector<float>& m, int64_t r0, int64_t rows, int64_t cols) {
  return {m.begin() + r0 * cols, m.begin() + (r0 + rows) * cols};
}

TEST_F(ExportTest, EveryHfTensorHoldsTheEngineParametersExactly) {
  const ExportResult r = export_command(args("hf"));
  EXPECT_EQ(r.checkpoint, run_->last_checkpoint);
  EXPECT_EQ(r.files, (std::vector<std::string>{"config.json", "generation_config.json", "model.safetensors",
                                               "tokenizer.json", "tokenizer_config.json"}));
  const auto st = read_safetensors(r.out / "model.safetensors");
  EXPECT_EQ(st.metadata.at("format"), "pt");
  const ModelConfig m = model();
  const int64_t d = m.d_model, ff = m.d_ff, v = m.vocab_size;
  ASSERT_EQ(st.tensors.size(), static_cast<size_t>(3 + 11 * m.n_layers));
  const std::string file = (r.out / "model.safetensors").string();
  auto expect = [&](const std::string& hf, std::vector<int64_t> shape, const std::vector<float>& want) {
    const StateTensor& t = st.get(hf, file);
    EXPECT_EQ(t.dtype, "F32") << hf;
    EXPECT_EQ(t.shape, shape) << hf;
    const auto got = f32_values(t);
    ASSERT_EQ(got.size(), want.size()) << hf;
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << hf << " element " << i;
  };
  expect("model.embed_tokens.weight", {v, d}, param("embed"));
  expect("model.norm.weight", {d}, param("final_norm"));
  expect("lm_head.weight", {v, d}, param("lm_head"));
  for (int l = 0; l < m.n_layers; ++l) {
    const std::string b = "blocks." + std::to_string(l), h = "model.layers." + std::to_string(l);
    const auto qkv = param(b + ".attn.wqkv"), gu = param(b + ".mlp.w_gate_up");
    expect(h + ".self_attn.q_proj.weight", {d, d}, rows_of(qkv, 0, d, d));
    expect(h + ".self_attn.k_proj.weight", {d, d}, rows_of(qkv, d, d, d));
    expect(h + ".self_attn.v_proj.weight", {d, d}, rows_of(qkv, 2 * d, d, d));
    expect(h + ".self_attn.o_proj.weight", {d, d}, param(b + ".attn.wo"));
    expect(h + ".self_attn.q_norm.weight", {d}, param(b + ".attn.q_norm"));
    expect(h + ".self_attn.k_norm.weight", {d}, param(b + ".attn.k_norm"));
    expect(h + ".post_attention_layernorm.weight", {d}, param(b + ".attn_norm"));
    expect(h + ".mlp.gate_proj.weight", {ff, d}, rows_of(gu, 0, ff, d));
    expect(h + ".mlp.up_proj.weight", {ff, d}, rows_of(gu, ff, ff, d));
    expect(h + ".mlp.down_proj.weight", {d, ff}, param(b + ".mlp.w_down"));
    expect(h + ".post_feedforward_layernorm.weight", {d}, param(b + ".mlp_norm"));
  }
  // Trained, so the norms are no longer all ones (a swapped norm would show).
  EXPECT_NE(param("blocks.0.attn.q_norm"), param("blocks.0.attn.k_norm"));
}

TEST_F(ExportTest, ConfigJsonDescribesTheModel) {
  const ExportResult r = export_command(args("hf_config"));
  const auto c = nlohmann::json::parse(read_file(r.out / "config.json"));
  const ModelConfig m = model();
  EXPECT_EQ(c["architectures"], nlohmann::json::array({"Olmo2ForCausalLM"}));
  EXPECT_EQ(c["model_type"], "olmo2");
  EXPECT_EQ(c["vocab_size"], m.vocab_size);  // padded: every embedding row is exported
  EXPECT_EQ(c["hidden_size"], m.d_model);
  EXPECT_EQ(c["intermediate_size"], m.d_ff);
  EXPECT_EQ(c["num_hidden_layers"], m.n_layers);
  EXPECT_EQ(c["num_attention_heads"], m.n_heads);
  EXPECT_EQ(c["num_key_value_heads"], m.n_heads);
  EXPECT_EQ(c["head_dim"], m.d_model / m.n_heads);
  EXPECT_EQ(c["max_position_embeddings"], m.max_seq_len);
  EXPECT_EQ(static_cast<float>(c["rms_norm_eps"].get<double>()), m.norm_eps);
  EXPECT_EQ(c["rms_norm_eps"].get<double>(), 1e-6);  // the decimal, not 9.99999997e-07
  EXPECT_EQ(static_cast<float>(c["rope_theta"].get<double>()), m.rope_theta);
  EXPECT_EQ(c["rope_parameters"]["rope_theta"], c["rope_theta"]);
  EXPECT_EQ(static_cast<float>(c["initializer_range"].get<double>()), m.init_std);
  EXPECT_EQ(c["hidden_act"], "silu");
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_EQ(c["attention_bias"], false);
  EXPECT_EQ(c["attention_dropout"], 0.0);
  EXPECT_EQ(c["eos_token_id"], 256);  // the byte tokenizer's end-of-text
  EXPECT_EQ(c["bos_token_id"], 256);
  EXPECT_TRUE(c["pad_token_id"].is_null());
  EXPECT_EQ(c["torch_dtype"], "float32");

  const auto g = nlohmann::json::parse(read_file(r.out / "generation_config.json"));
  EXPECT_EQ(g["eos_token_id"], 256);
  std::vector<int> padded;
  for (int id = m.vocab_real; id < m.vocab_size; ++id) padded.push_back(id);
  EXPECT_EQ(g["suppress_tokens"].get<std::vector<int>>(), padded);
  // The byte tokenizer as a byte-level BPE without merges (export_hf_tokenizer_test.cpp checks its encoding).
  EXPECT_TRUE(r.notes.empty());
  const auto tj = nlohmann::json::parse(read_file(r.out / "tokenizer.json"));
  EXPECT_EQ(tj["model"]["vocab"].size(), 257u);
  EXPECT_TRUE(tj["model"]["merges"].empty());
  EXPECT_EQ(nlohmann::json::parse(read_file(r.out / "tokenizer_config.json"))["tokenizer_class"],
            "PreTrainedTokenizerFast");
}

// Each BF16 value is the nearer of the two BF16 neighbours of the float (ties: even mantissa).
void expect_rne(float x, uint16_t b) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint16_t lo = static_cast<uint16_t>(u >> 16), hi = static_cast<uint16_t>(lo + 1);
  auto value = [](uint16_t h) { return static_cast<double>(std::bit_cast<float>(uint32_t{h} << 16)); };
  const double dlo = std::abs(x - value(lo)), dhi = std::abs(value(hi) - x);
  const uint16_t want = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
  ASSERT_EQ(b, want) << "x = " << x;
}

TEST_F(ExportTest, Bf16ExportRoundsToNearestEven) {
  const ExportResult r = export_command(args("hf16", "bf16"));
  const auto c = nlohmann::json::parse(read_file(r.out / "config.json"));
  EXPECT_EQ(c["torch_dtype"], "bfloat16");
  const auto st = read_safetensors(r.out / "model.safetensors");
  const auto& t = st.get("lm_head.weight", "model.safetensors");
  ASSERT_EQ(t.dtype, "BF16");
  const auto want = param("lm_head");
  ASSERT_EQ(t.bytes.size(), want.size() * 2);
  for (size_t i = 0; i < want.size(); ++i) {
    uint16_t b;
    std::memcpy(&b, t.bytes.data() + 2 * i, 2);
    expect_rne(want[i], b);
  }

  // Ties and near-ties of both signs, through the mapping directly.
  ModelConfig m = model();
  std::vector<StateTensor> params = checkpoint().model;
  std::mt19937_64 rng(std::random_device{}());
  std::vector<float> norm(static_cast<size_t>(m.d_model));
  for (auto& x : norm) {
    const uint32_t hi = static_cast<uint32_t>(rng() & 0xBFFF) + 0x3000;  // moderate exponents, both signs
    const uint32_t low[] = {0x8000, 0x7FFF, 0x8001, 0x0000, static_cast<uint32_t>(rng() & 0xFFFF)};
    x = std::bit_cast<float>((hi << 16) | low[rng() % 5]);
  }
  for (auto& p : params)
    if (p.name == "final_norm") p = make_f32_tensor("final_norm", p.shape, norm);
  const auto out = hf_olmo2_tensors(m, params, HfDtype::kBF16, "test");
  for (const auto& o : out) {
    if (o.name != "model.norm.weight") continue;
    for (size_t i = 0; i < norm.size(); ++i) {
      uint16_t b;
      std::memcpy(&b, o.bytes.data() + 2 * i, 2);
      expect_rne(norm[i], b);
    }
  }
}

TEST_F(ExportTest, RunDirectoryAndCheckpointGiveTheSameFiles) {
  const auto a = export_command(args("from_run"));
  ExportArgs b = args("from_ckpt");
  b.checkpoint = run_->last_checkpoint;
  export_command(b);
  for (const auto& f : a.files)
    EXPECT_EQ(read_file(a.out / f), read_file(tmp_->path() / "from_ckpt" / f)) << f;
}

TEST_F(ExportTest, RefusesToOverwriteWithoutForce) {
  const fs::path out = tmp_->path() / "hf_keep";
  fs::create_directories(out);
  export_command(args("hf_keep"));  // an existing empty directory is fine
  write_file_synced(out / "stray.txt", "user data");
  EXPECT_THAT(error_of([&] { export_command(args("hf_keep")); }),
              HasSubstr("is not empty (pass --force to replace it)"));
  EXPECT_TRUE(fs::exists(out / "stray.txt"));
  ExportArgs f = args("hf_keep", "bf16");
  f.force = true;
  export_command(f);
  EXPECT_FALSE(fs::exists(out / "stray.txt"));  // replaced as a whole
  EXPECT_EQ(nlohmann::json::parse(read_file(out / "config.json"))["torch_dtype"], "bfloat16");
  // No staging or old directories left beside it.
  for (const auto& e : fs::directory_iterator(tmp_->path()))
    EXPECT_THAT(e.path().filename().string(), ::testing::Not(HasSubstr(".export-")));

  write_file_synced(tmp_->path() / "a_file", "x");
  f.out = tmp_->path() / "a_file";
  EXPECT_THAT(error_of([&] { export_command(f); }), HasSubstr("exists and is not a directory"));
  // Even with --force, never into the run directory that holds the checkpoint.
  f.out = run_->run_dir;
  EXPECT_THAT(error_of([&] { export_command(f); }), HasSubstr("holds the checkpoint"));
  EXPECT_TRUE(fs::exists(run_->last_checkpoint / "model.safetensors"));
}

TEST_F(ExportTest, ClearErrors) {
  ExportArgs a = args("hf_err");
  a.format = "gguf";
  EXPECT_THAT(error_of([&] { export_command(a); }), HasSubstr("unknown --format 'gguf' (known: hf)"));
  a = args("hf_err", "f16");
  EXPECT_THAT(error_of([&] { export_command(a); }), HasSubstr("unknown --dtype 'f16' (known: f32, bf16)"));
  a = args("hf_err");
  a.checkpoint = tmp_->path() / "nowhere";
  EXPECT_THAT(error_of([&] { export_command(a); }), HasSubstr("neither a checkpoint"));
  a = args("hf_err");
  a.tokenizer = (tmp_->path() / "no_tokenizer").string();
  EXPECT_THAT(error_of([&] { export_command(a); }), HasSubstr("pass --tokenizer"));
  EXPECT_FALSE(fs::exists(tmp_->path() / "hf_err"));

  // A corrupt checkpoint (one flipped byte in a copy of it) fails its checksum.
  const fs::path copy = tmp_->path() / "corrupt_ckpt";
  fs::copy(run_->last_checkpoint, copy);
  std::string raw = read_file(copy / "model.safetensors");
  raw[raw.size() / 2] = static_cast<char>(raw[raw.size() / 2] ^ 0x10);
  write_file_synced(copy / "model.safetensors", raw);
  a.checkpoint = copy;
  a.tokenizer = "";
  EXPECT_THAT(error_of([&] { export_command(a); }), HasSubstr("checksum mismatch"));
  EXPECT_FALSE(fs::exists(tmp_->path() / "hf_err"));
}

TEST_F(ExportTest, ParametersOlmo2CannotHoldAreRefused) {
  const ModelConfig m = model();
  auto params = checkpoint().model;
  params.push_back(make_f32_tensor("blocks.0.attn.wqkv.lora_l1", {2, 2}, std::vector<float>(4, 1.0f)));
  EXPECT_THAT(error_of([&] { hf_olmo2_tensors(m, params, HfDtype::kF32, "ckpt"); }),
              HasSubstr("ckpt: parameter blocks.0.attn.wqkv.lora_l1 [2 x 2] has no place"));
  params.pop_back();
  auto missing = params;
  missing.erase(missing.begin() + 3);
  EXPECT_THAT(error_of([&] { hf_olmo2_tensors(m, missing, HfDtype::kF32, "ckpt"); }),
              HasSubstr("parameter " + params[3].name + " is missing"));
  auto shaped = params;
  for (auto& p : shaped)
    if (p.name == "blocks.1.mlp.w_down") p.shape = {p.shape[1], p.shape[0]};
  EXPECT_THAT(error_of([&] { hf_olmo2_tensors(m, shaped, HfDtype::kF32, "ckpt"); }),
              HasSubstr("blocks.1.mlp.w_down has shape [48 x 32] but the model config gives [32 x 48]"));
  auto nan = params;
  for (auto& p : nan)
    if (p.name == "final_norm") {
      auto v = f32_values(p);
      v[5] = std::nanf("");
      p = make_f32_tensor(p.name, p.shape, v);
    }
  EXPECT_THAT(error_of([&] { hf_olmo2_tensors(m, nan, HfDtype::kF32, "ckpt"); }),
              HasSubstr("final_norm holds a non-finite value at element 5"));

  EXPECT_EQ(hf_recipe_note(Recipe{}, 2), "");
  Recipe nvfp4 = load_recipe("nvidia-nvfp4");
  EXPECT_THAT(hf_recipe_note(nvfp4, 2), HasSubstr("computes without quantization"));
  nvfp4.lora_svd.enabled = true;
  EXPECT_THAT(hf_recipe_note(nvfp4, 2), HasSubstr("LoRA-SVD factors are merged"));
}

// LoRA-SVD checkpoints: W_res + beta L2 L1 becomes the exported weight; the factors disappear.
TEST_F(ExportTest, LowRankFactorsAreMergedIntoTheirWeight) {
  const ModelConfig m = model();
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> nd(0, 0.3f);
  const int64_t d = m.d_model, r = 3;
  auto params = checkpoint().model;
  std::vector<float> l1(static_cast<size_t>(r * d)), l2(static_cast<size_t>(3 * d * r));
  for (auto& x : l1) x = nd(rng);
  for (auto& x : l2) x = nd(rng);
  params.push_back(make_f32_tensor("blocks.1.attn.wqkv.lora_l1", {r, d}, l1));
  params.push_back(make_f32_tensor("blocks.1.attn.wqkv.lora_l2", {3 * d, r}, l2));
  const double beta = -0.75;
  const auto merged = merge_low_rank(params, beta, "ckpt");
  ASSERT_EQ(merged.size(), checkpoint().model.size());
  const auto w_res = param("blocks.1.attn.wqkv");
  std::vector<float> want(w_res.size());
  for (int64_t i = 0; i < 3 * d; ++i)
    for (int64_t j = 0; j < d; ++j) {
      long double low = 0;
      for (int64_t k = r - 1; k >= 0; --k) low += static_cast<long double>(l2[i * r + k]) * l1[k * d + j];
      want[i * d + j] = static_cast<float>(w_res[i * d + j] + beta * low);
    }
  for (const auto& t : merged) {
    const auto v = f32_values(t);
    if (t.name != "blocks.1.attn.wqkv") {
      EXPECT_EQ(v, param(t.name)) << t.name;  // the other parameters are untouched
      continue;
    }
    for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(v[i], want[i], 1e-6f * (1 + std::abs(want[i]))) << i;
  }
  const auto named = [](const std::vector<StateTensor>& ts, const std::string& n) {
    return std::find_if(ts.begin(), ts.end(), [&](const StateTensor& t) { return t.name == n; });
  };
  const auto hf = hf_olmo2_tensors(m, merged, HfDtype::kF32, "ckpt");
  const auto k = named(hf, "model.layers.1.self_attn.k_proj.weight");
  ASSERT_NE(k, hf.end());
  EXPECT_EQ(f32_values(*k), rows_of(f32_values(*named(merged, "blocks.1.attn.wqkv")), d, d, d));

  auto lonely = params;
  lonely.pop_back();  // lora_l1 without lora_l2
  EXPECT_THAT(error_of([&] { merge_low_rank(lonely, beta, "ckpt"); }),
              HasSubstr("ckpt: blocks.1.attn.wqkv.lora_l1 needs"));
  auto bad = params;
  bad.back().shape = {3 * d - 1, r};
  bad.back().bytes.resize(static_cast<size_t>((3 * d - 1) * r * 4));
  EXPECT_THAT(error_of([&] { merge_low_rank(bad, beta, "ckpt"); }), HasSubstr("do not chain"));
}

// A GPT-2-style tokenizer directory: 256 byte tokens, one merge, no end-of-text entry (ours gives it
// the next id) and a merges file without the "#version" line transformers' GPT2Tokenizer skips.
fs::path write_gpt2_tokenizer(const fs::path& dir) {
  fs::create_directories(dir);
  nlohmann::json vocab;
  for (int b = 0; b < 256; ++b) vocab[bytes_to_vocab_string(std::string(1, static_cast<char>(b)))] = b;
  vocab["ab"] = 256;
  write_file_synced(dir / "encoder.json", vocab.dump());
  write_file_synced(dir / "vocab.bpe", "a b");
  return dir;
}

TEST_F(ExportTest, Gpt2TokenizerFilesAsTransformersReadsThem) {
  ExportArgs a = args("hf_gpt2");
  a.tokenizer = write_gpt2_tokenizer(tmp_->path() / "gpt2tok").string();
  const ExportResult r = export_command(a);
  EXPECT_EQ(r.files, (std::vector<std::string>{"config.json", "generation_config.json", "merges.txt",
                                               "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                                               "vocab.json"}));
  EXPECT_TRUE(r.notes.empty());
  const auto vocab = nlohmann::json::parse(read_file(r.out / "vocab.json"));
  EXPECT_EQ(vocab.size(), 258u);
  EXPECT_EQ(vocab["<|endoftext|>"], 257);
  EXPECT_EQ(vocab["ab"], 256);
  EXPECT_EQ(read_file(r.out / "merges.txt"), "#version: 0.2\na b\n");
  const auto tc = nlohmann::json::parse(read_file(r.out / "tokenizer_config.json"));
  EXPECT_EQ(tc["tokenizer_class"], "PreTrainedTokenizerFast");
  const auto tj = nlohmann::json::parse(read_file(r.out / "tokenizer.json"));
  EXPECT_EQ(tj["model"]["vocab"]["<|endoftext|>"], 257);
  EXPECT_EQ(tj["model"]["merges"], nlohmann::json::parse(R"([["a", "b"]])"));
  EXPECT_EQ(tc["eos_token"], "<|endoftext|>");
  const auto c = nlohmann::json::parse(read_file(r.out / "config.json"));
  EXPECT_EQ(c["eos_token_id"], 257);
  EXPECT_EQ(nlohmann::json::parse(read_file(r.out / "generation_config.json"))["eos_token_id"], 257);

  // Files that already follow the convention are copied byte for byte.
  write_file_synced(tmp_->path() / "gpt2tok/encoder.json", read_file(r.out / "vocab.json"));
  write_file_synced(tmp_->path() / "gpt2tok/vocab.bpe", "#version: 0.2\na b\n");
  a.force = true;
  export_command(a);
  EXPECT_EQ(read_file(r.out / "vocab.json"), read_file(tmp_->path() / "gpt2tok/encoder.json"));
  EXPECT_EQ(read_file(r.out / "merges.txt"), "#version: 0.2\na b\n");

  // A tokenizer with more ids than the model's real vocabulary does not fit (vocab holds end-of-text now).
  nlohmann::json big = vocab;
  big["abab"] = 258;
  write_file_synced(tmp_->path() / "gpt2tok/encoder.json", big.dump());
  write_file_synced(tmp_->path() / "gpt2tok/vocab.bpe", "a b\nab ab\n");
  EXPECT_THAT(error_of([&] { export_command(a); }), HasSubstr("has 259 ids but the model only 258"));
}

TEST_F(ExportTest, HfTokenizerJsonIsCopied) {
  nlohmann::json vocab;
  for (int b = 0; b < 256; ++b) vocab[bytes_to_vocab_string(std::string(1, static_cast<char>(b)))] = b;
  const nlohmann::json tj = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
      {"added_tokens", {{{"id", 256}, {"content", "<|endoftext|>"}}}}};
  const fs::path file = tmp_->path() / "tok/tokenizer.json";
  fs::create_directories(file.parent_path());
  write_file_synced(file, tj.dump());
  ExportArgs a = args("hf_tokjson");
  a.tokenizer = file.string();
  const ExportResult r = export_command(a);
  EXPECT_EQ(read_file(r.out / "tokenizer.json"), read_file(file));
  EXPECT_EQ(nlohmann::json::parse(read_file(r.out / "tokenizer_config.json"))["tokenizer_class"],
            "PreTrainedTokenizerFast");
  EXPECT_EQ(nlohmann::json::parse(read_file(r.out / "config.json"))["eos_token_id"], 256);
}

}  // namespace
}  // namespace fp4
