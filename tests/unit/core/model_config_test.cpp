#include "core/model_config.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace fp4 {
namespace {

TEST(ModelConfig, PresetsHaveTheSpecifiedShapes) {
  const auto names = model_preset_names();
  ASSERT_EQ(names.size(), 6u);
  for (const auto& n : names) {
    const ModelConfig c = model_preset(n);
    EXPECT_EQ(c.name, n);
    EXPECT_NO_THROW(validate(c));
    EXPECT_EQ(c.d_model % 128, 0) << n;  // block128 NVFP4 scaling along every K dimension
    EXPECT_EQ(c.d_ff % 128, 0) << n;
    EXPECT_EQ(c.vocab_size % 64, 0) << n;
  }
  const ModelConfig tiny = model_preset("tiny");
  EXPECT_EQ(tiny.vocab_real, 257);
  EXPECT_EQ(tiny.vocab_size, 320);
  EXPECT_EQ(tiny.n_layers, 2);
  const ModelConfig m150 = model_preset("olmo2-150m");
  EXPECT_EQ(m150.n_layers, 12);
  EXPECT_EQ(m150.d_model, 768);
  EXPECT_EQ(m150.n_heads, 12);
  EXPECT_EQ(m150.d_ff, 1536);
  EXPECT_EQ(m150.vocab_real, 50257);
  EXPECT_EQ(m150.vocab_size, 50304);
  EXPECT_EQ(m150.rope_theta, 500000.0f);
  EXPECT_EQ(m150.norm_eps, 1e-6f);
  EXPECT_EQ(model_preset("olmo2-370m").d_ff, 4096);
  EXPECT_EQ(model_preset("olmo2-1b").d_model, 2048);
}

TEST(ModelConfig, ParameterCount) {
  const ModelConfig c = model_preset("olmo2-150m");
  // per block: 4 d^2 attention + 3 d ff MLP + 4 d norm weights; plus embedding, head, final norm
  const int64_t d = 768, ff = 1536, v = 50304;
  EXPECT_EQ(c.parameter_count(), 2 * v * d + 12 * (4 * d * d + 3 * d * ff + 4 * d) + d);
}

TEST(ModelConfig, UnknownPresetListsTheKnownOnes) {
  try {
    model_preset("olmo2-7b");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("olmo2-7b"), std::string::npos);
    EXPECT_NE(msg.find("olmo2-370m"), std::string::npos);
  }
}

TEST(ModelConfig, ValidateNamesTheBadField) {
  auto expect_error = [](ModelConfig c, const std::string& field) {
    try {
      validate(c);
      ADD_FAILURE() << "no error for " << field;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  ModelConfig c = model_preset("tiny");
  c.n_heads = 3;  // 128 % 3 != 0
  expect_error(c, "n_heads");
  c = model_preset("tiny");
  c.n_heads = 128;  // head_dim 1: odd
  expect_error(c, "head_dim");
  c = model_preset("tiny");
  c.vocab_size = 200;
  expect_error(c, "vocab_size");
  c = model_preset("tiny");
  c.n_layers = 0;
  expect_error(c, "n_layers");
  c = model_preset("tiny");
  c.norm_eps = 0.0f;
  expect_error(c, "norm_eps");
  c = model_preset("tiny");
  c.max_seq_len = -1;
  expect_error(c, "max_seq_len");
}

}  // namespace
}  // namespace fp4
