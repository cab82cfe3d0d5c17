#include "train/run_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "test_util.h"
#include "train/trainer.h"

namespace fp4 {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using testing::TempDir;

const std::filesystem::path kSource = FP4_SOURCE_DIR;

std::filesystem::path write_toml(const TempDir& dir, const std::string& name, const std::string& text) {
  const auto p = dir / name;
  std::ofstream(p) << text;
  return p;
}

// configs/runs/tiny.toml is documentation of the built-in defaults: every key must agree.
TEST(RunConfig, TinyTomlEqualsTheDefaults) {
  const auto from_file = load_run_config({kSource / "configs/runs/tiny.toml"});
  EXPECT_EQ(to_json(from_file), to_json(default_run_config()));
}

// Each configs/models/<preset>.toml states its preset's values exactly.
TEST(RunConfig, ModelTomlsMatchThePresets) {
  for (const auto& name : model_preset_names()) {
    const auto path = kSource / "configs/models" / (name + ".toml");
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    RunConfig expected = default_run_config();
    expected.model_preset = name;
    expected.model = model_preset(name);
    EXPECT_EQ(to_json(load_run_config({path}))["model"], to_json(expected)["model"]) << name;
  }
}

TEST(RunConfig, GpuRunConfigsLoad) {
  for (const char* name : {"olmo2-30m", "olmo2-70m"}) {
    const auto cfg = load_run_config({kSource / "configs/runs" / (std::string(name) + ".toml")});
    EXPECT_EQ(cfg.model.name, name);
    EXPECT_EQ(cfg.train.device, "cuda");
    EXPECT_EQ(cfg.data.batch * cfg.data.seq, 16 * 2048);
    EXPECT_EQ(cfg.model.vocab_real, 50257);
  }
}

TEST(RunConfig, UnknownKeyNamesFileLineAndSuggestion) {
  TempDir dir;
  const auto p = write_toml(dir, "x.toml", "[optim]\nlr = 1e-3\nbetaa = 0.9\n");
  const std::string msg = error_of([&] { load_run_config({p}); });
  EXPECT_THAT(msg, HasSubstr(p.string() + ":3: unknown key 'optim.betaa' (did you mean 'optim.beta1'?)"));
  const auto q = write_toml(dir, "y.toml", "[optimm]\nlr = 1\n");
  EXPECT_THAT(error_of([&] { load_run_config({q}); }),
              HasSubstr("unknown section 'optimm' (did you mean 'optim'?)"));
  const auto r = write_toml(dir, "z.toml", "[train]\ncompletely_unrelated_name = 1\n");
  const std::string m3 = error_of([&] { load_run_config({r}); });
  EXPECT_THAT(m3, HasSubstr("unknown key 'train.completely_unrelated_name'"));
  EXPECT_THAT(m3, ::testing::Not(HasSubstr("did you mean")));
  const auto s = write_toml(dir, "top.toml", "lr = 1\n");
  EXPECT_THAT(error_of([&] { load_run_config({s}); }), HasSubstr("unknown section 'lr'"));
}

TEST(RunConfig, WrongTypesAreErrors) {
  TempDir dir;
  EXPECT_THAT(error_of([&] { load_run_config({write_toml(dir, "a.toml", "[data]\nbatch = \"16\"\n")}); }),
              HasSubstr("a.toml:2: 'data.batch' expects an integer, got string \"16\""));
  EXPECT_THAT(error_of([&] { load_run_config({write_toml(dir, "b.toml", "[data]\nbatch = 16.5\n")}); }),
              HasSubstr("'data.batch' expects an integer"));
  EXPECT_THAT(error_of([&] { load_run_config({write_toml(dir, "c.toml", "[optim]\nlr = true\n")}); }),
              HasSubstr("'optim.lr' expects a number, got boolean true"));
  EXPECT_THAT(error_of([&] { load_run_config({write_toml(dir, "d.toml", "[optim]\nschedule = 3\n")}); }),
              HasSubstr("'optim.schedule' expects a string"));
  EXPECT_THAT(error_of([&] { load_run_config({write_toml(dir, "e.toml", "[train]\nseed = -1\n")}); }),
              HasSubstr("'train.seed' must not be negative"));
  EXPECT_THAT(error_of([&] { load_run_config({write_toml(dir, "f.toml", "[data]\nbatch = [1]\n")}); }),
              HasSubstr("'data.batch' expects an integer, got a array"));
  EXPECT_THAT(error_of([&] { load_run_config({write_toml(dir, "g.toml", "[data\n")}); }),
              HasSubstr("g.toml:1: invalid TOML"));
  EXPECT_THAT(error_of([&] { load_run_config({dir / "absent.toml"}); }),
              HasSubstr("absent.toml: config file not found"));
  // Whole numbers written as floats are accepted for integer keys (5e7 tokens).
  const auto ok = load_run_config({write_toml(dir, "h.toml", "[optim]\ntotal_tokens = 4.096e6\n")});
  EXPECT_EQ(ok.optim.total_tokens, 4096000);
  // Integers are accepted for float keys.
  EXPECT_EQ(load_run_config({write_toml(dir, "i.toml", "[optim]\nlr = 1\n")}).optim.lr, 1.0);
}

TEST(RunConfig, OverridesAreTypedAndWin) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  const int batch = static_cast<int>(rng() % 64 + 1);
  const double lr = std::uniform_real_distribution<double>(1e-5, 1e-2)(rng);
  const auto p = write_toml(dir, "a.toml", "[data]\nbatch = 3\n[optim]\nlr = 0.5\n");
  char lr_text[64];
  std::snprintf(lr_text, sizeof lr_text, "%.17g", lr);
  const auto cfg =
      load_run_config({p}, {"data.batch=" + std::to_string(batch), std::string("optim.lr=") + lr_text,
                            "train.out_dir=\"runs/quoted\"", "optim.schedule=wsd"});
  EXPECT_EQ(cfg.data.batch, batch);
  EXPECT_EQ(cfg.optim.lr, lr);
  EXPECT_EQ(cfg.train.out_dir, "runs/quoted");
  EXPECT_EQ(cfg.optim.schedule, "wsd");
  EXPECT_THAT(error_of([&] { load_run_config({}, {"data.batch=many"}); }),
              HasSubstr("--set data.batch=many: 'data.batch' expects an integer, got 'many'"));
  EXPECT_THAT(error_of([&] { load_run_config({}, {"optim.lr="}); }), HasSubstr("expects a number"));
  EXPECT_THAT(error_of([&] { load_run_config({}, {"optim.lrr=1"}); }),
              HasSubstr("--set optim.lrr=1: unknown key 'optim.lrr' (did you mean 'optim.lr'?)"));
  EXPECT_THAT(error_of([&] { load_run_config({}, {"optim.lr"}); }), HasSubstr("expected section.key=value"));
  EXPECT_THAT(error_of([&] { load_run_config({}, {"train.device=tpu"}); }),
              HasSubstr("train.device must be cpu or cuda, got 'tpu'"));
  EXPECT_THAT(error_of([&] { load_run_config({}, {"data.seq=100000"}); }),
              HasSubstr("data.seq 100000 exceeds model.max_seq_len 256"));
}

