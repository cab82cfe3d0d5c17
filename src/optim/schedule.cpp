#include "optim/schedule.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace fp4 {

double lr_at(const LrSchedule& s, int64_t step) {
  FP4_CHECK(step >= 0, "lr schedule: negative step ", step);
  if (step < s.warmup_steps)
    return s.peak_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  const double floor = s.final_ratio * s.peak_lr;
  switch (s.kind) {
    case ScheduleKind::kConstant:
      return s.peak_lr;
    case ScheduleKind::kCosine: {
      if (step >= s.total_steps) return floor;
      const double p =
          static_cast<double>(step - s.warmup_steps) / static_cast<double>(s.total_steps - s.warmup_steps);
      return floor + (s.peak_lr - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
    }
    case ScheduleKind::kWsd: {
      const int64_t start = s.total_steps - s.decay_steps;
      if (step < start) return s.peak_lr;
      if (step >= s.total_steps) return floor;
      const double p = static_cast<double>(step - start) / static_cast<double>(s.decay_steps);
      const double frac = s.decay_shape == DecayShape::kLinear ? 1.0 - p : 1.0 - std::sqrt(p);
      return floor + (s.peak_lr - floor) * frac;
    }
  }
  FP4_THROW("lr schedule: unknown kind ", static_cast<int>(s.kind));
}

void validate(const LrSchedule& s) {
  FP4_CHECK(std::isfinite(s.peak_lr) && s.peak_lr >= 0.0,
            "lr schedule: peak_lr must be finite and >= 0, got ", s.peak_lr);
  FP4_CHECK(s.warmup_steps >= 0, "lr schedule: warmup_steps must be >= 0, got ", s.warmup_steps);
  FP4_CHECK(s.final_ratio >= 0.0 && s.final_ratio <= 1.0, "lr schedule: final_ratio must be in [0, 1], got ",
            s.final_ratio);
  if (s.kind == ScheduleKind::kCosine)
    FP4_CHECK(s.total_steps > s.warmup_steps, "lr schedule (cosine): total_steps ", s.total_steps,
              " must exceed warmup_steps ", s.warmup_steps);
  if (s.kind == ScheduleKind::kWsd) {
    FP4_CHECK(s.decay_steps > 0, "lr schedule (wsd): decay_steps must be positive, got ", s.decay_steps);
    FP4_CHECK(s.total_steps - s.decay_steps >= s.warmup_steps, "lr schedule (wsd): warmup_steps ",
              s.warmup_steps, " + decay_steps ", s.decay_steps, " exceed total_steps ", s.total_steps);
  }
}

std::string to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kConstant:
      return "constant";
    case ScheduleKind::kCosine:
      return "cosine";
    case ScheduleKind::kWsd:
      return "wsd";
  }
  return "?";
}

std::string to_string(DecayShape shape) {
  return shape == DecayShape::kLinear ? "linear" : "1-sqrt";
}

ScheduleKind parse_schedule_kind(const std::string& s, const std::string& field) {
  if (s == "constant") return ScheduleKind::kConstant;
  if (s == "cosine") return ScheduleKind::kCosine;
  if (s == "wsd") return ScheduleKind::kWsd;
  FP4_THROW(field, ": unknown schedule '", s, "' (expected constant, cosine or wsd)");
}

DecayShape parse_decay_shape(const std::string& s, const std::string& field) {
  if (s == "linear") return DecayShape::kLinear;
  if (s == "1-sqrt") return DecayShape::kOneMinusSqrt;
  FP4_THROW(field, ": unknown decay shape '", s, "' (expected linear or 1-sqrt)");
}

}  // namespace fp4
