// Learning-rate schedules as pure functions of the optimizer step (0-based: step s is the (s+1)-th
// update), so a resumed run needs only the step counter.
//   warm-up (all kinds): lr = peak * (s + 1) / warmup_steps for s < warmup_steps
//   constant: peak after the warm-up
//   cosine (OLMo): from peak at s = warmup to floor at s = total_steps, floor afterwards
//   wsd: peak until total_steps - decay_steps, then linear or 1-sqrt decay to floor at total_steps
// floor = final_ratio * peak. Within a decay phase the progress is p = (s - start) / length.
#pragma once

#include <cstdint>
#include <string>

namespace fp4 {

enum class ScheduleKind : uint8_t { kConstant, kCosine, kWsd };
enum class DecayShape : uint8_t { kLinear, kOneMinusSqrt };

struct LrSchedule {
  ScheduleKind kind = ScheduleKind::kCosine;
  double peak_lr = 1e-3;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;                       // cosine and wsd: the step at which the floor is reached
  double final_ratio = 0.1;                      // floor / peak
  int64_t decay_steps = 0;                       // wsd only
  DecayShape decay_shape = DecayShape::kLinear;  // wsd only
};

double lr_at(const LrSchedule& schedule, int64_t step);

// Throws fp4::Error naming the field that makes the schedule meaningless.
void validate(const LrSchedule& schedule);

std::string to_string(ScheduleKind kind);  // "constant", "cosine", "wsd"
std::string to_string(DecayShape shape);   // "linear", "1-sqrt"
ScheduleKind parse_schedule_kind(const std::string& s, const std::string& field);
DecayShape parse_decay_shape(const std::string& s, const std::string& field);

}  // namespace fp4