// A preset named anywhere is the base; explicit [model] fields refine it whatever their order.
TEST(RunConfig, ModelPresetThenExplicitFields) {
  TempDir dir;
  const auto p = write_toml(dir, "m.toml", "[model]\nn_layers = 3\npreset = \"olmo2-30m\"\n");
  const auto cfg = load_run_config({p});
  EXPECT_EQ(cfg.model.n_layers, 3);
  EXPECT_EQ(cfg.model.d_model, 384);
  const auto cfg2 = load_run_config({p}, {"model.preset=olmo2-70m"});
  EXPECT_EQ(cfg2.model.d_model, 512);
  EXPECT_EQ(cfg2.model.n_layers, 3);
  EXPECT_THAT(error_of([&] { load_run_config({}, {"model.preset=olmo2-7b"}); }),
              HasSubstr("unknown model preset 'olmo2-7b'"));
  EXPECT_THAT(error_of([&] { load_run_config({}, {"model.n_heads=3"}); }), HasSubstr("[model]"));
}

TEST(RunConfig, LaterFilesOverrideEarlierOnes) {
  TempDir dir;
  const auto a = write_toml(dir, "a.toml", "[data]\nbatch = 5\nseq = 64\n");
  const auto b = write_toml(dir, "b.toml", "[data]\nbatch = 7\n");
  const auto cfg = load_run_config({a, b});
  EXPECT_EQ(cfg.data.batch, 7);
  EXPECT_EQ(cfg.data.seq, 64);
}

