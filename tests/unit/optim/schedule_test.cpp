#include "optim/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace fp4 {
namespace {

TEST(Schedule, CosineWarmsUpDecaysToTenPercentThenStaysConstant) {
  LrSchedule s;
  s.kind = ScheduleKind::kCosine;
  s.peak_lr = 4e-4;
  s.warmup_steps = 100;
  s.total_steps = 1100;
  EXPECT_DOUBLE_EQ(lr_at(s, 0), 4e-6);
  EXPECT_DOUBLE_EQ(lr_at(s, 49), 2e-4);
  EXPECT_DOUBLE_EQ(lr_at(s, 99), 4e-4);
  EXPECT_DOUBLE_EQ(lr_at(s, 100), 4e-4);
  EXPECT_NEAR(lr_at(s, 600), 0.5 * (4e-4 + 4e-5), 1e-15);  // half way: the mean of peak and floor
  EXPECT_NEAR(lr_at(s, 350), 4e-5 + 3.6e-4 * 0.5 * (1 + std::cos(M_PI / 4)), 1e-15);
  EXPECT_DOUBLE_EQ(lr_at(s, 1100), 4e-5);
  EXPECT_DOUBLE_EQ(lr_at(s, 5000), 4e-5);
  for (int64_t step = 101; step < 1100; ++step) EXPECT_LT(lr_at(s, step), lr_at(s, step - 1));
}

TEST(Schedule, WsdHoldsThenDecaysLinearlyOrOneMinusSqrt) {
  LrSchedule s;
  s.kind = ScheduleKind::kWsd;
  s.peak_lr = 1e-3;
  s.warmup_steps = 10;
  s.total_steps = 110;
  s.decay_steps = 40;
  s.final_ratio = 0.0;
  EXPECT_DOUBLE_EQ(lr_at(s, 4), 5e-4);
  EXPECT_DOUBLE_EQ(lr_at(s, 10), 1e-3);
  EXPECT_DOUBLE_EQ(lr_at(s, 69), 1e-3);
  EXPECT_DOUBLE_EQ(lr_at(s, 70), 1e-3);
  EXPECT_NEAR(lr_at(s, 80), 0.75e-3, 1e-15);
  EXPECT_NEAR(lr_at(s, 90), 0.5e-3, 1e-15);
  EXPECT_DOUBLE_EQ(lr_at(s, 110), 0.0);
  s.decay_shape = DecayShape::kOneMinusSqrt;
  s.final_ratio = 0.1;
  EXPECT_NEAR(lr_at(s, 80), 1e-4 + 9e-4 * 0.5, 1e-15);  // p = 1/4, 1 - sqrt(p) = 1/2
  EXPECT_NEAR(lr_at(s, 109), 1e-4 + 9e-4 * (1 - std::sqrt(39.0 / 40)), 1e-15);
  EXPECT_DOUBLE_EQ(lr_at(s, 200), 1e-4);
}

TEST(Schedule, ConstantAfterWarmup) {
  LrSchedule s;
  s.kind = ScheduleKind::kConstant;
  s.peak_lr = 3e-4;
  s.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(lr_at(s, 0), 3e-4);
  EXPECT_DOUBLE_EQ(lr_at(s, 123456), 3e-4);
  s.warmup_steps = 3;
  EXPECT_DOUBLE_EQ(lr_at(s, 0), 1e-4);
  EXPECT_DOUBLE_EQ(lr_at(s, 3), 3e-4);
}

TEST(Schedule, ValidationNamesTheField) {
  LrSchedule s;
  s.kind = ScheduleKind::kCosine;
  s.warmup_steps = 10;
  s.total_steps = 10;
  EXPECT_THROW(validate(s), Error);
  s.total_steps = 11;
  EXPECT_NO_THROW(validate(s));
  s.kind = ScheduleKind::kWsd;
  s.decay_steps = 5;
  try {
    validate(s);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decay_steps"), std::string::npos) << e.what();
  }
  s.final_ratio = 1.5;
  EXPECT_THROW(validate(s), Error);
  EXPECT_THROW(lr_at(s, -1), Error);
}

TEST(Schedule, ParsesNames) {
  EXPECT_EQ(parse_schedule_kind("wsd", "lr.schedule"), ScheduleKind::kWsd);
  EXPECT_EQ(parse_decay_shape("1-sqrt", "lr.decay"), DecayShape::kOneMinusSqrt);
  EXPECT_EQ(to_string(parse_schedule_kind("cosine", "x")), "cosine");
  try {
    parse_schedule_kind("linear", "lr.schedule");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lr.schedule"), std::string::npos);
  }
}

}  // namespace
}  // namespace fp4
