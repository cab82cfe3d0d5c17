#include "train/engine_factory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_util.h"

namespace fp4 {
namespace {

TEST(EngineFactory, BuildsTheConfiguredModelFromTheSeed) {
  RunConfig c = default_run_config();
  c.model = testing::small_model();
  c.train.seed = 7;
  auto a = make_engine(c, Recipe{});
  EXPECT_EQ(a->device_name().substr(0, 3), "cpu");
  EXPECT_EQ(a->config().d_model, c.model.d_model);
  auto b = make_engine(c, Recipe{});
  c.train.seed = 8;
  auto other = make_engine(c, Recipe{});
  const auto p = a->parameters().front();
  std::vector<float> va(static_cast<size_t>(p.numel())), vb(va.size()), vo(va.size());
  a->read_parameter(p.name, va);
  b->read_parameter(p.name, vb);
  other->read_parameter(p.name, vo);
  EXPECT_EQ(va, vb);
  EXPECT_NE(va, vo);
}

TEST(EngineFactory, CudaWithoutTheCudaEngineIsAClearError) {
  RunConfig c = default_run_config();
  c.model = testing::small_model();
  c.train.device = "cuda";
  EXPECT_THAT(testing::error_of([&] { make_engine(c, Recipe{}); }), ::testing::HasSubstr("CUDA"));
  c.train.device = "tpu";
  EXPECT_THAT(testing::error_of([&] { make_engine(c, Recipe{}); }), ::testing::HasSubstr("cpu or cuda"));
}

}  // namespace
}  // namespace fp4