TEST(RunConfig, RecipeOverridesKeepOrderAndTomlText) {
  TempDir dir;
  const auto p = write_toml(dir, "r.toml",
                            "[recipe]\nname = \"nvidia-nvfp4\"\n[recipe.overrides]\nbf16_layers = [0, -1]\n"
                            "\"linear.q2.block\" = \"16x16\"\n");
  const auto cfg = load_run_config({p}, {"recipe.overrides.optimizer=adamw"});
  EXPECT_EQ(cfg.recipe.name, "nvidia-nvfp4");
  ASSERT_EQ(cfg.recipe.overrides.size(), 3u);
  EXPECT_EQ(cfg.recipe.overrides[0].first, "bf16_layers");
  EXPECT_EQ(cfg.recipe.overrides[0].second, "[ 0, -1 ]");
  EXPECT_EQ(cfg.recipe.overrides[1].first, "linear.q2.block");
  EXPECT_EQ(cfg.recipe.overrides[1].second, "16x16");
  EXPECT_EQ(cfg.recipe.overrides[2], (std::pair<std::string, std::string>{"optimizer", "adamw"}));
}

TEST(RunConfig, JsonRoundTripIsExact) {
  std::mt19937_64 rng(std::random_device{}());
  const double lr = std::uniform_real_distribution<double>(1e-6, 1e-2)(rng);
  char lr_text[64];
  std::snprintf(lr_text, sizeof lr_text, "%.17g", lr);
  const auto cfg = load_run_config({}, {std::string("optim.lr=") + lr_text, "model.preset=olmo2-30m",
                                        "model.n_layers=" + std::to_string(rng() % 8 + 1), "data.seq=512",
                                        "recipe.overrides.bf16_layers=[0]", "model.rope_theta=12345.5"});
  const auto back = run_config_from_json(to_json(cfg), "stored");
  EXPECT_EQ(to_json(back), to_json(cfg));
  EXPECT_EQ(back.optim.lr, lr);
  EXPECT_EQ(config_hash(back), config_hash(cfg));
  // Float fields are stored as their shortest decimal and still come back bit for bit.
  std::uniform_real_distribution<float> f(1e-7f, 1.0f);
  RunConfig r = cfg;
  for (int i = 0; i < 2000; ++i) {
    r.model.init_std = f(rng);
    r.model.norm_eps = f(rng) * 1e-3f;
    const auto b = run_config_from_json(to_json(r), "stored");
    ASSERT_EQ(b.model.init_std, r.model.init_std);
    ASSERT_EQ(b.model.norm_eps, r.model.norm_eps);
  }
  EXPECT_EQ(to_json(default_run_config())["model"]["init_std"].dump(), "0.02");
  auto j = to_json(cfg);
  j["optim"]["lrr"] = 1;
  EXPECT_THAT(error_of([&] { run_config_from_json(j, "trainer.json"); }),
              HasSubstr("trainer.json: unknown key 'optim.lrr'"));
}

