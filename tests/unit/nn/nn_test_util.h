// Helpers shared by the nn tests: Gaussian test data, an enabled OutControl configuration.
#pragma once

#include <random>
#include <vector>

#include "recipe/recipe.h"

namespace fp4::testing {

inline std::vector<float> gaussian(size_t n, std::mt19937& rng, float std) {
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// OutControl switched on, calibrating `steps` steps from `start`.
inline OutControlConfig calib_config(int start, int steps, int round_to, double ratio) {
  OutControlConfig c;
  c.enabled = true;
  c.calib_start = start;
  c.calib_steps = steps;
  c.round_to = round_to;
  c.ratio = ratio;
  return c;
}

}  // namespace fp4::testing