TEST(RunConfig, IdentityIgnoresCadenceButNotTraining) {
  const auto a = load_run_config({}, {});
  const auto b = load_run_config({}, {"train.steps=1000", "optim.total_steps=400", "train.log_every=1",
                                      "train.out_dir=elsewhere", "train.eval_every=7"});
  EXPECT_EQ(config_hash(a), config_hash(b));
  EXPECT_TRUE(identity_differences(a, b).empty());
  // Extending train.steps without pinning the schedule stretches the schedule: a different run.
  const auto c = load_run_config({}, {"train.steps=1000"});
  EXPECT_NE(config_hash(a), config_hash(c));
  EXPECT_THAT(identity_differences(a, c), ::testing::ElementsAre("optim.schedule_steps: 400 -> 1000"));
  const auto d = load_run_config({}, {"optim.beta2=0.99", "train.seed=9"});
  EXPECT_EQ(identity_differences(a, d).size(), 2u);
}

// dist.overlap picks how the gradients travel, not what they sum to: a resumed run may change it.
TEST(RunConfig, DistOverlapIsABooleanOutsideTheIdentity) {
  const auto a = load_run_config({}, {});
  EXPECT_TRUE(a.dist.overlap);
  const auto b = load_run_config({}, {"dist.overlap=false"});
  EXPECT_FALSE(b.dist.overlap);
  EXPECT_EQ(config_hash(a), config_hash(b));
  EXPECT_FALSE(run_config_from_json(to_json(b), "trainer.json").dist.overlap);
  TempDir dir;
  EXPECT_FALSE(load_run_config({write_toml(dir, "a.toml", "[dist]\noverlap = false\n")}).dist.overlap);
  EXPECT_THAT(error_of([&] { load_run_config({}, {"dist.overlap=1"}); }), HasSubstr("dist.overlap"));
  EXPECT_THAT(error_of([&] { load_run_config({}, {"dist.overlapp=true"}); }),
              HasSubstr("did you mean 'dist.overlap'"));
}

TEST(RunConfig, ScheduleLength) {
  auto cfg = load_run_config({}, {"optim.total_tokens=10000", "optim.warmup=2"});
  EXPECT_EQ(cfg.schedule_steps(), (10000 + 2047) / 2048);
  cfg = load_run_config({}, {"optim.total_steps=77", "optim.total_tokens=10000", "optim.warmup=5"});
  EXPECT_EQ(cfg.schedule_steps(), 77);
  EXPECT_THAT(error_of([&] { load_run_config({}, {"optim.total_steps=10"}); }),
              HasSubstr("optim.warmup 20 is longer than the schedule (10 steps)"));
}

TEST(RunConfig, KeysAreUniqueAndDotted) {
  auto keys = run_config_keys();
  for (const auto& k : keys) EXPECT_NE(k.find('.'), std::string::npos) << k;
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end());
}

}  // namespace
}  // namespace fp4

namespace fp4 {
namespace {

// `--recipe tetrajet-v2-base --set linear.q2.block=16x16` reaches the recipe (where the combination is then
// validated), exactly as the long form recipe.overrides.linear.q2.block does.
TEST(RunConfig, RecipeKeysNeedNoPrefixOnTheCommandLine) {
  EXPECT_EQ(expand_recipe_shorthand("linear.q2.block=16x16"), "recipe.overrides.linear.q2.block=16x16");
  EXPECT_EQ(expand_recipe_shorthand("bf16_layers=[0,-1]"), "recipe.overrides.bf16_layers=[0,-1]");
  EXPECT_EQ(expand_recipe_shorthand("optim.lr=3e-4"), "optim.lr=3e-4");
  // Every recipe section the docs name works without the prefix; run sections of similar names do not move.
  for (const char* a : {"optimizer=q-adamw", "osci_reset.enabled=true", "out_control.ratio=0.2",
                        "attention.q_attn=true", "lora_svd.rank=8"})
    EXPECT_EQ(expand_recipe_shorthand(a), std::string("recipe.overrides.") + a);
  EXPECT_EQ(expand_recipe_shorthand("optim.warmup=10"), "optim.warmup=10");
  EXPECT_EQ(expand_recipe_shorthand("train.steps=5"), "train.steps=5");
  for (const char* a :
       {"optimizer=q-adamw", "attention.q_attn=true", "lora_svd.rank=8", "lora_svd.enabled=true"}) {
    const RunConfig c = load_run_config({}, {"recipe.name=tetrajet-v2-base", expand_recipe_shorthand(a)});
    EXPECT_NO_THROW(load_run_recipe(c.recipe)) << a;
  }
  const RunConfig cfg = load_run_config(
      {}, {"recipe.name=tetrajet-v2-base", expand_recipe_shorthand("linear.q3.sr_headroom=true")});
  ASSERT_EQ(cfg.recipe.overrides.size(), 1u);
  EXPECT_EQ(cfg.recipe.overrides[0].first, "linear.q3.sr_headroom");
}

}  // namespace
}  // namespace fp4

namespace fp4 {
namespace {

// Values beyond what the engine can hold are refused naming the field and the accepted range, never
// truncated, wrapped or left to overflow later (the schedule length, the token counter, tensor sizes).
TEST(RunConfigRanges, HugeAndNonFiniteValuesAreRefusedNamingTheField) {
  const auto refused = [](const std::string& set, const std::string& expected) {
    const std::string msg = testing::error_of([&] { load_run_config({}, {set}); });
    EXPECT_THAT(msg, HasSubstr(expected)) << set;
  };
  refused("model.n_layers=2147483647", "model.n_layers must be at most 1024");
  refused("model.d_ff=2147483647", "model.d_ff must be at most 262144");
  refused("model.d_model=2147483647", "[model]");  // divisibility by n_heads is checked first
  refused("model.vocab_size=2147483647", "model.vocab_size must be at most 16777216");
  refused("model.max_seq_len=2147483647", "model.max_seq_len must be at most 1048576");
  refused("model.vocab_size=4294967296", "'model.vocab_size' is out of range");  // 2^32 does not wrap to 0
  refused("model.rope_theta=1e300", "'model.rope_theta' is out of range");
  refused("data.batch=2147483647", "data.batch must be in [1, 1048576]");
  refused("data.grad_accum=2147483647", "data.grad_accum must be in [1, 1048576]");
  refused("optim.eps=inf", "optim.eps must be in (0, 1]");
  refused("optim.eps=1e300", "optim.eps must be in (0, 1]");
  refused("optim.eps=nan", "optim.eps must be in (0, 1]");
  refused("optim.lr=1e39", "optim.lr must be a positive finite number");
  refused("optim.weight_decay=inf", "optim.weight_decay must be a finite number");
  refused("optim.total_tokens=9223372036854775807", "optim.total_tokens must be in [0, 4611686018427387904]");
  refused("optim.total_steps=9223372036854775807", "optim.total_steps must be in [0, 1000000000000]");
  refused("train.steps=9223372036854775807", "train.steps must be in [1, 1000000000000]");
  refused("optim.warmup=9223372036854775807", "optim.warmup must be in [0, 1000000000000]");
  refused("train.seed=-1", "'train.seed' must not be negative");
  refused("train.seed=18446744073709551616", "'train.seed' expects an integer");
  // A token budget near the limit rounds up without overflow: 2^62 tokens / 2048 per step = 2^51 steps.
  const std::string msg =
      testing::error_of([&] { load_run_config({}, {"optim.total_tokens=4611686018427387904"}); });
  EXPECT_THAT(msg, HasSubstr("makes a schedule of 2251799813685248 steps"));
  // A budget of a partial step rounds up (2048 tokens per step).
  EXPECT_EQ(load_run_config({}, {"optim.total_tokens=40961"}).schedule_steps(), 21);
}

}  // namespace
}  // namespace fp4
